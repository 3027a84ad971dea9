/**
 * `npm run bench:checkout [-- --duration S] [--rounds N] [--products N]` — the purchase path
 * (issue #20 item 8).
 *
 * It starts the whole app in this process as `npm run bench:payments` does (the routes of
 * src/server.ts on 127.0.0.1 and an ephemeral port, HTTP rate limits off, logging at Warning, the
 * test processor, no background processors: every purchase completes in its own requests), on a
 * scratch database `cp_bench_<random>` of the DATABASE_URL server (this machine only; dropped at the
 * end) or, without DATABASE_URL, on embedded PGlite in memory. Then:
 *
 *   1. seed: `--products` products (default 1,000) through `Catalog.create`, each tracked with
 *      1,000,000 units, prices 10.00–59.99 USD;
 *   2. `--rounds` interleaved rounds (default 3) of `--duration` seconds (default 10), each after a
 *      2 s warm-up, with an API key holding `write:checkouts`, `read:checkouts` and `read:orders`:
 *        - `GET /health` (autocannon, 32 connections: the floor of the HTTP stack);
 *        - full purchases, 32 at a time, from a worker thread (scripts/bench/purchaser.mjs, node:http
 *          keep-alive connections: the load generator does not share the server's event loop):
 *          `POST /v1/checkouts` (a guest email, one line of a random product: the reservation, the price snapshot and the payment intent in one transaction)
 *          then `POST /v1/checkouts/:id/confirm {paymentMethod: "pm_card_visa"}` (the charge at the
 *          test processor, captured, and the completion: the checkout completed, the hold converted,
 *          the order placed with the next display id); a purchase counts when the confirm answers
 *          `complete` with an `orderId`; p50/p99 are per purchase (both requests);
 *        - `GET /v1/orders/:id` (autocannon, 32 connections) over the orders placed so far;
 *      medians of the rounds; each read's ratio to `/health` the median of the rounds' ratios.
 *
 * Targets (issue #20): ≥ 150 purchases/s, p99 ≤ 250 ms; order read ≥ 0.6 × `/health`. Numbers are
 * only comparable on the same machine: the load generator, the app and the database share its CPUs
 * (the load average is printed).
 */
import { cpus } from "node:os"
import { Worker } from "node:worker_threads"
import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Console, Effect, Logger, LogLevel } from "effect"
import { Catalog } from "../../src/catalog/Catalog.js"
import { AppConfig } from "../../src/config.js"
import { DatabaseInfo } from "../../src/db/Database.js"
import { CredentialVerifier } from "../../src/http/Auth.js"
import { cpuTicks, MICROS_PER_TICK } from "./procs.js"
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
  printTable,
  quantile,
  shuffle
} from "./support.js"

const USAGE = "usage: npm run bench:checkout -- [--duration S] [--rounds N] [--products N]"
const { integer } = benchArguments(["duration", "rounds", "products"], USAGE)
const SECONDS = integer("duration", 10, 1, 600)
const ROUNDS = integer("rounds", 3, 1, 20)
const PRODUCTS = integer("products", 1_000, 10, 100_000)

const WARM_UP_SECONDS = 2
const CONNECTIONS = 32
const SEED_CONCURRENCY = 16
const STOCK = 1_000_000

/** What purchaser.mjs posts back. */
interface PurchaserReport {
  readonly latencies: ReadonlyArray<number>
  readonly orderIds: ReadonlyArray<string>
  readonly failures: number
  readonly elapsedMs: number
}

interface PurchaseRun {
  readonly perSecond: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly failures: number
  readonly orderIds: ReadonlyArray<string>
}

