/**
 * `npm run bench:eventstore` — event store throughput against the goals of research/eventstore.md §10.7.
 *
 * With `DATABASE_URL` (which must point at this machine: 127.0.0.1 / localhost / ::1) it creates a
 * scratch database `cp_bench_<random>` on that server and drops it at the end; without it, it runs on
 * embedded PGlite in memory (one connection, so concurrency there only queues). It migrates the
 * scratch database with the real migrations, then measures, each for `BENCH_SECONDS` (default 5):
 *
 *   (a) raw reference: single-row INSERT into a plain `(id identity pk, data jsonb)` table, one row per
 *       transaction (autocommit), at 1 and 8 connections; and 10 rows per statement at 8;
 *   (b) `EventStore.append` of 1 event to a new stream (`no_stream`) per transaction, 1 and 8 fibers
 *       (and, as a reference, the same `append_events` statement sent directly at 8 connections);
 *   (c) append of 10 events per transaction at 8 fibers;
 *   (d) catch-up: `readAll` from the origin in batches of 1000 over everything written (reference:
 *       keyset scan of the raw table in batches of 1000); median of three passes;
 *   (e) projection rebuild (`rebuildProjection` from src/processors/Rebuild.ts) of a per-stream version
 *       table with batched upserts, over everything written; median of three passes.
 *
 * and prints a markdown table with the raw-INSERT reference and the targets. It stops by itself.
 */
import { randomBytes } from "node:crypto"
import { cpus, loadavg } from "node:os"
import { performance } from "node:perf_hooks"
import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Console, Effect, Layer, Logger, LogLevel, Option, Redacted, Schema } from "effect"
import { uuidv7FromMillis } from "../../src/base/Uuid.js"
import { AppConfig, makeAppConfig } from "../../src/config.js"
import { DatabaseInfo } from "../../src/db/Database.js"
import * as Checkpoint from "../../src/eventstore/Checkpoint.js"
import { EventStore, type NewEvent } from "../../src/eventstore/EventStore.js"
import { defineEvent } from "../../src/eventstore/EventType.js"
import { PersistenceLive } from "../../src/eventstore/layers.js"
import { defineProjection } from "../../src/kernel/Projection.js"
import { rebuildProjection } from "../../src/processors/Rebuild.js"
import { printTable, scratchDatabase } from "./support.js"

// ---------------------------------------------------------------------------------------------------
// Settings

const seconds = (() => {
  const raw = process.env.BENCH_SECONDS?.trim()
  const n = raw ? Number(raw) : 5
  if (!Number.isFinite(n) || n <= 0 || n > 600)
    throw new Error(`BENCH_SECONDS must be in (0, 600], got ${raw}`)
  return n
})()
const CONCURRENCY = 8
const READ_BATCH = 1_000
const REBUILD_BATCH = 5_000

/** The targets of the issue (research/eventstore.md §10.7, G3 and G6 on the 2-vCPU CI box). */
const TARGETS = {
  appendTxPerSecond8: 3_000,
  catchUpEventsPerSecond: 200_000,
  rebuildEventsPerSecond: 100_000
}

// ---------------------------------------------------------------------------------------------------
// Scratch database

const BenchConfig = Layer.scoped(
  AppConfig,
  Effect.map(scratchDatabase, (url) =>
    makeAppConfig({
      nodeEnv: "test",
      databaseUrl: Option.map(url, Redacted.make),
      databaseMaxConnections: CONCURRENCY,
      pgliteDataDir: "memory://",
      dataEncryptionKey: Option.some(Redacted.make(randomBytes(32).toString("hex")))
    })
  )
)

// ---------------------------------------------------------------------------------------------------
// Measuring

interface Measurement {
  /** Operations (transactions / statements / batches) completed. */
  readonly ops: number
  /** Rows or events those operations carried. */
  readonly units: number
  readonly seconds: number
  readonly opsPerSecond: number
  readonly unitsPerSecond: number
  readonly p50Ms: number
  readonly p99Ms: number
}

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? 0 : (sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0)

/**
 * Runs `op` in `concurrency` fibers until `durationSeconds` have passed (after a short warm-up that
 * is not counted). `op` returns how many rows/events it carried.
 */
