/**
 * Reads of the usage context: the subscriptions it records against (the contract's columns of
 * `billing.subscriptions`), records by identifier (dedup), and the aggregate of a range — from the
 * hourly rollup for the whole hours inside it, the minute rollup for the whole minutes of its partial
 * edge hours, and the raw records (through their index) for the partial minutes at its very ends,
 * aggregated in SQL. Never a scan of a period's raw records.
 */
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option, Schema } from "effect"
import { textArray } from "../../db/Sql.js"
import { UsagePriceSchema } from "../contract.js"
import type { UsageRecordObject } from "./Api.js"
import {
  combine,
  emptyPartial,
  microsOf,
  numberOfMicros,
  type Partial,
  type SubscriptionView
} from "./decider.js"
import { HOUR_MS, MINUTE_MS, USAGE_DISTINCT, USAGE_RECORDS } from "./projection.js"

const DAY_MS = 24 * HOUR_MS

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
 * The statement of `selectRecordsByIdentifier` (a test reads its plan). Many keys: one primary-key
 * probe per key, whatever the table's statistics. The statement is named, so its plan is made once
 * per connection, often while the table is still small: a join was then planned as a hash join
 * over a full scan, and `meter = ANY(…) AND identifier = ANY(…)` as an index scan on the meter alone
 * with the identifiers as a filter — every record of the meter compared with each of 1,000
 * identifiers, per batch, as the table grew (bench:billing: three quarters of PostgreSQL's CPU under
 * batches). A LATERAL lookup of one row by the whole key is an index probe on any table.
 */
export const recordsByKeyStatement = (
  sql: SqlClient.SqlClient,
  keys: ReadonlyArray<{ readonly meter: string; readonly identifier: string }>
) => {
  const only = keys.length === 1 ? keys[0] : undefined
  const columns = sql`u.id, u.subscription_id AS "subscriptionId", u.customer_id AS "customerId", u.meter,
        u.identifier, u.value::text AS value, u.occurred_at AS "occurredAt", u.properties,
        u.period_start AS "periodStart", u.period_end AS "periodEnd", u.created_at AS "createdAt"`
  return only !== undefined
    ? sql<RecordRow>`SELECT ${columns} FROM ${sql(USAGE_RECORDS)} u
        WHERE u.meter = ${only.meter} AND u.identifier = ${only.identifier}`
    : sql<RecordRow>`SELECT r.* FROM jsonb_to_recordset(${JSON.stringify(keys)}::jsonb) AS k(meter text, identifier text)
        CROSS JOIN LATERAL (SELECT ${columns} FROM ${sql(USAGE_RECORDS)} u
          WHERE u.meter = k.meter AND u.identifier = k.identifier LIMIT 1) AS r`
}

/** The records some (meter, identifier) pairs already hold, keyed `meter\u0000identifier`. */
export const selectRecordsByIdentifier = (
  sql: SqlClient.SqlClient,
  keys: ReadonlyArray<{ readonly meter: string; readonly identifier: string }>
): Effect.Effect<ReadonlyMap<string, UsageRecordObject>, SqlError> =>
  keys.length === 0
    ? Effect.succeed(new Map())
    : Effect.map(
        recordsByKeyStatement(sql, keys),
        (rows) => new Map(rows.map((r) => [identifierKey(r.meter, r.identifier), recordObject(r)]))
      )

export const identifierKey = (meter: string, identifier: string) => `${meter}\u0000${identifier}`

// --- Aggregating a range --------------------------------------------------------------------------------

/** A partial aggregate and the instant it is filed under (an hour's start, or an edge's first record). */
export interface TimedPartial {
  readonly at: number
  readonly partial: Partial
}

/** A partial as the summary statement answers it: a rollup row (`piece` null) or a raw piece. */
interface PartialRow {
  readonly piece: number | string | null
  readonly at: Date | string
  readonly eventCount: string
  readonly sumValue: string
  readonly maxValue: string
  readonly lastValue: string | null
  readonly lastAt: Date | string | null
  readonly lastIdentifier: string | null
  readonly uniques: ReadonlyArray<string> | string | null
}

const pgTextArray = (v: ReadonlyArray<string> | string | null): ReadonlyArray<string> => {
  if (v === null) return []
  if (Array.isArray(v)) return v
  return [] // never: both drivers parse text[]; an unparsed literal counts nothing rather than guessing
}

/** A half-open range of instants (ms). */
export type Span = readonly [from: number, to: number]

/**
 * How a range [from, to) is read: the whole hours inside it from the hourly rollup; the whole
 * minutes of the partial hours at its ends from the minute rollup; the partial minutes at its very
 * ends from the raw records. Without `minutes` (unique_count: the minute rollup keeps no distinct
 * values) the partial hours are read raw. The pieces are disjoint and cover the range exactly.
 */
export const rangePieces = (
  from: number,
  to: number,
  minutes: boolean
): {
  readonly hours: Span | null
  readonly minutes: ReadonlyArray<Span>
  readonly raw: ReadonlyArray<Span>
} => {
  /** [from, to) as its whole `unit`s and the partial pieces at each end (empty pieces left out). */
  const split = (lo: number, hi: number, unit: number) => {
    const ceil = Math.min(Math.ceil(lo / unit) * unit, hi)
    const floor = Math.max(Math.floor(hi / unit) * unit, ceil)
    const edges: Array<Span> = []
    if (lo < ceil) edges.push([lo, ceil])
    if (floor < hi) edges.push([floor, hi])
    return { whole: ceil < floor ? ([ceil, floor] as Span) : null, edges }
  }
  if (to <= from) return { hours: null, minutes: [], raw: [] }
  const byHour = split(from, to, HOUR_MS)
  if (!minutes) return { hours: byHour.whole, minutes: [], raw: byHour.edges }
  const wholeMinutes: Array<Span> = []
  const raw: Array<Span> = []
  for (const [lo, hi] of byHour.edges) {
    const byMinute = split(lo, hi, MINUTE_MS)
    if (byMinute.whole !== null) wholeMinutes.push(byMinute.whole)
    raw.push(...byMinute.edges)
  }
  return { hours: byHour.whole, minutes: wholeMinutes, raw }
}

