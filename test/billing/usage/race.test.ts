/**
 * Two writes of one identifier that both looked before either committed (events.ts: the usage read
 * model's key, not a stream, makes an identifier record once). The second's insert of the record's
 * row waits for the first on its key; when the first commits, the second's transaction fails as a
 * lost race (`ReadModelKeyConflict`, migration 0028) and runs again, now finding the record: the
 * same identifier with another value is a 409, its other records are written, and the log holds
 * one event of the identifier. And writes sharing many identifiers, in opposite orders, at once:
 * records are inserted in key order (projection.ts), so they wait on each other's keys in one order
 * — never crosswise, a deadlock PostgreSQL would break by failing one. PostgreSQL only: PGlite has
 * one connection.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Schedule } from "effect"
import { Usage } from "../../../src/billing/usage/Usage.js"
import type { AuthenticatedActor } from "../../../src/http/Auth.js"
import { adminToken } from "../../support/customers.js"
import { usingRealPostgres } from "../../support/database.js"
import { call, IdentityHttp } from "../../support/identity.js"
import { getSummary, subscriptionReadModelFixture, writtenFor } from "./fixtures.js"

const ACTOR: AuthenticatedActor = { type: "system", id: "usage-race-test", scopes: new Set(["admin"]) }

describe.skipIf(!usingRealPostgres)("two writes of one identifier racing (PostgreSQL)", () => {
  layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("", (it) => {
    it.effect(
      "the second waits on the record's key, loses, runs again: 409 for that record, the rest written",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const sql = yield* SqlClient.SqlClient
          const usage = yield* Usage
          const sub = yield* subscriptionReadModelFixture()
          const meter = sub.usage?.meter ?? ""

          // The first write, its transaction held open after the append and projection.
          const written = yield* Deferred.make<void>()
          const release = yield* Deferred.make<void>()
          const first = yield* Effect.fork(
            sql.withTransaction(
              Effect.gen(function* () {
                const result = yield* usage.recordBatch(ACTOR, {
                  records: [{ subscriptionId: sub.id, meter, identifier: "raced", value: 1 }]
                })
                yield* Deferred.succeed(written, undefined)
                yield* Deferred.await(release)
                return result
              })
            )
          )
          yield* Deferred.await(written)

          // The second looks (the first's record is not committed: not seen) and inserts.
          const second = yield* Effect.fork(
            call("POST", "/v1/usage/batch", {
              token,
              json: {
                records: [
                  { subscriptionId: sub.id, meter, identifier: "raced", value: 2 },
                  { subscriptionId: sub.id, meter, identifier: "bystander", value: 3 }
                ]
              }
            })
          )
          // It waits on the first's key (a lock wait of a backend of this database).
          yield* sql<{ readonly waiting: number }>`SELECT count(*)::int AS waiting FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'`.pipe(
            Effect.flatMap(([row]) =>
              (row?.waiting ?? 0) > 0 ? Effect.void : Effect.fail("not waiting yet" as const)
            ),
            Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo("10 seconds")))
          )
          yield* Deferred.succeed(release, undefined)

          const firstResult = yield* Fiber.join(first)
          expect(firstResult).toMatchObject({ created: 1, failed: 0 })
          const reply = yield* Fiber.join(second)
          expect(reply.status, reply.text).toBe(200)
          expect(reply.body).toMatchObject({ created: 1, replayed: 0, failed: 1 })
          const results = reply.body.results as ReadonlyArray<{
            readonly status: number
            readonly error?: { readonly code: string; readonly param?: string }
            readonly record?: { readonly identifier: string }
          }>
          expect(results.map((r) => r.status)).toEqual([409, 201])
          expect(results[0]?.error).toMatchObject({ code: "usage_identifier_conflict", param: "identifier" })
          expect(results[1]?.record).toMatchObject({ identifier: "bystander" })

          expect(yield* writtenFor(meter)).toMatchObject({ records: 2 })
          const events = yield* sql<{ readonly identifier: string; readonly value: number }>`
            SELECT data->>'identifier' AS identifier, (data->>'value')::float8 AS value
              FROM event_store.events WHERE event_type = 'usage.recorded' AND data->>'meter' = ${meter}
             ORDER BY identifier`
          expect(events).toEqual([
            { identifier: "bystander", value: 3 },
            { identifier: "raced", value: 1 }
          ])
          const summary = yield* getSummary(token, { subscriptionId: sub.id })
          expect(summary.body).toMatchObject({ quantity: 4, eventCount: 2 })
        })
    )

    it.effect(
      "writes sharing many identifiers in opposite orders never deadlock: each identifier recorded once",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const sub = yield* subscriptionReadModelFixture()
          const meter = sub.usage?.meter ?? ""
          const records = Array.from({ length: 1000 }, (_, i) => ({
            subscriptionId: sub.id,
            meter,
            identifier: `shared-${i}`,
            value: 1
          }))
          // Rounds of four writes at once, two in each order, over fresh identifiers each round.
          for (let round = 0; round < 5; round++) {
            const inRound = records.map((r) => ({ ...r, identifier: `${r.identifier}-${round}` }))
            const replies = yield* Effect.all(
              [inRound, [...inRound].reverse(), inRound, [...inRound].reverse()].map((batch) =>
                call("POST", "/v1/usage/batch", { token, json: { records: batch } })
              ),
              { concurrency: "unbounded" }
            )
            for (const r of replies) expect(r.status, r.text).toBe(200)
            expect(replies.map((r) => r.body.created).reduce((a, b) => Number(a) + Number(b), 0)).toBe(1000)
          }
          expect(yield* writtenFor(meter)).toMatchObject({ records: 5000 })
        })
    )
  })
})
