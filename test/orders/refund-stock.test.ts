/**
 * What a refund moves besides money, and when (found by black-box probes):
 * - units refunded by line leave the order's hold only once the money is back — a refund the
 *   processor refuses moves no stock (before, the units went back on the shelf and were sold twice);
 * - an order refunded in full after part of it shipped releases the units it still held (before,
 *   they stayed reserved for good and the product could never be archived);
 * - a full refund of an unshipped order publishes the cancellation first: no reader sees the order
 *   `refunded` on its way to `cancelled`;
 * - a manual-capture order cancelled while its capture was landing: the capture is recorded and the
 *   money given back by the refund worker (before, the order stayed `authorized` with the money kept).
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { CheckoutPort } from "../../src/checkout/index.js"
import { CommandRunner } from "../../src/kernel/CommandRunner.js"
import { refundRecovery } from "../../src/orders/refunds.js"
import { processorCallRecovery } from "../../src/payments/recovery.js"
import { checkoutOrder, type Json, stockOf } from "../support/checkout.js"
import { getCustomer, registeredShopper } from "../support/customers.js"
import { call, expectError } from "../support/identity.js"
import { fastRecoveryHttp, orderWhen, publicEventsOf, TEST_METADATA } from "../support/orders.js"
import { ok, staffToken } from "../support/payments.js"

// No checkout-completion flow here: the capture's record is driven by hand, after the cancel.
layer(fastRecoveryHttp([refundRecovery(), processorCallRecovery()]), {
  excludeTestServices: true,
  timeout: 180_000
})("what refunds move", (it) => {
  it.effect(
    "a line refund the processor refuses moves no stock: nothing is sold twice, the order ships",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        for (const restock of [true, false]) {
          const { product, order } = yield* checkoutOrder(token, {
            stock: 3,
            quantity: 3,
            paymentMethod: "pm_card_refundFail"
          })
          const lineItemId = order.lineItems[0].id
          const refused = ok(200)(
            yield* call("POST", `/v1/orders/${order.id}/refund`, {
              token,
              json: { items: [{ lineItemId, quantity: 1 }], restock }
            })
          )
          expect(refused.refunds[0].status).toBe("failed")
          expect(refused.lineItems[0].refundedQuantity).toBe(0)
          expect(yield* stockOf(token, product.id)).toEqual({ stocked: 3, reserved: 3, available: 0 })
          const other = yield* call("POST", "/v1/checkouts", {
            token,
            json: { lineItems: [{ productId: product.id, quantity: 1 }], email: "other@example.com" }
          })
          expectError(other, 409, "insufficient_stock")
          const shipped = ok(200)(yield* call("POST", `/v1/orders/${order.id}/fulfill`, { token, json: {} }))
          expect(shipped.fulfillmentStatus).toBe("fulfilled")
          expect(yield* stockOf(token, product.id)).toEqual({ stocked: 0, reserved: 0, available: 0 })
        }
      })
  )

  it.effect("a line refund that succeeds moves its units then: back on the shelf with restock", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const { product, order } = yield* checkoutOrder(token, { stock: 5, quantity: 3 })
      const lineItemId = order.lineItems[0].id
      const refunded = ok(200)(
        yield* call("POST", `/v1/orders/${order.id}/refund`, {
          token,
          json: { items: [{ lineItemId, quantity: 1 }], restock: true }
        })
      )
      expect(refunded.refunds[0].status).toBe("succeeded")
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 5, reserved: 2, available: 3 })
    })
  )

  it.effect("refunded in full after part shipped: the units it still held go back", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const { product, order } = yield* checkoutOrder(token, { stock: 5, quantity: 3 })
      const lineItemId = order.lineItems[0].id
      ok(200)(
        yield* call("POST", `/v1/orders/${order.id}/fulfill`, {
          token,
          json: { items: [{ lineItemId, quantity: 1 }] }
        })
      )
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 4, reserved: 2, available: 2 })
      const refunded = ok(200)(yield* call("POST", `/v1/orders/${order.id}/refund`, { token, json: {} }))
      expect(refunded).toMatchObject({ status: "refunded", paymentStatus: "refunded" })
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 4, reserved: 0, available: 4 })
      // Nothing is held any more: the product can be archived.
      ok(200)(yield* call("DELETE", `/v1/products/${product.id}`, { token }))
    })
  )

  it.effect(
    "a full refund (or cancel) of an unshipped order: never shown refunded, nor cancelled unpaid",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        for (const route of ["refund", "cancel"]) {
          const { order } = yield* checkoutOrder(token)
          ok(200)(yield* call("POST", `/v1/orders/${order.id}/${route}`, { token, json: {} }))
          const events = (yield* publicEventsOf(order.id)).filter((e) => e.data.updatedAt !== order.updatedAt)
          expect(events.filter((e) => e.data.status === "refunded")).toEqual([])
          // Cancelled is only ever published with the money back.
          for (const e of events.filter((x) => x.data.status === "cancelled"))
            expect(e.data).toMatchObject({ paymentStatus: "refunded", amountRefunded: 3998 })
          const cancelled = events.find((e) => e.type === "order.cancelled")
          expect(cancelled?.data).toMatchObject({ status: "cancelled", paymentStatus: "refunded" })
        }
      })
  )

  it.effect("cancelled while its capture was landing: the capture is recorded and all of it given back", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const shopper = yield* registeredShopper()
      const { product, checkout, order } = yield* checkoutOrder(token, {
        customerId: shopper.customerId,
        captureMethod: "manual"
      })
      expect(order).toMatchObject({ status: "pending", paymentStatus: "authorized" })
      ok(200)(
        yield* call("POST", `/v1/payment-intents/${checkout.paymentIntentId}/capture`, { token, json: {} })
      )
      // The cancel lands before the capture reached the order: its void is refused (captured).
      const cancelled = ok(200)(yield* call("POST", `/v1/orders/${order.id}/cancel`, { token, json: {} }))
      expect(cancelled).toMatchObject({ status: "cancelled", paymentStatus: "authorized" })
      expect(cancelled.refunds[0]).toMatchObject({ void: true, status: "failed" })
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 5, reserved: 0, available: 5 })
      // What the completion flow does with the capture's event.
      const port = yield* CheckoutPort
      const runner = yield* CommandRunner
      yield* runner.transact(port.paymentChanged(checkout.paymentIntentId, TEST_METADATA))
      yield* runner.transact(port.paymentChanged(checkout.paymentIntentId, TEST_METADATA))
      const settled = yield* orderWhen(token, order.id, (o) => o.paymentStatus === "refunded")
      expect(settled).toMatchObject({ status: "cancelled", amountPaid: 3998, amountRefunded: 3998 })
      const payment = ok(200)(yield* call("GET", `/v1/payments/${order.paymentId}`, { token }))
      expect(payment).toMatchObject({ amountCaptured: 3998, amountRefunded: 3998 })
      expect((yield* getCustomer(token, shopper.customerId)).totalSpent).toBe(0)
      expect(settled.refunds.filter((r: Json) => !r.void && r.status === "succeeded")).toHaveLength(1)
    })
  )
})
