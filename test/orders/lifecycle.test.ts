/**
 * The order's lifecycle over real HTTP (issue #20 item 2, COMMERCE decisions 3–4, research §2.3–§2.4):
 * `POST /v1/orders/:id/fulfill` (all, in parts, by line or product, with tracking), `PATCH …/fulfillments/:fid`
 * (delivered), `POST …/cancel` (void or refund, stock released) and `POST …/refund` (partial, full, by
 * line with restock), with real payments through the test processor and real stock holds — every state
 * and error, and the public events each change writes.
 */
import { describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import * as Ids from "../../src/kernel/Ids.js"
import { type Body, getProduct, stockedProduct } from "../support/catalog.js"
import { adminToken } from "../support/customers.js"
import { call, expectError, IdentityHttp } from "../support/identity.js"
import { paidOrder, placeOrder, publicEventsOf } from "../support/orders.js"

const OPTIONS = { excludeTestServices: true, timeout: 120_000 } as const

const post = (token: string, path: string, json: unknown = {}) => call("POST", path, { token, json })

const ok = (r: { status: number; text: string; body: Body }) => {
  expect(r.status, r.text).toBe(200)
  return r.body as Body
}

const typesOf = (orderId: string) =>
  Effect.map(publicEventsOf(orderId), (events) => events.map((e) => e.type))

layer(IdentityHttp, OPTIONS)("the order lifecycle over HTTP", (it) => {
  describe("POST /v1/orders/:id/fulfill", () => {
    it.effect("without items: everything ships; the stock held for the order leaves", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const product = yield* stockedProduct(token, 10)
        const order = yield* placeOrder({ lines: [{ productId: product.id, quantity: 3 }], holdStock: true })
        expect((yield* getProduct(token, product.id)).inventory).toMatchObject({
          stockedQuantity: 10,
          reservedQuantity: 3
        })
        const o = ok(yield* post(token, `/v1/orders/${order.id}/fulfill`))
        expect(o).toMatchObject({
          status: "fulfilled",
          fulfillmentStatus: "fulfilled",
          paymentStatus: "paid"
        })
        expect(o.lineItems[0]).toMatchObject({ quantity: 3, fulfilledQuantity: 3 })
        expect(o.fulfillments).toHaveLength(1)
        expect(o.fulfillments[0]).toMatchObject({
          object: "fulfillment",
          status: "pending",
          items: [{ lineItemId: o.lineItems[0].id, quantity: 3 }],
          trackingNumber: null,
          shippedAt: null
        })
        expect(o.fulfillments[0].id).toMatch(/^ful_/)
        expect((yield* getProduct(token, product.id)).inventory).toMatchObject({
          stockedQuantity: 7,
          reservedQuantity: 0
        })
        expect(yield* typesOf(order.id)).toEqual([
          "order.created",
          "order.confirmed",
          "order.fulfilled",
          "order.updated"
        ])
        // Nothing remains.
        expectError(yield* post(token, `/v1/orders/${order.id}/fulfill`), 409, "order_not_fulfillable")
      })
    )

    it.effect("in parts, by line id or product id, with tracking: partially_fulfilled, then fulfilled", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const a = yield* stockedProduct(token, 10)
        const b = yield* stockedProduct(token, 10)
        const order = yield* placeOrder({
          lines: [
            { productId: a.id, quantity: 2 },
            { productId: b.id, quantity: 1 }
          ],
          holdStock: true
        })
        const first = ok(
          yield* post(token, `/v1/orders/${order.id}/fulfill`, {
            items: [{ productId: a.id, quantity: 1 }],
            trackingNumber: "1Z999",
            trackingUrl: "https://track.example.com/1Z999",
            carrier: "UPS"
          })
        )
        expect(first).toMatchObject({
          status: "partially_fulfilled",
          fulfillmentStatus: "partially_fulfilled"
        })
        expect(first.fulfillments[0]).toMatchObject({
          status: "shipped",
          trackingNumber: "1Z999",
          carrier: "UPS"
        })
        expect(first.fulfillments[0].shippedAt).not.toBeNull()
        const events = yield* publicEventsOf(order.id)
        expect(events.slice(2).map((e) => e.type)).toEqual([
          "order.partially_fulfilled",
          "order.updated",
          "order.shipped"
        ])
        expect(events[4]?.data).toMatchObject({
          displayId: order.displayId,
          trackingNumber: "1Z999",
          trackingUrl: "https://track.example.com/1Z999",
          carrier: "UPS"
        })
        const lineB = first.lineItems[1].id
        const second = ok(
          yield* post(token, `/v1/orders/${order.id}/fulfill`, {
            items: [
              { lineItemId: first.lineItems[0].id, quantity: 1 },
              { lineItemId: lineB, quantity: 1 }
            ]
          })
        )
        expect(second).toMatchObject({ status: "fulfilled", fulfillmentStatus: "fulfilled" })
        expect((yield* getProduct(token, a.id)).inventory).toMatchObject({
          stockedQuantity: 8,
          reservedQuantity: 0
        })
        expect((yield* getProduct(token, b.id)).inventory).toMatchObject({
          stockedQuantity: 9,
          reservedQuantity: 0
        })
      })
    )

    it.effect("400s: more than remains, a line the order does not have, both or neither reference", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const order = yield* placeOrder()
        const path = `/v1/orders/${order.id}/fulfill`
        const lineItemId = order.lineItems[0]?.id
        expectError(
          yield* post(token, path, { items: [{ lineItemId, quantity: 3 }] }),
          400,
          "fulfillment_quantity_exceeded",
          "items[0].quantity"
        )
        // Two mentions of one line are summed.
        expectError(
          yield* post(token, path, {
            items: [
              { lineItemId, quantity: 1 },
              { lineItemId, quantity: 2 }
            ]
          }),
          400,
          "fulfillment_quantity_exceeded",
          "items[0].quantity"
        )
        expectError(
          yield* post(token, path, { items: [{ productId: yield* Ids.make("prod"), quantity: 1 }] }),
          400,
          "parameter_invalid",
          "items[0]"
        )
        for (const items of [
          [{ quantity: 1 }],
          [{ lineItemId, productId: order.lineItems[0]?.productId, quantity: 1 }],
          [{ lineItemId, quantity: 0 }],
          []
        ]) {
          const r = yield* post(token, path, { items })
          expect(r.status, r.text).toBe(400)
        }
        const unchanged = ok(yield* call("GET", `/v1/orders/${order.id}`, { token }))
        expect(unchanged).toMatchObject({ status: "confirmed", fulfillments: [] })
      })
    )

    it.effect("409 order_not_fulfillable: pending (only authorized), cancelled", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const pending = yield* placeOrder({ payment: "authorized" })
        expectError(yield* post(token, `/v1/orders/${pending.id}/fulfill`), 409, "order_not_fulfillable")
        const cancelled = yield* placeOrder({ payment: "not_required" })
        ok(yield* post(token, `/v1/orders/${cancelled.id}/cancel`))
        expectError(yield* post(token, `/v1/orders/${cancelled.id}/fulfill`), 409, "order_not_fulfillable")
        expectError(
          yield* post(token, `/v1/orders/${yield* Ids.make("ord")}/fulfill`),
          404,
          "resource_missing"
        )
      })
    )
  })

  describe("PATCH /v1/orders/:id/fulfillments/:fid", () => {
    it.effect("delivered: the fulfilment, then the order's fulfillmentStatus once all are", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const order = yield* placeOrder()
        const lineItemId = order.lineItems[0]?.id
        const one = ok(
          yield* post(token, `/v1/orders/${order.id}/fulfill`, { items: [{ lineItemId, quantity: 1 }] })
        )
        const two = ok(yield* post(token, `/v1/orders/${order.id}/fulfill`, { trackingNumber: "T2" }))
        const [f1, f2] = [one.fulfillments[0].id, two.fulfillments[1].id]
        const patch = (fid: string, json: unknown = { status: "delivered" }) =>
          call("PATCH", `/v1/orders/${order.id}/fulfillments/${fid}`, { token, json })
        const d1 = ok(yield* patch(f1))
        expect(d1.fulfillments[0]).toMatchObject({ status: "delivered" })
        expect(d1.fulfillments[0].deliveredAt).not.toBeNull()
        expect(d1).toMatchObject({ status: "fulfilled", fulfillmentStatus: "fulfilled" })
        const d2 = ok(yield* patch(f2))
        expect(d2).toMatchObject({ status: "fulfilled", fulfillmentStatus: "delivered" })
        // Again: no change, no event.
        const before = (yield* publicEventsOf(order.id)).length
        expect(ok(yield* patch(f2))).toEqual(d2)
        expect((yield* publicEventsOf(order.id)).length).toBe(before)
        expect((yield* typesOf(order.id)).filter((t) => t === "order.delivered")).toHaveLength(2)
        expectError(yield* patch(yield* Ids.make("ful")), 404, "resource_missing", "fid")
        expectError(yield* patch("ful_nope"), 404, "resource_missing", "fid")
        const bad = yield* patch(f1, { status: "shipped" })
        expect(bad.status, bad.text).toBe(400)
        expectError(
          yield* call("PATCH", `/v1/orders/${yield* Ids.make("ord")}/fulfillments/${f1}`, {
            token,
            json: { status: "delivered" }
          }),
          404,
          "resource_missing"
        )
      })
    )
  })

  describe("POST /v1/orders/:id/cancel", () => {
    it.effect("a captured order: refunded in full, the hold released, cancelled", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const product = yield* stockedProduct(token, 5)
        const order = yield* paidOrder(token, {
          lines: [{ productId: product.id, quantity: 2, unitAmount: 700 }],
          holdStock: true
        })
        expect((yield* getProduct(token, product.id)).inventory.reservedQuantity).toBe(2)
        const o = ok(yield* post(token, `/v1/orders/${order.id}/cancel`, { reason: "customer changed mind" }))
        expect(o).toMatchObject({
          status: "cancelled",
          paymentStatus: "refunded",
          amountRefunded: 1400,
          amountRefundable: 0,
          cancellationReason: "customer changed mind"
        })
        expect(o.refunds).toHaveLength(1)
        expect(o.refunds[0]).toMatchObject({ status: "succeeded", amount: 1400, void: false })
        expect(o.refunds[0].paymentRefundId).toMatch(/^re_/)
        expect((yield* getProduct(token, product.id)).inventory.reservedQuantity).toBe(0)
        const payment = ok(yield* call("GET", `/v1/payments/${order.paymentId}`, { token }))
        expect(payment).toMatchObject({ status: "refunded", amountRefunded: 1400 })
        expect(yield* typesOf(order.id)).toEqual([
          "order.created",
          "order.confirmed",
          // The refund started (pending); once it succeeded, the order is cancelled.
          "order.updated",
          "order.updated",
          "order.refunded",
          "order.cancelled",
          "order.updated"
        ])
        expectError(yield* post(token, `/v1/orders/${order.id}/cancel`), 409, "order_not_cancellable")
      })
    )

    it.effect("a refund the processor refuses cancels nothing: the order keeps its stock, then ships", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const product = yield* stockedProduct(token, 5)
        const order = yield* paidOrder(token, {
          lines: [{ productId: product.id, quantity: 2, unitAmount: 700 }],
          holdStock: true,
          paymentMethod: "pm_card_refundFail"
        })
        const o = ok(yield* post(token, `/v1/orders/${order.id}/cancel`, { reason: "changed mind" }))
        expect(o).toMatchObject({
          status: "confirmed",
          paymentStatus: "paid",
          amountRefunded: 0,
          cancelledAt: null
        })
        expect(o.refunds[0]).toMatchObject({ status: "failed", amount: 1400 })
        expect((yield* getProduct(token, product.id)).inventory.reservedQuantity).toBe(2)
        expect(yield* typesOf(order.id)).not.toContain("order.cancelled")
        const shipped = ok(yield* post(token, `/v1/orders/${order.id}/fulfill`))
        expect(shipped.status).toBe("fulfilled")
      })
    )

    it.effect("an authorized order: the authorization is voided", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const order = yield* paidOrder(token, { captureMethod: "manual" })
        expect(order.status).toBe("pending")
        const o = ok(yield* post(token, `/v1/orders/${order.id}/cancel`))
        expect(o).toMatchObject({ status: "cancelled", paymentStatus: "voided", amountRefunded: 0 })
        expect(o.refunds[0]).toMatchObject({ status: "succeeded", void: true, paymentRefundId: null })
        const intent = ok(yield* call("GET", `/v1/payment-intents/${order.paymentIntentId}`, { token }))
        expect(intent.status).toBe("canceled")
      })
    )

    it.effect("409 once something shipped; 404 for no order", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const order = yield* placeOrder()
        ok(
          yield* post(token, `/v1/orders/${order.id}/fulfill`, {
            items: [{ lineItemId: order.lineItems[0]?.id, quantity: 1 }]
          })
        )
        expectError(yield* post(token, `/v1/orders/${order.id}/cancel`), 409, "order_not_cancellable")
        expectError(
          yield* post(token, `/v1/orders/${yield* Ids.make("ord")}/cancel`),
          404,
          "resource_missing"
        )
      })
    )
  })

  describe("POST /v1/orders/:id/refund", () => {
    it.effect(
      "a full refund the processor refuses cancels nothing: the order, its stock and its payment stay",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const product = yield* stockedProduct(token, 10)
          const order = yield* paidOrder(token, {
            lines: [{ productId: product.id, quantity: 2 }],
            holdStock: true,
            paymentMethod: "pm_card_refundFail"
          })
          const o = ok(yield* post(token, `/v1/orders/${order.id}/refund`))
          expect(o).toMatchObject({
            status: "confirmed",
            paymentStatus: "paid",
            amountRefunded: 0,
            amountRefundable: o.total,
            cancelledAt: null
          })
          expect(o.refunds).toHaveLength(1)
          expect(o.refunds[0]).toMatchObject({ status: "failed", amount: o.total })
          expect((yield* getProduct(token, product.id)).inventory).toMatchObject({ reservedQuantity: 2 })
          expect(yield* typesOf(order.id)).not.toContain("order.cancelled")
          // Still a live order: it ships.
          expect(ok(yield* post(token, `/v1/orders/${order.id}/fulfill`))).toMatchObject({
            status: "fulfilled"
          })
        })
    )

    it.effect("partial refunds leave the status alone; the last one of a shipped order → refunded", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const order = yield* paidOrder(token)
        ok(yield* post(token, `/v1/orders/${order.id}/fulfill`))
        const partial = ok(
          yield* post(token, `/v1/orders/${order.id}/refund`, {
            amount: 1000,
            reason: "requested_by_customer"
          })
        )
        expect(partial).toMatchObject({
          status: "fulfilled",
          paymentStatus: "partially_refunded",
          amountRefunded: 1000,
          amountRefundable: 2000
        })
        expect(partial.refunds[0]).toMatchObject({
          amount: 1000,
          reason: "requested_by_customer",
          status: "succeeded"
        })
        expectError(
          yield* post(token, `/v1/orders/${order.id}/refund`, { amount: 2001 }),
          400,
          "amount_too_large",
          "amount"
        )
        const rest = ok(yield* post(token, `/v1/orders/${order.id}/refund`))
        expect(rest).toMatchObject({
          status: "refunded",
          paymentStatus: "refunded",
          fulfillmentStatus: "fulfilled",
          amountRefunded: 3000,
          amountRefundable: 0
        })
        const payment = ok(yield* call("GET", `/v1/payments/${order.paymentId}`, { token }))
        expect(payment).toMatchObject({ status: "refunded", amountRefunded: 3000 })
        expectError(yield* post(token, `/v1/orders/${order.id}/refund`), 409, "order_not_refundable")
        const refunded = (yield* publicEventsOf(order.id)).filter((e) => e.type === "order.refunded")
        expect(refunded.map((e) => e.data.refundedAmount)).toEqual([1000, 2000])
      })
    )

    it.effect("a full refund of an order that shipped nothing cancels it and releases its hold", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const product = yield* stockedProduct(token, 5)
        const order = yield* paidOrder(token, {
          lines: [{ productId: product.id, quantity: 2, unitAmount: 500 }],
          holdStock: true
        })
        const o = ok(yield* post(token, `/v1/orders/${order.id}/refund`))
        expect(o).toMatchObject({ status: "cancelled", paymentStatus: "refunded", amountRefunded: 1000 })
        expect((yield* getProduct(token, product.id)).inventory.reservedQuantity).toBe(0)
        const types = yield* typesOf(order.id)
        expect(types).toContain("order.cancelled")
        expect(types).toContain("order.refunded")
      })
    )

    it.effect("a hold refunded down to half or less by line, then cancelled: nothing stays reserved", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        // 2 − 1 leaves 1 and 4 − 2 leaves 2: the remainder is no more than what was taken off, which
        // once deleted the hold's row as the units came off it (so the cancel found nothing to release).
        for (const [quantity, refunded] of [
          [2, 1],
          [4, 2]
        ] as const) {
          const product = yield* stockedProduct(token, 10)
          const order = yield* paidOrder(token, {
            lines: [{ productId: product.id, quantity, unitAmount: 100 }],
            holdStock: true
          })
          const lineItemId = order.lineItems[0]?.id
          ok(
            yield* post(token, `/v1/orders/${order.id}/refund`, {
              items: [{ lineItemId, quantity: refunded }]
            })
          )
          expect((yield* getProduct(token, product.id)).inventory).toMatchObject({
            stockedQuantity: 10 - refunded,
            reservedQuantity: quantity - refunded
          })
          const cancelled = ok(yield* post(token, `/v1/orders/${order.id}/cancel`))
          expect(cancelled).toMatchObject({ status: "cancelled", paymentStatus: "refunded" })
          expect((yield* getProduct(token, product.id)).inventory).toMatchObject({
            stockedQuantity: 10 - refunded,
            reservedQuantity: 0,
            availableQuantity: 10 - refunded
          })
        }
      })
    )

    it.effect("by line: the units leave the hold (back on the shelf with restock) and will not ship", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const product = yield* stockedProduct(token, 10)
        const order = yield* paidOrder(token, {
          lines: [{ productId: product.id, quantity: 4, unitAmount: 250 }],
          holdStock: true
        })
        const lineItemId = order.lineItems[0]?.id
        const o = ok(
          yield* post(token, `/v1/orders/${order.id}/refund`, {
            items: [{ lineItemId, quantity: 1 }],
            restock: true
          })
        )
        expect(o).toMatchObject({
          status: "confirmed",
          paymentStatus: "partially_refunded",
          amountRefunded: 250
        })
        expect(o.lineItems[0]).toMatchObject({ refundedQuantity: 1, fulfilledQuantity: 0 })
        expect(o.refunds[0]).toMatchObject({ items: [{ lineItemId, quantity: 1 }], restock: true })
        expect((yield* getProduct(token, product.id)).inventory).toMatchObject({
          stockedQuantity: 10,
          reservedQuantity: 3
        })
        // Without restock the units are written off.
        ok(
          yield* post(token, `/v1/orders/${order.id}/refund`, {
            items: [{ productId: product.id, quantity: 1 }]
          })
        )
        expect((yield* getProduct(token, product.id)).inventory).toMatchObject({
          stockedQuantity: 9,
          reservedQuantity: 2
        })
        expectError(
          yield* post(token, `/v1/orders/${order.id}/fulfill`, { items: [{ lineItemId, quantity: 3 }] }),
          400,
          "fulfillment_quantity_exceeded",
          "items[0].quantity"
        )
        const shipped = ok(yield* post(token, `/v1/orders/${order.id}/fulfill`))
        expect(shipped).toMatchObject({ status: "fulfilled", fulfillmentStatus: "fulfilled" })
        expect(shipped.lineItems[0]).toMatchObject({ quantity: 4, fulfilledQuantity: 2, refundedQuantity: 2 })
        expect((yield* getProduct(token, product.id)).inventory).toMatchObject({
          stockedQuantity: 7,
          reservedQuantity: 0
        })
        expectError(
          yield* post(token, `/v1/orders/${order.id}/refund`, { items: [{ lineItemId, quantity: 1 }] }),
          400,
          "amount_too_large",
          "items[0].quantity"
        )
      })
    )

    it.effect("refunding the units left to ship of a partly shipped order fulfils it: order.fulfilled", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const product = yield* stockedProduct(token, 10)
        const order = yield* paidOrder(token, {
          lines: [{ productId: product.id, quantity: 3, unitAmount: 250 }],
          holdStock: true
        })
        const lineItemId = order.lineItems[0]?.id
        const part = ok(
          yield* post(token, `/v1/orders/${order.id}/fulfill`, { items: [{ lineItemId, quantity: 2 }] })
        )
        expect(part.fulfillmentStatus).toBe("partially_fulfilled")
        const rest = ok(
          yield* post(token, `/v1/orders/${order.id}/refund`, {
            items: [{ lineItemId, quantity: 1 }],
            restock: true
          })
        )
        expect(rest).toMatchObject({ status: "fulfilled", fulfillmentStatus: "fulfilled" })
        const types = (yield* publicEventsOf(order.id)).map((e) => e.type)
        expect(types.filter((t) => t === "order.partially_fulfilled")).toHaveLength(1)
        expect(types.filter((t) => t === "order.fulfilled")).toHaveLength(1)
        expect(types.lastIndexOf("order.fulfilled")).toBeGreaterThan(
          types.indexOf("order.partially_fulfilled")
        )
      })
    )

    it.effect("409 order_not_refundable: only authorized, nothing paid; 404 for no order", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const pending = yield* paidOrder(token, { captureMethod: "manual" })
        expectError(yield* post(token, `/v1/orders/${pending.id}/refund`), 409, "order_not_refundable")
        const free = yield* placeOrder({ payment: "not_required" })
        expectError(yield* post(token, `/v1/orders/${free.id}/refund`), 409, "order_not_refundable")
        expectError(
          yield* post(token, `/v1/orders/${yield* Ids.make("ord")}/refund`),
          404,
          "resource_missing"
        )
        const bad = yield* post(token, `/v1/orders/${free.id}/refund`, { amount: 0 })
        expect(bad.status, bad.text).toBe(400)
      })
    )
  })
})