const measure = <E, R>(
  concurrency: number,
  durationSeconds: number,
  op: Effect.Effect<number, E, R>
): Effect.Effect<Measurement, E, R> =>
  Effect.gen(function* () {
    const run = (ms: number, record: boolean) =>
      Effect.gen(function* () {
        const deadline = performance.now() + ms
        let ops = 0
        let units = 0
        const latencies: number[] = []
        const worker = Effect.gen(function* () {
          while (performance.now() < deadline) {
            const t0 = performance.now()
            // (not `units += yield* op`: the left side would be read before the fiber yields)
            const carried = yield* op
            units += carried
            if (record) latencies.push(performance.now() - t0)
            ops++
          }
        })
        const started = performance.now()
        yield* Effect.all(
          Array.from({ length: concurrency }, () => worker),
          { concurrency: "unbounded", discard: true }
        )
        return { ops, units, elapsed: (performance.now() - started) / 1_000, latencies }
      })
    yield* run(Math.min(1_000, durationSeconds * 100), false)
    const r = yield* run(durationSeconds * 1_000, true)
    const sorted = r.latencies.sort((a, b) => a - b)
    return {
      ops: r.ops,
      units: r.units,
      seconds: r.elapsed,
      opsPerSecond: r.ops / r.elapsed,
      unitsPerSecond: r.units / r.elapsed,
      p50Ms: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99)
    }
  })

// ---------------------------------------------------------------------------------------------------
// Workloads

const Recorded = defineEvent("bench.recorded", {
  schema: Schema.Struct({
    sequence: Schema.Int,
    sku: Schema.String,
    quantity: Schema.Int,
    note: Schema.String
  })
})

/** A payload of roughly the size of a typical domain event (≈ 150 bytes of JSON). */
const payload = (sequence: number) => ({
  sequence,
  sku: `SKU-${sequence % 9973}`,
  quantity: 1 + (sequence % 7),
  note: "benchmark event with a payload of about the size of a typical domain event"
})

const runId = randomBytes(3).toString("hex")
let streamCounter = 0
let sequence = 0

const appendToNewStream = (eventsPerTx: number) =>
  Effect.flatMap(EventStore, (store) => {
    const events: NewEvent[] = Array.from({ length: eventsPerTx }, () => ({
      eventType: Recorded,
      data: payload(sequence++)
    }))
    return Effect.as(
      store.append({
        streamId: `bench-${runId}-${streamCounter++}`,
        streamType: "bench",
        expectedVersion: "no_stream",
        events
      }),
      eventsPerTx
    )
  })

/** The append statement alone, through the same client: what the database costs without EventStore code. */
const appendStatementOnly = Effect.flatMap(SqlClient.SqlClient, (sql) => {
  const n = sequence++
  const events = JSON.stringify([
    {
      id: uuidv7FromMillis(Date.now()),
      type: Recorded.type,
      schemaVersion: 1,
      data: payload(n),
      metadata: {}
    }
  ])
  return Effect.as(
    sql`SELECT outcome FROM event_store.append_events(${`bench-${runId}-sql-${n}`}, ${"bench"}, ${-1},
      ${events}::jsonb, ${new Date()})`,
    1
  )
})

const rawInsert = (rows: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    if (rows === 1)
      return Effect.as(
        sql`INSERT INTO bench_raw (data) VALUES (${JSON.stringify(payload(sequence++))}::jsonb)`,
        1
      )
    const batch = JSON.stringify(Array.from({ length: rows }, () => payload(sequence++)))
    return Effect.as(
      sql`INSERT INTO bench_raw (data) SELECT value FROM jsonb_array_elements(${batch}::jsonb)`,
      rows
    )
  })

/** Reads the whole feed from the origin; returns events and seconds. */
const catchUp = Effect.gen(function* () {
  const store = yield* EventStore
  let checkpoint = Checkpoint.origin
  let events = 0
  const started = performance.now()
  for (;;) {
    const batch = yield* store.readAll({ after: checkpoint, limit: READ_BATCH })
    events += batch.events.length
    checkpoint = batch.checkpoint
    if (batch.events.length < READ_BATCH) break
  }
  const secs = (performance.now() - started) / 1_000
  return { events, seconds: secs, perSecond: events / secs }
})

/** Keyset scan of the raw table (the read reference). */
const rawScan = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  let last = 0
  let rows = 0
  const started = performance.now()
  for (;;) {
    const batch = yield* sql<{ id: number; data: unknown }>`SELECT id, data FROM bench_raw WHERE id > ${last}
      ORDER BY id LIMIT ${READ_BATCH}`
    rows += batch.length
    const tail = batch[batch.length - 1]
    if (tail) last = tail.id
    if (batch.length < READ_BATCH) break
  }
  const secs = (performance.now() - started) / 1_000
  return { rows, seconds: secs, perSecond: rows / secs }
})

