/**
 * `npm run bench:webhooks` — webhook delivery against a loopback receiver and a real database: how
 * fast a queue of public events is fanned out and delivered, and how long one event waits between
 * its commit and the first attempt reaching each endpoint, with and without a hung endpoint.
 *
 * In this process: a plain `node:http` receiver on 127.0.0.1 (paths under `/ok/` answer 200 at once,
 * paths under `/hang/` are read and never answered) that records, per request, the path, the
 * `X-Service-Delivery` header, the body's `id` and the time it arrived; and the services of
 * src/services.ts over a scratch database `cp_bench_<random>` of the DATABASE_URL server (this
 * machine only; dropped at the end) or, without DATABASE_URL, embedded PGlite in memory, with
 * `webhooks.allowPrivate` (the receiver is on loopback). Endpoints are registered through
 * `Webhooks.create`; public events (`order.created`, an order snapshot) are published the way a
 * command's transaction writes them: `insertPublicEvents` in a transaction, then the in-process
 * append wake-up (`makeTransact`).
 *
 *   1. throughput: 4 endpoints; `BENCH_EVENTS` (20,000) events queued in chunks while no processor
 *      runs; then the dispatcher (`webhookDispatcher`) and the attempt worker (`webhookDeliveryWorker`)
 *      are started under the Supervisor and the clock runs until the receiver has every one of the
 *      events × 4 deliveries. Also: when the fan-out finished (the last `webhooks.deliveries` row),
 *      lost (event, endpoint) pairs and duplicate receipts. `BENCH_SPLIT=1` starts the dispatcher
 *      alone first and the worker only once every delivery exists, to time the two steps apart.
 *   2. idle latency: those endpoints disabled, 4 fresh ones; `BENCH_LATENCY_EVENTS` (300) events
 *      published one every `BENCH_INTERVAL_MS` (100) ms with the processors running on an empty
 *      queue — a trickle the service keeps up with, so this is latency, not queueing (the
 *      throughput run measures the saturated service); per (event, endpoint), publish commit →
 *      first attempt received.
 *   3. one endpoint hanging: the same with 3 fresh healthy endpoints and 1 that never answers.
 *
 * and prints one table with the targets, then what the throughput run cost per delivery: SQL
 * statements (every one the pg driver sends is counted, by a wrapper on `pg.Client.prototype.query`;
 * `BENCH_SQL_TOP=1` also lists them by text), CPU of this process and, for a server on this machine,
 * CPU of the database's backends (from /proc). Nothing is asserted; the process exits by itself.
 */
import { readFileSync } from "node:fs"
import { createServer, type IncomingMessage } from "node:http"
import type { Socket } from "node:net"
import { cpus } from "node:os"
import { performance } from "node:perf_hooks"
import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Console, Duration, Effect, Layer, Logger, LogLevel } from "effect"
import pg from "pg"
import { uuidv7 } from "../../src/base/Uuid.js"
import { AppConfig, type AppConfigShape } from "../../src/config.js"
import { DatabaseInfo } from "../../src/db/Database.js"
import { insertPublicEvents, type PublicEventRow } from "../../src/eventstore/PublicEvents.js"
import type { AuthenticatedActor } from "../../src/http/Auth.js"
import { publicEventId } from "../../src/kernel/CommandRunner.js"
import * as Ids from "../../src/kernel/Ids.js"
import { makeTransact } from "../../src/kernel/UseCase.js"
import { Supervisor } from "../../src/processors/Supervisor.js"
import { projections } from "../../src/registry.js"
import { servicesLayer } from "../../src/services.js"
import { webhookDeliveryWorker, webhookDispatcher } from "../../src/webhooks/delivery.js"
import { Webhooks } from "../../src/webhooks/Webhooks.js"
import { fmt, loadAverage, ms, printFootnotes, printTable, scratchConfig } from "./support.js"

// ---------------------------------------------------------------------------------------------------
// Settings

/** `BENCH_EVENTS=2000`-style integer settings; anything else stops the run before it starts. */
const intSetting = (name: string, fallback: number, range: readonly [number, number]) => {
  const text = process.env[name]?.trim() ?? ""
  if (text === "") return fallback
  const value = Number(text)
  if (Number.isInteger(value) && value >= range[0] && value <= range[1]) return value
  console.error(`${name}=${text}: expected an integer in [${range[0]}, ${range[1]}]`)
  return process.exit(2)
}

