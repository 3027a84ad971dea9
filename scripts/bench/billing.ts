/**
 * `npm run bench:billing [-- --duration S] [--rounds N] [--records N]` — billing's hot paths (issue
 * #21 item 9), one table.
 *
 * It starts the whole app in this process as the other benches do (the routes of src/server.ts on
 * 127.0.0.1 and an ephemeral port, HTTP rate limits off, logging at Warning), on a scratch database
 * `cp_bench_<random>` of the DATABASE_URL server (this machine only; dropped at the end) or, without
 * DATABASE_URL, on embedded PGlite in memory. Then:
 *
 *   1. fixture: 64 metered subscriptions written straight into the subscription READ MODEL
 *      (`billing.subscriptions`; `state` is a marker): usage only reads the row, and a period that
 *      already holds a million records is set up without a month of renewals;
 *   2. seed: `--records` usage records (default 1,000,000) into ONE subscription's current period,
 *      through the usage use case (batches of 1,000, 4 at a time: the real write path, events, rollups);
 *   3. `--rounds` interleaved rounds (default 3) of `--duration` seconds (default 10) after a 2 s warm-up:
 *        - `POST /v1/usage`, one record per request, 64 connections (a fresh identifier per request,
 *          a random subscription of the 64);
 *        - `POST /v1/usage/batch`, 1,000 records per request, 8 connections;
 *        - `GET /v1/usage` summary of the seeded subscription's current period, 16 connections;
 *      records/s (2xx answers × records per request) and p50/p99 are the medians of the rounds.
 *
 * Targets (issue #21): ≥ 1,000 single records/s, ≥ 20,000 batched records/s, summary p99 ≤ 50 ms with
 * 1,000,000 records in the period; the renewal row (10,000 subscriptions due at once, ≤ 60 s, none
 * charged twice) is left to the subscriptions part (filled in after merge). Numbers are only
 * comparable on the same machine: the load generator, the app and the database share its CPUs.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { cpus, tmpdir } from "node:os"
import { join } from "node:path"
import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Console, Effect, Logger, LogLevel } from "effect"
import { Usage } from "../../src/billing/usage/Usage.js"
import { AppConfig } from "../../src/config.js"
import { DatabaseInfo } from "../../src/db/Database.js"
import type { AuthenticatedActor } from "../../src/http/Auth.js"
import * as Ids from "../../src/kernel/Ids.js"
import {
  appBaseUrl,
  benchApp,
  benchArguments,
  benchCredentials,
  type CannonOptions,
  fmt,
  loadAverage,
  type Measurement,
  measure,
  median,
  ms,
  printFootnotes,
  printTable
} from "./support.js"

const USAGE = "usage: npm run bench:billing -- [--duration S] [--rounds N] [--records N]"
const { integer } = benchArguments(["duration", "rounds", "records"], USAGE)
const SECONDS = integer("duration", 10, 1, 600)
const ROUNDS = integer("rounds", 3, 1, 20)
const RECORDS = integer("records", 1_000_000, 0, 10_000_000)

const WARM_UP_SECONDS = 2
const SUBSCRIPTIONS = 64
const BATCH = 1000
const SEED_CONCURRENCY = 4
const DAY = 86_400_000
const SEED_ACTOR: AuthenticatedActor = { type: "system", id: "bench:billing", scopes: new Set(["admin"]) }

/** autocannon `setupRequest` modules (they run in the load generator's worker thread, so files). */
const requestModules = (subscriptions: ReadonlyArray<string>, meter: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const dir = mkdtempSync(join(tmpdir(), "bench-billing-"))
      const common =
        `"use strict"\nconst subs = ${JSON.stringify(subscriptions)}\nconst meter = ${JSON.stringify(meter)}\n` +
        `const tag = require("node:crypto").randomBytes(6).toString("hex")\nlet n = 0\n` +
        "const pick = () => subs[Math.floor(Math.random() * subs.length)]\n"
      const single = join(dir, "single.cjs")
      writeFileSync(
        single,
        `${common}module.exports = (request) => {\n` +
          '  request.body = JSON.stringify({ subscriptionId: pick(), meter, value: 1 + (n % 5), identifier: "s-" + tag + "-" + n++ })\n' +
          "  return request\n}\n"
      )
      const batch = join(dir, "batch.cjs")
      writeFileSync(
        batch,
        `${common}module.exports = (request) => {\n` +
          "  const subscriptionId = pick()\n  const records = []\n" +
          `  for (let i = 0; i < ${BATCH}; i++) records.push({ subscriptionId, meter, value: 1 + (n % 5), identifier: \`b-\${tag}-\${n++}\` })\n` +
          "  request.body = JSON.stringify({ records })\n  return request\n}\n"
      )
      return { dir, single, batch }
    }),
    ({ dir }) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  )

