/**
 * Aggregations against a pure reference model (issue #21 item 8): the decider's arithmetic on its own
 * (exact decimals, partials that combine in any grouping, the rules a record is checked by), then a
 * fast-check property over the whole stack — random records (values with decimals, timestamps on
 * and around hour and day boundaries, ties in time, repeated unique values) posted as a batch, and
 * random `[from, to)` ranges with and without `groupBy`: every summary and bucket equals the
 * reference model's recomputation from the raw records, for sum, count, max, last and unique_count.
 * The reference model (./reference.ts) is written apart from the decider's arithmetic, which is also
 * checked against it.
 */
import type { HttpClient } from "@effect/platform"
import type { SqlClient } from "@effect/sql"
import { describe, layer } from "@effect/vitest"
import { Effect, Runtime } from "effect"
import * as fc from "fast-check"
import { expect, it as plain } from "vitest"
import type { UsageAggregation } from "../../../src/billing/contract.js"
import {
  aggregateReference,
  checkRecord,
  combine,
  emptyPartial,
  hasAtMostSixDecimals,
  microsOf,
  microsOfValue,
  numberOfMicros,
  type Partial,
  partialOf,
  quantityMicros,
  type SubscriptionView,
  type UsagePoint
} from "../../../src/billing/usage/decider.js"
import { rangePieces } from "../../../src/billing/usage/queries.js"
import { adminToken } from "../../support/customers.js"
import { call, IdentityHttp } from "../../support/identity.js"
import {
  DAY,
  getSummary,
  HOUR,
  MINUTE,
  subscriptionReadModelFixture,
  sumPrice,
  uniqueMeter
} from "./fixtures.js"
import { millionthsOf, type ReferenceRecord, referenceAggregate, shownAs } from "./reference.js"

const AGGREGATIONS: ReadonlyArray<UsageAggregation> = ["sum", "count", "max", "last", "unique_count"]
const VALUES = [0, 0.5, 1, 1.25, 3, 7.000001, 10, 123456.789]

const plainRecordArb = fc.record({
  value: fc.constantFrom(...VALUES),
  at: fc.integer({ min: 0, max: 20 }).map((n) => n * 1000),
  identifier: fc.string({ minLength: 1, maxLength: 3 }),
  uniqueValue: fc.constantFrom("a", "b", "c", null)
})

/** A record as the decider folds it (its value in millionths by the production conversion). */
const pointOf = (r: ReferenceRecord): UsagePoint => ({
  micros: microsOfValue(r.value),
  at: r.at,
  identifier: r.identifier,
  uniqueValue: r.uniqueValue
})

const sameQuantities = (p: Partial, q: Partial) =>
  AGGREGATIONS.every((a) => quantityMicros(a, p) === quantityMicros(a, q)) && p.count === q.count

