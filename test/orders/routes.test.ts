/**
 * `/v1/orders` over real HTTP (issue #20 items 2–3 and 5–7; spec §2.6, §4.5; COMMERCE decisions 3
 * and 4): orders placed through the orders port (as checkout completion places them), then read,
 * listed, fulfilled, delivered, cancelled and refunded over HTTP — every route, state and error,
 * shoppers limited to their own orders, and the public events each change writes.
 */
import { describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import * as Ids from "../../src/kernel/Ids.js"
import { OrdersPort } from "../../src/orders/index.js"
import { type Body, query } from "../support/catalog.js"
import { adminToken, registeredShopper } from "../support/customers.js"
import { call, expectError, IdentityHttp, uniqueEmail } from "../support/identity.js"
import { paidOrder, placeInput, placeOrder, publicEventsOf, TEST_METADATA } from "../support/orders.js"

const OPTIONS = { excludeTestServices: true, timeout: 120_000 } as const
const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/

const getOrder = (token: string, id: string) =>
  Effect.map(call("GET", `/v1/orders/${id}`, { token }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.body as Body
  })

layer(IdentityHttp, OPTIONS)("orders over HTTP", (it) => {
  describe("placing through the port, reading over HTTP", () => {
    it.effect("GET /v1/orders/:id: the order object, its three status axes and its line snapshots", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const placed = yield* placeOrder({ email: "Buyer@Example.com" })
        const o = yield* getOrder(token, placed.id)
        expect(o).toMatchObject({
          object: "order",
          id: placed.id,
          status: "confirmed",
          paymentStatus: "paid",
          fulfillmentStatus: "unfulfilled",
          email: "Buyer@Example.com",
          currency: "USD",
          subtotal: 3000,
          total: 3000,
          amountPaid: 3000,
          amountRefunded: 0,
          amountRefundable: 3000,
          fulfillments: [],
          refunds: [],
          cancelledAt: null
        })
        expect(o.displayId).toMatch(/^\d{4,}$/)
        expect(Number(o.displayId)).toBeGreaterThanOrEqual(1001)
        expect(o.createdAt).toMatch(ISO_MS)
        expect(o.lineItems).toHaveLength(1)
        expect(o.lineItems[0]).toMatchObject({
          object: "line_item",
          quantity: 2,
          unitAmount: 1500,
          amountTotal: 3000,
          fulfilledQuantity: 0,
          refundedQuantity: 0
        })
        expect(o.lineItems[0].id).toMatch(/^li_/)
        // What the port answered is what GET shows.
        expect(JSON.parse(JSON.stringify(placed))).toEqual(o)
      })
    )

    it.effect("placing the same order again changes nothing and answers the same order", () =>
      Effect.gen(function* () {
        const port = yield* OrdersPort
        const input = yield* placeInput()
        const first = yield* port.place(input, TEST_METADATA)
        const again = yield* port.place({ ...input, total: 1 }, TEST_METADATA)
        expect(again).toEqual(first)
        const events = yield* publicEventsOf(input.orderId)
        expect(events.filter((e) => e.type === "order.created")).toHaveLength(1)
      })
    )

    it.effect("display ids follow each other without gaps", () =>
      Effect.gen(function* () {
        const a = yield* placeOrder()
        const b = yield* placeOrder()
        const c = yield* placeOrder()
        expect([
          Number(b.displayId) - Number(a.displayId),
          Number(c.displayId) - Number(b.displayId)
        ]).toEqual([1, 1])
      })
    )

    it.effect("manual capture → pending/authorized; zero total → confirmed/no_payment_required", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const pending = yield* placeOrder({ payment: "authorized" })
        expect(yield* getOrder(token, pending.id)).toMatchObject({
          status: "pending",
          paymentStatus: "authorized",
          amountPaid: 0,
          amountRefundable: 0
        })
        const free = yield* placeOrder({
          payment: "not_required",
          lines: [{ productId: yield* Ids.make("prod"), quantity: 1, unitAmount: 0 }]
        })
        expect(yield* getOrder(token, free.id)).toMatchObject({
          status: "confirmed",
          paymentStatus: "no_payment_required",
          total: 0
        })
      })
    )

    it.effect("order.created carries spec §2.6's fields (and order.confirmed once paid)", () =>
      Effect.gen(function* () {
        const placed = yield* placeOrder()
        const events = yield* publicEventsOf(placed.id)
        expect(events.map((e) => e.type)).toEqual(["order.created", "order.confirmed"])
        const created = events[0]?.data
        expect(created).toMatchObject({
          id: placed.id,
          displayId: placed.displayId,
          status: "confirmed",
          email: placed.email,
          total: placed.total,
          currency: "USD"
        })
        expect(typeof created.displayId).toBe("string")
        expect(created.createdAt).toMatch(ISO_MS)
        const pending = yield* placeOrder({ payment: "authorized" })
        expect((yield* publicEventsOf(pending.id)).map((e) => e.type)).toEqual(["order.created"])
      })
    )

    it.effect("unknown, malformed and foreign ids → 404 resource_missing", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        for (const id of [yield* Ids.make("ord"), "ord_nope", yield* Ids.make("prod")]) {
          expectError(yield* call("GET", `/v1/orders/${id}`, { token }), 404, "resource_missing", "id")
        }
        // Ids longer than the router's parameter limit are unknown ids too, on every route (a 405
        // once said the method was not allowed while naming it in Allow).
        for (const long of [`ord_${"x".repeat(150)}`, `ord_${"x".repeat(3000)}`]) {
          expectError(yield* call("GET", `/v1/orders/${long}`, { token }), 404, "resource_missing")
          expectError(
            yield* call("POST", `/v1/orders/${long}/cancel`, { token, json: {} }),
            404,
            "resource_missing"
          )
          expectError(yield* call("GET", `/v1/checkouts/chk_${long}`, { token }), 404, "resource_missing")
          expectError(yield* call("GET", `/v1/payments/pay_${long}`, { token }), 404, "resource_missing")
        }
      })
    )
  })

  describe("shoppers", () => {
    it.effect("see their own orders only: another's is 404, the list holds only theirs", () =>
      Effect.gen(function* () {
        const me = yield* registeredShopper()
        const other = yield* registeredShopper()
        const mine = yield* placeOrder({ customerId: me.customerId, email: me.email })
        const theirs = yield* placeOrder({ customerId: other.customerId, email: other.email })
        const guest = yield* placeOrder()
        expect((yield* getOrder(me.accessToken, mine.id)).id).toBe(mine.id)
        for (const id of [theirs.id, guest.id]) {
          expectError(
            yield* call("GET", `/v1/orders/${id}`, { token: me.accessToken }),
            404,
            "resource_missing"
          )
        }
        const listed = yield* call(
          "GET",
          `/v1/orders${query({ customerId: other.customerId, limit: 100 })}`,
          {
            token: me.accessToken
          }
        )
        expect(listed.status, listed.text).toBe(200)
        expect(listed.body.data.map((o: Body) => o.id)).toEqual([mine.id])
        // A cursor naming another's order is unknown to a shopper, exactly as an id that never
        // existed: its existence and position stay hidden. Staff page past any order.
        for (const param of ["startingAfter", "endingBefore"]) {
          for (const id of [theirs.id, guest.id, yield* Ids.make("ord")]) {
            expectError(
              yield* call("GET", `/v1/orders${query({ [param]: id })}`, { token: me.accessToken }),
              400,
              "resource_missing",
              param
            )
          }
        }
        const staff = yield* call("GET", `/v1/orders${query({ startingAfter: theirs.id, limit: 1 })}`, {
          token: yield* adminToken
        })
        expect(staff.status, staff.text).toBe(200)
      })
    )

    it.effect("cannot fulfil (write:orders is staff's) → 403", () =>
      Effect.gen(function* () {
        const me = yield* registeredShopper()
        const mine = yield* placeOrder({ customerId: me.customerId, email: me.email })
        expectError(
          yield* call("POST", `/v1/orders/${mine.id}/fulfill`, { token: me.accessToken, json: {} }),
          403,
          "insufficient_scope"
        )
      })
    )
  })

  describe("GET /v1/orders", () => {
    it.effect("filters by status, customerId, email and creation time; pages newest first", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const shopper = yield* registeredShopper()
        const email = uniqueEmail("lister")
        const a = yield* placeOrder({ customerId: shopper.customerId, email })
        const b = yield* placeOrder({ customerId: shopper.customerId, email, payment: "authorized" })
        const c = yield* placeOrder({ customerId: shopper.customerId, email })
        const list = (params: Record<string, string | number | undefined>) =>
          Effect.map(call("GET", `/v1/orders${query(params)}`, { token }), (r) => {
            expect(r.status, r.text).toBe(200)
            expect(r.body.object).toBe("list")
            return r.body as { data: Array<Body>; hasMore: boolean }
          })
        expect((yield* list({ customerId: shopper.customerId })).data.map((o) => o.id)).toEqual([
          c.id,
          b.id,
          a.id
        ])
        expect((yield* list({ email: email.toUpperCase() })).data.map((o) => o.id)).toEqual([
          c.id,
          b.id,
          a.id
        ])
        expect(
          (yield* list({ customerId: shopper.customerId, status: "pending" })).data.map((o) => o.id)
        ).toEqual([b.id])
        expect(
          (yield* list({ customerId: shopper.customerId, createdAfter: "2000-01-01" })).data
        ).toHaveLength(3)
        expect((yield* list({ customerId: shopper.customerId, createdAfter: "9999-01-01" })).data).toEqual([])
        expect((yield* list({ customerId: shopper.customerId, createdBefore: "2000-01-01" })).data).toEqual(
          []
        )
        expect(
          (yield* list({ customerId: shopper.customerId, createdBefore: "9999-01-01" })).data
        ).toHaveLength(3)
        const first = yield* list({ customerId: shopper.customerId, limit: 2 })
        expect(first.data.map((o) => o.id)).toEqual([c.id, b.id])
        expect(first.hasMore).toBe(true)
        const next = yield* list({ customerId: shopper.customerId, limit: 2, startingAfter: b.id })
        expect(next.data.map((o) => o.id)).toEqual([a.id])
        expect(next.hasMore).toBe(false)
        const back = yield* list({ customerId: shopper.customerId, limit: 2, endingBefore: a.id })
        expect(back.data.map((o) => o.id)).toEqual([c.id, b.id])
      })
    )

    it.effect("bad parameters → 400 with param", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const cases: ReadonlyArray<readonly [Record<string, string>, string]> = [
          [{ status: "shipped" }, "status"],
          [{ customerId: "nope" }, "customerId"],
          [{ createdAfter: "yesterday" }, "createdAfter"],
          [{ limit: "0" }, "limit"],
          [{ startingAfter: "prod_01jd4x8m6ffq2b3n5r7t9v1w3y" }, "startingAfter"]
        ]
        for (const [params, param] of cases) {
          const r = yield* call("GET", `/v1/orders${query(params)}`, { token })
          expect(r.status, r.text).toBe(400)
          expect(r.body.error.param, r.text).toBe(param)
        }
        // An enum's error names every allowed value, not only the first one tried.
        const badStatus = yield* call("GET", `/v1/orders${query({ status: "shipped" })}`, { token })
        expect(badStatus.body.error.message).toBe(
          "status must be one of pending, confirmed, partially_fulfilled, fulfilled, cancelled, refunded"
        )
        const badReason = yield* call("POST", `/v1/orders/${(yield* placeOrder()).id}/refund`, {
          token,
          json: { reason: "x".repeat(5000) }
        })
        expectError(badReason, 400, "parameter_invalid", "reason")
        expect(badReason.body.error.message).toBe(
          "reason must be one of duplicate, fraudulent, requested_by_customer, other"
        )
        expectError(
          yield* call("GET", `/v1/orders${query({ startingAfter: yield* Ids.make("ord") })}`, { token }),
          400,
          "resource_missing",
          "startingAfter"
        )
      })
    )
  })

  describe("actions whose fields are all optional", () => {
    it.effect("fulfil, refund and cancel take no body at all, as {} (a non-object body is still a 400)", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const shipped = yield* paidOrder(token)
        const fulfilled = yield* call("POST", `/v1/orders/${shipped.id}/fulfill`, { token })
        expect(fulfilled.status, fulfilled.text).toBe(200)
        expect(fulfilled.body).toMatchObject({ status: "fulfilled", fulfillmentStatus: "fulfilled" })
        const refunded = yield* call("POST", `/v1/orders/${shipped.id}/refund`, { token })
        expect(refunded.status, refunded.text).toBe(200)
        expect(refunded.body).toMatchObject({
          status: "refunded",
          paymentStatus: "refunded",
          amountRefunded: 3000
        })

        const unshipped = yield* paidOrder(token)
        const refused = yield* call("POST", `/v1/orders/${unshipped.id}/cancel`, { token, json: [] })
        expectError(refused, 400, "parameter_invalid")
        expect(refused.body.error.message).toBe("the request body must be a JSON object")
        expect((yield* getOrder(token, unshipped.id)).status).toBe("confirmed")
        const cancelled = yield* call("POST", `/v1/orders/${unshipped.id}/cancel`, { token })
        expect(cancelled.status, cancelled.text).toBe(200)
        expect(cancelled.body).toMatchObject({ status: "cancelled" })
      })
    )
  })
})
