/**
 * The checkout's background paths, with their processors running (issue #20 items 1 and 7): the
 * completion flow completes a checkout whose intent was confirmed directly (Stripe.js style) or
 * through 3-D Secure; a process killed between the payment and the order is completed once the
 * payment's outcome is recorded; expiry under the clock releases the stock and cancels the intent;
 * a payment that lands after expiry is refunded automatically, also when the checkout expires while
 * its own confirm's charge is in flight (the completion that rides on the payment's record is
 * refused, the record commits); the read model rebuilds to identical rows.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber, Option } from "effect"
import { expect } from "vitest"
import { checkoutExpiry } from "../../src/checkout/expiry.js"
import { CheckoutsProjection } from "../../src/checkout/projection.js"
import { checkoutCompletion } from "../../src/flows/checkoutCompletion.js"
import { CommandRunner } from "../../src/kernel/CommandRunner.js"
import * as Ids from "../../src/kernel/Ids.js"
import { PaymentIntentDecider, paymentIntentStream } from "../../src/payments/decider.js"
import { callFor, PROCESSOR_CALL_KIND } from "../../src/payments/Payments.js"
import { PaymentProcessor } from "../../src/payments/processor.js"
import { processorCallRecovery } from "../../src/payments/recovery.js"
import { DueWork } from "../../src/processors/DueWork.js"
import { rebuildProjection } from "../../src/processors/Rebuild.js"
import { stockedProduct } from "../support/catalog.js"
import { createCheckout, getCheckout, type Json, stockOf } from "../support/checkout.js"
import { makeShiftedClock } from "../support/clock.js"
import { rowsOf, usingRealPostgres } from "../support/database.js"
import { call } from "../support/identity.js"
import { eventually, notificationsHttp } from "../support/notifications.js"
import { orderWhen } from "../support/orders.js"
import { ok, processorCalls, staffToken } from "../support/payments.js"

const PROCESSORS = [checkoutCompletion(), checkoutExpiry(), processorCallRecovery()]

/** The checkout once `done` holds for it (polled: the processors work in the background). */
const checkoutWhen = (token: string, id: string, done: (c: Json) => boolean, timeoutMs = 15_000) =>
  eventually(
    Effect.map(getCheckout(token, id), (c) => (done(c) ? c : undefined)),
    timeoutMs
  )

const intentOf = (token: string, id: string) =>
  Effect.map(call("GET", `/v1/payment-intents/${id}`, { token }), ok(200))

// The payments safety net keeps its delay (a request records its own outcome first); a "crashed"
// confirmation arms it due at once (`crashAfterCharge`).
const shifted = makeShiftedClock()

/**
 * A late payment (1,999) of an expired checkout given back by the expiry worker, with one refund at
 * the processor (its retries are Clock-driven: time is moved on while waiting).
 */
const givenBackOnce = (token: string, paymentId: string) =>
  Effect.gen(function* () {
    const payment = yield* eventually(
      Effect.zipRight(
        shifted.advance(Duration.seconds(31)),
        Effect.map(call("GET", `/v1/payments/${paymentId}`, { token }), (r) =>
          r.status === 200 && r.body.status === "refunded" ? r.body : undefined
        )
      ),
      20_000
    )
    expect(payment).toMatchObject({ amountCaptured: 1999, amountRefunded: 1999 })
    const refunds = (yield* processorCalls(paymentId)).filter((c) => c.operation === "refund")
    expect(refunds.length).toBe(1)
  })

