/**
 * `npm run bench:auth [-- --duration N]` — the cost of authentication on the real HTTP app.
 *
 * It starts the whole app in this process (the routes and middleware of src/server.ts on a Node
 * HTTP server on 127.0.0.1, an ephemeral port, over the services of src/services.ts) with the HTTP rate
 * limits off, logging at Warning (no access log) and the production scrypt parameters (the defaults of
 * PASSWORD_SCRYPT_COST/BLOCK_SIZE/PARALLELISM: N = 32768, r = 8, p = 3). With `DATABASE_URL` (which
 * must point at this machine: 127.0.0.1 / localhost / ::1) it creates a scratch database
 * `cp_bench_<random>` on that server and drops it at the end; without it, it runs on embedded PGlite
 * in memory (one connection, in this process's event loop). It registers one shopper
 * (`POST /auth/register`), then measures with autocannon — in a worker thread, so the load generator
 * does not share the server's event loop — each for N seconds (default 10) after a 2 s warm-up:
 *
 *   (a) `GET /health` (no credentials) at 64 connections: the floor of the HTTP stack;
 *   (b) `GET /auth/me` with the shopper's access token at 64 connections: JWT verification, the
 *       revocation check and one user lookup; the target is ≥ 0.6 × the requests/s of (a);
 *   (c) `POST /auth/login` with the correct password at 16 connections (all for the one shopper):
 *       scrypt verification, then a session and a login event appended in one transaction, then a
 *       new token pair;
 *   (d) as a reference for (c), scrypt with the same parameters called directly, 16 at a time (what
 *       the libuv thread pool, UV_THREADPOOL_SIZE, allows without any HTTP or database work).
 *
 * and prints a markdown table with requests/s, p50/p99 latency (autocannon records whole
 * milliseconds) and the target. Numbers are only comparable on the same machine: the load generator,
 * the app and PostgreSQL share its CPUs. It stops by itself.
 */
import { randomBytes, scrypt } from "node:crypto"
import { cpus } from "node:os"
import { performance } from "node:perf_hooks"
import { HttpServer } from "@effect/platform"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Logger, LogLevel } from "effect"
import { AppConfig } from "../../src/config.js"
import { DatabaseInfo } from "../../src/db/Database.js"
import {
  benchApp,
  type CannonOptions,
  fmt,
  loadAverage,
  measure,
  ms,
  printFootnotes,
  printTable
} from "./support.js"

// ---------------------------------------------------------------------------------------------------
// Settings

/** `--duration N` (or `--duration=N`): seconds per measurement. */
const seconds = (() => {
  const args = process.argv.slice(2)
  let raw: string | undefined
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] ?? ""
    if (arg === "--duration") raw = args[++i]
    else if (arg.startsWith("--duration=")) raw = arg.slice("--duration=".length)
    else throw new Error(`unknown argument ${arg} (usage: npm run bench:auth -- --duration N)`)
  }
  const n = raw === undefined ? 10 : Number(raw)
  if (!Number.isInteger(n) || n < 1 || n > 600)
    throw new Error(`--duration must be 1…600 seconds, got ${raw}`)
  return n
})()
const WARM_UP_SECONDS = 2
const READ_CONNECTIONS = 64
const LOGIN_CONNECTIONS = 16
/** The defaults of PASSWORD_SCRYPT_COST/BLOCK_SIZE/PARALLELISM in src/config.ts. */
const PRODUCTION_SCRYPT = { cost: 32_768, blockSize: 8, parallelism: 3 } as const

const TARGETS = {
  /** Authenticated reads cost at most ~40 % more than the cheapest route. */
  meToHealthRatio: 0.6
}

const EMAIL = `bench.${randomBytes(4).toString("hex")}@example.com`
const PASSWORD = "correct horse battery staple"

/** A measurement with this run's timing; `settleSeconds` lets in-flight requests finish. */
const run = (options: Omit<CannonOptions, "duration">, settleSeconds: number) =>
  measure(options, { warmUpSeconds: WARM_UP_SECONDS, seconds, settleSeconds })

/** scrypt alone, `concurrency` calls at a time, for `durationSeconds`. */
const scryptAlone = (concurrency: number, durationSeconds: number) =>
  Effect.promise(async () => {
    const p = PRODUCTION_SCRYPT
    const options = {
      N: p.cost,
      r: p.blockSize,
      p: p.parallelism,
      maxmem: 256 * p.cost * p.blockSize + 1024 * 1024
    }
    const salt = randomBytes(16)
    const once = () =>
      new Promise<void>((resolve, reject) =>
        scrypt(PASSWORD, salt, 32, options, (error) => (error ? reject(error) : resolve()))
      )
    const started = performance.now()
    const deadline = started + durationSeconds * 1000
    let hashes = 0
    const latencies: number[] = []
    const worker = async () => {
      while (performance.now() < deadline) {
        const t0 = performance.now()
        await once()
        latencies.push(performance.now() - t0)
        hashes++
      }
    }
    await Promise.all(Array.from({ length: concurrency }, worker))
    const elapsed = (performance.now() - started) / 1000
    latencies.sort((a, b) => a - b)
    const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0
    return { perSecond: hashes / elapsed, p50Ms: at(0.5), p99Ms: at(0.99) }
  })

// ---------------------------------------------------------------------------------------------------
// Scratch database and the app

const BenchLive = benchApp({ scrypt: PRODUCTION_SCRYPT })

// ---------------------------------------------------------------------------------------------------
// Report

const status = (value: number, target: number) => (value >= target ? "met" : "NOT met")

