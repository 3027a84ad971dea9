/**
 * The usage read model is a pure function of the log (issue #21 item 8): after single records,
 * batches, replays, refusals, ties in time and unique_count values, a rebuild from position zero
 * (src/processors/Rebuild.ts) reproduces exactly the rows of `billing.usage_records`,
 * `billing.usage_hourly` and `billing.usage_distinct` — however the events were batched — and the
 * rebuilt tables stay live.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { UsageProjection } from "../../../src/billing/usage/projection.js"
import { rebuildProjection } from "../../../src/processors/Rebuild.js"
import { adminToken } from "../../support/customers.js"
import { rowsOf } from "../../support/database.js"
import { call, IdentityHttp } from "../../support/identity.js"
import {
  DAY,
  getSummary,
  HOUR,
  recordUsage,
  subscriptionReadModelFixture,
  sumPrice,
  uniqueMeter
} from "./fixtures.js"

const usageTables = Effect.all({
  records: rowsOf("billing.usage_records", "id"),
  hourly: rowsOf("billing.usage_hourly", "subscription_id, meter, hour"),
  minutely: rowsOf("billing.usage_minutely", "subscription_id, meter, minute"),
  distinct: rowsOf("billing.usage_distinct", "subscription_id, meter, hour, value")
})

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("usage projection rebuild", (it) => {
  it.effect("rebuilding from the log reproduces every usage row", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const now = Date.now()
      const base = Math.floor(now / DAY) * DAY - 2 * DAY
      const periodStart = new Date(base - DAY)
      const sums = yield* subscriptionReadModelFixture({ usage: sumPrice(uniqueMeter()), periodStart })
      const lasts = yield* subscriptionReadModelFixture({
        usage: sumPrice(uniqueMeter(), { aggregation: "last" }),
        periodStart
      })
      const users = yield* subscriptionReadModelFixture({
        usage: sumPrice(uniqueMeter(), { aggregation: "unique_count", uniqueKey: "user" }),
        periodStart
      })
      const at = (ms: number) => new Date(base + ms).toISOString()
      for (const [i, v] of [1, 2.5, 0.000001, 7].entries()) {
        yield* recordUsage(token, {
          subscriptionId: sums.id,
          meter: sums.usage?.meter,
          identifier: `s${i}`,
          value: v,
          timestamp: at(i * 20 * 60_000)
        })
      }
      // A replay and a conflict: no events.
      yield* call("POST", "/v1/usage", {
        token,
        json: { subscriptionId: sums.id, meter: sums.usage?.meter, identifier: "s0", value: 1 }
      })
      yield* call("POST", "/v1/usage", {
        token,
        json: { subscriptionId: sums.id, meter: sums.usage?.meter, identifier: "s0", value: 9 }
      })
      const batch = yield* call("POST", "/v1/usage/batch", {
        token,
        json: {
          records: [
            ...[3, 1, 4, 1, 5].map((v, i) => ({
              subscriptionId: lasts.id,
              meter: lasts.usage?.meter,
              identifier: `l${i}`,
              value: v,
              timestamp: at(HOUR + (i < 3 ? 0 : 60_000))
            })),
            ...["ann", "bob", "ann", "cy", "bob"].map((u, i) => ({
              subscriptionId: users.id,
              meter: users.usage?.meter,
              identifier: `u${i}`,
              timestamp: at(i * 7 * HOUR),
              properties: { user: u }
            })),
            { subscriptionId: users.id, meter: users.usage?.meter, identifier: "bad", value: -1 }
          ]
        }
      })
      expect(batch.body).toMatchObject({ created: 10, failed: 1 })

      const before = yield* usageTables
      expect(before.records.length).toBe(14)
      expect(before.distinct.length).toBeGreaterThanOrEqual(3)
      const summaries = yield* Effect.all(
        [sums, lasts, users].map((s) =>
          Effect.map(getSummary(token, { subscriptionId: s.id }), (r) => r.body.quantity)
        )
      )
      expect(summaries).toEqual([10.500001, 5, 3])

      // Damage the read model: the rebuild must not start from it.
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE billing.usage_hourly SET sum_value = 0, event_count = 0`
      yield* sql`DELETE FROM billing.usage_distinct`
      yield* sql`DELETE FROM billing.usage_records WHERE identifier = 's1'`

      const report = yield* rebuildProjection(UsageProjection, { batchSize: 3 })
      expect(report.events).toBeGreaterThanOrEqual(14)
      expect(yield* usageTables).toEqual(before)

      // The rebuilt tables are live.
      yield* recordUsage(token, {
        subscriptionId: sums.id,
        meter: sums.usage?.meter,
        identifier: "s9",
        value: 1
      })
      const after = yield* getSummary(token, { subscriptionId: sums.id })
      expect(after.body.quantity).toBe(11.500001)
    })
  )
})
