/**
 * What the benchmark scripts share: their database — a throw-away `cp_bench_<random>` database on
 * the DATABASE_URL server (this machine only), dropped when the scope closes, or none (embedded
 * PGlite) without DATABASE_URL —, how they drive autocannon against the in-process app, and how they
 * print their results.
 */
import { randomBytes } from "node:crypto"
import { createRequire } from "node:module"
import { loadavg } from "node:os"
import { HttpServer } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Console, Effect, Layer, Option, Redacted } from "effect"
import pg from "pg"
import { AppConfig, type AppConfigShape, makeAppConfig } from "../../src/config.js"
import { NodeServerLive } from "../../src/http/Server.js"
import { createAdmin } from "../../src/identity/admin.js"
import { TracingLive } from "../../src/observability/Tracing.js"
import { projections } from "../../src/registry.js"
import { HttpAppLive } from "../../src/server.js"
import { servicesLayer } from "../../src/services.js"

const LOCAL_HOSTS = new Set(["127.0.0.1", "localhost", "::1", "[::1]"])

/** The server benchmarks run against, when DATABASE_URL is set. */
export const serverUrl = process.env.DATABASE_URL?.trim() || undefined

const withDatabase = (url: string, database: string) => {
  const u = new URL(url)
  u.pathname = `/${database}`
  return u.toString()
}

const admin = async <T>(url: string, f: (c: pg.Client) => Promise<T>) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await f(client)
  } finally {
    await client.end()
  }
}

/** Creates `cp_bench_<random>` on the DATABASE_URL server (dropped when the scope closes). */
export const scratchDatabase = Effect.gen(function* () {
  if (!serverUrl) return Option.none<string>()
  const host = new URL(serverUrl).hostname
  if (!LOCAL_HOSTS.has(host)) {
    return yield* Effect.dieMessage(
      `the bench only runs against this machine; DATABASE_URL points at ${host}`
    )
  }
  const name = `cp_bench_${randomBytes(5).toString("hex")}`
  yield* Effect.acquireRelease(
    Effect.promise(() => admin(serverUrl, (c) => c.query(`CREATE DATABASE ${name}`))),
    () =>
      Effect.promise(() =>
        admin(serverUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
      ).pipe(
        Effect.tap(() => Console.log(`dropped scratch database ${name}`)),
        Effect.ignore
      )
  )
  yield* Console.log(`scratch database ${name} on ${host}`)
  return Option.some(withDatabase(serverUrl, name))
})

/**
 * `VACUUM (ANALYZE)` of the bench's database between its phases, as autovacuum would have done by
 * then on a production server: it wakes every minute (`autovacuum_naptime`), removes the dead row
 * versions updates leave and refreshes the planner's statistics. This machine's PostgreSQL runs with
 * autovacuum off (its `conf.d/90-ci.conf`), so without this a phase's reads would walk the dead
 * versions of every earlier phase — a seed that packs days of writes into seconds leaves more than
 * any server with autovacuum on would keep — and plan on tables never analyzed. Prints the time it
 * took; the time is not part of any measurement.
 */
export const vacuumPhase = (label: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const started = Date.now()
    yield* sql.unsafe("VACUUM (ANALYZE)")
    yield* Console.log(`  vacuumed and analyzed ${label} in ${((Date.now() - started) / 1000).toFixed(1)} s`)
  }).pipe(Effect.orDie)

