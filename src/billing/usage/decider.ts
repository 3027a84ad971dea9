/**
 * Usage, pure: the write's decider (one `usage.recorded` per record, on the write's stream), the rules a
 * record is checked against its subscription by (status, meter, the accepted time window, the closed
 * period), the period a timestamp falls in, and the aggregation arithmetic summaries and invoices
 * share — exact: values are decimals of at most 6 places, carried as integer millionths (bigint),
 * so sums are never float sums.
 */
import { Data, Effect } from "effect"
import { defineDecider } from "../../kernel/Decider.js"
import { AGGREGATIONS, type UsageAggregation, type UsagePrice } from "../contract.js"
import { type UsageEvent, UsageRecorded, usageEventTypes } from "./events.js"

export { AGGREGATIONS }

// --- Values -------------------------------------------------------------------------------------------

/** Values are below this (so `toFixed(6)` is plain decimal notation and sums stay exact in numeric). */
export const MAX_VALUE = 1e15
export const MICROS = 1_000_000n

/** Whether a number has at most 6 decimal places (as JSON carried it). */
export const hasAtMostSixDecimals = (value: number): boolean =>
  Number.isFinite(value) && Number(value.toFixed(6)) === value

/** The exact decimal text of a value (6 places): what PostgreSQL stores. */
export const decimalText = (value: number): string => value.toFixed(6)

/** A decimal text (PostgreSQL numeric, or `decimalText`) as integer millionths. */
export const microsOf = (text: string): bigint => {
  const negative = text.startsWith("-")
  const body = negative ? text.slice(1) : text
  const [whole = "0", fraction = ""] = body.split(".")
  const micros = BigInt(whole === "" ? "0" : whole) * MICROS + BigInt(`${fraction}000000`.slice(0, 6))
  return negative ? -micros : micros
}

/** A number as integer millionths (a quantity past 1e21 has no fixed notation, and no fraction either). */
export const microsOfValue = (value: number): bigint =>
  Math.abs(value) < 1e21 ? microsOf(decimalText(value)) : BigInt(value) * MICROS

/** Integer millionths as the nearest number (exact for every value a record can carry). */
export const numberOfMicros = (micros: bigint): number => {
  const negative = micros < 0n
  const m = negative ? -micros : micros
  const text = `${m / MICROS}.${(m % MICROS).toString().padStart(6, "0")}`
  return negative ? -Number(text) : Number(text)
}

// --- Aggregation --------------------------------------------------------------------------------------

/** The latest record by timestamp; ties go to the larger identifier (byte order, as PostgreSQL "C"). */
export interface LastValue {
  readonly micros: bigint
  readonly at: number
  readonly identifier: string
}

const byteCompare = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b))

/** Whether `a` is later than `b` (timestamp, then identifier). */
export const isLater = (a: LastValue, b: LastValue): boolean =>
  a.at !== b.at ? a.at > b.at : byteCompare(a.identifier, b.identifier) > 0

/** What any aggregation needs of a set of records; partials of disjoint sets combine. */
export interface Partial {
  readonly count: number
  readonly sum: bigint
  readonly max: bigint
  readonly last: LastValue | null
  readonly distinct: ReadonlySet<string>
}

const bigMax = (a: bigint, b: bigint): bigint => (b > a ? b : a)

export const emptyPartial: Partial = { count: 0, sum: 0n, max: 0n, last: null, distinct: new Set() }

export const combine = (a: Partial, b: Partial): Partial => ({
  count: a.count + b.count,
  sum: a.sum + b.sum,
  max: a.count === 0 ? b.max : b.count === 0 ? a.max : bigMax(a.max, b.max),
  last: a.last === null ? b.last : b.last === null ? a.last : isLater(b.last, a.last) ? b.last : a.last,
  distinct:
    b.distinct.size === 0
      ? a.distinct
      : a.distinct.size === 0
        ? b.distinct
        : new Set([...a.distinct, ...b.distinct])
})

