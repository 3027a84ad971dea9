/**
 * `npm run bench:billing [-- --duration S] [--rounds N] [--records N] [--renewals N]` — billing's hot paths (issue
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
 *      records/s (2xx answers × records per request) and p50/p99 are the medians of the rounds;
 *      each round starts with `VACUUM (ANALYZE)` of the scratch database (`vacuumPhase` in
 *      support.ts: what autovacuum, off on this machine's PostgreSQL, does every minute on a server);
 *
 *   4. renewals (`--renewals`, default 10,000; 0 skips): that many daily subscriptions created through
 *      the `Billing.create` use case (each charged its first period, 16 at a time, over 100 customers),
 *      then two renewal workers (`billingRenewals`, what a `ROLE=worker` process runs, 8 at a time
 *      each) started, after a `VACUUM (ANALYZE)`, on a clock moved past every period end, so all of
 *      them fall due at once; timed
 *      until every one is renewed, invoiced and paid. Then counted at the test processor: exactly one
 *      renewal charge per subscription.
 *
 * Targets (issue #21): ≥ 1,000 single records/s, ≥ 20,000 batched records/s, summary p99 ≤ 50 ms with
 * 1,000,000 records in the period; 10,000 renewals due at once done in ≤ 60 s, none charged twice.
 * Numbers are only comparable on the same machine: the load generator, the app and the database
 * share its CPUs.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { cpus, tmpdir } from "node:os"
import { join } from "node:path"
import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Console, Effect, Fiber, Logger, LogLevel, Schema } from "effect"
import { NewSubscription } from "../../src/billing/Api.js"
import { Billing } from "../../src/billing/Billing.js"
import { billingRenewals } from "../../src/billing/renewals.js"
import { Usage } from "../../src/billing/usage/Usage.js"
import { AppConfig } from "../../src/config.js"
import { DatabaseInfo } from "../../src/db/Database.js"
import type { AuthenticatedActor } from "../../src/http/Auth.js"
import * as Ids from "../../src/kernel/Ids.js"
import { PaymentProcessor } from "../../src/payments/processor.js"
import { makeShiftedClock } from "../../test/support/clock.js"
import { cpuTicks, MICROS_PER_TICK } from "./procs.js"
import {
  appBaseUrl,
  benchApp,
  benchArguments,
  benchCredentials,
  type CannonOptions,
  cpuPerAnswer,
  field,
  fmt,
  jsonRequest,
  loadAverage,
  type Measurement,
  measure,
  median,
  ms,
  printFootnotes,
  printTable,
  vacuumPhase
} from "./support.js"

const USAGE = "usage: npm run bench:billing -- [--duration S] [--rounds N] [--records N] [--renewals N]"
const { integer } = benchArguments(["duration", "rounds", "records", "renewals"], USAGE)
const SECONDS = integer("duration", 10, 1, 600)
const ROUNDS = integer("rounds", 3, 1, 20)
const RECORDS = integer("records", 1_000_000, 0, 10_000_000)
const RENEWALS = integer("renewals", 10_000, 0, 100_000)

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

const RENEWAL_CUSTOMERS = 100
const RENEWAL_WORKERS = 2

/**
 * Phase 4: `count` daily subscriptions created through the use case, then renewed all at once by two
 * renewal workers on a clock moved past every period end. Seconds until all are renewed and paid,
 * and the renewal charges the processor recorded per subscription.
 */
