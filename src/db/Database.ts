/**
 * The database: `DATABASE_URL` → a PostgreSQL pool; no `DATABASE_URL` → embedded PostgreSQL (PGlite)
 * served in-process over pglite-socket. Both are reached through the very same `@effect/sql-pg`
 * client, so there is one SQL dialect and one code path.
 */
import { mkdirSync } from "node:fs"
import type { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { PgClient } from "@effect/sql-pg"
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { Context, Effect, Layer, Option, type Redacted } from "effect"
import pg from "pg"
import { AppConfig, isMemoryDataDir } from "../config.js"

export interface DatabaseInfoShape {
  readonly kind: "postgres" | "embedded"
  /** Embedded data directory (`memory://` for throw-away); none for an external server. */
  readonly dataDir: Option.Option<string>
  /** True when the database keeps nothing across restarts. */
  readonly ephemeral: boolean
}

export class DatabaseInfo extends Context.Tag("DatabaseInfo")<DatabaseInfo, DatabaseInfoShape>() {}

/**
 * int8 → number: every bigint we store (positions, versions, minor-unit amounts) stays far below
 * 2^53; a value that does not fit is refused loudly rather than silently rounded.
 */
const parseInt8 = (value: string): number => {
  const n = Number(value)
  if (!Number.isSafeInteger(n)) throw new RangeError(`int8 value ${value} exceeds Number.MAX_SAFE_INTEGER`)
  return n
}

export const pgTypes: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === pg.types.builtins.INT8 && format !== "binary"
      ? parseInt8
      : pg.types.getTypeParser(oid, format ?? "text")) as pg.CustomTypesConfig["getTypeParser"]
}

/** Client for an external PostgreSQL server. */
export const postgresLayer = (url: Redacted.Redacted<string>, maxConnections: number) =>
  Layer.merge(
    PgClient.layer({
      url,
      maxConnections,
      idleTimeout: "60 seconds",
      // A server that does not answer (not even a refusal) fails a request in 5 s, not never.
      connectTimeout: "5 seconds",
      applicationName: "commerce-platform",
      types: pgTypes
    }),
    Layer.succeed(DatabaseInfo, { kind: "postgres", dataDir: Option.none(), ephemeral: false })
  )

/**
 * Embedded PostgreSQL. PGlite is a single session, so the pool holds exactly one connection:
 * a transaction owns the database until it ends, which gives the same isolation guarantees our code
 * relies on (nothing depends on LISTEN/NOTIFY or session locks).
 */
export const embeddedLayer = (dataDir: string) =>
  Layer.unwrapScoped(
    Effect.gen(function* () {
      const ephemeral = isMemoryDataDir(dataDir)
      if (!ephemeral) mkdirSync(dataDir, { recursive: true })
      const db = yield* Effect.acquireRelease(
        Effect.tryPromise({
          // pg_trgm backs the customer search index (migration 0006), as on a PostgreSQL server.
          try: () => PGlite.create(ephemeral ? "memory://" : dataDir, { extensions: { pg_trgm } }),
          catch: (cause) =>
            new SqlError({ cause, message: `Failed to open embedded PostgreSQL at ${dataDir}` })
        }),
        (db) => Effect.promise(() => db.close()).pipe(Effect.ignore)
      )
      const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 1 })
      yield* Effect.acquireRelease(
        Effect.tryPromise({
          try: () => server.start(),
          catch: (cause) => new SqlError({ cause, message: "Failed to start the embedded PostgreSQL socket" })
        }),
        () => Effect.promise(() => server.stop()).pipe(Effect.ignore)
      )
      const port = listeningPort(server)
      yield* Effect.logDebug(`embedded PostgreSQL (${dataDir}) on 127.0.0.1:${port}`)
      return Layer.merge(
        PgClient.layer({
          host: "127.0.0.1",
          port,
          database: "postgres",
          username: "postgres",
          maxConnections: 1,
          idleTimeout: "1 hour",
          applicationName: "commerce-platform",
          types: pgTypes
        }),
        Layer.succeed(DatabaseInfo, { kind: "embedded", dataDir: Option.some(dataDir), ephemeral })
      )
    })
  )

const listeningPort = (server: PGLiteSocketServer): number => {
  // getServerConn() is "host:port" once listening.
  const conn = server.getServerConn()
  const port = Number(conn.slice(conn.lastIndexOf(":") + 1))
  if (!Number.isInteger(port) || port <= 0) throw new Error(`unexpected embedded server address ${conn}`)
  return port
}

/** The database chosen by configuration. */
export const DatabaseLive: Layer.Layer<
  PgClient.PgClient | SqlClient.SqlClient | DatabaseInfo,
  SqlError,
  AppConfig
> = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) =>
    Option.match(config.databaseUrl, {
      onSome: (url) => postgresLayer(url, config.databaseMaxConnections),
      onNone: () => embeddedLayer(config.pgliteDataDir)
    })
  )
)
