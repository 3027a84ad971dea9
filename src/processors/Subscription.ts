/**
 * Checkpointed subscription processors: one active owner per subscription (a fenced lease), reading
 * the global feed (`events` or `public_events`) with the gap-safe reader, and committing each batch's
 * handler writes together with its checkpoint — fenced `WHERE owner = $me AND generation = $g`, so a
 * zombie whose lease was taken over rolls its whole batch back. Delivery is at-least-once per
 * subscription; handlers whose writes go to the database get exactly-once effects.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Cause, Duration, Effect, Option, Queue, Schedule } from "effect"
import type { AppConfig } from "../config.js"
import { transaction } from "../db/Transaction.js"
import { AppendSignal } from "../eventstore/AppendSignal.js"
import { type Checkpoint, compare, origin } from "../eventstore/Checkpoint.js"
import { EventStore, type StoredEvent } from "../eventstore/EventStore.js"
import { type PublicEvent, readPublicEvents } from "../eventstore/PublicEvents.js"
import { isConcurrencyConflict } from "../kernel/CommandRunner.js"
import { now, nowMillis } from "../kernel/Time.js"
import { type AcquiredLease, LeaseLost, lostError, resolveOwner, withLease } from "./Lease.js"
import { causeMessage, type Processor } from "./Supervisor.js"

/**
 * Between runs of a batch that lost a race on a stream: a few milliseconds, jittered, growing to at
 * most 200 ms — a hot stream (a storm of refunds on one order) can take several rounds.
 */
const CONFLICT_BACKOFF = Schedule.jittered(
  Schedule.exponential(Duration.millis(5)).pipe(Schedule.either(Schedule.spaced(Duration.millis(200))))
)
const CONFLICT_RETRIES = 10

export type SubscriptionSource = "events" | "public_events"

export type SourceRow<S extends SubscriptionSource> = S extends "events" ? StoredEvent : PublicEvent

export interface BatchContext {
  readonly subscriptionId: string
  readonly owner: string
  readonly generation: number
  /** The checkpoint before the batch and the one committed with it. */
  readonly from: Checkpoint
  readonly to: Checkpoint
}

export interface SubscriptionSpec {
  /** The subscription id (row in `event_store.subscriptions`) and the processor name. */
  readonly name: string
  readonly source: SubscriptionSource
  /** Only these event types (`event_type` / public `type`); all when absent. */
  readonly eventTypes?: ReadonlyArray<string>
}

export interface SubscriptionOptions<S extends SubscriptionSource, E, R> extends SubscriptionSpec {
  readonly source: S
  /** Events per batch (default 500). */
  readonly batchSize?: number
  /** Lease owner (default `AppConfig.instanceId`). */
  readonly owner?: string
  /** Lease time-to-live (default 15 s); heartbeat every third of it unless `heartbeat` is given. */
  readonly leaseTtl?: Duration.DurationInput
  readonly heartbeat?: Duration.DurationInput
  /** How often a standby instance retries to take the lease (default 1 s). */
  readonly acquireInterval?: Duration.DurationInput
  /** Poll delay: `min` while there is work (default 10 ms), doubling up to `max` when idle (250 ms). */
  readonly pollInterval?: { readonly min?: Duration.DurationInput; readonly max?: Duration.DurationInput }
  /**
   * Runs inside the batch transaction: its SQL statements commit with the checkpoint or not at all.
   * It must not fork fibers that outlive it. A failure rolls the batch back and fails the processor
   * (the supervisor restarts it and the batch is retried from the checkpoint).
   */
  readonly handle: (events: ReadonlyArray<SourceRow<S>>, context: BatchContext) => Effect.Effect<void, E, R>
}

export type SubscriptionServices = SqlClient.SqlClient | AppendSignal | AppConfig

export interface SubscriptionProcessor<R> extends Processor<R> {
  readonly subscription: SubscriptionSpec
  /** Checkpoint, lag and lease of this subscription. */
  readonly status: Effect.Effect<SubscriptionStatus, SqlError, SqlClient.SqlClient>
}

interface Batch {
  readonly rows: ReadonlyArray<StoredEvent | PublicEvent>
  readonly checkpoint: Checkpoint
  readonly lastEventAt: Date | null
}