/** Events queued before the processors start (each goes to every endpoint). */
const EVENTS = intSetting("BENCH_EVENTS", 20_000, [1, 1_000_000])
/** Events published one by one in each latency run. */
const LATENCY_EVENTS = intSetting("BENCH_LATENCY_EVENTS", 300, [1, 100_000])
/** The throughput run stops waiting after this long (and reports what it measured so far). */
const MAX_SECONDS = intSetting("BENCH_MAX_SECONDS", 240, [10, 86_400])
const SPLIT = process.env.BENCH_SPLIT?.trim() === "1"
const SQL_TOP = process.env.BENCH_SQL_TOP?.trim() === "1"
const ENDPOINTS = 4
/** The queue is written this many events per transaction. */
const QUEUE_CHUNK = 500
/**
 * One event every this many ms in the latency runs (4 endpoints: 40 deliveries/s at 100 ms): idle
 * means no backlog; a faster rate than the throughput run sustains measures the queue instead.
 */
const PUBLISH_EVERY_MS = intSetting("BENCH_INTERVAL_MS", 100, [1, 10_000])
/** A run stops waiting when the receiver got nothing new for this long (and reports what is lost). */
const QUIET_MS = 30_000
const PROGRESS_MS = 5_000

const TARGET_PER_SECOND = 500
const TARGET_P99_MS = 250
const TARGET_HANG_RATIO = 1.2

const ADMIN: AuthenticatedActor = {
  type: "user",
  id: "usr_bench",
  role: "admin",
  scopes: new Set(["admin"])
}

// ---------------------------------------------------------------------------------------------------
// SQL statements sent, counted at the driver (embedded PGlite is reached through it too, over a socket)

let statements = 0
/** With BENCH_SQL_TOP=1: statements by text (whitespace folded, cut at 120 characters). */
const byText = new Map<string, number>()
{
  const proto = pg.Client.prototype as unknown as { query: (...args: Array<unknown>) => unknown }
  const query = proto.query
  proto.query = function (this: unknown, ...args: Array<unknown>) {
    statements++
    if (SQL_TOP) {
      const q = args[0]
      const text =
        typeof q === "string"
          ? q
          : typeof q === "object" && q !== null && "text" in q && typeof q.text === "string"
            ? q.text
            : "(not text)"
      const key = text.replace(/\s+/g, " ").trim().slice(0, 120)
      byText.set(key, (byText.get(key) ?? 0) + 1)
    }
    return Reflect.apply(query, this, args)
  }
}

/** CPU ms so far of each server process (backend) of this database, from /proc; empty if unreadable. */
const backendCpu = (local: boolean) =>
  Effect.gen(function* () {
    const cpu = new Map<number, number>()
    if (!local) return cpu
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ pid: number }>`
      SELECT pid FROM pg_stat_activity WHERE datname = current_database()`
    for (const { pid } of rows) {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
        // After "(comm) ": state is field 3, utime and stime are 14 and 15 (clock ticks of 10 ms).
        const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
        cpu.set(pid, (Number(fields[11]) + Number(fields[12])) * 10)
      } catch {
        // Not on this machine's /proc (e.g. a container): no server CPU figures.
        return new Map<number, number>()
      }
    }
    return cpu
  })

/** SQL statements sent, this process's CPU (app, processors, receiver) and the backends' CPU, at one moment. */
interface Reading {
  readonly statements: number
  readonly cpuMs: number
  readonly serverMs: ReadonlyMap<number, number>
  readonly texts: ReadonlyMap<string, number>
  readonly at: number
}

const reading = (local: boolean) =>
  Effect.map(backendCpu(local), (serverMs): Reading => {
    const cpu = process.cpuUsage()
    return {
      statements,
      cpuMs: (cpu.user + cpu.system) / 1000,
      serverMs,
      texts: new Map(byText),
      at: performance.now()
    }
  })

interface Cost {
  readonly statements: number
  readonly cpuMs: number
  /** Undefined when the backends' CPU could not be read. */
  readonly serverMs: number | undefined
  readonly texts: ReadonlyMap<string, number>
  readonly wallMs: number
}

