/**
 * Leases with fencing on `event_store.subscriptions`: one owner at a time per subscription row.
 * Taking the lease bumps `generation` (the fencing token); every write made under the lease is
 * fenced `WHERE owner = $me AND generation = $g`, so a zombie that lost its lease cannot write.
 * The lease row is the only source of truth (no session state: works behind PgBouncer and on PGlite).
 * Every time comparison uses Effect's Clock (`$now` is a parameter), never SQL `now()`.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Data, Duration, Effect, Option, Schedule } from "effect"
import { AppConfig } from "../config.js"
import type { Checkpoint } from "../eventstore/Checkpoint.js"
import { addDuration, now } from "../kernel/Time.js"

export class LeaseLost extends Data.TaggedError("LeaseLost")<{
  readonly subscriptionId: string
  readonly owner: string
  readonly generation: number
}> {
  override get message() {
    return `lease on ${this.subscriptionId} (owner ${this.owner}, generation ${this.generation}) was lost`
  }
}

export interface Lease {
  readonly subscriptionId: string
  readonly owner: string
  /** Fencing token: strictly increases with every acquisition. */
  readonly generation: number
  readonly leaseUntil: Date
}

/** A freshly acquired lease, with the subscription's checkpoint as of the acquisition. */
export interface AcquiredLease extends Lease {
  readonly checkpoint: Checkpoint
}

export interface LeaseOptions {
  readonly owner: string
  readonly ttl: Duration.DurationInput
}

/** The explicit owner, or this process's `AppConfig.instanceId`. */
export const resolveOwner = (owner?: string): Effect.Effect<string, never, AppConfig> =>
  owner !== undefined ? Effect.succeed(owner) : Effect.map(AppConfig, (c) => c.instanceId)

const leaseEnd = (ttl: Duration.DurationInput) =>
  Effect.map(now, (at) => ({ now: at, until: addDuration(at, ttl) }))

interface AcquireRow {
  readonly generation: number
  readonly leaseUntil: Date
  readonly lastXid: string
  readonly lastPosition: number
}

/**
 * Takes the lease if it is free, expired, or already ours (the row is created if missing). Every
 * acquisition bumps the generation, so an older incarnation with the same owner id is fenced off
 * too. A `paused` subscription is never taken. None when someone else holds a live lease.
 */
export const acquire = (
  subscriptionId: string,
  options: LeaseOptions
): Effect.Effect<Option.Option<AcquiredLease>, SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const { now, until } = yield* leaseEnd(options.ttl)
    const rows = yield* sql<AcquireRow>`
      INSERT INTO event_store.subscriptions AS s
        (subscription_id, owner, generation, lease_until, updated_at)
      VALUES (${subscriptionId}, ${options.owner}, 1, ${until}, ${now})
      ON CONFLICT (subscription_id) DO UPDATE
        SET owner = EXCLUDED.owner, generation = s.generation + 1, lease_until = EXCLUDED.lease_until,
            updated_at = EXCLUDED.updated_at
        WHERE s.status <> 'paused'
          AND (s.owner IS NULL OR s.owner = EXCLUDED.owner OR s.lease_until IS NULL OR s.lease_until < ${now})
      RETURNING s.generation, s.lease_until AS "leaseUntil", s.last_xid::text AS "lastXid",
                s.last_position AS "lastPosition"`
    const row = rows[0]
    if (!row) return Option.none()
    return Option.some({
      subscriptionId,
      owner: options.owner,
      generation: row.generation,
      leaseUntil: row.leaseUntil,
      checkpoint: { xid: row.lastXid, position: row.lastPosition }
    })
  })

/**
 * Extends a lease we hold (heartbeat). Fails with `LeaseLost` if another owner took it over or the
 * subscription was paused.
 */