/** A small projection: per stream, its version (= event count) and last position; batched upsert. */
const STREAM_VERSIONS = "public.bench_stream_versions"
const streamVersions = defineProjection({
  name: "bench_stream_versions",
  tables: [STREAM_VERSIONS],
  events: [Recorded],
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const latest = new Map<string, { version: number; position: number }>()
      for (const e of events) {
        const seen = latest.get(e.streamId)
        if (!seen || e.streamVersion > seen.version)
          latest.set(e.streamId, { version: e.streamVersion, position: e.globalPosition })
      }
      const ids = [...latest.keys()]
      const versions = ids.map((id) => latest.get(id)?.version ?? 0)
      const positions = ids.map((id) => latest.get(id)?.position ?? 0)
      // Idempotent per event: replaying a batch cannot move a stream backwards.
      yield* sql`INSERT INTO ${sql(target.table(STREAM_VERSIONS))} AS t (stream_id, version, last_position)
        SELECT * FROM unnest(${ids}::text[], ${versions}::int8[], ${positions}::int8[])
        ON CONFLICT (stream_id) DO UPDATE
          SET version = greatest(t.version, EXCLUDED.version),
              last_position = greatest(t.last_position, EXCLUDED.last_position)`
    })
})

// ---------------------------------------------------------------------------------------------------
// Report

const PASSES = 3

const median = <A>(results: ReadonlyArray<A>, by: (a: A) => number): A => {
  const sorted = [...results].sort((a, b) => by(a) - by(b))
  const middle = sorted[Math.floor(sorted.length / 2)]
  if (middle === undefined) throw new Error("no results")
  return middle
}

const loadAverage = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" / ")

const fmt = (n: number) => Math.round(n).toLocaleString("en-US")
const ms = (n: number) => `${n.toFixed(2)} ms`
const status = (value: number, target: number) => (value >= target ? "met" : "NOT met")

