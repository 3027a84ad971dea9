/**
 * Payments over real HTTP (issue #19 items 1, 2, 3 (test processor), 4, 6, 7): every route, state and
 * error code of payment intents, payments and refunds; the test processor's tokens and card numbers;
 * the public events and the `payment.failed` notification; who may read and confirm what; bad input
 * answered with the one error body and no processor call.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { origin } from "../../src/eventstore/Checkpoint.js"
import { type PublicEvent, readPublicEvents } from "../../src/eventstore/PublicEvents.js"
import { automaticNotificationId, notifyForEvents } from "../../src/notifications/automatic.js"
import { createCustomer } from "../support/customers.js"
import { apiKeyWith, call, expectError, IdentityHttp, registerShopper } from "../support/identity.js"
import { eventually } from "../support/notifications.js"
import {
  createIntent,
  createPayment,
  type Json,
  ok,
  processorCalls,
  staffToken
} from "../support/payments.js"

const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
const GHOST = {
  pi: "pi_01jd4x8m6ffq2b3n5r7t9v1w3y",
  pay: "pay_01jd4x8m6ffq2b3n5r7t9v1w3y",
  re: "re_01jd4x8m6ffq2b3n5r7t9v1w3y"
}

const publicEventsOf = (paymentId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ type: string; data: Json }>`SELECT type, data FROM event_store.public_events
      WHERE data->>'id' = ${paymentId} ORDER BY transaction_id, position`
  )

const withoutSecret = (intent: Json) => {
  const { clientSecret: _, ...rest } = intent
  return rest
}

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("payments over HTTP", (it) => {
  // --- Payment intents ------------------------------------------------------------------------------

  it.effect("create: 201, Stripe's fields, clientSecret on create only; GET shows the same intent", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const intent = yield* createIntent(token, { amount: 1999, currency: "eur", metadata: { order: "A-1" } })
      expect(intent).toEqual({
        object: "payment_intent",
        id: expect.stringMatching(/^pi_[0-9a-z]{26}$/),
        amount: 1999,
        currency: "EUR",
        status: "requires_payment_method",
        captureMethod: "automatic",
        customerId: null,
        description: null,
        metadata: { order: "A-1" },
        paymentMethod: null,
        lastPaymentError: null,
        nextAction: null,
        cancellationReason: null,
        latestPaymentId: null,
        amountCapturable: 0,
        amountReceived: 0,
        livemode: false,
        canceledAt: null,
        createdAt: expect.stringMatching(ISO_MS),
        updatedAt: expect.stringMatching(ISO_MS),
        clientSecret: expect.stringMatching(new RegExp(`^${intent.id}_secret_[0-9a-f]{32}$`))
      })
      const got = yield* Effect.map(call("GET", `/v1/payment-intents/${intent.id}`, { token }), ok(200))
      expect(got).toEqual(withoutSecret(intent))
      const withMethod = yield* createIntent(token, { paymentMethod: "pm_card_visa" })
      expect(withMethod.status).toBe("requires_confirmation")
      expect(withMethod.paymentMethod).toEqual({
        token: "pm_card_visa",
        brand: "visa",
        last4: "4242",
        expMonth: 12,
        expYear: 2034
      })
    })
  )

  it.effect("confirm: succeeded (automatic capture), its payment succeeded; GET equals the answer", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const intent = yield* createIntent(token, {
        paymentMethod: "pm_card_mastercard",
        description: "Order 7"
      })
      const confirmed = yield* Effect.map(
        call("POST", `/v1/payment-intents/${intent.id}/confirm`, { token, json: {} }),
        ok(200)
      )
      expect(confirmed).toMatchObject({
        status: "succeeded",
        amountReceived: 2000,
        amountCapturable: 0,
        latestPaymentId: expect.stringMatching(/^pay_/)
      })
      expect(yield* Effect.map(call("GET", `/v1/payment-intents/${intent.id}`, { token }), ok(200))).toEqual(
        confirmed
      )
      const payment = yield* Effect.map(
        call("GET", `/v1/payments/${confirmed.latestPaymentId}`, { token }),
        ok(200)
      )
      expect(payment).toMatchObject({
        object: "payment",
        paymentIntentId: intent.id,
        amount: 2000,
        currency: "USD",
        status: "succeeded",
        amountCaptured: 2000,
        amountRefunded: 0,
        description: "Order 7",
        processor: "test",
        processorReference: expect.stringMatching(/^test_ch_/),
        paymentMethod: { token: "pm_card_mastercard", brand: "mastercard", last4: "4444" },
        authorizedAt: expect.stringMatching(ISO_MS),
        capturedAt: expect.stringMatching(ISO_MS)
      })
      // The processor was asked once, with the key derived from the intent.
      const calls = yield* processorCalls(intent.id)
      expect(calls.map((c) => [c.operation, c.idempotencyKey, c.requests])).toEqual([
        ["authorize", `${intent.id}:confirm:1`, 1]
      ])
      // Terminal: another confirm → 409 with the intent.
      const again = yield* call("POST", `/v1/payment-intents/${intent.id}/confirm`, { token, json: {} })
      expectError(again, 409, "payment_intent_unexpected_state")
      expect(again.body.error.paymentIntent).toEqual(confirmed)
    })
  )

  it.effect(
    "confirm: true on create; a decline answers 402 card_error and the intent wants a new method",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const r = yield* call("POST", "/v1/payment-intents", {
          token,
          json: { amount: 500, currency: "USD", paymentMethod: "pm_card_visa_chargeDeclined", confirm: true }
        })
        expectError(r, 402, "card_declined")
        expect(r.body.error.declineCode).toBe("generic_decline")
        const intent = r.body.error.paymentIntent
        expect(intent).toMatchObject({
          status: "requires_payment_method",
          paymentMethod: null,
          clientSecret: expect.stringMatching(/_secret_/),
          lastPaymentError: {
            type: "card_error",
            code: "card_declined",
            declineCode: "generic_decline",
            paymentMethod: { token: "pm_card_visa_chargeDeclined", last4: "0002" }
          }
        })
        const failedPayment = intent.latestPaymentId
        // Not terminal: a new method succeeds, with a new attempt and a new payment.
        const retried = yield* Effect.map(
          call("POST", `/v1/payment-intents/${intent.id}/confirm`, {
            token,
            json: { paymentMethod: "pm_card_visa" }
          }),
          ok(200)
        )
        expect(retried.status).toBe("succeeded")
        expect(retried.lastPaymentError).toBeNull()
        expect(retried.latestPaymentId).not.toBe(failedPayment)
        const listed = yield* Effect.map(
          call("GET", `/v1/payments?paymentIntentId=${intent.id}`, { token }),
          ok(200)
        )
        expect(listed.data.map((p: Json) => [p.id, p.status])).toEqual([
          [retried.latestPaymentId, "succeeded"],
          [failedPayment, "failed"]
        ])
        expect((yield* processorCalls(intent.id)).map((c) => c.idempotencyKey)).toEqual([
          `${intent.id}:confirm:1`,
          `${intent.id}:confirm:2`
        ])
        const confirmedWithout = yield* createIntent(token)
        expectError(
          yield* call("POST", `/v1/payment-intents/${confirmedWithout.id}/confirm`, { token, json: {} }),
          400,
          "parameter_missing",
          "paymentMethod"
        )
      })
  )

  it.effect(
    "every decline card answers 402 with its code and declineCode, and publishes payment.failed",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const cases: ReadonlyArray<readonly [string, string, string]> = [
          ["pm_card_visa_chargeDeclined", "card_declined", "generic_decline"],
          ["pm_card_visa_chargeDeclinedInsufficientFunds", "card_declined", "insufficient_funds"],
          ["pm_card_visa_chargeDeclinedLostCard", "card_declined", "lost_card"],
          ["pm_card_visa_chargeDeclinedStolenCard", "card_declined", "stolen_card"],
          ["pm_card_chargeDeclinedExpiredCard", "expired_card", "expired_card"],
          ["pm_card_chargeDeclinedIncorrectCvc", "incorrect_cvc", "incorrect_cvc"],
          ["pm_card_chargeDeclinedProcessingError", "processing_error", "processing_error"],
          ["4000000000009995", "card_declined", "insufficient_funds"]
        ]
        for (const [paymentMethod, code, declineCode] of cases) {
          const r = yield* call("POST", "/v1/payments", {
            token,
            json: { amount: 1234, currency: "USD", paymentMethod }
          })
          expectError(r, 402, code)
          expect(r.body.error.declineCode, paymentMethod).toBe(declineCode)
          const payment = r.body.error.payment
          expect(payment).toMatchObject({
            status: "failed",
            failureCode: code,
            declineCode,
            amountCaptured: 0
          })
          expect((yield* publicEventsOf(payment.id)).map((e) => e.type)).toEqual(["payment.failed"])
        }
      })
  )

  it.effect(
    "test card numbers: accepted by the test processor, never stored (token, brand, last4 only)",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const payment = yield* createPayment(token, { paymentMethod: "4242 4242 4242 4242" })
        expect(payment.paymentMethod).toEqual({
          token: "pm_card_visa",
          brand: "visa",
          last4: "4242",
          expMonth: 12,
          expYear: 2034
        })
        const sql = yield* SqlClient.SqlClient
        const stored = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM event_store.events
        WHERE data::text LIKE '%4242424242424242%' OR data::text LIKE '%4242 4242 4242 4242%'`
        expect(stored[0]?.n).toBe(0)
        const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM payments.payments
        WHERE payment_method::text LIKE '%424242424242%'`
        expect(rows[0]?.n).toBe(0)
      })
  )

  it.effect(
    "requires_action: confirm alone → 409; confirm with a new paymentMethod abandons the waiting payment",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const intent = yield* createIntent(token, { paymentMethod: "pm_card_threeDSecure2Required" })
        const action = yield* Effect.map(
          call("POST", `/v1/payment-intents/${intent.id}/confirm`, { token, json: {} }),
          ok(200)
        )
        expect(action.status).toBe("requires_action")
        // As Stripe: no confirm without a new payment method while the customer's action is required.
        const refused = yield* call("POST", `/v1/payment-intents/${intent.id}/confirm`, { token, json: {} })
        expectError(refused, 409, "payment_intent_unexpected_state")
        expect(refused.body.error.paymentIntent).toMatchObject({ id: intent.id, status: "requires_action" })
        // A new payment method: a new attempt; the payment waiting for authentication is canceled.
        const replaced = yield* Effect.map(
          call("POST", `/v1/payment-intents/${intent.id}/confirm`, {
            token,
            json: { paymentMethod: "pm_card_visa" }
          }),
          ok(200)
        )
        expect(replaced).toMatchObject({ status: "succeeded", nextAction: null, amountReceived: 2000 })
        const payments = yield* Effect.map(
          call("GET", `/v1/payments?paymentIntentId=${intent.id}`, { token }),
          ok(200)
        )
        expect(payments.data.map((p: Json) => [p.id, p.status])).toEqual([
          [replaced.latestPaymentId, "succeeded"],
          [action.latestPaymentId, "canceled"]
        ])
        expect((yield* processorCalls(intent.id)).map((c) => [c.operation, c.idempotencyKey])).toEqual([
          ["authorize", `${intent.id}:confirm:1`],
          ["authorize", `${intent.id}:confirm:2`]
        ])
      })
  )

  it.effect("3-D Secure: requires_action with nextAction, completed by the test authenticate route", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const intent = yield* createIntent(token, { paymentMethod: "pm_card_authenticationRequired" })
      const action = yield* Effect.map(
        call("POST", `/v1/payment-intents/${intent.id}/confirm`, { token, json: {} }),
        ok(200)
      )
      expect(action).toMatchObject({
        status: "requires_action",
        nextAction: {
          type: "use_test_authentication",
          url: `/v1/test/payment-intents/${intent.id}/authenticate`
        }
      })
      expectError(
        yield* call("POST", `/v1/payment-intents/${intent.id}/confirm`, { token, json: {} }),
        409,
        "payment_intent_unexpected_state"
      )
      const approved = yield* Effect.map(
        call("POST", action.nextAction.url, { token, json: { outcome: "approve" } }),
        ok(200)
      )
      expect(approved).toMatchObject({ status: "succeeded", nextAction: null, amountReceived: 2000 })
      expectError(
        yield* call("POST", action.nextAction.url, { token, json: { outcome: "approve" } }),
        409,
        "payment_intent_unexpected_state"
      )
      // 3DS2 failing: 402, back to requires_payment_method.
      const second = yield* createIntent(token, {
        paymentMethod: "pm_card_threeDSecure2Required",
        captureMethod: "manual"
      })
      yield* Effect.map(
        call("POST", `/v1/payment-intents/${second.id}/confirm`, { token, json: {} }),
        ok(200)
      )
      const failed = yield* call("POST", `/v1/test/payment-intents/${second.id}/authenticate`, {
        token,
        json: { outcome: "fail" }
      })
      expectError(failed, 402, "payment_intent_authentication_failure")
      expect(failed.body.error.paymentIntent.status).toBe("requires_payment_method")
      expectError(
        yield* call("POST", `/v1/test/payment-intents/${second.id}/authenticate`, {
          token,
          json: { outcome: "maybe" }
        }),
        400,
        "parameter_invalid",
        "outcome"
      )
      expectError(
        yield* call("POST", `/v1/test/payment-intents/${GHOST.pi}/authenticate`, {
          token,
          json: { outcome: "approve" }
        }),
        404,
        "resource_missing"
      )
    })
  )

  it.effect("manual capture: requires_capture, partial capture releases the rest; wrong states → 409", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const intent = yield* createIntent(token, {
        amount: 1000,
        paymentMethod: "pm_card_visa",
        captureMethod: "manual",
        confirm: true
      })
      expect(intent).toMatchObject({ status: "requires_capture", amountCapturable: 1000, amountReceived: 0 })
      const payment = yield* Effect.map(
        call("GET", `/v1/payments/${intent.latestPaymentId}`, { token }),
        ok(200)
      )
      expect(payment).toMatchObject({ status: "authorized", amountCaptured: 0, capturedAt: null })
      expectError(
        yield* call("POST", `/v1/payment-intents/${intent.id}/capture`, {
          token,
          json: { amountToCapture: 1001 }
        }),
        400,
        "amount_too_large",
        "amountToCapture"
      )
      const captured = yield* Effect.map(
        call("POST", `/v1/payment-intents/${intent.id}/capture`, { token, json: { amountToCapture: 600 } }),
        ok(200)
      )
      expect(captured).toMatchObject({ status: "succeeded", amountCapturable: 0, amountReceived: 600 })
      const after = yield* Effect.map(
        call("GET", `/v1/payments/${intent.latestPaymentId}`, { token }),
        ok(200)
      )
      expect(after).toMatchObject({ status: "succeeded", amountCaptured: 600 })
      expect((yield* publicEventsOf(after.id)).map((e) => e.type)).toEqual([
        "payment.authorized",
        "payment.captured"
      ])
      expectError(
        yield* call("POST", `/v1/payment-intents/${intent.id}/capture`, { token, json: {} }),
        409,
        "payment_intent_unexpected_state"
      )
      expectError(
        yield* call("POST", `/v1/payment-intents/${intent.id}/cancel`, { token, json: {} }),
        409,
        "payment_intent_unexpected_state"
      )
      const fresh = yield* createIntent(token)
      expectError(
        yield* call("POST", `/v1/payment-intents/${fresh.id}/capture`, { token }),
        409,
        "payment_intent_unexpected_state"
      )
    })
  )

  it.effect("cancel: any non-terminal intent; an authorization is voided; then nothing more", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const fresh = yield* createIntent(token)
      const canceled = yield* Effect.map(
        call("POST", `/v1/payment-intents/${fresh.id}/cancel`, {
          token,
          json: { cancellationReason: "requested_by_customer" }
        }),
        ok(200)
      )
      expect(canceled).toMatchObject({
        status: "canceled",
        cancellationReason: "requested_by_customer",
        canceledAt: expect.stringMatching(ISO_MS)
      })
      for (const path of ["confirm", "cancel", "capture"]) {
        expectError(
          yield* call("POST", `/v1/payment-intents/${fresh.id}/${path}`, {
            token,
            json: path === "confirm" ? { paymentMethod: "pm_card_visa" } : {}
          }),
          409,
          "payment_intent_unexpected_state"
        )
      }
      const held = yield* createIntent(token, {
        paymentMethod: "pm_card_visa",
        captureMethod: "manual",
        confirm: true
      })
      // Every field of a cancel is optional: no body at all is `{}` (as on Stripe).
      const voided = yield* Effect.map(
        call("POST", `/v1/payment-intents/${held.id}/cancel`, { token }),
        ok(200)
      )
      expect(voided.status).toBe("canceled")
      const payment = yield* Effect.map(
        call("GET", `/v1/payments/${held.latestPaymentId}`, { token }),
        ok(200)
      )
      expect(payment).toMatchObject({ status: "canceled", canceledAt: expect.stringMatching(ISO_MS) })
      expect((yield* processorCalls(held.id)).map((c) => c.operation)).toEqual(["authorize", "void"])
      expectError(
        yield* call("POST", `/v1/payment-intents/${fresh.id}/cancel`, {
          token,
          json: { cancellationReason: "bored" }
        }),
        400,
        "parameter_invalid",
        "cancellationReason"
      )
    })
  )

  it.effect("clientSecret: a browser confirms without a credential; a wrong secret → 404; none → 401", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const intent = yield* createIntent(token)
      expectError(
        yield* call("POST", `/v1/payment-intents/${intent.id}/confirm`, {
          json: { paymentMethod: "pm_card_visa" }
        }),
        401,
        "missing_credentials"
      )
      expectError(
        yield* call("POST", `/v1/payment-intents/${intent.id}/confirm`, {
          json: {
            paymentMethod: "pm_card_visa",
            clientSecret: `${intent.id}_secret_00000000000000000000000000000000`
          }
        }),
        404,
        "resource_missing"
      )
      const shopper = yield* registerShopper()
      expectError(
        yield* call("POST", `/v1/payment-intents/${intent.id}/confirm`, {
          token: shopper.accessToken,
          json: { paymentMethod: "pm_card_visa" }
        }),
        403,
        "insufficient_scope"
      )
      const readOnly = yield* apiKeyWith(["read:payments"])
      expectError(
        yield* call("POST", `/v1/payment-intents/${intent.id}/confirm`, { token: readOnly.key, json: {} }),
        403,
        "insufficient_scope"
      )
      const confirmed = yield* Effect.map(
        call("POST", `/v1/payment-intents/${intent.id}/confirm`, {
          json: { paymentMethod: "pm_card_visa", clientSecret: intent.clientSecret }
        }),
        ok(200)
      )
      expect(confirmed.status).toBe("succeeded")
      expect(confirmed.clientSecret).toBeUndefined()
      // A shopper's browser with its token and the secret works too.
      const other = yield* createIntent(token)
      const viaShopper = yield* call("POST", `/v1/payment-intents/${other.id}/confirm`, {
        token: shopper.accessToken,
        json: { paymentMethod: "pm_card_visa", clientSecret: other.clientSecret }
      })
      expect(viaShopper.status, viaShopper.text).toBe(200)
    })
  )

  // --- Payments -------------------------------------------------------------------------------------

  it.effect(
    "POST /v1/payments: 201 succeeded; events payment.authorized + payment.captured with the snapshot",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const payment = yield* createPayment(token, { amount: 4999, metadata: { cart: "c-1" } })
        expect(payment).toMatchObject({
          object: "payment",
          id: expect.stringMatching(/^pay_[0-9a-z]{26}$/),
          amount: 4999,
          status: "succeeded",
          amountCaptured: 4999,
          metadata: { cart: "c-1" },
          livemode: false
        })
        expect(yield* Effect.map(call("GET", `/v1/payments/${payment.id}`, { token }), ok(200))).toEqual(
          payment
        )
        const events = yield* publicEventsOf(payment.id)
        expect(events.map((e) => e.type)).toEqual(["payment.authorized", "payment.captured"])
        expect(events[1]?.data).toEqual(payment)
        const intent = yield* Effect.map(
          call("GET", `/v1/payment-intents/${payment.paymentIntentId}`, { token }),
          ok(200)
        )
        expect(intent).toMatchObject({ status: "succeeded", latestPaymentId: payment.id })
      })
  )

  it.effect("capture of a payment: authorized → succeeded; anything else → 409", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const payment = yield* createPayment(token, { amount: 800, captureMethod: "manual" })
      expect(payment).toMatchObject({ status: "authorized", amountCaptured: 0 })
      expect((yield* publicEventsOf(payment.id)).map((e) => e.type)).toEqual(["payment.authorized"])
      expectError(
        yield* call("POST", `/v1/payments/${payment.id}/capture`, { token, json: { amountToCapture: 900 } }),
        400,
        "amount_too_large",
        "amountToCapture"
      )
      const captured = yield* Effect.map(
        call("POST", `/v1/payments/${payment.id}/capture`, { token, json: {} }),
        ok(200)
      )
      expect(captured).toMatchObject({ status: "succeeded", amountCaptured: 800 })
      expectError(
        yield* call("POST", `/v1/payments/${payment.id}/capture`, { token, json: {} }),
        409,
        "payment_intent_unexpected_state"
      )
    })
  )

  it.effect(
    "refunds: partial ones accumulate; beyond what remains → 400; nothing left → 409; GET /v1/refunds/:id",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const payment = yield* createPayment(token, { amount: 1000 })
        const first = yield* Effect.map(
          call("POST", `/v1/payments/${payment.id}/refund`, {
            token,
            json: { amount: 300, reason: "requested_by_customer" }
          }),
          ok(200)
        )
        expect(first).toEqual({
          object: "refund",
          id: expect.stringMatching(/^re_[0-9a-z]{26}$/),
          paymentId: payment.id,
          paymentIntentId: payment.paymentIntentId,
          amount: 300,
          currency: "USD",
          status: "succeeded",
          reason: "requested_by_customer",
          failureReason: null,
          createdAt: expect.stringMatching(ISO_MS),
          updatedAt: expect.stringMatching(ISO_MS)
        })
        expect(yield* Effect.map(call("GET", `/v1/refunds/${first.id}`, { token }), ok(200))).toEqual(first)
        expect(
          (yield* Effect.map(call("GET", `/v1/payments/${payment.id}`, { token }), ok(200))).status
        ).toBe("partially_refunded")
        expectError(
          yield* call("POST", `/v1/payments/${payment.id}/refund`, { token, json: { amount: 701 } }),
          400,
          "amount_too_large",
          "amount"
        )
        const rest = yield* Effect.map(
          call("POST", `/v1/payments/${payment.id}/refund`, { token, json: {} }),
          ok(200)
        )
        expect(rest.amount).toBe(700)
        const after = yield* Effect.map(call("GET", `/v1/payments/${payment.id}`, { token }), ok(200))
        expect(after).toMatchObject({ status: "refunded", amountRefunded: 1000, amountCaptured: 1000 })
        expectError(
          yield* call("POST", `/v1/payments/${payment.id}/refund`, { token, json: { amount: 1 } }),
          409,
          "charge_already_refunded"
        )
        const events = yield* publicEventsOf(payment.id)
        const refunded = events.filter((e) => e.type === "payment.refunded")
        expect(refunded.map((e) => [e.data.refund.id, e.data.refund.amount, e.data.amountRefunded])).toEqual([
          [first.id, 300, 300],
          [rest.id, 700, 1000]
        ])
        expect(
          (yield* processorCalls(`${payment.id}:refund`)).map((c) => [c.idempotencyKey, c.amount])
        ).toEqual([
          [`${payment.id}:refund:1`, 300],
          [`${payment.id}:refund:2`, 700]
        ])
        // Not captured, or failed: not refundable.
        const held = yield* createPayment(token, { captureMethod: "manual" })
        expectError(
          yield* call("POST", `/v1/payments/${held.id}/refund`, { token, json: {} }),
          409,
          "charge_not_refundable"
        )
        // The processor refuses: the refund is failed, the amount stays refundable.
        const stubborn = yield* createPayment(token, { paymentMethod: "pm_card_refundFail", amount: 500 })
        const refused = yield* Effect.map(
          call("POST", `/v1/payments/${stubborn.id}/refund`, { token, json: {} }),
          ok(200)
        )
        expect(refused).toMatchObject({ status: "failed", failureReason: expect.any(String), amount: 500 })
        const unchanged = yield* Effect.map(call("GET", `/v1/payments/${stubborn.id}`, { token }), ok(200))
        expect(unchanged).toMatchObject({ status: "succeeded", amountRefunded: 0 })
        expectError(
          yield* call("POST", `/v1/payments/${payment.id}/refund`, { token, json: { reason: "whim" } }),
          400,
          "parameter_invalid",
          "reason"
        )
      })
  )

  it.effect("list: newest first, filters, keyset pages; shoppers see only their own payments", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const shopper = yield* registerShopper()
      const me = yield* call("GET", "/auth/me", { token: shopper.accessToken })
      const customerId: string = me.body.customerId
      const mine = [
        yield* createPayment(token, { customerId, amount: 100 }),
        yield* createPayment(token, { customerId, amount: 200, captureMethod: "manual" }),
        yield* createPayment(token, { customerId, amount: 300 })
      ]
      const stranger = yield* createCustomer(token)
      const theirs = yield* createPayment(token, { customerId: stranger.id })
      const all = yield* Effect.map(call("GET", `/v1/payments?customerId=${customerId}`, { token }), ok(200))
      expect(all).toMatchObject({ object: "list", hasMore: false })
      expect(all.data.map((p: Json) => p.id)).toEqual([mine[2].id, mine[1].id, mine[0].id])
      const page1 = yield* Effect.map(
        call("GET", `/v1/payments?customerId=${customerId}&limit=2`, { token }),
        ok(200)
      )
      expect(page1.data.map((p: Json) => p.id)).toEqual([mine[2].id, mine[1].id])
      expect(page1.hasMore).toBe(true)
      const page2 = yield* Effect.map(
        call("GET", `/v1/payments?customerId=${customerId}&limit=2&startingAfter=${mine[1].id}`, { token }),
        ok(200)
      )
      expect(page2.data.map((p: Json) => p.id)).toEqual([mine[0].id])
      const authorized = yield* Effect.map(
        call("GET", `/v1/payments?customerId=${customerId}&status=authorized`, { token }),
        ok(200)
      )
      expect(authorized.data.map((p: Json) => p.id)).toEqual([mine[1].id])
      expectError(
        yield* call("GET", "/v1/payments?status=lost", { token }),
        400,
        "parameter_invalid",
        "status"
      )
      expectError(
        yield* call("GET", `/v1/payments?startingAfter=${GHOST.pay}`, { token }),
        400,
        "resource_missing",
        "startingAfter"
      )
      // The shopper: their own payments, whatever filter they send; another's → 404.
      const own = yield* Effect.map(
        call("GET", `/v1/payments?customerId=${stranger.id}`, { token: shopper.accessToken }),
        ok(200)
      )
      expect(own.data.map((p: Json) => p.id)).toEqual([mine[2].id, mine[1].id, mine[0].id])
      // Another's payment as a cursor is unknown to the shopper (as an id that never existed).
      expectError(
        yield* call("GET", `/v1/payments?startingAfter=${theirs.id}`, { token: shopper.accessToken }),
        400,
        "resource_missing",
        "startingAfter"
      )
      expect(
        (yield* Effect.map(
          call("GET", `/v1/payments/${mine[0].id}`, { token: shopper.accessToken }),
          ok(200)
        )).id
      ).toBe(mine[0].id)
      expectError(
        yield* call("GET", `/v1/payments/${theirs.id}`, { token: shopper.accessToken }),
        404,
        "resource_missing"
      )
      expectError(
        yield* call("GET", `/v1/payment-intents/${theirs.paymentIntentId}`, { token: shopper.accessToken }),
        404,
        "resource_missing"
      )
      expect(
        (yield* call("GET", `/v1/payment-intents/${mine[0].paymentIntentId}`, { token: shopper.accessToken }))
          .status
      ).toBe(200)
      expectError(
        yield* call("POST", "/v1/payments", {
          token: shopper.accessToken,
          json: { amount: 100, currency: "USD", paymentMethod: "pm_card_visa" }
        }),
        403,
        "insufficient_scope"
      )
    })
  )

  /**
   * A payment's `payment.failed` from the feed. The feed is read gap-safe (only transactions below
   * every running one's horizon, which other tests' transactions on the server hold back): polled.
   */
  const failedEventOf = (paymentId: string) =>
    eventually(
      Effect.map(readPublicEvents({ after: origin, limit: 10_000, types: ["payment.failed"] }), (page) =>
        page.events.find((e) => (e.data as Json)?.id === paymentId)
      ),
      15_000
    )

  it.effect("payment.failed for a payment with a customer becomes the automatic notification", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const customer = yield* createCustomer(token)
      const r = yield* call("POST", "/v1/payments", {
        token,
        json: {
          amount: 2500,
          currency: "USD",
          paymentMethod: "pm_card_visa_chargeDeclined",
          customerId: customer.id
        }
      })
      expectError(r, 402, "card_declined")
      const paymentId: string = r.body.error.payment.id
      const event = yield* failedEventOf(paymentId)
      const sql = yield* SqlClient.SqlClient
      yield* sql.withTransaction(notifyForEvents([event as PublicEvent]))
      const id = automaticNotificationId("payment.failed", event as PublicEvent, "email")
      const notification = yield* Effect.map(call("GET", `/notification/${id}`, { token }), ok(200))
      expect(notification).toMatchObject({ channel: "email", to: customer.email })
      // Without a customer there is nobody to tell: the event is published, no notification is made.
      const anonymous = yield* call("POST", "/v1/payments", {
        token,
        json: { amount: 2500, currency: "USD", paymentMethod: "pm_card_visa_chargeDeclined" }
      })
      expectError(anonymous, 402, "card_declined")
      const anonymousId: string = anonymous.body.error.payment.id
      const unaddressed = yield* failedEventOf(anonymousId)
      yield* sql.withTransaction(notifyForEvents([unaddressed as PublicEvent]))
      const none = automaticNotificationId("payment.failed", unaddressed as PublicEvent, "email")
      expect((yield* call("GET", `/notification/${none}`, { token })).status).toBe(404)
    })
  )

  // --- Bad input and unknown ids ----------------------------------------------------------------------

  it.effect("bad input: the one error body with param, never a processor call", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const before = (yield* processorCalls()).length
      const bad: ReadonlyArray<readonly [Record<string, unknown>, string, string]> = [
        [{ amount: 0 }, "parameter_invalid", "amount"],
        [{ amount: -5 }, "parameter_invalid", "amount"],
        [{ amount: 100_000_000 }, "parameter_invalid", "amount"],
        [{ amount: 10.5 }, "parameter_invalid", "amount"],
        [{ amount: "100" }, "parameter_invalid", "amount"],
        [{ amount: undefined }, "parameter_missing", "amount"],
        [{ currency: "XXY" }, "parameter_invalid", "currency"],
        [{ currency: "dollars" }, "parameter_invalid", "currency"],
        [{ currency: undefined }, "parameter_missing", "currency"],
        [{ paymentMethod: "pm_card_nonsense" }, "parameter_invalid", "paymentMethod"],
        [{ paymentMethod: "4111111111111111" }, "parameter_invalid", "paymentMethod"],
        [{ paymentMethod: undefined }, "parameter_missing", "paymentMethod"],
        [{ captureMethod: "later" }, "parameter_invalid", "captureMethod"],
        [{ customerId: "cus_nope" }, "parameter_invalid", "customerId"],
        [{ customerId: "cus_01jd4x8m6ffq2b3n5r7t9v1w3y" }, "resource_missing", "customerId"],
        [
          { metadata: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, i])) },
          "parameter_invalid",
          "metadata"
        ]
      ]
      for (const [fields, code, param] of bad) {
        const json = { amount: 1000, currency: "USD", paymentMethod: "pm_card_visa", ...fields }
        expectError(yield* call("POST", "/v1/payments", { token, json }), 400, code, param)
        // The same on an intent created with confirm: true (a missing method is refused by the intent).
        expectError(
          yield* call("POST", "/v1/payment-intents", { token, json: { ...json, confirm: true } }),
          400,
          code,
          param
        )
      }
      expect((yield* processorCalls()).length).toBe(before)
      // A JSON body that is not an object, and malformed JSON.
      expectError(yield* call("POST", "/v1/payments", { token, json: [1, 2] }), 400, "parameter_invalid")
      const malformed = yield* call("POST", "/v1/payments", {
        token,
        headers: { "content-type": "application/json" },
        form: {}
      })
      expect(malformed.status).toBe(400)
    })
  )

  it.effect("bad amounts to capture and refund: 400 with param, never a processor call", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const held = yield* createPayment(token, { amount: 1000, captureMethod: "manual" })
      const paid = yield* createPayment(token, { amount: 1000 })
      const before = (yield* processorCalls()).length
      for (const amount of [0, -1, 10.5, "5", 100_000_000]) {
        for (const path of [
          `/v1/payments/${held.id}/capture`,
          `/v1/payment-intents/${held.paymentIntentId}/capture`
        ])
          expectError(
            yield* call("POST", path, { token, json: { amountToCapture: amount } }),
            400,
            "parameter_invalid",
            "amountToCapture"
          )
        expectError(
          yield* call("POST", `/v1/payments/${paid.id}/refund`, { token, json: { amount } }),
          400,
          "parameter_invalid",
          "amount"
        )
      }
      expect((yield* processorCalls()).length).toBe(before)
    })
  )

  it.effect("unknown or malformed ids → 404 resource_missing on every route", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const routes: ReadonlyArray<readonly ["GET" | "POST", string]> = [
        ["GET", `/v1/payment-intents/${GHOST.pi}`],
        ["GET", "/v1/payment-intents/pi_bogus"],
        ["POST", `/v1/payment-intents/${GHOST.pi}/confirm`],
        ["POST", "/v1/payment-intents/nope/confirm"],
        ["POST", `/v1/payment-intents/${GHOST.pi}/capture`],
        ["POST", `/v1/payment-intents/${GHOST.pi}/cancel`],
        ["GET", `/v1/payments/${GHOST.pay}`],
        ["GET", "/v1/payments/pay_"],
        ["POST", `/v1/payments/${GHOST.pay}/capture`],
        ["POST", `/v1/payments/${GHOST.pay}/refund`],
        ["GET", `/v1/refunds/${GHOST.re}`],
        ["GET", "/v1/refunds/re_x"]
      ]
      for (const [method, path] of routes) {
        const r = yield* call(method, path, { token, ...(method === "POST" ? { json: {} } : {}) })
        expectError(r, 404, "resource_missing")
      }
    })
  )
})
