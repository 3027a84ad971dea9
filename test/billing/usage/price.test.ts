/**
 * The catalog's usage price names the property `unique_count` counts (`uniqueKey`, issue #21 item 3):
 * required with `unique_count`, refused with any other aggregation, shown on the product, and
 * snapshotted by a subscription, whose summary counts the distinct values.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { unique } from "../../support/catalog.js"
import { adminToken, registeredShopper } from "../../support/customers.js"
import { call, expectError, IdentityHttp } from "../../support/identity.js"

const product = (usage: Record<string, unknown>) => ({
  name: "Metered plan",
  sku: unique("METER"),
  price: { amount: 1000, currency: "USD", type: "recurring", recurring: { interval: "month", usage } }
})

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("usage price uniqueKey", (it) => {
  it.effect("required with unique_count, refused otherwise, shown on the product", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const missing = yield* call("POST", "/v1/products", {
        token,
        json: product({ meter: "seats", aggregation: "unique_count", unitAmount: 5 })
      })
      expectError(missing, 400, "parameter_invalid", "price.recurring.usage.uniqueKey")
      const extra = yield* call("POST", "/v1/products", {
        token,
        json: product({ meter: "calls", aggregation: "sum", unitAmount: 5, uniqueKey: "user" })
      })
      expectError(extra, 400, "parameter_invalid", "price.recurring.usage.uniqueKey")
      const ok = yield* call("POST", "/v1/products", {
        token,
        json: product({ meter: "seats", aggregation: "unique_count", unitAmount: 5, uniqueKey: "user" })
      })
      expect(ok.status, ok.text).toBe(201)
      expect(ok.body.price.recurring.usage).toEqual({
        meter: "seats",
        aggregation: "unique_count",
        unitAmount: 5,
        includedUnits: 0,
        uniqueKey: "user"
      })
      // A subscription snapshots the key: its summary counts distinct properties[uniqueKey].
      const shopper = yield* registeredShopper()
      const sub = yield* call("POST", "/v1/subscriptions", {
        token,
        json: { customerId: shopper.customerId, productId: ok.body.id, paymentMethod: "pm_card_visa" }
      })
      expect(sub.status, sub.text).toBe(201)
      for (const [i, user] of ["ada", "bob", "ada", "cy"].entries()) {
        const recorded = yield* call("POST", "/v1/usage", {
          token,
          json: {
            subscriptionId: sub.body.id,
            meter: "seats",
            identifier: `seat-${sub.body.id}-${i}`,
            properties: { user }
          }
        })
        expect(recorded.status, recorded.text).toBe(201)
      }
      const summary = yield* call("GET", `/v1/usage?subscriptionId=${sub.body.id}`, { token })
      expect(summary.status, summary.text).toBe(200)
      expect(summary.body).toMatchObject({ aggregation: "unique_count", quantity: 3, eventCount: 4 })
      const sum = yield* call("POST", "/v1/products", {
        token,
        json: product({ meter: "calls", aggregation: "sum", unitAmount: 5 })
      })
      expect(sum.status, sum.text).toBe(201)
      expect(sum.body.price.recurring.usage).toEqual({
        meter: "calls",
        aggregation: "sum",
        unitAmount: 5,
        includedUnits: 0
      })
    })
  )
})