/**
 * The partial aggregates of a subscription's meter over [from, to) (see `rangePieces`): one per
 * rollup row (or, unless `perHour`, all rollup rows folded into one by PostgreSQL: a month is
 * ≤ 744 hourly rows node would otherwise parse, dates and decimals, on every summary), and one per
 * raw piece, aggregated in SQL. With `distinct`, the distinct unique values too (unique_count).
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
    /** Whether the caller buckets the partials by hour or day (each partial within one hour). */
    readonly perHour: boolean
  }
): Effect.Effect<ReadonlyArray<TimedPartial>, SqlError> =>
  Effect.gen(function* () {
    const pieces = rangePieces(input.from.getTime(), input.to.getTime(), !input.distinct)
    const out: Array<TimedPartial> = []
    const ofSubscription = sql`subscription_id = ${input.subscriptionId} AND meter = ${input.meter}`
    const between = (column: "hour" | "minute", [lo, hi]: Span) =>
      sql`${sql.literal(column)} >= ${new Date(lo)} AND ${sql.literal(column)} < ${new Date(hi)}`

    // ONE statement (migration 0030's function, whose plans are made once per connection): the rollup
    // rows of the whole hours and the whole minutes (per row, or folded into one), then one aggregate
    // per raw piece. A piece that is not there is a NULL range.
    const bounds = (span: Span | null | undefined) =>
      span === null || span === undefined ? [null, null] : [new Date(span[0]), new Date(span[1])]
    if (pieces.hours === null && pieces.minutes.length === 0 && pieces.raw.length === 0) return out
    if (pieces.minutes.length > 2 || pieces.raw.length > 2)
      return yield* Effect.dieMessage(
        `a range of more than two minute or raw pieces: ${JSON.stringify(pieces)}`
      )
    const [hoursFrom, hoursTo] = bounds(pieces.hours)
    const [minutes1From, minutes1To] = bounds(pieces.minutes[0])
    const [minutes2From, minutes2To] = bounds(pieces.minutes[1])
    const [raw1From, raw1To] = bounds(pieces.raw[0])
    const [raw2From, raw2To] = bounds(pieces.raw[1])
    const rows =
      yield* sql<PartialRow>`SELECT piece, at, event_count AS "eventCount", sum_value AS "sumValue",
        max_value AS "maxValue", last_value AS "lastValue", last_at AS "lastAt",
        last_identifier AS "lastIdentifier", uniques
      FROM billing.usage_partials(${input.subscriptionId}, ${input.meter},
        ${hoursFrom}::timestamptz, ${hoursTo}::timestamptz,
        ${minutes1From}::timestamptz, ${minutes1To}::timestamptz,
        ${minutes2From}::timestamptz, ${minutes2To}::timestamptz,
        ${raw1From}::timestamptz, ${raw1To}::timestamptz, ${raw2From}::timestamptz, ${raw2To}::timestamptz,
        ${input.perHour}::boolean, ${input.last}::boolean, ${input.distinct}::boolean)`

    // unique_count's distinct values of the whole hours (it reads no minute rows): per hour, or
    // (folded) all of them, for the one folded partial.
    const distinctByHour = new Map<number, Set<string>>()
    const allDistinct = new Set<string>()
    if (input.distinct && pieces.hours !== null) {
      const values = input.perHour
        ? yield* sql<{ readonly hour: Date | string | null; readonly value: string }>`SELECT hour, value
            FROM ${sql(USAGE_DISTINCT)} WHERE ${ofSubscription} AND ${between("hour", pieces.hours)}`
        : yield* sql<{ readonly hour: Date | string | null; readonly value: string }>`SELECT DISTINCT
              NULL AS hour, value
            FROM ${sql(USAGE_DISTINCT)} WHERE ${ofSubscription} AND ${between("hour", pieces.hours)}`
      for (const v of values) {
        if (v.hour === null) {
          allDistinct.add(v.value)
          continue
        }
        const at = asDate(v.hour).getTime()
        const set = distinctByHour.get(at) ?? new Set<string>()
        set.add(v.value)
        distinctByHour.set(at, set)
      }
    }
    for (const r of rows) {
      const at = asDate(r.at).getTime()
      const isRollup = r.piece === null
      out.push({
        at,
        partial: {
          count: Number(r.eventCount),
          sum: microsOf(r.sumValue),
          max: microsOf(r.maxValue),
          last:
            r.lastValue === null || r.lastAt === null || r.lastIdentifier === null
              ? null
              : {
                  micros: microsOf(r.lastValue),
                  at: asDate(r.lastAt).getTime(),
                  identifier: r.lastIdentifier
                },
          distinct: isRollup
            ? input.perHour
              ? (distinctByHour.get(at) ?? new Set())
              : allDistinct
            : new Set(pgTextArray(r.uniques))
        }
      })
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
