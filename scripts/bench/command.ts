/**
 * `npm run bench:command [-- --commands N] [--concurrency N] [--runs N]` — node CPU per command of
 * the customer-create use case (what `POST /user`'s handler calls), without the HTTP layer.
 *
 * It builds the service's layers (src/services.ts, no processors) on a scratch database
 * `cp_bench_<random>` of the DATABASE_URL server (this machine only; dropped at the end) or, without
 * DATABASE_URL, on embedded PGlite in memory, and runs each phase below `--commands` times (default
 * 3,000; after a warm-up of a fifth of that) in `--concurrency` fibers (default 32), `--runs` times
 * (default 3). Node CPU is `process.cpuUsage()` (user + system, this process only: PostgreSQL runs
 * elsewhere; on PGlite the database's CPU is counted too) divided by the commands; the table shows
 * the median run, the lowest and the highest, and the shares of system time and of GC (median run).
 *
 *   - `Customers.create`: the use case — email check, id, one transaction: the append (data key,
 *     projection lock, public event) and the read-model INSERT. 5 statements.
 *   - `runner.execute (create)`: the same without the email check: `transact(execute(Create))`.
 *   - `in memory: decide + encode + seal + public event`: the command's work that needs no database,
 *     as the runner and the event store do it (decide, Schema encode, AES-GCM sealing under a new
 *     data key, the public event's snapshot and id, the JSON payloads), no fibers.
 *   - `append in a transaction`: BEGIN, `EventStore.append` of a decided `customer.created` (sealed,
 *     with the projection lock and the public event: `append_command`), COMMIT; no projection.
 *   - `append_command statement alone`: BEGIN, the append's statement with its JSON prepared, COMMIT:
 *     the statement's cost through the SqlClient without the event store's code around it.
 *   - `email check`: the one statement of `ensureEmailFree`.
 *   - `transaction floor`: BEGIN, `SELECT 1`, COMMIT through the command runner's `transact`.
 *   - `statement floor`: one `SELECT 1` through the SqlClient.
 *
 * `--only <text>` runs only the phases whose label contains it (for a CPU profile of one:
 * `node --import tsx --cpu-prof scripts/bench/command.ts --only execute`).
 *
 * Numbers are only comparable on the same machine and load: other processes share its CPUs.
 */
import { randomBytes } from "node:crypto"
import { type PerformanceEntry, PerformanceObserver } from "node:perf_hooks"
import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Console, Effect, Either, Layer, Logger, LogLevel, Schema } from "effect"
import { REQUEST_ID_ANNOTATION } from "../../src/base/RequestId.js"
import { uuidv7FromMillis } from "../../src/base/Uuid.js"
import { Customers, createCustomerCommand, type NewCustomerInput } from "../../src/customers/Customers.js"
import { CustomerDecider, customerStream } from "../../src/customers/decider.js"
import { CustomerCreated } from "../../src/customers/events.js"
import { selectEmailHolders } from "../../src/customers/queries.js"
import { textArray } from "../../src/db/Sql.js"
import { EventStore } from "../../src/eventstore/EventStore.js"
import { Keyring } from "../../src/eventstore/Keyring.js"
import { publicEventsPayload } from "../../src/eventstore/PublicEvents.js"
import type { AuthenticatedActor } from "../../src/http/Auth.js"
import { CommandRunner, publicEventId } from "../../src/kernel/CommandRunner.js"
import * as Ids from "../../src/kernel/Ids.js"
import { PROJECTION_LOCK_CLASS } from "../../src/kernel/Projection.js"
import { TracingLive } from "../../src/observability/Tracing.js"
import { projections } from "../../src/registry.js"
import { servicesLayer } from "../../src/services.js"
import { benchArguments, fmt, loadAverage, printTable, scratchConfig } from "./support.js"

const USAGE =
  "usage: npm run bench:command -- [--commands N] [--concurrency N] [--runs N] [--only <words of a phase>]"
const { integer, raw } = benchArguments(["commands", "concurrency", "runs", "only"], USAGE)
const COMMANDS = integer("commands", 3_000, 100, 1_000_000)
const CONCURRENCY = integer("concurrency", 32, 1, 256)
const RUNS = integer("runs", 3, 1, 20)
const WARM_UP = Math.ceil(COMMANDS / 5)
/** Only the phases whose label contains this (e.g. for a CPU profile of one of them). */
const ONLY = raw.only?.toLowerCase()

/** The services as src/main.ts composes them: tracing off without an OTLP endpoint. */
const BenchLive = servicesLayer({ processors: [], projections }).pipe(
  Layer.provide(TracingLive),
  Layer.provideMerge(scratchConfig())
)

/** An API key holding every scope, as `POST /user` with an API key sees it. */
const actor: AuthenticatedActor = { type: "api_key", id: "key_bench", scopes: new Set(["*"]) }

