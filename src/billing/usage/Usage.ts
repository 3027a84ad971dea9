/**
 * The usage use cases behind `/v1/usage`, and the `UsageLedger` renewals read.
 *
 * A write is ONE transaction: the subscriptions it records against are locked `FOR KEY SHARE` and
 * checked (status, meter, time window on the customer's clock, `usage_closed_before`), identifiers
 * already recorded are answered with their original record (or a 409), and the new records are
 * appended — on one new stream for the write (events.ts) — with the inline projection (raw rows and
 * rollups) in the same transaction. A batch is up to 1,000 records in one append; each record is
 * checked on its own, and one that fails takes no part. Single posts are written in groups (group
 * commit, below): posts that arrive while a write runs go together in the next one, as a batch whose
 * records keep their own requests' metadata. Two posts of one identifier in one group: the second is
 * a replay of the first. In two writes (two processes, or a post with an idempotency key): the
 * second's insert of the record's row waits for the first on its key (meter, identifier); when the
 * first commits, the second's transaction fails as a lost race (`ReadModelKeyConflict`) and runs
 * again, now finding the record: a 200 replay, or a 409.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Context, Effect, Either, Layer, ParseResult, Schema } from "effect"
import { uuidv7, uuidv7FromMillis } from "../../base/Uuid.js"
import { isUniqueViolation } from "../../db/Sql.js"
import { reportConflict } from "../../db/Transaction.js"
import type { EventMetadata } from "../../eventstore/EventStore.js"
import type { AuthenticatedActor } from "../../http/Auth.js"
import {
  BadRequest,
  Conflict,
  type ErrorDetail,
  NotFound,
  orDieUnlessHttp,
  statusOfHttpError
} from "../../http/errors.js"
import { CommandRunner, ReadModelKeyConflict } from "../../kernel/CommandRunner.js"
import { makeGroupCommit } from "../../kernel/GroupCommit.js"
import * as Ids from "../../kernel/Ids.js"
import { commandMetadata } from "../../kernel/UseCase.js"
import { BillingClock, type UsageLedgerShape } from "../contract.js"
import {
  MAX_BATCH,
  MAX_BUCKETS,
  type UsageBatchInput,
  type UsageBatchItem,
  type UsageBatchResult,
  UsageRecordInput,
  type UsageRecordObject,
  type UsageSummary,
  type UsageSummaryParams
} from "./Api.js"
import {
  checkRecord,
  INACTIVE_STATUSES,
  isSameRecord,
  numberOfMicros,
  pricing,
  quantityMicros,
  type RecordRefusal,
  type SubscriptionView,
  type UsageRecordData,
  UsageWriteDecider,
  uniqueValueOf
} from "./decider.js"
import { usageWriteStream } from "./events.js"
import {
  bucketCount,
  bucketsOf,
  combineAll,
  identifierKey,
  rangePartials,
  selectRecordsByIdentifier,
  selectSubscriptions,
  subscriptionsOfCustomers
} from "./queries.js"

type HttpRefusal = BadRequest | NotFound | Conflict

/** A record to write, with its events' metadata (the actor and request that posted it). */
interface Pending {
  readonly input: UsageRecordInput
  readonly metadata: EventMetadata
}

export interface RecordOutcome {
  readonly record: UsageRecordObject
  /** The identifier was already recorded (same subscription and value): the original record. */
  readonly replayed: boolean
}

export interface UsageShape {
  readonly record: (
    actor: AuthenticatedActor,
    input: UsageRecordInput
  ) => Effect.Effect<RecordOutcome, HttpRefusal>
  readonly recordBatch: (actor: AuthenticatedActor, input: UsageBatchInput) => Effect.Effect<UsageBatchResult>
  readonly summary: (
    actor: AuthenticatedActor,
    params: UsageSummaryParams
  ) => Effect.Effect<UsageSummary, BadRequest | NotFound>
}

export class Usage extends Context.Tag("billing/Usage")<Usage, UsageShape>() {}

const notFoundSubscription = (param: "subscriptionId" | "customerId") =>
  NotFound.of({
    message: param === "subscriptionId" ? "No such subscription" : "The customer has no subscription",
    param
  })

/**
 * The subscription a record or a summary names by its customer (`customerId`): the customer's one
 * metered subscription that is not canceled. None at all → 404; several, or none metered → 400.
 */
