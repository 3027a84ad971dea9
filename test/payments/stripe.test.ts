/**
 * The Stripe adapter (issue #19 item 3) through the real HTTP API of the service configured with
 * `PAYMENT_PROCESSOR=stripe`, against a local Stripe-shaped fake (test/support/stripeFake.ts) that
 * the official SDK talks to: successes, declines, 3-D Secure completed by a later event, a 500 then
 * success on retry (one charge), an event that arrives before the confirm call returns (one
 * outcome, one public event), refunds through the API and through `charge.refunded`, bad
 * signatures, replayed events, and the recovery worker asking Stripe again with the same key.
 */
import { HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect, Layer, Logger, LogLevel } from "effect"
import { expect } from "vitest"
import { processorCallRecovery } from "../../src/payments/recovery.js"
import { processorsLayer } from "../../src/processors/Supervisor.js"
import { projections } from "../../src/registry.js"
import { HttpAppLive } from "../../src/server.js"
import { servicesLayer } from "../../src/services.js"
import { testConfig } from "../support/database.js"
import { call, expectError, IdentityHttp } from "../support/identity.js"
import { eventually } from "../support/notifications.js"
import { createIntent, createPayment, type Json, ok, staffToken } from "../support/payments.js"
import { type StripeFake, StripePeer, StripePeerLive, stripeSettings } from "../support/stripeFake.js"

const processors = [processorCallRecovery()]

/** The app with `PAYMENT_PROCESSOR=stripe` on the fake, and the recovery worker (3 s safety net). */
const StripeHttp = Layer.mergeAll(HttpAppLive, processorsLayer(processors)).pipe(
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(
    servicesLayer({ processors, projections }).pipe(
      Layer.provideMerge(
        Layer.unwrapEffect(
          Effect.map(StripePeer, (fake) => testConfig({ payments: stripeSettings(fake, 3) }))
        )
      )
    )
  ),
  Layer.provideMerge(StripePeerLive),
  Layer.provideMerge(Logger.minimumLogLevel(LogLevel.Error))
)

/** The fake, told where the service under test takes Stripe's events. */
const stripe = Effect.gen(function* () {
  const fake = yield* StripePeer
  const server = yield* HttpServer.HttpServer
  if (server.address._tag !== "TcpAddress") throw new Error("the test server has no TCP address")
  fake.webhookUrl = `http://127.0.0.1:${server.address.port}/v1/processor-events/stripe`
  return fake
})

const publicEventsOf = (paymentId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ type: string }>`SELECT type FROM event_store.public_events
        WHERE data->>'id' = ${paymentId} ORDER BY transaction_id, position`,
      (rows) => rows.map((r) => r.type)
    )
  )

/** The Stripe payment intents the fake holds for our call keys starting with `prefix`. */
const stripeIntentsOf = (fake: StripeFake, prefix: string) =>
  [...fake.intents.values()].filter((pi) => (pi.metadata.commerce_call_key ?? "").startsWith(prefix))

const requestsWithKey = (fake: StripeFake, key: string) => fake.calls.filter((c) => c.idempotencyKey === key)

const getIntent = (token: string, id: string) =>
  Effect.map(call("GET", `/v1/payment-intents/${id}`, { token }), ok(200))
const getPayment = (token: string, id: string) =>
  Effect.map(call("GET", `/v1/payments/${id}`, { token }), ok(200))