const post = (url: string, body: unknown) =>
  Effect.promise(async () => {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body)
    })
    return { status: response.status, body: (await response.json()) as unknown }
  })

const accessTokenOf = (body: unknown): string | undefined => {
  if (typeof body !== "object" || body === null || !("accessToken" in body)) return undefined
  return typeof body.accessToken === "string" ? body.accessToken : undefined
}

const program = Effect.gen(function* () {
  const info = yield* DatabaseInfo
  const config = yield* AppConfig
  const address = (yield* HttpServer.HttpServer).address
  if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("the server is not on TCP")
  const base = `http://127.0.0.1:${address.port}`
  yield* Console.log(
    `bench: ${info.kind === "postgres" ? `PostgreSQL (pool of ${config.databaseMaxConnections})` : "embedded PGlite (one connection, in this process)"}, ` +
      `${cpus().length} CPUs, Node ${process.version}, UV_THREADPOOL_SIZE=${process.env.UV_THREADPOOL_SIZE ?? "4 (default)"}, ` +
      `${seconds} s per measurement after ${WARM_UP_SECONDS} s of warm-up, load average ${loadAverage()}`
  )

  const registered = yield* post(`${base}/auth/register`, {
    email: EMAIL,
    password: PASSWORD,
    firstName: "Bench",
    lastName: "Shopper"
  })
  const token = accessTokenOf(registered.body)
  if (registered.status !== 201 || token === undefined) {
    return yield* Effect.dieMessage(
      `POST /auth/register answered ${registered.status}: ${JSON.stringify(registered.body)}`
    )
  }
  const probe = yield* Effect.promise(() =>
    fetch(`${base}/auth/me`, { headers: { authorization: `Bearer ${token}` } })
  )
  if (probe.status !== 200) return yield* Effect.dieMessage(`GET /auth/me answered ${probe.status}`)
  const loggedIn = yield* post(`${base}/auth/login`, { email: EMAIL, password: PASSWORD })
  if (loggedIn.status !== 200) {
    return yield* Effect.dieMessage(
      `POST /auth/login answered ${loggedIn.status}: ${JSON.stringify(loggedIn.body)}`
    )
  }

  const step = <A, E, R>(label: string, effect: Effect.Effect<A, E, R>) =>
    Effect.zipRight(Console.log(`… ${label}`), effect)

  const health = yield* step(
    `GET /health, ${READ_CONNECTIONS} connections`,
    run({ url: `${base}/health`, connections: READ_CONNECTIONS }, 1)
  )
  const me = yield* step(
    `GET /auth/me, ${READ_CONNECTIONS} connections`,
    run(
      {
        url: `${base}/auth/me`,
        connections: READ_CONNECTIONS,
        headers: { authorization: `Bearer ${token}` }
      },
      1
    )
  )
  const login = yield* step(
    `POST /auth/login, ${LOGIN_CONNECTIONS} connections`,
    run(
      {
        url: `${base}/auth/login`,
        method: "POST",
        connections: LOGIN_CONNECTIONS,
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ email: EMAIL, password: PASSWORD })
      },
      5
    )
  )
  const hashing = yield* step(
    `scrypt alone, ${LOGIN_CONNECTIONS} at a time`,
    scryptAlone(LOGIN_CONNECTIONS, Math.min(seconds, 5))
  )

  const ratio = me.perSecond / health.perSecond
  const { cost, blockSize, parallelism } = PRODUCTION_SCRYPT
  const rows: ReadonlyArray<ReadonlyArray<string>> = [
    ["metric", "measured", "p50", "p99", "reference", "target", "status"],
    [
      `(a) GET /health, ${READ_CONNECTIONS} conns (no credentials)`,
      `${fmt(health.perSecond)} req/s`,
      ms(health.p50Ms),
      ms(health.p99Ms),
      "—",
      "—",
      ""
    ],
    [
      `(b) GET /auth/me, ${READ_CONNECTIONS} conns (Bearer JWT)`,
      `${fmt(me.perSecond)} req/s`,
      ms(me.p50Ms),
      ms(me.p99Ms),
      `${fmt(health.perSecond)} req/s (a)`,
      "—",
      ""
    ],
    [
      "(b)/(a) ratio",
      ratio.toFixed(2),
      "",
      "",
      "",
      `≥ ${TARGETS.meToHealthRatio}`,
      status(ratio, TARGETS.meToHealthRatio)
    ],
    [
      `(c) POST /auth/login, ${LOGIN_CONNECTIONS} conns (scrypt N=${cost} r=${blockSize} p=${parallelism})`,
      `${login.perSecond.toFixed(1)} logins/s`,
      ms(login.p50Ms),
      ms(login.p99Ms),
      `${hashing.perSecond.toFixed(1)} hashes/s (d)`,
      "—",
      ""
    ],
    [
      `(d) ref: scrypt alone, ${LOGIN_CONNECTIONS} at a time`,
      `${hashing.perSecond.toFixed(1)} hashes/s`,
      ms(hashing.p50Ms),
      ms(hashing.p99Ms),
      "—",
      "—",
      ""
    ]
  ]
  yield* printTable(rows)
  yield* printFootnotes([
    ["/health", health],
    ["/auth/me", me],
    ["/auth/login", login]
  ])
})

program.pipe(
  Effect.provide(BenchLive),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  Effect.timeoutFail({
    duration: `${(seconds + WARM_UP_SECONDS) * 3 + 180} seconds`,
    onTimeout: () => new Error("bench took too long")
  }),
  NodeRuntime.runMain
)
