/**
 * The order decider, pure (issue #20 item 7): given/when/then examples of each command, and a
 * model-based property over random command sequences (fulfil, deliver, cancel, refund, refund
 * outcomes, capture): per line, fulfilled + refunded ≤ ordered; refunded (and refunds in flight)
 * ≤ captured; the three status axes always agree with each other and with the facts; every refusal
 * changes nothing.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Exit } from "effect"
import * as fc from "fast-check"
import {
  amountRefundable,
  amountRefunded,
  amountRefundPending,
  fulfillmentStatusOf,
  initialOrderState,
  type OrderCommand,
  type OrderState,
  paymentStatusOf,
  remainingOf,
  statusOf
} from "../../src/orders/decider.js"
import {
  FulfillmentCreated,
  OrderCancelled,
  type OrderEvent,
  OrderPaymentRefunded,
  OrderPlaced,
  OrderRefundFailed,
  OrderRefundStarted,
  OrderRefundSucceeded
} from "../../src/orders/events.js"
import { OrderDecider } from "../../src/orders/objects.js"
import { deciderSpec } from "../support/decider.js"

const ORDER = "ord_01jd4x8m6ffq2b3n5r7t9v1w3y"
const LINES = ["li_01jd4x8m6ffq2b3n5r7t9v1w30", "li_01jd4x8m6ffq2b3n5r7t9v1w31"] as const

const placed = (payment: "captured" | "authorized" | "not_required", total = 5000) =>
  OrderPlaced.make({
    orderId: ORDER,
    displayId: "1001",
    checkoutId: null,
    customerId: null,
    email: "a@example.com",
    currency: "USD",
    lineItems: [
      {
        lineItemId: LINES[0],
        productId: "prod_a",
        name: "A",
        sku: null,
        quantity: 3,
        unitAmount: 1000,
        amountTotal: 3000
      },
      {
        lineItemId: LINES[1],
        productId: "prod_b",
        name: "B",
        sku: null,
        quantity: 2,
        unitAmount: 1000,
        amountTotal: 2000
      }
    ],
    subtotal: total,
    total,
    shippingAddress: null,
    paymentIntentId: "pi_x",
    paymentId: "pay_x",
    payment,
    amountCaptured: payment === "captured" ? total : 0,
    metadata: {}
  })

const order = deciderSpec(OrderDecider)

describe("order decider: examples", () => {
  it("places once; a second placement decides nothing", () => {
    order.when({ _tag: "Place", data: placed("captured").data }).thenEvents([placed("captured")])
    order
      .given([placed("captured")])
      .when({ _tag: "Place", data: placed("captured").data })
      .thenEvents([])
  })

  it("fulfils what remains; more is refused with the line's index", () => {
    order
      .given([placed("captured")])
      .when({
        _tag: "Fulfill",
        fulfillmentId: "ful_1",
        items: [{ productId: "prod_b", quantity: 3 }],
        trackingNumber: null,
        trackingUrl: null,
        carrier: null
      })
      .thenFails({ _tag: "FulfillmentQuantityExceeded", index: 0, remaining: 2 })
    order
      .given([placed("authorized")])
      .when({
        _tag: "Fulfill",
        fulfillmentId: "f",
        items: undefined,
        trackingNumber: null,
        trackingUrl: null,
        carrier: null
      })
      .thenFails("OrderNotFulfillable")
  })

  it("refuses refunds of an authorization (cancel voids it) and beyond what is refundable", () => {
    const refund = (amount: number | undefined): OrderCommand => ({
      _tag: "Refund",
      refundId: "re_1",
      amount,
      reason: null,
      items: undefined,
      restock: false
    })
    order
      .given([placed("authorized")])
      .when(refund(undefined))
      .thenFails("OrderNotRefundable")
    order
      .given([placed("captured")])
      .when(refund(5001))
      .thenFails({ _tag: "RefundAmountTooLarge", field: "amount" })
  })

  it("found by a re-probe: cancel waits for a refund in flight; a void lost to the intent's cancel is recorded", () => {
    const pendingRefund = OrderRefundStarted.make({
      orderId: ORDER,
      refundId: "re_r",
      key: `${ORDER}:refund:re_r`,
      amount: 5000,
      reason: null,
      items: [],
      restock: false,
      void: false,
      cancels: false,
      cancellationReason: null
    })
    order
      .given([placed("captured"), pendingRefund])
      .when({ _tag: "Cancel", reason: null, refundId: "re_c" })
      .thenFails("OrderNotCancellable")
    // A pending order cancelled while its intent was canceled directly: the order's own void failed.
    const voidStarted = OrderRefundStarted.make({
      ...pendingRefund.data,
      refundId: "re_v",
      key: `${ORDER}:refund:re_v`,
      void: true
    })
    const lost = [
      placed("authorized"),
      OrderCancelled.make({ orderId: ORDER, reason: null }),
      voidStarted,
      OrderRefundFailed.make({ orderId: ORDER, refundId: "re_v", failureReason: "UnexpectedState" })
    ]
    const recorded = Effect.runSync(
      OrderDecider.decide(
        { _tag: "RecordVoid", refundId: "re_pv" },
        lost.reduce(OrderDecider.evolve, initialOrderState)
      )
    )
    expect(recorded.map((e) => e.type)).toEqual(["order.refund_started", "order.refund_succeeded"])
    const after = [...lost, ...recorded].reduce(OrderDecider.evolve, initialOrderState)
    expect({ status: statusOf(after), payment: paymentStatusOf(after) }).toEqual({
      status: "cancelled",
      payment: "voided"
    })
  })

  it("publishes order.fulfilled once a line refund completing the order succeeds, never while pending", () => {
    const shipB = FulfillmentCreated.make({
      orderId: ORDER,
      fulfillmentId: "ful_b",
      items: [{ lineItemId: LINES[1], quantity: 2 }],
      trackingNumber: null,
      trackingUrl: null,
      carrier: null
    })
    const lineRefund = OrderRefundStarted.make({
      orderId: ORDER,
      refundId: "re_l",
      key: `${ORDER}:refund:re_l`,
      amount: 3000,
      reason: null,
      items: [{ lineItemId: LINES[0], quantity: 3 }],
      restock: true,
      void: false,
      cancels: false,
      cancellationReason: null
    })
    const publicTypes = (history: ReadonlyArray<OrderEvent>, last: OrderEvent) => {
      const state = [...history, last].reduce(OrderDecider.evolve, initialOrderState)
      const recorded = {
        ...last,
        streamId: `order-${ORDER}`,
        streamVersion: history.length + 1,
        eventId: "evt",
        schemaVersion: 1,
        metadata: { actor: { type: "system" as const, id: "test" } },
        recordedAt: new Date(0)
      }
      return (OrderDecider.publicEvents?.(recorded, state) ?? []).map((p) => p.type)
    }
    const pending = [placed("captured"), shipB, lineRefund]
    expect(fulfillmentStatusOf(pending.reduce(OrderDecider.evolve, initialOrderState))).toBe(
      "partially_fulfilled"
    )
    expect(publicTypes([placed("captured"), shipB], lineRefund)).not.toContain("order.fulfilled")
    const succeeded = OrderRefundSucceeded.make({
      orderId: ORDER,
      refundId: "re_l",
      paymentRefundId: "re_p",
      amount: 3000,
      customerId: null
    })
    expect(publicTypes(pending, succeeded)).toContain("order.fulfilled")
  })

  it("a product on two lines: its units fill them in order when named by productId", () => {
    const twoLines = OrderPlaced.make({
      ...placed("captured").data,
      lineItems: placed("captured").data.lineItems.map((l) => ({ ...l, productId: "prod_a" }))
    })
    const fulfil = (quantity: number): OrderCommand => ({
      _tag: "Fulfill",
      fulfillmentId: "ful_1",
      items: [{ productId: "prod_a", quantity }],
      trackingNumber: null,
      trackingUrl: null,
      carrier: null
    })
    order
      .given([twoLines])
      .when(fulfil(4))
      .thenEvents([
        FulfillmentCreated.make({
          orderId: ORDER,
          fulfillmentId: "ful_1",
          items: [
            { lineItemId: LINES[0], quantity: 3 },
            { lineItemId: LINES[1], quantity: 1 }
          ],
          trackingNumber: null,
          trackingUrl: null,
          carrier: null
        })
      ])
    order.given([twoLines]).when(fulfil(6)).thenFails({ _tag: "FulfillmentQuantityExceeded", index: 0 })
  })

  it("cancelling a captured order refunds first: cancelled when the money is back, unchanged if refused", () => {
    const started = OrderRefundStarted.make({
      orderId: ORDER,
      refundId: "re_c",
      key: `${ORDER}:refund:re_c`,
      amount: 5000,
      reason: "requested_by_customer",
      items: [],
      restock: false,
      void: false,
      cancels: true,
      cancellationReason: "changed mind"
    })
    order
      .given([placed("captured")])
      .when({ _tag: "Cancel", reason: "changed mind", refundId: "re_c" })
      .thenEvents([started])
    // Asked again meanwhile: the first cancellation decides; nothing ships meanwhile.
    order
      .given([placed("captured"), started])
      .when({ _tag: "Cancel", reason: null, refundId: "re_d" })
      .thenEvents([])
    order
      .given([placed("captured"), started])
      .when({
        _tag: "Fulfill",
        fulfillmentId: "ful_1",
        items: undefined,
        trackingNumber: null,
        trackingUrl: null,
        carrier: null
      })
      .thenFails("OrderNotFulfillable")
    order
      .given([placed("captured"), started])
      .when({ _tag: "CompleteRefund", refundId: "re_c", paymentRefundId: "re_pay" })
      .thenEvents([
        OrderRefundSucceeded.make({
          orderId: ORDER,
          refundId: "re_c",
          paymentRefundId: "re_pay",
          amount: 5000,
          customerId: null
        }),
        OrderCancelled.make({ orderId: ORDER, reason: "changed mind" })
      ])
    const refused = [
      placed("captured"),
      started,
      OrderRefundFailed.make({ orderId: ORDER, refundId: "re_c", failureReason: "declined" })
    ]
    const state = refused.reduce(OrderDecider.evolve, initialOrderState)
    expect({
      status: statusOf(state),
      payment: paymentStatusOf(state),
      cancelledAt: state.cancelledAt
    }).toEqual({
      status: "confirmed",
      payment: "paid",
      cancelledAt: null
    })
  })

  it("records a refund made on the payment once; all of it back with nothing shipped cancels the order", () => {
    const external = (amount: number, n = 1): OrderCommand => ({
      _tag: "RecordPaymentRefund",
      refundId: `re_ord_${n}`,
      paymentRefundId: `re_pay_${n}`,
      amount,
      reason: "other"
    })
    const refunded = (amount: number, n = 1) =>
      OrderPaymentRefunded.make({
        orderId: ORDER,
        refundId: `re_ord_${n}`,
        paymentRefundId: `re_pay_${n}`,
        amount,
        reason: "other",
        customerId: null
      })
    order
      .given([placed("captured")])
      .when(external(1000))
      .thenEvents([refunded(1000)])
    // The same payment refund again (another report of it) changes nothing.
    order
      .given([placed("captured"), refunded(1000)])
      .when(external(1000))
      .thenEvents([])
    order
      .given([placed("captured"), refunded(1000)])
      .when(external(4000, 2))
      .thenEvents([refunded(4000, 2), OrderCancelled.make({ orderId: ORDER, reason: "refunded" })])
    const state = [placed("captured"), refunded(1000)].reduce(OrderDecider.evolve, initialOrderState)
    expect(paymentStatusOf(state)).toBe("partially_refunded")
    expect(statusOf(state)).toBe("confirmed")
    expect(amountRefundable(state)).toBe(4000)
  })
})

// --- The model-based property -------------------------------------------------------------------------

type Step =
  | {
      readonly kind: "fulfil"
      readonly line: number | null
      readonly quantity: number
      readonly tracked: boolean
    }
  | { readonly kind: "deliver"; readonly pick: number }
  | { readonly kind: "cancel" }
  | {
      readonly kind: "refund"
      readonly amount: number | null
      readonly line: number | null
      readonly quantity: number
    }
  | { readonly kind: "settle"; readonly pick: number; readonly ok: boolean }
  | { readonly kind: "capture" }
  | { readonly kind: "paymentRefund"; readonly amount: number | null }
  | { readonly kind: "paymentVoid" }

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    kind: fc.constant("fulfil" as const),
    line: fc.option(fc.integer({ min: 0, max: 1 })),
    quantity: fc.integer({ min: 1, max: 4 }),
    tracked: fc.boolean()
  }),
  fc.record({ kind: fc.constant("deliver" as const), pick: fc.nat(5) }),
  fc.record({ kind: fc.constant("cancel" as const) }),
  fc.record({
    kind: fc.constant("refund" as const),
    amount: fc.option(fc.integer({ min: 1, max: 6000 })),
    line: fc.option(fc.integer({ min: 0, max: 1 })),
    quantity: fc.integer({ min: 1, max: 3 })
  }),
  fc.record({ kind: fc.constant("settle" as const), pick: fc.nat(5), ok: fc.boolean() }),
  fc.record({ kind: fc.constant("capture" as const) }),
  fc.record({
    kind: fc.constant("paymentRefund" as const),
    amount: fc.option(fc.integer({ min: 1, max: 6000 }))
  })
)

/** What the payment still holds: captured less what it gave back (the order's pending refunds not yet asked). */
const heldByPayment = (s: OrderState) => s.amountPaid - amountRefunded(s)

