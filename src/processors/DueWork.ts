/**
 * Durable timed work (webhook retries, scheduled notifications, expiries, renewals) in
 * `processors.due_work`. Workers claim due rows with `FOR UPDATE SKIP LOCKED` and a lease in one short
 * statement, run the handler (the I/O) outside any transaction, then record the outcome in a second
 * short transaction fenced by `claim_token`: a worker whose lease expired and was taken over records
 * nothing. A crash loses nothing — an expired claim is reclaimed (at-least-once). `$now` always comes
 * from Effect's Clock.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Deferred, Duration, Effect, Exit, FiberSet, Layer, Option, Queue, type Scope } from "effect"
import { uuidv7 } from "../base/Uuid.js"
import type { AppConfig } from "../config.js"
import { transactionWith } from "../db/Transaction.js"
import { makeAppendSignal } from "../eventstore/AppendSignal.js"
import { isConcurrencyConflict } from "../kernel/CommandRunner.js"
import { addDuration, fromNow, now } from "../kernel/Time.js"
import { resolveOwner } from "./Lease.js"
import { causeMessage, type Processor } from "./Supervisor.js"

export type DueStatus = "pending" | "claimed" | "done" | "failed" | "cancelled"

export interface DueItem {
  readonly id: string
  readonly kind: string
  readonly key: string
  /** Items of one group (e.g. one webhook endpoint) can be capped per worker: see `groupCap`. */
  readonly group: string | null
  readonly payload: unknown
  readonly dueAt: Date
  readonly status: DueStatus
  /** Claims so far (the current one included while claimed). */
  readonly attempts: number
  readonly claimedBy: string | null
  /** Fencing token of the current claim. */
  readonly claimToken: number
  readonly leaseUntil: Date | null
  readonly lastError: string | null
  readonly createdAt: Date
  readonly updatedAt: Date
  readonly completedAt: Date | null
}

export interface ScheduleInput {
  readonly kind: string
  readonly key: string
  readonly dueAt: Date
  readonly payload?: unknown
  readonly group?: string
  /** Re-arm an item that is done, failed or cancelled (as new: attempts reset). */
  readonly replace?: boolean
}

interface InTransaction<E, R, B> {
  readonly inTransaction?: Effect.Effect<void, E, R>
  /**
   * The same writes as `inTransaction`, as a value a worker with `recordBatched` records together
   * with other outcomes' in one transaction (a group commit). `complete` alone uses `inTransaction`.
   */
  readonly batched?: B
}

/**
 * What a handler decided. `inTransaction` runs in the outcome's transaction (e.g. appending the
 * events that record it), so the outcome and its writes commit together — or not at all.
 */
export type DueOutcome<E = never, R = never, B = never> = (
  | { readonly _tag: "Done" }
  | { readonly _tag: "Retry"; readonly at: Date; readonly error: string }
  | { readonly _tag: "Failed"; readonly error: string }
) &
  InTransaction<E, R, B>

const withEffect = <E, R, B>(options: InTransaction<E, R, B> | undefined) => ({
  ...(options?.inTransaction === undefined ? {} : { inTransaction: options.inTransaction }),
  ...(options?.batched === undefined ? {} : { batched: options.batched })
})

export const DueOutcome = {
  done: <E = never, R = never, B = never>(options?: InTransaction<E, R, B>): DueOutcome<E, R, B> => ({
    _tag: "Done",
    ...withEffect(options)
  }),
  /** Back to pending, due again at `at`. */
  retry: <E = never, R = never, B = never>(
    options: { readonly at: Date; readonly error: string } & InTransaction<E, R, B>
  ): DueOutcome<E, R, B> => ({ _tag: "Retry", at: options.at, error: options.error, ...withEffect(options) }),
  failed: <E = never, R = never, B = never>(
    options: { readonly error: string } & InTransaction<E, R, B>
  ): DueOutcome<E, R, B> => ({
    _tag: "Failed",
    error: options.error,
    ...withEffect(options)
  })
}

/** A claim and what its handler decided, for `completeMany`. */
export interface Completion {
  readonly item: DueItem
  readonly outcome: DueOutcome<unknown, unknown, unknown>
}

export interface ClaimOptions {
  readonly kinds: ReadonlyArray<string>
  readonly limit: number
  readonly owner: string
  readonly leaseTtl: Duration.DurationInput
  /**
   * At most `cap` claimed items per group, counting `inFlight` (what the caller already holds).
   * Items without a group are not limited.
   */
  readonly groups?: { readonly cap: number; readonly inFlight: ReadonlyMap<string, number> }
}

