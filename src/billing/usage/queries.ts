/**
 * Reads of the usage context: the subscriptions it records against (the contract's columns of
 * `billing.subscriptions`), records by identifier (dedup), and the aggregate of a range — from the
 * hourly rollups for the whole hours inside it, and from the raw records (through their index) for
 * the partial hours at its edges, aggregated in SQL. Never a scan of a period's raw records.
 */
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option, Schema } from "effect"
import { textArray } from "../../db/Sql.js"
import type { UsageRecordObject } from "./Api.js"
import {
  AGGREGATIONS,
  combine,
  emptyPartial,
  type LastValue,
  microsOf,
  numberOfMicros,
  type Partial,
  type SubscriptionView
} from "./decider.js"
import { hourOf, USAGE_DISTINCT, USAGE_HOURLY, USAGE_RECORDS } from "./projection.js"

const HOUR_MS = 3_600_000
const DAY_MS = 24 * HOUR_MS

const UsagePriceSchema = Schema.Struct({
  meter: Schema.String,
  aggregation: Schema.Literal(...AGGREGATIONS),
  unitAmount: Schema.Number,
  includedUnits: Schema.Number,
  uniqueKey: Schema.optional(Schema.NullOr(Schema.String))
})
const decodeUsagePrice = Schema.decodeUnknownOption(UsagePriceSchema)

const asDate = (v: Date | string): Date => (v instanceof Date ? v : new Date(v))

interface SubscriptionRow {
  readonly id: string
  readonly customerId: string
  readonly status: string
  readonly currency: string
  readonly currentPeriodStart: Date | string
  readonly currentPeriodEnd: Date | string
  readonly usage: unknown
  readonly usageClosedBefore: Date | string | null
  readonly testClockId: string | null
}

const toView = (row: SubscriptionRow): SubscriptionView => {
  const parsed = typeof row.usage === "string" ? JSON.parse(row.usage) : row.usage
  return {
    id: row.id,
    customerId: row.customerId,
    status: row.status,
    currency: row.currency,
    currentPeriodStart: asDate(row.currentPeriodStart),
    currentPeriodEnd: asDate(row.currentPeriodEnd),
    usage:
      parsed === null || parsed === undefined
        ? null
        : Option.getOrNull(
            Option.map(decodeUsagePrice(parsed), (u) => ({ ...u, uniqueKey: u.uniqueKey ?? null }))
          ),
    usageClosedBefore: row.usageClosedBefore === null ? null : asDate(row.usageClosedBefore),
    testClockId: row.testClockId
  }
}

const SUBSCRIPTION_COLUMNS = `id, customer_id AS "customerId", status, currency,
  current_period_start AS "currentPeriodStart", current_period_end AS "currentPeriodEnd", usage,
  usage_closed_before AS "usageClosedBefore", test_clock_id AS "testClockId"`

/**
 * Subscriptions by id; with `lock`, each row `FOR KEY SHARE` (the contract's locking rule: a renewal
 * closing a period waits for usage writes in flight, and they for it), in id order.
 */
export const selectSubscriptions = (
  sql: SqlClient.SqlClient,
  ids: ReadonlyArray<string>,
  options: { readonly lock: boolean }
): Effect.Effect<ReadonlyMap<string, SubscriptionView>, SqlError> =>
  ids.length === 0
    ? Effect.succeed(new Map())
    : Effect.map(
        sql<SubscriptionRow>`SELECT ${sql.literal(SUBSCRIPTION_COLUMNS)} FROM billing.subscriptions
          WHERE id = ANY(${textArray(sql, ids)}) ORDER BY id ${sql.literal(options.lock ? "FOR KEY SHARE" : "")}`,
        (rows) => new Map(rows.map((r) => [r.id, toView(r)]))
      )

/** Every subscription of some customers (to resolve `customerId` to its one metered subscription). */
export const subscriptionsOfCustomers = (
  sql: SqlClient.SqlClient,
  customerIds: ReadonlyArray<string>
): Effect.Effect<ReadonlyArray<SubscriptionView>, SqlError> =>
  customerIds.length === 0
    ? Effect.succeed([])
    : Effect.map(
        sql<SubscriptionRow>`SELECT ${sql.literal(SUBSCRIPTION_COLUMNS)} FROM billing.subscriptions
          WHERE customer_id = ANY(${textArray(sql, customerIds)}) ORDER BY id`,
        (rows) => rows.map(toView)
      )

interface RecordRow {
  readonly id: string
  readonly subscriptionId: string
  readonly customerId: string
  readonly meter: string
  readonly identifier: string
  readonly value: string
  readonly occurredAt: Date | string
  readonly properties: unknown
  readonly periodStart: Date | string
  readonly periodEnd: Date | string | null
  readonly createdAt: Date | string
}

const isRecordObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v)

