/**
 * Projection rebuild (ops): replay a projection from position zero into fresh `<table>_next`
 * tables, then swap them in one transaction. Reactors (webhooks, notifications, process managers)
 * are never involved: only the projection's own `apply` runs, so nothing is sent twice.
 *
 * Concurrency with live writes: command transactions hold the projection's advisory lock *shared*
 * while they write its tables. The swap takes it *exclusively*, so when it holds the lock every
 * writer of this projection has either committed (its events are visible and get replayed into the
 * new tables) or has not written yet (it will write the new tables after the swap).
 */
import { randomBytes } from "node:crypto"
import { performance } from "node:perf_hooks"
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Data, Effect } from "effect"
import { type Checkpoint, origin } from "../eventstore/Checkpoint.js"
import { EventStore, type StoredEvent } from "../eventstore/EventStore.js"
import type { EventDecodeError } from "../eventstore/errors.js"
import {
  decodeStoredBatch,
  PROJECTION_LOCK_CLASS,
  type Projection,
  type ProjectionTarget
} from "../kernel/Projection.js"
import { type LeaseLost, withLease } from "./Lease.js"

export interface RebuildProgress {
  readonly projection: string
  readonly eventsDone: number
  readonly eventsTotal: number
  readonly eventsPerSecond: number
  /** Seconds left at the current rate (0 when done or unknown). */
  readonly etaSeconds: number
}

export interface RebuildReport {
  readonly projection: string
  readonly events: number
  readonly seconds: number
  readonly eventsPerSecond: number
}

export class RebuildError extends Data.TaggedError("RebuildError")<{ readonly message: string }> {}

const NEXT_SUFFIX = "_next"
const OLD_SUFFIX = "_replaced"

const split = (qualified: string): { schema: string; table: string } => {
  const dot = qualified.indexOf(".")
  return { schema: qualified.slice(0, dot), table: qualified.slice(dot + 1) }
}

export const nextTarget: ProjectionTarget = { table: (t) => `${t}${NEXT_SUFFIX}` }

export const rebuildProjection = (
  projection: Projection,
  options: {
    readonly batchSize?: number
    readonly onProgress?: (progress: RebuildProgress) => Effect.Effect<void>
    /** Minimum milliseconds between progress reports (default 1000). */
    readonly progressIntervalMs?: number
  } = {}
): Effect.Effect<
  RebuildReport,
  RebuildError | EventDecodeError | LeaseLost | SqlError,
  SqlClient.SqlClient | EventStore
> =>
  // One rebuild per projection at a time, cluster-wide: a second one waits for the lease instead of
  // dropping the first one's `_next` tables under it.
  withLease(
    `rebuild:${projection.name}`,
    { owner: `rebuild-${process.pid}-${randomBytes(4).toString("hex")}`, ttl: "30 seconds" },
    () => rebuildUnderLease(projection, options)
  ).pipe(Effect.withSpan("projection.rebuild", { attributes: { "projection.name": projection.name } }))

const rebuildUnderLease = (projection: Projection, options: Parameters<typeof rebuildProjection>[1] = {}) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const store = yield* EventStore
    const batchSize = options.batchSize ?? 5_000
    const types = projection.eventTypes.names
    const started = performance.now()

    for (const table of projection.tables) {
      const [row] = yield* sql<{ exists: boolean }>`SELECT to_regclass(${table}) IS NOT NULL AS exists`
      if (!row?.exists)
        return yield* new RebuildError({ message: `table ${table} of ${projection.name} does not exist` })
    }

    yield* sql.withTransaction(
      Effect.forEach(
        projection.tables,
        (table) =>
          Effect.zipRight(
            sql`DROP TABLE IF EXISTS ${sql(nextTarget.table(table))}`,
            sql`CREATE TABLE ${sql(nextTarget.table(table))} (LIKE ${sql(table)} INCLUDING ALL)`
          ),
        { discard: true }
      )
    )

    const [countRow] = yield* sql<{ n: number }>`SELECT count(*)::int8 AS n FROM event_store.events
      WHERE event_type = ANY(${types})`
    const total = countRow?.n ?? 0
    let done = 0
    let lastReport = 0
    const report = (force: boolean) =>
      Effect.suspend(() => {
        const now = performance.now()
        if (!options.onProgress || (!force && now - lastReport < (options.progressIntervalMs ?? 1_000)))
          return Effect.void
        lastReport = now
        const seconds = (now - started) / 1_000
        const rate = seconds > 0 ? done / seconds : 0
        return options.onProgress({
          projection: projection.name,
          eventsDone: done,
          eventsTotal: Math.max(total, done),
          eventsPerSecond: Math.round(rate),
          etaSeconds: rate > 0 ? Math.max(0, Math.round((total - done) / rate)) : 0
        })
      })

    const applyBatch = (events: ReadonlyArray<StoredEvent>) =>
      Effect.flatMap(decodeStoredBatch(projection.eventTypes, events), (decoded) =>
        projection.apply(decoded, nextTarget)
      )

    // Phase 1: catch up with the gap-safe reader, one transaction per batch.
    let checkpoint: Checkpoint = origin
    for (;;) {
      const batch = yield* store.readAll({ after: checkpoint, limit: batchSize, eventTypes: types })
      if (batch.events.length === 0) break
      yield* sql.withTransaction(applyBatch(batch.events))
      checkpoint = batch.checkpoint
      done += batch.events.length
      yield* report(false)
    }

    // Phase 2: under the exclusive projection lock, apply what committed since, then swap.
    yield* sql.withTransaction(
      Effect.gen(function* () {
        yield* sql`SELECT pg_advisory_xact_lock(${PROJECTION_LOCK_CLASS}, hashtext(${projection.name}))`
        for (;;) {
          const batch = yield* store.readAll({
            after: checkpoint,
            limit: batchSize,
            eventTypes: types,
            horizon: "visible"
          })
          if (batch.events.length === 0) break
          yield* applyBatch(batch.events)
          checkpoint = batch.checkpoint
          done += batch.events.length
        }
        for (const table of projection.tables) {
          const { table: name } = split(table)
          yield* sql`ALTER TABLE ${sql(table)} RENAME TO ${sql(`${name}${OLD_SUFFIX}`)}`
          yield* sql`ALTER TABLE ${sql(nextTarget.table(table))} RENAME TO ${sql(name)}`
          yield* sql`DROP TABLE ${sql(`${table}${OLD_SUFFIX}`)}`
        }
      })
    )
    yield* report(true)
    const seconds = (performance.now() - started) / 1_000
    return {
      projection: projection.name,
      events: done,
      seconds,
      eventsPerSecond: seconds > 0 ? Math.round(done / seconds) : done
    }
  })
