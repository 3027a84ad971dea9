/**
 * Billing's due workers (`ROLE=worker|all`), the shape of checkout/expiry.ts: `billing.renew` comes
 * due at a subscription's `currentPeriodEnd` (a trial's end included), `billing.retry` at a dunning
 * attempt's time, `billing.expire_incomplete` 23 h after an unpaid creation. Durable and Clock-driven:
 * items live in `processors.due_work`, claimed `FOR UPDATE SKIP LOCKED` under a lease, so two workers
 * never run one item at once and a crashed worker's item is run again (the handlers are idempotent).
 * Under load, the renewals of a claimed batch share one transaction, and their recorded answers
 * another.
 *
 * `BillingDueWorkLive` is the same handler for one item a test clock's advance claimed (kinds
 * `<kind>@<testClockId>`), with its outcome recorded as `dueWorker` records it.
 */
import { SqlClient } from "@effect/sql"
import { type Cause, Effect, Exit, Layer } from "effect"
import { isConcurrencyConflict } from "../kernel/CommandRunner.js"
import { addDuration, now } from "../kernel/Time.js"
import { type DueItem, DueOutcome, DueWork, dueWorker } from "../processors/DueWork.js"
import {
  BILLING_KINDS,
  Billing,
  type BillingShape,
  baseKindOf,
  RENEW_KIND,
  subscriptionIdOf
} from "./Billing.js"
import { BillingDueWork } from "./contract.js"
import { withSubscriptionsLocked } from "./queries.js"

type Renewal = Parameters<BillingShape["handleDue"]>[1]

/**
 * A claimed batch's `billing.renew` items renewed in one transaction (`prepare`), each handler then
 * going on from its own renewal (the processor call and its record). When that transaction fails,
 * nothing is kept and each handler renews on its own, as without a batch.
 */
const makeRenewalBatcher = () => {
  // By claim: an item's renewal is taken by its handler, which runs after `prepare` of its batch.
  const renewed = new Map<string, Renewal>()
  const prepare = (items: ReadonlyArray<DueItem>) =>
    Effect.gen(function* () {
      const bySubscription = new Map<string, DueItem>()
      for (const item of items) {
        const subscriptionId = subscriptionIdOf(item)
        if (baseKindOf(item.kind) === RENEW_KIND && !bySubscription.has(subscriptionId))
          bySubscription.set(subscriptionId, item)
      }
      if (bySubscription.size < 2) return
      const billing = yield* Billing
      const renewals = yield* billing.renewTogether([...bySubscription.keys()])
      for (const [subscriptionId, item] of bySubscription) {
        const renewal = renewals.get(subscriptionId)
        if (renewal !== undefined) renewed.set(item.id, renewal)
      }
    }).pipe(
      Effect.catchAllCause((cause) =>
        Effect.logDebug("billing: a batch of renewals failed together; each runs on its own", cause)
      )
    )
  const handle = (item: DueItem) =>
    Effect.flatMap(Billing, (billing) => {
      const renewal = renewed.get(item.id)
      renewed.delete(item.id)
      return billing.handleDue(item, renewal)
    })
  return { prepare, handle }
}

type BatchedRecord = NonNullable<Effect.Effect.Success<ReturnType<BillingShape["handleDue"]>>["batched"]>

/**
 * The batched records of renewal outcomes, in the caller's transaction: their subscriptions' rows
 * locked first, in id order, by one statement; then their writes side by side (on a PostgreSQL
 * server their statements share the transaction's round trips).
 */
export const recordRenewalsTogether = (batch: ReadonlyArray<BatchedRecord>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    withSubscriptionsLocked(
      sql,
      batch.map((b) => b.subscriptionId),
      Effect.forEach(batch, (b) => b.writes, { discard: true, concurrency: "unbounded" })
    )
  )

/**
 * A renewal's outcome carries the record of its processor answer and its invoice's outcome: the
 * worker commits those of the renewals that finished meanwhile together with their completions, in
 * one transaction (one BEGIN/COMMIT and one WAL flush for many; `recordRenewalsTogether`). Each
 * claim is one worker's, so two such transactions hardly ever share a row, and should they wait on
 * each other crosswise, the server's deadlock detection fails one and its outcomes are recorded one
 * by one (dueWorker's fallback).
 */
export const billingRenewals = () => {
  const batcher = makeRenewalBatcher()
  return dueWorker({
    name: "billing-renewals",
    kinds: BILLING_KINDS,
    concurrency: 32,
    maxAttempts: 50,
    prepare: batcher.prepare,
    handle: batcher.handle,
    recordBatched: recordRenewalsTogether
  })
}

export const BillingDueWorkLive = Layer.effect(
  BillingDueWork,
  Effect.gen(function* () {
    const billing = yield* Billing
    const work = yield* DueWork
    return BillingDueWork.of({
      kinds: BILLING_KINDS,
      process: (item) =>
        Effect.gen(function* () {
          // As dueWorker does: an unexpected failure is retried later, never lost — the handler's, or
          // its outcome's writes' (a race lost again and again: the item runs again, they did not).
          const retryLater = (cause: Cause.Cause<unknown>) =>
            Effect.map(now, (at) =>
              DueOutcome.retry({ at: addDuration(at, "1 second"), error: String(cause).slice(0, 500) })
            )
          const outcome = yield* billing.handleDue(item).pipe(Effect.catchAllCause(retryLater))
          const recorded = yield* Effect.exit(
            work.complete(item, outcome).pipe(Effect.retry({ times: 3, while: isConcurrencyConflict }))
          )
          if (Exit.isSuccess(recorded)) return outcome._tag
          const later = yield* retryLater(recorded.cause)
          yield* work.complete(item, later)
          return later._tag
        }),
      // A subscription the clock's customers hold is found, locked and canceled from a state that
      // allows it: a refusal here is a bug, not an outcome.
      clockDeleted: (testClockId, metadata) =>
        Effect.catchAll(billing.clockDeleted(testClockId, metadata), (error) =>
          error._tag === "SqlError" ? Effect.fail(error) : Effect.die(error)
        )
    })
  })
)