export const recordObject = (row: RecordRow): UsageRecordObject => {
  const properties = typeof row.properties === "string" ? JSON.parse(row.properties) : row.properties
  return {
    object: "usage_record",
    id: row.id,
    subscriptionId: row.subscriptionId,
    customerId: row.customerId,
    meter: row.meter,
    identifier: row.identifier,
    value: numberOfMicros(microsOf(row.value)),
    timestamp: asDate(row.occurredAt),
    properties: isRecordObject(properties) ? properties : {},
    periodStart: asDate(row.periodStart),
    periodEnd: row.periodEnd === null ? null : asDate(row.periodEnd),
    createdAt: asDate(row.createdAt)
  }
}

/**
 * The records some (meter, identifier) pairs already hold, keyed `meter\u0000identifier`: through the
 * unique index (meters and identifiers as arrays, the pairs matched here).
 */
export const selectRecordsByIdentifier = (
  sql: SqlClient.SqlClient,
  keys: ReadonlyArray<{ readonly meter: string; readonly identifier: string }>
): Effect.Effect<ReadonlyMap<string, UsageRecordObject>, SqlError> => {
  if (keys.length === 0) return Effect.succeed(new Map())
  const wanted = new Set(keys.map((k) => identifierKey(k.meter, k.identifier)))
  const meters = [...new Set(keys.map((k) => k.meter))]
  const identifiers = [...new Set(keys.map((k) => k.identifier))]
  const only = keys.length === 1 ? keys[0] : undefined
  return Effect.map(
    sql<RecordRow>`SELECT u.id, u.subscription_id AS "subscriptionId", u.customer_id AS "customerId", u.meter,
        u.identifier, u.value::text AS value, u.occurred_at AS "occurredAt", u.properties,
        u.period_start AS "periodStart", u.period_end AS "periodEnd", u.created_at AS "createdAt"
      FROM ${sql(USAGE_RECORDS)} u
      WHERE ${
        only !== undefined
          ? sql`u.meter = ${only.meter} AND u.identifier = ${only.identifier}`
          : sql`u.meter = ANY(${textArray(sql, meters)}) AND u.identifier = ANY(${textArray(sql, identifiers)})`
      }`,
    (rows) =>
      new Map(
        rows
          .filter((r) => wanted.has(identifierKey(r.meter, r.identifier)))
          .map((r) => [identifierKey(r.meter, r.identifier), recordObject(r)])
      )
  )
}

export const identifierKey = (meter: string, identifier: string) => `${meter}\u0000${identifier}`

// --- Aggregating a range --------------------------------------------------------------------------------

/** A partial aggregate and the instant it is filed under (an hour's start, or an edge's first record). */
export interface TimedPartial {
  readonly at: number
  readonly partial: Partial
}

interface HourlyRow {
  readonly hour: Date | string
  readonly eventCount: string
  readonly sumValue: string
  readonly maxValue: string
  readonly lastValue: string
  readonly lastAt: Date | string
  readonly lastIdentifier: string
}

interface EdgeRow {
  readonly late: boolean
  readonly firstAt: Date | string
  readonly eventCount: string
  readonly sumValue: string
  readonly maxValue: string
  readonly uniques: ReadonlyArray<string> | string | null
}

interface LastRow {
  readonly value: string
  readonly at: Date | string
  readonly identifier: string
}

const pgTextArray = (v: ReadonlyArray<string> | string | null): ReadonlyArray<string> => {
  if (v === null) return []
  if (Array.isArray(v)) return v
  return [] // never: both drivers parse text[]; an unparsed literal counts nothing rather than guessing
}

const partialOfRow = (row: Omit<HourlyRow, "hour">, distinct: ReadonlySet<string>): Partial => ({
  count: Number(row.eventCount),
  sum: microsOf(row.sumValue),
  max: microsOf(row.maxValue),
  last: { micros: microsOf(row.lastValue), at: asDate(row.lastAt).getTime(), identifier: row.lastIdentifier },
  distinct
})

/**
 * The partial aggregates of a subscription's meter over [from, to): one per whole hour inside it
 * (rollups), one per partial edge hour (raw records through the index, aggregated in SQL). With
 * `distinct`, the distinct unique values too (unique_count).
 */