layer(StripeHttp, { excludeTestServices: true, timeout: 120_000 })("the Stripe adapter over HTTP", (it) => {
  it.effect(
    "a payment: Stripe's PaymentIntent created and confirmed under our key; card details from Stripe",
    () =>
      Effect.gen(function* () {
        const fake = yield* stripe
        const token = yield* staffToken
        const payment: Json = yield* createPayment(token, { amount: 2599, currency: "eur" })
        expect(payment).toMatchObject({
          object: "payment",
          status: "succeeded",
          amount: 2599,
          currency: "EUR",
          amountCaptured: 2599,
          processor: "stripe_test",
          processorReference: expect.stringMatching(/^pi_/),
          paymentMethod: { token: "pm_card_visa", brand: "visa", last4: "4242", expMonth: 12, expYear: 2034 },
          livemode: false
        })
        const key = `${payment.paymentIntentId}:confirm:1`
        const [pi, ...others] = stripeIntentsOf(fake, payment.paymentIntentId)
        expect(others).toEqual([])
        expect(pi).toMatchObject({
          id: payment.processorReference,
          amount: 2599,
          currency: "eur",
          status: "succeeded",
          captureMethod: "automatic",
          metadata: { commerce_call_key: key }
        })
        expect(requestsWithKey(fake, key).map((c) => `${c.method} ${c.path}`)).toEqual([
          "POST /v1/payment_intents"
        ])
        expect(yield* publicEventsOf(payment.id)).toEqual(["payment.authorized", "payment.captured"])
      })
  )

  it.effect(
    "manual capture and cancel go to the attempt's Stripe PaymentIntent, each under its own key",
    () =>
      Effect.gen(function* () {
        const fake = yield* stripe
        const token = yield* staffToken
        const intent = yield* createIntent(token, {
          amount: 5000,
          paymentMethod: "pm_card_mastercard",
          captureMethod: "manual",
          confirm: true
        })
        expect(intent).toMatchObject({ status: "requires_capture", amountCapturable: 5000 })
        const captured = yield* Effect.map(
          call("POST", `/v1/payment-intents/${intent.id}/capture`, {
            token,
            json: { amountToCapture: 4000 }
          }),
          ok(200)
        )
        expect(captured).toMatchObject({ status: "succeeded", amountReceived: 4000 })
        const [pi] = stripeIntentsOf(fake, intent.id)
        expect(pi).toMatchObject({ status: "succeeded", amountReceived: 4000, captureMethod: "manual" })
        expect(requestsWithKey(fake, `${intent.id}:capture`).map((c) => c.path)).toEqual([
          `/v1/payment_intents/${pi?.id}/capture`
        ])

        const held = yield* createIntent(token, {
          paymentMethod: "pm_card_visa",
          captureMethod: "manual",
          confirm: true
        })
        const canceled = yield* Effect.map(
          call("POST", `/v1/payment-intents/${held.id}/cancel`, {
            token,
            json: { cancellationReason: "abandoned" }
          }),
          ok(200)
        )
        expect(canceled).toMatchObject({ status: "canceled", cancellationReason: "abandoned" })
        expect(stripeIntentsOf(fake, held.id).map((p) => p.status)).toEqual(["canceled"])
        expect(requestsWithKey(fake, `${held.id}:void`)).toHaveLength(1)
      })
  )

  it.effect(
    "a declined card: 402 card_error with Stripe's code and declineCode; the intent wants another method",
    () =>
      Effect.gen(function* () {
        const fake = yield* stripe
        const token = yield* staffToken
        const r = yield* call("POST", "/v1/payment-intents", {
          token,
          json: {
            amount: 1500,
            currency: "usd",
            paymentMethod: "pm_card_visa_chargeDeclinedInsufficientFunds",
            confirm: true
          }
        })
        expectError(r, 402, "card_declined")
        expect(r.body.error).toMatchObject({
          type: "card_error",
          declineCode: "insufficient_funds",
          message: "Your card has insufficient funds.",
          paymentIntent: { status: "requires_payment_method", paymentMethod: null }
        })
        const id = r.body.error.paymentIntent.id
        const intent = yield* getIntent(token, id)
        expect(intent).toMatchObject({
          status: "requires_payment_method",
          lastPaymentError: {
            type: "card_error",
            code: "card_declined",
            declineCode: "insufficient_funds",
            paymentMethod: {
              token: "pm_card_visa_chargeDeclinedInsufficientFunds",
              brand: "visa",
              last4: "9995"
            }
          }
        })
        expect(yield* publicEventsOf(intent.latestPaymentId)).toEqual(["payment.failed"])
        // Another method: a second attempt, its own key and its own Stripe PaymentIntent.
        const paid = yield* Effect.map(
          call("POST", `/v1/payment-intents/${id}/confirm`, {
            token,
            json: { paymentMethod: "pm_card_visa" }
          }),
          ok(200)
        )
        expect(paid).toMatchObject({ status: "succeeded", amountReceived: 1500 })
        expect(stripeIntentsOf(fake, id).map((pi) => [pi.metadata.commerce_call_key, pi.status])).toEqual([
          [`${id}:confirm:1`, "requires_payment_method"],
          [`${id}:confirm:2`, "succeeded"]
        ])
      })
  )

  it.effect("payment methods: a card number never leaves the service; an unknown pm_ token is a 400", () =>
    Effect.gen(function* () {
      const fake = yield* stripe
      const token = yield* staffToken
      const before = fake.calls.length
      const number = yield* call("POST", "/v1/payments", {
        token,
        json: { amount: 100, currency: "USD", paymentMethod: "4242424242424242" }
      })
      expectError(number, 400, "parameter_invalid", "paymentMethod")
      expect(fake.calls.length).toBe(before)
      const unknown = yield* call("POST", "/v1/payments", {
        token,
        json: { amount: 100, currency: "USD", paymentMethod: "pm_card_doesNotExist" }
      })
      expectError(unknown, 400, "parameter_invalid", "paymentMethod")
      // Looked up, never charged.
      expect(fake.calls.slice(before).map((c) => `${c.method} ${c.path}`)).toEqual([
        "GET /v1/payment_methods/pm_card_doesNotExist"
      ])
    })
  )

  it.effect(
    "3-D Secure: requires_action (use_stripe_sdk), completed by a later payment_intent.succeeded",
    () =>
      Effect.gen(function* () {
        const fake = yield* stripe
        const token = yield* staffToken
        const intent = yield* createIntent(token, {
          amount: 3100,
          paymentMethod: "pm_card_threeDSecure2Required",
          confirm: true
        })
        const [pi] = stripeIntentsOf(fake, intent.id)
        expect(intent).toMatchObject({
          status: "requires_action",
          nextAction: { type: "use_stripe_sdk", clientSecret: pi?.clientSecret }
        })
        const reply = yield* Effect.promise(() => fake.authenticate(pi?.id ?? "", "approve"))
        expect(reply).toMatchObject({ status: 200, body: { object: "processor_event", result: "recorded" } })
        const done = yield* getIntent(token, intent.id)
        expect(done).toMatchObject({ status: "succeeded", amountReceived: 3100, nextAction: null })
        expect(yield* publicEventsOf(done.latestPaymentId)).toEqual([
          "payment.authorized",
          "payment.captured"
        ])

        // Replayed (Stripe retries deliveries): nothing changes.
        const event = fake.lastEvent()
        if (event === undefined) throw new Error("no event sent")
        const again = yield* Effect.promise(() => fake.resend(event))
        expect(again).toMatchObject({ status: 200, body: { result: "already_recorded" } })
        expect(yield* getIntent(token, intent.id)).toEqual(done)
        expect(yield* publicEventsOf(done.latestPaymentId)).toEqual([
          "payment.authorized",
          "payment.captured"
        ])
      })
  )

  it.effect(
    "an intent created under an Idempotency-Key: Stripe's key is the request's, its events still find it",
    () =>
      Effect.gen(function* () {
        const fake = yield* stripe
        const token = yield* staffToken
        const requestKey = `order-${Date.now()}-${Math.random()}`
        const create = () =>
          call("POST", "/v1/payment-intents", {
            token,
            headers: { "idempotency-key": requestKey },
            json: {
              amount: 1234,
              currency: "usd",
              paymentMethod: "pm_card_threeDSecure2Required",
              confirm: true
            }
          })
        const intent = yield* Effect.map(create(), ok(201))
        expect(intent.status).toBe("requires_action")
        const payment = yield* getPayment(token, intent.latestPaymentId)
        const pi = fake.intents.get(payment.processorReference)
        expect(pi?.metadata.commerce_call_key).toMatch(/^ik_[0-9a-f]{32}:confirm:1$/)
        // The retry of the request is answered from the idempotency store: no second Stripe call.
        const calls = fake.calls.length
        expect(yield* Effect.map(create(), ok(201))).toMatchObject({ id: intent.id })
        expect(fake.calls.length).toBe(calls)
        const reply = yield* Effect.promise(() => fake.authenticate(pi?.id ?? "", "approve"))
        expect(reply.body.result).toBe("recorded")
        expect(yield* getIntent(token, intent.id)).toMatchObject({
          status: "succeeded",
          amountReceived: 1234
        })

        // Stripe charged but never answered: the request commits the call pending, with no Stripe
        // reference of ours yet; its event finds the intent by the `ik_…` prefix of its key.
        fake.failNext({ status: 500, afterWork: true, times: 3 })
        const pending = yield* Effect.map(
          call("POST", "/v1/payments", {
            token,
            headers: { "idempotency-key": `${requestKey}-2` },
            json: { amount: 4444, currency: "usd", paymentMethod: "pm_card_visa" }
          }),
          ok(201)
        )
        expect(pending).toMatchObject({ status: "pending", processorReference: null })
        const charged = [...fake.intents.values()].find((p) => p.amount === 4444)
        if (charged === undefined) throw new Error("Stripe did not charge")
        expect(charged.metadata.commerce_call_key).toMatch(/^ik_[0-9a-f]{32}:confirm:1$/)
        const event = yield* Effect.promise(() =>
          fake.sendEvent("payment_intent.succeeded", fake.intentObject(charged))
        )
        expect(event.body.result).toBe("recorded")
        expect(yield* getPayment(token, pending.id)).toMatchObject({
          status: "succeeded",
          processorReference: charged.id
        })
      })
  )

  it.effect(
    "3-D Secure failed at Stripe: payment_intent.payment_failed → requires_payment_method, payment.failed",
    () =>
      Effect.gen(function* () {
        const fake = yield* stripe
        const token = yield* staffToken
        const intent = yield* createIntent(token, {
          paymentMethod: "pm_card_authenticationRequired",
          captureMethod: "manual",
          confirm: true
        })
        expect(intent.status).toBe("requires_action")
        const [pi] = stripeIntentsOf(fake, intent.id)
        const reply = yield* Effect.promise(() => fake.authenticate(pi?.id ?? "", "fail"))
        expect(reply.body.result).toBe("recorded")
        const failed = yield* getIntent(token, intent.id)
        expect(failed).toMatchObject({
          status: "requires_payment_method",
          lastPaymentError: { code: "payment_intent_authentication_failure", declineCode: null }
        })
        expect(yield* publicEventsOf(failed.latestPaymentId)).toEqual(["payment.failed"])
      })
  )

  it.effect("a 500 after Stripe did the work: the SDK asks again with the same key — one charge", () =>
    Effect.gen(function* () {
      const fake = yield* stripe
      const token = yield* staffToken
      fake.failNext({ status: 500, afterWork: true })
      const payment: Json = yield* createPayment(token, { amount: 4321 })
      expect(payment).toMatchObject({ status: "succeeded", amountCaptured: 4321 })
      const key = `${payment.paymentIntentId}:confirm:1`
      expect(requestsWithKey(fake, key)).toHaveLength(2)
      expect(fake.charges().filter((pi) => pi.metadata.commerce_call_key === key)).toHaveLength(1)
      expect(yield* publicEventsOf(payment.id)).toEqual(["payment.authorized", "payment.captured"])
    })
  )

  it.effect(
    "Stripe unreachable through every retry: the intent stays processing; the worker asks again, same key",
    () =>
      Effect.gen(function* () {
        const fake = yield* stripe
        const token = yield* staffToken
        // The first attempt is done at Stripe but answered 500, and so are the SDK's two retries.
        fake.failNext({ status: 500, afterWork: true, times: 3 })
        const payment: Json = yield* createPayment(token, { amount: 777 })
        expect(payment.status).toBe("pending")
        const key = `${payment.paymentIntentId}:confirm:1`
        const recovered = yield* eventually(
          Effect.map(getPayment(token, payment.id), (p) => (p.status === "succeeded" ? p : undefined)),
          15_000
        )
        expect(recovered).toMatchObject({
          amountCaptured: 777,
          processorReference: expect.stringMatching(/^pi_/)
        })
        expect(requestsWithKey(fake, key).length).toBeGreaterThanOrEqual(4)
        expect(fake.charges().filter((pi) => pi.metadata.commerce_call_key === key)).toHaveLength(1)
        expect(yield* publicEventsOf(payment.id)).toEqual(["payment.authorized", "payment.captured"])
      })
  )

  it.effect("an event that arrives before the confirm call returns: one outcome, one public event each", () =>
    Effect.gen(function* () {
      const fake = yield* stripe
      const token = yield* staffToken
      fake.eventBeforeAnswerNext()
      fake.delayNext(200)
      const replies = fake.webhookReplies.length
      const payment: Json = yield* createPayment(token, { amount: 2468 })
      expect(payment).toMatchObject({ status: "succeeded", amountCaptured: 2468 })
      // The event was recorded first; the API answer then found the outcome already there.
      expect(fake.webhookReplies.slice(replies)).toMatchObject([
        { status: 200, body: { type: "payment_intent.succeeded", result: "recorded" } }
      ])
      expect(yield* publicEventsOf(payment.id)).toEqual(["payment.authorized", "payment.captured"])
      const streamEvents = yield* Effect.flatMap(
        SqlClient.SqlClient,
        (sql) =>
          sql<{
            type: string
            actor: string
          }>`SELECT event_type AS type, metadata->'actor'->>'id' AS actor FROM event_store.events
          WHERE stream_id = ${`payment_intent-${payment.paymentIntentId}`} ORDER BY stream_version`
      )
      expect(streamEvents.map((e) => e.type)).toEqual([
        "payment_intent.created",
        "payment_intent.attempt_started",
        "payment_intent.payment_authorized"
      ])
      expect(streamEvents[2]?.actor).toBe("stripe-webhook")

      // A manual one too: the amount_capturable_updated event first, then the answer.
      fake.eventBeforeAnswerNext()
      const held = yield* createIntent(token, {
        paymentMethod: "pm_card_visa",
        captureMethod: "manual",
        confirm: true
      })
      expect(held).toMatchObject({ status: "requires_capture", amountCapturable: 2000 })
      expect(yield* publicEventsOf(held.latestPaymentId)).toEqual(["payment.authorized"])
      // And a decline: one payment.failed, the 402 answered all the same.
      fake.eventBeforeAnswerNext()
      const declined = yield* call("POST", "/v1/payments", {
        token,
        json: { amount: 900, currency: "USD", paymentMethod: "pm_card_visa_chargeDeclined" }
      })
      expectError(declined, 402, "card_declined")
      expect(declined.body.error.declineCode).toBe("generic_decline")
      expect(yield* publicEventsOf(declined.body.error.payment.id)).toEqual(["payment.failed"])
    })
  )

  it.effect(
    "the event racing the API answer, and 20 concurrent confirms: one Stripe charge, one outcome",
    () =>
      Effect.gen(function* () {
        const fake = yield* stripe
        const token = yield* staffToken
        for (let i = 0; i < 5; i++) {
          const replies = fake.webhookReplies.length
          fake.eventWithAnswerNext()
          const payment: Json = yield* createPayment(token, { amount: 1100 + i })
          expect(payment.status).toBe("succeeded")
          yield* eventually(
            Effect.sync(() => (fake.webhookReplies.length > replies ? true : undefined)),
            5_000
          )
          expect(fake.webhookReplies[replies]).toMatchObject({ status: 200 })
          expect(["recorded", "already_recorded"]).toContain(fake.webhookReplies[replies]?.body.result)
          expect(yield* publicEventsOf(payment.id)).toEqual(["payment.authorized", "payment.captured"])
        }

        const intent = yield* createIntent(token, { amount: 6060, paymentMethod: "pm_card_visa" })
        const answers = yield* Effect.forEach(
          Array.from({ length: 20 }, () => intent.id),
          (id) => call("POST", `/v1/payment-intents/${id}/confirm`, { token, json: {} }),
          { concurrency: "unbounded" }
        )
        const succeeded = answers.filter((r) => r.status === 200)
        expect(succeeded.length).toBeGreaterThanOrEqual(1)
        for (const r of succeeded) expect(r.body).toMatchObject({ id: intent.id, status: "succeeded" })
        // The others arrived once it had succeeded: 409, the intent embedded.
        for (const r of answers.filter((a) => a.status !== 200))
          expectError(r, 409, "payment_intent_unexpected_state")
        expect(stripeIntentsOf(fake, intent.id).map((pi) => pi.status)).toEqual(["succeeded"])
        expect(fake.calls.filter((c) => c.idempotencyKey === `${intent.id}:confirm:1`)).toHaveLength(1)
      })
  )

  it.effect(
    "refunds: through the API (Stripe's refund under our key), and charge.refunded recording one",
    () =>
      Effect.gen(function* () {
        const fake = yield* stripe
        const token = yield* staffToken
        const payment: Json = yield* createPayment(token, { amount: 3000 })
        const refund = yield* Effect.map(
          call("POST", `/v1/payments/${payment.id}/refund`, {
            token,
            json: { amount: 1000, reason: "requested_by_customer" }
          }),
          ok(200)
        )
        expect(refund).toMatchObject({ object: "refund", status: "succeeded", amount: 1000 })
        const pi = fake.intents.get(payment.processorReference)
        expect(pi).toMatchObject({ amountRefunded: 1000 })
        expect(pi?.refunds[0]).toMatchObject({
          amount: 1000,
          reason: "requested_by_customer",
          metadata: { commerce_call_key: `${payment.id}:refund:1` }
        })
        // Stripe's charge.refunded for it: already recorded, nothing changes.
        if (pi === undefined) throw new Error("no Stripe intent")
        const late = yield* Effect.promise(() => fake.sendEvent("charge.refunded", fake.chargeObject(pi)))
        expect(late).toMatchObject({ status: 200, body: { result: "already_recorded" } })

        // Stripe refunds but its answer never comes (the SDK's retries all fail): the event records it.
        fake.failNext({ status: 500, afterWork: true, times: 3 })
        const pending = yield* Effect.map(
          call("POST", `/v1/payments/${payment.id}/refund`, { token, json: { amount: 500 } }),
          ok(200)
        )
        expect(pending).toMatchObject({ status: "pending", amount: 500 })
        const recorded = yield* Effect.promise(() => fake.sendEvent("charge.refunded", fake.chargeObject(pi)))
        expect(recorded).toMatchObject({ status: 200, body: { result: "recorded" } })
        expect(yield* Effect.map(call("GET", `/v1/refunds/${pending.id}`, { token }), ok(200))).toMatchObject(
          {
            status: "succeeded"
          }
        )
        expect(yield* getPayment(token, payment.id)).toMatchObject({
          status: "partially_refunded",
          amountRefunded: 1500
        })
        expect(pi.amountRefunded).toBe(1500)
        expect(yield* publicEventsOf(payment.id)).toEqual([
          "payment.authorized",
          "payment.captured",
          "payment.refunded",
          "payment.refunded"
        ])
      })
  )

  it.effect(
    "signatures: none → 400 signature_missing, another secret's → 400 signature_invalid; nothing applied",
    () =>
      Effect.gen(function* () {
        const fake = yield* stripe
        const token = yield* staffToken
        const intent = yield* createIntent(token, {
          paymentMethod: "pm_card_threeDSecure2Required",
          confirm: true
        })
        const [pi] = stripeIntentsOf(fake, intent.id)
        if (pi === undefined) throw new Error("no Stripe intent")
        const succeeded = { ...fake.intentObject(pi), status: "succeeded", amount_received: pi.amount }
        const forged = yield* Effect.promise(() =>
          fake.sendEvent("payment_intent.succeeded", succeeded, "whsec_someone_else")
        )
        expect(forged.status).toBe(400)
        expect(forged.body).toMatchObject({
          error: { type: "invalid_request_error", code: "signature_invalid" }
        })
        const unsigned = yield* call("POST", "/v1/processor-events/stripe", {
          json: { type: "payment_intent.succeeded" }
        })
        expectError(unsigned, 400, "signature_missing")
        // A body changed after signing.
        yield* Effect.promise(() => fake.sendEvent("payment_intent.requires_action", fake.intentObject(pi)))
        const signed = fake.lastEvent()
        if (signed === undefined) throw new Error("no event sent")
        const tampered = yield* Effect.promise(() =>
          fake.resend({ ...signed, payload: signed.payload.replace('"requires_action"', '"succeeded"') })
        )
        expect(tampered.body).toMatchObject({ error: { code: "signature_invalid" } })
        expect(yield* getIntent(token, intent.id)).toMatchObject({ status: "requires_action" })
      })
  )

  it.effect("events about nothing of ours, or of no interest, are answered 200 ignored", () =>
    Effect.gen(function* () {
      const fake = yield* stripe
      const stranger = yield* Effect.promise(() =>
        fake.sendEvent("payment_intent.succeeded", {
          id: "pi_not_ours",
          object: "payment_intent",
          status: "succeeded",
          amount: 100,
          currency: "usd",
          metadata: {},
          next_action: null,
          last_payment_error: null,
          client_secret: null
        })
      )
      expect(stranger).toMatchObject({ status: 200, body: { result: "ignored" } })
      const other = yield* Effect.promise(() =>
        fake.sendEvent("customer.created", { id: "cus_x", object: "customer" })
      )
      expect(other).toMatchObject({ status: 200, body: { type: "customer.created", result: "ignored" } })
    })
  )
})

layer(IdentityHttp, { excludeTestServices: true, timeout: 60_000 })("without the Stripe processor", (it) => {
  it.effect("POST /v1/processor-events/stripe is 404 (as /v1/test is without the test processor)", () =>
    Effect.gen(function* () {
      const r = yield* call("POST", "/v1/processor-events/stripe", {
        json: { type: "payment_intent.succeeded" },
        headers: { "stripe-signature": "t=1,v1=00" }
      })
      expectError(r, 404, "resource_missing")
    })
  )
})