describe("aggregation arithmetic (pure)", () => {
  plain("values are exact decimals of at most 6 places", () => {
    expect(hasAtMostSixDecimals(0.1)).toBe(true)
    expect(hasAtMostSixDecimals(7.000001)).toBe(true)
    expect(hasAtMostSixDecimals(1.1234567)).toBe(false)
    expect(microsOf("12.5")).toBe(12_500_000n)
    expect(microsOf("0.000001")).toBe(1n)
    expect(microsOf("42")).toBe(42_000_000n)
    expect(numberOfMicros(microsOfValue(0.1) + microsOfValue(0.2))).toBe(0.3)
    for (const v of VALUES) {
      expect(microsOfValue(v)).toBe(millionthsOf(v))
      expect(numberOfMicros(microsOfValue(v))).toBe(shownAs(millionthsOf(v)))
    }
  })

  plain("partials combine in any grouping to the aggregate of all records (reference model)", () => {
    fc.assert(
      fc.property(
        fc.array(plainRecordArb, { maxLength: 30 }),
        fc.integer({ min: 0, max: 30 }),
        (records, cut) => {
          const points = records.map(pointOf)
          const all = points.reduce((acc, p) => combine(acc, partialOf(p)), emptyPartial)
          const left = points.slice(0, cut).reduce((acc, p) => combine(acc, partialOf(p)), emptyPartial)
          const right = points.slice(cut).reduce((acc, p) => combine(acc, partialOf(p)), emptyPartial)
          expect(sameQuantities(combine(left, right), all)).toBe(true)
          expect(sameQuantities(combine(right, left), all)).toBe(true)
          for (const a of AGGREGATIONS) {
            expect(quantityMicros(a, all)).toBe(aggregateReference(a, points, 0, 1e12).quantity)
            // The decider's own recomputation agrees with the model written apart from it.
            expect(aggregateReference(a, points, 0, 1e12).quantity).toBe(
              referenceAggregate(a, records, 0, 1e12).quantity
            )
          }
        }
      )
    )
  })

  plain("last: the latest timestamp, ties to the larger identifier (byte order); empty → 0", () => {
    const p = (micros: bigint, at: number, identifier: string): UsagePoint => ({
      micros,
      at,
      identifier,
      uniqueValue: null
    })
    expect(aggregateReference("last", [p(5n, 10, "b"), p(7n, 10, "a"), p(1n, 5, "z")], 0, 100).quantity).toBe(
      5n
    )
    expect(aggregateReference("last", [], 0, 100).quantity).toBe(0n)
    expect(aggregateReference("max", [], 0, 100).quantity).toBe(0n)
  })

  plain("checkRecord: status, meter, window, closed period, and the period a timestamp falls in", () => {
    const now = new Date("2026-03-10T12:00:00Z")
    const sub: SubscriptionView = {
      id: "sub_x",
      customerId: "cus_x",
      status: "active",
      currency: "USD",
      currentPeriodStart: new Date("2026-03-01T00:00:00Z"),
      currentPeriodEnd: new Date("2026-04-01T00:00:00Z"),
      usage: sumPrice("calls"),
      usageClosedBefore: new Date("2026-02-01T00:00:00Z"),
      testClockId: null
    }
    const at = (iso: string) => checkRecord(sub, "calls", new Date(iso), now)
    expect(at("2026-03-05T00:00:00Z")).toMatchObject({
      _tag: "Accepted",
      period: { start: sub.currentPeriodStart }
    })
    expect(at("2026-02-15T00:00:00Z")).toMatchObject({
      _tag: "Accepted",
      period: { start: sub.usageClosedBefore, end: sub.currentPeriodStart }
    })
    expect(at("2026-01-31T23:59:59Z")._tag).toBe("TimestampOutOfRange") // 35 days back wins first
    expect(
      checkRecord(
        { ...sub, usageClosedBefore: new Date("2026-02-20T00:00:00Z") },
        "calls",
        new Date("2026-02-15T00:00:00Z"),
        now
      )._tag
    ).toBe("PeriodClosed")
    expect(at("2026-03-10T12:05:00Z")._tag).toBe("Accepted")
    expect(at("2026-03-10T12:05:00.001Z")._tag).toBe("TimestampOutOfRange")
    expect(checkRecord(sub, "other", now, now)._tag).toBe("MeterMismatch")
    expect(checkRecord({ ...sub, status: "canceled" }, "calls", now, now)._tag).toBe("SubscriptionNotActive")
    expect(
      checkRecord({ ...sub, usageClosedBefore: null }, "calls", new Date("2026-02-15T00:00:00Z"), now)._tag
    ).toBe("TimestampOutOfRange")
  })

  plain("a range is read as whole hours, whole minutes of its edge hours and raw partial minutes", () => {
    const instant = fc.oneof(
      fc.integer({ min: 0, max: 3 * DAY }),
      fc
        .tuple(
          fc.integer({ min: 0, max: 72 }),
          fc.integer({ min: 0, max: 60 }),
          fc.integer({ min: -3, max: 3 })
        )
        .map(([h, m, d]) => Math.max(0, h * HOUR + m * MINUTE + d))
    )
    fc.assert(
      fc.property(instant, instant, fc.boolean(), (a, b, minutes) => {
        const [from, to] = [Math.min(a, b), Math.max(a, b)]
        const pieces = rangePieces(from, to, minutes)
        const all = [
          ...(pieces.hours === null ? [] : [{ span: pieces.hours, unit: HOUR }]),
          ...pieces.minutes.map((span) => ({ span, unit: MINUTE })),
          ...pieces.raw.map((span) => ({ span, unit: 1 }))
        ].sort((x, y) => x.span[0] - y.span[0])
        // Disjoint, non-empty, and covering [from, to) exactly.
        let cursor = from
        for (const { span, unit } of all) {
          expect(span[0]).toBe(cursor)
          expect(span[1]).toBeGreaterThan(span[0])
          // Rollup pieces are whole units; raw pieces are shorter than what they stand in for.
          expect(span[0] % unit).toBe(0)
          expect(span[1] % unit).toBe(0)
          cursor = span[1]
        }
        expect(cursor).toBe(to)
        for (const [lo, hi] of pieces.raw) expect(hi - lo).toBeLessThan(minutes ? MINUTE : HOUR)
        if (!minutes) expect(pieces.minutes).toEqual([])
        expect(pieces.raw.length).toBeLessThanOrEqual(minutes ? 4 : 2)
      })
    )
  })
})

// --- The whole stack against the reference ------------------------------------------------------------

const RUNS = Number(process.env.USAGE_PROPERTY_RUNS ?? 25)

/** Instants drawn again and again: ties in time (broken by identifier), in edge and in whole hours. */
const TIES = [HOUR + 500, 5 * HOUR, DAY + 7, 2 * DAY - 1]

/** Ranges that end on the ties (their last record is a tie), by hour buckets (rollups) and raw edges. */
const TIE_RANGES = TIES.flatMap((t) => [
  { a: 0, b: t, groupBy: "hour" as const },
  { a: 0, b: Math.floor(t / HOUR) * HOUR + HOUR - 1, groupBy: "hour" as const }
])

/**
 * Offsets (ms) into a 3-day window, clustered on hour, minute and day boundaries where hourly rollups,
 * minute rollups and raw rows meet.
 */
