/**
 * `npm run bench:catalog [-- --products N] [--duration S] [--rounds N] [--reservations N]` — the
 * catalog's hot paths (issue #18 item 9).
 *
 * It starts the whole app in this process as `npm run bench:customers` does (the routes of
 * src/server.ts on 127.0.0.1 and an ephemeral port, HTTP rate limits off, logging at Warning), on a
 * scratch database `cp_bench_<random>` of the DATABASE_URL server (this machine only; dropped at the
 * end) or, without DATABASE_URL, on embedded PGlite in memory. Then:
 *
 *   1. seed: N products (default 10,000) through the `Catalog.create` use case, 16 at a time, each
 *      tracked with 1,000,000 units in stock (one event + the read model row each);
 *   2. reads at 64 connections (autocannon in a worker thread), `--rounds` interleaved rounds
 *      (default 3) of `--duration` seconds (default 10) after a 2 s warm-up each, with an API key
 *      holding `read:products`: `GET /health` (the floor of the HTTP stack), `GET /v1/products/:id`
 *      over 1,000 of the N products (each connection walks a shuffled sample: pre-built requests,
 *      so the generator's own work per request stays small), and `GET /v1/products?limit=20`; req/s and
 *      p99 are the medians of the rounds, and each read's ratio to `/health` is the median of the
 *      rounds' ratios;
 *   3. reservations through the catalog's port (`CatalogPort.reserve`, what checkout creation calls
 *      inside its transaction), each for a new owner and 1 unit, in its own transaction, 32 at a
 *      time: `--reservations` (default 3,000) on ONE hot product, then as many spread over 1,000
 *      products (a random one per reservation): reservations/s and p50/p99 per reservation.
 *
 * Targets (issue #18): a single-product read ≥ 0.6 × `/health`, its p99 ≤ 50 ms; ≥ 500 spread
 * reservations/s. Numbers are only comparable on the same machine: the load generator, the app and
 * the database share its CPUs.
 */
