/**
 * The database: `DATABASE_URL` → a PostgreSQL pool; no `DATABASE_URL` → embedded PostgreSQL (PGlite)
 * served in-process over a local socket (`EmbeddedServer.ts`). Both are reached through the very same `@effect/sql-pg`
 * client, so there is one SQL dialect and one code path.
 */
import { spawn } from "node:child_process"
import { existsSync, mkdirSync, openAsBlob, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { setFlagsFromString } from "node:v8"
import type { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { PgClient } from "@effect/sql-pg"
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { Context, Effect, Layer, Option, Redacted } from "effect"
import pg from "pg"
import { AppConfig, isMemoryDataDir } from "../config.js"
import { claimDataDir, type DataDirLocked } from "./DataDirLock.js"
import { startEmbeddedServer } from "./EmbeddedServer.js"
import { SettlingClient } from "./InterruptedStatements.js"
import { migrate } from "./Migrations.js"
import { preparingClient } from "./PreparedStatements.js"

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

/** Distinct statement texts a process names (prepares) at most; further texts run unnamed. */
const PREPARED_STATEMENT_LIMIT = 1000

/**
 * A `PgClient` over a pool we build ourselves (what `PgClient.layer` would make), so that every
 * connection is a `SettlingClient`: an interrupted statement runs to its end instead of being
 * cancelled by pid (InterruptedStatements.ts says why).
 */
const pooledClient = (config: pg.PoolConfig, info: DatabaseInfoShape) =>
  Layer.merge(
    PgClient.layerFromPool({
      acquire: Effect.acquireRelease(
        Effect.suspend(() => {
          const pool = new pg.Pool({
            Client: SettlingClient,
            ...config,
            application_name: "commerce-platform",
            types: pgTypes
          })
          // A connection's error reaches the query that uses it; the pool must not crash the process.
          pool.on("error", () => {})
          return Effect.tryPromise({
            try: () => pool.query("SELECT 1"),
            catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
          }).pipe(
            Effect.timeoutFail({
              duration: "5 seconds",
              onTimeout: () =>
                new SqlError({
                  cause: new Error("Connection timed out"),
                  message: "PgClient: Connection timed out"
                })
            }),
            Effect.tapError(() => Effect.promise(() => pool.end()).pipe(Effect.timeoutOption(1000))),
            Effect.as(pool)
          )
        }),
        (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(1000))
      ),
      applicationName: "commerce-platform",
      types: pgTypes
    }),
    Layer.succeed(DatabaseInfo, info)
  )

/**
 * Client for an external PostgreSQL server, with named statements unless `preparedStatements` is
 * false (PreparedStatements.ts says why and when not).
 */
export const postgresLayer = (url: Redacted.Redacted, maxConnections: number, preparedStatements = true) =>
  pooledClient(
    {
      connectionString: Redacted.value(url),
      max: maxConnections,
      idleTimeoutMillis: 60_000,
      // A server that does not answer (not even a refusal) fails a request in 5 s, not never.
      connectionTimeoutMillis: 5_000,
      // Statements that fibers sharing one transaction issue at once go out together, each answered
      // in order (InterruptedStatements.ts); one at a time they run exactly as without it.
      pipeline: true,
      ...(preparedStatements ? { Client: preparingClient(PREPARED_STATEMENT_LIMIT) } : {})
    },
    { kind: "postgres", dataDir: Option.none(), ephemeral: false }
  )

/**
 * How a process reaches an embedded data directory that another live process owns: the service
 * (`exclusive`, the default) refuses to start; scripts (`attach`) connect to the owner's socket and
 * work through it, so they never open a second PGlite on the same files.
 */
export type EmbeddedAccessMode = "exclusive" | "attach"

export class EmbeddedAccess extends Context.Reference<EmbeddedAccess>()("EmbeddedAccess", {
  defaultValue: (): EmbeddedAccessMode => "exclusive"
}) {}

/** For scripts: attach to the running service's embedded database when there is one. */
export const AttachToRunningService = Layer.succeed(EmbeddedAccess, "attach")

const embeddedClient = (port: number, info: DatabaseInfoShape) =>
  pooledClient(
    {
      host: "127.0.0.1",
      port,
      database: "postgres",
      user: "postgres",
      // PGlite is one session; one connection per process keeps a process from waiting on itself.
      max: 1,
      idleTimeoutMillis: 3_600_000
    },
    info
  )

/**
 * Embedded PostgreSQL. PGlite is a single session, so each process's pool holds exactly one
 * connection and the socket (`EmbeddedServer.ts`) lets one connection's statement or transaction
 * run at a time: a transaction owns the database until it ends, which gives the same isolation
 * guarantees our code relies on (nothing depends on LISTEN/NOTIFY or session locks).
 *
 * A data directory on disk belongs to one process (`DataDirLock.ts`). When a live process already
 * owns it, `exclusive` fails with `DataDirLocked` before PGlite is opened, and `attach` connects to
 * that process's socket instead. `memory://` is private to the process and needs no lock.
 */
export const embeddedLayer = (dataDir: string, access: EmbeddedAccessMode = "exclusive") =>
  Layer.unwrapScoped(
    Effect.gen(function* () {
      const ephemeral = isMemoryDataDir(dataDir)
      const info: DatabaseInfoShape = { kind: "embedded", dataDir: Option.some(dataDir), ephemeral }
      if (ephemeral) return embeddedClient(yield* serveEmbedded("memory://"), info)
      mkdirSync(dataDir, { recursive: true })
      const claim = yield* claimDataDir(dataDir, access)
      if (claim._tag === "Attach") {
        yield* Effect.logInfo(
          `embedded database ${dataDir} is served by process ${claim.holder.pid} (${claim.holder.command}); working through it on 127.0.0.1:${claim.port}`
        )
        return embeddedClient(claim.port, info)
      }
      const port = yield* serveEmbedded(dataDir)
      yield* claim.publish(port)
      return embeddedClient(port, info)
    })
  )

/**
 * A freshly initialised cluster, kept as a tar (`dumpDataDir`) beside the installed packages
 * (`node_modules/.cache/`, outside any data directory) and keyed by the PGlite version: a new data
 * directory is unpacked from it (`loadDataDir`, ~1 s of CPU) instead of running initdb (~4.5 s and a
 * second PGlite instance). The first fresh start of an installation writes it; where it cannot be
 * written (read-only install) every fresh start runs initdb, as before. Written aside and renamed,
 * so a reader never sees half a file.
 */
export const clusterTemplate = {
  /** The template's path, keyed by PGlite's version; none when that version cannot be read. */
  file: (): string | undefined => {
    const modules = fileURLToPath(new URL("../../node_modules/", import.meta.url))
    try {
      const manifest: unknown = JSON.parse(
        readFileSync(join(modules, "@electric-sql", "pglite", "package.json"), "utf8")
      )
      if (typeof manifest !== "object" || manifest === null || !("version" in manifest)) return undefined
      return join(modules, ".cache", "commerce-platform", `pglite-${String(manifest.version)}-initdb.tar`)
    } catch {
      return undefined
    }
  },
  /** File-backed (`openAsBlob`): the 40 MB are read once, by PGlite, not copied into a Buffer first. */
  read: async (file: string | undefined): Promise<Blob | undefined> => {
    if (file === undefined) return undefined
    try {
      return await openAsBlob(file)
    } catch {
      return undefined
    }
  },
  write: async (file: string | undefined, db: PGlite): Promise<void> => {
    if (file === undefined) return
    const temporary = `${file}.${process.pid}.tmp`
    try {
      const tar = new Uint8Array(await (await db.dumpDataDir("none")).arrayBuffer())
      mkdirSync(dirname(file), { recursive: true })
      writeFileSync(temporary, tar)
      renameSync(temporary, file)
    } catch {
      // A read-only installation keeps running initdb on fresh directories.
    } finally {
      rmSync(temporary, { force: true })
    }
  }
}

/** A data directory PGlite has not initialised yet (`memory://` always is one). */
const isFreshDataDir = (dataDir: string) =>
  isMemoryDataDir(dataDir) || !existsSync(join(dataDir, "PG_VERSION"))

/**
 * V8 tiers hot WASM functions up to TurboFan on its background threads, by default as many compile
 * tasks at once as it has threads. Each thread's malloc arena keeps what those compilations freed,
 * so the idle RSS kept ~60 MB more after the burst of a first start (template unpack, migrations)
 * and ~25 MB more after a warm one. One task compiles the same code, one function at a time. Read
 * when a compilation starts, so setting it just before PGlite compiles its module is enough.
 */
const limitWasmCompilationThreads = () => setFlagsFromString("--wasm-num-compilation-tasks=1")

/**
 * PGlite's default `shared_buffers` (128 MB) is resident from the start, used or not: ~70 MB of
 * the idle RSS go with halving it. Pages past it are read back from the OS page cache: on a 60 MB
 * table, point reads and updates cost the same and a full scan ~30% more CPU (scratch bench);
 * smaller values cost more (32 MB: point reads +8%, updates +15%, scans ×1.8).
 */
const EMBEDDED_START_PARAMS = [...PGlite.defaultStartParams, "-c", "shared_buffers=64MB"]

/**
 * Only the prebuilt bundle (`npm start`) can be imported by a plain `node` child; under tsx or
 * vitest a fresh directory is created in-process, as before.
 */
const childCanImportThisModule = import.meta.url.endsWith(".mjs")

/**
 * A fresh data directory is created (template unpack or initdb) and migrated in a short-lived
 * child process: the malloc arenas of the process that does it keep ~130 MB of what that work
 * freed (closing and reopening PGlite in-process returns none of it), so the service then opens it
 * as on a warm start. Resolves to what the child applied, which the service logs as its own
 * migrations would (none when the child failed: the service then does what is left itself, and
 * reports any error).
 */
const prepareInChild = (dataDir: string) =>
  Effect.async<AppliedInChild | undefined>((resume) => {
    // The child stops when its stdin closes, i.e. when the service is gone (killed): no orphan
    // keeps writing a directory whose lock was released.
    const script =
      `process.stdin.on("close", () => process.exit(1)).resume();` +
      `const { prepareEmbeddedDataDir } = await import(${JSON.stringify(import.meta.url)});` +
      `const applied = await prepareEmbeddedDataDir(${JSON.stringify(dataDir)});` +
      `process.stdout.write("\\n" + applied, () => process.exit(0))`
    const child = spawn(process.execPath, ["--input-type=module", "--eval", script], {
      stdio: ["pipe", "pipe", "ignore"]
    })
    let output = ""
    let done = false
    const finish = (applied: AppliedInChild | undefined) => {
      if (done) return
      done = true
      resume(Effect.succeed(applied))
    }
    child.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8")
    })
    child.on("error", () => finish(undefined))
    child.on("close", (code) => {
      const [current = "", ...migrations] = output.slice(output.lastIndexOf("\n") + 1).split(" ")
      const schema = Number(current)
      finish(code === 0 && Number.isSafeInteger(schema) ? { schema, migrations } : undefined)
    })
    // Interrupted (SIGTERM during the first start): the child finishes rather than leave a
    // half-unpacked cluster, as the unpack did in-process; the shutdown budget bounds the wait.
    return Effect.async<void>((resumeAfterExit) => {
      if (child.exitCode !== null || child.signalCode !== null) resumeAfterExit(Effect.void)
      else child.once("close", () => resumeAfterExit(Effect.void))
    })
  })