/** Prints rows (the first is the header) as a Markdown table with aligned columns. */
export const printTable = (rows: ReadonlyArray<ReadonlyArray<string>>) =>
  Effect.gen(function* () {
    const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length))) ?? []
    const line = (r: ReadonlyArray<string>) => `| ${r.map((c, i) => c.padEnd(widths[i] ?? 0)).join(" | ")} |`
    yield* Console.log("")
    yield* Console.log(line(rows[0] ?? []))
    yield* Console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`)
    for (const r of rows.slice(1)) yield* Console.log(line(r))
    yield* Console.log("")
  })

/** The 1-, 5- and 15-minute load averages, for the header and footer of a report. */
export const loadAverage = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" / ")

// ---------------------------------------------------------------------------------------------------
// autocannon (CommonJS, no type declarations): the little of it used here, typed

/** One entry of `requests`: autocannon sends them in turn on each connection. */
export interface CannonRequest {
  readonly method?: "GET" | "POST"
  readonly path?: string
  readonly headers?: Readonly<Record<string, string>>
  readonly body?: string
  /**
   * An absolute path to a CommonJS module whose export `(request) => request` may change each
   * request before it is sent (a path, not a function: the load runs in a worker thread).
   */
  readonly setupRequest?: string
}

export interface CannonOptions {
  readonly url: string
  readonly method?: "GET" | "POST"
  readonly headers?: Readonly<Record<string, string>>
  readonly body?: string
  readonly requests?: ReadonlyArray<CannonRequest>
  readonly connections: number
  /** Seconds. */
  readonly duration: number
  /** Seconds before a request counts as a timeout. */
  readonly timeout?: number
  /** Runs the load in worker threads (connections are split between them). */
  readonly workers?: number
}

interface CannonHistogram {
  readonly average: number
  readonly p50: number
  readonly p99: number
  readonly total: number
}

interface CannonResult {
  /** Seconds. */
  readonly duration: number
  /** Milliseconds. */
  readonly latency: CannonHistogram
  /** Per-second samples; `total` = completed requests. */
  readonly requests: CannonHistogram
  readonly errors: number
  readonly timeouts: number
  readonly non2xx: number
  readonly "2xx": number
  readonly statusCodeStats: Readonly<Record<string, { readonly count: number }>>
}

interface CannonInstance {
  readonly stop: () => void
}

type Autocannon = (
  options: CannonOptions,
  callback: (error: Error | null, result: CannonResult) => void
) => CannonInstance

const autocannon: Autocannon = (() => {
  const loaded: unknown = createRequire(import.meta.url)("autocannon")
  if (typeof loaded !== "function") throw new Error("autocannon did not load as a function")
  return loaded as Autocannon
})()

/**
 * One autocannon run, in a worker thread (so the load generator does not share the server's event
 * loop); interrupting the fiber stops it.
 */
export const cannon = (options: CannonOptions) =>
  Effect.async<CannonResult, Error>((resume) => {
    const instance = autocannon({ workers: 1, timeout: 30, ...options }, (error, result) =>
      resume(error ? Effect.fail(error) : Effect.succeed(result))
    )
    return Effect.sync(() => instance.stop())
  })

export interface Measurement {
  readonly perSecond: number
  readonly p50Ms: number
  readonly p99Ms: number
  /** Anything but a 2xx answer: connection errors, timeouts and other statuses. */
  readonly failures: string
  /** CPU µs per 2xx answer over the measured run, by the `cpu` reading given to `measure`. */
  readonly cpuPerAnswer?: Readonly<Record<string, number>>
}

/**
 * A warm-up that is not counted, then the measurement; only 2xx answers count. autocannon stops
 * without waiting for the requests in flight, which the app still serves: `settleSeconds` after the
 * warm-up and after the measurement let them finish before the next run starts.
 */
export const measure = (
  options: Omit<CannonOptions, "duration">,
  timing: { readonly warmUpSeconds: number; readonly seconds: number; readonly settleSeconds: number },
  /** Cumulative CPU µs by name (e.g. this process, the database's backends), read around the run. */
  cpu?: Effect.Effect<Readonly<Record<string, number>>>
) =>
  Effect.gen(function* () {
    const { warmUpSeconds, seconds, settleSeconds } = timing
    yield* cannon({ ...options, duration: warmUpSeconds })
    yield* Effect.sleep(`${settleSeconds} seconds`)
    const cpuBefore = cpu === undefined ? undefined : yield* cpu
    const r = yield* cannon({ ...options, duration: seconds })
    const cpuAfter = cpu === undefined ? undefined : yield* cpu
    yield* Effect.sleep(`${settleSeconds} seconds`)
    const others = Object.entries(r.statusCodeStats)
      .filter(([code]) => !code.startsWith("2"))
      .map(([code, s]) => `${s.count}× ${code}`)
    if (r.errors > 0) others.push(`${r.errors} errors (${r.timeouts} timeouts)`)
    if (r["2xx"] === 0 && others.length > 0) {
      return yield* Effect.dieMessage(
        `${options.method ?? "GET"} ${options.url}: no 2xx answers (${others.join(", ")})`
      )
    }
    if (r["2xx"] === 0) others.push(`no answer within ${seconds} s: run longer (--duration)`)
    return {
      perSecond: r["2xx"] / r.duration,
      p50Ms: r.latency.p50,
      p99Ms: r.latency.p99,
      failures: others.join(", "),
      ...(cpuBefore === undefined || cpuAfter === undefined
        ? {}
        : {
            cpuPerAnswer: cpuPerAnswer(cpuBefore, cpuAfter, r["2xx"])
          })
    } satisfies Measurement
  })

/**
 * CPU µs per answer by name between two readings of cumulative CPU (see `measure`'s `cpu`). A key
 * only before (a process that ended) drops out; one only after started at 0.
 */
export const cpuPerAnswer = (
  before: Readonly<Record<string, number>>,
  after: Readonly<Record<string, number>>,
  answers: number
): Readonly<Record<string, number>> =>
  Object.fromEntries(
    Object.entries(after).map(([k, v]) => [k, (v - (before[k] ?? 0)) / Math.max(1, answers)])
  )

/**
 * A config over the scratch database for the benches: a fresh master key and signing key (nothing
 * written to DATA_DIR), no rate limits; `overrides` as for `makeAppConfig`.
 */
export const scratchConfig = (
  overrides: (defaults: AppConfigShape) => Partial<AppConfigShape> = () => ({})
) =>
  Layer.scoped(
    AppConfig,
    Effect.map(scratchDatabase, (url) => {
      const defaults = makeAppConfig()
      const base = makeAppConfig({
        nodeEnv: "test",
        databaseUrl: Option.map(url, Redacted.make),
        pgliteDataDir: "memory://",
        dataEncryptionKey: Option.some(Redacted.make(randomBytes(32).toString("hex"))),
        rateLimit: { ...defaults.rateLimit, enabled: false },
        identity: {
          ...defaults.identity,
          jwtSecret: Option.some(Redacted.make(randomBytes(32).toString("hex")))
        }
      })
      return { ...base, ...overrides(base) }
    })
  )

/**
 * The app as src/main.ts serves it (without processors) on 127.0.0.1 and a free port, over the
 * scratch database, without rate limits; `identity` overrides identity settings (e.g. scrypt).
 * Tracing as main.ts sets it (`TracingLive`: off without `OTEL_EXPORTER_OTLP_ENDPOINT`), below
 * everything that traces — without it every span was made and dropped (Effect's default tracer, the
 * platform's per-request HTTP span): a cost the service does not pay.
 */
export const benchApp = (identity: Partial<AppConfigShape["identity"]> = {}) =>
  HttpAppLive.pipe(
    Layer.provideMerge(NodeServerLive),
    Layer.provideMerge(servicesLayer({ processors: [], projections })),
    Layer.provide(TracingLive),
    Layer.provideMerge(
      scratchConfig((base) => ({ host: "127.0.0.1", port: 0, identity: { ...base.identity, ...identity } }))
    )
  )

/** The upper median of `values` (NaN for none). */
export const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN
}

/** The `q` quantile (0–1) of already sorted values (0 for none). */
export const quantile = (sorted: Float64Array, q: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0

/** A field of a JSON body, if it is an object that has it. */
export const field = (body: unknown, name: string): unknown =>
  typeof body === "object" && body !== null && name in body
    ? Object.entries(body).find(([k]) => k === name)?.[1]
    : undefined

/** 12345.6 → "12,346". */
export const fmt = (n: number) => Math.round(n).toLocaleString("en-US")
/** Milliseconds, one decimal below 10. */
export const ms = (n: number) => `${n.toFixed(n < 10 ? 1 : 0)} ms`

/** After the table: any non-2xx answers a measurement saw, and the machine's load at the end. */
export const printFootnotes = (measured: ReadonlyArray<readonly [string, Measurement]>) =>
  Effect.gen(function* () {
    for (const [label, m] of measured) {
      if (m.failures !== "") yield* Console.log(`warning: ${label} also answered ${m.failures}`)
    }
    yield* Console.log(
      `load average at the end: ${loadAverage()} (the load generator, the app and the database share ` +
        "this machine's CPUs; other processes skew every number)"
    )
  })

/**
 * The `--name value` / `--name=value` arguments of a bench script (only `names`; anything else throws
 * with `usage`), and a reader of integer ones within bounds.
 */
export const benchArguments = (names: ReadonlyArray<string>, usage: string) => {
  const args = process.argv.slice(2)
  const raw: Record<string, string | undefined> = {}
  const pattern = new RegExp(`^--(${names.join("|")})(?:=(.*))?$`)
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] ?? ""
    const match = pattern.exec(arg)
    if (!match?.[1]) throw new Error(`unknown argument ${arg} (${usage})`)
    raw[match[1]] = match[2] ?? args[++i]
  }
  const integer = (name: string, fallback: number, min: number, max: number) => {
    const text = raw[name]
    const n = text === undefined ? fallback : Number(text)
    if (!Number.isInteger(n) || n < min || n > max)
      throw new Error(`--${name} must be an integer in ${min}…${max}, got ${text}`)
    return n
  }
  return { raw, integer }
}

/** A request to a service under test: its status and its body parsed as JSON (or the text when it is not). */
export const jsonRequest = (url: string, init: { method?: string; token?: string; body?: unknown }) =>
  Effect.promise(async () => {
    const response = await fetch(url, {
      method: init.method ?? "GET",
      headers: {
        ...(init.body === undefined ? {} : { "content-type": "application/json" }),
        ...(init.token === undefined ? {} : { authorization: `Bearer ${init.token}` })
      },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) })
    })
    const text = await response.text()
    let body: unknown
    try {
      body = text === "" ? undefined : JSON.parse(text)
    } catch {
      body = text
    }
    return { status: response.status, body }
  })

/** The in-process app's base URL (`http://127.0.0.1:<port>`). */
export const appBaseUrl = Effect.flatMap(HttpServer.HttpServer, (server) =>
  server.address._tag === "TcpAddress"
    ? Effect.succeed(`http://127.0.0.1:${server.address.port}`)
    : Effect.dieMessage("the server is not on TCP")
)

/**
 * An admin created in-process and logged in over HTTP, and an API key of theirs holding `scopes`:
 * the admin's access token and the key.
 */
export const benchCredentials = (base: string, name: string, scopes: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const email = `bench.admin.${randomBytes(4).toString("hex")}@example.com`
    const password = "correct horse battery staple"
    yield* createAdmin(email, password)
    const login = yield* jsonRequest(`${base}/auth/login`, { method: "POST", body: { email, password } })
    const accessToken = field(login.body, "accessToken")
    if (login.status !== 200 || typeof accessToken !== "string")
      return yield* Effect.dieMessage(
        `POST /auth/login answered ${login.status}: ${JSON.stringify(login.body)}`
      )
    const created = yield* jsonRequest(`${base}/apikey`, {
      method: "POST",
      token: accessToken,
      body: { name, scopes }
    })
    const key = field(created.body, "key")
    if (created.status !== 201 || typeof key !== "string")
      return yield* Effect.dieMessage(
        `POST /apikey answered ${created.status}: ${JSON.stringify(created.body)}`
      )
    return { accessToken, key }
  })

/** A shuffled copy of `values` (Fisher–Yates). */
export const shuffle = <A>(values: ReadonlyArray<A>): Array<A> => {
  const out = [...values]
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    const [a, b] = [out[i], out[j]]
    if (a !== undefined && b !== undefined) [out[i], out[j]] = [b, a]
  }
  return out
}
