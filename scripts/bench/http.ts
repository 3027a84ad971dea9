/**
 * `npm run bench:http [-- --rounds N --duration S --warm-up S --connections N --pool N --role all|api]`
 * — the hot path of our service against two peers on the same machine, the same PostgreSQL and the
 * same connections, in ONE run with interleaved rounds (issue #17):
 *
 *   bare     scripts/bench/peers/bare.ts: `node:http` + a `pg` pool — the floor;
 *   HttpApi  scripts/bench/peers/effect.ts: a minimal Effect 3 HttpApi + NodeHttpServer +
 *            @effect/sql-pg on our pinned versions, tracer off — the framework's floor;
 *   ours     `node scripts/start.mjs` (as `npm start`: the prebuilt bundle), ROLE=all by default, NODE_ENV=production,
 *            LOG_LEVEL=warning (no access log), rate limits off;
 *
 * each a child process. Endpoints: `/health`; GET by primary key (ours: `GET /user/:id` with an API
 * key holding read:customers and write:customers, a random one of 100 customers per request; the
 * peers: a random one of 100 rows of `bench_peer.users`); a single-row write (ours: `POST /user`;
 * the peers: one INSERT … RETURNING), a unique email per request.
 *
 * It needs a PostgreSQL on this machine (DATABASE_URL, default postgres://root@127.0.0.1:5432/postgres)
 * and creates a fresh database `bench_http_<pid>` there, dropped at the end. Each round runs every
 * target × endpoint (the order of the targets rotates from round to round) for `--duration` seconds
 * (default 5) at `--connections` (default 64) after a `--warm-up` (default 1 s) that is not counted;
 * every server gets a database pool of `--pool` (default 10, our DATABASE_MAX_CONNECTIONS default).
 * Around each measured run it reads, from /proc, the server process's utime + stime and the utime +
 * stime of the PostgreSQL backends serving that server (by application_name in pg_stat_activity: not
 * the whole cluster, which other processes share). The table shows the medians over the rounds of
 * requests/s, p50/p99 (autocannon: whole milliseconds), node and PostgreSQL CPU per request and the
 * ratios to the peers (medians of the per-round ratios).
 *
 * Then it counts the SQL statements per request of our service: a second instance (ROLE=api) on the
 * same database through the counting proxy of scripts/bench/pgwire.ts (statements and round trips), 20 sequential requests per
 * endpoint, the median count per request (BEGIN and COMMIT count; a background statement, such as
 * the revocation poll, may add one to a single request, not to the median).
 *
 * The load generator (autocannon in a worker thread), the servers and PostgreSQL share this
 * machine's CPUs: numbers are only comparable within one run, and other processes skew them.
 */
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { cpus, tmpdir } from "node:os"
import { join } from "node:path"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import pg from "pg"
import { type CountingProxy, startCountingProxy } from "./pgwire.js"
import {
  backendSampler,
  type Child,
  cpuTicks,
  freePort,
  MICROS_PER_TICK,
  pgClient,
  spawnStart,
  spawnTsx,
  stop,
  waitFor200
} from "./procs.js"
import {
  benchArguments,
  type CannonOptions,
  cannon,
  fmt,
  jsonRequest,
  loadAverage,
  printTable
} from "./support.js"

// ---------------------------------------------------------------------------------------------------
// Settings

const USAGE =
  "usage: npm run bench:http -- [--rounds N] [--duration S] [--warm-up S] [--connections N] [--pool N] [--role all|api]"

const settings = (() => {
  const { raw, integer } = benchArguments(
    ["rounds", "duration", "warm-up", "connections", "pool", "role"],
    USAGE
  )
  const role = raw.role ?? "all"
  if (role !== "all" && role !== "api") throw new Error(`--role must be all or api, got ${role}`)
  return {
    rounds: integer("rounds", 3, 1, 20),
    seconds: integer("duration", 5, 1, 300),
    warmUpSeconds: integer("warm-up", 1, 0, 60),
    connections: integer("connections", 64, 1, 1000),
    pool: integer("pool", 10, 1, 30),
    role
  }
})()

