/**
 * No double charge (issue #21 item 8; research §6 row 5): two renewal workers and manual renewals
 * racing the same period end → one invoice per period and one charge at the processor; a renewal
 * interrupted right after the processor charged (the outcome never recorded) completes once when
 * the work runs again — the processor is asked again under the same key and moves no money twice.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber, Layer } from "effect"
import { expect } from "vitest"
import { Billing } from "../../src/billing/Billing.js"
import { invoiceIdOf } from "../../src/billing/index.js"
import { billingRenewals } from "../../src/billing/renewals.js"
import { processorCallRecovery } from "../../src/payments/recovery.js"
import { processorsLayer } from "../../src/processors/Supervisor.js"
import { projections } from "../../src/registry.js"
import { HttpAppLive } from "../../src/server.js"
import { servicesLayer } from "../../src/services.js"
import {
  callsOf,
  chargesOf,
  getSubscription,
  invoicesOf,
  ok,
  recurringProduct,
  subscribe
} from "../support/billing.js"
import { makeShiftedClock } from "../support/clock.js"
import { registeredShopper } from "../support/customers.js"
import { TestConfig, usingRealPostgres } from "../support/database.js"
import { apiKeyWith, call } from "../support/identity.js"
import { eventually } from "../support/notifications.js"
import { callStartedThenCrash } from "../support/payments.js"

const DAY = 86_400_000
const PROCESSORS = [billingRenewals(), processorCallRecovery()]
const shifted = makeShiftedClock()

const App = Layer.mergeAll(HttpAppLive, processorsLayer(PROCESSORS)).pipe(
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(
    servicesLayer({ processors: PROCESSORS, projections }).pipe(Layer.provideMerge(TestConfig))
  ),
  Layer.provide(Layer.setClock(shifted.clock))
)

const staff = Effect.map(apiKeyWith(["admin"]), (k) => k.key)

const activeSubscription = (token: string, amount: number) =>
  Effect.gen(function* () {
    const shopper = yield* registeredShopper()
    const product = yield* recurringProduct(token, { interval: "day", intervalCount: 30 }, { amount })
    return ok(201)(
      yield* subscribe(token, {
        customerId: shopper.customerId,
        productId: product.id,
        paymentMethod: "pm_card_visa"
      })
    )
  })

layer(App, { excludeTestServices: true, timeout: 180_000 })("no double charge", (it) => {
  it.effect("two workers and manual renewals racing one period end: one invoice, one charge each", () =>
    Effect.gen(function* () {
      const token = yield* staff
      const billing = yield* Billing
      const subs = yield* Effect.forEach([1, 2, 3, 4, 5], (i) => activeSubscription(token, 100 * i))
      // A second worker next to the app's own, both on the moved clock.
      const second = yield* Effect.fork(billingRenewals().run.pipe(Effect.withClock(shifted.clock)))
      // The period ends for all of them at once; every path goes for the renewals at the same time.
      yield* shifted.advance(Duration.millis(31 * DAY))
      yield* Effect.all(
        subs.flatMap((s) => [billing.renew(s.id), billing.renew(s.id), billing.retry(s.id)]),
        { concurrency: "unbounded" }
      ).pipe(Effect.withClock(shifted.clock))
      for (const s of subs) {
        const start = new Date(s.currentPeriodEnd)
        const renewed = yield* eventually(
          Effect.map(getSubscription(token, s.id), (now) =>
            now.latestInvoice?.status === "paid" && now.currentPeriodStart === start.toISOString()
              ? now
              : undefined
          ),
          20_000
        )
        expect(renewed.status).toBe("active")
        expect((yield* invoicesOf(token, s.id)).map((i) => i.id).sort()).toEqual(
          [invoiceIdOf(s.id, new Date(s.currentPeriodStart)), invoiceIdOf(s.id, start)].sort()
        )
        const charges = yield* chargesOf(`renewal:${s.id}:${start.toISOString()}`)
        expect(charges.map((c) => c.amount)).toEqual([s.latestInvoice.total])
      }
      yield* Fiber.interrupt(second)
    })
  )

  it.effect("a renewal killed after the processor charged completes once when the work runs again", () =>
    Effect.gen(function* () {
      const token = yield* staff
      const billing = yield* Billing
      const sub = yield* activeSubscription(token, 4200)
      const start = new Date(sub.currentPeriodEnd)
      // The renewal's transaction commits (invoice, intent with its confirmation started, period
      // advanced) on a clock already past the period end, the processor charges the card — and the
      // process dies before recording it.
      const ahead = makeShiftedClock(shifted.clock.unsafeCurrentTimeMillis() - Date.now() + 31 * DAY)
      const opened = yield* billing
        .openRenewal(sub.id, { actor: { type: "system", id: "test" } })
        .pipe(Effect.withClock(ahead.clock))
      const invoice =
        opened._tag === "Some" ? opened.value.invoices.find((i) => i.status === "open") : undefined
      expect(invoice?.invoiceId).toBe(invoiceIdOf(sub.id, start))
      yield* callStartedThenCrash(invoice?.paymentIntentId ?? "")
      // Restart: the workers' clock passes the period end and the call's safety net (30 s after the
      // start); the renewal item runs again, and the recovery worker asks the processor again.
      yield* shifted.advance(Duration.millis(31 * DAY + 60_000))
      const done = yield* eventually(
        Effect.map(getSubscription(token, sub.id), (now) =>
          now.latestInvoice?.status === "paid" ? now : undefined
        ),
        30_000
      ).pipe(
        Effect.catchAll(() =>
          // The first run may have waited out the call in flight: its retry comes a minute later.
          Effect.zipRight(
            shifted.advance(Duration.minutes(2)),
            eventually(
              Effect.map(getSubscription(token, sub.id), (now) =>
                now.latestInvoice?.status === "paid" ? now : undefined
              ),
              30_000
            )
          )
        )
      )
      expect(done).toMatchObject({ status: "active", currentPeriodStart: start.toISOString() })
      const calls = yield* callsOf(`renewal:${sub.id}:${start.toISOString()}`)
      expect(calls.map((c) => c.operation)).toEqual(["authorize"])
      // Asked again after the crash (same key), charged once.
      expect(calls[0]?.requests).toBeGreaterThanOrEqual(2)
      expect((yield* chargesOf(`renewal:${sub.id}:${start.toISOString()}`)).map((c) => c.amount)).toEqual([
        4200
      ])
      expect((yield* invoicesOf(token, sub.id)).length).toBe(2)
    })
  )

  it.effect.skipIf(!usingRealPostgres)(
    "a subscription changed during the renewal's processor call: charged once, paid on the stream as it now is",
    () =>
      Effect.gen(function* () {
        const token = yield* staff
        const billing = yield* Billing
        const sql = yield* SqlClient.SqlClient
        const sub = yield* activeSubscription(token, 900)
        const start = new Date(sub.currentPeriodEnd)
        // The test processor's ledger held: the renewal's call waits there, after its transaction.
        const held = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const holder = yield* Effect.fork(
          sql.withTransaction(
            Effect.gen(function* () {
              yield* sql`LOCK TABLE payments.test_processor_calls IN SHARE ROW EXCLUSIVE MODE`
              yield* Deferred.succeed(held, undefined)
              yield* Deferred.await(release)
            })
          )
        )
        yield* Deferred.await(held)
        const ahead = makeShiftedClock(shifted.clock.unsafeCurrentTimeMillis() - Date.now() + 31 * DAY)
        const renewal = yield* Effect.fork(billing.renew(sub.id).pipe(Effect.withClock(ahead.clock)))
        // Renewed (invoice open, its intent processing) and calling the processor: the stream moves.
        yield* eventually(
          Effect.map(getSubscription(token, sub.id), (now) =>
            now.latestInvoice?.status === "open" ? now : undefined
          ),
          20_000
        )
        ok(200)(yield* call("PATCH", `/v1/subscriptions/${sub.id}`, { token, json: { quantity: 3 } }))
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        expect((yield* Fiber.join(renewal))._tag).toBe("Done")
        const after = yield* getSubscription(token, sub.id)
        expect(after).toMatchObject({
          status: "active",
          currentPeriodStart: start.toISOString(),
          pendingUpdate: { quantity: 3 },
          latestInvoice: { status: "paid", total: 900 }
        })
        expect((yield* chargesOf(`renewal:${sub.id}:${start.toISOString()}`)).map((c) => c.amount)).toEqual([
          900
        ])
      })
  )
})
