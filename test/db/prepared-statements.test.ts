/**
 * Named statements on an external PostgreSQL server (src/db/PreparedStatements.ts): a parameterized
 * statement is prepared once per connection and reused; a table swapped under it (a projection
 * rebuild) is found again by name; a result-type change fails one call, after which the text is
 * prepared afresh; texts beyond the limit, DDL and statements without parameters run unnamed; and
 * `DATABASE_PREPARED_STATEMENTS=false` names nothing.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option, Redacted } from "effect"
import { postgresLayer } from "../../src/db/Database.js"
import { preparingClient } from "../../src/db/PreparedStatements.js"
import { scopedDatabaseUrl, usingRealPostgres } from "../support/database.js"

/** One connection, so every statement runs in the session whose prepared statements we read. */
const client = (prepared: boolean) =>
  Layer.unwrapScoped(
    Effect.map(scopedDatabaseUrl, (url) => postgresLayer(Redacted.make(Option.getOrThrow(url)), 1, prepared))
  )

const preparedStatements = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql<{ readonly statement: string }>`SELECT statement FROM pg_prepared_statements ORDER BY prepare_time`
)

describe.skipIf(!usingRealPostgres)("named statements on a PostgreSQL server", () => {
  it.scoped(
    "prepares a parameterized statement once and reuses it; DDL and parameterless SQL stay unnamed",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL)`
        for (let i = 1; i <= 5; i++) yield* sql`INSERT INTO items (id, name) VALUES (${i}, ${`item ${i}`})`
        const rows = yield* sql<{ readonly name: string }>`SELECT name FROM items WHERE id = ${3}`
        expect(rows).toEqual([{ name: "item 3" }])
        yield* sql`SELECT count(*) FROM items`
        const statements = (yield* preparedStatements).map((r) => r.statement)
        // One INSERT prepared for five calls, one SELECT; the CREATE and the parameterless count are not.
        expect(statements.filter((s) => s.startsWith("INSERT INTO items"))).toHaveLength(1)
        expect(statements.filter((s) => s.startsWith("SELECT name FROM items"))).toHaveLength(1)
        expect(statements.some((s) => s.startsWith("CREATE") || s.includes("count(*)"))).toBe(false)
      }).pipe(Effect.provide(client(true)))
  )

  it.scoped("finds a table swapped under a prepared statement by its name again (projection rebuilds)", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE swapped (id int PRIMARY KEY, label text NOT NULL)`
      yield* sql`INSERT INTO swapped VALUES (1, 'old')`
      const read = sql<{ readonly label: string }>`SELECT label FROM swapped WHERE id = ${1}`
      expect(yield* read).toEqual([{ label: "old" }])
      // What Rebuild.ts does: a shadow table like the live one, filled, then renamed into place.
      yield* sql`CREATE TABLE swapped_next (LIKE swapped INCLUDING ALL)`
      yield* sql`INSERT INTO swapped_next VALUES (1, 'new')`
      yield* sql`ALTER TABLE swapped RENAME TO swapped_old`
      yield* sql`ALTER TABLE swapped_next RENAME TO swapped`
      yield* sql`DROP TABLE swapped_old`
      expect(yield* read).toEqual([{ label: "new" }])
    }).pipe(Effect.provide(client(true)))
  )

  it.scoped("after a result-type change one call fails and the next prepares the text afresh", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE widened (id int PRIMARY KEY)`
      yield* sql`INSERT INTO widened VALUES (1)`
      const read = sql`SELECT * FROM widened WHERE id = ${1}`
      expect(yield* read).toEqual([{ id: 1 }])
      yield* sql`ALTER TABLE widened ADD COLUMN extra text NOT NULL DEFAULT 'x'`
      const failed = yield* Effect.either(read)
      expect(failed._tag).toBe("Left")
      expect(yield* read).toEqual([{ id: 1, extra: "x" }])
    }).pipe(Effect.provide(client(true)))
  )

  it.scoped("texts beyond the limit run unnamed", () =>
    Effect.gen(function* () {
      const url = Option.getOrThrow(yield* scopedDatabaseUrl)
      const Client = preparingClient(2)
      const connection = new Client({ connectionString: url })
      yield* Effect.acquireRelease(
        Effect.promise(() => connection.connect()),
        () => Effect.promise(() => connection.end())
      )
      for (let i = 1; i <= 4; i++) {
        const result = yield* Effect.promise(
          () =>
            new Promise<unknown>((resolve, reject) =>
              connection.query(`SELECT $1::int + ${i} AS n`, [i], (error: Error | null, value: unknown) =>
                error === null ? resolve(value) : reject(error)
              )
            )
        )
        expect(result).toMatchObject({ rows: [{ n: 2 * i }] })
      }
      const { rows } = yield* Effect.promise(() =>
        connection.query<{ readonly statement: string }>("SELECT statement FROM pg_prepared_statements")
      )
      expect(rows.map((r) => r.statement).sort()).toEqual([
        "SELECT $1::int + 1 AS n",
        "SELECT $1::int + 2 AS n"
      ])
    })
  )

  it.scoped("names nothing when turned off", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE plain (id int PRIMARY KEY)`
      yield* sql`INSERT INTO plain VALUES (${1})`
      expect(yield* sql`SELECT id FROM plain WHERE id = ${1}`).toEqual([{ id: 1 }])
      expect(yield* preparedStatements).toEqual([])
    }).pipe(Effect.provide(client(false)))
  )
})