const SERVER_URL = process.env.DATABASE_URL?.trim() || "postgres://root@127.0.0.1:5432/postgres"
const LOCAL_HOSTS = new Set(["127.0.0.1", "localhost", "::1", "[::1]"])
const DATABASE = `bench_http_${process.pid}`
/** Rows (and customers) GET picks from at random. */
const SAMPLE = 100
/** Requests per endpoint when counting statements. */
const COUNT_REQUESTS = 20
const ADMIN_EMAIL = `bench.admin.${randomBytes(4).toString("hex")}@example.com`
const ADMIN_PASSWORD = "correct horse battery staple"
/** application_name of each server's connections (the peers set theirs; ours is fixed in src/db). */
const APPLICATION = { bare: "bench-bare", effect: "bench-effect", ours: "commerce-platform" } as const

type Target = keyof typeof APPLICATION
type Endpoint = "health" | "get" | "write"
const TARGETS: ReadonlyArray<Target> = ["bare", "effect", "ours"]
const ENDPOINTS: ReadonlyArray<Endpoint> = ["health", "get", "write"]

const LABELS: Record<Target, Record<Endpoint, string>> = {
  bare: {
    health: "bare node:http `/health`",
    get: "bare GET by primary key",
    write: "bare INSERT"
  },
  effect: {
    health: "minimal HttpApi `/health` (tracer off)",
    get: "minimal HttpApi + @effect/sql-pg GET by key",
    write: "minimal HttpApi + @effect/sql-pg INSERT"
  },
  ours: {
    health: "our `/health`",
    get: "our `GET /user/:id` (API key)",
    write: "our `POST /user` (API key)"
  }
}

// ---------------------------------------------------------------------------------------------------
// The database

const withDatabase = (url: string, database: string) => {
  const u = new URL(url)
  u.pathname = `/${database}`
  return u.toString()
}

const adminQuery = (sql: string) =>
  Effect.promise(async () => {
    const client = new pg.Client({ connectionString: SERVER_URL, application_name: "bench-http" })
    await client.connect()
    try {
      await client.query(sql)
    } finally {
      await client.end()
    }
  })

/** `bench_http_<pid>` on the DATABASE_URL server, dropped (even with connections left) with the scope. */
const benchDatabase = Effect.gen(function* () {
  const host = new URL(SERVER_URL).hostname
  if (!LOCAL_HOSTS.has(host))
    return yield* Effect.dieMessage(
      `the bench reads /proc: DATABASE_URL must be on this machine, not ${host}`
    )
  yield* Effect.acquireRelease(adminQuery(`CREATE DATABASE ${DATABASE}`), () =>
    adminQuery(`DROP DATABASE IF EXISTS ${DATABASE} WITH (FORCE)`).pipe(
      Effect.zipRight(Console.log(`dropped database ${DATABASE}`))
    )
  )
  yield* Console.log(`database ${DATABASE} on ${host}`)
  return withDatabase(SERVER_URL, DATABASE)
})

/** The peers' table, as close to our customers table as a bare INSERT allows: uuid key, unique email. */
const peerTable = (client: pg.Client) =>
  Effect.promise(async () => {
    await client.query(`CREATE SCHEMA bench_peer;
      CREATE TABLE bench_peer.users (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        email text NOT NULL UNIQUE,
        first_name text NOT NULL,
        last_name text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now())`)
    const { rows } = await client.query<{ id: string }>(
      `INSERT INTO bench_peer.users (email, first_name, last_name)
       SELECT 'seed' || n || '@example.com', 'Grace', 'Hopper' FROM generate_series(1, ${SAMPLE}) n
       RETURNING id`
    )
    await client.query("VACUUM ANALYZE bench_peer.users")
    return rows.map((r) => r.id)
  })

// ---------------------------------------------------------------------------------------------------
// Servers

