/**
 * Summaries are exact (issue #21 item 8): 100,000 random records (decimal values, timestamps all
 * over a 30-day period, many in the same hour) recorded through the use case in batches of 1,000,
 * then the summary of the period, of random ranges (edges inside hours) and by day, and the
 * `UsageLedger.periodQuantity` a renewal reads, each equal to the recomputation from the raw
 * records — in exact decimal arithmetic, from the hourly rollups, never a scan of the period. The
 * recomputation is the reference model of ./reference.ts, not the decider's arithmetic.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import * as fc from "fast-check"
import { expect } from "vitest"
import { UsageLedger } from "../../../src/billing/contract.js"
import { Usage } from "../../../src/billing/usage/Usage.js"
import type { AuthenticatedActor } from "../../../src/http/Auth.js"
import { adminToken } from "../../support/customers.js"
import { IdentityHttp } from "../../support/identity.js"
import { DAY, getSummary, HOUR, subscriptionReadModelFixture, sumPrice, uniqueMeter } from "./fixtures.js"
import { type ReferenceRecord, referenceAggregate, shownAs } from "./reference.js"

const RECORDS = Number(process.env.USAGE_EXACT_RECORDS ?? 100_000)
const BATCH = 1000
const ACTOR: AuthenticatedActor = { type: "system", id: "usage-exact-test", scopes: new Set(["admin"]) }

layer(IdentityHttp, { excludeTestServices: true, timeout: 600_000 })("exact summaries", (it) => {
  it.effect(
    `the summary of ${RECORDS} random records equals their recomputation`,
    () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const usage = yield* Usage
        const ledger = yield* UsageLedger
        const meter = uniqueMeter("exact")
        const now = Date.now()
        const periodStart = new Date(Math.floor(now / HOUR) * HOUR - 29 * DAY + 1234)
        const periodEnd = new Date(periodStart.getTime() + 30 * DAY)
        const price = sumPrice(meter, { includedUnits: 1000, unitAmount: 3 })
        const sub = yield* subscriptionReadModelFixture({ usage: price, periodStart, periodEnd })
        const span = now - periodStart.getTime()
        const draw = fc.sample(
          fc.record({
            at: fc.oneof(
              fc.integer({ min: 0, max: span - 1 }),
              // A hot hour: many records in one rollup row.
              fc.integer({ min: 5 * DAY, max: 5 * DAY + HOUR - 1 })
            ),
            value: fc.oneof(
              fc.integer({ min: 0, max: 1000 }),
              fc.integer({ min: 0, max: 10_000_000 }).map((n) => n / 1_000_000)
            )
          }),
          { numRuns: RECORDS, seed: 42 }
        )
        const points: Array<ReferenceRecord> = draw.map((d, i) => ({
          value: d.value,
          at: periodStart.getTime() + d.at,
          identifier: `x${i}`,
          uniqueValue: null
        }))
        for (let from = 0; from < draw.length; from += BATCH) {
          const result = yield* usage.recordBatch(ACTOR, {
            records: draw.slice(from, from + BATCH).map((d, k) => ({
              subscriptionId: sub.id,
              meter,
              identifier: `x${from + k}`,
              value: d.value,
              timestamp: new Date(periodStart.getTime() + d.at).toISOString()
            }))
          })
          expect(result.failed, JSON.stringify(result.results.find((r) => r.error))).toBe(0)
        }

        const period = referenceAggregate("sum", points, periodStart.getTime(), periodEnd.getTime())
        const whole = yield* getSummary(token, { subscriptionId: sub.id })
        expect(whole.status, whole.text).toBe(200)
        expect(whole.body.eventCount).toBe(RECORDS)
        expect(whole.body.quantity).toBe(shownAs(period.quantity))
        expect(whole.body.billableUnits).toBe(shownAs(period.quantity - 1000n * 1_000_000n))

        const ledgered = yield* ledger.periodQuantity({
          subscriptionId: sub.id,
          usage: price,
          periodStart,
          periodEnd
        })
        expect(ledgered).toEqual({ quantity: shownAs(period.quantity), eventCount: RECORDS })

        const ranges = fc.sample(
          fc.tuple(fc.integer({ min: 0, max: span }), fc.integer({ min: 0, max: span })),
          {
            numRuns: 8,
            seed: 7
          }
        )
        for (const [a, b] of ranges) {
          const from = periodStart.getTime() + Math.min(a, b)
          const to = periodStart.getTime() + Math.max(a, b) + 1
          const r = yield* getSummary(token, {
            subscriptionId: sub.id,
            from: new Date(from).toISOString(),
            to: new Date(to).toISOString(),
            groupBy: "day"
          })
          expect(r.status, r.text).toBe(200)
          const expected = referenceAggregate("sum", points, from, to)
          expect(r.body.quantity).toBe(shownAs(expected.quantity))
          expect(r.body.eventCount).toBe(expected.eventCount)
          for (const bucket of r.body.buckets as ReadonlyArray<{
            start: string
            end: string
            quantity: number
          }>) {
            const e = referenceAggregate("sum", points, Date.parse(bucket.start), Date.parse(bucket.end))
            expect(bucket.quantity).toBe(shownAs(e.quantity))
          }
        }
      }),
    600_000
  )
})
