/**
 * `npm run bench:start [-- --runs N --idle S]` — start-up time and footprint of the service (issue
 * #17 item 4), as `npm start` runs it (`node scripts/start.mjs`: the prebuilt bundle; ROLE=all, the
 * default configuration). The bundle is built once before the runs (a stale one would be rebuilt by
 * the first start and counted in it):
 *
 *   embedded    a fresh temporary DATA_DIR and no DATABASE_URL: the first start (PGlite creates the
 *               cluster, migrations run, local keys are generated) and a warm start on the same dir;
 *   PostgreSQL  a fresh database `bench_start_<pid>_<run>` on the DATABASE_URL server (default
 *               postgres://root@127.0.0.1:5432/postgres, this machine only; dropped at the end): the
 *               first start (migrations) and a warm start.
 *
 * A start is timed from the spawn to the first 200 on `/health` (polled every 20 ms); its CPU
 * counts the service's exited children too (the one that creates a fresh embedded directory). After
 * each start the service idles `--idle` seconds (default 5), then its VmRSS is read from
 * /proc/<pid>/status, then it gets SIGTERM. `--runs` (default 3) repeats everything; the table shows the median and the range.
 * Other processes on this machine slow starts down: compare runs on a quiet machine.
 */
import { execFileSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { cpus, tmpdir } from "node:os"
import { join } from "node:path"
import { performance } from "node:perf_hooks"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import pg from "pg"
import {
  cpuTicksWithChildren,
  freePort,
  MICROS_PER_TICK,
  ROOT,
  rssKiB,
  spawnStart,
  stop,
  waitFor200
} from "./procs.js"
import { benchArguments, loadAverage, median, printTable } from "./support.js"

const USAGE = "usage: npm run bench:start -- [--runs N] [--idle S]"

const settings = (() => {
  const { integer } = benchArguments(["runs", "idle"], USAGE)
  return { runs: integer("runs", 3, 1, 20), idleSeconds: integer("idle", 5, 1, 120) }
})()

const SERVER_URL = process.env.DATABASE_URL?.trim() || "postgres://root@127.0.0.1:5432/postgres"
const LOCAL_HOSTS = new Set(["127.0.0.1", "localhost", "::1", "[::1]"])

/** The targets and the figures it reported before any optimisation. */
const TARGETS = {
  embeddedFirst: { max: 5_000, before: "9.2 s" },
  embeddedWarm: { max: 2_000, before: "3.1–5.1 s" },
  embeddedRss: { max: 450, before: "476–617 MB" },
  postgresRss: { max: 200, before: "215–250 MB" }
}

const adminQuery = (sql: string) =>
  Effect.promise(async () => {
    const client = new pg.Client({ connectionString: SERVER_URL, application_name: "bench-start" })
    await client.connect()
    try {
      await client.query(sql)
    } finally {
      await client.end()
    }
  })

interface Start {
  /** Spawn to first 200 on /health. */
  readonly ms: number
  /** CPU the service process and its exited children spent until healthy. */
  readonly cpuMs: number
  /** VmRSS after idling. */
  readonly rssMiB: number
}

/** One start of the service with `env`: timed to healthy, idled, measured, stopped. */
const startOnce = (env: Readonly<Record<string, string | undefined>>) =>
  Effect.scoped(
    Effect.gen(function* () {
      const port = yield* freePort
      const started = performance.now()
      const child = yield* spawnStart({ ...env, HOST: "127.0.0.1", PORT: String(port) })
      yield* waitFor200(`http://127.0.0.1:${port}/health`, child, 180_000)
      const ms = performance.now() - started
      const cpuMs = (cpuTicksWithChildren(child.pid) * MICROS_PER_TICK) / 1000
      yield* Effect.sleep(`${settings.idleSeconds} seconds`)
      const rss = rssKiB(child.pid)
      if (rss === undefined) return yield* Effect.dieMessage(`the service exited: ${child.output()}`)
      yield* stop(child)
      return { ms, cpuMs, rssMiB: rss / 1024 } satisfies Start
    })
  )

/** A first start and a warm start on the same data. */
interface Pair {
  readonly first: Start
  readonly warm: Start
}

const embeddedPair = Effect.acquireUseRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "bench-start-"))),
  (dataDir) =>
    Effect.gen(function* () {
      const env = { DATABASE_URL: undefined, PGLITE_DATA_DIR: undefined, DATA_DIR: dataDir }
      const first = yield* startOnce(env)
      const warm = yield* startOnce(env)
      return { first, warm } satisfies Pair
    }),
  (dataDir) => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true }))
)

