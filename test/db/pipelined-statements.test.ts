/**
 * Pipelined statements on an external PostgreSQL server (src/db/PipelinedStatements.ts): a
 * transaction's BEGIN travels with its first statement, and a deferred write (`deferInTransaction`)
 * with the next statement or the COMMIT. Round trips are counted on the wire (a simple Query or a
 * Sync each). The results must be those of sending each statement on its own: the same rows, the
 * same order, the same errors (one statement later), and a connection that comes back clean.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Option, Redacted } from "effect"
import { startCountingProxy } from "../../scripts/bench/pgwire.js"
import { postgresLayer } from "../../src/db/Database.js"
import { deferInTransaction, isUniqueViolation } from "../../src/db/Sql.js"
import { transaction } from "../../src/db/Transaction.js"
import { TracingDisabled } from "../../src/observability/Tracing.js"
import { scopedDatabaseUrl, usingRealPostgres } from "../support/database.js"

class Wire extends Context.Tag("test/PipelineWire")<
  Wire,
  { readonly roundTrips: () => number; readonly writes: () => number }
>() {}

/** One pooled connection behind a counting proxy, tracing off (as the service runs). */
const Database = Layer.unwrapScoped(
  Effect.gen(function* () {
    const url = Option.getOrThrow(yield* scopedDatabaseUrl)
    const upstream = new URL(url)
    const proxy = yield* Effect.acquireRelease(
      Effect.promise(() =>
        startCountingProxy({ host: upstream.hostname, port: Number(upstream.port || 5432) })
      ),
      (p) => Effect.promise(() => p.close())
    )
    return Layer.merge(
      postgresLayer(Redacted.make(proxy.urlFor(url)), 1, true),
      Layer.succeed(Wire, { roundTrips: proxy.roundTrips, writes: proxy.writes })
    )
  })
).pipe(Layer.provideMerge(TracingDisabled))

/** `effect`'s value and the round trips it took. */
const counted = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const wire = yield* Wire
    const before = wire.roundTrips()
    const value = yield* effect
    return { value, roundTrips: wire.roundTrips() - before }
  })

const setUp = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`CREATE TABLE IF NOT EXISTS piped (id int PRIMARY KEY, label text NOT NULL)`.pipe(
    Effect.zipRight(sql`TRUNCATE piped`)
  )
)

const insert = (id: number, label: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    deferInTransaction(sql`INSERT INTO piped (id, label) VALUES (${id}, ${label})`)
  )

const labels = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(sql<{ readonly label: string }>`SELECT label FROM piped ORDER BY id`, (rows) =>
    rows.map((r) => r.label)
  )
)

/** Whether the connection is outside any transaction (an aborted one would refuse the SELECT). */
const clean = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql<{ readonly open: boolean }>`SELECT txid_current_if_assigned() IS NOT NULL AS open`,
    (rows) => rows[0]?.open === false
  )
)

/**
 * `body` in a transaction once row 1 exists: it fails with the unique violation (a failure, not a
 * defect), only row 1 remains, and the connection is outside any transaction.
 */
const refusedAfterOne = <A, R>(body: Effect.Effect<A, SqlError, R>) =>
  Effect.gen(function* () {
    yield* setUp
    yield* transaction(insert(1, "one"))
    const failed = yield* Effect.flip(transaction(body))
    expect(isUniqueViolation(failed)).toBe(true)
    expect(yield* labels).toEqual(["one"])
    expect(yield* clean).toBe(true)
  })