import { cpus } from "node:os"
import { performance } from "node:perf_hooks"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Logger, LogLevel } from "effect"
import { Catalog } from "../../src/catalog/Catalog.js"
import { CatalogPort } from "../../src/catalog/index.js"
import { AppConfig } from "../../src/config.js"
import { DatabaseInfo } from "../../src/db/Database.js"
import { CredentialVerifier } from "../../src/http/Auth.js"
import * as Ids from "../../src/kernel/Ids.js"
import {
  appBaseUrl,
  benchApp,
  benchArguments,
  benchCredentials,
  type CannonOptions,
  fmt,
  jsonRequest,
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

const USAGE = "usage: npm run bench:catalog -- [--products N] [--duration S] [--rounds N] [--reservations N]"
const { integer } = benchArguments(["products", "duration", "rounds", "reservations"], USAGE)
const PRODUCTS = integer("products", 10_000, 1_000, 1_000_000)
const SECONDS = integer("duration", 10, 1, 600)
const ROUNDS = integer("rounds", 3, 1, 20)
const RESERVATIONS = integer("reservations", 3_000, 100, 1_000_000)

const WARM_UP_SECONDS = 2
const READ_CONNECTIONS = 64
const SEED_CONCURRENCY = 16
const RESERVE_CONCURRENCY = 32
const SPREAD_PRODUCTS = 1_000
/** Product reads cycle through this many of the products. */
const READ_SAMPLE = 1_000
const STOCK = 1_000_000

const program = Effect.gen(function* () {
  const info = yield* DatabaseInfo
  const config = yield* AppConfig
  const base = yield* appBaseUrl
  yield* Console.log(
    `bench: ${info.kind === "postgres" ? `PostgreSQL (pool of ${config.databaseMaxConnections})` : "embedded PGlite (one connection, in this process)"}, ` +
      `${cpus().length} CPUs, Node ${process.version}, ${fmt(PRODUCTS)} products, ${ROUNDS} rounds of ` +
      `${SECONDS} s per read after ${WARM_UP_SECONDS} s of warm-up, load average ${loadAverage()}`
  )

  const { accessToken, key } = yield* benchCredentials(base, "bench:catalog", ["read:products"])
  const actor = yield* (yield* CredentialVerifier).verify(accessToken)

  // 1. Seed through the use case.
  const catalog = yield* Catalog
  const ids: Array<string> = new Array(PRODUCTS)
  const latencies = new Float64Array(PRODUCTS)
  yield* Console.log(`… seeding ${fmt(PRODUCTS)} products with Catalog.create, ${SEED_CONCURRENCY} at a time`)
  const seedStarted = performance.now()
  yield* Effect.forEach(
    Array.from({ length: PRODUCTS }, (_, i) => i),
    (i) =>
      Effect.gen(function* () {
        const t0 = performance.now()
        const product = yield* catalog.create(actor, {
          name: `Bench product ${i}`,
          sku: `BENCH-${i}`,
          price: { amount: 1_000 + (i % 5_000), currency: "USD" },
          inventory: { tracked: true, stockedQuantity: STOCK }
        })
        latencies[i] = performance.now() - t0
        ids[i] = product.id
      }),
    { concurrency: SEED_CONCURRENCY, discard: true }
  ).pipe(Effect.catchAll((e) => Effect.dieMessage(`Catalog.create failed: ${JSON.stringify(e)}`)))
  const seedSeconds = (performance.now() - seedStarted) / 1000
  latencies.sort()

  // 2. Reads, interleaved rounds.
  const auth = { authorization: `Bearer ${key}` }
  const one = yield* jsonRequest(`${base}/v1/products/${ids[0]}`, { token: key })
  if (one.status !== 200) return yield* Effect.dieMessage(`GET /v1/products/:id answered ${one.status}`)
  // Pre-built requests the generator cycles through: a `setupRequest` function drawing a random id
  // per request costs the generator's thread more than the server spends answering (it bounded the
  // run below the server), so each connection walks a shuffled sample of the products instead.
  const shuffled = shuffle(ids)
  const sample = shuffled.slice(0, READ_SAMPLE)
  const reads: ReadonlyArray<readonly [string, Omit<CannonOptions, "duration">]> = [
    ["GET /health", { url: `${base}/health`, connections: READ_CONNECTIONS }],
    [
      "GET /v1/products/:id",
      {
        url: `${base}/v1/products`,
        connections: READ_CONNECTIONS,
        headers: auth,
        requests: sample.map((id) => ({ method: "GET" as const, path: `/v1/products/${id}` }))
      }
    ],
    [
      "GET /v1/products?limit=20",
      { url: `${base}/v1/products?limit=20`, connections: READ_CONNECTIONS, headers: auth }
    ]
  ]
  const runs = new Map<string, Array<Measurement>>()
  for (let round = 1; round <= ROUNDS; round++) {
    for (const [label, options] of reads) {
      yield* Console.log(`… round ${round}/${ROUNDS}: ${label}, ${READ_CONNECTIONS} connections`)
      const m = yield* measure(options, {
        warmUpSeconds: WARM_UP_SECONDS,
        seconds: SECONDS,
        settleSeconds: 1
      })
      runs.set(label, [...(runs.get(label) ?? []), m])
    }
  }
  const of = (label: string) => runs.get(label) ?? []
  const health = of("GET /health")
  const ratioToHealth = (label: string) =>
    median(of(label).map((m, i) => m.perSecond / (health[i]?.perSecond ?? Number.NaN)))

  // 3. Reservations through the port, each for a new owner in its own transaction.
  const port = yield* CatalogPort
  const metadata = { actor: { type: actor.type, id: actor.id } }
  const reserveMany = (label: string, pick: () => string) =>
    Effect.gen(function* () {
      yield* Console.log(`… ${fmt(RESERVATIONS)} reservations, ${label}, ${RESERVE_CONCURRENCY} at a time`)
      const times = new Float64Array(RESERVATIONS)
      const started = performance.now()
      yield* Effect.forEach(
        Array.from({ length: RESERVATIONS }, (_, i) => i),
        (i) =>
          Effect.gen(function* () {
            const owner = yield* Ids.make("chk")
            const t0 = performance.now()
            yield* port.reserve(owner, [{ productId: pick(), quantity: 1 }], metadata)
            times[i] = performance.now() - t0
          }),
        { concurrency: RESERVE_CONCURRENCY, discard: true }
      ).pipe(Effect.catchAll((e) => Effect.dieMessage(`CatalogPort.reserve failed: ${JSON.stringify(e)}`)))
      const seconds = (performance.now() - started) / 1000
      times.sort()
      return { perSecond: RESERVATIONS / seconds, p50: quantile(times, 0.5), p99: quantile(times, 0.99) }
    })
  const hotId = ids[0] ?? ""
  const hot = yield* reserveMany("one hot product", () => hotId)
  const spreadIds = ids.slice(0, SPREAD_PRODUCTS)
  const spread = yield* reserveMany(
    `spread over ${fmt(spreadIds.length)} products`,
    () => spreadIds[Math.floor(Math.random() * spreadIds.length)] ?? hotId
  )

  const readRow = (label: string, note: string) => {
    const ms50 = median(of(label).map((m) => m.p50Ms))
    const ms99 = median(of(label).map((m) => m.p99Ms))
    return [
      label,
      `${fmt(median(of(label).map((m) => m.perSecond)))} req/s`,
      ms(ms50),
      ms(ms99),
      label === "GET /health" ? "1" : ratioToHealth(label).toFixed(2),
      note
    ]
  }
  yield* printTable([
    ["metric", "measured (median)", "p50", "p99", "vs /health", "notes"],
    [
      `seed: Catalog.create × ${fmt(PRODUCTS)}, ${SEED_CONCURRENCY} at a time`,
      `${fmt(PRODUCTS / seedSeconds)} creates/s`,
      ms(quantile(latencies, 0.5)),
      ms(quantile(latencies, 0.99)),
      "",
      `${fmt(seedSeconds)} s in all`
    ],
    readRow("GET /health", "floor of the HTTP stack"),
    readRow(
      "GET /v1/products/:id",
      `${fmt(READ_SAMPLE)} of the ${fmt(PRODUCTS)} in turn; target ≥ 0.6, p99 ≤ 50 ms`
    ),
    readRow("GET /v1/products?limit=20", "first page, newest first"),
    [
      "CatalogPort.reserve, one hot product",
      `${fmt(hot.perSecond)} /s`,
      ms(hot.p50),
      ms(hot.p99),
      "",
      `${RESERVE_CONCURRENCY} in flight, 1 unit, new owner each`
    ],
    [
      `CatalogPort.reserve, spread over ${fmt(SPREAD_PRODUCTS)}`,
      `${fmt(spread.perSecond)} /s`,
      ms(spread.p50),
      ms(spread.p99),
      "",
      "target ≥ 500/s"
    ]
  ])
  yield* printFootnotes(reads.flatMap(([label]) => of(label).map((m) => [label, m] as const)))
})

program.pipe(
  Effect.scoped,
  Effect.provide(benchApp()),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  NodeRuntime.runMain
)