const program = Effect.gen(function* () {
  const info = yield* DatabaseInfo
  const config = yield* AppConfig
  const base = yield* appBaseUrl
  yield* Console.log(
    `bench: ${info.kind === "postgres" ? `PostgreSQL (pool of ${config.databaseMaxConnections})` : "embedded PGlite (one connection, in this process)"}, ` +
      `${cpus().length} CPUs, Node ${process.version}, ${config.payments.processor} processor, ${fmt(PRODUCTS)} products, ` +
      `${ROUNDS} rounds of ${SECONDS} s per row after ${WARM_UP_SECONDS} s of warm-up, load average ${loadAverage()}`
  )

  const { accessToken, key } = yield* benchCredentials(base, "bench:checkout", [
    "write:checkouts",
    "read:checkouts",
    "read:orders"
  ])
  const actor = yield* (yield* CredentialVerifier).verify(accessToken)

  // 1. Seed products through the use case.
  const catalog = yield* Catalog
  yield* Console.log(`… seeding ${fmt(PRODUCTS)} products with Catalog.create, ${SEED_CONCURRENCY} at a time`)
  const productIds = yield* Effect.forEach(
    Array.from({ length: PRODUCTS }, (_, i) => i),
    (i) =>
      Effect.map(
        catalog.create(actor, {
          name: `Bench product ${i}`,
          sku: `BENCH-CHK-${i}`,
          price: { amount: 1_000 + (i % 5_000), currency: "USD" },
          inventory: { tracked: true, stockedQuantity: STOCK }
        }),
        (product) => product.id
      ),
    { concurrency: SEED_CONCURRENCY }
  ).pipe(Effect.catchAll((e) => Effect.dieMessage(`Catalog.create failed: ${JSON.stringify(e)}`)))

  // `seconds` of purchases, `CONNECTIONS` at a time, driven from a worker thread (purchaser.mjs).
  let round = 0
  const purchases = (seconds: number) =>
    Effect.async<PurchaseRun, Error>((resume) => {
      const worker = new Worker(new URL("./purchaser.mjs", import.meta.url), {
        workerData: { base, key, productIds, seconds, connections: CONNECTIONS, guestPrefix: ++round }
      })
      worker.once("message", (message: PurchaserReport) => {
        const sorted = Float64Array.from(message.latencies).sort()
        resume(
          Effect.succeed({
            perSecond: message.latencies.length / (message.elapsedMs / 1000),
            p50Ms: quantile(sorted, 0.5),
            p99Ms: quantile(sorted, 0.99),
            failures: message.failures,
            orderIds: message.orderIds
          })
        )
      })
      worker.once("error", (error) => resume(Effect.fail(error)))
      return Effect.promise(() => worker.terminate())
    })

  // 2. Interleaved rounds.
  const headers = { authorization: `Bearer ${key}` }
  const healthRuns: Array<Measurement> = []
  const purchaseRuns: Array<PurchaseRun> = []
  const orderReads: Array<Measurement> = []
  const placed: Array<string> = []
  // CPU over the measured purchases: this process (the app and the load's worker thread) and the
  // database's backends serving it (from /proc; embedded PGlite runs in this process).
  const nodeMsPerPurchase: Array<number> = []
  const pgMsPerPurchase: Array<number> = []
  const sql = yield* SqlClient.SqlClient
  const backendTicks =
    info.kind === "postgres"
      ? Effect.map(
          sql<{ readonly pid: number }>`SELECT pid FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid()`,
          (rows) => new Map(rows.map((r) => [r.pid, cpuTicks(r.pid)] as const))
        )
      : Effect.succeed(new Map<number, number>())
  for (let round = 1; round <= ROUNDS; round++) {
    yield* Console.log(
      `… round ${round}/${ROUNDS}: GET /health, ${CONNECTIONS} connections, load ${loadAverage()}`
    )
    healthRuns.push(
      yield* measure(
        { url: `${base}/health`, connections: CONNECTIONS },
        { warmUpSeconds: WARM_UP_SECONDS, seconds: SECONDS, settleSeconds: 1 }
      )
    )
    yield* Console.log(
      `… round ${round}/${ROUNDS}: purchases, ${CONNECTIONS} at a time, load ${loadAverage()}`
    )
    placed.push(...(yield* purchases(WARM_UP_SECONDS)).orderIds)
    const before = { node: cpuTicks(process.pid), pg: yield* backendTicks }
    const run = yield* purchases(SECONDS)
    const after = { node: cpuTicks(process.pid), pg: yield* backendTicks }
    let pgTicks = 0
    for (const [pid, t] of after.pg) pgTicks += t - (before.pg.get(pid) ?? 0)
    const bought = run.orderIds.length
    nodeMsPerPurchase.push(((after.node - before.node) * MICROS_PER_TICK) / 1000 / bought)
    pgMsPerPurchase.push((pgTicks * MICROS_PER_TICK) / 1000 / bought)
    purchaseRuns.push(run)
    placed.push(...run.orderIds)
    yield* Console.log(`… round ${round}/${ROUNDS}: GET /v1/orders/:id, ${CONNECTIONS} connections`)
    const sample = shuffle(placed).slice(0, 1_000)
    const reads: Omit<CannonOptions, "duration"> = {
      url: `${base}/v1/orders`,
      connections: CONNECTIONS,
      headers,
      requests: sample.map((id) => ({ method: "GET" as const, path: `/v1/orders/${id}` }))
    }
    orderReads.push(
      yield* measure(reads, { warmUpSeconds: WARM_UP_SECONDS, seconds: SECONDS, settleSeconds: 1 })
    )
  }

  const ratio = (runs: ReadonlyArray<Measurement>) =>
    median(runs.map((m, i) => m.perSecond / (healthRuns[i]?.perSecond ?? Number.NaN)))
  const failed = purchaseRuns.reduce((n, r) => n + r.failures, 0)
  yield* printTable([
    ["metric", "measured (median)", "p50", "p99", "vs /health", "notes"],
    [
      "GET /health",
      `${fmt(median(healthRuns.map((m) => m.perSecond)))} req/s`,
      ms(median(healthRuns.map((m) => m.p50Ms))),
      ms(median(healthRuns.map((m) => m.p99Ms))),
      "1",
      "floor of the HTTP stack"
    ],
    [
      "purchase (checkout + confirm)",
      `${fmt(median(purchaseRuns.map((r) => r.perSecond)))} purchases/s`,
      ms(median(purchaseRuns.map((r) => r.p50Ms))),
      ms(median(purchaseRuns.map((r) => r.p99Ms))),
      "",
      `${CONNECTIONS} at a time; target ≥ 150/s, p99 ≤ 250 ms${failed > 0 ? `; ${fmt(failed)} not completed` : ""}; ` +
        `CPU per purchase: ${median(nodeMsPerPurchase).toFixed(1)} ms this process (app and load), ` +
        (info.kind === "postgres" ? `${median(pgMsPerPurchase).toFixed(1)} ms PostgreSQL` : "PGlite in it")
    ],
    [
      "GET /v1/orders/:id",
      `${fmt(median(orderReads.map((m) => m.perSecond)))} req/s`,
      ms(median(orderReads.map((m) => m.p50Ms))),
      ms(median(orderReads.map((m) => m.p99Ms))),
      ratio(orderReads).toFixed(2),
      "up to 1,000 placed orders in turn; target ≥ 0.6 × /health"
    ]
  ])
  yield* Console.log(`orders placed: ${fmt(placed.length)}`)
  yield* printFootnotes([
    ...healthRuns.map((m) => ["GET /health", m] as const),
    ...orderReads.map((m) => ["GET /v1/orders/:id", m] as const)
  ])
})

program.pipe(
  Effect.scoped,
  Effect.provide(benchApp()),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  NodeRuntime.runMain
)
