/**
 * Orders and their customers (issue #20 item 4; COMMERCE decision 9; spec §4.2 rule 1): customer
 * totals follow the orders (`orderCount` +1 per placed order, `totalSpent` = captured − refunded, on
 * `/user/:id` and `GET /user?sort=totalSpent:desc`; guest orders change no customer); erasing a
 * customer keeps their orders with email and address anonymized, in the read model, in the public
 * events and in the log (the personal fields are shredded, replays still work); and both read models
 * rebuild from the log to identical rows.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { CustomersProjection } from "../../src/customers/projection.js"
import { EventStore } from "../../src/eventstore/EventStore.js"
import { isShredded } from "../../src/eventstore/EventType.js"
import { decodeStoredBatch } from "../../src/kernel/Projection.js"
import { OrdersPort } from "../../src/orders/index.js"
import { OrderDecider } from "../../src/orders/objects.js"
import { OrdersProjection } from "../../src/orders/projection.js"
import { rebuildProjection } from "../../src/processors/Rebuild.js"
import { stockedProduct } from "../support/catalog.js"
import { adminToken, getCustomer, listCustomers, registeredShopper } from "../support/customers.js"
import { rowsOf } from "../support/database.js"
import { call, IdentityHttp } from "../support/identity.js"
import { paidOrder, placeOrder, publicEventsOf, TEST_METADATA } from "../support/orders.js"

const OPTIONS = { excludeTestServices: true, timeout: 120_000 } as const

const ok = (r: { status: number; text: string }) => expect(r.status, r.text).toBe(200)

layer(IdentityHttp, OPTIONS)("orders and customers", (it) => {
  it.effect("orderCount and totalSpent follow placements, captures and refunds; guests change nobody", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const shopper = yield* registeredShopper()
      const other = yield* registeredShopper()
      const mine = { customerId: shopper.customerId, email: shopper.email }
      const totals = (id: string) =>
        Effect.map(getCustomer(token, id), (c) => ({ orderCount: c.orderCount, totalSpent: c.totalSpent }))

      const first = yield* paidOrder(token, mine)
      expect(yield* totals(shopper.customerId)).toEqual({ orderCount: 1, totalSpent: 3000 })
      ok(yield* call("POST", `/v1/orders/${first.id}/refund`, { token, json: { amount: 500 } }))
      expect(yield* totals(shopper.customerId)).toEqual({ orderCount: 1, totalSpent: 2500 })
      // Only authorized: counted, nothing spent until captured.
      const manual = yield* placeOrder({ ...mine, payment: "authorized" })
      expect(yield* totals(shopper.customerId)).toEqual({ orderCount: 2, totalSpent: 2500 })
      const port = yield* OrdersPort
      yield* port.recordCapture(manual.id, 3000, TEST_METADATA)
      yield* port.recordCapture(manual.id, 3000, TEST_METADATA)
      expect(yield* totals(shopper.customerId)).toEqual({ orderCount: 2, totalSpent: 5500 })
      expect((yield* port.find(manual.id)).pipe((o) => (o._tag === "Some" ? o.value.status : "none"))).toBe(
        "confirmed"
      )
      // A cancelled order stays counted; its refund comes off.
      const cancelled = yield* paidOrder(token, mine)
      ok(yield* call("POST", `/v1/orders/${cancelled.id}/cancel`, { token, json: {} }))
      expect(yield* totals(shopper.customerId)).toEqual({ orderCount: 3, totalSpent: 5500 })
      // Guest orders, and other customers' orders, leave this one alone.
      yield* paidOrder(token, { email: shopper.email })
      yield* paidOrder(token, { customerId: other.customerId, email: other.email })
      expect(yield* totals(shopper.customerId)).toEqual({ orderCount: 3, totalSpent: 5500 })
      expect(yield* totals(other.customerId)).toEqual({ orderCount: 1, totalSpent: 3000 })

      const listed = yield* listCustomers(token, { sort: "totalSpent:desc", display: 100 })
      expect(listed.status, listed.text).toBe(200)
      const ranked: Array<string> = listed.body.models.map((m: { id: string }) => m.id)
      expect(ranked.indexOf(shopper.customerId)).toBeLessThan(ranked.indexOf(other.customerId))
      const row = listed.body.models.find((m: { id: string }) => m.id === shopper.customerId)
      expect(row).toMatchObject({ orderCount: 3, totalSpent: 5500 })
    })
  )

  it.effect("erasing a customer keeps their orders, anonymized everywhere, and replays still work", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const shopper = yield* registeredShopper()
      const product = yield* stockedProduct(token, 10)
      const order = yield* paidOrder(token, {
        customerId: shopper.customerId,
        email: shopper.email,
        lines: [{ productId: product.id, quantity: 2, unitAmount: 400 }],
        holdStock: true,
        metadata: { giftNote: "for Ann, with love" }
      })
      ok(yield* call("POST", `/v1/orders/${order.id}/fulfill`, { token, json: { trackingNumber: "T1" } }))
      const before = yield* call("GET", `/v1/orders/${order.id}`, { token })
      expect(before.body.email).toBe(shopper.email)
      expect(before.body.shippingAddress).not.toBeNull()
      expect(before.body.metadata).toEqual({ giftNote: "for Ann, with love" })

      const erased = yield* call("DELETE", `/user/${shopper.customerId}`, { token })
      expect(erased.status, erased.text).toBe(204)

      // The order stays: ids, amounts, lines, statuses; email and address are gone.
      const after = yield* call("GET", `/v1/orders/${order.id}`, { token })
      expect(after.status, after.text).toBe(200)
      expect(after.body).toEqual({ ...before.body, email: null, shippingAddress: null, metadata: {} })
      const listed = yield* call("GET", `/v1/orders?customerId=${shopper.customerId}`, { token })
      expect(listed.body.data.map((o: { id: string }) => o.id)).toEqual([order.id])
      const byEmail = yield* call("GET", `/v1/orders?email=${encodeURIComponent(shopper.email)}`, { token })
      expect(byEmail.body.data).toEqual([])

      // The public events about it are redacted.
      for (const e of yield* publicEventsOf(order.id)) {
        expect(JSON.stringify(e.data)).not.toContain(shopper.email)
      }
      // The log keeps the events; their personal fields read back shredded, and the stream still folds.
      const store = yield* EventStore
      const stored = yield* store.readStream(`order-${order.id}`)
      expect(JSON.stringify(stored)).not.toContain(shopper.email)
      expect(JSON.stringify(stored)).not.toContain("for Ann")
      const decoded = yield* decodeStoredBatch(OrderDecider.eventTypes, stored)
      const placed = decoded[0]
      expect(placed?.type).toBe("order.placed")
      const data = placed?.data as { email: unknown; shippingAddress: unknown; total: number }
      expect(isShredded(data.email)).toBe(true)
      expect(isShredded(data.shippingAddress)).toBe(true)
      expect(data.total).toBe(800)

      // Later changes still work on the anonymized order.
      ok(yield* call("POST", `/v1/orders/${order.id}/refund`, { token, json: { amount: 100 } }))
      const refunded = yield* call("GET", `/v1/orders/${order.id}`, { token })
      expect(refunded.body).toMatchObject({
        email: null,
        metadata: {},
        paymentStatus: "partially_refunded",
        amountRefunded: 100
      })
      // The events of changes after the erasure carry none of it either.
      for (const e of yield* publicEventsOf(order.id)) expect(JSON.stringify(e.data)).not.toContain("for Ann")
    })
  )

  it.effect("a checkout paid after its customer was erased: one order, anonymized from the start", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const shopper = yield* registeredShopper()
      const product = yield* stockedProduct(token, 10)
      const created = yield* call("POST", "/v1/checkouts", {
        token,
        json: {
          customerId: shopper.customerId,
          lineItems: [{ productId: product.id, quantity: 1 }],
          shippingAddress: { line1: "1 Elm", city: "Springfield", country: "US" },
          metadata: { note: "gift" }
        }
      })
      expect(created.status, created.text).toBe(201)
      expect((yield* call("DELETE", `/user/${shopper.customerId}`, { token })).status).toBe(204)
      const paid = yield* call("POST", `/v1/checkouts/${created.body.id}/confirm`, {
        token,
        json: { paymentMethod: "pm_card_visa" }
      })
      expect(paid.status, paid.text).toBe(200)
      expect(paid.body.status).toBe("complete")
      const order = yield* call("GET", `/v1/orders/${paid.body.orderId}`, { token })
      expect(order.status, order.text).toBe(200)
      expect(order.body).toMatchObject({
        status: "confirmed",
        paymentStatus: "paid",
        customerId: shopper.customerId,
        email: null,
        shippingAddress: null,
        metadata: {}
      })
      const stored = yield* (yield* EventStore).readStream(`order-${paid.body.orderId}`)
      expect(JSON.stringify(stored)).not.toContain(shopper.email)
      expect(JSON.stringify(stored)).not.toContain("Springfield")
      // Its later changes work as on any anonymized order.
      ok(yield* call("POST", `/v1/orders/${paid.body.orderId}/fulfill`, { token }))
    })
  )

  it.effect("the orders and customers read models rebuild from the log to identical rows", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const shopper = yield* registeredShopper()
      const gone = yield* registeredShopper()
      const product = yield* stockedProduct(token, 50)
      const lines = [{ productId: product.id, quantity: 3, unitAmount: 900 }]
      const a = yield* paidOrder(token, {
        customerId: shopper.customerId,
        email: shopper.email,
        lines,
        holdStock: true
      })
      const b = yield* paidOrder(token, {
        customerId: gone.customerId,
        email: gone.email,
        lines,
        holdStock: true
      })
      const c = yield* paidOrder(token, { lines, holdStock: true, captureMethod: "manual" })
      const d = yield* paidOrder(token, {
        customerId: shopper.customerId,
        email: shopper.email,
        lines,
        holdStock: true
      })
      ok(
        yield* call("POST", `/v1/orders/${a.id}/fulfill`, {
          token,
          json: { items: [{ productId: product.id, quantity: 1 }], trackingNumber: "X" }
        })
      )
      ok(yield* call("POST", `/v1/orders/${a.id}/refund`, { token, json: { amount: 300 } }))
      const fid = (yield* call("POST", `/v1/orders/${a.id}/fulfill`, { token, json: {} })).body
        .fulfillments[1].id
      ok(
        yield* call("PATCH", `/v1/orders/${a.id}/fulfillments/${fid}`, {
          token,
          json: { status: "delivered" }
        })
      )
      ok(
        yield* call("POST", `/v1/orders/${b.id}/refund`, {
          token,
          json: { items: [{ productId: product.id, quantity: 1 }], restock: true }
        })
      )
      ok(yield* call("POST", `/v1/orders/${c.id}/cancel`, { token, json: { reason: "fraud" } }))
      ok(yield* call("POST", `/v1/orders/${d.id}/refund`, { token, json: {} }))
      expect((yield* call("DELETE", `/user/${gone.customerId}`, { token })).status).toBe(204)

      const tables = Effect.all({
        orders: rowsOf("orders.orders", "order_id"),
        customers: rowsOf("customers.customers", "customer_id")
      })
      const before = yield* tables
      expect(before.orders.length).toBeGreaterThanOrEqual(4)

      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE orders.orders SET status = 'damaged', state = '{}'::jsonb`
      yield* sql`UPDATE customers.customers SET order_count = 0, total_spent = 0`
      yield* rebuildProjection(OrdersProjection, { batchSize: 7 })
      yield* rebuildProjection(CustomersProjection, { batchSize: 7 })
      expect(yield* tables).toEqual(before)

      // The rebuilt tables are live.
      const spent = (yield* getCustomer(token, shopper.customerId)).totalSpent
      yield* paidOrder(token, { customerId: shopper.customerId, email: shopper.email })
      expect((yield* getCustomer(token, shopper.customerId)).totalSpent).toBe(spent + 3000)
      expect((yield* call("GET", `/v1/orders/${a.id}`, { token })).body.fulfillmentStatus).toBe("fulfilled")
    })
  )
})