const program = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const info = yield* DatabaseInfo
  const [server] = yield* sql<{
    version: string
    sync: string
  }>`SELECT current_setting('server_version') AS version,
    current_setting('synchronous_commit') AS sync`
  yield* Console.log(
    `bench: ${info.kind === "postgres" ? `PostgreSQL ${server?.version}` : `embedded PGlite (PostgreSQL ${server?.version}, one connection)`}, ` +
      `synchronous_commit=${server?.sync}, ${cpus().length} CPUs, ${seconds} s per measurement, Node ${process.version}, ` +
      `load average ${loadAverage()}`
  )
  yield* sql`CREATE TABLE bench_raw (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, data jsonb NOT NULL)`
  yield* sql`CREATE TABLE bench_stream_versions (stream_id text PRIMARY KEY, version bigint NOT NULL,
    last_position bigint NOT NULL)`

  const step = <A, E, R>(label: string, effect: Effect.Effect<A, E, R>) =>
    Effect.zipRight(Console.log(`… ${label}`), effect)

  const raw1 = yield* step("raw INSERT, 1 row/tx, 1 connection", measure(1, seconds, rawInsert(1)))
  const raw8 = yield* step(
    `raw INSERT, 1 row/tx, ${CONCURRENCY} connections`,
    measure(CONCURRENCY, seconds, rawInsert(1))
  )
  const raw8x10 = yield* step(
    `raw INSERT, 10 rows/tx, ${CONCURRENCY} connections`,
    measure(CONCURRENCY, seconds, rawInsert(10))
  )
  const append1 = yield* step(
    "append 1 event/tx (no_stream), 1 fiber",
    measure(1, seconds, appendToNewStream(1))
  )
  const append8 = yield* step(
    `append 1 event/tx (no_stream), ${CONCURRENCY} fibers`,
    measure(CONCURRENCY, seconds, appendToNewStream(1))
  )
  const statement8 = yield* step(
    `append_events statement only, ${CONCURRENCY} connections`,
    measure(CONCURRENCY, seconds, appendStatementOnly)
  )
  const append8x10 = yield* step(
    `append 10 events/tx (no_stream), ${CONCURRENCY} fibers`,
    measure(CONCURRENCY, seconds, appendToNewStream(10))
  )
  yield* sql`VACUUM ANALYZE event_store.events`.pipe(Effect.ignore)
  yield* sql`VACUUM ANALYZE bench_raw`.pipe(Effect.ignore)
  // Reads are short (everything written above, ~1 s): take the median of three passes.
  const read = median(
    yield* step(
      `catch-up readAll, batches of ${READ_BATCH} (3 passes)`,
      Effect.replicateEffect(catchUp, PASSES)
    ),
    (r) => r.perSecond
  )
  const scan = median(
    yield* step(
      `raw keyset scan, batches of ${READ_BATCH} (3 passes)`,
      Effect.replicateEffect(rawScan, PASSES)
    ),
    (r) => r.perSecond
  )
  const rebuild = median(
    yield* step(
      `projection rebuild, batch ${REBUILD_BATCH} (3 passes)`,
      Effect.replicateEffect(rebuildProjection(streamVersions, { batchSize: REBUILD_BATCH }), PASSES)
    ),
    (r) => r.eventsPerSecond
  )
  const [check] = yield* sql<{ streams: number; events: number }>`SELECT count(*)::int8 AS streams,
    coalesce(sum(version), 0)::int8 AS events FROM bench_stream_versions`

  const rows: ReadonlyArray<ReadonlyArray<string>> = [
    ["metric", "measured", "raw INSERT reference", "target", "status"],
    [
      "(a) raw INSERT 1 row/tx, 1 conn",
      `${fmt(raw1.unitsPerSecond)} rows/s (p50 ${ms(raw1.p50Ms)})`,
      "—",
      "—",
      ""
    ],
    [
      `(a) raw INSERT 1 row/tx, ${CONCURRENCY} conns`,
      `${fmt(raw8.unitsPerSecond)} rows/s (p50 ${ms(raw8.p50Ms)})`,
      "—",
      "—",
      ""
    ],
    [
      `(a) raw INSERT 10 rows/tx, ${CONCURRENCY} conns`,
      `${fmt(raw8x10.unitsPerSecond)} rows/s`,
      "—",
      "—",
      ""
    ],
    [
      "(b) append 1 event/tx, 1 fiber",
      `${fmt(append1.opsPerSecond)} tx/s = ${fmt(append1.unitsPerSecond)} events/s (p50 ${ms(append1.p50Ms)}, p99 ${ms(append1.p99Ms)})`,
      `${fmt(raw1.unitsPerSecond)} rows/s`,
      "—",
      ""
    ],
    [
      `(b) append 1 event/tx, ${CONCURRENCY} fibers`,
      `${fmt(append8.opsPerSecond)} tx/s = ${fmt(append8.unitsPerSecond)} events/s (p50 ${ms(append8.p50Ms)}, p99 ${ms(append8.p99Ms)})`,
      `${fmt(raw8.unitsPerSecond)} rows/s`,
      `≥ ${fmt(TARGETS.appendTxPerSecond8)} tx/s`,
      status(append8.opsPerSecond, TARGETS.appendTxPerSecond8)
    ],
    [
      `(b) ref: append_events statement alone, ${CONCURRENCY} conns`,
      `${fmt(statement8.opsPerSecond)} tx/s (p50 ${ms(statement8.p50Ms)}) — same SQL, no EventStore code`,
      `${fmt(raw8.unitsPerSecond)} rows/s`,
      "—",
      ""
    ],
    [
      `(c) append 10 events/tx, ${CONCURRENCY} fibers`,
      `${fmt(append8x10.unitsPerSecond)} events/s (${fmt(append8x10.opsPerSecond)} tx/s, p50 ${ms(append8x10.p50Ms)})`,
      `${fmt(raw8x10.unitsPerSecond)} rows/s (10/tx)`,
      "—",
      ""
    ],
    [
      `(d) catch-up readAll, batch ${READ_BATCH} (median of ${PASSES})`,
      `${fmt(read.perSecond)} events/s (${fmt(read.events)} in ${read.seconds.toFixed(2)} s)`,
      `${fmt(scan.perSecond)} rows/s (raw keyset scan)`,
      `≥ ${fmt(TARGETS.catchUpEventsPerSecond)} events/s`,
      status(read.perSecond, TARGETS.catchUpEventsPerSecond)
    ],
    [
      `(e) projection rebuild, batch ${REBUILD_BATCH} (median of ${PASSES})`,
      `${fmt(rebuild.eventsPerSecond)} events/s (${fmt(rebuild.events)} in ${rebuild.seconds.toFixed(2)} s)`,
      "—",
      `≥ ${fmt(TARGETS.rebuildEventsPerSecond)} events/s`,
      status(rebuild.eventsPerSecond, TARGETS.rebuildEventsPerSecond)
    ]
  ]
  yield* printTable(rows)
  yield* Console.log(
    `load average at the end: ${loadAverage()} (other processes on the machine skew every number)`
  )
  yield* Console.log(
    `rebuild check: ${fmt(check?.streams ?? 0)} streams, ${fmt(check?.events ?? 0)} events projected ` +
      `(${fmt(read.events)} in the store)`
  )
})

const BenchLive = PersistenceLive.pipe(Layer.provideMerge(BenchConfig))

program.pipe(
  Effect.provide(BenchLive),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  Effect.timeoutFail({
    duration: `${Math.ceil(seconds * 12 + 120)} seconds`,
    onTimeout: () => new Error("bench took too long")
  }),
  NodeRuntime.runMain
)
