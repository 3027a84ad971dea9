/**
 * What billing tells the world (issue #21 items 5 and 8): the notifications of spec §6.5
 * (`subscription.created`, `subscription.renewed`, `payment.failed`, `subscription.cancelled`) at the
 * real SMTP sink through the existing triggers, the public events for webhooks (extensions beyond
 * spec §6.1), and both read models rebuilt from the log to identical rows.
 */

import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { expect } from "vitest"
import { SubscriptionsProjection } from "../../src/billing/projection.js"
import { rebuildProjection } from "../../src/processors/Rebuild.js"
import { isWebhookEventType } from "../../src/webhooks/catalogue.js"
import {
  getSubscription,
  ok,
  recurringProduct,
  runDue,
  subscribe,
  subscribedShopper
} from "../support/billing.js"
import { makeShiftedClock } from "../support/clock.js"
import { registeredShopper } from "../support/customers.js"
import { rowsOf } from "../support/database.js"
import { apiKeyWith, call } from "../support/identity.js"
import { notificationsHttp, Peers } from "../support/notifications.js"

const shifted = makeShiftedClock()
const run = runDue(shifted.clock)
const staff = Effect.map(apiKeyWith(["admin"]), (k) => k.key)

const subjectsTo = (to: string, count: number, timeoutMs = 15_000) =>
  Effect.gen(function* () {
    const { smtp } = yield* Peers
    const deadline = Date.now() + timeoutMs
    while (true) {
      const mails = smtp.messages.filter((m) => m.to.includes(to))
      if (mails.length >= count) return mails.map((m) => m.subject)
      if (Date.now() > deadline)
        return yield* Effect.dieMessage(
          `${count} mails expected, got: ${mails.map((m) => m.subject).join(" | ")}`
        )
      yield* Effect.sleep("50 millis")
    }
  })

const publicEventsOf = (subscriptionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ readonly type: string }>`SELECT type FROM event_store.public_events
      WHERE stream_id = ${`subscription-${subscriptionId}`} ORDER BY position`
  )

layer(notificationsHttp({ clock: shifted.clock }), { excludeTestServices: true, timeout: 180_000 })(
  "billing events",
  (it) => {
    it.effect("created, renewed, payment failed, cancelled: mails and public events", () =>
      Effect.gen(function* () {
        const token = yield* staff
        const { shopper, product, sub } = yield* subscribedShopper(
          token,
          { interval: "week" },
          { amount: 1500 }
        )
        const plan = product.name
        expect(yield* subjectsTo(shopper.email, 1)).toEqual([`Your subscription to ${plan} has started`])
        yield* shifted.advance(Duration.days(7))
        yield* Effect.sleep("10 millis")
        yield* run
        expect((yield* getSubscription(token, sub.id)).latestInvoice.status).toBe("paid")
        expect((yield* subjectsTo(shopper.email, 2))[1]).toBe(`Your subscription to ${plan} has renewed`)
        ok(200)(
          yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
            token,
            json: { paymentMethod: "pm_card_visa_chargeDeclined" }
          })
        )
        yield* shifted.advance(Duration.days(7))
        yield* run
        expect((yield* getSubscription(token, sub.id)).status).toBe("past_due")
        expect((yield* subjectsTo(shopper.email, 3))[2]).toBe("Your payment didn't go through")
        ok(200)(yield* call("DELETE", `/v1/subscriptions/${sub.id}`, { token }))
        expect((yield* subjectsTo(shopper.email, 4))[3]).toBe(
          `Your subscription to ${plan} has been cancelled`
        )
        const types = (yield* publicEventsOf(sub.id)).map((e) => e.type)
        for (const type of [
          "subscription.created",
          "subscription.updated",
          "subscription.renewed",
          "subscription.cancelled",
          "invoice.paid",
          "invoice.payment_failed"
        ])
          expect(types).toContain(type)
        for (const type of [
          "subscription.created",
          "subscription.updated",
          "subscription.cancelled",
          "invoice.paid",
          "invoice.payment_failed"
        ])
          expect(isWebhookEventType(type)).toBe(true)
      })
    )

    it.effect("the subscriptions and invoices read models rebuild to identical rows", () =>
      Effect.gen(function* () {
        const token = yield* staff
        const shopper = yield* registeredShopper()
        const product = yield* recurringProduct(token, { interval: "day" })
        const make = (json: Record<string, unknown>) =>
          Effect.map(
            subscribe(token, { customerId: shopper.customerId, productId: product.id, ...json }),
            ok(201)
          )
        const active = yield* make({ paymentMethod: "pm_card_visa", metadata: { k: "v" } })
        yield* make({ trialPeriodDays: 5 })
        yield* make({ paymentMethod: "pm_card_visa_chargeDeclined" })
        const canceled = yield* make({ paymentMethod: "pm_card_visa" })
        ok(200)(yield* call("DELETE", `/v1/subscriptions/${canceled.id}?prorate=true`, { token }))
        ok(200)(yield* call("PATCH", `/v1/subscriptions/${active.id}`, { token, json: { quantity: 3 } }))
        yield* shifted.advance(Duration.days(1))
        yield* Effect.sleep("10 millis")
        yield* run
        const snapshot = Effect.all({
          subscriptions: rowsOf("billing.subscriptions", "id"),
          invoices: rowsOf("billing.invoices", "id")
        })
        const before = yield* snapshot
        expect(before.invoices.length).toBeGreaterThanOrEqual(4)
        yield* rebuildProjection(SubscriptionsProjection, { batchSize: 3 })
        expect(yield* snapshot).toEqual(before)
      })
    )
  }
)