/** A peer: started with tsx, it prints {"port":N} once it listens. */
const startPeer = (script: string, databaseUrl: string) =>
  Effect.gen(function* () {
    const child = yield* spawnTsx(script, {
      DATABASE_URL: databaseUrl,
      POOL_SIZE: String(settings.pool),
      PORT: "0"
    })
    const line = yield* Effect.promise(() => child.firstJsonLine).pipe(
      Effect.timeoutFail({
        duration: "60 seconds",
        onTimeout: () => new Error(`${script}: ${child.output()}`)
      })
    )
    const port =
      typeof line === "object" && line !== null && "port" in line && typeof line.port === "number"
        ? line.port
        : undefined
    if (port === undefined) return yield* Effect.dieMessage(`${script} printed ${JSON.stringify(line)}`)
    const base = `http://127.0.0.1:${port}`
    yield* waitFor200(`${base}/health`, child)
    return { child, base }
  })

/** Our service as `npm start` runs it, on `databaseUrl`. */
const startOurs = (databaseUrl: string, role: string) =>
  Effect.gen(function* () {
    const port = yield* freePort
    const dataDir = mkdtempSync(join(tmpdir(), "bench-http-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true })))
    const child = yield* spawnStart({
      DATABASE_URL: databaseUrl,
      DATABASE_MAX_CONNECTIONS: String(settings.pool),
      HOST: "127.0.0.1",
      PORT: String(port),
      ROLE: role,
      NODE_ENV: "production",
      // Production names its payment processor (no payment is made here).
      PAYMENT_PROCESSOR: "test",
      LOG_LEVEL: "warning",
      RATE_LIMIT_ENABLED: "false",
      DATA_DIR: dataDir,
      DATA_ENCRYPTION_KEY: randomBytes(32).toString("hex"),
      JWT_SECRET: randomBytes(32).toString("hex"),
      ADMIN_EMAIL,
      ADMIN_PASSWORD
    })
    const base = `http://127.0.0.1:${port}`
    yield* waitFor200(`${base}/health`, child)
    return { child, base }
  })

const stringField = (body: unknown, name: string) => {
  const value =
    typeof body === "object" && body !== null
      ? Object.entries(body).find(([k]) => k === name)?.[1]
      : undefined
  return typeof value === "string" ? value : undefined
}

const expectStatus = (what: string, reply: { status: number; body: unknown }, status: number) =>
  reply.status === status
    ? Effect.void
    : Effect.dieMessage(`${what} answered ${reply.status}: ${JSON.stringify(reply.body)}`)

/** Logs the admin in, creates an API key for customers and `SAMPLE` customers. */
const prepareOurs = (base: string) =>
  Effect.gen(function* () {
    const login = yield* jsonRequest(`${base}/auth/login`, {
      method: "POST",
      body: { email: ADMIN_EMAIL, password: ADMIN_PASSWORD }
    })
    yield* expectStatus("POST /auth/login", login, 200)
    const token = stringField(login.body, "accessToken") ?? ""
    const created = yield* jsonRequest(`${base}/apikey`, {
      method: "POST",
      token,
      body: { name: "bench:http", scopes: ["read:customers", "write:customers"] }
    })
    yield* expectStatus("POST /apikey", created, 201)
    const key = stringField(created.body, "key") ?? ""
    const ids: Array<string> = []
    for (let i = 0; i < SAMPLE; i++) {
      const customer = yield* jsonRequest(`${base}/user`, {
        method: "POST",
        token: key,
        body: {
          email: `sample${i}.${randomBytes(3).toString("hex")}@example.com`,
          firstName: "Grace",
          lastName: "Hopper"
        }
      })
      yield* expectStatus("POST /user", customer, 201)
      ids.push(stringField(customer.body, "id") ?? "")
    }
    return { key, ids }
  })

// ---------------------------------------------------------------------------------------------------
// autocannon request modules (they run in the load generator's worker thread, so they are files)

const moduleDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "bench-http-modules-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

/** Each request asks for `<prefix><one of ids>`. */
const randomPathModule = (dir: string, name: string, prefix: string, ids: ReadonlyArray<string>) => {
  const file = join(dir, `${name}.cjs`)
  writeFileSync(
    file,
    `"use strict"\nconst ids = ${JSON.stringify(ids)}\n` +
      "module.exports = (request) => {\n" +
      `  request.path = ${JSON.stringify(prefix)} + ids[Math.floor(Math.random() * ids.length)]\n` +
      "  return request\n}\n"
  )
  return file
}

/** Each request creates a new user: a unique email (random per worker, then a counter). */
const uniqueUserModule = (dir: string) => {
  const file = join(dir, "unique-user.cjs")
  writeFileSync(
    file,
    '"use strict"\nconst run = Date.now().toString(36) + Math.random().toString(36).slice(2, 8)\n' +
      "let n = 0\n" +
      "module.exports = (request) => {\n" +
      '  request.body = JSON.stringify({ email: "u" + run + "." + n++ + "@example.com", ' +
      'firstName: "Grace", lastName: "Hopper" })\n' +
      "  return request\n}\n"
  )
  return file
}

// ---------------------------------------------------------------------------------------------------
// One measured run

interface Run {
  readonly perSecond: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly nodeMicrosPerRequest: number
  readonly pgMicrosPerRequest: number
  readonly failures: string
  readonly lostBackends: number
}

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length === 0
    ? Number.NaN
    : sorted.length % 2 === 1
      ? (sorted[mid] ?? 0)
      : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2
}

const measured = (
  options: Omit<CannonOptions, "duration" | "connections">,
  server: Child,
  application: string,
  sampler: ReturnType<typeof backendSampler>,
  settleSeconds: number
) =>
  Effect.gen(function* () {
    const load = { ...options, connections: settings.connections }
    if (settings.warmUpSeconds > 0) {
      yield* cannon({ ...load, duration: settings.warmUpSeconds })
      yield* Effect.sleep(`${settleSeconds} seconds`)
    }
    const pgBefore = yield* sampler.sample(application)
    const nodeBefore = cpuTicks(server.pid)
    const r = yield* cannon({ ...load, duration: settings.seconds })
    const nodeAfter = cpuTicks(server.pid)
    const pgAfter = yield* sampler.sample(application)
    yield* Effect.sleep(`${settleSeconds} seconds`)
    const answered = r["2xx"] + r.non2xx
    const others = Object.entries(r.statusCodeStats)
      .filter(([code]) => !code.startsWith("2"))
      .map(([code, s]) => `${s.count}× ${code}`)
    if (r.errors > 0) others.push(`${r.errors} errors (${r.timeouts} timeouts)`)
    if (r["2xx"] === 0)
      return yield* Effect.dieMessage(
        `${options.url}: no 2xx answers (${others.join(", ") || "none at all"})`
      )
    const backends = sampler.spent(pgBefore, pgAfter)
    return {
      perSecond: r["2xx"] / r.duration,
      p50Ms: r.latency.p50,
      p99Ms: r.latency.p99,
      nodeMicrosPerRequest: ((nodeAfter - nodeBefore) * MICROS_PER_TICK) / answered,
      pgMicrosPerRequest: backends.micros / answered,
      failures: others.join(", "),
      lostBackends: backends.lost
    } satisfies Run
  })

// ---------------------------------------------------------------------------------------------------
// Statements per request (a second instance of ours behind the counting proxy)

const countStatements = (
  databaseUrl: string,
  requests: Record<Endpoint, () => { url: string; method: string; body?: unknown }>,
  key: string
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const upstream = new URL(databaseUrl)
      const proxy: CountingProxy = yield* Effect.acquireRelease(
        Effect.promise(() =>
          startCountingProxy({ host: upstream.hostname, port: Number(upstream.port || 5432) })
        ),
        (p) => Effect.promise(() => p.close())
      )
      const ours = yield* startOurs(proxy.urlFor(databaseUrl), "api")
      const countOf = (endpoint: Endpoint) =>
        Effect.gen(function* () {
          const perRequest: Array<number> = []
          const tripsPerRequest: Array<number> = []
          for (let i = 0; i <= COUNT_REQUESTS; i++) {
            const request = requests[endpoint]()
            const mark = proxy.statements().length
            const trips = proxy.roundTrips()
            const reply = yield* jsonRequest(`${ours.base}${request.url}`, {
              method: request.method,
              token: key,
              body: request.body
            })
            if (reply.status >= 300) yield* expectStatus(`${request.method} ${request.url}`, reply, 200)
            // The first request warms caches: not counted.
            if (i > 0) {
              perRequest.push(proxy.since(mark).length)
              tripsPerRequest.push(proxy.roundTrips() - trips)
            }
          }
          const statements = median(perRequest)
          const roundTrips = median(tripsPerRequest)
          return statements === roundTrips ? String(statements) : `${statements} in ${roundTrips} trips`
        })
      const counts: Record<Endpoint, string> = {
        health: yield* countOf("health"),
        get: yield* countOf("get"),
        write: yield* countOf("write")
      }
      yield* stop(ours.child)
      return counts
    })
  )