export function subscriptionProcessor<E, R>(
  options: SubscriptionOptions<"events", E, R>
): SubscriptionProcessor<R | SubscriptionServices | EventStore>
export function subscriptionProcessor<E, R>(
  options: SubscriptionOptions<"public_events", E, R>
): SubscriptionProcessor<R | SubscriptionServices>
export function subscriptionProcessor<E, R>(
  options: SubscriptionOptions<SubscriptionSource, E, R>
): SubscriptionProcessor<R | SubscriptionServices | EventStore> {
  const spec: SubscriptionSpec = {
    name: options.name,
    source: options.source,
    ...(options.eventTypes === undefined ? {} : { eventTypes: options.eventTypes })
  }
  const batchSize = options.batchSize ?? 500
  const ttl = options.leaseTtl ?? "15 seconds"
  const minPoll = Duration.toMillis(options.pollInterval?.min ?? "10 millis")
  const maxPoll = Math.max(minPoll, Duration.toMillis(options.pollInterval?.max ?? "250 millis"))
  const types = options.eventTypes
  const handle = options.handle

  const read = (after: Checkpoint): Effect.Effect<Batch, SqlError, SqlClient.SqlClient | EventStore> =>
    options.source === "events"
      ? Effect.flatMap(EventStore, (store) =>
          store.readAll({ after, limit: batchSize, ...(types ? { eventTypes: types } : {}) })
        ).pipe(
          Effect.map((r) => ({
            rows: r.events,
            checkpoint: r.checkpoint,
            lastEventAt: r.events[r.events.length - 1]?.recordedAt ?? null
          }))
        )
      : readPublicEvents({ after, limit: batchSize, ...(types ? { types } : {}) }).pipe(
          Effect.map((r) => ({
            rows: r.events,
            checkpoint: r.checkpoint,
            lastEventAt: r.events[r.events.length - 1]?.occurredAt ?? null
          }))
        )

  const commit = (lease: AcquiredLease, from: Checkpoint, batch: Batch) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const context: BatchContext = {
        subscriptionId: options.name,
        owner: lease.owner,
        generation: lease.generation,
        from,
        to: batch.checkpoint
      }
      yield* transaction(
        Effect.gen(function* () {
          // No rows: only the checkpoint moves, past events of types this subscription skips.
          if (batch.rows.length > 0) yield* handle(batch.rows, context)
          const at = yield* now
          // Fenced by the lease and by the checkpoint the row holds (an operator reset wins too).
          const updated = yield* Effect.uninterruptible(sql`
            UPDATE event_store.subscriptions
               SET last_xid = ${batch.checkpoint.xid}::xid8, last_position = ${batch.checkpoint.position},
                   last_event_at = COALESCE(${batch.lastEventAt}, last_event_at), error = NULL, updated_at = ${at}
             WHERE subscription_id = ${options.name} AND owner = ${lease.owner}
               AND generation = ${lease.generation}
               AND last_xid = ${from.xid}::xid8 AND last_position = ${from.position}
            RETURNING 1 AS ok`)
          if (updated.length === 0) return yield* lostError(lease)
        })
      ).pipe(
        // A handler's command lost a race on its stream to another writer (a request completing
        // the same checkout): nothing of the batch committed, so it runs again after a few milliseconds,
        // deciding on what the winner wrote — not a failure to restart the processor over.
        Effect.retry({ while: isConcurrencyConflict, times: CONFLICT_RETRIES, schedule: CONFLICT_BACKOFF })
      )
    }).pipe(
      Effect.tapErrorCause((cause) =>
        Cause.isInterruptedOnly(cause) ||
        Option.exists(Cause.failureOption(cause), (e) => e instanceof LeaseLost)
          ? Effect.void
          : recordError(lease, causeMessage(cause))
      ),
      Effect.withSpan("subscription.batch", {
        attributes: { "subscription.id": options.name, "batch.size": batch.rows.length }
      })
    )

  const recordError = (lease: AcquiredLease, message: string) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const at = yield* now
      yield* sql`UPDATE event_store.subscriptions SET error = ${message}, updated_at = ${at}
                  WHERE subscription_id = ${options.name} AND owner = ${lease.owner}
                    AND generation = ${lease.generation}`
    }).pipe(Effect.ignore)

  const session = (lease: AcquiredLease, wake: Queue.Dequeue<void>) =>
    Effect.gen(function* () {
      yield* Effect.logDebug(`subscription ${options.name}: lease taken (generation ${lease.generation})`)
      // The row's checkpoint (what a commit is fenced by) and where the next read starts: a
      // filtered read moves past the events it skipped, and that is written down only with the
      // next batch or every SKIPPED_CHECKPOINT_EVERY_MS (a restart just scans them once more).
      let stored = lease.checkpoint
      let storedAt = yield* nowMillis
      let checkpoint = lease.checkpoint
      let delay = minPoll
      while (true) {
        // Our own statements are short and never interrupted: cancelling a query needs a second
        // connection, which the embedded database (one connection) does not have.
        const batch = yield* Effect.uninterruptible(read(checkpoint))
        const at = yield* nowMillis
        if (
          batch.rows.length > 0 ||
          (at - storedAt >= SKIPPED_CHECKPOINT_EVERY_MS && compare(batch.checkpoint, stored) > 0)
        ) {
          yield* commit(lease, stored, batch)
          stored = batch.checkpoint
          storedAt = at
        }
        checkpoint = batch.checkpoint
        if (batch.rows.length > 0) {
          delay = minPoll
          if (batch.rows.length >= batchSize) continue
        }
        const woken = yield* Effect.raceFirst(
          Effect.as(Queue.take(wake), true),
          Effect.as(Effect.sleep(Duration.millis(delay)), false)
        )
        // A wake-up means work exists, though an older transaction still running anywhere on the
        // server can keep it invisible for a moment: poll fast again rather than go back to idle.
        if (woken) delay = minPoll
        else if (batch.rows.length === 0) delay = Math.min(delay * 2, maxPoll)
      }
    })

  const run = Effect.gen(function* () {
    const signal = yield* AppendSignal
    const owner = yield* resolveOwner(options.owner)
    // Listen before the first read, so no local append between the two is missed.
    const wake = yield* signal.listen
    const hold = {
      owner,
      ttl,
      ...(options.heartbeat === undefined ? {} : { heartbeat: options.heartbeat }),
      ...(options.acquireInterval === undefined ? {} : { retryInterval: options.acquireInterval })
    }
    return yield* Effect.forever(
      withLease(options.name, hold, (lease) => session(lease, wake)).pipe(
        // Losing the lease is routine (a pause, a takeover): go back to standby.
        Effect.catchIf(
          (e): e is LeaseLost => e instanceof LeaseLost,
          (e) => Effect.logWarning(e.message)
        )
      )
    )
  }).pipe(Effect.scoped, Effect.annotateLogs("subscription", options.name))

  return {
    name: options.name,
    run,
    subscription: spec,
    status: subscriptionStatus(spec)
  }
}

