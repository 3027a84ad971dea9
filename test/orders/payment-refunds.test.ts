/**
 * Refunds made on an order's payment directly (`POST /v1/payments/:id/refund`, not through the
 * order): the checkout-completion flow records each on the order it paid (`order.payment_refunded`),
 * once — its amount refunded, payment status and status, its stock hold when that cancels it, the
 * customer's `totalSpent` and the `order.refunded` notification event — and the order's own refunds,
 * which payments reports too, are never counted twice. Under a storm of refunds on both routes the
 * order's books end equal to the payment's, never above what was captured.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { checkoutCompletion } from "../../src/flows/checkoutCompletion.js"
import { refundRecovery } from "../../src/orders/refunds.js"
import { processorCallRecovery } from "../../src/payments/recovery.js"
import { checkoutOrder, type Json, stockOf } from "../support/checkout.js"
import { getCustomer, registeredShopper } from "../support/customers.js"
import { usingRealPostgres } from "../support/database.js"
import { call } from "../support/identity.js"
import { fastRecoveryHttp, orderWhen, publicEventsOf } from "../support/orders.js"
import { ok, staffToken } from "../support/payments.js"

const PROCESSORS = [checkoutCompletion(), processorCallRecovery(), refundRecovery()]

const refundPayment = (token: string, paymentId: string, json: Record<string, unknown> = {}) =>
  call("POST", `/v1/payments/${paymentId}/refund`, { token, json })

layer(fastRecoveryHttp(PROCESSORS), { excludeTestServices: true, timeout: 180_000 })(
  "refunds made on an order's payment",
  (it) => {
    it.effect(
      "a partial one: amountRefunded, partially_refunded, totalSpent; the order refunds only the rest",
      () =>
        Effect.gen(function* () {
          const token = yield* staffToken
          const shopper = yield* registeredShopper()
          const { order } = yield* checkoutOrder(token, { customerId: shopper.customerId })
          expect(order).toMatchObject({ status: "confirmed", amountPaid: 3998, amountRefunded: 0 })
          expect((yield* getCustomer(token, shopper.customerId)).totalSpent).toBe(3998)

          const refund = ok(200)(
            yield* refundPayment(token, order.paymentId, { amount: 1000, reason: "other" })
          )
          expect(refund.status).toBe("succeeded")
          const after = yield* orderWhen(token, order.id, (o) => o.amountRefunded === 1000)
          expect(after).toMatchObject({
            status: "confirmed",
            paymentStatus: "partially_refunded",
            amountRefundable: 2998
          })
          expect(after.refunds).toEqual([
            expect.objectContaining({
              status: "succeeded",
              amount: 1000,
              reason: "other",
              paymentRefundId: refund.id
            })
          ])
          expect(after.refunds[0].id).toMatch(/^re_/)
          expect(after.refunds[0].id).not.toBe(refund.id)
          expect((yield* getCustomer(token, shopper.customerId)).totalSpent).toBe(2998)
          const events = (yield* publicEventsOf(order.id)).map((e) => e.type)
          expect(events.filter((t) => t === "order.refunded")).toHaveLength(1)

          // The order now refunds at most what the payment still holds.
          const tooMuch = yield* call("POST", `/v1/orders/${order.id}/refund`, {
            token,
            json: { amount: 2999 }
          })
          expect(tooMuch.status, tooMuch.text).toBe(400)
          expect(tooMuch.body.error.param).toBe("amount")
          const own = ok(200)(
            yield* call("POST", `/v1/orders/${order.id}/refund`, { token, json: { amount: 1000 } })
          )
          expect(own).toMatchObject({ amountRefunded: 2000, paymentStatus: "partially_refunded" })
          // Payments reports the order's own refund too: the flow counts it once. Another refund on the
          // payment after it, once recorded, shows the flow has read past it.
          ok(200)(yield* refundPayment(token, order.paymentId, { amount: 500 }))
          const three = yield* orderWhen(token, order.id, (o) => o.refunds.length === 3)
          expect(three.amountRefunded).toBe(2500)
          expect(three.refunds.map((r: Json) => r.amount)).toEqual([1000, 1000, 500])
          const rest = ok(200)(yield* call("POST", `/v1/orders/${order.id}/refund`, { token, json: {} }))
          expect(rest).toMatchObject({ amountRefunded: 3998, paymentStatus: "refunded", status: "cancelled" })
          const payment = ok(200)(yield* call("GET", `/v1/payments/${order.paymentId}`, { token }))
          expect(payment.amountRefunded).toBe(3998)
          expect((yield* getCustomer(token, shopper.customerId)).totalSpent).toBe(0)
        })
    )

    it.effect("a full one of an order that shipped nothing cancels it and releases its stock hold", () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const { product, order } = yield* checkoutOrder(token, { stock: 5, quantity: 2 })
        expect(yield* stockOf(token, product.id)).toEqual({ stocked: 5, reserved: 2, available: 3 })
        ok(200)(yield* refundPayment(token, order.paymentId))
        const after = yield* orderWhen(token, order.id, (o) => o.status === "cancelled")
        expect(after).toMatchObject({
          paymentStatus: "refunded",
          amountRefunded: 3998,
          amountRefundable: 0,
          cancellationReason: "refunded"
        })
        expect(yield* stockOf(token, product.id)).toEqual({ stocked: 5, reserved: 0, available: 5 })
        const events = (yield* publicEventsOf(order.id)).map((e) => e.type)
        expect(events).toContain("order.cancelled")
        expect(events).toContain("order.refunded")
        // The order's own routes agree: nothing left to refund, nothing to cancel.
        const again = yield* call("POST", `/v1/orders/${order.id}/refund`, { token, json: {} })
        expect(again.status, again.text).toBe(409)
        const cancel = yield* call("POST", `/v1/orders/${order.id}/cancel`, { token, json: {} })
        expect(cancel.status, cancel.text).toBe(409)
      })
    )

    it.effect("a full one of a shipped order → refunded; the shipped units stay shipped", () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const { product, order } = yield* checkoutOrder(token, { stock: 5, quantity: 2 })
        ok(200)(yield* call("POST", `/v1/orders/${order.id}/fulfill`, { token, json: {} }))
        ok(200)(yield* refundPayment(token, order.paymentId))
        const after = yield* orderWhen(token, order.id, (o) => o.paymentStatus === "refunded")
        expect(after).toMatchObject({ status: "refunded", fulfillmentStatus: "fulfilled", cancelledAt: null })
        expect(yield* stockOf(token, product.id)).toEqual({ stocked: 3, reserved: 0, available: 3 })
      })
    )

    it.effect(
      "refunds racing on both routes: the order's books end equal to the payment's, never above the capture",
      () =>
        Effect.gen(function* () {
          const token = yield* staffToken
          const shopper = yield* registeredShopper()
          const { order } = yield* checkoutOrder(token, { customerId: shopper.customerId })
          const each = usingRealPostgres ? 30 : 8
          const requests = Array.from({ length: each * 2 }, (_, i) =>
            i % 2 === 0
              ? call("POST", `/v1/orders/${order.id}/refund`, { token, json: { amount: 150 } })
              : refundPayment(token, order.paymentId, { amount: 150 })
          )
          const answers = yield* Effect.all(requests, { concurrency: "unbounded" })
          for (const a of answers) expect([200, 400, 409], a.text).toContain(a.status)
          const payment = ok(200)(yield* call("GET", `/v1/payments/${order.paymentId}`, { token }))
          expect(payment.amountRefunded).toBeLessThanOrEqual(3998)
          // Settled: no order refund pending, and every payment refund recorded on the order.
          const settled = yield* orderWhen(
            token,
            order.id,
            (o) =>
              o.amountRefunded === payment.amountRefunded &&
              o.refunds.every((r: Json) => r.status !== "pending")
          )
          expect(settled.amountRefunded).toBeLessThanOrEqual(settled.amountPaid)
          const succeeded = settled.refunds.filter((r: Json) => r.status === "succeeded")
          expect(succeeded.reduce((n: number, r: Json) => n + r.amount, 0)).toBe(payment.amountRefunded)
          // Each payment refund appears once on the order.
          const paymentRefundIds = succeeded.map((r: Json) => r.paymentRefundId)
          expect(new Set(paymentRefundIds).size).toBe(paymentRefundIds.length)
          expect((yield* getCustomer(token, shopper.customerId)).totalSpent).toBe(
            3998 - payment.amountRefunded
          )
        })
    )
  }
)
