/**
 * Runs commands against aggregates: load (snapshot + events) → decide → append with the expected
 * version + inline projections + public-event rows, all in ONE transaction. The transaction rule
 * (db/Transaction): inside a caller's transaction a command joins it and leaves retries, wake-ups
 * and snapshots to the caller's owner; on its own it is serialized per stream (in-process mailbox),
 * opens and owns its transaction, retries it on an optimistic-concurrency conflict (another process
 * won the race) by loading and deciding again, and wakes processors and snapshots after the commit.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Data, Effect, Layer, Option } from "effect"
import { withSpanWhenTracing } from "../base/Span.js"
import { provideSqlClient, withTransactionState } from "../db/Sql.js"
import { afterCommit, transactionWith } from "../db/Transaction.js"
import {
  type AppendResult,
  type EventMetadata,
  EventStore,
  type NewEvent,
  type StoredEvent
} from "../eventstore/EventStore.js"
import type { DomainEvent } from "../eventstore/EventType.js"
import type { AppendError, EventDecodeError } from "../eventstore/errors.js"
import { insertPublicEvents, type PublicEventRow } from "../eventstore/PublicEvents.js"
import type { Decider, Pending, Recorded } from "./Decider.js"
import { derivedUuid, fromUuid } from "./Ids.js"
import { type KeyedMailbox, makeKeyedMailbox } from "./KeyedMailbox.js"
import {
  decodeStoredBatch,
  liveTarget,
  PROJECTION_LOCK_CLASS,
  type Projection,
  Projections
} from "./Projection.js"

export interface ExecuteOptions {
  readonly metadata?: EventMetadata
  /**
   * Deterministic event ids: an append repeated by a redelivered trigger fails with DuplicateEvent
   * instead of writing twice. Inside a caller's transaction that failure aborts the transaction (no
   * savepoints), so flows check what they already did first (idempotent deciders, handled inputs)
   * and keep the derived ids as the last guard.
   */
  readonly eventIds?: (index: number) => string
  /** Per decided event, its own metadata (events of several requests in one command), else `metadata`. */
  readonly eventMetadata?: ReadonlyArray<EventMetadata>
  /**
   * Attempts in total when another process appends concurrently (default 5). Only when the command
   * owns its transaction: joined to a caller's, a conflict fails it and the caller's owner retries.
   */
  readonly maxAttempts?: number
  /**
   * The stream id was just minted by the caller (a fresh UUIDv7 id): no stream can exist under it,
   * so the load is skipped (the initial state, version 0) and the append's expected version 0 still
   * refuses the stream if it did exist (`WrongExpectedVersion`, never a silent overwrite).
   */
  readonly newStream?: boolean
}

/**
 * `execute`'s options with the stream as the caller already holds it (the result of its previous
 * command on the stream): the first attempt decides on it without reading the stream; a retry (the
 * stream moved meanwhile: the append's expected version refused it) loads as usual.
 */
export interface ExecuteFromOptions<S> extends ExecuteOptions {
  readonly loaded?: LoadedAggregate<S>
}

export interface CommandResult<S, E extends DomainEvent> {
  readonly state: S
  /** Stream version after the command (unchanged when the decision produced no events). */
  readonly version: number
  readonly events: ReadonlyArray<Recorded<E>>
}

export interface LoadedAggregate<S> {
  readonly state: S
  readonly version: number
}

/**
 * One command of `executeMany`; `loaded` (the stream as the caller already read it) skips the load;
 * `metadata` is its events' own (commands of several requests written together), else the call's.
 */
export interface StreamCommand<C, S> {
  readonly streamId: string
  readonly command: C
  readonly loaded?: LoadedAggregate<S>
  readonly metadata?: EventMetadata
}

export type CommandError<Err> = Err | AppendError | EventDecodeError | SqlError