const postgresPair = (run: number) => {
  const database = `bench_start_${process.pid}_${run}`
  const url = new URL(SERVER_URL)
  url.pathname = `/${database}`
  return Effect.acquireUseRelease(
    adminQuery(`CREATE DATABASE ${database}`),
    () =>
      Effect.acquireUseRelease(
        Effect.sync(() => mkdtempSync(join(tmpdir(), "bench-start-"))),
        (dataDir) =>
          Effect.gen(function* () {
            const env = { DATABASE_URL: url.toString(), DATA_DIR: dataDir }
            const first = yield* startOnce(env)
            const warm = yield* startOnce(env)
            return { first, warm } satisfies Pair
          }),
        (dataDir) => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true }))
      ),
    () => adminQuery(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).pipe(Effect.ignore)
  )
}

const program = Effect.gen(function* () {
  const host = new URL(SERVER_URL).hostname
  if (!LOCAL_HOSTS.has(host))
    return yield* Effect.dieMessage(`DATABASE_URL must be on this machine (it reads /proc), not ${host}`)
  // Built once here, so no start below pays for it.
  yield* Effect.sync(() => execFileSync(process.execPath, [`${ROOT}scripts/build.mjs`], { stdio: "inherit" }))
  yield* Console.log(
    `bench:start — ${cpus().length} CPUs, Node ${process.version}, ${settings.runs} runs, ` +
      `${settings.idleSeconds} s idle before reading RSS, load average ${loadAverage()}`
  )
  const embedded: Array<Pair> = []
  const postgres: Array<Pair> = []
  for (let run = 1; run <= settings.runs; run++) {
    yield* Console.log(`… run ${run} of ${settings.runs}: embedded`)
    embedded.push(yield* embeddedPair)
    yield* Console.log(`… run ${run} of ${settings.runs}: PostgreSQL`)
    postgres.push(yield* postgresPair(run))
  }

  const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`
  const mib = (n: number) => `${Math.round(n)} MB`
  const row = (
    label: string,
    values: ReadonlyArray<number>,
    format: (n: number) => string,
    target?: { readonly max: number; readonly before: string }
  ) => {
    const m = median(values)
    return [
      label,
      format(m),
      `${format(Math.min(...values))} – ${format(Math.max(...values))}`,
      target === undefined ? "—" : `≤ ${format(target.max)}`,
      target === undefined ? "" : m <= target.max ? "met" : "NOT met",
      target?.before ?? ""
    ]
  }
  yield* printTable([
    ["metric", "median", "range", "target (#17)", "status", "#17 before"],
    row(
      "embedded: first start to healthy (fresh DATA_DIR)",
      embedded.map((p) => p.first.ms),
      seconds,
      TARGETS.embeddedFirst
    ),
    row(
      "embedded: warm start to healthy",
      embedded.map((p) => p.warm.ms),
      seconds,
      TARGETS.embeddedWarm
    ),
    row(
      "embedded: idle RSS after the first start",
      embedded.map((p) => p.first.rssMiB),
      mib,
      TARGETS.embeddedRss
    ),
    row(
      "embedded: idle RSS after a warm start",
      embedded.map((p) => p.warm.rssMiB),
      mib,
      TARGETS.embeddedRss
    ),
    row(
      "embedded: service CPU until healthy, first start",
      embedded.map((p) => p.first.cpuMs),
      seconds
    ),
    row(
      "embedded: service CPU until healthy, warm start",
      embedded.map((p) => p.warm.cpuMs),
      seconds
    ),
    row(
      "PostgreSQL: first start to healthy (fresh database)",
      postgres.map((p) => p.first.ms),
      seconds
    ),
    row(
      "PostgreSQL: warm start to healthy",
      postgres.map((p) => p.warm.ms),
      seconds
    ),
    row(
      "PostgreSQL: idle RSS after the first start",
      postgres.map((p) => p.first.rssMiB),
      mib,
      TARGETS.postgresRss
    ),
    row(
      "PostgreSQL: idle RSS after a warm start",
      postgres.map((p) => p.warm.rssMiB),
      mib,
      TARGETS.postgresRss
    ),
    row(
      "PostgreSQL: service CPU until healthy, first start",
      postgres.map((p) => p.first.cpuMs),
      seconds
    ),
    row(
      "PostgreSQL: service CPU until healthy, warm start",
      postgres.map((p) => p.warm.cpuMs),
      seconds
    )
  ])
  yield* Console.log(
    `load average at the end: ${loadAverage()} (other processes on this machine slow starts down)`
  )
})

program.pipe(
  Effect.timeoutFail({
    duration: `${settings.runs * (4 * (180 + settings.idleSeconds)) + 120} seconds`,
    onTimeout: () => new Error("bench took too long")
  }),
  NodeRuntime.runMain
)