/** What happened between two readings (backends that exited meanwhile are missed). */
const costBetween = (start: Reading, end: Reading): Cost => {
  let server = 0
  for (const [pid, ms] of end.serverMs) server += ms - (start.serverMs.get(pid) ?? 0)
  const texts = new Map<string, number>()
  for (const [text, n] of end.texts) {
    const d = n - (start.texts.get(text) ?? 0)
    if (d > 0) texts.set(text, d)
  }
  return {
    statements: end.statements - start.statements,
    cpuMs: end.cpuMs - start.cpuMs,
    serverMs: end.serverMs.size === 0 ? undefined : server,
    texts,
    wallMs: end.at - start.at
  }
}

// ---------------------------------------------------------------------------------------------------
// The receiver

const HANG = "/hang/"

interface Receipt {
  readonly path: string
  /** `X-Service-Delivery`. */
  readonly deliveryId: string
  /** The body's `id`: the public event. */
  readonly eventId: string
  /** `performance.now()` when the whole body was in. */
  readonly at: number
  readonly wallAt: number
}

interface Receiver {
  readonly origin: string
  readonly receipts: Array<Receipt>
  /** Requests on hanging paths whose connection is still open. */
  readonly held: () => number
  readonly close: Effect.Effect<void>
}

const bodyId = (raw: string) => {
  try {
    const parsed: unknown = JSON.parse(raw)
    if (typeof parsed === "object" && parsed !== null && "id" in parsed && typeof parsed.id === "string")
      return parsed.id
  } catch {
    // Counted as a receipt without an event: it never matches an expected pair.
  }
  return ""
}

const receiver = Effect.acquireRelease(
  Effect.async<Receiver>((resume) => {
    const receipts: Array<Receipt> = []
    const sockets = new Set<Socket>()
    const hung = new Set<IncomingMessage>()
    const server = createServer((req, res) => {
      const chunks: Array<Buffer> = []
      req.on("data", (chunk: Buffer) => chunks.push(chunk))
      req.on("end", () => {
        const at = performance.now()
        const path = req.url ?? ""
        const header = req.headers["x-service-delivery"]
        receipts.push({
          path,
          deliveryId: typeof header === "string" ? header : "",
          eventId: bodyId(Buffer.concat(chunks).toString("utf8")),
          at,
          wallAt: Date.now()
        })
        if (!path.startsWith(HANG)) {
          res.writeHead(200, { "content-type": "text/plain" }).end("ok")
          return
        }
        hung.add(req)
        req.socket.once("close", () => hung.delete(req))
      })
    })
    server.on("connection", (socket) => {
      sockets.add(socket)
      socket.once("close", () => sockets.delete(socket))
    })
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      resume(
        Effect.succeed({
          origin: `http://127.0.0.1:${port}`,
          receipts,
          held: () => hung.size,
          close: Effect.async<void>((done) => {
            for (const socket of sockets) socket.destroy()
            server.close(() => done(Effect.void))
          })
        })
      )
    })
  }),
  (r) => r.close
)

/** Distinct deliveries received on `paths`, from receipt number `from` on (updated on each call). */
const counter = (r: Receiver, paths: ReadonlySet<string>, from: number) => {
  const ids = new Set<string>()
  let cursor = from
  return () => {
    for (; cursor < r.receipts.length; cursor++) {
      const receipt = r.receipts[cursor]
      if (receipt !== undefined && paths.has(receipt.path)) ids.add(receipt.deliveryId)
    }
    return ids.size
  }
}

/** Receipts on `paths` from number `from` on. */
const receiptsOn = (r: Receiver, paths: ReadonlySet<string>, from: number) =>
  r.receipts.slice(from).filter((x) => paths.has(x.path))

// ---------------------------------------------------------------------------------------------------
// Public events

const CITIES = [
  ["Lisbon", "PT", "1100-148"],
  ["Kraków", "PL", "31-042"],
  ["Lyon", "FR", "69002"],
  ["Austin", "US", "78701"],
  ["Osaka", "JP", "530-0001"]
] as const
const PRODUCTS = [
  ["Merino crew sock", "SOCK-MER-42", 1_450],
  ["Canvas tote", "TOTE-CNV-01", 2_900],
  ["Enamel mug", "MUG-ENM-12", 1_800],
  ["Linen apron", "APR-LIN-02", 4_200]
] as const

