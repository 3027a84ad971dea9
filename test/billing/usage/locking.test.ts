/**
 * The contract's locking rule (src/billing/contract.ts; research §6 row 8, usage lost around period
 * changes): a renewal holds the subscription row `FOR UPDATE`, reads the closing period's quantity
 * through `UsageLedger` and advances `usage_closed_before` in its transaction; a usage write of that
 * period arriving meanwhile waits for it (its `FOR KEY SHARE`) and is then refused `period_closed` —
 * so what the renewal invoiced is exactly what the period holds, never a record more or less.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { expect } from "vitest"
import { UsageLedger } from "../../../src/billing/contract.js"
import { adminToken } from "../../support/customers.js"
import { expectError, IdentityHttp } from "../../support/identity.js"
import { DAY, getSummary, HOUR, postUsage, recordUsage, subscriptionReadModelFixture } from "./fixtures.js"

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("usage and a period close", (it) => {
  it.effect(
    "a write racing a renewal's close waits for it, then gets period_closed; the invoice is exact",
    () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* UsageLedger
        const now = Date.now()
        const periodStart = new Date(now - 20 * DAY)
        const periodEnd = new Date(now - HOUR)
        const sub = yield* subscriptionReadModelFixture({ periodStart, periodEnd })
        const usage = sub.usage
        if (usage === null) throw new Error("fixture without usage")
        const late = new Date(now - 2 * HOUR).toISOString()
        yield* recordUsage(token, {
          subscriptionId: sub.id,
          meter: usage.meter,
          identifier: "in",
          value: 5,
          timestamp: late
        })

        const locked = yield* Deferred.make<void>()
        const renewal = yield* Effect.fork(
          sql.withTransaction(
            Effect.gen(function* () {
              yield* sql`SELECT id FROM billing.subscriptions WHERE id = ${sub.id} FOR UPDATE`
              yield* Deferred.succeed(locked, undefined)
              // The write is in flight now; the renewal takes its time.
              yield* Effect.sleep("300 millis")
              const invoiced = yield* ledger.periodQuantity({
                subscriptionId: sub.id,
                usage,
                periodStart,
                periodEnd
              })
              yield* sql`UPDATE billing.subscriptions SET usage_closed_before = ${periodEnd},
                current_period_start = ${periodEnd}, current_period_end = ${new Date(periodEnd.getTime() + 30 * DAY)}
              WHERE id = ${sub.id}`
              return invoiced
            })
          )
        )
        yield* Deferred.await(locked)
        const racing = yield* Effect.fork(
          postUsage(token, {
            subscriptionId: sub.id,
            meter: usage.meter,
            identifier: "racing",
            value: 7,
            timestamp: late
          })
        )
        const invoiced = yield* Fiber.join(renewal)
        expect(invoiced).toEqual({ quantity: 5, eventCount: 1 })
        expectError(yield* Fiber.join(racing), 400, "period_closed", "timestamp")
        const closed = yield* getSummary(token, {
          subscriptionId: sub.id,
          from: periodStart.toISOString(),
          to: periodEnd.toISOString()
        })
        expect(closed.body).toMatchObject({ quantity: 5, eventCount: 1 })
        // Usage of the new period is taken.
        const next = yield* recordUsage(token, {
          subscriptionId: sub.id,
          meter: usage.meter,
          identifier: "next"
        })
        expect(next.periodStart).toBe(periodEnd.toISOString())
      })
  )
})