const runId = randomBytes(3).toString("hex")
let counter = 0
const nextInput = (): NewCustomerInput => {
  const n = counter++
  return {
    email: `bench.${runId}.${n}@example.com`,
    firstName: "Grace",
    lastName: "Hopper",
    phone: n % 2 === 0 ? "+12025550123" : null,
    tags: n % 3 === 0 ? ["newsletter"] : [],
    metadata: { source: "web" }
  }
}

/** As the HTTP middleware does: every command runs with a request id (its log annotation). */
const withRequestId = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.annotateLogs(effect, REQUEST_ID_ANNOTATION, `req_${runId}${counter}`)

// ---------------------------------------------------------------------------------------------------
// Measuring

interface Run {
  readonly cpuMicros: number
  /** The kernel's share (system time: socket writes and reads, mostly). */
  readonly systemShare: number
  readonly gcShare: number
}

/** GC time observed since the last call (perf_hooks `gc` entries), in milliseconds. */
const gcMillis = (() => {
  let total = 0
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries() as ReadonlyArray<PerformanceEntry>) total += entry.duration
  })
  observer.observe({ entryTypes: ["gc"] })
  return () => {
    const t = total
    total = 0
    return t
  }
})()

/** `count` operations in `CONCURRENCY` fibers; node CPU µs per operation and the GC share of it. */
const runOnce = <E, R>(op: Effect.Effect<unknown, E, R>, count: number) =>
  Effect.gen(function* () {
    let left = count
    const worker = Effect.whileLoop({
      while: () => left-- > 0,
      body: () => op,
      step: () => {}
    })
    gcMillis()
    const before = process.cpuUsage()
    yield* Effect.all(
      Array.from({ length: CONCURRENCY }, () => worker),
      { concurrency: "unbounded", discard: true }
    )
    const used = process.cpuUsage(before)
    const cpu = used.user + used.system
    return {
      cpuMicros: cpu / count,
      systemShare: used.system / cpu,
      gcShare: (gcMillis() * 1_000) / cpu
    } satisfies Run
  })

const measure = <E, R>(label: string, op: Effect.Effect<unknown, E, R>, count = COMMANDS) =>
  Effect.gen(function* () {
    if (ONLY !== undefined && !label.toLowerCase().includes(ONLY)) return []
    yield* runOnce(op, Math.ceil(count / 5))
    const runs: Array<Run> = []
    for (let i = 0; i < RUNS; i++) runs.push(yield* runOnce(op, count))
    const sorted = [...runs].sort((a, b) => a.cpuMicros - b.cpuMicros)
    const median = sorted[Math.floor(sorted.length / 2)] ?? { cpuMicros: 0, systemShare: 0, gcShare: 0 }
    yield* Console.log(
      `${label}: ${runs.map((r) => fmt(r.cpuMicros)).join(" / ")} µs (median ${fmt(median.cpuMicros)})`
    )
    return [
      label,
      fmt(median.cpuMicros),
      fmt(sorted[0]?.cpuMicros ?? 0),
      fmt(sorted[sorted.length - 1]?.cpuMicros ?? 0),
      `${Math.round(median.systemShare * 100)} %`,
      `${Math.round(median.gcShare * 100)} %`
    ]
  })

// ---------------------------------------------------------------------------------------------------
// Phases

