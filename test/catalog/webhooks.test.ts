/**
 * Inventory and product events reach webhooks through the existing dispatcher (issue #18 item 4):
 * a webhook subscribed to `inventory.out_of_stock` and `inventory.low_stock` receives them, signed
 * like every other event, with research §2.2's payload; one subscribed to `product.updated` gets
 * the full product snapshot. Processors running, a real local receiver.
 */
import { createHmac } from "node:crypto"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { reserve, stockedProduct } from "../support/catalog.js"
import { adminToken } from "../support/customers.js"
import { call } from "../support/identity.js"
import { eventually } from "../support/notifications.js"
import { TestReceiver, webhooksHttp } from "../support/webhooks.js"

const SETTLE_MS = 30_000

layer(webhooksHttp(), { excludeTestServices: true, timeout: 120_000 })("catalog events at webhooks", (it) => {
  it.effect(
    "inventory.low_stock and inventory.out_of_stock arrive signed; product.updated with the snapshot",
    () =>
      Effect.gen(function* () {
        const receiver = yield* TestReceiver
        const token = yield* adminToken
        const hook = yield* call("POST", "/webhook", {
          token,
          json: {
            url: receiver.url("/inventory"),
            events: [
              "inventory.low_stock",
              "inventory.out_of_stock",
              "inventory.restocked",
              "product.updated"
            ]
          }
        })
        expect(hook.status, hook.text).toBe(201)
        const secret: string = hook.body.secret
        const p = yield* stockedProduct(token, 4, { lowStockThreshold: 2 })
        // 4 → 2 available: low stock (through a reservation); → 0: out of stock (through a PATCH).
        yield* reserve("chk_webhook_test", [{ productId: p.id, quantity: 2 }])
        const patched = yield* call("PATCH", `/v1/products/${p.id}`, {
          token,
          json: { inventory: { stockedQuantity: 2 } }
        })
        expect(patched.status, patched.text).toBe(200)

        const received = yield* eventually(
          Effect.sync(() => {
            const got = receiver.requests().filter((r) => r.path === "/inventory")
            return got.length >= 3 ? got : undefined
          }),
          SETTLE_MS
        )
        const byType = new Map(received.map((r) => [r.headers["x-service-event"], r]))
        for (const r of received) {
          const timestamp = r.headers["x-service-timestamp"] ?? ""
          const expected = createHmac("sha256", secret).update(`${timestamp}.${r.body}`).digest("hex")
          expect(r.headers["x-service-signature"]).toBe(expected)
          expect(r.headers["x-service-delivery"]).toMatch(/^dlv_/)
        }
        const low = JSON.parse(byType.get("inventory.low_stock")?.body ?? "{}")
        expect(low).toMatchObject({
          type: "inventory.low_stock",
          data: {
            productId: p.id,
            stockedQuantity: 4,
            reservedQuantity: 2,
            availableQuantity: 2,
            lowStockThreshold: 2,
            previousState: "in_stock",
            state: "low_stock"
          }
        })
        expect(low.id).toMatch(/^evt_/)
        const out = JSON.parse(byType.get("inventory.out_of_stock")?.body ?? "{}")
        expect(out.data).toMatchObject({ productId: p.id, availableQuantity: 0, state: "out_of_stock" })
        const updated = JSON.parse(byType.get("product.updated")?.body ?? "{}")
        expect(updated.data).toEqual(JSON.parse(JSON.stringify(patched.body)))
      })
  )
})