export interface DueWorkStats {
  readonly kind: string
  readonly pending: number
  /** Pending and already due (the backlog). */
  readonly due: number
  readonly claimed: number
  /** Claims whose lease ran out (a crashed or stuck worker). */
  readonly expiredClaims: number
  readonly failed: number
  /** Oldest due time among pending items that are due. */
  readonly oldestDueAt: Date | null
}

export interface DueWorkShape {
  /**
   * Idempotent on (kind, key): a pending item gets the new due time and payload; a claimed item is
   * left alone; a done, failed or cancelled item is left alone unless `replace`. Returns the item as
   * it now stands. Outside a transaction it wakes local workers; inside one, call `wake` after commit.
   */
  readonly schedule: (input: ScheduleInput) => Effect.Effect<DueItem, SqlError>
  /**
   * `schedule` for many items in one statement (the same rules per item; of one (kind, key) given
   * twice the last wins). Returns how many were created or re-armed. Call `wake` after commit.
   */
  readonly scheduleMany: (inputs: ReadonlyArray<ScheduleInput>) => Effect.Effect<number, SqlError>
  /**
   * Cancels a pending or claimed item (a running worker's outcome is then ignored). With
   * `pendingOnly`, a claimed item is left alone (its I/O may already have happened) and false returned.
   */
  readonly cancel: (
    kind: string,
    key: string,
    options?: { readonly pendingOnly?: boolean }
  ) => Effect.Effect<boolean, SqlError>
  /** `cancel` (pending or claimed) of many items in one statement; answers how many were cancelled. */
  readonly cancelMany: (
    items: ReadonlyArray<{ readonly kind: string; readonly key: string }>
  ) => Effect.Effect<number, SqlError>
  readonly get: (kind: string, key: string) => Effect.Effect<Option.Option<DueItem>, SqlError>
  /** Claims due items (and items whose claim expired) for `owner`. */
  readonly claim: (options: ClaimOptions) => Effect.Effect<ReadonlyArray<DueItem>, SqlError>
  /** Extends a claim's lease (heartbeat). False when the claim is no longer ours. */
  readonly extend: (item: DueItem, leaseTtl: Duration.DurationInput) => Effect.Effect<boolean, SqlError>
  /**
   * Records the outcome of a claim, fenced by its claim token, with its `inTransaction` writes.
   * False (and nothing written) when the claim was taken over or cancelled meanwhile.
   */
  readonly complete: <E, R, B>(
    item: DueItem,
    outcome: DueOutcome<E, R, B>
  ) => Effect.Effect<boolean, E | SqlError, R>
  /**
   * Records the outcomes of many claims in one statement, each fenced by its claim token; their
   * `inTransaction` writes are NOT run (the caller writes them, in the same transaction). Returns the
   * ids of the claims that were still ours (only those were recorded).
   */
  readonly completeMany: (
    completions: ReadonlyArray<Completion>
  ) => Effect.Effect<ReadonlySet<string>, SqlError>
  /** Gives a claim back (pending again, same due time), e.g. on shutdown. */
  readonly release: (item: DueItem) => Effect.Effect<boolean, SqlError>
  readonly stats: (kinds?: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<DueWorkStats>, SqlError>
  /** Deletes up to `limit` done or cancelled items completed before `before`; returns how many went. */
  readonly purgeFinished: (before: Date, limit: number) => Effect.Effect<number, SqlError>
  /** Wakes local workers now. */
  readonly wake: Effect.Effect<void>
  readonly listen: Effect.Effect<Queue.Dequeue<void>, never, Scope.Scope>
}

export class DueWork extends Context.Tag("processors/DueWork")<DueWork, DueWorkShape>() {}

const COLUMNS = `id, kind, key, group_key AS "group", payload, due_at AS "dueAt", status, attempts, claimed_by AS "claimedBy",
  claim_token AS "claimToken", lease_until AS "leaseUntil", last_error AS "lastError",
  created_at AS "createdAt", updated_at AS "updatedAt", completed_at AS "completedAt"`

const byDueAt = (a: DueItem, b: DueItem) => a.dueAt.getTime() - b.dueAt.getTime()

export const makeDueWork = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const transact = transactionWith(sql)
  const signal = yield* makeAppendSignal
  const columns = sql.literal(COLUMNS)
  // Qualified for the statements where `d` is joined (`id` alone would be ambiguous).
  const columnsOfD = sql.literal(
    COLUMNS.split(",")
      .map((c) => `d.${c.trim()}`)
      .join(", ")
  )
  /** The fence of every write made under a claim: still this very claim. */
  const claimed = (item: DueItem) =>
    sql`id = ${item.id} AND claim_token = ${item.claimToken} AND status = 'claimed'`