const commandOf = (s: OrderState, st: Step, n: number): OrderCommand => {
  switch (st.kind) {
    case "fulfil":
      return {
        _tag: "Fulfill",
        fulfillmentId: `ful_${n}`,
        items: st.line === null ? undefined : [{ lineItemId: LINES[st.line], quantity: st.quantity }],
        trackingNumber: st.tracked ? `T${n}` : null,
        trackingUrl: null,
        carrier: null
      }
    case "deliver":
      return {
        _tag: "Deliver",
        fulfillmentId: s.fulfillments[st.pick % Math.max(1, s.fulfillments.length)]?.id ?? "ful_none"
      }
    case "cancel":
      return { _tag: "Cancel", reason: null, refundId: `re_${n}` }
    case "refund":
      return {
        _tag: "Refund",
        refundId: `re_${n}`,
        amount: st.amount ?? undefined,
        reason: null,
        items: st.line === null ? undefined : [{ lineItemId: LINES[st.line], quantity: st.quantity }],
        restock: false
      }
    case "settle": {
      const pending = s.refunds.filter((r) => r.status === "pending")
      const r = pending[st.pick % Math.max(1, pending.length)]
      const refundId = r?.id ?? "re_none"
      // The payment refuses a refund beyond what it holds (one made on it directly took the money).
      const fits = r === undefined || r.void || r.amount <= heldByPayment(s)
      return st.ok && fits
        ? { _tag: "CompleteRefund", refundId, paymentRefundId: `re_pay_${n}` }
        : { _tag: "FailRefund", refundId, failureReason: "declined" }
    }
    case "capture":
      return { _tag: "CapturePayment", amountCaptured: s.total, refundId: `re_capture_${n}` }
    case "paymentVoid":
      return { _tag: "RecordVoid", refundId: `re_void_${n}` }
    case "paymentRefund":
      // Made on the payment directly: never more than it holds (payments refuses the rest).
      return {
        _tag: "RecordPaymentRefund",
        refundId: `re_ext_${n}`,
        paymentRefundId: `re_pay_ext_${n}`,
        amount: Math.min(st.amount ?? heldByPayment(s), heldByPayment(s)),
        reason: null
      }
  }
}

