/**
 * `npm run bench:payments [-- --duration S] [--rounds N] [--payments N]` — the payments hot paths
 * (issue #19 item 9).
 *
 * It starts the whole app in this process as `npm run bench:catalog` does (the routes of
 * src/server.ts on 127.0.0.1 and an ephemeral port, HTTP rate limits off, logging at Warning, the
 * test processor), on a scratch database `cp_bench_<random>` of the DATABASE_URL server (this machine
 * only; dropped at the end) or, without DATABASE_URL, on embedded PGlite in memory. Then:
 *
 *   1. seed: `--payments` payments (default 1,000) through `POST /v1/payments`, for the reads;
 *   2. `--rounds` interleaved rounds (default 3) of `--duration` seconds (default 10) after a 2 s
 *      warm-up each, 32 connections (autocannon in a worker thread), an API key holding
 *      `write:payments` and `read:payments`:
 *        - `GET /health` (the floor of the HTTP stack),
 *        - `POST /v1/payments` with `pm_card_visa` (an intent created and confirmed: one charge at the
 *          test processor, captured at once),
 *        - `POST /v1/payment-intents` with `confirm: true` (the same through the intent route),
 *        - `GET /v1/payments/:id` over the seeded payments (each connection walks a shuffled sample);
 *      confirmed payments/s (2xx answers: every one is a `succeeded` intent) and p50/p99 are the
 *      medians of the rounds; each row's ratio to `/health` the median of the rounds' ratios.
 *
 * Target (issue #19): ≥ 300 confirmed payments/s. Numbers are only comparable on the same machine:
 * the load generator, the app and the database share its CPUs (the load average is printed).
 */
import { cpus } from "node:os"
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Logger, LogLevel } from "effect"
import { AppConfig } from "../../src/config.js"
import { DatabaseInfo } from "../../src/db/Database.js"
import {
  appBaseUrl,
  benchApp,
  benchArguments,
  benchCredentials,
  type CannonOptions,
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
  shuffle
} from "./support.js"

const USAGE = "usage: npm run bench:payments -- [--duration S] [--rounds N] [--payments N]"
const { integer } = benchArguments(["duration", "rounds", "payments"], USAGE)
const SECONDS = integer("duration", 10, 1, 600)
const ROUNDS = integer("rounds", 3, 1, 20)
const PAYMENTS = integer("payments", 1_000, 100, 100_000)

const WARM_UP_SECONDS = 2
const CONNECTIONS = 32
const SEED_CONCURRENCY = 16

const program = Effect.gen(function* () {
  const info = yield* DatabaseInfo
  const config = yield* AppConfig
  const base = yield* appBaseUrl
  yield* Console.log(
    `bench: ${info.kind === "postgres" ? `PostgreSQL (pool of ${config.databaseMaxConnections})` : "embedded PGlite (one connection, in this process)"}, ` +
      `${cpus().length} CPUs, Node ${process.version}, ${config.payments.processor} processor, ${ROUNDS} rounds of ` +
      `${SECONDS} s per row after ${WARM_UP_SECONDS} s of warm-up, load average ${loadAverage()}`
  )

  const { key } = yield* benchCredentials(base, "bench:payments", ["read:payments", "write:payments"])

  // 1. Seed payments over HTTP, for the reads.
  const paymentBody = { amount: 2_000, currency: "USD", paymentMethod: "pm_card_visa" }
  yield* Console.log(
    `… seeding ${fmt(PAYMENTS)} payments with POST /v1/payments, ${SEED_CONCURRENCY} at a time`
  )
  const ids = yield* Effect.forEach(
    Array.from({ length: PAYMENTS }, (_, i) => i),
    () =>
      Effect.flatMap(
        jsonRequest(`${base}/v1/payments`, { method: "POST", token: key, body: paymentBody }),
        (r) => {
          const id = field(r.body, "id")
          return r.status === 201 && field(r.body, "status") === "succeeded" && typeof id === "string"
            ? Effect.succeed(id)
            : Effect.dieMessage(`POST /v1/payments answered ${r.status}: ${JSON.stringify(r.body)}`)
        }
      ),
    { concurrency: SEED_CONCURRENCY }
  )
  const shuffled = shuffle(ids)

  // 2. Interleaved rounds.
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" }
  const rows: ReadonlyArray<readonly [string, Omit<CannonOptions, "duration">, string]> = [
    ["GET /health", { url: `${base}/health`, connections: CONNECTIONS }, "floor of the HTTP stack"],
    [
      "POST /v1/payments",
      {
        url: `${base}/v1/payments`,
        method: "POST",
        connections: CONNECTIONS,
        headers,
        body: JSON.stringify(paymentBody)
      },
      "create + confirm (pm_card_visa, captured); target ≥ 300/s"
    ],
    [
      "POST /v1/payment-intents confirm:true",
      {
        url: `${base}/v1/payment-intents`,
        method: "POST",
        connections: CONNECTIONS,
        headers,
        body: JSON.stringify({ ...paymentBody, confirm: true })
      },
      "the same through the intent route"
    ],
    [
      "GET /v1/payments/:id",
      {
        url: `${base}/v1/payments`,
        connections: CONNECTIONS,
        headers,
        requests: shuffled.map((id) => ({ method: "GET" as const, path: `/v1/payments/${id}` }))
      },
      `the ${fmt(PAYMENTS)} seeded payments in turn`
    ]
  ]
  const runs = new Map<string, Array<Measurement>>()
  for (let round = 1; round <= ROUNDS; round++) {
    for (const [label, options] of rows) {
      yield* Console.log(
        `… round ${round}/${ROUNDS}: ${label}, ${CONNECTIONS} connections, load ${loadAverage()}`
      )
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

  yield* printTable([
    ["metric", "measured (median)", "p50", "p99", "vs /health", "notes"],
    ...rows.map(([label, , note]) => [
      label,
      `${fmt(median(of(label).map((m) => m.perSecond)))} ${label.startsWith("POST") ? "payments/s" : "req/s"}`,
      ms(median(of(label).map((m) => m.p50Ms))),
      ms(median(of(label).map((m) => m.p99Ms))),
      label === "GET /health" ? "1" : ratioToHealth(label).toFixed(2),
      note
    ])
  ])
  yield* printFootnotes(rows.flatMap(([label]) => of(label).map((m) => [label, m] as const)))
})

program.pipe(
  Effect.scoped,
  Effect.provide(benchApp()),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  NodeRuntime.runMain
)