export interface CommandRunnerShape {
  /**
   * Runs a use case's commands in ONE transaction: the caller's when there is one (nothing else
   * happens then), else its own, which it owns: when a command loses a race (another writer appended
   * first) the whole transaction runs again — serialized in-process behind that stream's other
   * writers, so a hot stream queues instead of burning attempts — up to 5 attempts in total; after
   * the commit it wakes local processors and writes snapshots.
   */
  readonly transact: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>
  /**
   * `transact`'s retry for an owner that opens and ends its transaction itself (the HTTP idempotency
   * middleware): runs `attempt` — one whole transaction — again when it fails with a concurrency
   * conflict, queued behind the contested stream's in-process writers, up to `attempts` (5) in total.
   */
  readonly retrying: <A, E, R>(
    attempt: Effect.Effect<A, E, R>,
    options?: { readonly attempts?: number }
  ) => Effect.Effect<A, E, R>
  readonly execute: <C, E extends DomainEvent, S, Err>(
    decider: Decider<C, E, S, Err>,
    streamId: string,
    command: C,
    options?: ExecuteFromOptions<S>
  ) => Effect.Effect<CommandResult<S, E>, CommandError<Err>>
  readonly load: <C, E extends DomainEvent, S, Err>(
    decider: Decider<C, E, S, Err>,
    streamId: string
  ) => Effect.Effect<LoadedAggregate<S>, EventDecodeError | SqlError>
  /**
   * Loads many streams of one aggregate type in one query. With `from`, only the events after it are
   * read and folded onto it (a cached aggregate brought up to date). Absent streams load as initial.
   */
  readonly loadMany: <C, E extends DomainEvent, S, Err>(
    decider: Decider<C, E, S, Err>,
    streams: ReadonlyArray<{ readonly streamId: string; readonly from?: LoadedAggregate<S> }>
  ) => Effect.Effect<ReadonlyMap<string, LoadedAggregate<S>>, EventDecodeError | SqlError>
  /**
   * Many commands on distinct streams of one aggregate type as ONE transaction (joining the caller's):
   * one bulk load (of the streams not given as `loaded`), every decision, one multi-stream append
   * (all or nothing), the inline projections once for all the events, the public events. A conflict on
   * any stream fails the whole call (nothing of it commits) and is not retried here: the caller
   * decides (e.g. to run the commands one by one with `execute`). Results in command order.
   */
  readonly executeMany: <C, E extends DomainEvent, S, Err>(
    decider: Decider<C, E, S, Err>,
    commands: ReadonlyArray<StreamCommand<C, S>>,
    options?: Pick<ExecuteOptions, "metadata">
  ) => Effect.Effect<ReadonlyArray<CommandResult<S, E>>, CommandError<Err>>
}

export class CommandRunner extends Context.Tag("CommandRunner")<CommandRunner, CommandRunnerShape>() {}

/**
 * A transaction that committed first holds a unique key this one's inline projection writes — a read
 * model's key guarding an invariant (a usage identifier records once): deciding again, in a new
 * transaction, sees its row. `streamId`: the stream the write appended, which the retry queues behind.
 */
export class ReadModelKeyConflict extends Data.TaggedError("ReadModelKeyConflict")<{
  readonly streamId: string
}> {}

/** Another writer won a race on the stream (or a read model's key): loading and deciding again may succeed. */
export const isConcurrencyConflict = (error: unknown): boolean =>
  typeof error === "object" &&
  error !== null &&
  "_tag" in error &&
  (error._tag === "WrongExpectedVersion" ||
    error._tag === "StreamOrderingConflict" ||
    error._tag === "ReadModelKeyConflict")

/** The stream a concurrency conflict happened on. */
const conflictStream = (error: unknown): string | undefined =>
  isConcurrencyConflict(error) && typeof error === "object" && error !== null && "streamId" in error
    ? String(error.streamId)
    : undefined

/** Public event ids derive from the source event id, keeping its UUIDv7 timestamp for ordering. */
export const publicEventId = (sourceEventId: string, index: number): string =>
  fromUuid("evt", derivedUuid(sourceEventId.replace(/-/g, "").slice(0, 12), `${sourceEventId}:${index}`))