/** An `order.created` snapshot of the shape the commerce surface publishes (minor units). */
const orderSnapshot = (n: number, orderId: string, customerId: string, at: Date) => {
  const [city, country, postalCode] = CITIES[n % CITIES.length] ?? CITIES[0]
  const items = Array.from({ length: 1 + (n % 3) }, (_, i) => {
    const [title, sku, unitPrice] = PRODUCTS[(n + i) % PRODUCTS.length] ?? PRODUCTS[0]
    const quantity = 1 + ((n + i) % 2)
    return { id: `item_${n}_${i}`, title, sku, quantity, unitPrice, total: unitPrice * quantity }
  })
  const subtotal = items.reduce((sum, item) => sum + item.total, 0)
  const shipping = subtotal >= 5_000 ? 0 : 495
  const tax = Math.round(subtotal * 0.2)
  return {
    id: orderId,
    displayId: String(100_001 + n),
    status: "pending",
    customerId,
    email: `shopper.${n}@example.com`,
    currency: "eur",
    items,
    subtotal,
    shipping,
    tax,
    total: subtotal + shipping + tax,
    shippingAddress: {
      firstName: "Sam",
      lastName: `Shopper ${n}`,
      address1: `${1 + (n % 250)} Market Street`,
      city,
      postalCode,
      countryCode: country
    },
    createdAt: at.toISOString()
  }
}

const publicEvent = (n: number) =>
  Effect.gen(function* () {
    const sourceEventId = yield* uuidv7
    const orderId = yield* Ids.make("ord")
    const customerId = yield* Ids.make("cus")
    const occurredAt = new Date()
    return {
      id: publicEventId(sourceEventId, 0),
      type: "order.created",
      data: orderSnapshot(n, orderId, customerId, occurredAt),
      occurredAt,
      sourceEventId,
      streamId: `order-${orderId}`,
      subjectId: customerId
    } satisfies PublicEventRow
  })

// ---------------------------------------------------------------------------------------------------
// Statistics

/** Nearest-rank percentile of ascending `sorted`. */
const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? Number.NaN : (sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)] ?? Number.NaN)

interface Spread {
  readonly n: number
  readonly p50: number
  readonly p95: number
  readonly p99: number
  readonly max: number
}

const spread = (values: ReadonlyArray<number>): Spread => {
  const sorted = [...values].sort((a, b) => a - b)
  return {
    n: sorted.length,
    p50: percentile(sorted, 0.5),
    p95: percentile(sorted, 0.95),
    p99: percentile(sorted, 0.99),
    max: sorted[sorted.length - 1] ?? Number.NaN
  }
}

const verdict = (ok: boolean) => (ok ? "pass" : "MISS")

// ---------------------------------------------------------------------------------------------------
// The run

const services = servicesLayer({
  processors: [webhookDispatcher(), webhookDeliveryWorker()],
  projections
}).pipe(Layer.provideMerge(scratchConfig((base) => ({ webhooks: { ...base.webhooks, allowPrivate: true } }))))

type Stop = "all received" | "nothing new" | "time limit"

interface Throughput {
  readonly expected: number
  readonly received: number
  readonly stop: Stop
  readonly seconds: number
  readonly queueSeconds: number
  /** Deliveries created, and seconds from the start to the last one. */
  readonly dispatched: number
  readonly dispatchSeconds: number
  /** Undefined when the run stopped at the time limit (not lost: not yet delivered). */
  readonly lost: number | undefined
  readonly duplicates: number
  /** What the run cost: both processors at once, or (BENCH_SPLIT=1) one after the other. */
  readonly cost: ReadonlyArray<readonly [string, Cost, number]>
}

interface Latency {
  readonly healthy: Spread
  readonly expected: number
  readonly lost: number
  readonly hungReceived: number
  readonly hungHeld: number
  readonly publishMs: Spread
}

