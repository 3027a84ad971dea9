/**
 * Giving money back for an order: a refund (or, for a payment only authorized, a void) in three
 * steps, as the payments context brackets its processor calls (design/FLOWS.md "Outside calls"):
 *
 *   1. the order records its intent (`order.refund_started`, with the key the payment call will
 *      carry) in the transaction that decides it — the amount counts against what is refundable from
 *      then on, so concurrent refunds never exceed what was captured — and arms a due-work item;
 *   2. outside any transaction, the payments port is asked (`refund` with that key, or `cancel`);
 *   3. the outcome is recorded on the order (`order.refund_succeeded` / `order.refund_failed`) and the
 *      item disarmed, in one transaction.
 *
 * A crash between 2 and 3 (or a payments call that did not answer) leaves the item armed: when it
 * comes due the worker asks again with the SAME key — the payments port answers the refund it
 * already made (its refund id derives from the key) and moves no money twice — and records that.
 */
import type { SqlClient } from "@effect/sql"
import { Duration, Effect, Option } from "effect"
import { CatalogPort } from "../catalog/index.js"
import { AppConfig } from "../config.js"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Time from "../kernel/Time.js"
import { PaymentsPort } from "../payments/index.js"
import { type DueItem, DueOutcome, DueWork, dueWorker } from "../processors/DueWork.js"
import type { Processor } from "../processors/Supervisor.js"
import {
  type OrderCommand,
  type OrderState,
  orderStream,
  type RefundState,
  shipsNothingMore
} from "./decider.js"
import type { LineQuantity, OrderEvent } from "./events.js"
import { OrderDecider } from "./objects.js"
import { dieOnRefusal } from "./port.js"

export const REFUND_KIND = "orders.refund"

/** The catalog lines of some line items of an order (its products and units). */
export const catalogLines = (state: OrderState, items: ReadonlyArray<LineQuantity>) =>
  items.flatMap((i) => {
    const line = state.lineItems.find((l) => l.id === i.lineItemId)
    return line === undefined || i.quantity <= 0 ? [] : [{ productId: line.productId, quantity: i.quantity }]
  })

/**
 * The stock an order's change moves once money came back (in the caller's transaction): the units
 * of a line refund that succeeded leave the order's hold (and are back on the shelf with `restock`,
 * else written off) — unless the order was cancelled before, which released them already — and an
 * order that can ship nothing more (cancelled, or refunded in full) releases what it still holds.
 */
export const moveRefundedStock = (
  orderId: string,
  result: { readonly state: OrderState; readonly events: ReadonlyArray<OrderEvent> },
  metadata: EventMetadata
) =>
  Effect.gen(function* () {
    if (result.events.length === 0) return
    const catalog = yield* CatalogPort
    const cancelledNow = result.events.some((e) => e.type === "order.cancelled")
    for (const e of result.events) {
      if (e.type !== "order.refund_succeeded" || (result.state.cancelledAt !== null && !cancelledNow))
        continue
      const refund = result.state.refunds.find((r) => r.id === e.data.refundId)
      if (refund === undefined || refund.items.length === 0) continue
      const lines = catalogLines(result.state, refund.items)
      yield* catalog.consume(orderId, { key: `${refund.id}:out`, lines }, metadata).pipe(
        // Units the order did not hold (an order placed without a hold, or drawn down meanwhile):
        // the money is back whatever the shelf says; nothing else is written off.
        Effect.catchTag("InsufficientStock", (e) =>
          Effect.logWarning(`orders: refund ${refund.id} of ${orderId} found its units no longer held`, e)
        ),
        Effect.catchTag("ReservationLineInvalid", Effect.die)
      )
      if (refund.restock) yield* catalog.restock(orderId, { key: `${refund.id}:back`, lines }, metadata)
    }
    if (shipsNothingMore(result.state)) yield* catalog.release(orderId, metadata)
  })

/**
 * Step 3's order change (in the caller's transaction): the outcome on the order, and the stock it
 * moves (`moveRefundedStock`).
 */
export const recordRefundOutcome = (orderId: string, outcome: OrderCommand, metadata: EventMetadata) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const result = yield* runner.execute(OrderDecider, orderStream(orderId), outcome, { metadata })
    yield* moveRefundedStock(orderId, result, metadata)
    return result
  })

const RECOVERER: EventMetadata = { actor: { type: "system", id: "orders-refunds" } }

/** When a payments call that did not answer is tried again. */
const RETRY_UNANSWERED = Duration.seconds(30)

