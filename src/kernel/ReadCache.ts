/**
 * A bounded in-process cache of read-model lookups by aggregate id, for the hottest reads (a
 * product by id, answered by a fast route): a hit costs no SQL at all. What keeps it right:
 *
 * - This process's writes: every append to a stream of `streamPrefix` drops its entry (told by the
 *   event store, eventstore/AppendWatchers.ts, whoever appended), at once and again once the
 *   transaction commits (an after-commit step, before the write's response is sent), so a client
 *   reads its own writes. Read models change only through appends: no writer tells the cache.
 * - Changes that reach many entries at once (`clearOn`: a customer's erasure anonymizes all their
 *   orders) drop every entry, the same two ways.
 * - Other processes' writes: every `pollInterval` a gap-safe read of the event store (the same
 *   (transaction id, position) horizon as every subscription) lists the streams of `streamPrefix`
 *   that changed since the last poll, and their entries are dropped. Another process's write shows
 *   here within about one interval (later only while a transaction older than it still runs: the
 *   horizon waits for it, as every subscription does).
 * - A lookup racing a change: a lookup stores what it read only if no change of its id was seen
 *   while it ran (it may have read the row before the change committed).
 * - Concurrent misses of one id share ONE lookup (a hot product read by every client at once loads
 *   its row once, not once per request): later requests await the first one's answer — unless the
 *   id changed since it started, when the next request starts its own. When the first lookup fails,
 *   each waiting request looks up for itself.
 * - A stalled poll (the database unreachable, a poll failing): past `maxPollAge` without a
 *   successful poll the cache is bypassed — every read goes to the database — until one succeeds.
 *
 * Only found values are kept (a missing id is looked up each time); the oldest entry goes first
 * when `capacity` is reached.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Deferred, Duration, Effect, Exit, FiberId, Option, Schedule, type Scope } from "effect"
import { afterCommit } from "../db/Transaction.js"
import { AppendWatchers } from "../eventstore/AppendWatchers.js"
import { type Checkpoint, origin } from "../eventstore/Checkpoint.js"

export interface ReadCache<V> {
  /** The cached value of `id`, or `load`'s (kept when found and nothing changed `id` meanwhile). */
  readonly get: <E, R>(
    id: string,
    load: Effect.Effect<Option.Option<V>, E, R>
  ) => Effect.Effect<Option.Option<V>, E, R>
  /** Entries held now. */
  readonly size: () => number
  /** Reads what other processes changed since the last poll (the background poll runs this). */
  readonly poll: Effect.Effect<void, SqlError>
}

export interface ReadCacheOptions {
  /** Names the after-commit steps (`read-cache:<name>:<id>`) and the poll's log lines. */
  readonly name: string
  /** At most this many entries. */
  readonly capacity: number
  /** The streams whose changes drop entries: `<prefix><id>` (e.g. `product-`). */
  readonly streamPrefix: string
  /** Events (of streams of `streamPrefix`, of type `eventType`) after which every entry goes. */
  readonly clearOn?: ReadonlyArray<{ readonly streamPrefix: string; readonly eventType: string }>
  readonly pollInterval?: Duration.DurationInput
  /** Without a successful poll for this long, the cache is bypassed. */
  readonly maxPollAge?: Duration.DurationInput
}

/** A lookup in flight: marked stale when its id changes before it stores. */
interface Lookup {
  stale: boolean
}

const POLL_BATCH = 1_000

/** What a poll reads: an event of the cache's streams (or a `clearOn` one), or the `head`. */
type ChangeRow = { readonly xid: string; readonly position: string } & (
  | { readonly head: false; readonly streamId: string }
  | { readonly head: true; readonly streamId: null }
)

const quoted = (text: string) => `'${text.replaceAll("'", "''")}'`

/**
 * A poll's statement: the events of `options`' streams (and its `clearOn` events) behind the gap-safe
 * horizon after `after`, at most POLL_BATCH, then the newest event behind the horizon (`head`),
 * whatever its stream, which the checkpoint moves to once every change was read: the events of every
 * other stream are never read (a usage batch appends 1,000). Both in one statement, so on one
 * snapshot and one horizon. The watched events are spelled as literal SQL, as migration 0029's
 * partial index spells them, so that the planner can prove the index applies and reads only these
 * events. A cache whose streams that index does not cover gets the same answers from the order
 * index, only slower.
 */
export const readChangesStatement = (
  sql: SqlClient.SqlClient,
  options: Pick<ReadCacheOptions, "streamPrefix" | "clearOn">,
  after: Checkpoint
) => {
  const watched = sql.literal(
    [
      `starts_with(stream_id, ${quoted(options.streamPrefix)})`,
      ...(options.clearOn ?? []).map(
        (rule) =>
          `(event_type = ${quoted(rule.eventType)} AND starts_with(stream_id, ${quoted(rule.streamPrefix)}))`
      )
    ].join(" OR ")
  )
  return sql<ChangeRow>`
    (SELECT stream_id AS "streamId", transaction_id::text AS xid,
            global_position::text AS position, false AS head
       FROM event_store.events
      WHERE (transaction_id, global_position) > (${after.xid}::xid8, ${after.position})
        AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
        AND (${watched})
      ORDER BY transaction_id, global_position
      LIMIT ${POLL_BATCH})
    UNION ALL
    (SELECT NULL, e.transaction_id::text, e.global_position::text, true
       FROM event_store.events e
      WHERE (e.transaction_id, e.global_position) > (${after.xid}::xid8, ${after.position})
        AND e.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
      ORDER BY e.transaction_id DESC, e.global_position DESC
      LIMIT 1)`
}