/** One record as the aggregations see it. */
export interface UsagePoint {
  readonly micros: bigint
  readonly at: number
  readonly identifier: string
  readonly uniqueValue: string | null
}

export const partialOf = (p: UsagePoint): Partial => ({
  count: 1,
  sum: p.micros,
  max: p.micros,
  last: { micros: p.micros, at: p.at, identifier: p.identifier },
  distinct: p.uniqueValue === null ? new Set() : new Set([p.uniqueValue])
})

/** The aggregate (in millionths) of a set of records: 0 when there are none (every period starts at 0). */
export const quantityMicros = (aggregation: UsageAggregation, p: Partial): bigint => {
  switch (aggregation) {
    case "sum":
      return p.sum
    case "count":
      return BigInt(p.count) * MICROS
    case "max":
      return p.count === 0 ? 0n : p.max
    case "last":
      return p.last?.micros ?? 0n
    case "unique_count":
      return BigInt(p.distinct.size) * MICROS
  }
}

/** The reference model: the aggregate of the records timestamped in [from, to), straight from them. */
export const aggregateReference = (
  aggregation: UsageAggregation,
  records: ReadonlyArray<UsagePoint>,
  from: number,
  to: number
): { readonly quantity: bigint; readonly eventCount: number } => {
  let partial = emptyPartial
  for (const r of records) if (r.at >= from && r.at < to) partial = combine(partial, partialOf(r))
  return { quantity: quantityMicros(aggregation, partial), eventCount: partial.count }
}

/**
 * The most an amount is reported as (minor units). Quantities have no ceiling (a sum of records),
 * so an amount is capped where it still is an exact integer in JSON and in a bigint column; it is
 * far above anything a payment can collect (99,999,999), so the cap never changes money that moves:
 * an invoice above that fails to collect (`amount_too_large`) whether capped or not.
 */
export const MAX_REPORTED_AMOUNT = 999_999_999_999_999

/** Included units, billable units and the estimated amount (minor units, rounded half up) of a quantity. */
export const pricing = (usage: UsagePrice, quantity: bigint) => {
  const included = BigInt(Math.max(0, Math.trunc(usage.includedUnits))) * MICROS
  const billable = quantity > included ? quantity - included : 0n
  const amount = (billable * BigInt(Math.trunc(usage.unitAmount)) + MICROS / 2n) / MICROS
  return {
    billableMicros: billable,
    estimatedAmount: amount > BigInt(MAX_REPORTED_AMOUNT) ? MAX_REPORTED_AMOUNT : Number(amount)
  }
}

/** properties[uniqueKey] as the text unique_count compares (absent or null: not counted). */
export const uniqueValueOf = (
  usage: UsagePrice,
  properties: Readonly<Record<string, unknown>>
): string | null => {
  if (usage.aggregation !== "unique_count" || usage.uniqueKey === undefined || usage.uniqueKey === null)
    return null
  const v = properties[usage.uniqueKey]
  if (v === undefined || v === null) return null
  return typeof v === "string" ? v : JSON.stringify(v)
}

// --- Checking a record against its subscription ------------------------------------------------------

/** The subscription as usage reads it (billing.subscriptions, contract columns). */
export interface SubscriptionView {
  readonly id: string
  readonly customerId: string
  readonly status: string
  readonly currency: string
  readonly currentPeriodStart: Date
  readonly currentPeriodEnd: Date
  readonly usage: UsagePrice | null
  readonly usageClosedBefore: Date | null
  readonly testClockId: string | null
}

/** Statuses that take no more usage: 409 `subscription_not_active`. */
export const INACTIVE_STATUSES: ReadonlySet<string> = new Set(["canceled", "incomplete_expired"])

export const PAST_WINDOW_MS = 35 * 24 * 3600 * 1000
export const FUTURE_WINDOW_MS = 5 * 60 * 1000