/** What the runs use, over the services of one scratch database. */
const harness = (r: Receiver) =>
  Effect.gen(function* () {
    const info = yield* DatabaseInfo
    const config = yield* AppConfig
    const sql = yield* SqlClient.SqlClient
    const webhooks = yield* Webhooks
    const supervisor = yield* Supervisor
    const transact = yield* makeTransact
    const database =
      info.kind === "postgres"
        ? `PostgreSQL via DATABASE_URL (a scratch database per phase, pool of ${config.databaseMaxConnections})`
        : "embedded PGlite in memory (no DATABASE_URL; one connection, in this process)"
    const autovacuum =
      info.kind === "postgres"
        ? ((yield* sql<{ autovacuum: string }>`SHOW autovacuum`)[0]?.autovacuum ?? "?")
        : "none (PGlite)"

    const register = (run: string, kinds: ReadonlyArray<"ok" | "hang">) =>
      Effect.forEach(kinds, (kind, i) => {
        const path = `/${kind}/${run}-${i + 1}`
        return webhooks.create(ADMIN, { url: `${r.origin}${path}`, events: ["order.created"] }).pipe(
          Effect.map((created) => ({ id: created.id, path, hangs: kind === "hang" })),
          Effect.catchAll((e) => Effect.dieMessage(`Webhooks.create failed: ${JSON.stringify(e)}`))
        )
      })
    const retire = (ids: ReadonlyArray<string>) =>
      Effect.forEach(
        ids,
        (id) =>
          webhooks
            .update(ADMIN, id, { status: "disabled" })
            .pipe(Effect.catchAll((e) => Effect.dieMessage(`Webhooks.update failed: ${JSON.stringify(e)}`))),
        { discard: true }
      )
    const publish = (rows: ReadonlyArray<PublicEventRow>) => transact(insertPublicEvents(rows))

    /** Waits until `count()` reaches `expected`, nothing new arrived for QUIET_MS, or `deadline`. */
    const awaitReceipts = (
      label: string,
      count: () => number,
      expected: number,
      since: number,
      deadline: number
    ) =>
      Effect.gen(function* () {
        let seen = count()
        let changed = performance.now()
        let reported = changed
        while (seen < expected) {
          yield* Effect.sleep(Duration.millis(25))
          const now = performance.now()
          const next = count()
          if (next !== seen) changed = now
          seen = next
          if (seen >= expected) break
          if (now - changed > QUIET_MS || now > deadline) {
            const why = now > deadline ? ("time limit" as const) : ("nothing new" as const)
            yield* Console.log(`  ${label}: stopped (${why}) at ${fmt(seen)} of ${fmt(expected)}`)
            return { seen, stop: why }
          }
          if (now - reported >= PROGRESS_MS) {
            reported = now
            const rate = seen / ((now - since) / 1000)
            yield* Console.log(
              `  ${label}: ${fmt(seen)} of ${fmt(expected)} received (${fmt(rate)}/s so far)`
            )
          }
        }
        return { seen, stop: "all received" as Stop }
      })

    const deliveryRows = (ids: ReadonlyArray<string>) =>
      Effect.map(
        sql<{ n: number; last: Date | null }>`
          SELECT count(*)::int AS n, max(created_at) AS last FROM webhooks.deliveries
           WHERE webhook_id = ANY(${[...ids]})`,
        (rows) => ({ n: rows[0]?.n ?? 0, last: rows[0]?.last ?? null })
      )

    return {
      info,
      config,
      supervisor,
      database,
      autovacuum,
      register,
      retire,
      publish,
      awaitReceipts,
      deliveryRows
    }
  })

/** (event, endpoint) pairs never received, and receipts beyond one per delivery id. */
const audit = (
  eventIds: ReadonlyArray<string>,
  paths: ReadonlyArray<string>,
  receipts: ReadonlyArray<Receipt>
) => {
  const pairs = new Set(receipts.map((x) => `${x.path} ${x.eventId}`))
  let lost = 0
  for (const e of eventIds) for (const p of paths) if (!pairs.has(`${p} ${e}`)) lost++
  return { lost, duplicates: receipts.length - new Set(receipts.map((x) => x.deliveryId)).size }
}