const program = Effect.gen(function* () {
  const customers = yield* Customers
  const runner = yield* CommandRunner
  const store = yield* EventStore
  const keyring = yield* Keyring
  const sql = yield* SqlClient.SqlClient

  const metadata = () => ({ actor: { type: actor.type, id: actor.id }, requestId: `req_${runId}${counter}` })

  const useCase = Effect.suspend(() => withRequestId(customers.create(actor, nextInput())))

  const execute = Effect.suspend(() => {
    const customerId = Ids.fromUuid("cus", uuidv7FromMillis(Date.now()))
    return withRequestId(
      runner.transact(
        runner.execute(
          CustomerDecider,
          customerStream(customerId),
          createCustomerCommand(customerId, nextInput()),
          {
            metadata: metadata(),
            newStream: true
          }
        )
      )
    )
  })

  const encodeCreated = Schema.encodeEither(CustomerCreated.schema)
  const inMemory = Effect.suspend(() => {
    const customerId = Ids.fromUuid("cus", uuidv7FromMillis(Date.now()))
    const streamId = customerStream(customerId)
    const meta = metadata()
    return Effect.map(
      CustomerDecider.decide(createCustomerCommand(customerId, nextInput()), CustomerDecider.initialState),
      (decided) => {
        const now = Date.now()
        const recordedAt = new Date(now)
        const payload = decided.map((event) => {
          const encoded = encodeCreated(event.data as typeof CustomerCreated.schema.Type)
          if (Either.isLeft(encoded)) throw new Error("customer.created does not encode")
          const data: Record<string, unknown> = { ...encoded.right }
          const keys = CustomerCreated.personalKeys.filter((k) => data[k] !== undefined)
          const sealed = keyring.sealInline(
            customerId,
            keys.map((k) => data[k])
          )
          keys.forEach((k, i) => {
            data[k] = sealed.envelopes[i]
          })
          return { id: uuidv7FromMillis(now), type: event.type, schemaVersion: 1, data, metadata: meta }
        })
        let state = CustomerDecider.initialState
        const rows = decided.flatMap((event, i) => {
          const eventId = payload[i]?.id ?? ""
          const pending = {
            ...event,
            streamId,
            streamVersion: i + 1,
            eventId,
            schemaVersion: 1,
            metadata: meta,
            recordedAt
          }
          state = CustomerDecider.evolve(state, pending)
          return (CustomerDecider.publicEvents?.(pending, state) ?? []).map((draft, j) => ({
            id: publicEventId(eventId, j),
            type: draft.type,
            data: draft.data,
            occurredAt: recordedAt,
            sourceEventId: eventId,
            streamId
          }))
        })
        return JSON.stringify(payload).length + publicEventsPayload(rows).length
      }
    )
  })

  const append = Effect.suspend(() => {
    const customerId = Ids.fromUuid("cus", uuidv7FromMillis(Date.now()))
    const streamId = customerStream(customerId)
    const input = nextInput()
    const { _tag, ...data } = createCustomerCommand(customerId, input)
    return runner.transact(
      store.append({
        streamId,
        streamType: CustomerDecider.streamType,
        expectedVersion: 0,
        events: [{ eventType: CustomerCreated, data }],
        metadata: metadata(),
        sharedLocks: { space: PROJECTION_LOCK_CLASS, names: ["customers"] },
        publicEvents: ({ eventIds, recordedAt }) => [
          {
            id: publicEventId(eventIds[0] ?? "", 0),
            type: "customer.created",
            data: { id: customerId, email: input.email },
            occurredAt: recordedAt,
            sourceEventId: eventIds[0] ?? "",
            streamId,
            subjectId: customerId
          }
        ]
      })
    )
  })

  // The append's statement as `append` sends it, its JSON prepared (sealed values stand in as
  // fixed envelopes): what the statement costs through the SqlClient without the event store's code.
  const envelope = (subject: string) => ({ $pii: subject, v: randomBytes(48).toString("base64") })
  const wrapped = randomBytes(60).toString("base64")
  const statementOnly = Effect.suspend(() => {
    const customerId = Ids.fromUuid("cus", uuidv7FromMillis(Date.now()))
    const streamId = customerStream(customerId)
    const eventId = uuidv7FromMillis(Date.now())
    const recordedAt = new Date()
    const sealed = envelope(customerId)
    const events = JSON.stringify([
      {
        id: eventId,
        type: CustomerCreated.type,
        schemaVersion: 1,
        data: {
          customerId,
          email: sealed,
          firstName: sealed,
          lastName: sealed,
          phone: sealed,
          tags: [],
          metadata: sealed
        },
        metadata: metadata()
      }
    ])
    const publicRows = publicEventsPayload([
      {
        id: publicEventId(eventId, 0),
        type: "customer.created",
        data: { id: customerId, email: "bench@example.com" },
        occurredAt: recordedAt,
        sourceEventId: eventId,
        streamId,
        subjectId: customerId
      }
    ])
    const created = JSON.stringify([{ subject: customerId, wrapped, kek: "bench" }])
    return runner.transact(
      sql`SELECT outcome, stream_version AS "streamVersion", first_position AS "firstPosition",
               last_position AS "lastPosition", transaction_id AS "transactionId", positions
          FROM event_store.append_command(${streamId}, ${"customer"}, ${0},
            ${events}::jsonb, ${recordedAt}, ${PROJECTION_LOCK_CLASS}::int4,
            ${textArray(sql, ["customers"])}, ${publicRows}::jsonb, ${created}::jsonb, ${"[]"}::jsonb)`
    )
  })

  const emailCheck = Effect.suspend(() => selectEmailHolders(sql, nextInput().email))
  const transactionFloor = runner.transact(sql`SELECT 1`)
  const statementFloor = sql`SELECT 1`

  yield* Console.log(
    `${fmt(COMMANDS)} commands per run, ${CONCURRENCY} in flight, ${RUNS} runs (+ a warm-up of ${fmt(WARM_UP)})`
  )
  const rows: ReadonlyArray<ReadonlyArray<string>> = [
    yield* measure("Customers.create (use case)", useCase),
    yield* measure("runner.execute (create)", execute),
    yield* measure("in memory: decide + encode + seal + public event", inMemory),
    yield* measure("append in a transaction (BEGIN, append_command, COMMIT)", append),
    yield* measure("append_command statement alone, in a transaction", statementOnly),
    yield* measure("email check (1 statement)", emailCheck),
    yield* measure("transaction floor (BEGIN, SELECT 1, COMMIT)", transactionFloor),
    yield* measure("statement floor (SELECT 1)", statementFloor)
  ]
  yield* printTable([
    ["phase", "node CPU µs/op (median)", "min", "max", "system", "GC"],
    ...rows.filter((row) => row.length > 0)
  ])
  yield* Console.log(`load average at the end: ${loadAverage()}`)
})

program.pipe(
  Effect.provide(BenchLive),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  NodeRuntime.runMain
)