const meteredSubscriptionOf = (all: ReadonlyArray<SubscriptionView>): string | BadRequest | NotFound => {
  if (all.length === 0) return notFoundSubscription("customerId")
  const metered = all.filter((s) => s.usage !== null && !INACTIVE_STATUSES.has(s.status))
  const only = metered[0]
  if (metered.length !== 1 || only === undefined)
    return BadRequest.of({
      code: "parameter_invalid",
      message:
        metered.length === 0
          ? "the customer has no metered subscription that is not canceled: give subscriptionId"
          : `the customer has ${metered.length} metered subscriptions: give subscriptionId`,
      param: "customerId"
    })
  return only.id
}

const refusalError = (refusal: RecordRefusal): HttpRefusal => {
  switch (refusal._tag) {
    case "SubscriptionNotActive":
      return Conflict.of({
        code: "subscription_not_active",
        message: `the subscription is ${refusal.status}: it takes no more usage`
      })
    case "MeterMismatch":
      return BadRequest.of({
        code: "parameter_invalid",
        message:
          refusal.expected === null
            ? "the subscription has no metered price"
            : `meter must be the subscription's meter (${refusal.expected})`,
        param: "meter"
      })
    case "TimestampOutOfRange":
      return BadRequest.of({
        code: "timestamp_out_of_range",
        message: `timestamp is ${refusal.reason}: usage is accepted from 35 days back to 5 minutes ahead`,
        param: "timestamp"
      })
    case "PeriodClosed":
      return BadRequest.of({
        code: "period_closed",
        message: `usage before ${refusal.closedBefore.toISOString()} is already invoiced`,
        param: "timestamp"
      })
  }
}

const identifierConflict = (existing: UsageRecordObject) =>
  Conflict.of({
    code: "usage_identifier_conflict",
    message: `identifier already recorded for ${existing.subscriptionId} with value ${existing.value} (record ${existing.id})`,
    param: "identifier"
  })

/** A record's schema failure as `POST /v1/usage` would answer it (param as Stripe writes paths). */
const decodeFailure = (error: ParseResult.ParseError): BadRequest => {
  const issue = ParseResult.ArrayFormatter.formatErrorSync(error)[0]
  const param =
    issue && issue.path.length > 0
      ? issue.path.reduce<string>(
          (acc, key) =>
            typeof key === "number" ? `${acc}[${key}]` : acc === "" ? String(key) : `${acc}.${String(key)}`,
          ""
        )
      : undefined
  const missing = issue?._tag === "Missing"
  return BadRequest.of({
    code: missing ? "parameter_missing" : "parameter_invalid",
    message:
      param === undefined
        ? (issue?.message ?? "a record must be a JSON object")
        : missing
          ? `${param} is required`
          : issue?.message.startsWith(`${param} `) === true
            ? issue.message
            : `${param}: ${issue?.message ?? "is invalid"}`,
    ...(param === undefined ? {} : { param })
  })
}

const decodeRecord = Schema.decodeUnknownEither(UsageRecordInput)

type Prepared =
  | { readonly _tag: "New"; readonly data: UsageRecordData }
  | { readonly _tag: "Done"; readonly outcome: RecordOutcome }
  /** The same identifier earlier in the batch, with the same subscription and value: a replay of it. */
  | { readonly _tag: "SameAs"; readonly key: string }
  | { readonly _tag: "Refused"; readonly error: HttpRefusal }

const objectOf = (data: UsageRecordData, createdAt: Date): UsageRecordObject => ({
  object: "usage_record",
  id: data.recordId,
  subscriptionId: data.subscriptionId,
  customerId: data.customerId,
  meter: data.meter,
  identifier: data.identifier,
  value: data.value,
  timestamp: data.timestamp,
  properties: data.properties,
  periodStart: data.periodStart,
  periodEnd: data.periodEnd,
  createdAt
})

