/**
 * No double charge with real processes (issue #21 item 8): worker processes (`ROLE=worker`,
 * `src/main.ts`) on the test's database, their clocks a day ahead so a hundred renewals fall due at
 * once, race each other and manual renewals from this process. One worker is killed with SIGKILL
 * while it holds renewals; a third, its clock two minutes further on (so the dead worker's leases
 * have run out for it, and the live one's too), takes over. Every period is invoiced once and
 * charged once at the processor. PostgreSQL only: child processes cannot share an embedded database.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer } from "effect"
import { Billing } from "../../src/billing/Billing.js"
import { invoiceIdOf } from "../../src/billing/index.js"
import { billingRenewals } from "../../src/billing/renewals.js"
import { processorCallRecovery } from "../../src/payments/recovery.js"
import { projections } from "../../src/registry.js"
import { HttpAppLive } from "../../src/server.js"
import { servicesLayer } from "../../src/services.js"
import { chargesOf, ok, recurringProduct, subscribe } from "../support/billing.js"
import { makeShiftedClock } from "../support/clock.js"
import { registeredShopper } from "../support/customers.js"
import { TestConfig, usingRealPostgres } from "../support/database.js"
import { apiKeyWith } from "../support/identity.js"
import { eventually } from "../support/notifications.js"
import { killed, startWorker } from "../support/workers.js"

const DAY = 86_400_000
const AHEAD = DAY + 5 * 60_000
const SUBSCRIPTIONS = 120

// This process runs no workers of its own: only the manual renewals below, on the workers' time.
const App = HttpAppLive.pipe(
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(
    servicesLayer({ processors: [billingRenewals(), processorCallRecovery()], projections }).pipe(
      Layer.provideMerge(TestConfig)
    )
  )
)

const countOf = (rows: ReadonlyArray<{ readonly n: number }>) => rows[0]?.n ?? 0

describe.skipIf(!usingRealPostgres)("renewals across processes (PostgreSQL)", () => {
  layer(App, { excludeTestServices: true, timeout: 300_000 })("", (it) => {
    it.scoped(
      "two workers, one killed holding renewals, a third taking over, manual renewals racing: one invoice and one charge per period",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const billing = yield* Billing
          const token = (yield* apiKeyWith(["admin"])).key
          const product = yield* recurringProduct(
            token,
            { interval: "day", intervalCount: 1 },
            { amount: 700 }
          )
          const shoppers = yield* Effect.forEach(Array.from({ length: 6 }), () => registeredShopper())
          const subs = yield* Effect.forEach(
            Array.from({ length: SUBSCRIPTIONS }, (_, i) => i),
            (i) =>
              Effect.map(
                subscribe(token, {
                  customerId: shoppers[i % shoppers.length]?.customerId,
                  productId: product.id,
                  paymentMethod: "pm_card_visa",
                  quantity: 1 + (i % 5)
                }),
                ok(201)
              ),
            { concurrency: 8 }
          )
          const ids = subs.map((s) => s.id as string)
          const renewedCount = Effect.map(
            sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM billing.invoices
              WHERE subscription_id IN ${sql.in(ids)} AND status = 'paid'`,
            (rows) => countOf(rows) - SUBSCRIPTIONS
          )
          const doneOrHeldBy = (worker: string) =>
            Effect.map(
              sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM processors.due_work
                WHERE kind = 'billing.renew' AND claimed_by = ${worker}`,
              countOf
            )

          const a = yield* startWorker("renew-a", { aheadMs: AHEAD })
          yield* startWorker("renew-b", { aheadMs: AHEAD })
          // Both are at work before anything else joins in.
          yield* eventually(
            Effect.map(Effect.all([doneOrHeldBy("renew-a"), doneOrHeldBy("renew-b")]), ([x, y]) =>
              x > 0 && y > 0 ? true : undefined
            ),
            90_000
          )
          // Manual renewals (and retries) of every subscription, on the workers' time, racing them.
          const ahead = makeShiftedClock(AHEAD)
          const manual = yield* Effect.fork(
            Effect.forEach(ids, (id) => Effect.exit(Effect.all([billing.renew(id), billing.retry(id)])), {
              concurrency: 16
            }).pipe(Effect.withClock(ahead.clock))
          )
          yield* killed(a)
          const heldAtKill = yield* sql<{ readonly id: string }>`SELECT id FROM processors.due_work
            WHERE kind = 'billing.renew' AND claimed_by = 'renew-a' AND status = 'claimed'`
          yield* startWorker("renew-c", { aheadMs: AHEAD + 2 * 60_000 })
          const manualExits = yield* Fiber.join(manual)
          // A manual renewal may lose a race (a typed conflict), never die.
          for (const exit of manualExits)
            if (Exit.isFailure(exit)) expect(String(exit.cause)).not.toMatch(/Die|defect/i)
          yield* eventually(
            Effect.map(renewedCount, (n) => (n === SUBSCRIPTIONS ? n : undefined)),
            120_000
          )

          // One invoice per period, UNIQUE aside: exactly the two ids each subscription should have.
          const invoices = yield* sql<{ readonly sub: string; readonly id: string }>`
            SELECT subscription_id AS sub, id FROM billing.invoices WHERE subscription_id IN ${sql.in(ids)}`
          for (const s of subs) {
            const start = new Date(s.currentPeriodEnd)
            expect(
              invoices
                .filter((r) => r.sub === s.id)
                .map((r) => r.id)
                .sort()
            ).toEqual([invoiceIdOf(s.id, new Date(s.currentPeriodStart)), invoiceIdOf(s.id, start)].sort())
            // One charge at the processor for the renewal, of the period's amount.
            const charges = yield* chargesOf(`renewal:${s.id}:${start.toISOString()}`)
            expect(charges.map((c) => c.amount)).toEqual([s.latestInvoice.total])
          }
          // The renewal items are all done, those the killed worker held included (taken over once its
          // leases ran out), each having found its renewal already charged: nothing charged twice above.
          const keys = subs.map((sub) => `${sub.id}:${sub.currentPeriodEnd}`)
          const items = yield* eventually(
            Effect.map(
              sql<{ readonly id: string; readonly status: string }>`SELECT id, status
                FROM processors.due_work WHERE kind = 'billing.renew' AND key IN ${sql.in(keys)}`,
              (rows) => (rows.every((r) => r.status === "done") ? rows : undefined)
            ),
            90_000
          )
          expect(items).toHaveLength(SUBSCRIPTIONS)
          expect(heldAtKill.every((h) => items.some((i) => i.id === h.id))).toBe(true)
          for (const s of subs) {
            const start = new Date(s.currentPeriodEnd)
            expect((yield* chargesOf(`renewal:${s.id}:${start.toISOString()}`)).length).toBe(1)
          }
        }),
      300_000
    )
  })
})