const renewalPhase = (base: string, accessToken: string, count: number) =>
  Effect.gen(function* () {
    const billing = yield* Billing
    const sql = yield* SqlClient.SqlClient
    const processor = yield* PaymentProcessor
    const product = yield* jsonRequest(`${base}/v1/products`, {
      method: "POST",
      token: accessToken,
      body: {
        name: "Daily plan",
        price: { amount: 700, currency: "USD", type: "recurring", recurring: { interval: "day" } }
      }
    })
    const productId = field(product.body, "id")
    if (product.status !== 201 || typeof productId !== "string")
      return yield* Effect.dieMessage(`POST /v1/products answered ${product.status}`)
    const customers = yield* Effect.forEach(
      Array.from({ length: RENEWAL_CUSTOMERS }, (_, i) => i),
      (i) =>
        Effect.flatMap(
          jsonRequest(`${base}/user`, {
            method: "POST",
            token: accessToken,
            body: {
              email: `renewals.${i}.${Date.now()}@example.com`,
              firstName: "Renewal",
              lastName: `No${i}`
            }
          }),
          (r) => {
            const id = field(r.body, "id")
            return r.status === 201 && typeof id === "string"
              ? Effect.succeed(id)
              : Effect.dieMessage(`POST /user answered ${r.status}`)
          }
        ),
      { concurrency: 8 }
    )
    yield* Console.log(
      `… renewals: creating ${fmt(count)} daily subscriptions with Billing.create, 16 at a time`
    )
    const createdStarted = Date.now()
    const created = yield* Effect.forEach(
      Array.from({ length: count }, (_, i) => i),
      (i) =>
        Effect.flatMap(
          Schema.decodeUnknown(NewSubscription)({
            customerId: customers[i % customers.length],
            productId,
            paymentMethod: "pm_card_visa",
            quantity: 1 + (i % 3)
          }),
          (input) => billing.create(SEED_ACTOR, input)
        ),
      { concurrency: 16 }
    ).pipe(Effect.catchAll((e) => Effect.dieMessage(`Billing.create failed: ${JSON.stringify(e)}`)))
    const createSeconds = (Date.now() - createdStarted) / 1000
    yield* Console.log(
      `  created in ${createSeconds.toFixed(1)} s (${fmt(count / createSeconds)}/s, each charged once)`
    )

    const lastEnd = Math.max(...created.map((s) => s.currentPeriodEnd.getTime()))
    // The renewals' paid invoices: the only ones created on the workers' clock (past every period
    // end), so a range of invoices_status_created_idx. The count runs beside the renewals, on the
    // same CPUs: it reads as little as it can, and about once a second until the end is near.
    const renewedCount = Effect.map(
      sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM billing.invoices
        WHERE status = 'paid' AND created_at >= ${new Date(lastEnd)}`,
      (rows) => rows[0]?.n ?? 0
    )
    // The workers' time: just past the last period end, so every renewal is due at once.
    yield* vacuumPhase("after the creations")
    const ahead = makeShiftedClock(lastEnd + 1000 - Date.now()).clock
    yield* Console.log(`… renewals: ${RENEWAL_WORKERS} workers, ${fmt(count)} renewals due at once`)
    // CPU of this process (the workers) and of the database's backends (local ones, from /proc) over
    // the renewals: what bounds their rate on a machine whose cores both share.
    const backends = Effect.map(
      sql<{ readonly pid: number }>`SELECT pid FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()`,
      (rows) => new Map(rows.map((r) => [r.pid, cpuTicks(r.pid)] as const))
    )
    // Commits in the database over the renewals (pg_stat_database, flushed by the statistics
    // collector at least every 500 ms: read after a pause).
    const commits = Effect.map(
      sql<{ readonly n: string }>`SELECT xact_commit::text AS n FROM pg_stat_database
        WHERE datname = current_database()`,
      (rows) => Number(rows[0]?.n ?? 0)
    )
    const commitsBefore = yield* commits
    const pgBefore = yield* backends
    const nodeBefore = process.cpuUsage()
    const started = Date.now()
    const workers = yield* Effect.forEach(Array.from({ length: RENEWAL_WORKERS }), () =>
      Effect.fork(billingRenewals().run.pipe(Effect.withClock(ahead)))
    )
    let done = 0
    while (done < count && Date.now() - started < 30 * 60_000) {
      yield* Effect.sleep(done < count * 0.95 ? "1 second" : "100 millis")
      done = yield* renewedCount
    }
    const seconds = (Date.now() - started) / 1000
    const nodeSpent = process.cpuUsage(nodeBefore)
    const pgAfter = yield* backends
    let pgTicks = 0
    for (const [pid, t] of pgAfter) pgTicks += t - (pgBefore.get(pid) ?? 0)
    const cpuPerRenewal = {
      nodeMs: (nodeSpent.user + nodeSpent.system) / 1000 / Math.max(1, done),
      pgMs: (pgTicks * MICROS_PER_TICK) / 1000 / Math.max(1, done)
    }
    yield* Effect.forEach(workers, Fiber.interrupt)
    yield* Effect.sleep("1 second")
    const commitsPerRenewal = ((yield* commits) - commitsBefore) / Math.max(1, done)
    const calls = processor.ledger._tag === "None" ? [] : yield* processor.ledger.value.calls("renewal:")
    // Charges per renewal key (`renewal:<subscription>:<periodStart>`): each subscription's renewal
    // period must have exactly one.
    const charges = new Map<string, number>()
    for (const c of calls)
      if (c.operation === "authorize" && c.result._tag === "Authorized") {
        const key =
          /^renewal:sub_[^:]+:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/.exec(c.idempotencyKey)?.[0] ?? ""
        charges.set(key, (charges.get(key) ?? 0) + 1)
      }
    const renewalCharges = created.map(
      (s) => charges.get(`renewal:${s.id}:${s.currentPeriodEnd.toISOString()}`) ?? 0
    )
    const once = renewalCharges.filter((n) => n === 1).length
    const twice = renewalCharges.filter((n) => n > 1).length
    return { seconds, renewed: done, once, twice, createSeconds, cpuPerRenewal, commitsPerRenewal }
  })

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
  const { accessToken, key } = yield* benchCredentials(base, "bench:billing", ["write:usage", "read:usage"])

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

  // CPU of this process (the service, and the load generator's workers) and of the database's
  // backends, per answer: which of the two a row is bound by on a machine whose cores both share.
  const cpuReading = Effect.map(
    sql<{ readonly pid: number }>`SELECT pid FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    (rows) => {
      const used = process.cpuUsage()
      // Per backend: one that ends during the run drops out instead of counting negative.
      return Object.fromEntries([
        ["node", used.user + used.system],
        ...rows.map((r) => [`pg:${r.pid}`, cpuTicks(r.pid) * MICROS_PER_TICK] as const)
      ])
    }
  ).pipe(
    // Read as the load stops: requests cut off then have their statements cancelled by backend pid
    // (@effect/sql-pg), and a late cancel can land on this query's connection. Retried; a reading
    // that still fails shows as NaN rather than ending the bench.
    Effect.retry({ times: 3 }),
    Effect.orElseSucceed((): Readonly<Record<string, number>> => ({}))
  )
  // 2. Seed the summary's subscription through the use case.
  yield* Console.log(
    `… seeding ${fmt(RECORDS)} records into one period (batches of ${BATCH}, ${SEED_CONCURRENCY} at a time)`
  )
  const span = now - periodStart.getTime() - 1000
  const seedStarted = Date.now()
  const seedCpuBefore = yield* cpuReading
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
  const seedCpu = nodeAndPg(cpuPerAnswer(seedCpuBefore, yield* cpuReading, RECORDS))
  yield* Console.log(
    `  seeded in ${seedSeconds.toFixed(1)} s (${fmt(RECORDS / seedSeconds)} records/s in-process; CPU per record: ` +
      `${seedCpu.node.toFixed(0)} µs node, ${seedCpu.pg.toFixed(0)} µs PostgreSQL)`
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
    yield* vacuumPhase(round === 1 ? "after the seed" : `after round ${round - 1}`)
    for (const [label, options] of rows) {
      yield* Console.log(`… round ${round}/${ROUNDS}: ${label}, load ${loadAverage()}`)
      const m = yield* measure(
        options,
        {
          warmUpSeconds: WARM_UP_SECONDS,
          seconds: SECONDS,
          settleSeconds: 1
        },
        cpuReading
      )
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

  const renewals = RENEWALS === 0 ? undefined : yield* renewalPhase(base, accessToken, RENEWALS)

  yield* printTable([
    ["metric", "measured (median)", "p50", "p99", "notes"],
    ...rows.map(([label, , perRequest, note]) => [
      label,
      label.startsWith("POST")
        ? `${fmt(median(of(label).map((m) => m.perSecond * perRequest)))} records/s`
        : `${fmt(median(of(label).map((m) => m.perSecond)))} req/s`,
      ms(median(of(label).map((m) => m.p50Ms))),
      ms(median(of(label).map((m) => m.p99Ms))),
      `${note}; CPU per ${label.startsWith("POST") ? "record" : "request"}: ${cpuNote(of(label), perRequest)}`
    ]),
    renewals === undefined
      ? ["subscriptions due at once: renewed, invoiced, charged", "(skipped: --renewals 0)", "", "", ""]
      : [
          `${fmt(RENEWALS)} subscriptions due at once: renewed, invoiced, charged`,
          `${renewals.seconds.toFixed(1)} s (${fmt(renewals.renewed / renewals.seconds)}/s)`,
          "",
          "",
          `target ≤ 60 s, none twice: ${fmt(renewals.renewed)} renewed, ${fmt(renewals.once)} charged once, ` +
            `${fmt(renewals.twice)} twice (creating them: ${renewals.createSeconds.toFixed(0)} s); CPU per renewal: ` +
            `${renewals.cpuPerRenewal.nodeMs.toFixed(2)} ms node, ${renewals.cpuPerRenewal.pgMs.toFixed(2)} ms PostgreSQL, ` +
            `${renewals.commitsPerRenewal.toFixed(2)} commits`
        ]
  ])
  yield* printFootnotes(rows.flatMap(([label]) => of(label).map((m) => [label, m] as const)))
})

/** A row's CPU per answer, summed for the service process and for the database's backends (NaN: none read). */
const nodeAndPg = (perAnswer: Readonly<Record<string, number>>) => {
  const sum = (pick: (key: string) => boolean) => {
    const entries = Object.entries(perAnswer).filter(([key]) => pick(key))
    return entries.length === 0 ? Number.NaN : entries.reduce((total, [, v]) => total + v, 0)
  }
  return { node: sum((k) => k === "node"), pg: sum((k) => k.startsWith("pg:")) }
}

/** Median CPU µs per record (or request) of the rows' rounds: the service process and the database. */
const cpuNote = (measurements: ReadonlyArray<Measurement>, perRequest: number) => {
  const of = (side: "node" | "pg") =>
    median(measurements.map((m) => nodeAndPg(m.cpuPerAnswer ?? {})[side] / perRequest)).toFixed(0)
  return `${of("node")} µs node, ${of("pg")} µs PostgreSQL`
}

program.pipe(
  Effect.scoped,
  Effect.provide(benchApp()),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  NodeRuntime.runMain
)