describe.skipIf(!usingRealPostgres)("pipelined statements on a PostgreSQL server", () => {
  it.scoped("BEGIN travels with the first statement; a transaction that sends nothing costs nothing", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* setUp
      const read = yield* counted(transaction(sql`SELECT ${41}::int + 1 AS answer`))
      expect(read.value).toEqual([{ answer: 42 }])
      // [BEGIN, SELECT] then [COMMIT]: two round trips instead of three.
      expect(read.roundTrips).toBe(2)
      const empty = yield* counted(transaction(Effect.succeed("nothing")))
      expect(empty).toEqual({ value: "nothing", roundTrips: 0 })
      expect(yield* clean).toBe(true)
    }).pipe(Effect.provide(Database))
  )

  it.scoped("a deferred write travels with the COMMIT and is committed", () =>
    Effect.gen(function* () {
      yield* setUp
      const write = yield* counted(transaction(Effect.zipRight(insert(1, "one"), insert(2, "two"))))
      // BEGIN, both INSERTs and the COMMIT in one round trip.
      expect(write.roundTrips).toBe(1)
      expect(yield* labels).toEqual(["one", "two"])
    }).pipe(Effect.provide(Database))
  )

  it.scoped("a later statement of the transaction sees a deferred write; a ROLLBACK drops it", () =>
    Effect.gen(function* () {
      yield* setUp
      const seen = yield* transaction(Effect.zipRight(insert(1, "one"), labels))
      expect(seen).toEqual(["one"])
      const exit = yield* Effect.exit(
        transaction(
          Effect.zipRight(insert(2, "two"), Effect.zipRight(labels, Effect.fail("changed my mind")))
        )
      )
      expect(Exit.isFailure(exit)).toBe(true)
      expect(yield* labels).toEqual(["one"])
      expect(yield* clean).toBe(true)
    }).pipe(Effect.provide(Database))
  )

  it.scoped(
    "a deferred write's unique violation fails the transaction at its COMMIT; the connection comes back clean",
    () =>
      // A failure the caller can handle (Customers.create answers 409 to it), not a defect.
      refusedAfterOne(Effect.zipRight(insert(2, "two"), insert(1, "again"))).pipe(Effect.provide(Database))
  )

  it.scoped("a deferred write's error is the next statement's; nothing of the transaction remains", () =>
    refusedAfterOne(Effect.zipRight(insert(1, "again"), labels)).pipe(Effect.provide(Database))
  )

  it.scoped(
    "a deferred write refused ahead of a statement's first Parse leaves that statement preparable",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* setUp
        yield* transaction(insert(1, "one"))
        // Never sent on this connection before: its Parse travels behind the refused INSERT's
        // (also a first use), and the server skips it.
        const firstUse = sql<{
          readonly n: number
        }>`SELECT count(*)::int AS n FROM piped WHERE label <> ${"x"}`
        const failed = yield* Effect.flip(transaction(Effect.zipRight(insert(1, "again"), firstUse)))
        expect(isUniqueViolation(failed)).toBe(true)
        // The same statement on the same (only) connection: prepared now, not taken as prepared.
        expect(yield* transaction(firstUse)).toEqual([{ n: 1 }])
        expect(yield* firstUse).toEqual([{ n: 1 }])
        expect(yield* clean).toBe(true)
      }).pipe(Effect.provide(Database))
  )

  it.scoped("statements that fibers of one transaction send at once leave together, each answered", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const wire = yield* Wire
      yield* setUp
      yield* transaction(insert(1, "one"))
      const before = wire.writes()
      const answers = yield* transaction(
        Effect.forEach(
          Array.from({ length: 16 }, (_, i) => i),
          (i) =>
            Effect.map(
              sql<{ readonly n: number; readonly label: string }>`SELECT ${i}::int AS n, label FROM piped`,
              (rows) => rows.map((r) => `${r.n}:${r.label}`)
            ),
          { concurrency: "unbounded" }
        )
      )
      const writes = wire.writes() - before
      expect(answers).toEqual(Array.from({ length: 16 }, (_, i) => [`${i}:one`]))
      // BEGIN with the first SELECT (sent alone, at once), the 15 others in one write, then the
      // COMMIT; one at a time they took 17.
      expect(writes).toBeLessThanOrEqual(3)
      expect(yield* clean).toBe(true)
    }).pipe(Effect.provide(Database))
  )

  it.scoped(
    "one refused statement among fibers sent at once fails the transaction; nothing of it remains",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* setUp
        yield* transaction(insert(1, "one"))
        const failed = yield* Effect.flip(
          transaction(
            Effect.forEach(
              [2, 3, 1, 4, 5],
              (id) => sql`INSERT INTO piped (id, label) VALUES (${id}, ${`n${id}`})`,
              { concurrency: "unbounded" }
            )
          )
        )
        expect(isUniqueViolation(failed)).toBe(true)
        expect(yield* labels).toEqual(["one"])
        expect(yield* clean).toBe(true)
        // The connection serves the next transaction as usual.
        yield* transaction(insert(2, "two"))
        expect(yield* labels).toEqual(["one", "two"])
      }).pipe(Effect.provide(Database))
  )

  it.scoped("outside a transaction a deferred write runs where it stands", () =>
    Effect.gen(function* () {
      yield* setUp
      const write = yield* counted(insert(7, "seven"))
      expect(write.roundTrips).toBe(1)
      expect(yield* labels).toEqual(["seven"])
    }).pipe(Effect.provide(Database))
  )

  it.scoped("a deferred statement is prepared once per connection, and found again after DEALLOCATE", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* setUp
      for (let i = 1; i <= 3; i++) yield* transaction(insert(i, `n${i}`))
      const prepared = yield* sql<{
        readonly statement: string
      }>`SELECT statement FROM pg_prepared_statements`
      expect(prepared.filter((r) => r.statement.startsWith("INSERT INTO piped"))).toHaveLength(1)
      // Prepared statements gone under the client (a pooler's reset): one transaction fails, the next parses again.
      yield* sql.unsafe("DEALLOCATE ALL")
      const stale = yield* Effect.exit(transaction(insert(4, "n4")))
      const retried = Exit.isFailure(stale) ? yield* Effect.exit(transaction(insert(4, "n4"))) : stale
      expect(Exit.isSuccess(retried)).toBe(true)
      expect(yield* labels).toEqual(["n1", "n2", "n3", "n4"])
      expect(yield* clean).toBe(true)
    }).pipe(Effect.provide(Database))
  )
})