  /**
   * Scheduling an existing (kind, key): a pending item takes the new due time and payload; a claimed
   * one is left alone; a finished one is re-armed as new only with `replace`.
   */
  const upsert = (replace: boolean) =>
    replace
      ? sql`ON CONFLICT (kind, key) DO UPDATE
              SET payload = EXCLUDED.payload, due_at = EXCLUDED.due_at, status = 'pending', attempts = 0,
                  last_error = NULL, claimed_by = NULL, lease_until = NULL, completed_at = NULL,
                  updated_at = EXCLUDED.updated_at
              WHERE d.status IN ('pending', 'done', 'failed', 'cancelled')`
      : sql`ON CONFLICT (kind, key) DO UPDATE
              SET payload = EXCLUDED.payload, due_at = EXCLUDED.due_at, status = 'pending',
                  claimed_by = NULL, lease_until = NULL, completed_at = NULL, updated_at = EXCLUDED.updated_at
              WHERE d.status = 'pending'`

  const get = (kind: string, key: string) =>
    Effect.map(
      sql<DueItem>`SELECT ${columns} FROM processors.due_work WHERE kind = ${kind} AND key = ${key}`,
      (rows) => Option.fromNullable(rows[0])
    )

  const service: DueWorkShape = {
    schedule: (input) =>
      Effect.gen(function* () {
        const at = yield* now
        const id = yield* uuidv7
        const replace = input.replace === true
        const rows = yield* sql<DueItem>`
          INSERT INTO processors.due_work AS d (id, kind, key, group_key, payload, due_at, status, created_at, updated_at)
          VALUES (${id}, ${input.kind}, ${input.key}, ${input.group ?? null}, ${JSON.stringify(input.payload ?? {})}::jsonb,
                  ${input.dueAt}, 'pending', ${at}, ${at})
          ${upsert(replace)}
          RETURNING ${columnsOfD}`
        const row = rows[0]
        if (row) {
          yield* signal.notifyAfterCommit
          return row
        }
        // Left alone (claimed, or finished without `replace`): nothing new for the workers.
        const existing = yield* get(input.kind, input.key)
        if (Option.isNone(existing)) return yield* Effect.dieMessage("due_work row vanished during schedule")
        return existing.value
      }),

    scheduleMany: (inputs) =>
      Effect.gen(function* () {
        if (inputs.length === 0) return 0
        const at = yield* now
        // One row per (kind, key): ON CONFLICT cannot touch a row twice in one statement.
        const unique = new Map<string, ScheduleInput>()
        for (const input of inputs) unique.set(`${input.kind}\u0000${input.key}`, input)
        let changed = 0
        for (const replace of [false, true]) {
          const rows: Array<Record<string, unknown>> = []
          for (const input of unique.values()) {
            if ((input.replace === true) !== replace) continue
            rows.push({
              id: yield* uuidv7,
              kind: input.kind,
              key: input.key,
              group_key: input.group ?? null,
              payload: input.payload ?? {},
              due_at: input.dueAt.toISOString()
            })
          }
          if (rows.length === 0) continue
          const written = yield* sql<{ readonly ok: number }>`
            INSERT INTO processors.due_work AS d (id, kind, key, group_key, payload, due_at, status, created_at, updated_at)
            SELECT i.id, i.kind, i.key, i.group_key, i.payload, i.due_at, 'pending', ${at}, ${at}
              FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb)
                     AS i(id text, kind text, key text, group_key text, payload jsonb, due_at timestamptz)
            ${upsert(replace)}
            RETURNING 1 AS ok`
          changed += written.length
        }
        if (changed > 0) yield* signal.notifyAfterCommit
        return changed
      }),

    cancelMany: (items) =>
      items.length === 0
        ? Effect.succeed(0)
        : Effect.gen(function* () {
            const at = yield* now
            const pairs = JSON.stringify(items.map((i) => ({ kind: i.kind, key: i.key })))
            const rows = yield* sql`
              UPDATE processors.due_work d
                 SET status = 'cancelled', claim_token = d.claim_token + 1, lease_until = NULL,
                     completed_at = ${at}, updated_at = ${at}
                FROM jsonb_to_recordset(${pairs}::jsonb) AS i(kind text, key text)
               WHERE d.kind = i.kind AND d.key = i.key AND d.status IN ('pending', 'claimed')
              RETURNING 1 AS ok`
            return rows.length
          }),

    cancel: (kind, key, options) =>
      Effect.gen(function* () {
        const at = yield* now
        const statuses = options?.pendingOnly === true ? ["pending"] : ["pending", "claimed"]
        const rows = yield* sql`
          UPDATE processors.due_work
             SET status = 'cancelled', claim_token = claim_token + 1, lease_until = NULL,
                 completed_at = ${at}, updated_at = ${at}
           WHERE kind = ${kind} AND key = ${key} AND status = ANY(${statuses})
          RETURNING 1 AS ok`
        return rows.length > 0
      }),

    get,

    claim: (options) =>
      Effect.gen(function* () {
        if (options.limit <= 0 || options.kinds.length === 0) return []
        const at = yield* now
        const until = addDuration(at, options.leaseTtl)
        const kinds = [...options.kinds]
        // One kind as `=`: the (kind, time) index then yields rows in time order, and the scan stops
        // at the LIMIT.
        const ofKinds = kinds.length === 1 ? sql`kind = ${kinds[0] ?? ""}` : sql`kind = ANY(${kinds})`
        // Several kinds (billing's worker has four): one such ordered scan per kind, each stopping at
        // the LIMIT, then the earliest of them. `kind = ANY(…)` instead read and sorted every due item
        // of those kinds on every claim (4.6 ms at 10,000 due, growing with the backlog; 0.06 ms so).
        // Rows a kind's scan locked beyond what is picked are unlocked when the statement commits.
        const due =
          kinds.length === 1
            ? sql`
            SELECT id FROM processors.due_work
             WHERE status = 'pending' AND due_at <= ${at} AND ${ofKinds}
             ORDER BY due_at LIMIT ${options.limit} FOR UPDATE SKIP LOCKED`
            : sql`
            SELECT d.id FROM unnest(${kinds}::text[]) AS k(kind),
              LATERAL (SELECT w.id, w.due_at FROM processors.due_work w
                        WHERE w.status = 'pending' AND w.kind = k.kind AND w.due_at <= ${at}
                        ORDER BY w.due_at LIMIT ${options.limit} FOR UPDATE SKIP LOCKED) AS d
             ORDER BY d.due_at LIMIT ${options.limit}`
        // Capped per group: saturated groups are skipped in the scan, the others get what is left of
        // their cap (row_number per group), then the rows are locked (re-checked, skipping taken ones).
        const dueByGroup = (groups: NonNullable<ClaimOptions["groups"]>) => {
          const saturated = [...groups.inFlight].filter(([, n]) => n >= groups.cap).map(([g]) => g)
          const held = JSON.stringify(Object.fromEntries(groups.inFlight))
          return sql`
            SELECT id FROM processors.due_work
             WHERE status = 'pending' AND id IN (
               SELECT id FROM (
                 SELECT id, due_at, group_key,
                        row_number() OVER (PARTITION BY group_key ORDER BY due_at, id) AS rn
                   FROM (SELECT id, due_at, group_key FROM processors.due_work
                          WHERE status = 'pending' AND due_at <= ${at} AND ${ofKinds}
                            AND (group_key IS NULL OR NOT (group_key = ANY(${saturated})))
                          ORDER BY due_at LIMIT ${Math.min(options.limit * 8, 2000)}) AS scan
               ) AS ranked
                WHERE group_key IS NULL
                   OR rn <= ${groups.cap} - coalesce((${held}::jsonb ->> group_key)::int, 0)
                ORDER BY due_at LIMIT ${options.limit})
             FOR UPDATE SKIP LOCKED`
        }
        // One statement = one short transaction; never interrupted, so a claim the database made is
        // never lost to us. Each branch scans its own partial index.
        const rows = yield* Effect.uninterruptible(sql<DueItem>`
          WITH expired AS (
            SELECT id FROM processors.due_work
             WHERE status = 'claimed' AND lease_until < ${at} AND ${ofKinds}
             ORDER BY lease_until LIMIT ${options.limit} FOR UPDATE SKIP LOCKED
          ), due AS (${options.groups === undefined ? due : dueByGroup(options.groups)}
          ), picked AS (
            SELECT id FROM (SELECT id FROM expired UNION ALL SELECT id FROM due) AS c LIMIT ${options.limit}
          )
          UPDATE processors.due_work d
             SET status = 'claimed', claimed_by = ${options.owner}, claim_token = d.claim_token + 1,
                 lease_until = ${until}, attempts = d.attempts + 1, updated_at = ${at}
            FROM picked WHERE d.id = picked.id
          RETURNING ${columnsOfD}`)
        return [...rows].sort(byDueAt)
      }),

    extend: (item, leaseTtl) =>
      Effect.gen(function* () {
        const at = yield* now
        const until = addDuration(at, leaseTtl)
        const rows = yield* sql`
          UPDATE processors.due_work SET lease_until = ${until}, updated_at = ${at}
            WHERE ${claimed(item)} RETURNING 1 AS ok`
        return rows.length > 0
      }),

    // Short and never interrupted: an outcome whose I/O already happened is recorded, not lost. A
    // bare outcome is one statement (atomic by itself: no BEGIN/COMMIT round trips); one with
    // `inTransaction` writes commits them together with it.
    complete: (item, outcome) => {
      const record = Effect.flatMap(now, (at) => {
        const set =
          outcome._tag === "Done"
            ? sql`status = 'done', lease_until = NULL, completed_at = ${at}`
            : outcome._tag === "Retry"
              ? sql`status = 'pending', due_at = ${outcome.at}, last_error = ${outcome.error},
                    claimed_by = NULL, lease_until = NULL`
              : sql`status = 'failed', last_error = ${outcome.error}, lease_until = NULL, completed_at = ${at}`
        return sql`UPDATE processors.due_work SET ${set}, updated_at = ${at}
                    WHERE ${claimed(item)} RETURNING 1 AS ok`
      }).pipe(Effect.map((rows) => rows.length > 0))
      const writes = outcome.inTransaction
      return Effect.uninterruptible(
        writes === undefined
          ? record
          : transact(
              Effect.flatMap(record, (ours) => (ours ? Effect.as(writes, true) : Effect.succeed(false)))
            )
      )
    },

    completeMany: (completions) =>
      Effect.gen(function* () {
        if (completions.length === 0) return new Set<string>()
        const at = yield* now
        const rows = completions.map(({ item, outcome }) => ({
          id: item.id,
          token: item.claimToken,
          status: outcome._tag === "Done" ? "done" : outcome._tag === "Retry" ? "pending" : "failed",
          due_at: outcome._tag === "Retry" ? outcome.at.toISOString() : null,
          error: outcome._tag === "Done" ? null : outcome.error
        }))
        // The same fields per outcome as `complete`, fenced the same way, for all claims at once.
        const ours = yield* Effect.uninterruptible(sql<{ readonly id: string }>`
          UPDATE processors.due_work d
             SET status = o.status,
                 due_at = coalesce(o.due_at, d.due_at),
                 last_error = CASE WHEN o.status = 'done' THEN d.last_error ELSE o.error END,
                 claimed_by = CASE WHEN o.status = 'pending' THEN NULL ELSE d.claimed_by END,
                 lease_until = NULL,
                 completed_at = CASE WHEN o.status = 'pending' THEN d.completed_at ELSE ${at} END,
                 updated_at = ${at}
            FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb)
                   AS o(id text, token bigint, status text, due_at timestamptz, error text)
           WHERE d.id = o.id AND d.claim_token = o.token AND d.status = 'claimed'
          RETURNING d.id`)
        return new Set(ours.map((r) => r.id))
      }),

    release: (item) =>
      Effect.gen(function* () {
        const at = yield* now
        const rows = yield* sql`
          UPDATE processors.due_work SET status = 'pending', claimed_by = NULL, lease_until = NULL, updated_at = ${at}
            WHERE ${claimed(item)} RETURNING 1 AS ok`
        return rows.length > 0
      }),

    stats: (kinds) =>
      Effect.gen(function* () {
        const at = yield* now
        // Done and cancelled rows accumulate; they are not backlog, so they are never scanned here.
        const live = sql`status IN ('pending', 'claimed', 'failed')`
        const filter =
          kinds && kinds.length > 0 ? sql`WHERE ${live} AND kind = ANY(${[...kinds]})` : sql`WHERE ${live}`
        return yield* sql<DueWorkStats>`
          SELECT kind,
                 count(*) FILTER (WHERE status = 'pending') AS pending,
                 count(*) FILTER (WHERE status = 'pending' AND due_at <= ${at}) AS due,
                 count(*) FILTER (WHERE status = 'claimed') AS claimed,
                 count(*) FILTER (WHERE status = 'claimed' AND lease_until < ${at}) AS "expiredClaims",
                 count(*) FILTER (WHERE status = 'failed') AS failed,
                 min(due_at) FILTER (WHERE status = 'pending' AND due_at <= ${at}) AS "oldestDueAt"
            FROM processors.due_work ${filter} GROUP BY kind ORDER BY kind`
      }),

    purgeFinished: (before, limit) =>
      Effect.map(
        sql`DELETE FROM processors.due_work WHERE id IN (
              SELECT id FROM processors.due_work
               WHERE status IN ('done', 'cancelled') AND completed_at < ${before}
               ORDER BY completed_at LIMIT ${limit})
            RETURNING 1 AS ok`,
        (rows) => rows.length
      ),

    wake: signal.notify,
    listen: signal.listen
  }
  return service
})