layer(notificationsHttp({ processors: PROCESSORS, clock: shifted.clock }), {
  excludeTestServices: true,
  timeout: 180_000
})("checkout flows", (it) => {
  it.effect("an intent confirmed directly (with its client secret) completes its checkout", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 5)
      const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 2 }])
      const confirmed = yield* call("POST", `/v1/payment-intents/${checkout.paymentIntentId}/confirm`, {
        json: { clientSecret: checkout.clientSecret, paymentMethod: "pm_card_visa" }
      })
      expect(ok(200)(confirmed).status).toBe("succeeded")
      const done = yield* checkoutWhen(token, checkout.id, (c) => c.status === "complete")
      expect(done.orderId).toMatch(/^ord_/)
      const order = yield* Effect.map(call("GET", `/v1/orders/${done.orderId}`, { token }), ok(200))
      expect(order).toMatchObject({ id: done.orderId, total: 3998, email: "guest@example.com" })
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 5, reserved: 2, available: 3 })
      // The checkout's own confirm route agrees: the same order, no second charge.
      const again = ok(200)(yield* call("POST", `/v1/checkouts/${checkout.id}/confirm`, { token, json: {} }))
      expect(again.orderId).toBe(done.orderId)
      expect((yield* processorCalls(checkout.paymentIntentId)).map((c) => c.operation)).toEqual(["authorize"])
    })
  )

  it.effect("3-D Secure answered on the intent: processing, then complete through the flow", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 5)
      const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }])
      yield* call("POST", `/v1/payment-intents/${checkout.paymentIntentId}/confirm`, {
        json: { clientSecret: checkout.clientSecret, paymentMethod: "pm_card_authenticationRequired" }
      })
      const pending = yield* checkoutWhen(token, checkout.id, (c) => c.status === "processing")
      expect(pending.nextAction).toMatchObject({ type: "use_test_authentication" })
      ok(200)(
        yield* call("POST", `/v1/test/payment-intents/${checkout.paymentIntentId}/authenticate`, {
          token,
          json: { outcome: "approve" }
        })
      )
      const done = yield* checkoutWhen(token, checkout.id, (c) => c.status === "complete")
      expect(done.orderId).toMatch(/^ord_/)
    })
  )

  it.effect("manual capture: the order is pending until the authorization is captured, then confirmed", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 5)
      const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }], {
        captureMethod: "manual"
      })
      const done = ok(200)(
        yield* call("POST", `/v1/checkouts/${checkout.id}/confirm`, {
          token,
          json: { paymentMethod: "pm_card_visa" }
        })
      )
      const placed = yield* Effect.map(call("GET", `/v1/orders/${done.orderId}`, { token }), ok(200))
      expect(placed.status).toBe("pending")
      ok(200)(
        yield* call("POST", `/v1/payment-intents/${checkout.paymentIntentId}/capture`, { token, json: {} })
      )
      const confirmed = yield* orderWhen(token, done.orderId, (o) => o.status === "confirmed")
      expect(confirmed.id).toBe(done.orderId)
    })
  )

  it.effect(
    "an intent canceled directly: its open checkout expires, a pending order is cancelled; stock comes back",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const product = yield* stockedProduct(token, 5)
        const open = yield* createCheckout(token, [{ productId: product.id, quantity: 2 }])
        ok(200)(
          yield* call("POST", `/v1/payment-intents/${open.paymentIntentId}/cancel`, { token, json: {} })
        )
        const expired = yield* checkoutWhen(token, open.id, (c) => c.status === "expired")
        expect(expired.orderId).toBeNull()
        expect(yield* stockOf(token, product.id)).toEqual({ stocked: 5, reserved: 0, available: 5 })

        const manual = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }], {
          captureMethod: "manual"
        })
        const done = ok(200)(
          yield* call("POST", `/v1/checkouts/${manual.id}/confirm`, {
            token,
            json: { paymentMethod: "pm_card_visa" }
          })
        )
        expect(yield* stockOf(token, product.id)).toEqual({ stocked: 5, reserved: 1, available: 4 })
        ok(200)(
          yield* call("POST", `/v1/payment-intents/${manual.paymentIntentId}/cancel`, { token, json: {} })
        )
        const cancelled = yield* orderWhen(token, done.orderId, (o) => o.status === "cancelled")
        expect(cancelled).toMatchObject({ paymentStatus: "voided", cancellationReason: "payment_canceled" })
        expect(yield* stockOf(token, product.id)).toEqual({ stocked: 5, reserved: 0, available: 5 })
      })
  )

  it.effect(
    "a process killed between the payment and the order: completed once the outcome is recorded",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const product = yield* stockedProduct(token, 5)
        const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }])
        // The card is charged, then the process dies: no outcome recorded, no completion.
        yield* crashAfterCharge(checkout.paymentIntentId)
        expect((yield* getCheckout(token, checkout.id)).status).toBe("open")
        // The payments safety net records the charge; the flow completes the checkout.
        const done = yield* checkoutWhen(token, checkout.id, (c) => c.status === "complete", 20_000)
        expect(done.orderId).toMatch(/^ord_/)
        ok(200)(yield* call("GET", `/v1/orders/${done.orderId}`, { token }))
        expect(
          (yield* processorCalls(checkout.paymentIntentId)).map((c) => [c.operation, c.requests])
        ).toEqual([["authorize", 2]])
      })
  )

  it.effect("expiry under the clock: the stock is released and the intent canceled", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 3)
      const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 3 }])
      expect(yield* stockOf(token, product.id)).toMatchObject({ reserved: 3, available: 0 })
      yield* shifted.advance(Duration.minutes(29))
      yield* Effect.sleep("700 millis")
      expect((yield* getCheckout(token, checkout.id)).status).toBe("open")
      yield* shifted.advance(Duration.minutes(2))
      const expired = yield* checkoutWhen(token, checkout.id, (c) => c.status === "expired")
      expect(expired.expiredAt).not.toBeNull()
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 3, reserved: 0, available: 3 })
      const intent = yield* eventually(
        Effect.map(intentOf(token, checkout.paymentIntentId), (i) =>
          i.status === "canceled" ? i : undefined
        )
      )
      expect(intent.cancellationReason).toBe("abandoned")
    })
  )

  it.effect("a payment that lands after expiry is refunded automatically", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 3)
      const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }])
      // The card is charged, but the outcome is not recorded yet (the intent stays processing)...
      const started = yield* crashAfterCharge(checkout.paymentIntentId)
      // ...and the checkout expires meanwhile: its stock goes back; its intent cannot be canceled.
      const expired = ok(200)(yield* call("POST", `/v1/checkouts/${checkout.id}/expire`, { token }))
      expect(expired.status).toBe("expired")
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 3, reserved: 0, available: 3 })
      // The safety net records the charge; the flow finds a paid intent of an expired checkout; the
      // expiry worker refunds it.
      yield* givenBackOnce(token, started.paymentId)
      expect((yield* getCheckout(token, checkout.id)).status).toBe("expired")
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 3, reserved: 0, available: 3 })
    })
  )

  it.effect.skipIf(!usingRealPostgres)(
    "a checkout that expires while its own confirm's charge is in flight: 409, no order, the money given back",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const sql = yield* SqlClient.SqlClient
        const product = yield* stockedProduct(token, 3)
        const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }])
        // The test processor's ledger held locked: the confirm's charge waits there, after its attempt
        // was recorded as started (the intent processing).
        const locked = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const lock = yield* Effect.fork(
          sql.withTransaction(
            sql`LOCK TABLE payments.test_processor_calls IN EXCLUSIVE MODE`.pipe(
              Effect.zipRight(Deferred.succeed(locked, undefined)),
              Effect.zipRight(Deferred.await(release))
            )
          )
        )
        yield* Deferred.await(locked)
        const confirm = yield* Effect.fork(
          call("POST", `/v1/checkouts/${checkout.id}/confirm`, {
            token,
            json: { paymentMethod: "pm_card_visa" }
          })
        )
        yield* eventually(
          Effect.map(intentOf(token, checkout.paymentIntentId), (i) =>
            i.status === "processing" ? i : undefined
          )
        )
        // The checkout expires meanwhile (its stock goes back), then the charge goes through.
        const expire = yield* Effect.fork(call("POST", `/v1/checkouts/${checkout.id}/expire`, { token }))
        yield* checkoutWhen(token, checkout.id, (c) => c.status === "expired")
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(lock)
        ok(200)(yield* Fiber.join(expire))
        // The payment's record and the completion share a transaction: the completion is refused
        // (the checkout expired), the record commits, and the confirm answers 409.
        const confirmed = yield* Fiber.join(confirm)
        expect(confirmed.status, confirmed.text).toBe(409)
        expect(confirmed.body.error.code).toBe("checkout_not_open")
        const paid = yield* intentOf(token, checkout.paymentIntentId)
        expect(paid.status).toBe("succeeded")
        const after = yield* getCheckout(token, checkout.id)
        expect(after).toMatchObject({ status: "expired", orderId: null })
        expect(yield* stockOf(token, product.id)).toEqual({ stocked: 3, reserved: 0, available: 3 })
        // The expiry gives the late payment back, once.
        yield* givenBackOnce(token, paid.latestPaymentId)
        expect((yield* getCheckout(token, checkout.id)).orderId).toBeNull()
      })
  )

  it.effect("the checkouts read model rebuilds to identical rows", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 20)
      const line = [{ productId: product.id, quantity: 1 }]
      yield* createCheckout(token, line, { paymentMethod: "pm_card_visa", metadata: { a: 1 } })
      const open = yield* createCheckout(token, line, {
        shippingAddress: { line1: "1 Main St", city: "Lyon", country: "FR" }
      })
      ok(200)(yield* call("POST", `/v1/checkouts/${open.id}/expire`, { token }))
      const pending = yield* createCheckout(token, line)
      ok(200)(
        yield* call("POST", `/v1/checkouts/${pending.id}/confirm`, {
          token,
          json: { paymentMethod: "pm_card_authenticationRequired" }
        })
      )
      const rows = rowsOf("checkout.checkouts", "checkout_id")
      const before = yield* rows
      expect(before.length).toBeGreaterThanOrEqual(3)
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE checkout.checkouts SET status = 'open', order_id = NULL, email = NULL`
      yield* rebuildProjection(CheckoutsProjection, { batchSize: 3 })
      expect(yield* rows).toEqual(before)
    })
  )
})

/**
 * A confirmation cut short where a crash would (as test/support/payments.ts `confirmThenCrash`, with
 * a card given): the call recorded as started, its safety net armed (due at once), the card charged
 * at the processor — and nothing recorded after. Answers the started call.
 */
const crashAfterCharge = (paymentIntentId: string) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const work = yield* DueWork
    const processor = yield* PaymentProcessor
    const paymentMethod = Option.getOrThrow(yield* processor.resolvePaymentMethod("pm_card_visa"))
    const paymentId = yield* Ids.make("pay")
    const started = yield* runner.transact(
      Effect.gen(function* () {
        const result = yield* runner.execute(
          PaymentIntentDecider,
          paymentIntentStream(paymentIntentId),
          { _tag: "Confirm", paymentMethod, paymentId },
          {}
        )
        const op = result.state.operations[0]
        if (op === undefined) throw new Error("the confirmation started no call")
        yield* work.schedule({
          kind: PROCESSOR_CALL_KIND,
          key: op.key,
          dueAt: new Date(0),
          payload: { paymentIntentId }
        })
        return { state: result.state, op }
      })
    )
    const answer = yield* callFor(processor, started.state, started.op)
    expect(answer._tag).toBe("Authorized")
    return { ...started.op, paymentId }
  })