export const makeUsage = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const runner = yield* CommandRunner
  const clock = yield* BillingClock

  /**
   * Checks the records (in the caller's transaction): subscriptions resolved and locked, identifiers
   * looked up, each record accepted with its event data or refused; duplicates within the batch are
   * replays (or conflicts) of their first occurrence.
   */
  const prepare = (inputs: ReadonlyArray<UsageRecordInput>) =>
    Effect.gen(function* () {
      const byCustomer = new Map<string, ReadonlyArray<SubscriptionView>>()
      const customerIds = [
        ...new Set(
          inputs.flatMap((i) =>
            i.subscriptionId === undefined && i.customerId !== undefined ? [i.customerId] : []
          )
        )
      ]
      for (const s of yield* subscriptionsOfCustomers(sql, customerIds)) {
        byCustomer.set(s.customerId, [...(byCustomer.get(s.customerId) ?? []), s])
      }
      // Each input's subscription id, or why it has none.
      const resolved = inputs.map((i): string | HttpRefusal => {
        if (i.subscriptionId !== undefined)
          return Ids.isValid("sub", i.subscriptionId)
            ? i.subscriptionId
            : notFoundSubscription("subscriptionId")
        return meteredSubscriptionOf(byCustomer.get(i.customerId ?? "") ?? [])
      })
      const ids = [...new Set(resolved.filter((r): r is string => typeof r === "string"))]
      const subscriptions = yield* selectSubscriptions(sql, ids, { lock: true })
      const existing = yield* selectRecordsByIdentifier(
        sql,
        inputs.map((i) => ({ meter: i.meter, identifier: i.identifier }))
      )
      // The time of each clock the subscriptions live on, read once; ids minted from one instant.
      // The loop below then checks up to 1,000 records without an effect step each.
      const nows = new Map<string | null, Date>()
      for (const sub of subscriptions.values()) {
        if (!nows.has(sub.testClockId)) nows.set(sub.testClockId, yield* clock.nowFor(sub.testClockId))
      }
      const mintedAt = yield* Clock.currentTimeMillis
      const inBatch = new Map<string, UsageRecordData>()
      const prepared: Array<Prepared> = []
      for (const [index, input] of inputs.entries()) {
        const id = resolved[index]
        if (id === undefined) continue
        if (typeof id !== "string") {
          prepared.push({ _tag: "Refused", error: id })
          continue
        }
        const sub = subscriptions.get(id)
        if (sub === undefined) {
          prepared.push({
            _tag: "Refused",
            error:
              input.subscriptionId === undefined
                ? notFoundSubscription("customerId")
                : notFoundSubscription("subscriptionId")
          })
          continue
        }
        const value = input.value ?? 1
        const key = identifierKey(input.meter, input.identifier)
        const earlier = existing.get(key)
        if (earlier !== undefined) {
          prepared.push(
            isSameRecord(earlier, { subscriptionId: sub.id, value })
              ? { _tag: "Done", outcome: { record: earlier, replayed: true } }
              : { _tag: "Refused", error: identifierConflict(earlier) }
          )
          continue
        }
        const sibling = inBatch.get(key)
        if (sibling !== undefined) {
          prepared.push(
            isSameRecord(sibling, { subscriptionId: sub.id, value })
              ? { _tag: "SameAs", key }
              : { _tag: "Refused", error: identifierConflict(objectOf(sibling, sibling.timestamp)) }
          )
          continue
        }
        const now = nows.get(sub.testClockId) ?? new Date(mintedAt)
        const timestamp = input.timestamp ?? now
        const checked = checkRecord(sub, input.meter, timestamp, now)
        if (checked._tag !== "Accepted") {
          prepared.push({ _tag: "Refused", error: refusalError(checked) })
          continue
        }
        const properties = input.properties ?? {}
        const data: UsageRecordData = {
          recordId: Ids.fromUuid("ue", uuidv7FromMillis(mintedAt)),
          subscriptionId: sub.id,
          customerId: sub.customerId,
          meter: input.meter,
          identifier: input.identifier,
          value,
          timestamp,
          properties,
          uniqueValue: uniqueValueOf(checked.usage, properties),
          periodStart: checked.period.start,
          periodEnd: checked.period.end
        }
        inBatch.set(key, data)
        prepared.push({ _tag: "New", data })
      }
      return prepared
    })

  /** Checks and records, in one transaction; outcomes in input order. */
  const write = (items: ReadonlyArray<Pending>) =>
    runner.transact(
      Effect.gen(function* () {
        const prepared = yield* prepare(items.map((i) => i.input))
        const fresh = prepared.flatMap((p, i) =>
          p._tag === "New" ? [{ data: p.data, metadata: items[i]?.metadata ?? {} }] : []
        )
        let recordedAt = new Date()
        if (fresh.length > 0) {
          const streamId = usageWriteStream(yield* uuidv7)
          const result = yield* runner
            .execute(
              UsageWriteDecider,
              streamId,
              { _tag: "Record", records: fresh.map((f) => f.data) },
              { newStream: true, eventMetadata: fresh.map((f) => f.metadata) }
            )
            .pipe(
              // The only unique key this write inserts without ON CONFLICT handling its own: a record's
              // (meter, identifier), taken by a write that committed after this one looked (migration
              // 0028). Run again, it finds that record.
              Effect.catchIf(isUniqueViolation, () => {
                const conflict = new ReadModelKeyConflict({ streamId })
                return Effect.zipRight(reportConflict(conflict), Effect.fail(conflict))
              })
            )
          recordedAt = result.events[0]?.recordedAt ?? recordedAt
        }
        // In-batch replays answer their first occurrence as recorded.
        const byKey = new Map(fresh.map(({ data }) => [identifierKey(data.meter, data.identifier), data]))
        return prepared.map((p): Either.Either<RecordOutcome, HttpRefusal> => {
          if (p._tag === "New") return Either.right({ record: objectOf(p.data, recordedAt), replayed: false })
          if (p._tag === "Refused") return Either.left(p.error)
          if (p._tag === "Done") return Either.right(p.outcome)
          const first = byKey.get(p.key)
          return first === undefined
            ? Either.left(
                NotFound.of({ message: "the batch's earlier record of this identifier is missing" })
              )
            : Either.right({ record: objectOf(first, recordedAt), replayed: true })
        })
      })
    )

  /**
   * Single posts outside a caller's transaction are written in groups (kernel/GroupCommit.ts): one
   * writer takes every post waiting (up to a batch's 1,000) into ONE `write` — one transaction, one
   * append of many streams — each record's outcome its own, each event with its own request's
   * metadata. Posts of one subscription would otherwise queue on its rollup rows one commit at a
   * time. A second writer beside the first measured no faster (bench:billing).
   */
  const grouped = yield* makeGroupCommit({ max: MAX_BATCH, write })

  // A post with an idempotency key runs in its request's transaction: the group commit writes it
  // there, ungrouped.
  const record = (actor: AuthenticatedActor, input: UsageRecordInput) =>
    Effect.flatMap(commandMetadata(actor), (metadata) => grouped.submit({ input, metadata })).pipe(
      Effect.flatten,
      orDieUnlessHttp
    )

  const recordBatch = (actor: AuthenticatedActor, input: UsageBatchInput) =>
    Effect.gen(function* () {
      const decoded = input.records.map((r) => decodeRecord(r))
      const valid = decoded.flatMap((d) => (Either.isRight(d) ? [d.right] : []))
      const metadata = yield* commandMetadata(actor)
      const outcomes = yield* write(valid.map((input) => ({ input, metadata })))
      let k = 0
      const results = decoded.map((d, index): UsageBatchItem => {
        if (Either.isLeft(d)) return failedItem(index, 400, decodeFailure(d.left).error)
        const outcome = outcomes[k++]
        if (outcome === undefined)
          return failedItem(index, 500, { type: "api_error", code: "internal", message: "no outcome" })
        return Either.isRight(outcome)
          ? { index, status: outcome.right.replayed ? 200 : 201, record: outcome.right.record }
          : failedItem(index, statusOfHttpError(outcome.left), outcome.left.error)
      })
      return {
        object: "usage_batch" as const,
        created: results.filter((r) => r.status === 201).length,
        replayed: results.filter((r) => r.status === 200).length,
        failed: results.filter((r) => r.status >= 400).length,
        results
      }
    }).pipe(Effect.orDie)

  // --- Summaries -----------------------------------------------------------------------------------------

  const aggregate = (input: {
    readonly subscriptionId: string
    readonly meter: string
    readonly usage: { readonly aggregation: UsageSummary["aggregation"] }
    readonly from: Date
    readonly to: Date
    readonly perHour: boolean
  }) =>
    rangePartials(sql, {
      subscriptionId: input.subscriptionId,
      meter: input.meter,
      from: input.from,
      to: input.to,
      distinct: input.usage.aggregation === "unique_count",
      last: input.usage.aggregation === "last",
      perHour: input.perHour
    })

  /** The subscription a summary is asked of: by id, or the customer's one metered subscription. */
  const summarized = (actor: AuthenticatedActor, params: UsageSummaryParams) =>
    Effect.gen(function* () {
      // The schema lets exactly one of the two through.
      const customerId = params.customerId
      if (customerId === undefined) return params.subscriptionId ?? ""
      // Another customer's subscriptions are as unknown to a shopper as missing ones.
      const all =
        actor.role === "customer" && customerId !== actor.customerId
          ? []
          : yield* subscriptionsOfCustomers(sql, [customerId])
      const resolved = meteredSubscriptionOf(all)
      return typeof resolved === "string" ? resolved : yield* Effect.fail(resolved)
    })

  const summary = (actor: AuthenticatedActor, params: UsageSummaryParams) =>
    Effect.gen(function* () {
      const subscriptionId = yield* summarized(actor, params)
      // Built only when answered: an error captures a stack trace.
      const notFound = () =>
        notFoundSubscription(params.customerId === undefined ? "subscriptionId" : "customerId")
      if (!Ids.isValid("sub", subscriptionId)) return yield* notFound()
      const sub = (yield* selectSubscriptions(sql, [subscriptionId], { lock: false })).get(subscriptionId)
      if (sub === undefined) return yield* notFound()
      if (actor.role === "customer" && sub.customerId !== actor.customerId) return yield* notFound()
      const usage = sub.usage
      if (usage === null)
        return yield* BadRequest.of({
          code: "parameter_invalid",
          message: "the subscription has no metered price",
          param: "subscriptionId"
        })
      if (params.meter !== undefined && params.meter !== usage.meter)
        return yield* BadRequest.of({
          code: "parameter_invalid",
          message: `meter must be the subscription's meter (${usage.meter})`,
          param: "meter"
        })
      const from = params.from ?? sub.currentPeriodStart
      const to = params.to ?? sub.currentPeriodEnd
      if (from.getTime() >= to.getTime())
        return yield* BadRequest.of({
          code: "parameter_invalid",
          message: `the range is empty: to must be after from (${from.toISOString()})`,
          param: params.to === undefined ? "from" : "to"
        })
      if (params.groupBy !== undefined && bucketCount(params.groupBy, from, to) > MAX_BUCKETS)
        return yield* BadRequest.of({
          code: "parameter_invalid",
          message: `groupBy=${params.groupBy} gives more than ${MAX_BUCKETS} buckets over this range: narrow it`,
          param: "groupBy"
        })
      const asOf = yield* clock.nowFor(sub.testClockId)
      const partials = yield* aggregate({
        subscriptionId: sub.id,
        meter: usage.meter,
        usage,
        from,
        to,
        perHour: params.groupBy !== undefined
      })
      const all = combineAll(partials)
      const quantity = quantityMicros(usage.aggregation, all)
      const priced = pricing(usage, quantity)
      const result: UsageSummary = {
        object: "usage_summary",
        subscriptionId: sub.id,
        customerId: sub.customerId,
        meter: usage.meter,
        aggregation: usage.aggregation,
        periodStart: from,
        periodEnd: to,
        quantity: numberOfMicros(quantity),
        includedUnits: usage.includedUnits,
        billableUnits: numberOfMicros(priced.billableMicros),
        unitAmount: usage.unitAmount,
        estimatedAmount: priced.estimatedAmount,
        currency: sub.currency,
        eventCount: all.count,
        ...(params.groupBy === undefined
          ? {}
          : {
              buckets: bucketsOf(params.groupBy, from, to, partials).map((b) => ({
                start: b.start,
                end: b.end,
                quantity: numberOfMicros(quantityMicros(usage.aggregation, b.partial)),
                eventCount: b.partial.count
              }))
            }),
        asOf
      }
      return result
    }).pipe(orDieUnlessHttp)

  const usage: UsageShape = { record, recordBatch, summary }
  return usage
})

const failedItem = (index: number, status: number, error: ErrorDetail): UsageBatchItem => ({
  index,
  status,
  error
})

export const UsageLive = Layer.scoped(Usage, makeUsage)

/** `UsageLedger.periodQuantity`: the same aggregate as `GET /v1/usage`, from the same rollups. */
export const makeUsageLedger = Effect.map(
  SqlClient.SqlClient,
  (sql): UsageLedgerShape => ({
    periodQuantity: (input): Effect.Effect<{ quantity: number; eventCount: number }, SqlError> =>
      Effect.map(
        rangePartials(sql, {
          subscriptionId: input.subscriptionId,
          meter: input.usage.meter,
          from: input.periodStart,
          to: input.periodEnd,
          distinct: input.usage.aggregation === "unique_count",
          last: input.usage.aggregation === "last",
          perHour: false
        }),
        (partials) => {
          const all = combineAll(partials)
          return {
            quantity: numberOfMicros(quantityMicros(input.usage.aggregation, all)),
            eventCount: all.count
          }
        }
      )
  })
)