// ---------------------------------------------------------------------------------------------------
// The run

const program = Effect.gen(function* () {
  const databaseUrl = yield* benchDatabase
  const admin = yield* pgClient(databaseUrl, "bench-http")
  const sampler = backendSampler(admin, DATABASE)
  const peerIds = yield* peerTable(admin)

  yield* Console.log(
    `bench:http — ${cpus().length} CPUs, Node ${process.version}, ${settings.rounds} rounds × 3 targets × 3 endpoints, ` +
      `${settings.seconds} s each after ${settings.warmUpSeconds} s of warm-up, ${settings.connections} connections, ` +
      `database pool ${settings.pool} per server, ours with ROLE=${settings.role}, load average ${loadAverage()}`
  )
  yield* Console.log("… starting our service and the peers")
  const ours = yield* startOurs(databaseUrl, settings.role)
  const { key, ids } = yield* prepareOurs(ours.base)
  const bare = yield* startPeer("scripts/bench/peers/bare.ts", databaseUrl)
  const effect = yield* startPeer("scripts/bench/peers/effect.ts", databaseUrl)
  const servers = { bare, effect, ours }

  const dir = yield* moduleDir
  const newUser = uniqueUserModule(dir)
  const auth = { authorization: `Bearer ${key}` }
  const post = { "content-type": "application/json" }
  const body = JSON.stringify({ email: "placeholder@example.com", firstName: "Grace", lastName: "Hopper" })
  const load = (target: Target, endpoint: Endpoint): Omit<CannonOptions, "duration" | "connections"> => {
    const base = servers[target].base
    const headers = target === "ours" ? auth : {}
    const prefix = target === "ours" ? "/user/" : "/users/"
    switch (endpoint) {
      case "health":
        return { url: `${base}/health` }
      case "get":
        return {
          url: base,
          headers,
          requests: [
            {
              method: "GET",
              path: `${prefix}${(target === "ours" ? ids : peerIds)[0]}`,
              setupRequest: randomPathModule(dir, `get-${target}`, prefix, target === "ours" ? ids : peerIds)
            }
          ]
        }
      case "write":
        return {
          url: base,
          requests: [
            {
              method: "POST",
              path: target === "ours" ? "/user" : "/users",
              headers: { ...headers, ...post },
              body,
              setupRequest: newUser
            }
          ]
        }
    }
  }

  const runs = new Map<string, Array<Run>>()
  for (let round = 0; round < settings.rounds; round++) {
    const order = TARGETS.map((_, i) => TARGETS[(i + round) % TARGETS.length] as Target)
    yield* Console.log(`… round ${round + 1} of ${settings.rounds}: ${order.join(", ")}`)
    for (const target of order) {
      for (const endpoint of ENDPOINTS) {
        const run = yield* measured(
          load(target, endpoint),
          servers[target].child,
          APPLICATION[target],
          sampler,
          endpoint === "write" ? 2 : 1
        )
        const id = `${target}/${endpoint}`
        runs.set(id, [...(runs.get(id) ?? []), run])
      }
    }
  }

  yield* Console.log("… counting our statements per request (a second instance, ROLE=api, behind a proxy)")
  let n = 0
  const statements = yield* countStatements(
    databaseUrl,
    {
      health: () => ({ url: "/health", method: "GET" }),
      get: () => ({ url: `/user/${ids[n++ % ids.length]}`, method: "GET" }),
      write: () => ({
        url: "/user",
        method: "POST",
        body: {
          email: `count${n++}.${randomBytes(3).toString("hex")}@example.com`,
          firstName: "G",
          lastName: "H"
        }
      })
    },
    key
  )

  const of = (target: Target, endpoint: Endpoint) => runs.get(`${target}/${endpoint}`) ?? []
  const ratio = (target: Target, endpoint: Endpoint, peer: Target) =>
    median(of(target, endpoint).map((r, i) => r.perSecond / (of(peer, endpoint)[i]?.perSecond ?? Number.NaN)))
  const micros = (n: number) => (Number.isNaN(n) ? "–" : `${fmt(n)} µs`)
  const msOf = (n: number) => (n < 10 ? `${n.toFixed(1)} ms` : `${fmt(n)} ms`)
  const rows: Array<ReadonlyArray<string>> = [
    ["endpoint", "req/s", "p50", "p99", "node CPU/req", "PG CPU/req", "vs bare", "vs HttpApi", "SQL/req"]
  ]
  for (const endpoint of ENDPOINTS) {
    for (const target of TARGETS) {
      const rs = of(target, endpoint)
      const pgMicros = median(rs.map((r) => r.pgMicrosPerRequest))
      rows.push([
        LABELS[target][endpoint],
        fmt(median(rs.map((r) => r.perSecond))),
        msOf(median(rs.map((r) => r.p50Ms))),
        msOf(median(rs.map((r) => r.p99Ms))),
        micros(median(rs.map((r) => r.nodeMicrosPerRequest))),
        endpoint === "health" && pgMicros < 1 ? "–" : micros(pgMicros),
        target === "bare" ? "1" : ratio(target, endpoint, "bare").toFixed(3),
        target === "bare" ? "" : target === "effect" ? "1" : ratio(target, endpoint, "effect").toFixed(3),
        target === "ours" ? statements[endpoint] : ""
      ])
    }
  }
  yield* Console.log(
    `\nmedians over ${settings.rounds} rounds; ${settings.connections} connections; pool ${settings.pool}; ` +
      `ours ROLE=${settings.role}; SQL/req: median of ${COUNT_REQUESTS} sequential requests on a ROLE=api instance ` +
      "(statements, and the round trips they took when fewer: a BEGIN or deferred write travels with the next statement)"
  )
  yield* printTable(rows)
  for (const [id, rs] of runs) {
    const failures = rs.map((r) => r.failures).filter((f) => f !== "")
    if (failures.length > 0) yield* Console.log(`warning: ${id} also answered ${failures.join("; ")}`)
    const lost = rs.reduce((sum, r) => sum + r.lostBackends, 0)
    if (lost > 0)
      yield* Console.log(`warning: ${id}: ${lost} PostgreSQL backends exited mid-run (their CPU is missing)`)
  }
  yield* Console.log(
    `load average at the end: ${loadAverage()} (the load generator, the servers and PostgreSQL share this ` +
      "machine's CPUs; other processes skew every number)"
  )
})

program.pipe(
  Effect.scoped,
  Effect.timeoutFail({
    duration: `${settings.rounds * 9 * (settings.seconds + settings.warmUpSeconds + 3) + 600} seconds`,
    onTimeout: () => new Error("bench took too long")
  }),
  NodeRuntime.runMain
)