export const makeReadCache = <V>(
  options: ReadCacheOptions
): Effect.Effect<ReadCache<V>, SqlError, SqlClient.SqlClient | AppendWatchers | Scope.Scope> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const watchers = yield* AppendWatchers
    const clearOn = options.clearOn ?? []
    const pollInterval = Duration.decode(options.pollInterval ?? Duration.millis(250))
    const maxPollAgeMs = Duration.toMillis(options.maxPollAge ?? Duration.seconds(5))
    const entries = new Map<string, V>()
    const inFlight = new Map<string, Set<Lookup>>()
    /** The lookup other misses of an id await: its answer, or none when it failed. */
    const leaders = new Map<string, Deferred.Deferred<Option.Option<Option.Option<V>>>>()
    let lastPolledAt: number | undefined

    const forget = (id: string) => {
      entries.delete(id)
      leaders.delete(id)
      const lookups = inFlight.get(id)
      if (lookups !== undefined) for (const lookup of lookups) lookup.stale = true
    }

    const forgetAll = () => {
      entries.clear()
      leaders.clear()
      for (const lookups of inFlight.values()) for (const lookup of lookups) lookup.stale = true
    }

    const store = (id: string, value: V) => {
      if (!entries.has(id) && entries.size >= options.capacity) {
        const oldest = entries.keys().next()
        if (oldest.done !== true) entries.delete(oldest.value)
      }
      entries.set(id, value)
    }

    const fresh = (nowMs: number) => lastPolledAt !== undefined && nowMs - lastPolledAt <= maxPollAgeMs

    const get = <E, R>(id: string, load: Effect.Effect<Option.Option<V>, E, R>) =>
      Effect.flatMap(Clock.currentTimeMillis, (nowMs): Effect.Effect<Option.Option<V>, E, R> => {
        if (!fresh(nowMs)) return load
        const hit = entries.get(id)
        if (hit !== undefined) return Effect.succeed(Option.some(hit))
        const leader = leaders.get(id)
        if (leader !== undefined)
          return Effect.flatMap(
            Deferred.await(leader),
            Option.match({ onNone: () => load, onSome: (value) => Effect.succeed(value) })
          )
        const answer = Deferred.unsafeMake<Option.Option<Option.Option<V>>>(FiberId.none)
        leaders.set(id, answer)
        const lookup: Lookup = { stale: false }
        const lookups = inFlight.get(id) ?? new Set<Lookup>()
        lookups.add(lookup)
        inFlight.set(id, lookups)
        return load.pipe(
          Effect.tap((value) => {
            if (Option.isSome(value) && !lookup.stale) store(id, value.value)
          }),
          Effect.onExit((exit) =>
            Effect.sync(() => {
              if (leaders.get(id) === answer) leaders.delete(id)
              Deferred.unsafeDone(
                answer,
                Exit.succeed(Exit.isSuccess(exit) ? Option.some(exit.value) : Option.none())
              )
            })
          ),
          Effect.ensuring(
            Effect.sync(() => {
              lookups.delete(lookup)
              if (lookups.size === 0) inFlight.delete(id)
            })
          )
        )
      })

    /** Drops now (a lookup running during the transaction may read the old row after this) and on commit. */
    const dropping = (key: string, drop: () => void) =>
      Effect.zipRight(Effect.sync(drop), afterCommit(`read-cache:${options.name}:${key}`, Effect.sync(drop)))

    const changed = (id: string) => dropping(id, () => forget(id))

    yield* watchers.watch({
      streamPrefix: options.streamPrefix,
      appended: (streamId) => changed(streamId.slice(options.streamPrefix.length))
    })
    for (const rule of clearOn) {
      yield* watchers.watch({
        streamPrefix: rule.streamPrefix,
        eventTypes: new Set([rule.eventType]),
        appended: () => dropping("*", forgetAll)
      })
    }

    // Other processes' writes: the changes of this cache's streams behind the gap-safe horizon since
    // the last poll (readChangesStatement).
    let checkpoint: Checkpoint = origin
    const readChanges = (after: Checkpoint) => readChangesStatement(sql, options, after)
    const poll = Effect.gen(function* () {
      const startedAt = yield* Clock.currentTimeMillis
      for (;;) {
        const rows = yield* readChanges(checkpoint)
        let changes = 0
        let head: Checkpoint | undefined
        for (const row of rows) {
          const at = { xid: row.xid, position: Number(row.position) }
          if (row.head) {
            head = at
            continue
          }
          changes++
          checkpoint = at
          if (row.streamId.startsWith(options.streamPrefix))
            forget(row.streamId.slice(options.streamPrefix.length))
          else forgetAll()
        }
        // A full batch of changes: more may follow it; read on from the last. Otherwise every change
        // behind the horizon was read, and the checkpoint moves past the other streams' events too.
        if (changes === POLL_BATCH) continue
        if (head !== undefined) checkpoint = head
        break
      }
      lastPolledAt = startedAt
    })
    // Start at the horizon: nothing is cached yet, so nothing older needs forgetting.
    const [head] = yield* sql<{ xid: string; position: string }>`
      SELECT transaction_id::text AS xid, global_position::text AS position FROM event_store.events
       WHERE transaction_id < pg_snapshot_xmin(pg_current_snapshot())
       ORDER BY transaction_id DESC, global_position DESC LIMIT 1`
    if (head !== undefined) checkpoint = { xid: head.xid, position: Number(head.position) }
    yield* poll
    yield* poll.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning(`read cache ${options.name}: poll failed`, cause)),
      Effect.repeat(Schedule.spaced(pollInterval)),
      Effect.forkScoped
    )
    return { get, size: () => entries.size, poll }
  })
