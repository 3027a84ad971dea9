/**
 * A fresh database per test file: a new database on the server named by `DATABASE_URL` (dropped
 * afterwards), or an in-memory embedded PostgreSQL when `DATABASE_URL` is not set.
 */
import { randomBytes } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Logger, LogLevel, Option, Redacted } from "effect"
import pg from "pg"
import { AppConfig, type AppConfigShape, makeAppConfig } from "../../src/config.js"
import { PersistenceLive } from "../../src/eventstore/layers.js"
import { TracingDisabled } from "../../src/observability/Tracing.js"

export const testDatabaseUrl = process.env.DATABASE_URL?.trim() ? process.env.DATABASE_URL.trim() : undefined
export const usingRealPostgres = testDatabaseUrl !== undefined

const withDatabase = (url: string, database: string) => {
  const u = new URL(url)
  u.pathname = `/${database}`
  return u.toString()
}

/** Creates a throw-away database; the scope drops it. */
export const scopedDatabaseUrl = Effect.gen(function* () {
  if (!testDatabaseUrl) return Option.none<string>()
  const name = `cp_test_${randomBytes(6).toString("hex")}`
  const admin = async <T>(f: (c: pg.Client) => Promise<T>) => {
    const client = new pg.Client({ connectionString: testDatabaseUrl })
    await client.connect()
    try {
      return await f(client)
    } finally {
      await client.end()
    }
  }
  yield* Effect.acquireRelease(
    Effect.promise(() => admin((c) => c.query(`CREATE DATABASE ${name}`))),
    () =>
      Effect.promise(() => admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))).pipe(
        Effect.ignore
      )
  )
  return Option.some(withDatabase(testDatabaseUrl, name))
})

export const testConfig = (overrides: Partial<AppConfigShape> = {}) =>
  Layer.scoped(
    AppConfig,
    Effect.map(scopedDatabaseUrl, (url) =>
      makeAppConfig({
        databaseUrl: Option.map(url, Redacted.make),
        databaseMaxConnections: 20,
        pgliteDataDir: "memory://",
        dataEncryptionKey: Option.some(Redacted.make(randomBytes(32).toString("hex"))),
        ...overrides
      })
    )
  )

/**
 * A fresh database's config, with logs quiet unless TEST_LOG_LEVEL=debug, and tracing off as the
 * service runs without OTEL_EXPORTER_OTLP_ENDPOINT (src/main.ts's TracingLive): the tests take the
 * paths production takes (no spans, statements straight on the transaction's connection, deferred
 * writes). test/http/tracing.test.ts covers the traced paths.
 */
export const TestConfig = testConfig().pipe(
  Layer.provideMerge(
    Logger.minimumLogLevel(process.env.TEST_LOG_LEVEL === "debug" ? LogLevel.Debug : LogLevel.Warning)
  ),
  Layer.provideMerge(TracingDisabled)
)

/** Migrated database + event store, on a fresh database. */
/**
 * Every row of a read-model table, ordered by `order` (trusted column names, `delivery_id, attempt`):
 * what a projection rebuild must reproduce.
 */
export const rowsOf = (table: string, order: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`SELECT * FROM ${sql(table)} ORDER BY ${sql.literal(order)}`
  )

export const TestPersistence = PersistenceLive.pipe(Layer.provideMerge(TestConfig))
