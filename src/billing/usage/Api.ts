/**
 * The usage HTTP contract on `/v1` (spec §4.5; research §1.8): recording usage (`write:usage`: API
 * keys and staff of the store's backend, never shoppers), one record or a batch of up to 1,000, and
 * the summary of a subscription's usage (`read:usage`, which shoppers hold for their own
 * subscriptions: another's is 404).
 *
 * Every rule a request can break on its own is stated in these schemas; what depends on the
 * subscription (its meter, status, period, the closed period, its clock) is the use case's.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { ParseResult, Schema, SchemaAST } from "effect"
import { ApiBase } from "../../http/ApiBase.js"
import { Authentication } from "../../http/Auth.js"
import { scoped } from "../../http/Endpoints.js"
import { Conflict, ErrorDetail, NotFound } from "../../http/errors.js"
import { Instant, Text } from "../../http/Fields.js"
import { Metadata, MetadataInput, metadataProblem } from "../../kernel/Metadata.js"
import { AGGREGATIONS, hasAtMostSixDecimals, MAX_VALUE } from "./decider.js"

export const MAX_BATCH = 1000
export const MAX_IDENTIFIER = 255
/** A property value, as JSON text (what unique_count stores and indexes). */
export const MAX_PROPERTY_VALUE = 500

/**
 * `subscriptionId`, or `customerId` instead: neither is a missing parameter (400 `parameter_missing`,
 * param `subscriptionId`), both an invalid one.
 */
const subscriptionReference = (input: {
  readonly subscriptionId?: string | undefined
  readonly customerId?: string | undefined
}): ParseResult.ParseIssue | { path: ReadonlyArray<string>; message: string } | undefined =>
  input.subscriptionId === undefined && input.customerId === undefined
    ? new ParseResult.Pointer(
        "subscriptionId",
        input,
        new ParseResult.Missing(
          new SchemaAST.Type(Schema.String.ast),
          "subscriptionId (or customerId) is required"
        )
      )
    : input.subscriptionId !== undefined && input.customerId !== undefined
      ? { path: ["subscriptionId"], message: "give subscriptionId or customerId, not both" }
      : undefined

/** Below this, a double tells every value of 6 decimal places apart (its spacing is under a millionth). */
const EXACT_FRACTIONS_BELOW = 2 ** 32

const Value = Schema.Number.annotations({ message: () => "value must be a number" })
  .pipe(
    Schema.filter((v) => Number.isFinite(v) && v >= 0 && v < MAX_VALUE, {
      message: () => `value must be a finite number ≥ 0 and below ${MAX_VALUE}`,
      jsonSchema: { minimum: 0, exclusiveMaximum: MAX_VALUE }
    }),
    Schema.filter((v) => hasAtMostSixDecimals(v), {
      message: () => "value must have at most 6 decimal places",
      jsonSchema: { multipleOf: 0.000001 }
    }),
    // From 2^32 on, a JSON number (a double) is coarser than a millionth: 12345678901234.567 arrives
    // as …234.566406 and would be kept as …234.566406, not what was sent. Whole values stay exact.
    Schema.filter((v) => Number.isInteger(v) || v < EXACT_FRACTIONS_BELOW, {
      message: () =>
        `value with decimals must be below ${EXACT_FRACTIONS_BELOW} (2^32); larger values must be whole numbers, or the decimals sent could not be kept exactly`
    })
  )
  .annotations({
    arbitrary: () => (fc) =>
      fc.oneof(fc.integer({ min: 0, max: 1_000_000 }), fc.constantFrom(0.5, 1.25, 2.000001))
  })

const Identifier = Schema.String.pipe(
  Schema.minLength(1, { message: () => "identifier must not be empty" }),
  // Characters as a reader counts them (code points: an emoji is one, not two UTF-16 units).
  Schema.filter((text) => [...text].length <= MAX_IDENTIFIER, {
    message: () => `identifier must be at most ${MAX_IDENTIFIER} characters`,
    jsonSchema: { maxLength: MAX_IDENTIFIER }
  })
)

const RefId = (field: string) =>
  Schema.String.pipe(Schema.maxLength(100, { message: () => `${field} must be at most 100 characters` }))