/** 1. The queue: its own scratch database; the processors stop (and it is dropped) at the end. */
const throughputRun = (r: Receiver) =>
  Effect.gen(function* () {
    const h = yield* harness(r)
    yield* Console.log(
      `bench: ${h.database}, ${cpus().length} CPUs, Node ${process.version}; ${fmt(EVENTS)} events × ` +
        `${ENDPOINTS} endpoints; WEBHOOK_CONCURRENCY ${h.config.webhooks.concurrency}, per endpoint ` +
        `${h.config.webhooks.endpointConcurrency}; load average ${loadAverage()}`
    )
    const endpoints = yield* h.register(
      "throughput",
      Array.from({ length: ENDPOINTS }, () => "ok" as const)
    )
    const paths = endpoints.map((e) => e.path)
    const ids = endpoints.map((e) => e.id)
    yield* Console.log(`… throughput: queueing ${fmt(EVENTS)} order.created events, no processor running`)
    const queueStarted = performance.now()
    const eventIds: Array<string> = []
    for (let from = 0; from < EVENTS; from += QUEUE_CHUNK) {
      const rows = yield* Effect.forEach(
        Array.from({ length: Math.min(QUEUE_CHUNK, EVENTS - from) }, (_, i) => from + i),
        publicEvent
      )
      yield* h.publish(rows)
      for (const row of rows) eventIds.push(row.id)
    }
    const queueSeconds = (performance.now() - queueStarted) / 1000
    const expected = EVENTS * ENDPOINTS
    const from = r.receipts.length
    const received = counter(r, new Set(paths), from)
    const local = h.info.kind === "postgres"
    const atStart = yield* reading(local)
    const deadline = atStart.at + MAX_SECONDS * 1000
    const startedWall = Date.now()
    let split: { readonly at: Reading; readonly dispatched: number } | undefined
    if (SPLIT) {
      yield* Console.log("… throughput: dispatcher alone (BENCH_SPLIT=1)")
      yield* h.supervisor.start([webhookDispatcher()])
      let dispatched = 0
      while (dispatched < expected && performance.now() < deadline) {
        yield* Effect.sleep(Duration.millis(50))
        dispatched = (yield* h.deliveryRows(ids)).n
      }
      split = { at: yield* reading(local), dispatched }
      yield* Console.log(`… throughput: ${fmt(dispatched)} deliveries exist; attempt worker started`)
      yield* h.supervisor.start([webhookDeliveryWorker()])
    } else {
      yield* Console.log(
        `… throughput: dispatcher and attempt worker started (stops after ${MAX_SECONDS} s at most)`
      )
      yield* h.supervisor.start([webhookDispatcher(), webhookDeliveryWorker()])
    }
    const attemptsFrom = split?.at.at ?? atStart.at
    const waited = yield* h.awaitReceipts("throughput", received, expected, attemptsFrom, deadline)
    const atEnd = yield* reading(local)
    const receipts = receiptsOn(r, new Set(paths), from)
    const last = receipts.reduce((latest, x) => Math.max(latest, x.at), attemptsFrom)
    const rows = yield* h.deliveryRows(ids)
    const { lost, duplicates } = audit(eventIds, paths, receipts)
    const result: Throughput = {
      expected,
      received: waited.seen,
      stop: waited.stop,
      seconds: (last - attemptsFrom) / 1000,
      queueSeconds,
      dispatched: rows.n,
      dispatchSeconds: rows.last === null ? Number.NaN : (rows.last.getTime() - startedWall) / 1000,
      lost: waited.stop === "time limit" ? undefined : lost,
      duplicates,
      cost:
        split === undefined
          ? [
              [
                "dispatch and attempts together, per delivery received",
                costBetween(atStart, atEnd),
                waited.seen
              ]
            ]
          : [
              ["dispatch alone, per delivery created", costBetween(atStart, split.at), split.dispatched],
              ["attempts alone, per delivery received", costBetween(split.at, atEnd), waited.seen]
            ]
    }
    return { result, database: h.database, autovacuum: h.autovacuum, config: h.config }
  }).pipe(Effect.scoped)

