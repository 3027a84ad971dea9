/**
 * `/v1/usage` over real HTTP (issue #21 items 3, 6, 7): recording one record and batches, every
 * refusal (400/404/409, never a partial write), dedup per (meter, identifier) including 50
 * concurrent posts of one identifier, the closed period, summaries with buckets, and who may do what
 * (`write:usage` for the store's backend; shoppers read their own usage only).
 */

import { SqlClient } from "@effect/sql"
import { describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { adminToken, registeredShopper } from "../../support/customers.js"
import { apiKeyWith, call, expectError, IdentityHttp, type Reply } from "../../support/identity.js"
import {
  DAY,
  getSummary,
  HOUR,
  postUsage,
  recordUsage,
  subscriptionReadModelFixture,
  sumPrice,
  uniqueMeter,
  updateSubscriptionFixture,
  writtenFor
} from "./fixtures.js"

const OPTIONS = { excludeTestServices: true, timeout: 120_000 } as const

/** Concurrent posts of one identifier: one 201, the others 200 replays of it; one record, one event. */
const expectOneRecord = (replies: ReadonlyArray<Reply>, meter: string) =>
  Effect.gen(function* () {
    const statuses = replies.map((r) => r.status)
    expect(
      statuses.filter((s) => s === 201),
      JSON.stringify(statuses)
    ).toHaveLength(1)
    expect(statuses.filter((s) => s === 200)).toHaveLength(replies.length - 1)
    expect(new Set(replies.map((r) => r.body.id)).size).toBe(1)
    for (const r of replies) if (r.status === 200) expect(r.headers["idempotent-replayed"]).toBe("true")
    expect(yield* writtenFor(meter)).toEqual({ records: 1, hourly: 1 })
    const sql = yield* SqlClient.SqlClient
    const events = yield* sql`SELECT 1 FROM event_store.events WHERE event_type = 'usage.recorded'
      AND data->>'meter' = ${meter}`
    expect(events).toHaveLength(1)
  })

layer(IdentityHttp, OPTIONS)("usage over HTTP", (it) => {
  describe("POST /v1/usage", () => {
    it.effect("records a usage event: 201, the record with the period it falls in, an event in the log", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const sub = yield* subscriptionReadModelFixture()
        const meter = sub.usage?.meter ?? ""
        const at = new Date(Date.now() - HOUR)
        const r = yield* postUsage(token, {
          subscriptionId: sub.id,
          meter,
          value: 2.5,
          timestamp: at.toISOString(),
          identifier: "evt-1",
          properties: { region: "eu" }
        })
        expect(r.status, r.text).toBe(201)
        expect(r.headers["idempotent-replayed"]).toBeUndefined()
        expect(r.body).toMatchObject({
          object: "usage_record",
          subscriptionId: sub.id,
          customerId: sub.customerId,
          meter,
          identifier: "evt-1",
          value: 2.5,
          timestamp: at.toISOString(),
          properties: { region: "eu" },
          periodStart: sub.periodStart.toISOString(),
          periodEnd: sub.periodEnd.toISOString()
        })
        expect(r.body.id).toMatch(/^ue_/)
        const sql = yield* SqlClient.SqlClient
        const events = yield* sql<{
          readonly data: { readonly recordId: string }
        }>`SELECT data FROM event_store.events
          WHERE event_type = 'usage.recorded' AND data->>'recordId' = ${r.body.id}`
        expect(events).toHaveLength(1)

        // value defaults to 1, timestamp to now.
        const d = yield* recordUsage(token, { subscriptionId: sub.id, meter, identifier: "evt-2" })
        expect(d.value).toBe(1)
        expect(Math.abs(new Date(d.timestamp).getTime() - Date.now())).toBeLessThan(60_000)
      })
    )

    it.effect(
      "the same identifier again: 200, the original record, Idempotent-Replayed; another value: 409",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const sub = yield* subscriptionReadModelFixture()
          const meter = sub.usage?.meter ?? ""
          const first = yield* recordUsage(token, {
            subscriptionId: sub.id,
            meter,
            value: 3,
            identifier: "dup"
          })
          const again = yield* postUsage(token, {
            subscriptionId: sub.id,
            meter,
            value: 3,
            identifier: "dup"
          })
          expect(again.status, again.text).toBe(200)
          expect(again.headers["idempotent-replayed"]).toBe("true")
          expect(again.body).toEqual(first)
          const other = yield* postUsage(token, {
            subscriptionId: sub.id,
            meter,
            value: 4,
            identifier: "dup"
          })
          expectError(other, 409, "usage_identifier_conflict", "identifier")
          expect(yield* writtenFor(meter)).toEqual({ records: 1, hourly: 1 })
          const summary = yield* getSummary(token, { subscriptionId: sub.id })
          expect(summary.body).toMatchObject({ quantity: 3, eventCount: 1 })
        })
    )

    it.effect("50 concurrent posts of one identifier: one record, the others 200 replays of it", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const sub = yield* subscriptionReadModelFixture()
        const meter = sub.usage?.meter ?? ""
        const replies = yield* Effect.all(
          Array.from({ length: 50 }, () =>
            postUsage(token, { subscriptionId: sub.id, meter, value: 7, identifier: "storm" })
          ),
          { concurrency: "unbounded" }
        )
        yield* expectOneRecord(replies, meter)
      })
    )

    it.effect(
      "50 concurrent posts of one identifier, half with idempotency keys (each its own transaction): one record",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const sub = yield* subscriptionReadModelFixture()
          const meter = sub.usage?.meter ?? ""
          const json = { subscriptionId: sub.id, meter, value: 4, identifier: "keyed-storm" }
          // A keyed post writes in its request's own transaction, apart from the grouped ones: the
          // record's key (meter, identifier) decides between the writes, and the losers run again.
          const replies = yield* Effect.all(
            Array.from({ length: 50 }, (_, i) =>
              i % 2 === 0
                ? postUsage(token, json)
                : call("POST", "/v1/usage", {
                    token,
                    json,
                    headers: { "idempotency-key": `keyed-storm-${i}` }
                  })
            ),
            { concurrency: "unbounded" }
          )
          yield* expectOneRecord(replies, meter)
        })
    )

    it.effect(
      "concurrent single posts commit together, each refused or recorded on its own, each event with its own request's metadata",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const sub = yield* subscriptionReadModelFixture()
          const meter = sub.usage?.meter ?? ""
          const post = (i: number) =>
            postUsage(
              token,
              // Every tenth names a meter the price does not have: refused alone, in its group.
              i % 10 === 9
                ? { subscriptionId: sub.id, meter: "other_meter", value: 1, identifier: `group-${i}` }
                : { subscriptionId: sub.id, meter, value: 1 + (i % 3), identifier: `group-${i}` }
            )
          const replies = yield* Effect.all(
            Array.from({ length: 60 }, (_, i) => post(i)),
            { concurrency: "unbounded" }
          )
          replies.forEach((reply, i) => {
            if (i % 10 === 9) expectError(reply, 400, "parameter_invalid", "meter")
            else expect(reply.status, reply.text).toBe(201)
          })
          expect(yield* writtenFor(meter)).toMatchObject({ records: 54 })
          const sql = yield* SqlClient.SqlClient
          const events = yield* sql<{
            readonly identifier: string
            readonly requestId: string
            readonly transactionId: string
          }>`SELECT data->>'identifier' AS identifier, metadata->>'requestId' AS "requestId",
                    transaction_id::text AS "transactionId"
               FROM event_store.events
              WHERE event_type = 'usage.recorded' AND data->>'meter' = ${meter}`
          expect(events).toHaveLength(54)
          // Each record's event names the request that posted it (its Request-Id), not its group's first.
          const requestOf = new Map(replies.map((r, i) => [`group-${i}`, r.headers["request-id"]]))
          for (const e of events) expect(e.requestId).toBe(requestOf.get(e.identifier))
          // Posts that arrived while a group was being written were committed together.
          const perTransaction = new Map<string, number>()
          for (const e of events)
            perTransaction.set(e.transactionId, (perTransaction.get(e.transactionId) ?? 0) + 1)
          expect(Math.max(...perTransaction.values())).toBeGreaterThan(1)
          const summary = yield* getSummary(token, { subscriptionId: sub.id })
          const expected = Array.from({ length: 60 }, (_, i) => (i % 10 === 9 ? 0 : 1 + (i % 3))).reduce(
            (a, b) => a + b,
            0
          )
          expect(summary.body).toMatchObject({ quantity: expected, eventCount: 54 })
        })
    )

    it.effect("bad input: every 400 names its param and writes nothing", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const sub = yield* subscriptionReadModelFixture()
        const meter = sub.usage?.meter ?? ""
        const base = { subscriptionId: sub.id, meter, identifier: "bad" }
        const now = Date.now()
        const cases: ReadonlyArray<readonly [Record<string, unknown>, string, string]> = [
          [{ ...base, value: -1 }, "parameter_invalid", "value"],
          [{ ...base, value: "5" }, "parameter_invalid", "value"],
          [{ ...base, value: 1.1234567 }, "parameter_invalid", "value"],
          [{ ...base, value: 1e16 }, "parameter_invalid", "value"],
          // Decimals a JSON number cannot carry exactly at that size (it arrives as …234.566406).
          [{ ...base, value: Number.parseFloat("12345678901234.567") }, "parameter_invalid", "value"],
          [{ ...base, value: 2 ** 32 + 0.5 }, "parameter_invalid", "value"],
          [{ ...base, identifier: "x".repeat(256) }, "parameter_invalid", "identifier"],
          [{ ...base, identifier: "😀".repeat(256) }, "parameter_invalid", "identifier"],
          [{ ...base, identifier: "" }, "parameter_invalid", "identifier"],
          [{ subscriptionId: sub.id, meter }, "parameter_missing", "identifier"],
          [{ ...base, meter: undefined }, "parameter_missing", "meter"],
          [{ ...base, meter: "other_meter" }, "parameter_invalid", "meter"],
          [{ ...base, timestamp: "not a time" }, "parameter_invalid", "timestamp"],
          [
            { ...base, timestamp: new Date(now - 36 * DAY).toISOString() },
            "timestamp_out_of_range",
            "timestamp"
          ],
          [
            { ...base, timestamp: new Date(now + 10 * 60_000).toISOString() },
            "timestamp_out_of_range",
            "timestamp"
          ],
          [{ meter, identifier: "bad" }, "parameter_missing", "subscriptionId"],
          [{ ...base, customerId: sub.customerId }, "parameter_invalid", "subscriptionId"],
          [{ ...base, properties: "x" }, "parameter_invalid", "properties"],
          // Bounded as metadata (a counted value is indexed: an unbounded one failed in the database).
          [{ ...base, properties: { user: "u".repeat(5_000) } }, "parameter_invalid", "properties"],
          [
            { ...base, properties: Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`k${i}`, "v"])) },
            "parameter_invalid",
            "properties"
          ]
        ]
        for (const [json, code, param] of cases) {
          const r = yield* postUsage(token, json)
          expectError(r, 400, code, param)
        }
        // A timestamp before the subscription's current period, no earlier period open.
        const early = yield* postUsage(token, { ...base, timestamp: new Date(now - 11 * DAY).toISOString() })
        expectError(early, 400, "timestamp_out_of_range", "timestamp")
        expect(yield* writtenFor(meter)).toEqual({ records: 0, hourly: 0 })
        // 255 characters are counted as a reader counts them: 255 emoji (510 UTF-16 units) are taken.
        const emoji = yield* postUsage(token, { ...base, identifier: "😀".repeat(255) })
        expect(emoji.status, emoji.text).toBe(201)
        expect(emoji.body.identifier).toBe("😀".repeat(255))
      })
    )

    it.effect(
      "unknown subscription → 404; canceled → 409 subscription_not_active; licensed only → 400 meter",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const missing = yield* postUsage(token, {
            subscriptionId: "sub_01jd4x8m6ffq2b3n5r7t9v1w3y",
            meter: "m",
            identifier: "a"
          })
          expectError(missing, 404, "resource_missing", "subscriptionId")
          expectError(
            yield* postUsage(token, { subscriptionId: "nope", meter: "m", identifier: "a" }),
            404,
            "resource_missing"
          )
          const canceled = yield* subscriptionReadModelFixture({ status: "canceled" })
          const meter = canceled.usage?.meter ?? ""
          expectError(
            yield* postUsage(token, { subscriptionId: canceled.id, meter, identifier: "a" }),
            409,
            "subscription_not_active"
          )
          const licensed = yield* subscriptionReadModelFixture({ usage: null })
          expectError(
            yield* postUsage(token, { subscriptionId: licensed.id, meter: "m", identifier: "a" }),
            400,
            "parameter_invalid",
            "meter"
          )
          expect(yield* writtenFor(meter)).toEqual({ records: 0, hourly: 0 })
        })
    )

    it.effect("period_closed before usage_closed_before; the open previous period takes late usage", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const now = Date.now()
        const periodStart = new Date(now - 2 * DAY)
        const closedBefore = new Date(now - 32 * DAY)
        const sub = yield* subscriptionReadModelFixture({ periodStart, usageClosedBefore: closedBefore })
        const meter = sub.usage?.meter ?? ""
        const late = yield* recordUsage(token, {
          subscriptionId: sub.id,
          meter,
          identifier: "late",
          timestamp: new Date(now - 5 * DAY).toISOString()
        })
        expect(late.periodStart).toBe(closedBefore.toISOString())
        expect(late.periodEnd).toBe(periodStart.toISOString())
        // The renewal closes that period: usage before the new boundary is refused.
        yield* updateSubscriptionFixture(sub.id, { usageClosedBefore: periodStart })
        const closed = yield* postUsage(token, {
          subscriptionId: sub.id,
          meter,
          identifier: "too-late",
          timestamp: new Date(now - 5 * DAY).toISOString()
        })
        expectError(closed, 400, "period_closed", "timestamp")
        // Usage past the current period's end (its renewal not run yet) falls in the next period.
        const ending = yield* subscriptionReadModelFixture({
          periodStart: new Date(now - 30 * DAY),
          periodEnd: new Date(now - 60_000)
        })
        const next = yield* recordUsage(token, {
          subscriptionId: ending.id,
          meter: ending.usage?.meter,
          identifier: "n"
        })
        expect(next.periodStart).toBe(new Date(now - 60_000).toISOString())
        expect(next.periodEnd).toBeNull()
      })
    )

    it.effect(
      "customerId resolves to the customer's one metered subscription; none or several → 400/404",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const sub = yield* subscriptionReadModelFixture()
          yield* subscriptionReadModelFixture({ customerId: sub.customerId, usage: null })
          yield* subscriptionReadModelFixture({ customerId: sub.customerId, status: "canceled" })
          const meter = sub.usage?.meter ?? ""
          const r = yield* recordUsage(token, { customerId: sub.customerId, meter, identifier: "c1" })
          expect(r.subscriptionId).toBe(sub.id)
          yield* subscriptionReadModelFixture({ customerId: sub.customerId })
          expectError(
            yield* postUsage(token, { customerId: sub.customerId, meter, identifier: "c2" }),
            400,
            "parameter_invalid",
            "customerId"
          )
          expectError(
            yield* postUsage(token, {
              customerId: "cus_01jd4x8m6ffq2b3n5r7t9v1w3y",
              meter,
              identifier: "c3"
            }),
            404,
            "resource_missing",
            "customerId"
          )
        })
    )

    it.effect("who may record: write:usage API keys and staff; shoppers and read-only keys get 403", () =>
      Effect.gen(function* () {
        const shopper = yield* registeredShopper()
        const sub = yield* subscriptionReadModelFixture({ customerId: shopper.customerId })
        const meter = sub.usage?.meter ?? ""
        const json = { subscriptionId: sub.id, meter, identifier: "k1" }
        expectError(yield* postUsage(shopper.accessToken, json), 403, "insufficient_scope")
        const reader = yield* apiKeyWith(["read:usage"])
        expectError(yield* postUsage(reader.key, json), 403, "insufficient_scope")
        const writer = yield* apiKeyWith(["write:usage"])
        const r = yield* postUsage(writer.key, json)
        expect(r.status, r.text).toBe(201)
      })
    )
  })

  describe("POST /v1/usage/batch", () => {
    it.effect(
      "each record on its own: created, replayed, refused — in order, nothing of a refused one written",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const sub = yield* subscriptionReadModelFixture()
          const meter = sub.usage?.meter ?? ""
          yield* recordUsage(token, { subscriptionId: sub.id, meter, identifier: "old", value: 5 })
          const r = yield* call("POST", "/v1/usage/batch", {
            token,
            json: {
              records: [
                { subscriptionId: sub.id, meter, identifier: "b1", value: 1 },
                { subscriptionId: sub.id, meter, identifier: "old", value: 5 },
                { subscriptionId: sub.id, meter, identifier: "old", value: 6 },
                { subscriptionId: sub.id, meter, identifier: "b2", value: -1 },
                { subscriptionId: sub.id, meter: "wrong", identifier: "b3" },
                { subscriptionId: "sub_01jd4x8m6ffq2b3n5r7t9v1w3y", meter, identifier: "b4" },
                { subscriptionId: sub.id, meter, identifier: "b5", value: 2 },
                { subscriptionId: sub.id, meter, identifier: "b5", value: 2 },
                { subscriptionId: sub.id, meter, identifier: "b5", value: 3 },
                "not an object"
              ]
            }
          })
          expect(r.status, r.text).toBe(200)
          expect(r.body).toMatchObject({ object: "usage_batch", created: 2, replayed: 2, failed: 6 })
          const results = r.body.results as ReadonlyArray<{
            index: number
            status: number
            record?: { id: string; identifier: string; object: string; value: number }
            error?: { code: string; param?: string }
          }>
          expect(results.map((x) => x.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
          expect(results.map((x) => x.status)).toEqual([201, 200, 409, 400, 400, 404, 201, 200, 409, 400])
          expect(results[0]?.record).toMatchObject({ object: "usage_record", identifier: "b1" })
          expect(results[1]?.record).toMatchObject({ identifier: "old", value: 5 })
          expect(results[2]?.error).toMatchObject({ code: "usage_identifier_conflict" })
          expect(results[3]?.error).toMatchObject({ code: "parameter_invalid", param: "value" })
          expect(results[4]?.error).toMatchObject({ code: "parameter_invalid", param: "meter" })
          expect(results[5]?.error).toMatchObject({ code: "resource_missing" })
          expect(results[7]?.record?.id).toBe(results[6]?.record?.id)
          expect(yield* writtenFor(meter)).toMatchObject({ records: 3 })
          const summary = yield* getSummary(token, { subscriptionId: sub.id })
          expect(summary.body).toMatchObject({ quantity: 8, eventCount: 3 })
        })
    )

    it.effect("1,000 records at most (more → 400, nothing written); shoppers may not", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const sub = yield* subscriptionReadModelFixture()
        const meter = sub.usage?.meter ?? ""
        const records = (n: number) =>
          Array.from({ length: n }, (_, i) => ({
            subscriptionId: sub.id,
            meter,
            identifier: `r${i}`,
            value: i % 7
          }))
        expectError(
          yield* call("POST", "/v1/usage/batch", { token, json: { records: records(1001) } }),
          400,
          "parameter_invalid",
          "records"
        )
        expect(yield* writtenFor(meter)).toEqual({ records: 0, hourly: 0 })
        const ok = yield* call("POST", "/v1/usage/batch", { token, json: { records: records(1000) } })
        expect(ok.status, ok.text).toBe(200)
        expect(ok.body).toMatchObject({ created: 1000, replayed: 0, failed: 0 })
        const expected = Array.from({ length: 1000 }, (_, i) => i % 7).reduce((a, b) => a + b, 0)
        const summary = yield* getSummary(token, { subscriptionId: sub.id })
        expect(summary.body).toMatchObject({ quantity: expected, eventCount: 1000 })
        const shopper = yield* registeredShopper()
        expectError(
          yield* call("POST", "/v1/usage/batch", {
            token: shopper.accessToken,
            json: { records: records(1) }
          }),
          403,
          "insufficient_scope"
        )
      })
    )
  })

  describe("GET /v1/usage", () => {
    it.effect("the summary of the current period: quantity, included and billable units, estimate", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const meter = uniqueMeter()
        const sub = yield* subscriptionReadModelFixture({
          usage: sumPrice(meter, { includedUnits: 10, unitAmount: 3 }),
          currency: "EUR"
        })
        yield* recordUsage(token, { subscriptionId: sub.id, meter, identifier: "a", value: 12.5 })
        yield* recordUsage(token, { subscriptionId: sub.id, meter, identifier: "b", value: 0.25 })
        const r = yield* getSummary(token, { subscriptionId: sub.id })
        expect(r.status, r.text).toBe(200)
        expect(r.body).toEqual({
          object: "usage_summary",
          subscriptionId: sub.id,
          customerId: sub.customerId,
          meter,
          aggregation: "sum",
          periodStart: sub.periodStart.toISOString(),
          periodEnd: sub.periodEnd.toISOString(),
          quantity: 12.75,
          includedUnits: 10,
          billableUnits: 2.75,
          unitAmount: 3,
          estimatedAmount: 8,
          currency: "EUR",
          eventCount: 2,
          asOf: expect.any(String)
        })
        expectError(
          yield* getSummary(token, { subscriptionId: sub.id, meter: "other" }),
          400,
          "parameter_invalid",
          "meter"
        )
        // By customer, as POST /v1/usage resolves it: their one metered subscription that is not canceled.
        const byCustomer = yield* getSummary(token, { customerId: sub.customerId })
        expect(byCustomer.status, byCustomer.text).toBe(200)
        expect(byCustomer.body).toEqual({ ...r.body, asOf: expect.any(String) })
        yield* subscriptionReadModelFixture({ customerId: sub.customerId, status: "canceled" })
        expect((yield* getSummary(token, { customerId: sub.customerId })).body.subscriptionId).toBe(sub.id)
        yield* subscriptionReadModelFixture({ customerId: sub.customerId })
        expectError(
          yield* getSummary(token, { customerId: sub.customerId }),
          400,
          "parameter_invalid",
          "customerId"
        )
        expectError(
          yield* getSummary(token, { customerId: "cus_01jd4x8m6ffq2b3n5r7t9v1w3y" }),
          404,
          "resource_missing",
          "customerId"
        )
        // One of the two, not none (missing) nor both (invalid).
        expectError(yield* getSummary(token, {}), 400, "parameter_missing", "subscriptionId")
        expectError(
          yield* getSummary(token, { subscriptionId: sub.id, customerId: sub.customerId }),
          400,
          "parameter_invalid",
          "subscriptionId"
        )
        expectError(
          yield* getSummary(token, { subscriptionId: "sub_01jd4x8m6ffq2b3n5r7t9v1w3y" }),
          404,
          "resource_missing"
        )
        expectError(
          yield* getSummary(token, { subscriptionId: sub.id, from: "2026-02-01", to: "2026-01-01" }),
          400,
          "parameter_invalid",
          "to"
        )
        expectError(
          yield* getSummary(token, {
            subscriptionId: sub.id,
            from: "2020-01-01",
            to: "2026-01-01",
            groupBy: "hour"
          }),
          400,
          "parameter_invalid",
          "groupBy"
        )
      })
    )

    it.effect("groupBy hour and day: UTC buckets clipped to [from, to), empty ones included", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const meter = uniqueMeter()
        const now = Date.now()
        const dayStart = Math.floor(now / DAY) * DAY
        const sub = yield* subscriptionReadModelFixture({
          usage: sumPrice(meter),
          periodStart: new Date(dayStart - 20 * DAY),
          periodEnd: new Date(dayStart + 10 * DAY)
        })
        const base = dayStart - 3 * DAY
        const at = (ms: number) => new Date(base + ms).toISOString()
        const records = [
          { t: 30 * 60_000, v: 1 }, // day 0, hour 0
          { t: 90 * 60_000, v: 2 }, // day 0, hour 1
          { t: 95 * 60_000, v: 3 }, // day 0, hour 1
          { t: DAY + 5 * HOUR, v: 4 }, // day 1
          { t: 2 * DAY + 23 * HOUR + 59 * 60_000, v: 5 } // day 2, last minute
        ]
        const batch = yield* call("POST", "/v1/usage/batch", {
          token,
          json: {
            records: records.map((r, i) => ({
              subscriptionId: sub.id,
              meter,
              identifier: `g${i}`,
              value: r.v,
              timestamp: at(r.t)
            }))
          }
        })
        expect(batch.body.created).toBe(5)
        const days = yield* getSummary(token, {
          subscriptionId: sub.id,
          from: at(15 * 60_000),
          to: at(3 * DAY),
          groupBy: "day"
        })
        expect(days.status, days.text).toBe(200)
        expect(days.body.quantity).toBe(15)
        expect(days.body.buckets).toEqual([
          { start: at(15 * 60_000), end: at(DAY), quantity: 6, eventCount: 3 },
          { start: at(DAY), end: at(2 * DAY), quantity: 4, eventCount: 1 },
          { start: at(2 * DAY), end: at(3 * DAY), quantity: 5, eventCount: 1 }
        ])
        const hours = yield* getSummary(token, {
          subscriptionId: sub.id,
          from: at(45 * 60_000),
          to: at(3 * HOUR),
          groupBy: "hour"
        })
        expect(hours.body.buckets).toEqual([
          { start: at(45 * 60_000), end: at(HOUR), quantity: 0, eventCount: 0 },
          { start: at(HOUR), end: at(2 * HOUR), quantity: 5, eventCount: 2 },
          { start: at(2 * HOUR), end: at(3 * HOUR), quantity: 0, eventCount: 0 }
        ])
        expect(hours.body.quantity).toBe(5)
        // No groupBy: no buckets.
        const plain = yield* getSummary(token, { subscriptionId: sub.id, from: at(0), to: at(3 * DAY) })
        expect(plain.body.buckets).toBeUndefined()
        expect(plain.body.quantity).toBe(15)
      })
    )

    it.effect("shoppers read their own subscriptions' usage; another's is 404; staff need read:usage", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const shopper = yield* registeredShopper()
        const own = yield* subscriptionReadModelFixture({ customerId: shopper.customerId })
        const other = yield* subscriptionReadModelFixture()
        yield* recordUsage(token, {
          subscriptionId: own.id,
          meter: own.usage?.meter,
          identifier: "s1",
          value: 4
        })
        const mine = yield* getSummary(shopper.accessToken, { subscriptionId: own.id })
        expect(mine.status, mine.text).toBe(200)
        expect(mine.body.quantity).toBe(4)
        expectError(
          yield* getSummary(shopper.accessToken, { subscriptionId: other.id }),
          404,
          "resource_missing"
        )
        // By customer: a shopper names themselves; another customer is 404.
        const byCustomer = yield* getSummary(shopper.accessToken, { customerId: shopper.customerId })
        expect(byCustomer.status, byCustomer.text).toBe(200)
        expect(byCustomer.body).toMatchObject({ subscriptionId: own.id, quantity: 4 })
        expectError(
          yield* getSummary(shopper.accessToken, { customerId: other.customerId }),
          404,
          "resource_missing",
          "customerId"
        )
        const writer = yield* apiKeyWith(["write:usage"])
        expectError(yield* getSummary(writer.key, { subscriptionId: own.id }), 403, "insufficient_scope")
        const reader = yield* apiKeyWith(["read:usage"])
        expect((yield* getSummary(reader.key, { subscriptionId: other.id })).status).toBe(200)
      })
    )
  })
})
