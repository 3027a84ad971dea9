/**
 * Usage has no ceiling on its quantity (a sum of records, each below 1e15), so its amount can pass
 * anything a payment can be. The summary still answers (its estimate capped at
 * MAX_REPORTED_AMOUNT, an exact integer), and the renewal still invoices: the invoice is issued open,
 * its collection fails with `amount_too_large` without reaching the processor, and dunning starts.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { MAX_REPORTED_AMOUNT } from "../../../src/billing/usage/decider.js"
import { callsOf } from "../../support/billing.js"
import { createProduct } from "../../support/catalog.js"
import { call, IdentityHttp, uniqueEmail } from "../../support/identity.js"
import { ok, staffToken } from "../../support/payments.js"

const T0 = new Date("2031-03-01T10:00:00.000Z")
const iso = (d: Date) => d.toISOString()

layer(IdentityHttp, { excludeTestServices: true, timeout: 180_000 })(
  "usage amounts beyond a payment",
  (it) => {
    it.effect(
      "a huge usage amount: summary capped, invoice open with amount_too_large, nothing charged",
      () =>
        Effect.gen(function* () {
          const token = yield* staffToken
          const clock = ok(201)(
            yield* call("POST", "/v1/test/clocks", { token, json: { frozenTime: iso(T0) } })
          )
          const customer = ok(201)(
            yield* call("POST", "/user", {
              token,
              json: {
                email: uniqueEmail("huge"),
                firstName: "Huge",
                lastName: "Usage",
                testClockId: clock.id
              }
            })
          )
          const product = yield* createProduct(token, {
            price: {
              amount: 500,
              currency: "USD",
              type: "recurring",
              recurring: {
                interval: "month",
                usage: { meter: "bytes", aggregation: "sum", unitAmount: 99_999_999_999 }
              }
            }
          })
          const sub = ok(201)(
            yield* call("POST", "/v1/subscriptions", {
              token,
              json: { customerId: customer.id, productId: product.id, paymentMethod: "pm_card_visa" }
            })
          )
          for (const i of [1, 2, 3]) {
            const recorded = yield* call("POST", "/v1/usage", {
              token,
              json: {
                subscriptionId: sub.id,
                meter: "bytes",
                value: 999_999_999_999_999,
                identifier: `huge-${sub.id}-${i}`,
                timestamp: iso(new Date(T0.getTime() + i * 60_000))
              }
            })
            expect(recorded.status, recorded.text).toBe(201)
          }
          const summary = ok(200)(
            yield* call("GET", `/v1/usage?subscriptionId=${sub.id}&groupBy=day`, { token })
          )
          expect(summary).toMatchObject({
            quantity: 2_999_999_999_999_997,
            estimatedAmount: MAX_REPORTED_AMOUNT
          })

          const advanced = yield* call("POST", `/v1/test/clocks/${clock.id}/advance`, {
            token,
            json: { frozenTime: "2031-04-01T11:00:00.000Z" }
          })
          expect(advanced.status, advanced.text).toBe(200)
          const after = ok(200)(yield* call("GET", `/v1/subscriptions/${sub.id}`, { token }))
          expect(after.status).toBe("past_due")
          const invoices = ok(200)(yield* call("GET", `/v1/invoices?subscriptionId=${sub.id}`, { token }))
          const renewal = invoices.data.find(
            (i: { billingReason: string }) => i.billingReason === "subscription_cycle"
          )
          expect(renewal).toMatchObject({
            status: "open",
            paymentIntentId: null,
            failureCode: "amount_too_large",
            attemptCount: 1,
            total: 500 + MAX_REPORTED_AMOUNT
          })
          expect(renewal.lines[1]).toMatchObject({ type: "usage", amount: MAX_REPORTED_AMOUNT })
          // Nothing above what a payment can be ever reached the processor.
          const authorized = (yield* callsOf("")).filter((c) => c.amount > 99_999_999)
          expect(authorized).toEqual([])
        })
    )
  }
)
