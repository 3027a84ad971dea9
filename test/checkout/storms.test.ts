/**
 * Checkouts under concurrency, on PostgreSQL (issue #20 item 7; skipped on PGlite, one connection):
 * 200 concurrent checkouts for the last 10 units → 10 created, 190 refused with 409
 * `insufficient_stock`, stock never negative; 20 concurrent confirms of one checkout racing a direct
 * confirm of its intent (Stripe.js style, with the client secret) and the completion flow → one
 * order, one charge at the processor, one `order.created` at a real webhook receiver.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { checkoutExpiry } from "../../src/checkout/expiry.js"
import { checkoutCompletion } from "../../src/flows/checkoutCompletion.js"
import { stockedProduct } from "../support/catalog.js"
import { createCheckout, getCheckout, stockOf } from "../support/checkout.js"
import { usingRealPostgres } from "../support/database.js"
import { call, type Reply } from "../support/identity.js"
import { eventually } from "../support/notifications.js"
import { processorCalls, staffToken } from "../support/payments.js"
import { TestReceiver, WEBHOOK_PROCESSORS, webhooksHttp } from "../support/webhooks.js"

const all = <A, E, R>(effects: ReadonlyArray<Effect.Effect<A, E, R>>) =>
  Effect.all(effects, { concurrency: "unbounded" })

const app = webhooksHttp({ processors: [...WEBHOOK_PROCESSORS, checkoutCompletion(), checkoutExpiry()] })

layer(app, { excludeTestServices: true, timeout: 240_000 })("checkouts under concurrency", (it) => {
  it.effect.skipIf(!usingRealPostgres)(
    "200 concurrent checkouts for the last 10 units: 10 × 201, 190 × 409, never oversold",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const product = yield* stockedProduct(token, 10)
        const replies: ReadonlyArray<Reply> = yield* all(
          Array.from({ length: 200 }, () =>
            call("POST", "/v1/checkouts", {
              token,
              json: { email: "storm@example.com", lineItems: [{ productId: product.id, quantity: 1 }] }
            })
          )
        )
        const byStatus = new Map<number, number>()
        for (const r of replies) byStatus.set(r.status, (byStatus.get(r.status) ?? 0) + 1)
        expect(Object.fromEntries(byStatus)).toEqual({ 201: 10, 409: 190 })
        for (const r of replies.filter((r) => r.status === 409)) {
          expect(r.body.error.code).toBe("insufficient_stock")
          expect(r.body.error.param).toBe("lineItems[0].quantity")
        }
        expect(yield* stockOf(token, product.id)).toEqual({ stocked: 10, reserved: 10, available: 0 })
      })
  )

  it.effect.skipIf(!usingRealPostgres)(
    "20 concurrent confirms + a racing direct intent confirm: one order, one charge, one order.created",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const receiver = yield* TestReceiver
        const hook = yield* call("POST", "/v1/webhooks", {
          token,
          json: { url: receiver.url("/orders"), events: ["order.created"] }
        })
        expect(hook.status, hook.text).toBe(201)
        const product = yield* stockedProduct(token, 5)
        const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 2 }])
        const confirms = Array.from({ length: 20 }, () =>
          call("POST", `/v1/checkouts/${checkout.id}/confirm`, {
            token,
            json: { paymentMethod: "pm_card_visa" }
          })
        )
        const direct = call("POST", `/v1/payment-intents/${checkout.paymentIntentId}/confirm`, {
          json: { clientSecret: checkout.clientSecret, paymentMethod: "pm_card_visa" }
        })
        const [directReply, ...replies] = yield* all([direct, ...confirms])
        expect([200, 409]).toContain(directReply?.status)
        const orderIds = new Set<string>()
        for (const r of replies) {
          expect(r.status, r.text).toBe(200)
          expect(r.body.status).toBe("complete")
          orderIds.add(r.body.orderId)
        }
        expect(orderIds.size).toBe(1)
        const [orderId] = [...orderIds]
        expect((yield* getCheckout(token, checkout.id)).orderId).toBe(orderId)
        const calls = yield* processorCalls(checkout.paymentIntentId)
        expect(calls.map((c) => c.operation)).toEqual(["authorize"])
        expect(yield* stockOf(token, product.id)).toEqual({ stocked: 5, reserved: 2, available: 3 })
        // The completion flow caught up with the payment events and did nothing more.
        const delivered = yield* eventually(
          Effect.sync(() => {
            const got = receiver.requests().filter((r) => r.path === "/orders")
            return got.length > 0 ? got : undefined
          }),
          15_000
        )
        yield* Effect.sleep("1500 millis")
        const orders = receiver
          .requests()
          .filter((r) => r.path === "/orders")
          .map((r) => JSON.parse(r.body))
        expect(delivered.length).toBeGreaterThan(0)
        expect(new Set(orders.map((o) => o.id)).size).toBe(1)
        expect(orders.every((o) => o.type === "order.created" && o.data.object.id === orderId)).toBe(true)
      })
  )
})