export const renew = (
  lease: Lease,
  ttl: Duration.DurationInput
): Effect.Effect<Lease, LeaseLost | SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const { now, until } = yield* leaseEnd(ttl)
    const rows = yield* sql<{ leaseUntil: Date }>`
      UPDATE event_store.subscriptions SET lease_until = ${until}, updated_at = ${now}
       WHERE subscription_id = ${lease.subscriptionId} AND owner = ${lease.owner}
         AND generation = ${lease.generation} AND status <> 'paused'
      RETURNING lease_until AS "leaseUntil"`
    const row = rows[0]
    if (!row) return yield* lostError(lease)
    return { ...lease, leaseUntil: row.leaseUntil }
  })

/** Gives the lease up (shutdown). Returns false when it was no longer ours. */
export const release = (lease: Lease): Effect.Effect<boolean, SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const at = yield* now
    const rows = yield* sql`
      UPDATE event_store.subscriptions SET owner = NULL, lease_until = NULL, updated_at = ${at}
       WHERE subscription_id = ${lease.subscriptionId} AND owner = ${lease.owner}
         AND generation = ${lease.generation}
      RETURNING 1 AS ok`
    return rows.length > 0
  })

export const lostError = (lease: Pick<Lease, "subscriptionId" | "owner" | "generation">) =>
  new LeaseLost({ subscriptionId: lease.subscriptionId, owner: lease.owner, generation: lease.generation })

export interface HoldOptions extends LeaseOptions {
  /** Heartbeat period (default a third of the TTL). */
  readonly heartbeat?: Duration.DurationInput
  /** How often a standby retries to take the lease (default 1 s, at most the TTL). */
  readonly retryInterval?: Duration.DurationInput
}

/**
 * Waits until the lease is ours, then runs `use` while a heartbeat keeps the lease alive. Ends with
 * `use`'s result, or fails with `LeaseLost` (interrupting `use`) when a heartbeat finds the lease
 * taken over. The lease is released however `use` ends.
 */
export const withLease = <A, E, R>(
  subscriptionId: string,
  options: HoldOptions,
  use: (lease: AcquiredLease) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | LeaseLost | SqlError, R | SqlClient.SqlClient> => {
  const ttlMs = Duration.toMillis(options.ttl)
  const heartbeatMs = Duration.toMillis(options.heartbeat ?? Math.max(1, Math.floor(ttlMs / 3)))
  const retryMs = Math.min(Duration.toMillis(options.retryInterval ?? "1 second"), ttlMs)
  // A transient database error does not lose the lease: retry a few times within the TTL.
  const heartbeat = (lease: Lease): Effect.Effect<never, LeaseLost | SqlError, SqlClient.SqlClient> =>
    Effect.sleep(Duration.millis(heartbeatMs)).pipe(
      Effect.zipRight(
        Effect.uninterruptible(renew(lease, options.ttl)).pipe(
          Effect.retry({
            while: (e) => e._tag === "SqlError",
            schedule: Schedule.spaced(Duration.millis(Math.max(1, Math.floor(heartbeatMs / 4)))).pipe(
              Schedule.intersect(Schedule.recurs(2))
            )
          })
        )
      ),
      Effect.flatMap(heartbeat)
    )
  // Each acquisition attempt is uninterruptible (a lease taken is always released); the waits between
  // attempts and `use` are not, so shutdown never hangs on a standby.
  return Effect.uninterruptibleMask((restore) => {
    const take = (): Effect.Effect<AcquiredLease, SqlError, SqlClient.SqlClient> =>
      Effect.flatMap(acquire(subscriptionId, options), (lease) =>
        Option.match(lease, {
          onSome: Effect.succeed,
          onNone: () => Effect.zipRight(restore(Effect.sleep(Duration.millis(retryMs))), Effect.suspend(take))
        })
      )
    return Effect.flatMap(take(), (lease) =>
      restore(Effect.raceFirst(use(lease), heartbeat(lease))).pipe(
        Effect.ensuring(release(lease).pipe(Effect.ignore))
      )
    )
  })
}