const invariants = (s: OrderState) => {
  for (const l of s.lineItems) {
    expect(l.fulfilledQuantity).toBeGreaterThanOrEqual(0)
    expect(l.refundedQuantity).toBeGreaterThanOrEqual(0)
    expect(l.fulfilledQuantity + l.refundedQuantity).toBeLessThanOrEqual(l.quantity)
    expect(remainingOf(l)).toBeGreaterThanOrEqual(0)
  }
  // Money given back never exceeds what was captured. Refunds in flight fit beside it — unless one
  // made on the payment directly took their money first (the payment then refuses them).
  expect(amountRefunded(s)).toBeLessThanOrEqual(s.amountPaid)
  const external = s.refunds.some((r) => r.key.startsWith("payment:"))
  if (!external) expect(amountRefunded(s) + amountRefundPending(s)).toBeLessThanOrEqual(s.amountPaid)
  expect(amountRefundable(s)).toBe(Math.max(0, s.amountPaid - amountRefunded(s) - amountRefundPending(s)))
  expect(s.amountPaid).toBeLessThanOrEqual(s.total)
  const status = statusOf(s)
  const payment = paymentStatusOf(s)
  const fulfilment = fulfillmentStatusOf(s)
  // The axes agree with each other.
  if (status === "pending") expect(payment).toBe("authorized")
  if (status === "refunded") {
    expect(payment).toBe("refunded")
    expect(fulfilment).not.toBe("unfulfilled")
  }
  if (status === "confirmed") expect(fulfilment).toBe("unfulfilled")
  if (status === "partially_fulfilled") expect(fulfilment).toBe("partially_fulfilled")
  if (status === "fulfilled") expect(["fulfilled", "delivered"]).toContain(fulfilment)
  if (payment === "refunded" && fulfilment === "unfulfilled") expect(status).toBe("cancelled")
  if (status === "cancelled") expect(s.lineItems.every((l) => l.fulfilledQuantity === 0)).toBe(true)
  if (payment === "voided") expect(status).toBe("cancelled")
  // Cancelled by refunds only once all that was paid is back: a refused refund cancels nothing.
  if (s.cancellationReason === "refunded") expect(amountRefunded(s)).toBe(s.amountPaid)
  if (fulfilment === "delivered") expect(s.fulfillments.every((f) => f.status === "delivered")).toBe(true)
}

