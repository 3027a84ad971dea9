/**
 * The orders port (`OrdersPort` in `index.ts`): what checkout completion (and payments' capture
 * flow) run inside their own transaction.
 *
 * `place` looks for the order first (placed already: answered as it is, nothing drawn), then draws
 * the next display id by updating the counter row — whose row lock queues concurrent placements until
 * the drawing transaction ends, so two orders never draw one number — and appends the order at
 * version 0, right after: the lock is held only for the append and the commit. A placement that rolls
 * back gives its number back, so the numbers have no gaps (a PostgreSQL sequence would leave one per
 * rollback). Two placements of ONE order racing past the first look both draw; the second's append
 * at version 0 then fails (WrongExpectedVersion), its transaction rolls back (the number with it)
 * and is retried — by `transact` when the port owns it, else by the caller's owner — and answers
 * the order the first one placed.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Option } from "effect"
import type { AppConfig } from "../config.js"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { shredded } from "../eventstore/EventType.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import { type PaymentRefundSummary, refundIdFor } from "../payments/index.js"
import type { DueWork } from "../processors/DueWork.js"
import {
  isOrderError,
  type OrderError,
  type OrderState,
  orderStream,
  type PlaceData,
  shipsNothingMore
} from "./decider.js"
import { OrdersPort, type PlaceOrderInput } from "./index.js"
import { OrderDecider, orderObject } from "./objects.js"
import { selectOrder } from "./queries.js"
import { armRefund } from "./refunds.js"

const COUNTERS = "orders.counters"
const DISPLAY_ID = "display_id"

/** Deterministic line item ids: a replayed placement names its lines the same. */
export const lineItemId = (orderId: string, index: number) =>
  Ids.derive("li", `${orderId}:line:${index}`, Ids.timestampOf("ord", orderId) ?? 0)

/** The refund giving back a capture that landed after the order's cancellation (one per order). */
const captureRefundId = (orderId: string) =>
  Ids.derive("re", `${orderId}:capture-after-cancel`, Ids.timestampOf("ord", orderId) ?? 0)

/** The void recorded when an order's authorization was canceled on the payment directly. */
const voidRefundId = (orderId: string) =>
  Ids.derive("re", `${orderId}:payment-canceled`, Ids.timestampOf("ord", orderId) ?? 0)

/** The order's id for a refund made on its payment directly: recording it again finds it. */
export const paymentRefundOrderId = (orderId: string, paymentRefundId: string) =>
  Ids.derive("re", `${orderId}:payment-refund:${paymentRefundId}`, Ids.timestampOf("ord", orderId) ?? 0)

/** A placement's input is built by checkout from its own checked state: a bad one is a bug. */
const inputProblem = (input: PlaceOrderInput): string | undefined => {
  if (!Ids.isValid("ord", input.orderId)) return `orderId ${input.orderId} is not an ord_ id`
  if (input.lineItems.length === 0) return "an order needs at least one line"
  for (const l of input.lineItems) {
    if (!Number.isSafeInteger(l.quantity) || l.quantity < 1) return `line quantity ${l.quantity}`
    if (!Number.isSafeInteger(l.unitAmount) || l.unitAmount < 0) return `line unitAmount ${l.unitAmount}`
    if (l.amountTotal !== l.unitAmount * l.quantity) return `line amountTotal ${l.amountTotal}`
  }
  if (!/^[A-Z]{3}$/.test(input.currency)) return `currency ${input.currency}`
  if (!Number.isSafeInteger(input.total) || input.total < 0) return `total ${input.total}`
  if (input.payment === "captured" && input.amountCaptured <= 0) return "a captured payment of nothing"
  return undefined
}

const placeData = (input: PlaceOrderInput, displayId: string): PlaceData => ({
  orderId: input.orderId,
  displayId,
  checkoutId: input.checkoutId,
  customerId: input.customerId,
  email: input.email,
  currency: input.currency,
  lineItems: input.lineItems.map((l, i) => ({
    lineItemId: lineItemId(input.orderId, i),
    productId: l.productId,
    name: l.name,
    sku: l.sku,
    quantity: l.quantity,
    unitAmount: l.unitAmount,
    amountTotal: l.amountTotal
  })),
  subtotal: input.subtotal,
  total: input.total,
  shippingAddress: input.shippingAddress,
  paymentIntentId: input.paymentIntentId,
  paymentId: input.paymentId,
  payment: input.payment,
  amountCaptured: input.payment === "captured" ? input.amountCaptured : 0,
  metadata: input.metadata
})

/** The decider's refusals cannot come from the port's commands (placing and capturing never refuse). */
export const dieOnRefusal = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, Extract<E, OrderError>>, R> =>
  Effect.catchIf(
    effect,
    (e): e is Extract<E, OrderError> => isOrderError(e),
    (e) => Effect.die(e)
  )