export const DueWorkLive = Layer.effect(DueWork, makeDueWork)

/** How long finished (done, cancelled) items are kept, by default. */
export const FINISHED_RETENTION = Duration.days(7)

/**
 * Background processor: deletes finished items older than `retention` every `interval` (default 10
 * minutes), `batchSize` rows per statement. Every item is re-armed by its owner through the
 * aggregate's state (a pending delivery, a pending notification), never by the presence of an old
 * finished row, so deleting history changes no behaviour; it only keeps the table and its indexes
 * from growing with every webhook attempt and notification ever made.
 */
export const dueWorkPurgeProcessor = (
  options: {
    readonly retention?: Duration.DurationInput
    readonly interval?: Duration.DurationInput
    readonly batchSize?: number
  } = {}
): Processor<DueWork> => {
  const retention = options.retention ?? FINISHED_RETENTION
  const interval = options.interval ?? Duration.minutes(10)
  const batchSize = options.batchSize ?? 1000
  return {
    name: "due-work-purge",
    run: Effect.gen(function* () {
      const work = yield* DueWork
      while (true) {
        const before = new Date((yield* now).getTime() - Duration.toMillis(retention))
        let total = 0
        let deleted = batchSize
        while (deleted >= batchSize) {
          deleted = yield* work.purgeFinished(before, batchSize)
          total += deleted
        }
        if (total > 0) yield* Effect.logDebug(`purged ${total} finished due-work items`)
        yield* Effect.sleep(interval)
      }
    })
  }
}