export const rangePartials = (
  sql: SqlClient.SqlClient,
  input: {
    readonly subscriptionId: string
    readonly meter: string
    readonly from: Date
    readonly to: Date
    readonly distinct: boolean
    /** Whether the last record matters (aggregation `last`). */
    readonly last: boolean
  }
): Effect.Effect<ReadonlyArray<TimedPartial>, SqlError> =>
  Effect.gen(function* () {
    const from = input.from.getTime()
    const to = input.to.getTime()
    if (to <= from) return []
    const ceilFrom = hourOf(from) === from ? from : hourOf(from) + HOUR_MS
    const c = Math.min(ceilFrom, to)
    const f = Math.max(hourOf(to), c)
    const out: Array<TimedPartial> = []
    const cDate = new Date(c)
    const fDate = new Date(f)
    if (c < f) {
      const hours =
        yield* sql<HourlyRow>`SELECT hour, event_count::text AS "eventCount", sum_value::text AS "sumValue",
          max_value::text AS "maxValue", last_value::text AS "lastValue", last_at AS "lastAt",
          last_identifier AS "lastIdentifier"
        FROM ${sql(USAGE_HOURLY)}
        WHERE subscription_id = ${input.subscriptionId} AND meter = ${input.meter}
          AND hour >= ${cDate} AND hour < ${fDate}`
      const distinctByHour = new Map<number, Set<string>>()
      if (input.distinct) {
        const values = yield* sql<{ readonly hour: Date | string; readonly value: string }>`SELECT hour, value
          FROM ${sql(USAGE_DISTINCT)}
          WHERE subscription_id = ${input.subscriptionId} AND meter = ${input.meter}
            AND hour >= ${cDate} AND hour < ${fDate}`
        for (const v of values) {
          const at = asDate(v.hour).getTime()
          const set = distinctByHour.get(at) ?? new Set<string>()
          set.add(v.value)
          distinctByHour.set(at, set)
        }
      }
      for (const h of hours) {
        const at = asDate(h.hour).getTime()
        out.push({ at, partial: partialOfRow(h, distinctByHour.get(at) ?? new Set()) })
      }
    }
    if (from < c || f < to) {
      const edgeRange = sql`subscription_id = ${input.subscriptionId} AND meter = ${input.meter}
          AND ((occurred_at >= ${input.from} AND occurred_at < ${cDate})
            OR (occurred_at >= ${fDate} AND occurred_at < ${input.to}))`
      const edges = yield* sql<EdgeRow>`SELECT occurred_at >= ${fDate} AS late, min(occurred_at) AS "firstAt",
          count(*)::text AS "eventCount", sum(value)::text AS "sumValue", max(value)::text AS "maxValue",
          ${input.distinct ? sql`array_agg(DISTINCT unique_value) FILTER (WHERE unique_value IS NOT NULL)` : sql`NULL::text[]`} AS uniques
        FROM ${sql(USAGE_RECORDS)}
        WHERE ${edgeRange}
        GROUP BY 1`
      // The last record of each edge (only `last` needs it): backwards through the index, one row each.
      const lasts = new Map<boolean, LastValue>()
      if (input.last) {
        for (const [late, lo, hi] of [
          [false, input.from, cDate],
          [true, fDate, input.to]
        ] as const) {
          if (lo.getTime() >= hi.getTime()) continue
          const rows = yield* sql<LastRow>`SELECT value::text AS value, occurred_at AS "at", identifier
            FROM ${sql(USAGE_RECORDS)}
            WHERE subscription_id = ${input.subscriptionId} AND meter = ${input.meter}
              AND occurred_at >= ${lo} AND occurred_at < ${hi}
            ORDER BY occurred_at DESC, identifier DESC LIMIT 1`
          const row = rows[0]
          if (row !== undefined)
            lasts.set(late, {
              micros: microsOf(row.value),
              at: asDate(row.at).getTime(),
              identifier: row.identifier
            })
        }
      }
      for (const e of edges) {
        out.push({
          at: asDate(e.firstAt).getTime(),
          partial: {
            count: Number(e.eventCount),
            sum: microsOf(e.sumValue),
            max: microsOf(e.maxValue),
            last: lasts.get(e.late) ?? null,
            distinct: new Set(pgTextArray(e.uniques))
          }
        })
      }
    }
    return out
  })

/** All partials as one. */
export const combineAll = (partials: ReadonlyArray<TimedPartial>): Partial =>
  partials.reduce((acc, p) => combine(acc, p.partial), emptyPartial)

export interface Bucket {
  readonly start: Date
  readonly end: Date
  readonly partial: Partial
}

/** The UTC hour or day buckets of [from, to) (clipped to it), each with its partials combined. */
export const bucketsOf = (
  groupBy: "hour" | "day",
  from: Date,
  to: Date,
  partials: ReadonlyArray<TimedPartial>
): ReadonlyArray<Bucket> => {
  const unit = groupBy === "hour" ? HOUR_MS : DAY_MS
  const floor = (ms: number) => Math.floor(ms / unit) * unit
  const byStart = new Map<number, Partial>()
  for (const p of partials) {
    const k = floor(p.at)
    byStart.set(k, combine(byStart.get(k) ?? emptyPartial, p.partial))
  }
  const out: Array<Bucket> = []
  for (let s = floor(from.getTime()); s < to.getTime(); s += unit) {
    out.push({
      start: new Date(Math.max(s, from.getTime())),
      end: new Date(Math.min(s + unit, to.getTime())),
      partial: byStart.get(s) ?? emptyPartial
    })
  }
  return out
}

/** How many buckets [from, to) has by `groupBy`. */
export const bucketCount = (groupBy: "hour" | "day", from: Date, to: Date): number => {
  const unit = groupBy === "hour" ? HOUR_MS : DAY_MS
  return Math.ceil(to.getTime() / unit) - Math.floor(from.getTime() / unit)
}