export const makeOrdersPort = Effect.gen(function* () {
  const runner = yield* CommandRunner
  const sql = yield* SqlClient.SqlClient
  const infra = yield* Effect.context<DueWork | AppConfig>()

  const place = (input: PlaceOrderInput, metadata: EventMetadata) =>
    runner.transact(
      Effect.gen(function* () {
        const problem = inputProblem(input)
        if (problem !== undefined) return yield* Effect.dieMessage(`OrdersPort.place: ${problem}`)
        const existing = yield* runner.load(OrderDecider, orderStream(input.orderId))
        if (existing.state.exists) return orderObject(existing.state)
        const drawn = yield* sql<{ readonly value: string }>`UPDATE ${sql(COUNTERS)} SET value = value + 1
          WHERE name = ${DISPLAY_ID} RETURNING value::text AS value`
        const displayId = drawn[0]?.value
        if (displayId === undefined) return yield* Effect.dieMessage("the display-id counter row is missing")
        const placing = (data: PlaceData) =>
          runner.execute(
            OrderDecider,
            orderStream(input.orderId),
            { _tag: "Place", data },
            { metadata, newStream: true }
          )
        const data = placeData(input, displayId)
        const result = yield* placing(data).pipe(
          // The customer was erased after their checkout began and its payment came later: the
          // order is placed all the same (the money is taken), anonymized from the start like
          // their other orders (spec §4.2 rule 1) — no personal data can be kept for them.
          Effect.catchTag("SubjectForgotten", () =>
            placing({ ...data, email: shredded, shippingAddress: shredded, metadata: shredded })
          )
        )
        return orderObject(result.state)
      })
    )

  const find = (orderId: string) =>
    Ids.isValid("ord", orderId) ? selectOrder(sql, orderId) : Effect.succeed(Option.none())

  const recordCapture = (orderId: string, amountCaptured: number, metadata: EventMetadata) =>
    Effect.gen(function* () {
      const result = yield* runner.execute(
        OrderDecider,
        orderStream(orderId),
        { _tag: "CapturePayment", amountCaptured, refundId: captureRefundId(orderId) },
        { metadata }
      )
      // The order was cancelled before the capture landed: the refund giving it back is due at once
      // (the orders-refunds worker makes the payments call, outside this transaction).
      const refund = result.state.refunds.find(
        (r) => r.id === captureRefundId(orderId) && r.status === "pending"
      )
      if (result.events.some((e) => e.type === "order.refund_started") && refund !== undefined)
        yield* armRefund(orderId, refund, { now: true }).pipe(Effect.provide(infra))
    }).pipe(Effect.catchTag("OrderNotFound", () => Effect.void))

  /** The order's own refunds: recorded already, or asked for by the order under their key. */
  const isKnown = (state: OrderState, refund: PaymentRefundSummary) =>
    state.refunds.some(
      (r) =>
        r.paymentRefundId === refund.refundId ||
        (state.paymentId !== null && refundIdFor(state.paymentId, r.key) === refund.refundId)
    )

  const recordPaymentRefunds = (
    orderId: string,
    refunds: ReadonlyArray<PaymentRefundSummary>,
    metadata: EventMetadata
  ) =>
    Effect.gen(function* () {
      let { state } = yield* runner.load(OrderDecider, orderStream(orderId))
      let recorded = false
      for (const refund of refunds) {
        if (!state.exists || refund.status !== "succeeded" || refund.paymentId !== state.paymentId) continue
        if (isKnown(state, refund)) continue
        const result = yield* runner.execute(
          OrderDecider,
          orderStream(orderId),
          {
            _tag: "RecordPaymentRefund",
            refundId: paymentRefundOrderId(orderId, refund.refundId),
            paymentRefundId: refund.refundId,
            amount: refund.amount,
            reason: refund.reason
          },
          { metadata }
        )
        state = result.state
        recorded ||= result.events.length > 0
      }
      return { releaseHold: recorded && shipsNothingMore(state) }
    })

  const recordVoid = (orderId: string, metadata: EventMetadata) =>
    Effect.map(
      runner.execute(
        OrderDecider,
        orderStream(orderId),
        { _tag: "RecordVoid", refundId: voidRefundId(orderId) },
        { metadata }
      ),
      (result) => ({ releaseHold: result.events.length > 0 && shipsNothingMore(result.state) })
    ).pipe(Effect.catchTag("OrderNotFound", () => Effect.succeed({ releaseHold: false })))

  return OrdersPort.of({
    place: (input, metadata) => dieOnRefusal(place(input, metadata)),
    find,
    recordCapture: (orderId, amount, metadata) => dieOnRefusal(recordCapture(orderId, amount, metadata)),
    recordPaymentRefunds: (orderId, refunds, metadata) =>
      dieOnRefusal(recordPaymentRefunds(orderId, refunds, metadata)),
    recordVoid: (orderId, metadata) => dieOnRefusal(recordVoid(orderId, metadata))
  })
})

export const OrdersPortLive = Layer.effect(OrdersPort, makeOrdersPort)