export const UsageRecordInput = Schema.Struct({
  subscriptionId: Schema.optional(RefId("subscriptionId")),
  customerId: Schema.optional(RefId("customerId")),
  meter: Text("meter", 100),
  value: Schema.optional(Value),
  timestamp: Schema.optional(Instant("timestamp")),
  identifier: Identifier,
  // Bounded as metadata is (keys, key and value lengths, bytes): a value unique_count counts is
  // stored and indexed, so an unbounded one would fail in the database instead of answering 400.
  properties: Schema.optional(
    MetadataInput.pipe(
      Schema.filter((p) => {
        const problem = metadataProblem(p)
        if (problem !== undefined) return problem.replace(/^metadata/, "properties")
        const long = Object.keys(p).find((k) => [...JSON.stringify(p[k] ?? null)].length > MAX_PROPERTY_VALUE)
        return long === undefined
          ? undefined
          : `properties values must be at most ${MAX_PROPERTY_VALUE} characters as JSON (${JSON.stringify(long)})`
      })
    )
  )
}).pipe(Schema.filter((r) => subscriptionReference(r)))
export type UsageRecordInput = typeof UsageRecordInput.Type

export const UsageBatchInput = Schema.Struct({
  records: Schema.Array(
    Schema.Unknown.annotations({
      description: "A usage record as `POST /v1/usage` takes it; each is checked on its own.",
      jsonSchema: { type: "object" },
      arbitrary: () => (fc) => fc.constant({})
    })
  ).pipe(
    Schema.minItems(1, { message: () => "records must hold at least one record" }),
    Schema.maxItems(MAX_BATCH, { message: () => `records can hold at most ${MAX_BATCH} records` })
  )
})
export type UsageBatchInput = typeof UsageBatchInput.Type

export const UsageRecordObject = Schema.Struct({
  object: Schema.Literal("usage_record"),
  id: Schema.String,
  subscriptionId: Schema.String,
  customerId: Schema.String,
  meter: Schema.String,
  identifier: Schema.String,
  value: Schema.Number,
  timestamp: Schema.Date,
  properties: Metadata,
  /** The billing period the record falls in. */
  periodStart: Schema.Date,
  /** null: the period after the subscription's current one, whose end its (pending) renewal fixes. */
  periodEnd: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date
}).annotations({ identifier: "UsageRecord" })
export type UsageRecordObject = typeof UsageRecordObject.Type

export const UsageBatchItem = Schema.Struct({
  index: Schema.Int,
  /** 201 recorded, 200 a replay of an identifier already recorded, or the status of `error`. */
  status: Schema.Int,
  record: Schema.optional(UsageRecordObject),
  error: Schema.optional(ErrorDetail)
}).annotations({ identifier: "UsageBatchItem" })
export type UsageBatchItem = typeof UsageBatchItem.Type

export const UsageBatchResult = Schema.Struct({
  object: Schema.Literal("usage_batch"),
  created: Schema.Int,
  replayed: Schema.Int,
  failed: Schema.Int,
  results: Schema.Array(UsageBatchItem)
}).annotations({ identifier: "UsageBatchResult" })
export type UsageBatchResult = typeof UsageBatchResult.Type

/**
 * `UsageBatchResult`'s JSON encoding, written out: what `Schema.encodeSync(UsageBatchResult)` gives
 * (same keys, same order; dates as ISO text), without Schema's walk of up to 1,000 records — that
 * walk was ~9 % of the service's CPU under batches. Error details, rare, still go through Schema.
 * `test/billing/usage/encoding.test.ts` checks the two agree on arbitrary results.
 */
export const encodeUsageBatchResult = (result: UsageBatchResult): typeof UsageBatchResult.Encoded => {
  const iso = isoCache()
  return {
    object: result.object,
    created: result.created,
    replayed: result.replayed,
    failed: result.failed,
    results: result.results.map((item): typeof UsageBatchItem.Encoded => {
      const { index, status, record, error } = item
      if (error === undefined)
        return record === undefined
          ? { index, status }
          : { index, status, record: encodeRecordWith(record, iso) }
      const encodedError = encodeErrorDetail(error)
      return record === undefined
        ? { index, status, error: encodedError }
        : { index, status, record: encodeRecordWith(record, iso), error: encodedError }
    })
  }
}

