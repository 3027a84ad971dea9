/**
 * The payments read model is a pure function of the log: after a varied history over HTTP (declines
 * and retries, 3-D Secure approved and failed, manual and partial captures, voids and cancels,
 * partial, full and refused refunds) a rebuild from position zero reproduces exactly the rows of
 * `payments.payment_intents`, `payments.payments` and `payments.refunds`, whatever the batches.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { PaymentsProjection } from "../../src/payments/projection.js"
import { rebuildProjection } from "../../src/processors/Rebuild.js"
import { createCustomer } from "../support/customers.js"
import { rowsOf } from "../support/database.js"
import { call, IdentityHttp } from "../support/identity.js"
import { createIntent, createPayment, ok, staffToken } from "../support/payments.js"

const tables = Effect.all({
  intents: rowsOf("payments.payment_intents", "payment_intent_id"),
  payments: rowsOf("payments.payments", "payment_id"),
  refunds: rowsOf("payments.refunds", "refund_id")
})

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("payments projection rebuild", (it) => {
  it.effect("rebuilding from the log reproduces every payments row", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const post = (path: string, json: unknown) => call("POST", path, { token, json })
      const customer = yield* createCustomer(token)

      // Declined, then retried with another card.
      const declined = yield* post("/v1/payment-intents", {
        amount: 1500,
        currency: "GBP",
        paymentMethod: "pm_card_visa_chargeDeclinedInsufficientFunds",
        confirm: true,
        customerId: customer.id,
        metadata: { order: "o-1" }
      })
      expect(declined.status).toBe(402)
      const retried = yield* Effect.map(
        post(`/v1/payment-intents/${declined.body.error.paymentIntent.id}/confirm`, {
          paymentMethod: "pm_card_visa"
        }),
        ok(200)
      )
      // 3-D Secure approved (manual, then partly captured) and failed.
      const secure = yield* createIntent(token, {
        paymentMethod: "pm_card_threeDSecure2Required",
        captureMethod: "manual"
      })
      yield* Effect.map(post(`/v1/payment-intents/${secure.id}/confirm`, {}), ok(200))
      yield* Effect.map(
        post(`/v1/test/payment-intents/${secure.id}/authenticate`, { outcome: "approve" }),
        ok(200)
      )
      yield* Effect.map(post(`/v1/payment-intents/${secure.id}/capture`, { amountToCapture: 1200 }), ok(200))
      const insecure = yield* createIntent(token, {
        paymentMethod: "pm_card_authenticationRequired",
        confirm: true
      })
      expect(
        (yield* post(`/v1/test/payment-intents/${insecure.id}/authenticate`, { outcome: "fail" })).status
      ).toBe(402)
      // Waiting for authentication, then confirmed with a new card (the waiting payment canceled).
      const replaced = yield* createIntent(token, {
        paymentMethod: "pm_card_threeDSecure2Required",
        confirm: true
      })
      expect(replaced.status).toBe("requires_action")
      yield* Effect.map(
        post(`/v1/payment-intents/${replaced.id}/confirm`, { paymentMethod: "pm_card_visa" }),
        ok(200)
      )
      // Voided and plainly canceled.
      const held = yield* createPayment(token, { captureMethod: "manual", description: "held" })
      yield* Effect.map(
        post(`/v1/payment-intents/${held.paymentIntentId}/cancel`, { cancellationReason: "duplicate" }),
        ok(200)
      )
      const abandoned = yield* createIntent(token)
      yield* Effect.map(post(`/v1/payment-intents/${abandoned.id}/cancel`, {}), ok(200))
      // Refunds: partial, the rest, and one the processor refuses.
      const paid = yield* createPayment(token, { amount: 900, customerId: customer.id })
      yield* Effect.map(post(`/v1/payments/${paid.id}/refund`, { amount: 100, reason: "other" }), ok(200))
      yield* Effect.map(post(`/v1/payments/${paid.id}/refund`, {}), ok(200))
      yield* Effect.map(post(`/v1/payments/${retried.latestPaymentId}/refund`, { amount: 500 }), ok(200))
      const refusing = yield* createPayment(token, { paymentMethod: "pm_card_refundFail" })
      yield* Effect.map(post(`/v1/payments/${refusing.id}/refund`, {}), ok(200))

      const before = yield* tables
      expect(before.intents.length).toBeGreaterThanOrEqual(7)
      expect(before.refunds.length).toBeGreaterThanOrEqual(4)

      // Damage the read model first: what comes back can only come from the log.
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE payments.payments SET status = 'failed', amount_refunded = 0`
      yield* sql`DELETE FROM payments.refunds`
      yield* sql`UPDATE payments.payment_intents SET status = 'canceled', last_payment_error = NULL`

      const report = yield* rebuildProjection(PaymentsProjection, { batchSize: 7 })
      expect(report.events).toBeGreaterThan(30)
      expect(yield* tables).toEqual(before)
      // An intent created and confirmed in one command is projected by one statement for its two
      // events (what the live rows above came from); one event per batch takes the one-by-one path,
      // and batches of two split some of those pairs: every way leaves the same rows.
      for (const batchSize of [1, 2]) {
        yield* sql`DELETE FROM payments.payments`
        yield* rebuildProjection(PaymentsProjection, { batchSize })
        expect(yield* tables).toEqual(before)
      }

      // The rebuilt tables are live.
      const later = yield* createPayment(token, { amount: 321 })
      expect((yield* Effect.map(call("GET", `/v1/payments/${later.id}`, { token }), ok(200))).amount).toBe(
        321
      )
    })
  )
})