export const makeCommandRunner = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const store = yield* EventStore
  const projections = yield* Projections
  const mailbox: KeyedMailbox = makeKeyedMailbox()
  const transaction = transactionWith(sql)

  /**
   * Owns a transaction of commands. A conflict on a stream cannot resolve inside the transaction (a
   * stale version stays stale; a stream-ordering conflict's id is older than the competing commit's),
   * so the whole transaction runs again, holding that stream's in-process mailbox (taken before the
   * transaction begins, one at a time, so waiting for it never holds a lock or a connection).
   */
  const owning = <A, E, R>(
    effect: Effect.Effect<A, E, R>,
    options: { readonly attempts?: number; readonly streamId?: string }
  ): Effect.Effect<A, E | SqlError, R> => retrying(transaction(effect), options)

  const retrying = <A, E, R>(
    once: Effect.Effect<A, E, R>,
    options: { readonly attempts?: number; readonly streamId?: string }
  ): Effect.Effect<A, E, R> => {
    const attempts = Math.max(1, options.attempts ?? 5)
    const run = (n: number, hot: string | undefined): Effect.Effect<A, E, R> =>
      (hot === undefined ? once : mailbox.run(hot, once)).pipe(
        Effect.catchIf(
          (error) => n < attempts && isConcurrencyConflict(error),
          (error) =>
            Effect.zipRight(
              Effect.sleep(Math.round(Math.random() * 5 * 2 ** (n - 1))),
              run(n + 1, conflictStream(error) ?? hot)
            )
        )
      )
    return run(1, options.streamId)
  }

  const decodeAll = <C, E extends DomainEvent, S, Err>(
    decider: Decider<C, E, S, Err>,
    stored: ReadonlyArray<StoredEvent>
  ): Effect.Effect<ReadonlyArray<Recorded<E>>, EventDecodeError> =>
    Effect.flatMap(decodeStoredBatch(decider.eventTypes, stored), (recorded) => {
      const isOwn = (r: Recorded): r is Recorded<E> => decider.isEvent(r)
      const own: Array<Recorded<E>> = []
      for (const r of recorded) {
        if (!isOwn(r)) return Effect.dieMessage(`a ${decider.streamType} stream holds a ${r.type} event`)
        own.push(r)
      }
      return Effect.succeed(own)
    })

  /** A stream's events from the start; a stream that does not exist has none. */
  const readWhole = (streamId: string) =>
    store
      .readStream(streamId)
      .pipe(Effect.catchTag("StreamNotFound", () => Effect.succeed([] as ReadonlyArray<StoredEvent>)))

  /**
   * The snapshot (of the decider's state version) and the events after it, in one statement. A
   * snapshot that does not decode is only a cache miss: the events before it are read too.
   */
  const loadFromSnapshot = <S>(
    streamId: string,
    initialState: S,
    policy: NonNullable<Decider<unknown, DomainEvent, S, unknown>["snapshot"]>
  ) =>
    Effect.gen(function* () {
      const read = yield* store.readStreamAfterSnapshot(streamId, policy.version)
      const base = Option.flatMap(read.snapshot, (s) =>
        Option.map(policy.decode(s.state), (state): LoadedAggregate<S> => ({ state, version: s.version }))
      )
      if (Option.isSome(base)) return { base: base.value, stored: read.events }
      const stored = Option.isNone(read.snapshot) ? read.events : yield* readWhole(streamId)
      return { base: { state: initialState, version: 0 }, stored }
    })

  const load = <C, E extends DomainEvent, S, Err>(decider: Decider<C, E, S, Err>, streamId: string) =>
    Effect.gen(function* () {
      const { base, stored } = decider.snapshot
        ? yield* loadFromSnapshot(streamId, decider.initialState, decider.snapshot)
        : { base: { state: decider.initialState, version: 0 }, stored: yield* readWhole(streamId) }
      const events = yield* decodeAll(decider, stored)
      const last = stored[stored.length - 1]
      return {
        state: events.reduce(decider.evolve, base.state),
        version: last ? last.streamVersion : base.version,
        snapshotVersion: base.version
      }
    }).pipe(
      withSpanWhenTracing("CommandRunner.load", {
        attributes: { "stream.id": streamId },
        captureStackTrace: false
      })
    )

  const saveSnapshot = <S>(
    streamId: string,
    policy: NonNullable<Decider<unknown, DomainEvent, S, unknown>["snapshot"]>,
    state: S,
    version: number
  ) =>
    Effect.gen(function* () {
      const encoded = policy.encode(state)
      const now = new Date(yield* Effect.clockWith((c) => c.currentTimeMillis))
      yield* sql`INSERT INTO event_store.snapshots (stream_id, version, state_version, state, created_at)
        VALUES (${streamId}, ${version}, ${policy.version}, ${JSON.stringify(encoded)}::jsonb, ${now})
        ON CONFLICT (stream_id) DO UPDATE SET version = EXCLUDED.version, state_version = EXCLUDED.state_version,
          state = EXCLUDED.state, created_at = EXCLUDED.created_at
        WHERE event_store.snapshots.version < EXCLUDED.version OR event_store.snapshots.state_version <> EXCLUDED.state_version`
    }).pipe(
      // A snapshot is a cache: failing to write one never fails the command. It is written after
      // the commit (never inside the caller's transaction, which a failed statement would abort).
      Effect.catchAllCause((cause) => Effect.logWarning(`snapshot of ${streamId} not written`, cause)),
      (save) => afterCommit(`snapshot:${streamId}`, save)
    )

  const toNewEvents = <C, E extends DomainEvent, S, Err>(
    decider: Decider<C, E, S, Err>,
    decided: ReadonlyArray<E>,
    eventIds?: (index: number) => string,
    eventMetadata?: ReadonlyArray<EventMetadata>
  ): ReadonlyArray<NewEvent> =>
    decided.map((event, index) => {
      const eventType = decider.eventTypes.get(event.type)
      if (!eventType) throw new Error(`${decider.streamType} decided an unknown event ${event.type}`)
      const id = eventIds?.(index)
      const metadata = eventMetadata?.[index]
      const base = id === undefined ? { eventType, data: event.data } : { eventType, data: event.data, id }
      return metadata === undefined ? base : { ...base, metadata }
    })

  /** The events as recorded, from what was appended: no re-read, no decrypt, no decode. */
  const recordedOf = <E extends DomainEvent>(
    decided: ReadonlyArray<E>,
    newEvents: ReadonlyArray<NewEvent>,
    appended: AppendResult,
    fromVersion: number,
    metadata: EventMetadata
  ): ReadonlyArray<Recorded<E>> =>
    decided.map((event, i) => ({
      // The event's own keys (`type`, `data`) spread LAST: in an object literal, keys added after a
      // spread take V8's slow path (~0.6 µs each: 5 µs per event here, a tenth of a usage batch).
      globalPosition: appended.positions[i] ?? 0,
      transactionId: appended.transactionId,
      streamId: appended.streamId,
      streamVersion: fromVersion + i + 1,
      eventId: appended.eventIds[i] ?? "",
      schemaVersion: newEvents[i]?.eventType.version ?? 1,
      metadata: newEvents[i]?.metadata ?? metadata,
      recordedAt: appended.recordedAt,
      ...event
    }))

  /** Folds events onto the loaded state, collecting the public events they publish. */
  const evolveRecorded = <C, E extends DomainEvent, S, Err>(
    decider: Decider<C, E, S, Err>,
    state: S,
    recorded: ReadonlyArray<Pending<E>>,
    publicRows: Array<PublicEventRow>
  ): S => {
    for (const event of recorded) {
      state = decider.evolve(state, event)
      const drafts = decider.publicEvents?.(event, state) ?? []
      for (const [i, draft] of drafts.entries()) {
        publicRows.push({
          id: publicEventId(event.eventId, i),
          type: draft.type,
          data: draft.data,
          occurredAt: event.recordedAt,
          sourceEventId: event.eventId,
          streamId: event.streamId,
          ...(draft.subjectId === undefined ? {} : { subjectId: draft.subjectId })
        })
      }
    }
    return state
  }

  /** The inline projections some of `types` feed. */
  const projectionsOf = (types: ReadonlyArray<string>) =>
    projections.filter((projection) => types.some((type) => projection.eventTypes.has(type)))

  /**
   * Inline projections and public events of just-appended events, in the append's transaction.
   * `locked`: projections whose shared lock the append's statement already took; `publicWritten`:
   * the append's statement already inserted the public events.
   */
  const project = (
    recorded: ReadonlyArray<Recorded>,
    publicRows: ReadonlyArray<PublicEventRow>,
    done: { readonly locked?: ReadonlyArray<Projection>; readonly publicWritten?: boolean } = {}
  ) =>
    Effect.gen(function* () {
      for (const projection of projections) {
        const relevant = recorded.filter((e) => projection.eventTypes.has(e.type))
        if (relevant.length === 0) continue
        if (!done.locked?.includes(projection))
          yield* sql`SELECT pg_advisory_xact_lock_shared(${PROJECTION_LOCK_CLASS}, hashtext(${projection.name}))`
        yield* projection.apply(relevant, liveTarget).pipe(provideSqlClient(sql))
      }
      if (publicRows.length > 0 && done.publicWritten !== true) {
        yield* insertPublicEvents(publicRows).pipe(provideSqlClient(sql))
      }
    })

  /**
   * Load, decide, append and project, in the current transaction (the caller's or the one `execute`
   * opened). The append's own statement takes the projections' shared locks and writes the public
   * events (derived from the events as they will be recorded), so a command costs the append and
   * the projections' writes. The append registers the wake-up and this the snapshot, both for after
   * the commit.
   */
  const attempt = <C, E extends DomainEvent, S, Err>(
    decider: Decider<C, E, S, Err>,
    streamId: string,
    command: C,
    options: ExecuteOptions,
    given?: LoadedAggregate<S>
  ) =>
    Effect.gen(function* () {
      const loaded = options.newStream
        ? { state: decider.initialState, version: 0, snapshotVersion: 0 }
        : given !== undefined
          ? { ...given, snapshotVersion: given.version }
          : yield* load(decider, streamId)
      const decided = yield* decider.decide(command, loaded.state)
      if (decided.length === 0) return { state: loaded.state, version: loaded.version, events: [] }
      const newEvents = toNewEvents(decider, decided, options.eventIds, options.eventMetadata)
      const metadata = options.metadata ?? {}
      const locked = projectionsOf(decided.map((e) => e.type))
      // Set by the append (once per statement attempt): the state after the events and their public events.
      let evolved: { readonly state: S; readonly publicRows: ReadonlyArray<PublicEventRow> } | undefined
      const appended = yield* store.append({
        streamId,
        streamType: decider.streamType,
        expectedVersion: loaded.version,
        events: newEvents,
        metadata,
        sharedLocks: { space: PROJECTION_LOCK_CLASS, names: locked.map((p) => p.name) },
        publicEvents: ({ eventIds, recordedAt }) => {
          const pending = decided.map(
            (event, i): Pending<E> => ({
              streamId,
              streamVersion: loaded.version + i + 1,
              eventId: eventIds[i] ?? "",
              schemaVersion: newEvents[i]?.eventType.version ?? 1,
              metadata: newEvents[i]?.metadata ?? metadata,
              recordedAt,
              ...event // last: see recordedOf
            })
          )
          const publicRows: Array<PublicEventRow> = []
          evolved = { state: evolveRecorded(decider, loaded.state, pending, publicRows), publicRows }
          return publicRows
        }
      })
      const recorded = recordedOf(decided, newEvents, appended, loaded.version, metadata)
      const publicRows: Array<PublicEventRow> = []
      const state = evolved?.state ?? evolveRecorded(decider, loaded.state, recorded, publicRows)
      yield* project(recorded, publicRows, { locked, publicWritten: evolved !== undefined })
      if (decider.snapshot && appended.version - loaded.snapshotVersion >= decider.snapshot.every) {
        yield* saveSnapshot(streamId, decider.snapshot, state, appended.version)
      }
      const result: CommandResult<S, E> = { state, version: appended.version, events: recorded }
      return result
    })

  const loadMany = <C, E extends DomainEvent, S, Err>(
    decider: Decider<C, E, S, Err>,
    streams: ReadonlyArray<{ readonly streamId: string; readonly from?: LoadedAggregate<S> }>
  ) =>
    Effect.gen(function* () {
      const loaded = new Map<string, LoadedAggregate<S>>()
      if (streams.length === 0) return loaded
      // Snapshots are per stream: such aggregates load one by one (none of the bulk users has one).
      if (decider.snapshot) {
        for (const s of streams) {
          if (s.from !== undefined) continue
          const { state, version } = yield* load(decider, s.streamId)
          loaded.set(s.streamId, { state, version })
        }
      }
      const rest = streams.filter((s) => !loaded.has(s.streamId))
      const read = yield* store.readStreams(
        rest.map((s) => ({ streamId: s.streamId, fromVersion: s.from?.version ?? 0 }))
      )
      for (const s of rest) {
        const base = s.from ?? { state: decider.initialState, version: 0 }
        const stored = read.get(s.streamId) ?? []
        const events = yield* decodeAll(decider, stored)
        const last = stored[stored.length - 1]
        loaded.set(s.streamId, {
          state: events.reduce(decider.evolve, base.state),
          version: last ? last.streamVersion : base.version
        })
      }
      return loaded
    }).pipe(
      withSpanWhenTracing("CommandRunner.loadMany", {
        attributes: { "streams.count": streams.length },
        captureStackTrace: false
      })
    )

  const executeMany = <C, E extends DomainEvent, S, Err>(
    decider: Decider<C, E, S, Err>,
    commands: ReadonlyArray<StreamCommand<C, S>>,
    options: Pick<ExecuteOptions, "metadata"> = {}
  ) =>
    Effect.gen(function* () {
      const toLoad = commands.filter((c) => c.loaded === undefined).map((c) => ({ streamId: c.streamId }))
      const loadedNow = yield* loadMany(decider, toLoad)
      const decisions: Array<{
        readonly loaded: LoadedAggregate<S>
        readonly decided: ReadonlyArray<E>
        readonly newEvents: ReadonlyArray<NewEvent>
      }> = []
      for (const c of commands) {
        const loaded = c.loaded ?? loadedNow.get(c.streamId) ?? { state: decider.initialState, version: 0 }
        const decided = yield* decider.decide(c.command, loaded.state)
        decisions.push({ loaded, decided, newEvents: toNewEvents(decider, decided) })
      }
      const appending = commands.flatMap((c, i) => {
        const d = decisions[i]
        return d === undefined || d.decided.length === 0
          ? []
          : [{ streamId: c.streamId, index: i, metadata: c.metadata ?? options.metadata ?? {}, ...d }]
      })
      const unchanged = (i: number): CommandResult<S, E> => {
        const loaded = decisions[i]?.loaded ?? { state: decider.initialState, version: 0 }
        return { state: loaded.state, version: loaded.version, events: [] }
      }
      if (appending.length === 0) return commands.map((_, i) => unchanged(i))
      // Owned or joined, never retried here (see the interface); the append wakes after the commit.
      return yield* transaction(
        Effect.gen(function* () {
          const appended = yield* store.appendMany(
            appending.map((a) => ({
              streamId: a.streamId,
              streamType: decider.streamType,
              expectedVersion: a.loaded.version,
              events: a.newEvents,
              metadata: a.metadata
            }))
          )
          const publicRows: Array<PublicEventRow> = []
          const all: Array<Recorded<E>> = []
          const byIndex = new Map<number, CommandResult<S, E>>()
          appending.forEach((a, k) => {
            const result = appended[k]
            if (result === undefined) return
            const recorded = recordedOf(a.decided, a.newEvents, result, a.loaded.version, a.metadata)
            const state = evolveRecorded(decider, a.loaded.state, recorded, publicRows)
            for (const r of recorded) all.push(r)
            byIndex.set(a.index, { state, version: result.version, events: recorded })
          })
          yield* project(all, publicRows)
          return commands.map((_, i) => byIndex.get(i) ?? unchanged(i))
        })
      )
    }).pipe(
      withSpanWhenTracing("CommandRunner.executeMany", {
        captureStackTrace: false,
        attributes: { "aggregate.type": decider.streamType, "commands.count": commands.length }
      })
    )

  const runner: CommandRunnerShape = {
    transact: (effect) => withTransactionState((joined) => (joined ? effect : owning(effect, {}))),
    retrying: (attempt, options = {}) => retrying(attempt, options),
    execute: (decider, streamId, command, options = {}) => {
      // The caller's `loaded` serves the first attempt only: a retry reads the stream.
      let given = options.loaded
      const once = Effect.suspend(() => {
        const first = given
        given = undefined
        return attempt(decider, streamId, command, options, first)
      })
      return withTransactionState((joined) =>
        joined
          ? once
          : owning(once, {
              streamId,
              ...(options.maxAttempts === undefined ? {} : { attempts: options.maxAttempts })
            })
      ).pipe(
        withSpanWhenTracing("CommandRunner.execute", {
          captureStackTrace: false,
          attributes: { "stream.id": streamId, "aggregate.type": decider.streamType }
        })
      )
    },
    load: (decider, streamId) =>
      Effect.map(load(decider, streamId), ({ state, version }) => ({ state, version })),
    loadMany,
    executeMany
  }
  return runner
})

export const CommandRunnerLive = Layer.effect(CommandRunner, makeCommandRunner)