const offsetArb = fc
  .record({
    kind: fc.integer({ min: 0, max: 3 }),
    anywhere: fc.integer({ min: 0, max: 3 * DAY - 1 }),
    hour: fc.integer({ min: 0, max: 71 }),
    minute: fc.constantFrom(1, 2, 30, 58, 59),
    delta: fc.integer({ min: -2000, max: 2000 }),
    tie: fc.constantFrom(...TIES)
  })
  .map((o) =>
    o.kind === 0
      ? o.anywhere
      : o.kind === 1
        ? Math.min(3 * DAY - 1, Math.max(0, o.hour * HOUR + o.delta))
        : o.kind === 2
          ? Math.min(3 * DAY - 1, Math.max(0, o.hour * HOUR + o.minute * MINUTE + o.delta))
          : o.tie
  )

const recordArb = fc.record({
  offset: offsetArb,
  value: fc.constantFrom(...VALUES),
  unique: fc.constantFrom("a", "b", "c", "d", null)
})

const caseArb = fc.record({
  aggregation: fc.constantFrom(...AGGREGATIONS),
  records: fc.array(recordArb, { maxLength: 60, size: "max" }),
  ranges: fc.array(
    fc.record({
      a: offsetArb,
      b: offsetArb,
      groupBy: fc.constantFrom<"hour" | "day" | undefined>(undefined, "hour", "day")
    }),
    { minLength: 1, maxLength: 3 }
  )
})

layer(IdentityHttp, { excludeTestServices: true, timeout: 300_000 })("aggregations over the stack", (it) => {
  it.effect(
    "every summary and bucket equals the reference model's recomputation from the raw records",
    () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const runtime = yield* Effect.runtime<SqlClient.SqlClient | HttpClient.HttpClient>()
        const now = Date.now()
        const base = Math.floor(now / DAY) * DAY - 4 * DAY
        const runCase = (c: typeof caseArb extends fc.Arbitrary<infer T> ? T : never) =>
          Effect.gen(function* () {
            const meter = uniqueMeter("prop")
            const sub = yield* subscriptionReadModelFixture({
              usage: sumPrice(meter, {
                aggregation: c.aggregation,
                uniqueKey: c.aggregation === "unique_count" ? "user" : null
              }),
              periodStart: new Date(base - DAY),
              periodEnd: new Date(base + 10 * DAY)
            })
            const points: Array<ReferenceRecord> = c.records.map((r, i) => ({
              value: r.value,
              at: base + r.offset,
              // Ties in time are broken by identifier: make them differ in more than the index's order.
              identifier: `id-${(i * 7919) % 1000}-${i}`,
              uniqueValue: r.unique
            }))
            if (points.length > 0) {
              const posted = yield* call("POST", "/v1/usage/batch", {
                token,
                json: {
                  records: c.records.map((r, i) => ({
                    subscriptionId: sub.id,
                    meter,
                    identifier: points[i]?.identifier,
                    value: r.value,
                    timestamp: new Date(base + r.offset).toISOString(),
                    properties: r.unique === null ? { other: 1 } : { user: r.unique }
                  }))
                }
              })
              expect(posted.body?.created, posted.text).toBe(points.length)
            }
            // The whole window (edges inside the first and last hour), then the drawn ranges.
            const window = { a: 1234, b: 3 * DAY - 1001, groupBy: c.ranges[0]?.groupBy }
            for (const range of [window, ...c.ranges, ...(c.aggregation === "last" ? TIE_RANGES : [])]) {
              const from = base + Math.min(range.a, range.b)
              const to = base + Math.max(range.a, range.b) + 1
              const params: Record<string, string> = {
                subscriptionId: sub.id,
                from: new Date(from).toISOString(),
                to: new Date(to).toISOString()
              }
              if (range.groupBy !== undefined) params.groupBy = range.groupBy
              const r = yield* getSummary(token, params)
              expect(r.status, r.text).toBe(200)
              const expected = referenceAggregate(c.aggregation, points, from, to)
              expect(r.body.quantity, JSON.stringify({ c, range })).toBe(shownAs(expected.quantity))
              expect(r.body.eventCount).toBe(expected.eventCount)
              if (range.groupBy !== undefined) {
                const unit = range.groupBy === "hour" ? HOUR : DAY
                const buckets = []
                for (let s = Math.floor(from / unit) * unit; s < to; s += unit) {
                  const bs = Math.max(s, from)
                  const be = Math.min(s + unit, to)
                  const b = referenceAggregate(c.aggregation, points, bs, be)
                  buckets.push({
                    start: new Date(bs).toISOString(),
                    end: new Date(be).toISOString(),
                    quantity: shownAs(b.quantity),
                    eventCount: b.eventCount
                  })
                }
                expect(r.body.buckets).toEqual(buckets)
              }
            }
          })
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(caseArb, (c) => Runtime.runPromise(runtime)(runCase(c))),
            { numRuns: RUNS, seed: 20_261_126, endOnFailure: true }
          )
        )
      }),
    300_000
  )
})