export class SubscriptionNotActive extends Data.TaggedError("SubscriptionNotActive")<{
  readonly subscriptionId: string
  readonly status: string
}> {}
export class MeterMismatch extends Data.TaggedError("MeterMismatch")<{
  readonly meter: string
  readonly expected: string | null
}> {}
export class TimestampOutOfRange extends Data.TaggedError("TimestampOutOfRange")<{
  readonly reason: string
}> {}
export class PeriodClosed extends Data.TaggedError("PeriodClosed")<{ readonly closedBefore: Date }> {}

export type RecordRefusal = SubscriptionNotActive | MeterMismatch | TimestampOutOfRange | PeriodClosed

export interface Period {
  readonly start: Date
  /** null: the period after the current one (its renewal, which fixes the end, has not run yet). */
  readonly end: Date | null
}

/**
 * Checks a record of `meter` at `at` against the subscription at `now` (the subscription's clock):
 * the period it falls in, or why it is refused.
 */
export const checkRecord = (
  sub: SubscriptionView,
  meter: string,
  at: Date,
  now: Date
): { readonly _tag: "Accepted"; readonly period: Period; readonly usage: UsagePrice } | RecordRefusal => {
  if (INACTIVE_STATUSES.has(sub.status))
    return new SubscriptionNotActive({ subscriptionId: sub.id, status: sub.status })
  if (sub.usage === null || sub.usage.meter !== meter)
    return new MeterMismatch({ meter, expected: sub.usage?.meter ?? null })
  const t = at.getTime()
  if (t < now.getTime() - PAST_WINDOW_MS)
    return new TimestampOutOfRange({ reason: "more than 35 days before now" })
  if (t > now.getTime() + FUTURE_WINDOW_MS)
    return new TimestampOutOfRange({ reason: "more than 5 minutes after now" })
  if (sub.usageClosedBefore !== null && t < sub.usageClosedBefore.getTime())
    return new PeriodClosed({ closedBefore: sub.usageClosedBefore })
  const start = sub.currentPeriodStart.getTime()
  const end = sub.currentPeriodEnd.getTime()
  if (t >= end)
    return { _tag: "Accepted", usage: sub.usage, period: { start: sub.currentPeriodEnd, end: null } }
  if (t >= start)
    return {
      _tag: "Accepted",
      usage: sub.usage,
      period: { start: sub.currentPeriodStart, end: sub.currentPeriodEnd }
    }
  // Before the current period: the previous one, while its usage is still open (not yet invoiced).
  if (sub.usageClosedBefore !== null && sub.usageClosedBefore.getTime() < start)
    return {
      _tag: "Accepted",
      usage: sub.usage,
      period: { start: sub.usageClosedBefore, end: sub.currentPeriodStart }
    }
  return new TimestampOutOfRange({
    reason: "before the subscription's current period, and no earlier period is open"
  })
}

// --- The write ------------------------------------------------------------------------------------

export type UsageRecordData = (typeof UsageRecorded.schema)["Type"]

/** Record what one write accepted (each record checked: `checkRecord`, its identifier looked up). */
export interface RecordUsage {
  readonly _tag: "Record"
  readonly records: ReadonlyArray<UsageRecordData>
}

/**
 * A usage write's stream (events.ts), new for each write (appended as a new stream, so it holds no
 * state to decide on): one `usage.recorded` per record, in order. An identifier records once by the
 * read model's key in the same transaction, not by this stream.
 */
export const UsageWriteDecider = defineDecider({
  streamType: "usage",
  events: usageEventTypes,
  initialState: null,
  evolve: (state: null, _event: UsageEvent): null => state,
  decide: (command: RecordUsage, _state: null) =>
    Effect.succeed(command.records.map((data) => UsageRecorded.make(data)))
})

/** Whether a second post of an identifier is the same record again (200 replay) or another (409). */
export const isSameRecord = (
  existing: { readonly subscriptionId: string; readonly value: number },
  incoming: { readonly subscriptionId: string; readonly value: number }
): boolean =>
  existing.subscriptionId === incoming.subscriptionId &&
  microsOfValue(existing.value) === microsOfValue(incoming.value)