/** The outcome command of a payment call, or none when it did not answer (the worker asks again). */
export const payRefund = (state: OrderState, refund: RefundState) =>
  Effect.gen(function* () {
    const payments = yield* PaymentsPort
    const fail = (failureReason: string): Option.Option<OrderCommand> =>
      Option.some({ _tag: "FailRefund", refundId: refund.id, failureReason })
    if (refund.void) {
      if (state.paymentIntentId === null) return fail("the order has no payment intent")
      const voided = yield* Effect.either(
        payments.cancel(state.paymentIntentId, "requested_by_customer", RECOVERER)
      )
      if (voided._tag === "Right")
        return voided.right.status === "canceled"
          ? Option.some<OrderCommand>({ _tag: "CompleteRefund", refundId: refund.id, paymentRefundId: null })
          : Option.none()
      switch (voided.left._tag) {
        case "PaymentIntentNotFound":
        case "UnexpectedState":
          return fail(`the authorization could not be voided (${voided.left._tag})`)
        default:
          yield* Effect.logWarning(`orders: void of ${refund.key} unanswered`, voided.left)
          return Option.none()
      }
    }
    if (state.paymentId === null) return fail("the order has no payment")
    const refunded = yield* Effect.either(
      payments.refund(
        state.paymentId,
        { amount: refund.amount, reason: refund.reason, key: refund.key },
        RECOVERER
      )
    )
    if (refunded._tag === "Right") {
      const r = refunded.right
      if (r.status === "succeeded")
        return Option.some<OrderCommand>({
          _tag: "CompleteRefund",
          refundId: refund.id,
          paymentRefundId: r.id
        })
      if (r.status === "failed") return fail(r.failureReason ?? "the processor refused the refund")
      return Option.none()
    }
    switch (refunded.left._tag) {
      case "PaymentNotFound":
      case "ChargeNotRefundable":
      case "ChargeAlreadyRefunded":
      case "AmountTooLarge":
        return fail(`the payment refused the refund (${refunded.left._tag})`)
      default:
        yield* Effect.logWarning(`orders: refund ${refund.key} unanswered`, refunded.left)
        return Option.none()
    }
  })

/**
 * Step 1's safety net: armed with the refund's start, disarmed with its outcome. `now`: a refund no
 * request will pay (started inside another context's transaction), due at once for the worker.
 */
export const armRefund = (orderId: string, refund: RefundState, options: { readonly now?: boolean } = {}) =>
  Effect.gen(function* () {
    const work = yield* DueWork
    const config = yield* AppConfig
    const dueAt = options.now
      ? yield* Time.now
      : yield* Time.fromNow(Duration.seconds(config.payments.recoveryAfterSeconds))
    yield* work.schedule({
      kind: REFUND_KIND,
      key: refund.key,
      dueAt,
      payload: { orderId, refundId: refund.id }
    })
  })

const payloadOf = (item: DueItem): { readonly orderId: string; readonly refundId: string } | undefined => {
  const p = item.payload
  return typeof p === "object" && p !== null && "orderId" in p && "refundId" in p
    ? { orderId: String(p.orderId), refundId: String(p.refundId) }
    : undefined
}

/** The worker's handling of an item that came due: the payments call again, then its record. */
export const handleRefund = (item: DueItem) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const payload = payloadOf(item)
    if (payload === undefined) return DueOutcome.failed({ error: "no orderId/refundId in the payload" })
    const stream = orderStream(payload.orderId)
    const { state } = yield* runner.load(OrderDecider, stream)
    const refund = state.refunds.find((r) => r.id === payload.refundId)
    // Recorded meanwhile: the request was slower than the safety net, nothing is left to do.
    if (refund === undefined || refund.status !== "pending") return DueOutcome.done()
    const outcome = yield* payRefund(state, refund)
    if (Option.isNone(outcome))
      return DueOutcome.retry({ at: yield* Time.fromNow(RETRY_UNANSWERED), error: "payments did not answer" })
    yield* Effect.logInfo(`orders: recovered refund ${refund.key} (${outcome.value._tag})`)
    return DueOutcome.done({
      inTransaction: Effect.asVoid(
        dieOnRefusal(recordRefundOutcome(payload.orderId, outcome.value, RECOVERER))
      )
    })
  })

/** The worker (`ROLE=worker|all`). */
export const refundRecovery = (): Processor<
  SqlClient.SqlClient | AppConfig | CommandRunner | DueWork | PaymentsPort | CatalogPort
> => ({
  name: "orders-refunds",
  run: dueWorker({
    name: "orders-refunds",
    kinds: [REFUND_KIND],
    concurrency: 4,
    maxAttempts: 50,
    handle: handleRefund
  }).run
})
