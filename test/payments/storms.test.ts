/**
 * Money safety under concurrency (issue #19 item 5), counted at the processor: 50 concurrent
 * confirms of one intent make one charge and every caller sees the same final intent (with or
 * without Idempotency-Keys); 50 concurrent refunds of 10 against a payment of 100 refund exactly
 * 100; capture racing cancel: exactly one wins. And the crash between the processor call and the
 * record of its outcome: the safety net asks the processor again with the same key, which answers
 * what it already did, and the outcome is recorded once.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { expect } from "vitest"
import { makeAppConfig } from "../../src/config.js"
import { Payments, PROCESSOR_CALL_KIND } from "../../src/payments/Payments.js"
import { handleProcessorCall } from "../../src/payments/recovery.js"
import { DueWork } from "../../src/processors/DueWork.js"
import { usingRealPostgres } from "../support/database.js"
import { call, identityHttp, type Reply } from "../support/identity.js"
import {
  confirmThenCrash,
  createIntent,
  createPayment,
  type Json,
  ok,
  processorCalls,
  staffToken
} from "../support/payments.js"

const N = 50

const all = <A, E, R>(effects: ReadonlyArray<Effect.Effect<A, E, R>>) =>
  Effect.all(effects, { concurrency: "unbounded" })

/** The intent a reply shows: its body (200) or the one embedded in its error (402, 409). */
const intentOf = (r: Reply): Json => (r.status === 200 ? r.body : r.body?.error?.paymentIntent)

const publicEventTypes = (paymentId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ type: string }>`SELECT type FROM event_store.public_events WHERE data->>'id' = ${paymentId}
        ORDER BY transaction_id, position`,
      (rows) => rows.map((r) => r.type)
    )
  )

// The safety net is due at once here: the crash test claims it without waiting.
const config = { payments: { ...makeAppConfig().payments, recoveryAfterSeconds: 0 } }