describe("order decider: model-based property", () => {
  it("quantities, amounts and status axes stay consistent over random command sequences", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("captured" as const, "authorized" as const, "not_required" as const),
        fc.array(step, { maxLength: 40 }),
        (payment, steps) => {
          let state = OrderDecider.evolve(
            initialOrderState,
            placed(payment, payment === "not_required" ? 0 : 5000)
          )
          invariants(state)
          steps.forEach((st, n) => {
            const exit = Effect.runSyncExit(OrderDecider.decide(commandOf(state, st, n), state))
            if (Exit.isFailure(exit)) return // a refusal changes nothing
            const events: ReadonlyArray<OrderEvent> = exit.value
            const before = state
            state = events.reduce(OrderDecider.evolve, state)
            invariants(state)
            // Once cancelled or fully refunded, nothing ships any more.
            if (statusOf(before) === "cancelled")
              expect(state.lineItems.map((l) => l.fulfilledQuantity)).toEqual(
                before.lineItems.map((l) => l.fulfilledQuantity)
              )
          })
        }
      ),
      { numRuns: 500 }
    )
  })

  it("a refusal is a typed domain error, never a defect", () => {
    fc.assert(
      fc.property(fc.array(step, { maxLength: 30 }), (steps) => {
        let state = OrderDecider.evolve(initialOrderState, placed("captured"))
        steps.forEach((st, n) => {
          const result = Effect.runSync(Effect.either(OrderDecider.decide(commandOf(state, st, n), state)))
          if (Either.isRight(result)) state = result.right.reduce(OrderDecider.evolve, state)
        })
      }),
      { numRuns: 200 }
    )
  })
})
