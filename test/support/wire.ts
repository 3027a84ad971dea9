/**
 * The whole HTTP app (as test/support/identity.ts serves it) with its database reached through the
 * counting proxy of scripts/bench/pgwire.ts, so a test can list the SQL statements a request sends
 * — BEGIN, SAVEPOINT and COMMIT included — without any change to the service. Upstream is a fresh
 * database on the DATABASE_URL server, or, without DATABASE_URL, an in-memory PGlite served over
 * pglite-socket as the embedded mode does (one connection).
 */
import { randomBytes } from "node:crypto"
import { NodeHttpServer } from "@effect/platform-node"
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { Context, Effect, Layer, Logger, LogLevel, Option, Redacted } from "effect"
import { type CountingProxy, oneLine, startCountingProxy } from "../../scripts/bench/pgwire.js"
import { AppConfig, makeAppConfig } from "../../src/config.js"
import { TracingDisabled } from "../../src/observability/Tracing.js"
import { projections } from "../../src/registry.js"
import { HttpAppLive } from "../../src/server.js"
import { servicesLayer } from "../../src/services.js"
import { scopedDatabaseUrl } from "./database.js"

export class WireProxy extends Context.Tag("test/WireProxy")<WireProxy, CountingProxy>() {}

/** An in-memory PGlite on a local socket, as src/db/Database.ts serves the embedded database. */
const embeddedUpstream = Effect.gen(function* () {
  const db = yield* Effect.acquireRelease(
    Effect.promise(() => PGlite.create("memory://", { extensions: { pg_trgm } })),
    (db) => Effect.promise(() => db.close()).pipe(Effect.ignore)
  )
  const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 1 })
  yield* Effect.acquireRelease(
    Effect.promise(() => server.start()),
    () => Effect.promise(() => server.stop()).pipe(Effect.ignore)
  )
  const conn = server.getServerConn()
  const port = Number(conn.slice(conn.lastIndexOf(":") + 1))
  return { url: `postgres://postgres@127.0.0.1:${port}/postgres`, connections: 1 }
})

/** The upstream database (fresh), the proxy in front of it, and a config pointing at the proxy. */
const WiredDatabase = Layer.unwrapScoped(
  Effect.gen(function* () {
    const server = yield* scopedDatabaseUrl
    const upstream = Option.isSome(server) ? { url: server.value, connections: 20 } : yield* embeddedUpstream
    const u = new URL(upstream.url)
    const proxy = yield* Effect.acquireRelease(
      Effect.promise(() => startCountingProxy({ host: u.hostname, port: Number(u.port || 5432) })),
      (p) => Effect.promise(() => p.close())
    )
    const config = makeAppConfig({
      databaseUrl: Option.some(Redacted.make(proxy.urlFor(upstream.url))),
      databaseMaxConnections: upstream.connections,
      pgliteDataDir: "memory://",
      dataEncryptionKey: Option.some(Redacted.make(randomBytes(32).toString("hex")))
    })
    return Layer.merge(Layer.succeed(WireProxy, proxy), Layer.succeed(AppConfig, config))
  })
).pipe(
  Layer.provideMerge(Logger.minimumLogLevel(LogLevel.Warning)),
  // As the service runs without an OTLP endpoint (test/support/database.ts's TestConfig says why).
  Layer.provideMerge(TracingDisabled)
)

/** The app on a test socket over the counted database; `WireProxy` lists what it sent. */
export const WiredHttp = HttpAppLive.pipe(
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(servicesLayer({ processors: [], projections })),
  Layer.provideMerge(WiredDatabase)
)

/** Runs `effect` and answers the statements sent meanwhile (by anything in the process). */
export const statementsOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const proxy = yield* WireProxy
    const mark = proxy.statements().length
    const trips = proxy.roundTrips()
    const result = yield* effect
    return { result, statements: proxy.since(mark), roundTrips: proxy.roundTrips() - trips }
  })

/**
 * The fewest statements of `runs` sends of `request`, one line each: a background statement (a
 * poll) may fall into one window, hardly into all of them.
 */
export const fewestStatements = <A, E, R>(runs: number, request: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    let fewest: ReadonlyArray<string> | undefined
    for (let i = 0; i < runs; i++) {
      const { statements } = yield* statementsOf(request)
      if (fewest === undefined || statements.length < fewest.length) fewest = statements
    }
    return (fewest ?? []).map(oneLine)
  })