layer(identityHttp(config), { excludeTestServices: true, timeout: 180_000 })(
  "payments under concurrency",
  (it) => {
    it.effect(
      `${N} concurrent confirms of one intent: one processor charge, every caller sees the same intent`,
      () =>
        Effect.gen(function* () {
          const token = yield* staffToken
          for (const withKeys of [false, true]) {
            const intent = yield* createIntent(token, { paymentMethod: "pm_card_visa", amount: 7777 })
            const replies = yield* all(
              Array.from({ length: N }, (_, i) =>
                call("POST", `/v1/payment-intents/${intent.id}/confirm`, {
                  token,
                  json: {},
                  ...(withKeys ? { headers: { "idempotency-key": `storm-${intent.id}-${i}` } } : {})
                })
              )
            )
            const final = yield* Effect.map(
              call("GET", `/v1/payment-intents/${intent.id}`, { token }),
              ok(200)
            )
            expect(final.status).toBe("succeeded")
            const statuses = new Set(replies.map((r) => r.status))
            for (const s of statuses) expect([200, 409], `status ${s}`).toContain(s)
            expect(replies.filter((r) => r.status === 200).length).toBeGreaterThanOrEqual(1)
            for (const r of replies) {
              if (r.status === 409) expect(r.body.error.code).toBe("payment_intent_unexpected_state")
              expect(intentOf(r), r.text).toEqual(final)
            }
            const calls = yield* processorCalls(intent.id)
            expect(calls.map((c) => [c.operation, c.idempotencyKey, c.amount])).toEqual([
              ["authorize", `${intent.id}:confirm:1`, 7777]
            ])
            const payments = yield* Effect.map(
              call("GET", `/v1/payments?paymentIntentId=${intent.id}`, { token }),
              ok(200)
            )
            expect(payments.data).toHaveLength(1)
            expect(yield* publicEventTypes(final.latestPaymentId)).toEqual([
              "payment.authorized",
              "payment.captured"
            ])
          }
        })
    )

    it.effect(`${N} concurrent refunds of 10 against 100: exactly 100 refunded, the rest refused`, () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const payment = yield* createPayment(token, { amount: 100 })
        const replies = yield* all(
          Array.from({ length: N }, () =>
            call("POST", `/v1/payments/${payment.id}/refund`, { token, json: { amount: 10 } })
          )
        )
        const succeeded = replies.filter((r) => r.status === 200)
        expect(succeeded).toHaveLength(10)
        for (const r of succeeded) expect(r.body).toMatchObject({ status: "succeeded", amount: 10 })
        for (const r of replies.filter((x) => x.status !== 200)) {
          expect([400, 409], r.text).toContain(r.status)
          expect(["amount_too_large", "charge_already_refunded"]).toContain(r.body.error.code)
        }
        const after = yield* Effect.map(call("GET", `/v1/payments/${payment.id}`, { token }), ok(200))
        expect(after).toMatchObject({ status: "refunded", amountRefunded: 100, amountCaptured: 100 })
        const calls = yield* processorCalls(`${payment.id}:refund:`)
        expect(calls).toHaveLength(10)
        expect(calls.reduce((sum, c) => sum + c.amount, 0)).toBe(100)
        const events = yield* publicEventTypes(payment.id)
        expect(events.filter((t) => t === "payment.refunded")).toHaveLength(10)
        const sql = yield* SqlClient.SqlClient
        const refunds = yield* sql<{
          n: number
          total: number
        }>`SELECT count(*)::int AS n, coalesce(sum(amount), 0)::int AS total
        FROM payments.refunds WHERE payment_id = ${payment.id} AND status = 'succeeded'`
        expect(refunds[0]).toEqual({ n: 10, total: 100 })
      })
    )

    it.effect(
      "3-D Secure: a new card's confirm or the authentication racing a cancel — one wins; canceled holds no money",
      () =>
        Effect.gen(function* () {
          const token = yield* staffToken
          for (let i = 0; i < 12; i++) {
            const intent = yield* createIntent(token, {
              paymentMethod: "pm_card_authenticationRequired",
              confirm: true
            })
            expect(intent.status).toBe("requires_action")
            const other =
              i % 4 < 2
                ? call("POST", `/v1/payment-intents/${intent.id}/confirm`, {
                    token,
                    json: { paymentMethod: "pm_card_visa" }
                  })
                : call("POST", `/v1/test/payment-intents/${intent.id}/authenticate`, {
                    token,
                    json: { outcome: "approve" }
                  })
            const cancelCall = call("POST", `/v1/payment-intents/${intent.id}/cancel`, { token })
            const [paid, cancel] =
              i % 2 === 0
                ? yield* all([other, cancelCall])
                : yield* Effect.map(all([cancelCall, other]), ([b, a]) => [a, b])
            if (paid === undefined || cancel === undefined) throw new Error("two replies expected")
            const final = yield* Effect.map(
              call("GET", `/v1/payment-intents/${intent.id}`, { token }),
              ok(200)
            )
            const payments = yield* Effect.map(
              call("GET", `/v1/payments?paymentIntentId=${intent.id}&limit=100`, { token }),
              ok(200)
            )
            const captured = payments.data.reduce((sum: number, p: Json) => sum + p.amountCaptured, 0)
            const replies = `${paid.status} ${paid.text} / ${cancel.status} ${cancel.text}`
            if (cancel.status === 200) {
              expect(final.status, replies).toBe("canceled")
              expect(captured, replies).toBe(0)
              expect(paid.status, replies).toBe(409)
            } else {
              expect(cancel.status, replies).toBe(409)
              expect(final, replies).toMatchObject({ status: "succeeded", canceledAt: null })
              expect(captured, replies).toBe(intent.amount)
            }
          }
        })
    )

    it.effect("capture racing cancel: exactly one wins, and only its call reaches the processor", () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const winners = { capture: 0, cancel: 0 }
        for (let i = 0; i < 10; i++) {
          const intent = yield* createIntent(token, {
            paymentMethod: "pm_card_visa",
            captureMethod: "manual",
            confirm: true
          })
          expect(intent.status).toBe("requires_capture")
          const captureCall = call("POST", `/v1/payment-intents/${intent.id}/capture`, { token, json: {} })
          const cancelCall = call("POST", `/v1/payment-intents/${intent.id}/cancel`, { token, json: {} })
          // Sent in either order, so that each side gets to win some races.
          const [capture, cancel] =
            i % 2 === 0
              ? yield* all([captureCall, cancelCall])
              : yield* Effect.map(all([cancelCall, captureCall]), ([b, a]) => [a, b])
          if (capture === undefined || cancel === undefined) throw new Error("two replies expected")
          expect([capture.status, cancel.status].sort(), `${capture.text} / ${cancel.text}`).toEqual([
            200, 409
          ])
          const loser = capture.status === 409 ? capture : cancel
          expect(loser.body.error.code).toBe("payment_intent_unexpected_state")
          const final = yield* Effect.map(call("GET", `/v1/payment-intents/${intent.id}`, { token }), ok(200))
          const operations = (yield* processorCalls(intent.id)).map((c) => c.operation)
          if (capture.status === 200) {
            winners.capture++
            expect(final.status).toBe("succeeded")
            expect(operations).toEqual(["authorize", "capture"])
          } else {
            winners.cancel++
            expect(final.status).toBe("canceled")
            expect(operations).toEqual(["authorize", "void"])
          }
        }
        expect(winners.capture + winners.cancel).toBe(10)
        // Both orders were raced; which side wins each is up to the scheduler, but both can.
        console.info(`capture won ${winners.capture}, cancel won ${winners.cancel}`)
      })
    )

    it.effect(
      "a crash between the processor call and its record: asked again with the same key, recorded once",
      () =>
        Effect.gen(function* () {
          const token = yield* staffToken
          const work = yield* DueWork
          const intent = yield* createIntent(token, { paymentMethod: "pm_card_visa", amount: 4321 })

          // The request's steps 1 and 2, as Payments.run makes them — then the process dies.
          const started = yield* confirmThenCrash(intent.id)
          const stuck = yield* Effect.map(call("GET", `/v1/payment-intents/${intent.id}`, { token }), ok(200))
          expect(stuck.status).toBe("processing")

          // The safety net: claimed, handled (the processor asked again), recorded with the claim.
          const claimed = yield* work.claim({
            kinds: [PROCESSOR_CALL_KIND],
            limit: 100,
            owner: "crash-test",
            leaseTtl: "60 seconds"
          })
          const item = claimed.find((c) => c.key === started.key)
          if (item === undefined) throw new Error("the safety net was not due")
          // Other tests' items (recorded meanwhile) are given back untouched.
          for (const other of claimed) if (other !== item) yield* work.release(other)
          const outcome = yield* handleProcessorCall(item)
          expect(yield* work.complete(item, outcome)).toBe(true)

          const recovered = yield* Effect.map(
            call("GET", `/v1/payment-intents/${intent.id}`, { token }),
            ok(200)
          )
          expect(recovered).toMatchObject({
            status: "succeeded",
            amountReceived: 4321,
            latestPaymentId: started.paymentId
          })
          const calls = yield* processorCalls(intent.id)
          expect(calls.map((c) => [c.idempotencyKey, c.requests])).toEqual([[`${intent.id}:confirm:1`, 2]])
          expect(yield* publicEventTypes(started.paymentId)).toEqual([
            "payment.authorized",
            "payment.captured"
          ])
          const done = yield* work.get(PROCESSOR_CALL_KIND, started.key)
          expect(Option.map(done, (d) => d.status)).toEqual(Option.some("done"))

          // Handled again (a redelivered item): the call is no longer pending, nothing is asked or written.
          expect((yield* handleProcessorCall(item))._tag).toBe("Done")
          expect((yield* processorCalls(intent.id))[0]?.requests).toBe(2)
        })
    )

    it.effect(
      "an Idempotency-Key request rolled back after the charge: its retry asks with the same key",
      () =>
        Effect.gen(function* () {
          const payments = yield* Payments
          const sql = yield* SqlClient.SqlClient
          const actor = { type: "api_key" as const, id: "key_retrying", scopes: new Set(["admin"]) }
          const input = { amount: 2468, currency: "USD", paymentMethod: "pm_card_visa" }
          const requestKey = `retry-${Date.now()}`
          // The first try charges, then its transaction (the middleware's, for a keyed request) rolls back.
          const first = yield* Effect.flip(
            sql.withTransaction(
              Effect.zipRight(payments.createPayment(actor, input, requestKey), Effect.fail("crash" as const))
            )
          )
          expect(first).toBe("crash")
          const charged = (yield* processorCalls("ik_")).filter((c) => c.amount === 2468)
          // On PostgreSQL the test processor keeps its records outside the request's transaction, as a
          // real processor does: the charge stands. On the embedded database (one connection) they share
          // the request's transaction: the rollback took the charge with it — no money moved.
          expect(charged).toHaveLength(usingRealPostgres ? 1 : 0)
          // The retry: a new intent id, the same processor key, the first answer; money moved once.
          const retried = yield* payments.createPayment(actor, input, requestKey)
          expect(retried.status).toBe("succeeded")
          const after = (yield* processorCalls("ik_")).filter((c) => c.amount === 2468)
          expect(after.map((c) => c.requests)).toEqual([usingRealPostgres ? 2 : 1])
          expect(after[0]?.idempotencyKey).toMatch(/^ik_[0-9a-f]{32}:confirm:1$/)
          if (usingRealPostgres) expect(after[0]?.idempotencyKey).toBe(charged[0]?.idempotencyKey)
          expect(yield* publicEventTypes(retried.id)).toEqual(["payment.authorized", "payment.captured"])
        })
    )

    it.effect("a request that records its outcome disarms the safety net", () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const work = yield* DueWork
        const payment = yield* createPayment(token)
        const item = yield* work.get(PROCESSOR_CALL_KIND, `${payment.paymentIntentId}:confirm:1`)
        expect(Option.map(item, (i) => i.status)).toEqual(Option.some("cancelled"))
      })
    )
  }
)