/** 2 and 3: a fresh scratch database with an empty queue, events published one by one. */
const latencyRuns = (r: Receiver) =>
  Effect.gen(function* () {
    const h = yield* harness(r)
    yield* h.supervisor.start([webhookDispatcher(), webhookDeliveryWorker()])
    const run = (label: string, kinds: ReadonlyArray<"ok" | "hang">) =>
      Effect.gen(function* () {
        const endpoints = yield* h.register(label, kinds)
        const healthy = endpoints.filter((e) => !e.hangs).map((e) => e.path)
        const hung = new Set(endpoints.filter((e) => e.hangs).map((e) => e.path))
        const from = r.receipts.length
        const received = counter(r, new Set(healthy), from)
        const hungReceived = counter(r, hung, from)
        yield* Console.log(
          `… ${label}: ${fmt(LATENCY_EVENTS)} events, one every ${PUBLISH_EVERY_MS} ms, to ${healthy.length} ` +
            `healthy${hung.size > 0 ? ` and ${hung.size} hanging` : ""} endpoints`
        )
        const committedAt = new Map<string, number>()
        const publishMs: Array<number> = []
        const started = performance.now()
        for (let i = 0; i < LATENCY_EVENTS; i++) {
          const row = yield* publicEvent(EVENTS + i)
          const before = performance.now()
          yield* h.publish([row])
          const after = performance.now()
          committedAt.set(row.id, after)
          publishMs.push(after - before)
          yield* Effect.sleep(
            Duration.millis(Math.max(0, started + (i + 1) * PUBLISH_EVERY_MS - performance.now()))
          )
        }
        const expected = LATENCY_EVENTS * healthy.length
        yield* h.awaitReceipts(label, received, expected, started, Number.POSITIVE_INFINITY)
        const receipts = receiptsOn(r, new Set(healthy), from)
        const first = new Map<string, number>()
        for (const x of receipts) {
          const key = `${x.path} ${x.eventId}`
          first.set(key, Math.min(first.get(key) ?? Number.POSITIVE_INFINITY, x.at))
        }
        const waits: Array<number> = []
        for (const [key, at] of first) {
          const published = committedAt.get(key.slice(key.indexOf(" ") + 1))
          if (published !== undefined) waits.push(at - published)
        }
        const result: Latency = {
          healthy: spread(waits),
          expected,
          lost: audit([...committedAt.keys()], healthy, receipts).lost,
          hungReceived: hungReceived(),
          hungHeld: r.held(),
          publishMs: spread(publishMs)
        }
        yield* h.retire(endpoints.map((e) => e.id))
        return result
      })
    const idle = yield* run("idle", ["ok", "ok", "ok", "ok"])
    const hang = yield* run("hang", ["ok", "ok", "ok", "hang"])
    return { idle, hang }
    // Closing the scope stops the processors: the hung attempts are interrupted, their claims given back.
  }).pipe(Effect.scoped)