export interface DueWorkerOptions<E, R, OE, OR, B> {
  /** Processor name (default `due-work:<kinds>`). */
  readonly name?: string
  readonly kinds: ReadonlyArray<string>
  /** Items handled at once by this worker (default 4). */
  readonly concurrency?: number
  /** Claim lease (default 60 s); extended every third of it while the handler runs. */
  readonly leaseTtl?: Duration.DurationInput
  /** Claim owner (default `AppConfig.instanceId`). */
  readonly owner?: string
  /** Longest idle wait between polls (default 500 ms); a local `schedule` wakes the worker at once. */
  readonly pollInterval?: Duration.DurationInput
  /** Give up (status `failed`) after this many attempts that ended in an unexpected error. */
  readonly maxAttempts?: number
  /**
   * At most this many items of one group handled at once by this worker (items without a group are
   * not limited), so one slow group (a hung webhook endpoint) never takes every slot.
   */
  readonly groupCap?: number
  /** Delay before retrying after an unexpected error (default 1 s doubling per attempt, ≤ 1 h). */
  readonly retryDelay?: (attempts: number) => Duration.DurationInput
  /**
   * Runs once per claimed batch before its handlers, outside any transaction: the batch's work done
   * at once — bulk reads (one query per kind of data) of what the handlers will read, or (billing's
   * renewals) their transactions as one, handing each handler its result. A failure is each item's
   * unexpected error.
   */
  readonly prepare?: (items: ReadonlyArray<DueItem>) => Effect.Effect<void, E, R>
  /**
   * Runs outside any transaction (the I/O). An unexpected failure or defect is logged and retried
   * after `retryDelay`; return `DueOutcome.retry` / `failed` for expected ones.
   */
  readonly handle: (item: DueItem) => Effect.Effect<DueOutcome<OE, OR, B>, E, R>
  /**
   * Group commit: outcomes carrying `batched` (and those without writes at all) are recorded together,
   * as many as have finished meanwhile, in one transaction: one fenced `completeMany`, then this with
   * the `batched` values of the claims still ours. If that transaction fails, each outcome is recorded
   * alone as `complete` would (with its `inTransaction`), so batching never changes what is recorded.
   */
  readonly recordBatched?: (batch: ReadonlyArray<B>) => Effect.Effect<void, OE, OR>
}