/** `UsageRecordObject`'s JSON encoding, written out (see `encodeUsageBatchResult`). */
export const encodeUsageRecord = (record: UsageRecordObject): typeof UsageRecordObject.Encoded =>
  encodeRecordWith(record, (date) => date.toISOString())

const encodeErrorDetail = Schema.encodeSync(ErrorDetail)

/** ISO text of dates, remembered by time: a batch's records share their period's two dates. */
const isoCache = () => {
  const known = new Map<number, string>()
  return (date: Date): string => {
    const time = date.getTime()
    let text = known.get(time)
    if (text === undefined) {
      text = date.toISOString()
      known.set(time, text)
    }
    return text
  }
}

/** A record's properties copied key by key, as Schema's `Record` encodes them (a `__proto__` key included). */
const copyRecord = (properties: Readonly<Record<string, unknown>>): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const key of Object.keys(properties)) out[key] = properties[key]
  return out
}

const encodeRecordWith = (
  record: UsageRecordObject,
  iso: (date: Date) => string
): typeof UsageRecordObject.Encoded => ({
  object: record.object,
  id: record.id,
  subscriptionId: record.subscriptionId,
  customerId: record.customerId,
  meter: record.meter,
  identifier: record.identifier,
  value: record.value,
  timestamp: iso(record.timestamp),
  properties: copyRecord(record.properties),
  periodStart: iso(record.periodStart),
  periodEnd: record.periodEnd === null ? null : iso(record.periodEnd),
  createdAt: iso(record.createdAt)
})

export const UsageBucket = Schema.Struct({
  start: Schema.Date,
  end: Schema.Date,
  quantity: Schema.Number,
  eventCount: Schema.Int
}).annotations({ identifier: "UsageBucket" })

export const UsageSummary = Schema.Struct({
  object: Schema.Literal("usage_summary"),
  subscriptionId: Schema.String,
  customerId: Schema.String,
  meter: Schema.String,
  aggregation: Schema.Literal(...AGGREGATIONS),
  periodStart: Schema.Date,
  periodEnd: Schema.Date,
  quantity: Schema.Number,
  includedUnits: Schema.Number,
  billableUnits: Schema.Number,
  unitAmount: Schema.Int,
  estimatedAmount: Schema.Int,
  currency: Schema.String,
  eventCount: Schema.Int,
  buckets: Schema.optional(Schema.Array(UsageBucket)),
  asOf: Schema.Date
}).annotations({ identifier: "UsageSummary" })
export type UsageSummary = typeof UsageSummary.Type

export const MAX_BUCKETS = 1000

export const UsageSummaryParams = Schema.Struct({
  subscriptionId: Schema.optional(RefId("subscriptionId")),
  customerId: Schema.optional(RefId("customerId")),
  meter: Schema.optional(Text("meter", 100)),
  from: Schema.optional(Instant("from")),
  to: Schema.optional(Instant("to")),
  groupBy: Schema.optional(
    Schema.Literal("hour", "day").annotations({
      message: () => ({ message: "groupBy must be one of hour, day", override: true })
    })
  )
}).pipe(
  Schema.filter((p) =>
    p.subscriptionId === undefined || p.customerId !== undefined
      ? subscriptionReference(p)
      : p.from !== undefined && p.to !== undefined && p.from.getTime() >= p.to.getTime()
        ? { path: ["to"], message: "to must be after from" }
        : undefined
  )
)
export type UsageSummaryParams = typeof UsageSummaryParams.Type