/** How often a checkpoint moved past skipped events only is written down (see `session`). */
const SKIPPED_CHECKPOINT_EVERY_MS = 5_000

/**
 * Lag is counted up to this many events: status and /metrics stay one bounded index scan even for a
 * subscription that is far behind (or has never run); the count saturates there.
 */
export const LAG_COUNT_CAP = 100_000

export interface SubscriptionStatus {
  readonly subscriptionId: string
  readonly source: SubscriptionSource
  readonly checkpoint: Checkpoint
  /** Events after the checkpoint (matching the subscription's types), up to LAG_COUNT_CAP. */
  readonly lagEvents: number
  /** Age of the oldest unprocessed event, by the Clock; 0 when caught up. */
  readonly lagSeconds: number
  readonly owner: string | null
  readonly generation: number
  readonly leaseUntil: Date | null
  /** `running`, `paused`, … or `new` when the subscription has never run. */
  readonly status: string
  readonly error: string | null
  readonly lastEventAt: Date | null
  readonly updatedAt: Date | null
}

/** The stored part of the status: everything but what is computed from the feed. */
type StatusRow = Omit<
  SubscriptionStatus,
  "subscriptionId" | "source" | "checkpoint" | "lagEvents" | "lagSeconds"
> & {
  readonly lastXid: string
  readonly lastPosition: number
}

/** The row of a subscription that has never run. */
const neverRun: StatusRow = {
  lastXid: origin.xid,
  lastPosition: origin.position,
  owner: null,
  generation: 0,
  leaseUntil: null,
  status: "new",
  error: null,
  lastEventAt: null,
  updatedAt: null
}

/** Checkpoint, lag and lease of a subscription (for the ops RPC and metrics). */
export const subscriptionStatus = (
  spec: SubscriptionSpec
): Effect.Effect<SubscriptionStatus, SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<StatusRow>`
      SELECT last_xid::text AS "lastXid", last_position AS "lastPosition", owner, generation,
             lease_until AS "leaseUntil", status, error, last_event_at AS "lastEventAt", updated_at AS "updatedAt"
        FROM event_store.subscriptions WHERE subscription_id = ${spec.name}`
    const { lastXid, lastPosition, ...stored } = rows[0] ?? neverRun
    const checkpoint: Checkpoint = { xid: lastXid, position: lastPosition }
    const types = spec.eventTypes && spec.eventTypes.length > 0 ? spec.eventTypes : undefined
    const lag =
      spec.source === "events"
        ? yield* sql<{ count: number; oldest: Date | null }>`
            SELECT count(*) AS count, min(recorded_at) AS oldest FROM (
              SELECT recorded_at FROM event_store.events
               WHERE (transaction_id, global_position) > (${checkpoint.xid}::xid8, ${checkpoint.position})
                 ${types ? sql`AND event_type = ANY(${types})` : sql``}
               ORDER BY transaction_id, global_position LIMIT ${LAG_COUNT_CAP}) behind`
        : yield* sql<{ count: number; oldest: Date | null }>`
            SELECT count(*) AS count, min(occurred_at) AS oldest FROM (
              SELECT occurred_at FROM event_store.public_events
               WHERE (transaction_id, position) > (${checkpoint.xid}::xid8, ${checkpoint.position})
                 ${types ? sql`AND type = ANY(${types})` : sql``}
               ORDER BY transaction_id, position LIMIT ${LAG_COUNT_CAP}) behind`
    const at = yield* nowMillis
    const oldest = lag[0]?.oldest
    return {
      subscriptionId: spec.name,
      source: spec.source,
      checkpoint,
      lagEvents: lag[0]?.count ?? 0,
      lagSeconds: oldest ? Math.max(0, (at - oldest.getTime()) / 1000) : 0,
      ...stored
    }
  })
