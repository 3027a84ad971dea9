/**
 * A statement whose fiber is interrupted (a client that hung up, a timeout) runs to its end on its
 * connection, and the connection serves nobody else until it has (src/db/InterruptedStatements.ts):
 *
 * - `@effect/sql-pg` would cancel it with `pg_cancel_backend(<pid>)` sent over another connection.
 *   When the statement had already finished, that cancel landed on whatever the backend ran next —
 *   another request's statement, or the ROLLBACK of the interrupted transaction.
 * - Inside a transaction the cancel needed a second connection; with one (embedded PGlite) or a
 *   pool in use it waited for it, up to 5 s, while the transaction kept its connection.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Layer, Option, Redacted } from "effect"
import { embeddedLayer, postgresLayer } from "../../src/db/Database.js"
import { scopedDatabaseUrl, usingRealPostgres } from "../support/database.js"

/** A pool of `connections` on the test's database: a fresh PostgreSQL database, or in-memory PGlite. */
const database = (connections: number) =>
  Layer.unwrapScoped(
    Effect.map(scopedDatabaseUrl, (url) =>
      Option.match(url, {
        onNone: () => embeddedLayer("memory://"),
        onSome: (u) => postgresLayer(Redacted.make(u), connections)
      })
    )
  )

const rows = (sql: SqlClient.SqlClient, table: string) =>
  Effect.map(sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM ${sql(table)}`, (r) => r[0]?.n ?? 0)

/** Interrupts `statement` once it has been sent, and answers how long until the pool served again. */
const interruptMidway = (sql: SqlClient.SqlClient, statement: Effect.Effect<unknown, unknown>) =>
  Effect.gen(function* () {
    const fiber = yield* Effect.fork(statement)
    yield* Effect.sleep("100 millis")
    const started = Date.now()
    yield* Fiber.interrupt(fiber)
    yield* sql`SELECT 1`
    return Date.now() - started
  })

describe("an interrupted statement", () => {
  it.scopedLive(
    "runs to its end and then frees its connection, with no multi-second stall",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE marks (at timestamptz NOT NULL DEFAULT now())`
        const waited = yield* interruptMidway(
          sql,
          sql`INSERT INTO marks SELECT now() FROM (SELECT pg_sleep(0.4)) AS pause`
        )
        // The INSERT was not cancelled: its row is there.
        expect(yield* rows(sql, "marks")).toBe(1)
        // The connection came back when the statement ended (~0.3 s later).
        expect(waited).toBeLessThan(2_500)
      }).pipe(Effect.provide(database(1))),
    20_000
  )

  it.scopedLive(
    "inside a transaction: the statement ends, the ROLLBACK follows it, and the connection comes back clean",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE ledger (n int NOT NULL)`
        const waited = yield* interruptMidway(
          sql,
          sql.withTransaction(
            Effect.andThen(
              sql`INSERT INTO ledger SELECT 1 FROM (SELECT pg_sleep(0.4)) AS pause`,
              sql`INSERT INTO ledger VALUES (2)`
            )
          )
        )
        // Nothing of the interrupted transaction stays, and the one connection is not left inside it:
        // a statement after it commits on its own and is seen.
        yield* sql`INSERT INTO ledger VALUES (3)`
        expect(yield* sql<{ readonly n: number }>`SELECT n FROM ledger`).toEqual([{ n: 3 }])
        expect(
          yield* sql<{ readonly open: boolean }>`SELECT txid_current_if_assigned() IS NOT NULL AS open`
        ).toEqual([{ open: false }])
        // A cancel would have waited 5 s for the one connection, held by the very transaction it cancels.
        expect(waited).toBeLessThan(2_500)
      }).pipe(Effect.provide(database(1))),
    20_000
  )

  it.scopedLive.skipIf(!usingRealPostgres)(
    "never cancels another statement: interrupted and innocent statements racing on two connections",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        let innocentFailures = 0
        let innocentRuns = 0
        const deadline = Date.now() + 3_000
        // Interrupts land at every point of a short statement's life: before it is sent, while the
        // server runs it, and after its answer arrived but before the fiber took it.
        const interrupter = Effect.gen(function* () {
          let round = 0
          while (Date.now() < deadline) {
            round++
            const fiber = yield* Effect.fork(sql`SELECT pg_sleep(${(round % 5) / 10_000})`)
            if (round % 3 === 0) yield* Effect.yieldNow()
            else yield* Effect.sleep(Duration.micros(BigInt(round % 400)))
            yield* Fiber.interrupt(fiber)
          }
        })
        const innocent = Effect.gen(function* () {
          while (Date.now() < deadline) {
            innocentRuns++
            const result = yield* Effect.either(sql`SELECT 1 AS one`)
            if (result._tag === "Left") innocentFailures++
          }
        })
        yield* Effect.all([interrupter, innocent, innocent], { concurrency: "unbounded" })
        expect(innocentRuns).toBeGreaterThan(100)
        expect(innocentFailures).toBe(0)
      }).pipe(Effect.provide(database(2))),
    20_000
  )
})