export class UsageApi extends HttpApiGroup.make("usage")
  .add(
    HttpApiEndpoint.post("record", "/v1/usage")
      .setPayload(UsageRecordInput)
      .addSuccess(UsageRecordObject, { status: 201 })
      // Answered by the handler itself (with `Idempotent-Replayed: true`): the identifier's original record.
      .addSuccess(UsageRecordObject.annotations({ identifier: "UsageRecordReplayed" }), { status: 200 })
      .addError(NotFound)
      .addError(Conflict)
      .pipe(scoped("write:usage"))
      .annotate(OpenApi.Summary, "Record usage of a metered subscription")
      .annotate(
        OpenApi.Description,
        "`subscriptionId`, or `customerId` when that customer has exactly one metered subscription that " +
          "is not canceled (several or none → 400; no subscription at all → 404). `meter` must be the " +
          "subscription price's meter (400, `param` `meter`). `value` (default 1): ≥ 0, at most 6 " +
          "decimals (whole from 2^32 on). `timestamp` (default: now, on the customer's test clock if any) from 35 days back " +
          "to 5 minutes ahead, else 400 `timestamp_out_of_range`; before the subscription's invoiced " +
          "usage (`period_closed`) → 400. `identifier` (1–255 characters) is unique per meter: the same " +
          "identifier again with the same subscription and value → 200 with the ORIGINAL record and " +
          "`Idempotent-Replayed: true`; with another value → 409 `usage_identifier_conflict`. A canceled " +
          "subscription → 409 `subscription_not_active`. 201 with the record and the billing period it " +
          "falls in (`periodEnd` null when it falls after the current period, before its renewal ran)."
      )
  )
  .add(
    HttpApiEndpoint.post("recordBatch", "/v1/usage/batch")
      .setPayload(UsageBatchInput)
      .addSuccess(UsageBatchResult)
      .pipe(scoped("write:usage"))
      .annotate(OpenApi.Summary, "Record up to 1,000 usage records, each on its own")
      .annotate(
        OpenApi.Description,
        "`{records: [...]}`, 1 to 1,000 records shaped as `POST /v1/usage` takes them (more → 400). " +
          "Each record is checked and recorded on its own, all or nothing per record: the answer is 200 " +
          'with `{object: "usage_batch", created, replayed, failed, results}` where `results[i]` is ' +
          "`{index: i, status, record | error}` in request order: `status` 201 (recorded, `record`), 200 " +
          "(identifier already recorded with that value: the original `record`), or the status a single " +
          "`POST /v1/usage` would answer with its `error` body (400, 404, 409). A record that fails " +
          "leaves nothing behind and does not stop the others. The same identifier twice in one batch: " +
          "the second is a replay (or a 409) of the first."
      )
  )
  .add(
    HttpApiEndpoint.get("summary", "/v1/usage")
      .setUrlParams(UsageSummaryParams)
      .addSuccess(UsageSummary)
      .addError(NotFound)
      .pipe(scoped("read:usage"))
      .annotate(OpenApi.Summary, "A subscription's usage summary: quantity, billable units, estimate")
      .annotate(
        OpenApi.Description,
        "The subscription: `subscriptionId`, or `customerId` when that customer has exactly one metered " +
          "subscription that is not canceled (as `POST /v1/usage` resolves it; several or none → 400, no " +
          "subscription at all → 404); one of the two, not both (400). " +
          "Over `[from, to)` (default: the subscription's current period): `quantity` (the price's " +
          "aggregation — sum, count, max, last (latest by timestamp, ties to the larger identifier) or " +
          "unique_count of `properties[uniqueKey]` — 0 without records), `includedUnits`, `billableUnits` " +
          "(quantity above the included units), `unitAmount`, `estimatedAmount` (billable units × unit " +
          "amount, minor units, rounded half up; capped at 999,999,999,999,999, far beyond any payment: an " +
          "invoice above 99,999,999 fails to collect with `amount_too_large`), `eventCount`, and with `groupBy=hour|day` the UTC " +
          "`buckets` (each `[start, end)` clipped to the range, at most 1,000, else 400). Exact (equal to " +
          "recomputing from the raw records) and read-your-writes; `asOf` is the time it was computed " +
          "(the subscription's clock). Shoppers read their own subscriptions' usage (another's → 404)."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Usage (v1)")
  .annotate(
    OpenApi.Description,
    "Usage metering of metered subscriptions (research §1.8): records deduplicated per (meter, " +
      "identifier), each an event in the log; summaries from hourly rollups kept in the same transaction."
  ) {}

/** This context's routes on the service's API (`ApiBase`): what its handlers are built against. */
export const UsageRoutes = ApiBase.add(UsageApi)