const report = (
  t: Throughput,
  idle: Latency,
  hang: Latency,
  setup: { readonly database: string; readonly autovacuum: string; readonly config: AppConfigShape }
) =>
  Effect.gen(function* () {
    const perSecond = t.received / t.seconds
    const ratio = hang.healthy.p99 / idle.healthy.p99
    const cap = setup.config.webhooks.endpointConcurrency
    const finished = t.received === t.expected
    const latencyRows = (label: string, s: Spread, targetP99: string, ok: boolean) => [
      [`${label}: p50 / p95`, "—", `${ms(s.p50)} / ${ms(s.p95)}`, "", `${fmt(s.n)} (event, endpoint) pairs`],
      [`${label}: p99`, targetP99, ms(s.p99), verdict(ok), `max ${ms(s.max)}`]
    ]
    yield* printTable([
      ["measure", "target", "measured", "result", "notes"],
      [
        SPLIT ? "throughput: attempts alone" : "throughput",
        `≥ ${fmt(TARGET_PER_SECOND)}/s`,
        `${fmt(perSecond)} deliveries/s`,
        verdict(perSecond >= TARGET_PER_SECOND && finished),
        `${fmt(t.received)} of ${fmt(t.expected)} in ${t.seconds.toFixed(1)} s` +
          (finished ? "" : ` (stopped: ${t.stop})`)
      ],
      [
        "  dispatch (fan-out)",
        "—",
        `${fmt(t.dispatched / t.dispatchSeconds)} deliveries/s`,
        "",
        `${fmt(t.dispatched)} created, the last ${t.dispatchSeconds.toFixed(1)} s after the start`
      ],
      t.lost === undefined
        ? ["  lost pairs", "0", "n/a", "", `stopped early: ${fmt(t.expected - t.received)} not delivered yet`]
        : ["  lost pairs", "0", fmt(t.lost), verdict(t.lost === 0), "(event, endpoint) never received"],
      [
        "  duplicate receipts",
        "0",
        fmt(t.duplicates),
        verdict(t.duplicates === 0),
        "beyond one per delivery id"
      ],
      ...latencyRows(
        "idle latency",
        idle.healthy,
        `≤ ${ms(TARGET_P99_MS)}`,
        idle.healthy.p99 <= TARGET_P99_MS
      ),
      ...latencyRows(
        "hang: healthy latency",
        hang.healthy,
        `≤ ${TARGET_HANG_RATIO.toFixed(2)} × idle`,
        ratio <= TARGET_HANG_RATIO
      ),
      [
        "  healthy p99 ÷ idle p99",
        `≤ ${TARGET_HANG_RATIO.toFixed(2)}`,
        ratio.toFixed(2),
        verdict(ratio <= TARGET_HANG_RATIO),
        ""
      ],
      [
        "  hung endpoint in flight",
        `≤ ${cap}`,
        fmt(hang.hungHeld),
        verdict(hang.hungHeld <= cap),
        `${fmt(hang.hungReceived)} attempts reached it; lost healthy ${fmt(hang.lost)}`
      ]
    ])
    const share = (cpuMs: number, wallMs: number) => `${fmt((100 * cpuMs) / wallMs)} % of a core`
    const costOf = (label: string, c: Cost, n: number) =>
      `${label} (${(c.wallMs / 1000).toFixed(1)} s): ${(c.statements / n).toFixed(1)} SQL statements, ` +
      `${(c.cpuMs / n).toFixed(2)} ms CPU in this process (${share(c.cpuMs, c.wallMs)})` +
      (c.serverMs === undefined
        ? ""
        : `, ${(c.serverMs / n).toFixed(2)} ms CPU in PostgreSQL backends (${share(c.serverMs, c.wallMs)})`)
    yield* Console.log(
      `database: ${setup.database}; server autovacuum ${setup.autovacuum}. Webhook settings: allowPrivate, ` +
        `WEBHOOK_CONCURRENCY ${setup.config.webhooks.concurrency}, per endpoint ${cap}, 30 s deadline per attempt.`
    )
    yield* Console.log(
      `throughput: ${fmt(EVENTS)} events queued in ${t.queueSeconds.toFixed(1)} s (${QUEUE_CHUNK} per ` +
        `transaction) before any processor ran; deliveries/s = received ÷ (last receipt − ` +
        `${SPLIT ? "attempt worker start" : "processors start"}), at most BENCH_MAX_SECONDS ` +
        `(${MAX_SECONDS} s); dispatch = deliveries created ÷ (last webhooks.deliveries created_at − processors start).`
    )
    yield* Console.log("cost (polling included):")
    for (const [label, c, n] of t.cost) yield* Console.log(`  ${costOf(label, c, n)}`)
    if (SQL_TOP) {
      for (const [label, c, n] of t.cost) {
        yield* Console.log(`statements, ${label} (BENCH_SQL_TOP=1):`)
        const top = [...c.texts].sort((x, y) => y[1] - x[1]).slice(0, 15)
        for (const [text, k] of top) yield* Console.log(`  ${(k / n).toFixed(1).padStart(5)}  ${text}`)
      }
    }
    yield* Console.log(
      "latency (a second scratch database, empty queue): performance.now() at the receiver − right after " +
        `the publishing transaction committed; ${fmt(LATENCY_EVENTS)} events one every ${PUBLISH_EVERY_MS} ms, ` +
        `i.e. ${fmt((ENDPOINTS * 1000) / PUBLISH_EVERY_MS)} deliveries/s offered in the idle run ` +
        `(publish p50 ${ms(idle.publishMs.p50)}, p99 ${ms(idle.publishMs.p99)}); fresh endpoints per run, ` +
        "the previous ones disabled. The hang run publishes for less than the 30 s deadline, so the hung " +
        "attempts are still open at its end (counted at the receiver); stopping the processors interrupts them."
    )
    if (idle.lost > 0)
      yield* Console.log(`warning: the idle run lost ${fmt(idle.lost)} (event, endpoint) pairs`)
    yield* printFootnotes([])
  })

const program = Effect.gen(function* () {
  const r = yield* receiver
  const t = yield* throughputRun(r).pipe(Effect.provide(services))
  const { idle, hang } = yield* latencyRuns(r).pipe(Effect.provide(services))
  yield* report(t.result, idle, hang, t)
})

program.pipe(
  Effect.scoped,
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  Effect.timeoutFail({
    duration: `${MAX_SECONDS + 600 + Math.ceil(EVENTS / 100)} seconds`,
    onTimeout: () => new Error("bench took too long")
  }),
  NodeRuntime.runMain
)