/** What the child applied: the schema's migration after it, and each `<id>_<name>` applied. */
interface AppliedInChild {
  readonly schema: number
  readonly migrations: ReadonlyArray<string>
}

/**
 * The child's work (`prepareInChild`): creates and migrates `dataDir`, then closes it. Resolves to
 * `<schema> <id>_<name> …` (names have no spaces). The service holds the directory's lock.
 */
export const prepareEmbeddedDataDir = (dataDir: string): Promise<string> =>
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const port = yield* serveEmbedded(dataDir, false)
        const info: DatabaseInfoShape = { kind: "embedded", dataDir: Option.some(dataDir), ephemeral: false }
        const report = yield* migrate().pipe(Effect.provide(embeddedClient(port, info)))
        return [report.current, ...report.applied.map((m) => `${m.id}_${m.name}`)].join(" ")
      })
    )
  )

/**
 * Opens PGlite and serves it on 127.0.0.1; both close with the scope. Returns the port. A fresh
 * directory on disk is first made by a child process when `inChild` (and the bundle runs).
 */
const serveEmbedded = (dataDir: string, inChild = true) =>
  Effect.gen(function* () {
    if (inChild && childCanImportThisModule && !isMemoryDataDir(dataDir) && isFreshDataDir(dataDir)) {
      const applied = yield* prepareInChild(dataDir)
      // The lines migrate() and MigrationsLive log when the service applies migrations itself.
      if (applied !== undefined && applied.migrations.length > 0) {
        for (const migration of applied.migrations) yield* Effect.logInfo(`applied migration ${migration}`)
        yield* Effect.logInfo(`database schema at migration ${applied.schema}`)
      }
    }
    limitWasmCompilationThreads()
    const db = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: async () => {
          const fresh = isFreshDataDir(dataDir)
          const templateFile = fresh ? clusterTemplate.file() : undefined
          const template = await clusterTemplate.read(templateFile)
          const db = await PGlite.create(dataDir, {
            // pg_trgm backs the customer search index (migration 0006), as on a PostgreSQL server.
            extensions: { pg_trgm },
            startParams: EMBEDDED_START_PARAMS,
            ...(template === undefined ? {} : { loadDataDir: template })
          })
          // Right after initdb, before any migration: the cluster exactly as initdb left it.
          if (fresh && template === undefined) await clusterTemplate.write(templateFile, db)
          return db
        },
        catch: (cause) => new SqlError({ cause, message: `Failed to open embedded PostgreSQL at ${dataDir}` })
      }),
      (db) => Effect.promise(() => db.close()).pipe(Effect.ignore)
    )
    const server = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () => startEmbeddedServer(db),
        catch: (cause) => new SqlError({ cause, message: "Failed to start the embedded PostgreSQL socket" })
      }),
      (server) => Effect.promise(() => server.stop()).pipe(Effect.ignore)
    )
    yield* Effect.logDebug(`embedded PostgreSQL (${dataDir}) on 127.0.0.1:${server.port}`)
    return server.port
  })

/** The database chosen by configuration. */
export const DatabaseLive: Layer.Layer<
  PgClient.PgClient | SqlClient.SqlClient | DatabaseInfo,
  SqlError | DataDirLocked,
  AppConfig
> = Layer.unwrapEffect(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const access = yield* EmbeddedAccess
    return Option.match(config.databaseUrl, {
      onSome: (url) => postgresLayer(url, config.databaseMaxConnections, config.databasePreparedStatements),
      onNone: () => embeddedLayer(config.pgliteDataDir, access)
    })
  })
)