const defaultRetryDelay = (attempts: number): Duration.DurationInput =>
  Duration.millis(Math.min(1000 * 2 ** Math.max(0, attempts - 1), 3_600_000))

/** Outcomes recorded per group-commit transaction at most. */
const RECORD_BATCH_MAX = 256
/** Group-commit transactions in flight at once. */
const RECORDERS = 2
/**
 * While items are in flight, the worker waits up to this long for a quarter of its slots to free up
 * before claiming, so claims (and `prepare`) come in batches rather than one slot at a time.
 */
const CLAIM_GATHER_MS = 5

interface PendingRecord<OE, OR, B> {
  readonly item: DueItem
  readonly outcome: DueOutcome<OE, OR, B>
  readonly recorded: Deferred.Deferred<boolean, unknown>
}

/** A worker processor: claims due items of `kinds` and runs `handle` on each. */
export const dueWorker = <E, R, OE = never, OR = never, B = never>(
  options: DueWorkerOptions<E, R, OE, OR, B>
): Processor<R | OR | DueWork | AppConfig | SqlClient.SqlClient> => {
  const concurrency = Math.max(1, options.concurrency ?? 4)
  const gather = Math.max(1, Math.floor(concurrency / 4))
  const leaseTtl = options.leaseTtl ?? "60 seconds"
  const heartbeatMs = Math.max(1, Math.floor(Duration.toMillis(leaseTtl) / 3))
  const minPoll = 10
  const maxPoll = Math.max(minPoll, Duration.toMillis(options.pollInterval ?? "500 millis"))
  const retryDelay = options.retryDelay ?? defaultRetryDelay
  const name = options.name ?? `due-work:${options.kinds.join(",")}`
  const recordBatched = options.recordBatched

  const run = Effect.gen(function* () {
    const work = yield* DueWork
    const transact = transactionWith(yield* SqlClient.SqlClient)
    const owner = yield* resolveOwner(options.owner)
    const wake = yield* work.listen
    const freed = yield* Queue.sliding<void>(1)
    const fibers = yield* FiberSet.make()
    let inFlight = 0
    const byGroup = new Map<string, number>()
    const hold = (group: string | null, delta: number) => {
      if (group === null) return
      const n = (byGroup.get(group) ?? 0) + delta
      if (n <= 0) byGroup.delete(group)
      else byGroup.set(group, n)
    }

    const heartbeat = (item: DueItem): Effect.Effect<never> =>
      Effect.sleep(Duration.millis(heartbeatMs)).pipe(
        // A transient error must not abort the handler: try again at the next beat.
        Effect.zipRight(
          Effect.uninterruptible(work.extend(item, leaseTtl)).pipe(Effect.orElseSucceed(() => true))
        ),
        // A claim taken over (or cancelled) is not ours to extend; its outcome will be ignored.
        Effect.flatMap((held) => (held ? heartbeat(item) : Effect.never))
      )

    const unexpected = (item: DueItem, message: string) =>
      options.maxAttempts !== undefined && item.attempts >= options.maxAttempts
        ? Effect.succeed(DueOutcome.failed({ error: message }))
        : Effect.map(fromNow(retryDelay(item.attempts)), (at) => DueOutcome.retry({ at, error: message }))

    /**
     * One outcome alone. Its writes may race another transaction on a stream (ordering conflict):
     * the completion is fenced and atomic, so recording it again is safe — unlike redoing the I/O.
     */
    const recordAlone = (item: DueItem, outcome: DueOutcome<OE, OR, B>) =>
      work.complete(item, outcome).pipe(Effect.retry({ times: 3, while: isConcurrencyConflict }))

    // --- Group commit: outcomes that finished meanwhile, recorded in one transaction ---------------
    const toRecord = yield* Queue.unbounded<PendingRecord<OE, OR, B>>()
    const recordTogether = (entries: ReadonlyArray<PendingRecord<OE, OR, B>>) =>
      transact(
        Effect.gen(function* () {
          const ours = yield* work.completeMany(entries)
          const batch: Array<B> = []
          for (const { item, outcome } of entries) {
            if (ours.has(item.id) && outcome.batched !== undefined) batch.push(outcome.batched)
          }
          if (batch.length > 0 && recordBatched !== undefined) yield* recordBatched(batch)
          return ours
        })
      )
    if (recordBatched !== undefined) {
      // A few commits in flight at once: each waits on round trips and the WAL flush, not on CPU.
      yield* Effect.replicateEffect(
        Effect.forkScoped(
          Effect.forever(
            Effect.gen(function* () {
              const entries = [...(yield* Queue.takeBetween(toRecord, 1, RECORD_BATCH_MAX))]
              const together = yield* Effect.exit(Effect.uninterruptible(recordTogether(entries)))
              if (together._tag === "Success") {
                for (const e of entries) yield* Deferred.succeed(e.recorded, together.value.has(e.item.id))
                return
              }
              // One of them conflicted (or the batch failed): each alone, exactly as `complete` would.
              yield* Effect.logDebug(
                `group commit of ${entries.length} outcomes failed; recording each alone`
              )
              yield* Effect.forEach(
                entries,
                (e) =>
                  Effect.flatMap(Effect.exit(recordAlone(e.item, e.outcome)), (exit) =>
                    Deferred.done(e.recorded, exit)
                  ),
                { concurrency: 8, discard: true }
              )
            })
          )
        ),
        RECORDERS
      )
    }
    const groupCommitted = (outcome: DueOutcome<OE, OR, B>) =>
      recordBatched !== undefined && (outcome.batched !== undefined || outcome.inTransaction === undefined)

    const record = (item: DueItem, outcome: DueOutcome<OE, OR, B>): Effect.Effect<boolean, unknown, OR> =>
      groupCommitted(outcome)
        ? Effect.flatMap(Deferred.make<boolean, unknown>(), (recorded) =>
            Effect.zipRight(Queue.offer(toRecord, { item, outcome, recorded }), Deferred.await(recorded))
          )
        : recordAlone(item, outcome)

    const processItem = (item: DueItem, prepared: Deferred.Deferred<Exit.Exit<void, E>>) =>
      Effect.gen(function* () {
        const ready = yield* Deferred.await(prepared)
        const handled = yield* Effect.exit(
          Exit.isFailure(ready)
            ? Effect.failCause(ready.cause)
            : Effect.raceFirst(options.handle(item), heartbeat(item))
        )
        if (handled._tag === "Success") {
          const recorded = yield* Effect.exit(record(item, handled.value))
          if (recorded._tag === "Success") {
            if (!recorded.value) yield* Effect.logWarning(`claim of ${item.kind}/${item.key} was taken over`)
            return
          }
          yield* Effect.logError(`recording the outcome of ${item.kind}/${item.key} failed`, recorded.cause)
          yield* work.complete(item, yield* unexpected(item, causeMessage(recorded.cause)))
          return
        }
        yield* Effect.logWarning(`handling ${item.kind}/${item.key} failed`, handled.cause)
        yield* work.complete(item, yield* unexpected(item, causeMessage(handled.cause)))
      }).pipe(
        // Shutdown: give the claim back rather than waiting for its lease to run out.
        Effect.onInterrupt(() => work.release(item).pipe(Effect.ignore)),
        Effect.catchAllCause((cause) =>
          Effect.logError(`due work ${item.kind}/${item.key}: outcome not recorded`, cause)
        ),
        Effect.annotateLogs({ "due.kind": item.kind, "due.key": item.key }),
        Effect.withSpan("due_work.handle", {
          attributes: { "due.kind": item.kind, "due.id": item.id },
          captureStackTrace: false
        })
      )

    let delay = minPoll
    let gatheringSince: number | undefined
    while (true) {
      const free = concurrency - inFlight
      if (free === 0) {
        yield* Queue.take(freed)
        continue
      }
      // Busy: let a few more slots free up first (briefly), so one claim serves several of them.
      if (free < gather && inFlight > 0) {
        const at = Date.now()
        gatheringSince ??= at
        const left = CLAIM_GATHER_MS - (at - gatheringSince)
        if (left > 0) {
          yield* Effect.raceFirst(Queue.take(freed), Effect.sleep(Duration.millis(left)))
          continue
        }
      }
      gatheringSince = undefined
      const items = yield* work.claim({
        kinds: options.kinds,
        limit: free,
        owner,
        leaseTtl,
        ...(options.groupCap === undefined
          ? {}
          : { groups: { cap: options.groupCap, inFlight: new Map(byGroup) } })
      })
      // The batch is read (prepare) in its own fiber, so the next claim need not wait for it.
      const prepared = yield* Deferred.make<Exit.Exit<void, E>>()
      const prepare = options.prepare
      if (items.length > 0 && prepare !== undefined)
        yield* FiberSet.run(
          fibers,
          Effect.flatMap(Effect.exit(prepare(items)), (exit) => Deferred.succeed(prepared, exit))
        )
      else yield* Deferred.succeed(prepared, Exit.void)
      for (const item of items) {
        inFlight++
        hold(item.group, 1)
        yield* FiberSet.run(
          fibers,
          processItem(item, prepared).pipe(
            Effect.ensuring(
              Effect.suspend(() => {
                inFlight--
                hold(item.group, -1)
                return Queue.offer(freed, undefined)
              })
            )
          )
        )
      }
      if (items.length === free) {
        delay = minPoll
        continue
      }
      if (items.length > 0) delay = minPoll
      const woken = yield* Effect.raceAll([
        Effect.as(Queue.take(wake), true),
        Effect.as(Queue.take(freed), false),
        Effect.as(Effect.sleep(Duration.millis(delay)), false)
      ])
      delay = woken ? minPoll : Math.min(delay * 2, maxPoll)
    }
  }).pipe(Effect.scoped, Effect.annotateLogs("processor", name))

  return { name, run }
}