const program = Effect.gen(function* () {
  const info = yield* DatabaseInfo
  const config = yield* AppConfig
  const base = yield* appBaseUrl
  const sql = yield* SqlClient.SqlClient
  const usage = yield* Usage
  yield* Console.log(
    `bench: ${info.kind === "postgres" ? `PostgreSQL (pool of ${config.databaseMaxConnections})` : "embedded PGlite (one connection, in this process)"}, ` +
      `${cpus().length} CPUs, Node ${process.version}, ${ROUNDS} rounds of ${SECONDS} s per row after ` +
      `${WARM_UP_SECONDS} s of warm-up, load average ${loadAverage()}`
  )
  const { key } = yield* benchCredentials(base, "bench:billing", ["write:usage", "read:usage"])

  // 1. FIXTURE OF THE READ MODEL: metered subscriptions, as the subscriptions projection would write them.
  const meter = "api_calls"
  const now = Date.now()
  const periodStart = new Date(now - 15 * DAY + 1234)
  const periodEnd = new Date(now + 15 * DAY + 1234)
  const subscriptions: Array<string> = []
  for (let i = 0; i < SUBSCRIPTIONS + 1; i++) {
    const id = yield* Ids.make("sub")
    const customer = yield* Ids.make("cus")
    yield* sql`INSERT INTO billing.subscriptions (id, customer_id, product_id, status, currency,
        current_period_start, current_period_end, usage, usage_closed_before, test_clock_id,
        state, created_at, updated_at, version)
      VALUES (${id}, ${customer}, 'prod_bench', 'active', 'USD', ${periodStart}, ${periodEnd},
        ${JSON.stringify({ meter, aggregation: "sum", unitAmount: 2, includedUnits: 1000, uniqueKey: null })}::jsonb,
        NULL, NULL, ${JSON.stringify({ fixture: true })}::jsonb, ${periodStart}, ${periodStart}, 0)`
    subscriptions.push(id)
  }
  const seeded = subscriptions.pop() ?? ""

  // 2. Seed the summary's subscription through the use case.
  yield* Console.log(
    `… seeding ${fmt(RECORDS)} records into one period (batches of ${BATCH}, ${SEED_CONCURRENCY} at a time)`
  )
  const span = now - periodStart.getTime() - 1000
  const seedStarted = Date.now()
  yield* Effect.forEach(
    Array.from({ length: Math.ceil(RECORDS / BATCH) }, (_, b) => b),
    (b) =>
      Effect.flatMap(
        usage.recordBatch(SEED_ACTOR, {
          records: Array.from({ length: Math.min(BATCH, RECORDS - b * BATCH) }, (_, i) => {
            const n = b * BATCH + i
            return {
              subscriptionId: seeded,
              meter,
              identifier: `seed-${n}`,
              value: (n % 10) + 0.5,
              timestamp: new Date(periodStart.getTime() + ((n * 7919) % span)).toISOString()
            }
          })
        }),
        (r) =>
          r.failed === 0
            ? Effect.void
            : Effect.dieMessage(`seed batch ${b}: ${JSON.stringify(r.results.find((x) => x.error))}`)
      ),
    { concurrency: SEED_CONCURRENCY }
  )
  const seedSeconds = (Date.now() - seedStarted) / 1000
  yield* Console.log(
    `  seeded in ${seedSeconds.toFixed(1)} s (${fmt(RECORDS / seedSeconds)} records/s in-process)`
  )

  // 3. Interleaved rounds.
  const modules = yield* requestModules(subscriptions, meter)
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" }
  type Row = readonly [
    label: string,
    options: Omit<CannonOptions, "duration">,
    perRequest: number,
    note: string
  ]
  const rows: ReadonlyArray<Row> = [
    [
      "GET /health, 16 connections",
      { url: `${base}/health`, connections: 16 },
      1,
      "floor of the HTTP stack on this machine now"
    ],
    [
      "POST /v1/usage (1 record), 64 connections",
      {
        url: base,
        connections: 64,
        headers,
        requests: [{ method: "POST", path: "/v1/usage", body: "{}", setupRequest: modules.single }]
      },
      1,
      "target ≥ 1,000 records/s"
    ],
    [
      `POST /v1/usage/batch (${fmt(BATCH)} records), 8 connections`,
      {
        url: base,
        connections: 8,
        headers,
        requests: [{ method: "POST", path: "/v1/usage/batch", body: "{}", setupRequest: modules.batch }]
      },
      BATCH,
      "target ≥ 20,000 records/s"
    ],
    [
      `GET /v1/usage summary (${fmt(RECORDS)} records in the period), 16 connections`,
      {
        url: `${base}/v1/usage?subscriptionId=${seeded}`,
        connections: 16,
        headers: { authorization: `Bearer ${key}` }
      },
      1,
      "target p99 ≤ 50 ms"
    ]
  ]
  const runs = new Map<string, Array<Measurement>>()
  for (let round = 1; round <= ROUNDS; round++) {
    for (const [label, options] of rows) {
      yield* Console.log(`… round ${round}/${ROUNDS}: ${label}, load ${loadAverage()}`)
      const m = yield* measure(options, {
        warmUpSeconds: WARM_UP_SECONDS,
        seconds: SECONDS,
        settleSeconds: 1
      })
      runs.set(label, [...(runs.get(label) ?? []), m])
    }
  }
  const of = (label: string) => runs.get(label) ?? []

  // The summary the GET rows answered is exact: check it once against the raw records.
  const check = yield* sql<{ readonly n: string; readonly total: string }>`SELECT count(*)::text AS n,
      sum(value)::text AS total FROM billing.usage_records
    WHERE subscription_id = ${seeded} AND occurred_at >= ${periodStart} AND occurred_at < ${periodEnd}`
  yield* Console.log(
    `  raw recount of the seeded period: ${check[0]?.n} records, quantity ${check[0]?.total}`
  )

  yield* printTable([
    ["metric", "measured (median)", "p50", "p99", "notes"],
    ...rows.map(([label, , perRequest, note]) => [
      label,
      label.startsWith("POST")
        ? `${fmt(median(of(label).map((m) => m.perSecond * perRequest)))} records/s`
        : `${fmt(median(of(label).map((m) => m.perSecond)))} req/s`,
      ms(median(of(label).map((m) => m.p50Ms))),
      ms(median(of(label).map((m) => m.p99Ms))),
      note
    ]),
    [
      "10,000 subscriptions due at once: renewed, invoiced, charged",
      "(after merge)",
      "",
      "",
      "SLOT for the subscriptions part: target ≤ 60 s, none charged twice"
    ]
  ])
  yield* printFootnotes(rows.flatMap(([label]) => of(label).map((m) => [label, m] as const)))
})

program.pipe(
  Effect.scoped,
  Effect.provide(benchApp()),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  NodeRuntime.runMain
)
