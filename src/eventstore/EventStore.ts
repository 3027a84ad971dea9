/**
 * The append-only event store: `append` with an expected version in one statement round trip,
 * `readStream`, and the gap-safe global `readAll` ordered and checkpointed by (xid, position).
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Context, Effect, Either, Layer, Option, ParseResult, Schedule } from "effect"
import { withSpanWhenTracing } from "../base/Span.js"
import { UUID_PATTERN, uuidv7FromMillis } from "../base/Uuid.js"
import { executeInTransaction, textArray, withTransactionState } from "../db/Sql.js"
import { afterCommit, reportConflict } from "../db/Transaction.js"
import { AppendSignal } from "./AppendSignal.js"
import { AppendWatchers } from "./AppendWatchers.js"
import { type Checkpoint, laterOf } from "./Checkpoint.js"
import { type AnyEventType, EVENT_TYPE_NAME, isShredded } from "./EventType.js"
import {
  type AppendError,
  DuplicateEvent,
  InvalidAppend,
  InvalidEventPayload,
  InvalidStreamId,
  StreamNotFound,
  StreamOrderingConflict,
  type SubjectForgotten,
  WrongExpectedVersion
} from "./errors.js"
import { type Envelope, type InlineKey, isEnvelope, Keyring } from "./Keyring.js"
import { type PublicEventRow, publicEventsPayload } from "./PublicEvents.js"

/** `n` (0 = the stream must not exist yet), `"no_stream"`, or `"any"`. */
export type ExpectedVersion = number | "no_stream" | "any"

export interface Actor {
  readonly type: "user" | "api_key" | "oauth_client" | "system"
  readonly id: string
}

/** Carried by every event: who caused it, in answer to what. */
export interface EventMetadata {
  readonly correlationId?: string
  readonly causationId?: string
  readonly actor?: Actor
  readonly requestId?: string
  readonly traceparent?: string
  readonly [key: string]: unknown
}

export interface NewEvent {
  readonly eventType: AnyEventType
  readonly data: unknown
  /** A deterministic id makes a retried append a `DuplicateEvent` instead of a second event. */
  readonly id?: string
  /** This event's own metadata (events of several requests appended together), else the append's. */
  readonly metadata?: EventMetadata
}

export const newEvent = <A>(
  eventType: AnyEventType & { readonly make: (data: A) => unknown },
  data: A,
  id?: string
): NewEvent => (id === undefined ? { eventType, data } : { eventType, data, id })

export interface AppendInput {
  readonly streamId: string
  readonly streamType: string
  readonly expectedVersion: ExpectedVersion
  readonly events: ReadonlyArray<NewEvent>
  readonly metadata?: EventMetadata
  /**
   * Transaction-scoped shared advisory locks, `(space, hashtext(name))` per name, taken by the
   * append's own statement before it writes (the inline projections' locks: no statement of their own).
   */
  readonly sharedLocks?: { readonly space: number; readonly names: ReadonlyArray<string> }
  /**
   * Public events derived from the events as they will be recorded (ids and time fixed, validated),
   * inserted by the append's own statement when it succeeds. Called once per attempt of the statement.
   */
  readonly publicEvents?: (recorded: {
    readonly eventIds: ReadonlyArray<string>
    readonly recordedAt: Date
  }) => ReadonlyArray<PublicEventRow>
}

export interface AppendResult {
  readonly streamId: string
  /** The stream version after the append (= version of its last event). */
  readonly version: number
  readonly firstPosition: number
  readonly lastPosition: number
  /** Global position of each appended event, in event order. */
  readonly positions: ReadonlyArray<number>
  readonly transactionId: string
  readonly eventIds: ReadonlyArray<string>
  readonly recordedAt: Date
}

/** An event as stored, personal fields decrypted (or `Shredded`), not yet upcast. */
export interface StoredEvent {
  readonly globalPosition: number
  readonly transactionId: string
  readonly streamId: string
  readonly streamVersion: number
  readonly eventId: string
  readonly type: string
  readonly schemaVersion: number
  readonly data: unknown
  readonly metadata: EventMetadata
  readonly recordedAt: Date
}

export const checkpointOf = (event: Pick<StoredEvent, "transactionId" | "globalPosition">): Checkpoint => ({
  xid: event.transactionId,
  position: event.globalPosition
})

export interface ReadAllOptions {
  readonly after: Checkpoint
  readonly limit: number
  readonly eventTypes?: ReadonlyArray<string>
  readonly streamId?: string
  /**
   * `"safe"` (default): only events below the oldest running transaction — nothing can ever appear
   * behind the returned checkpoint. `"visible"`: everything committed now, ignoring running writers;
   * correct only when the writers that matter are excluded by a lock (the projection rebuild swap).
   */
  readonly horizon?: "safe" | "visible"
}

export interface ReadAllResult {
  readonly events: ReadonlyArray<StoredEvent>
  /**
   * Where the next read starts: after the last returned event or, when a filtered gap-safe read
   * returned fewer than `limit` events, after the last event below the horizon it scanned up to
   * (unchanged when nothing was scanned).
   */
  readonly checkpoint: Checkpoint
}

export interface StreamInfo {
  readonly streamId: string
  readonly streamType: string
  readonly version: number
  readonly createdAt: Date
  readonly updatedAt: Date
}

export interface EventStoreShape {
  /**
   * Appends events. Inside a caller's transaction it joins it (the transaction's owner retries
   * `StreamOrderingConflict`; local processors are woken after its commit); on its own it runs in
   * its own transaction, retries ordering conflicts, and wakes local processors after commit.
   */
  readonly append: (input: AppendInput) => Effect.Effect<AppendResult, AppendError | SqlError>
  /**
   * Appends to several streams in one statement round trip, all or nothing; results in input order.
   * Each input is validated and checked like `append` (a stream id twice in one call is an
   * `InvalidAppend`); the first conflict, in stream id order, fails the whole call. Inside a caller's
   * transaction it joins it — a conflict then leaves that transaction aborted (the statement raised),
   * so the caller must roll back (`transaction` does on failure); on its own it retries
   * ordering conflicts and wakes local processors after commit.
   */
  readonly appendMany: (
    inputs: ReadonlyArray<AppendInput>
  ) => Effect.Effect<ReadonlyArray<AppendResult>, AppendError | SqlError>
  readonly readStream: (
    streamId: string,
    options?: { readonly fromVersion?: number }
  ) => Effect.Effect<ReadonlyArray<StoredEvent>, StreamNotFound | SqlError>
  /**
   * A stream's snapshot of state version `stateVersion` (event_store.snapshots) and the events after
   * it — or, without such a snapshot, all of them — in one query. A stream that does not exist
   * reads as no snapshot and no events.
   */
  readonly readStreamAfterSnapshot: (
    streamId: string,
    stateVersion: number
  ) => Effect.Effect<
    {
      readonly snapshot: Option.Option<{ readonly version: number; readonly state: unknown }>
      readonly events: ReadonlyArray<StoredEvent>
    },
    SqlError
  >
  /**
   * Reads several streams in one query, each from its own `fromVersion` on (default 0). Streams that
   * do not exist are absent from the map (no StreamNotFound); an existing stream with nothing after
   * its `fromVersion` maps to `[]`. Keys follow input order; a stream asked for twice is read from the
   * lower `fromVersion`.
   */
  readonly readStreams: (
    streams: ReadonlyArray<{ readonly streamId: string; readonly fromVersion?: number }>
  ) => Effect.Effect<ReadonlyMap<string, ReadonlyArray<StoredEvent>>, SqlError>
  readonly readAll: (options: ReadAllOptions) => Effect.Effect<ReadAllResult, SqlError>
  readonly streamInfo: (streamId: string) => Effect.Effect<Option.Option<StreamInfo>, SqlError>
  /** The newest committed position that every reader can already see. */
  readonly head: Effect.Effect<
    { readonly position: number; readonly recordedAt: Option.Option<Date> },
    SqlError
  >
  /**
   * Crypto-shreds a data subject: its key is destroyed, its personal fields read back as `Shredded`
   * forever, and public-event snapshots about it are reduced to their id.
   */
  readonly forgetSubject: (subjectId: string) => Effect.Effect<boolean, SqlError>
}

export class EventStore extends Context.Tag("EventStore")<EventStore, EventStoreShape>() {}

/**
 * One event as selected by EVENT_JSON_TEXT: [global_position, xid, stream_id, stream_version, event_id,
 * event_type, schema_version, data, metadata, recorded_at in epoch milliseconds].
 */
type EventRow = readonly [
  number,
  string,
  string,
  number,
  string,
  string,
  number,
  unknown,
  EventMetadata,
  number
]

/** One event as sent to `event_store.append_events`. */
interface PayloadEvent {
  readonly id: string
  readonly type: string
  readonly schemaVersion: number
  readonly data: unknown
  readonly metadata: EventMetadata
}

interface AppendRow {
  readonly outcome: "ok" | "wrong_expected_version" | "ordering_conflict" | "subject_keys_stale"
  readonly streamVersion: number | null
  readonly firstPosition: number | null
  readonly lastPosition: number | null
  readonly transactionId: string
  /** int8[] arrives as strings (only scalar int8 has a custom parser). */
  readonly positions: ReadonlyArray<string> | null
}

/** One stream as sent to `event_store.append_many`. */
interface ManyPayload {
  readonly streamId: string
  readonly streamType: string
  readonly expected: number | null
  readonly events: ReadonlyArray<PayloadEvent>
}

/**
 * What `appendMany` reads of `append_many`'s rows: ONE row, its streams as a JSON array in input
 * order — `[version, [positions…]]` each — parsed natively, where 1,000 rows with an int8[] each
 * went through the driver's row and array parsers (a usage batch: ~5 % of the service's CPU).
 */
interface ManyRow {
  readonly streams: ReadonlyArray<readonly [version: number, positions: ReadonlyArray<number>]> | null
  readonly transactionId: string | null
}

const MAX_STREAM_ID_LENGTH = 200
// Printable ASCII without spaces, quotes or backslashes: ids are safe inside JSON strings as they are.
const STREAM_ID = /^[\x21\x23-\x5b\x5d-\x7e]+$/

const streamIdProblem = (streamId: string): InvalidStreamId | undefined =>
  streamId.length === 0 || streamId.length > MAX_STREAM_ID_LENGTH || !STREAM_ID.test(streamId)
    ? new InvalidStreamId({
        streamId,
        message: `a stream id is 1-${MAX_STREAM_ID_LENGTH} printable ASCII characters without spaces, quotes or backslashes`
      })
    : undefined

const expectedParam = (expected: ExpectedVersion): number | null =>
  expected === "any" ? null : expected === "no_stream" ? -1 : expected

const isUniqueViolation = (error: SqlError, constraint: string): boolean => {
  const cause = error.cause as { code?: unknown; constraint?: unknown } | undefined
  return cause?.code === "23505" && cause.constraint === constraint
}

/**
 * `event_store.append_many` (migration 0009) raises SQLSTATE CP409 on the first conflict, with the
 * message `wrong_expected_version <actual> <stream id>` or `ordering_conflict <actual> <stream id>`.
 * The anchored-at-the-end match also accepts a driver that prefixes the message.
 */
const APPEND_CONFLICT_CODE = "CP409"
const APPEND_CONFLICT_MESSAGE = /(?:^|\s)(wrong_expected_version|ordering_conflict) (\d+) (\S+)$/

interface AppendConflict {
  readonly kind: "wrong_expected_version" | "ordering_conflict"
  readonly actual: number
  readonly streamId: string
}

const appendConflict = (error: SqlError): AppendConflict | undefined => {
  const cause = error.cause as { code?: unknown; message?: unknown } | undefined
  if (cause?.code !== APPEND_CONFLICT_CODE || typeof cause.message !== "string") return undefined
  const match = APPEND_CONFLICT_MESSAGE.exec(cause.message)
  const actual = Number(match?.[2])
  if (!match?.[3] || !Number.isSafeInteger(actual)) return undefined
  return {
    kind: match[1] === "ordering_conflict" ? "ordering_conflict" : "wrong_expected_version",
    actual,
    streamId: match[3]
  }
}

/** The stream of the event whose id a unique violation names (PostgreSQL's `detail`: "Key (event_id)=(…)"). */
const duplicateEventStream = (error: SqlError, payload: ReadonlyArray<ManyPayload>): string => {
  const detail = (error.cause as { detail?: unknown } | undefined)?.detail
  const hit =
    typeof detail === "string" ? payload.find((p) => p.events.some((e) => detail.includes(e.id))) : undefined
  return hit?.streamId ?? payload[0]?.streamId ?? ""
}

/** A duplicate event id is the caller's `DuplicateEvent`; any other failure stays a SqlError. */
const appendSqlError = (
  input: AppendInput,
  error: SqlError
): Effect.Effect<never, DuplicateEvent | SqlError> =>
  isUniqueViolation(error, "events_event_id_uq")
    ? Effect.fail(
        new DuplicateEvent({ streamId: input.streamId, detail: String((error.cause as Error).message) })
      )
    : Effect.fail(error)

/** Retries of a standalone append that lost the per-stream ordering guard to a newer transaction. */
const orderingRetry = Schedule.exponential("2 millis").pipe(
  Schedule.jittered,
  Schedule.intersect(Schedule.recurs(10))
)

/**
 * Reads fetch a batch as ONE json text (an array of per-event arrays) instead of one protocol row
 * per event: decoding thousands of rows column by column in the driver was most of the CPU of a
 * catch-up read, while one JSON.parse of the batch is native and fast. The text is assembled with
 * string concatenation — `data` and `metadata` are already JSON text, so this skips the jsonb → json
 * conversion of json_build_array (measured ~35 % faster end to end). Stream ids and event types need
 * no escaping: append admits only characters that are literal inside a JSON string (validateStreamId,
 * defineEvent). recorded_at travels as epoch milliseconds (written from a JS Date: exact).
 */
const EVENT_JSON_TEXT = `'[' || global_position || ',"' || transaction_id || '","' || stream_id
  || '",' || stream_version || ',"' || event_id || '","' || event_type || '",' || schema_version
  || ',' || data::text || ',' || metadata::text || ',' || (extract(epoch FROM recorded_at) * 1000)::int8 || ']'`

/** `'[' || string_agg(event, ',' ORDER BY …) || ']'`: NULL when there are no rows. */
const batchText = (orderBy: string) => `'[' || string_agg(${EVENT_JSON_TEXT}, ',' ORDER BY ${orderBy}) || ']'`

const toStored = (r: EventRow): StoredEvent => {
  // Positions and versions stay far below 2^53; refuse loudly rather than round (as for int8 columns).
  if (!Number.isSafeInteger(r[0]) || !Number.isSafeInteger(r[3]))
    throw new RangeError(`event position ${r[0]} / version ${r[3]} exceeds Number.MAX_SAFE_INTEGER`)
  return {
    globalPosition: r[0],
    transactionId: r[1],
    streamId: r[2],
    streamVersion: r[3],
    eventId: r[4],
    type: r[5],
    schemaVersion: r[6],
    data: r[7],
    metadata: r[8],
    recordedAt: new Date(r[9])
  }
}

/** The `events` column of a batch query: a json array of EventRow, or null for none. */
const parseBatch = (text: string | null | undefined): ReadonlyArray<StoredEvent> =>
  text ? (JSON.parse(text) as ReadonlyArray<EventRow>).map(toStored) : []

export const makeEventStore = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const keyring = yield* Keyring
  const signal = yield* AppendSignal
  const watchers = yield* AppendWatchers
  const streamBatch = sql.literal(batchText("stream_version"))
  const feedBatch = sql.literal(batchText("transaction_id, global_position"))
  // The last event below the gap-safe horizon, as "<xid>:<position>" (one backward index probe).
  const horizonQuery = sql.literal(
    `SELECT transaction_id::text || ':' || global_position FROM event_store.events
      WHERE transaction_id < pg_snapshot_xmin(pg_current_snapshot())
      ORDER BY transaction_id DESC, global_position DESC LIMIT 1`
  )
  const streamsBatch = sql.literal(batchText("stream_id, stream_version"))

  /**
   * Decrypts the personal fields of a batch with one key lookup. `text` is the batch as fetched: when
   * it holds no envelope marker at all (most batches), one native substring search skips the walk.
   */
  const decrypt = (
    events: ReadonlyArray<StoredEvent>,
    text: string | null | undefined
  ): Effect.Effect<ReadonlyArray<StoredEvent>, SqlError> => {
    if (!text?.includes('"$pii"')) return Effect.succeed(events)
    const found: Array<{ event: number; key: string; envelope: Envelope }> = []
    for (let i = 0; i < events.length; i++) {
      const data = events[i]?.data
      if (typeof data !== "object" || data === null || Array.isArray(data)) continue
      for (const key in data) {
        const value = (data as Record<string, unknown>)[key]
        if (isEnvelope(value)) found.push({ event: i, key, envelope: value })
      }
    }
    if (found.length === 0) return Effect.succeed(events)
    return Effect.map(keyring.open(found.map((f) => f.envelope)), (plain) => {
      const out = events.slice()
      found.forEach((f, i) => {
        const event = out[f.event]
        if (event) out[f.event] = { ...event, data: { ...(event.data as object), [f.key]: plain[i] } }
      })
      return out
    })
  }

  /** Personal fields to seal, per data subject: the encoded record and the key of each field. */
  type ToSeal = Map<string, Array<{ readonly record: Record<string, unknown>; readonly key: string }>>

  /**
   * Validates and encodes every event (no database work), collecting the personal fields to seal —
   * so a malformed event never leaves a subject key behind. Event schemas are synchronous (JSON in,
   * JSON out), so encoding needs no fiber per event.
   */
  const encodeEvents = (
    input: AppendInput,
    recordedAt: number
  ): Either.Either<
    { readonly payload: ReadonlyArray<PayloadEvent>; readonly toSeal: ToSeal },
    InvalidEventPayload
  > => {
    const metadata = input.metadata ?? {}
    const payload: PayloadEvent[] = []
    const toSeal: ToSeal = new Map()
    for (const event of input.events) {
      const type = event.eventType
      if (!EVENT_TYPE_NAME.test(type.type)) {
        return Either.left(
          new InvalidEventPayload({
            eventType: type.type,
            message: "event types are named <aggregate>.<past_tense>"
          })
        )
      }
      if (event.id !== undefined && !UUID_PATTERN.test(event.id)) {
        return Either.left(
          new InvalidEventPayload({ eventType: type.type, message: `event id "${event.id}" is not a UUID` })
        )
      }
      const encoded = type.encode(event.data)
      if (Either.isLeft(encoded)) {
        return Either.left(
          new InvalidEventPayload({
            eventType: type.type,
            message: ParseResult.TreeFormatter.formatErrorSync(encoded.left)
          })
        )
      }
      let data: unknown = encoded.right
      if (type.personalKeys.length > 0 && type.subject && typeof data === "object" && data !== null) {
        const subject = type.subject(event.data)
        const record: Record<string, unknown> = { ...(data as Record<string, unknown>) }
        for (const key of type.personalKeys) {
          const value = record[key]
          if (value === undefined || isShredded(value)) continue
          const list = toSeal.get(subject)
          if (list) list.push({ record, key })
          else toSeal.set(subject, [{ record, key }])
        }
        data = record
      }
      payload.push({
        id: event.id?.toLowerCase() ?? uuidv7FromMillis(recordedAt),
        type: type.type,
        schemaVersion: type.version,
        data,
        metadata: event.metadata ?? metadata
      })
    }
    return Either.right({ payload, toSeal })
  }

  /** Seals the collected fields in place, with one key statement per data subject. */
  const sealLooked = (toSeal: ToSeal): Effect.Effect<void, SubjectForgotten | SqlError> =>
    Effect.forEach(
      toSeal,
      ([subject, fields]) =>
        Effect.map(
          keyring.sealAll(
            subject,
            fields.map((f) => f.record[f.key])
          ),
          (envelopes) => {
            fields.forEach((f, i) => {
              f.record[f.key] = envelopes[i]
            })
          }
        ),
      { discard: true }
    )

  /** Seals the collected fields in place with no statement: the append's statement handles the keys. */
  const sealInline = (toSeal: ToSeal): ReadonlyArray<InlineKey> => {
    const keys: Array<InlineKey> = []
    for (const [subject, fields] of toSeal) {
      const sealed = keyring.sealInline(
        subject,
        fields.map((f) => f.record[f.key])
      )
      fields.forEach((f, i) => {
        f.record[f.key] = sealed.envelopes[i]
      })
      keys.push(sealed.key)
    }
    return keys
  }

  /** `encodeEvents`, then every personal field sealed with its subject's key looked up (or created). */
  const encode = (
    input: AppendInput,
    recordedAt: number
  ): Effect.Effect<ReadonlyArray<PayloadEvent>, InvalidEventPayload | SubjectForgotten | SqlError> =>
    Either.match(encodeEvents(input, recordedAt), {
      onLeft: Effect.fail,
      onRight: ({ payload, toSeal }) =>
        toSeal.size === 0 ? Effect.succeed(payload) : Effect.as(sealLooked(toSeal), payload)
    })

  /** The checks of an append that need no database: stream id, at least one event, expected version. */
  const appendProblem = (input: AppendInput): InvalidStreamId | InvalidAppend | undefined => {
    const expected = input.expectedVersion
    return (
      streamIdProblem(input.streamId) ??
      (input.events.length === 0
        ? new InvalidAppend({ streamId: input.streamId, message: "an append needs at least one event" })
        : typeof expected === "number" && !(Number.isSafeInteger(expected) && expected >= 0)
          ? new InvalidAppend({
              streamId: input.streamId,
              message: `expected version must be a non-negative integer, "no_stream" or "any" (got ${expected})`
            })
          : undefined)
    )
  }

  const validateAppend = (input: AppendInput): Effect.Effect<void, InvalidStreamId | InvalidAppend> => {
    const problem = appendProblem(input)
    return problem === undefined ? Effect.void : Effect.fail(problem)
  }

  /**
   * One statement: `append_events`, or `append_command` when the append also creates or checks data
   * keys, takes projection locks or writes public events.
   */
  const appendStatement = (
    input: AppendInput,
    payload: ReadonlyArray<PayloadEvent>,
    keys: ReadonlyArray<InlineKey>,
    recordedAt: Date
  ) => {
    const publicRows = input.publicEvents?.({ eventIds: payload.map((p) => p.id), recordedAt }) ?? []
    const locks = input.sharedLocks
    const events = JSON.stringify(payload)
    const expected = expectedParam(input.expectedVersion)
    if (publicRows.length === 0 && (locks === undefined || locks.names.length === 0) && keys.length === 0) {
      return executeInTransaction(sql<AppendRow>`
        SELECT outcome, stream_version AS "streamVersion", first_position AS "firstPosition",
               last_position AS "lastPosition", transaction_id AS "transactionId", positions
          FROM event_store.append_events(${input.streamId}, ${input.streamType},
            ${expected}, ${events}::jsonb, ${recordedAt})`)
    }
    const created = keys.flatMap((k) =>
      k.kind === "new" ? [{ subject: k.subject, wrapped: k.wrapped, kek: k.kekId }] : []
    )
    const live = keys.flatMap((k) => (k.kind === "live" ? [{ subject: k.subject, wrapped: k.wrapped }] : []))
    return executeInTransaction(sql<AppendRow>`
        SELECT outcome, stream_version AS "streamVersion", first_position AS "firstPosition",
               last_position AS "lastPosition", transaction_id AS "transactionId", positions
          FROM event_store.append_command(${input.streamId}, ${input.streamType}, ${expected},
            ${events}::jsonb, ${recordedAt}, ${locks?.space ?? 0}::int4,
            ${textArray(sql, locks?.names ?? [])}, ${publicEventsPayload(publicRows)}::jsonb,
            ${JSON.stringify(created)}::jsonb, ${JSON.stringify(live)}::jsonb)`)
  }

  const appendOnce = (input: AppendInput): Effect.Effect<AppendResult, AppendError | SqlError> =>
    Effect.gen(function* () {
      yield* validateAppend(input)
      const now = yield* Clock.currentTimeMillis
      const recordedAt = new Date(now)
      // Personal fields are sealed with no statement of their own: the append's statement creates
      // the new subjects' keys and checks the held ones. When it finds them stale (a subject this
      // process knew no key of already has one, or a held key was forgotten), it wrote nothing: seal
      // again with the keys looked up, and append once more.
      const encoded = yield* encodeEvents(input, now)
      const keys = sealInline(encoded.toSeal)
      let payload = encoded.payload
      let rows = yield* appendStatement(input, payload, keys, recordedAt).pipe(
        Effect.catchTag("SqlError", (error) => appendSqlError(input, error))
      )
      // The keys the appended statement checked (or created): none when it had to seal again.
      let checkedKeys = keys
      if (rows[0]?.outcome === "subject_keys_stale") {
        checkedKeys = []
        for (const key of keys) keyring.dropCached(key.subject)
        payload = yield* encode(input, now)
        rows = yield* appendStatement(input, payload, [], recordedAt).pipe(
          Effect.catchTag("SqlError", (error) => appendSqlError(input, error))
        )
      }
      const row = rows[0]
      if (!row) return yield* Effect.dieMessage("append_events returned no row")
      if (row.outcome === "wrong_expected_version") {
        return yield* new WrongExpectedVersion({
          streamId: input.streamId,
          expected: input.expectedVersion,
          actual: row.streamVersion ?? 0
        })
      }
      if (row.outcome === "ordering_conflict")
        return yield* new StreamOrderingConflict({ streamId: input.streamId })
      if (row.outcome !== "ok") return yield* Effect.dieMessage(`append returned ${row.outcome}`)
      // Once committed, the keys the statement checked decrypt too.
      for (const key of checkedKeys)
        yield* afterCommit(`keyring:${key.subject}`, keyring.keyCommitted(key.subject, key.wrapped))
      return {
        streamId: input.streamId,
        version: row.streamVersion ?? 0,
        firstPosition: row.firstPosition ?? 0,
        lastPosition: row.lastPosition ?? 0,
        positions: (row.positions ?? []).map(Number),
        transactionId: row.transactionId,
        eventIds: payload.map((p) => p.id),
        recordedAt
      }
    }).pipe(
      withSpanWhenTracing("EventStore.append", {
        attributes: { "stream.id": input.streamId },
        // No call-site capture (a `new Error()` per append) on this hot path; errors keep their own.
        captureStackTrace: false
      })
    )

  const appendManyOnce = (
    inputs: ReadonlyArray<AppendInput>
  ): Effect.Effect<ReadonlyArray<AppendResult>, AppendError | SqlError> =>
    Effect.gen(function* () {
      // Checked and encoded without a fiber step per stream (a flow's write can append many streams).
      const seen = new Set<string>()
      for (const input of inputs) {
        const problem = appendProblem(input)
        if (problem !== undefined) return yield* Effect.fail(problem)
        if (seen.has(input.streamId)) {
          return yield* new InvalidAppend({
            streamId: input.streamId,
            message: "a stream can appear only once in an appendMany"
          })
        }
        seen.add(input.streamId)
      }
      const now = yield* Clock.currentTimeMillis
      const recordedAt = new Date(now)
      const payload: ManyPayload[] = []
      for (const input of inputs) {
        const encoded = encodeEvents(input, now)
        if (Either.isLeft(encoded)) return yield* Effect.fail(encoded.left)
        const { toSeal } = encoded.right
        if (toSeal.size > 0) yield* sealLooked(toSeal)
        payload.push({
          streamId: input.streamId,
          streamType: input.streamType,
          expected: expectedParam(input.expectedVersion),
          events: encoded.right.payload
        })
      }
      const rows = yield* sql<ManyRow>`
        SELECT json_agg(json_build_array(m.stream_version, m.positions) ORDER BY m.ord) AS streams,
               min(m.transaction_id) AS "transactionId"
          FROM event_store.append_many(${JSON.stringify(payload)}::jsonb, ${recordedAt})
               WITH ORDINALITY AS m(stream_id, stream_version, positions, transaction_id, ord)`.pipe(
        Effect.catchTag(
          "SqlError",
          (
            error
          ): Effect.Effect<
            never,
            DuplicateEvent | WrongExpectedVersion | StreamOrderingConflict | SqlError
          > => {
            if (isUniqueViolation(error, "events_event_id_uq")) {
              return Effect.fail(
                new DuplicateEvent({
                  streamId: duplicateEventStream(error, payload),
                  detail: String((error.cause as Error).message)
                })
              )
            }
            const conflict = appendConflict(error)
            const input = conflict && inputs.find((i) => i.streamId === conflict.streamId)
            if (!conflict || !input) return Effect.fail(error)
            return conflict.kind === "ordering_conflict"
              ? Effect.fail(new StreamOrderingConflict({ streamId: input.streamId }))
              : Effect.fail(
                  new WrongExpectedVersion({
                    streamId: input.streamId,
                    expected: input.expectedVersion,
                    actual: conflict.actual
                  })
                )
          }
        )
      )
      // One row per stream, in input order.
      const streams = rows[0]?.streams ?? []
      const transactionId = rows[0]?.transactionId ?? ""
      const results: AppendResult[] = []
      for (let i = 0; i < inputs.length; i++) {
        const streamId = inputs[i]?.streamId ?? ""
        const row = streams[i]
        const sent = payload[i]
        if (!row || !sent)
          return yield* Effect.dieMessage(`append_many returned no row for stream ${streamId}`)
        const [version, positions] = row
        results.push({
          streamId,
          version,
          firstPosition: positions[0] ?? 0,
          lastPosition: positions[positions.length - 1] ?? 0,
          positions,
          transactionId,
          eventIds: sent.events.map((e) => e.id),
          recordedAt
        })
      }
      return results
    }).pipe(
      withSpanWhenTracing("EventStore.appendMany", {
        attributes: { "streams.count": inputs.length },
        captureStackTrace: false
      })
    )

  /**
   * Inside a caller's transaction an append joins it (the transaction's owner retries ordering
   * conflicts; local processors are woken after its commit, see db/Transaction). On its own it is
   * one statement, atomic by itself: one round trip, no BEGIN/COMMIT, retried on ordering conflicts,
   * local processors woken after. A single append creates or checks its subjects' keys in that
   * statement; when it finds them stale, or in `appendMany`, the keys are looked up (or created) by
   * a statement each before it. No transaction is needed around those: a key whose append then fails
   * is simply reused by the next append for that subject, and an erasure that commits in between
   * leaves data under a destroyed key — unreadable, i.e. already shredded.
   */
  const joinOrStandalone = <A>(
    inputs: ReadonlyArray<AppendInput>,
    once: Effect.Effect<A, AppendError | SqlError>
  ) =>
    withTransactionState((joined) =>
      joined
        ? once.pipe(
            Effect.tap(() => watchers.appended(inputs)),
            Effect.tap(() => signal.notifyAfterCommit),
            // The owner retries the whole transaction: tell it even when the caller swallows this.
            Effect.tapError((e) =>
              e._tag === "WrongExpectedVersion" || e._tag === "StreamOrderingConflict"
                ? reportConflict(e)
                : Effect.void
            )
          )
        : once.pipe(
            Effect.retry({ while: (e) => e._tag === "StreamOrderingConflict", schedule: orderingRetry }),
            Effect.tap(() => watchers.appended(inputs)),
            Effect.tap(() => signal.notify)
          )
    )

  const store: EventStoreShape = {
    append: (input) => joinOrStandalone([input], appendOnce(input)),

    appendMany: (inputs) =>
      inputs.length === 0 ? Effect.succeed([]) : joinOrStandalone(inputs, appendManyOnce(inputs)),

    readStream: (streamId, options) =>
      Effect.gen(function* () {
        const from = options?.fromVersion ?? 0
        // Whether the stream exists rides along (one round trip), looked up only when nothing was
        // read: an empty answer is a stream with nothing after `from`, or none at all (a new
        // aggregate's first command reads one).
        const [batch] = yield* sql<{ events: string | null; found: boolean }>`
          WITH b AS (SELECT ${streamBatch} AS events FROM event_store.events
                      WHERE stream_id = ${streamId} AND stream_version > ${from})
          SELECT b.events,
                 b.events IS NOT NULL
                   OR EXISTS (SELECT 1 FROM event_store.streams WHERE stream_id = ${streamId}) AS found
            FROM b`
        const events = parseBatch(batch?.events)
        if (events.length === 0) {
          if (batch?.found !== true) return yield* new StreamNotFound({ streamId })
          return []
        }
        return yield* decrypt(events, batch?.events)
      }).pipe(
        withSpanWhenTracing("EventStore.readStream", {
          attributes: { "stream.id": streamId },
          captureStackTrace: false
        })
      ),

    readStreamAfterSnapshot: (streamId, stateVersion) =>
      Effect.gen(function* () {
        const [row] = yield* sql<{
          events: string | null
          snapshotVersion: number | null
          snapshotState: unknown
        }>`
          WITH s AS (SELECT version, state FROM event_store.snapshots
                      WHERE stream_id = ${streamId} AND state_version = ${stateVersion})
          SELECT (SELECT version FROM s) AS "snapshotVersion", (SELECT state FROM s) AS "snapshotState",
                 (SELECT ${streamBatch} FROM event_store.events
                   WHERE stream_id = ${streamId}
                     AND stream_version > coalesce((SELECT version FROM s), 0)) AS events`
        const events = yield* decrypt(parseBatch(row?.events), row?.events)
        const snapshot =
          row === undefined || row.snapshotVersion === null
            ? Option.none()
            : Option.some({ version: row.snapshotVersion, state: row.snapshotState })
        return { snapshot, events }
      }).pipe(
        withSpanWhenTracing("EventStore.readStreamAfterSnapshot", {
          attributes: { "stream.id": streamId },
          captureStackTrace: false
        })
      ),

    readStreams: (streams) => {
      if (streams.length === 0) return Effect.succeed(new Map())
      return Effect.gen(function* () {
        const fromVersions = new Map<string, number>()
        for (const { streamId, fromVersion = 0 } of streams) {
          const known = fromVersions.get(streamId)
          if (known === undefined || fromVersion < known) fromVersions.set(streamId, fromVersion)
        }
        const ids = [...fromVersions.keys()]
        const [batch] = yield* sql<{ events: string | null; existing: ReadonlyArray<string> | null }>`
          SELECT (SELECT ${streamsBatch}
                    FROM unnest(${ids}::text[], ${[...fromVersions.values()]}::int8[]) AS r(id, from_version)
                    JOIN event_store.events e ON e.stream_id = r.id AND e.stream_version > r.from_version
                 ) AS events,
                 (SELECT array_agg(s.stream_id) FROM event_store.streams s
                   WHERE s.stream_id = ANY(${ids}::text[])) AS existing`
        const events = yield* decrypt(parseBatch(batch?.events), batch?.events)
        const byStream = new Map<string, StoredEvent[]>()
        for (const event of events) {
          const list = byStream.get(event.streamId)
          if (list) list.push(event)
          else byStream.set(event.streamId, [event])
        }
        const existing = new Set(batch?.existing ?? [])
        const result = new Map<string, ReadonlyArray<StoredEvent>>()
        for (const id of ids) {
          const list = byStream.get(id)
          if (list) result.set(id, list)
          else if (existing.has(id)) result.set(id, [])
        }
        return result
      }).pipe(
        withSpanWhenTracing("EventStore.readStreams", {
          attributes: { "streams.count": streams.length },
          captureStackTrace: false
        })
      )
    },

    readAll: (options) =>
      Effect.gen(function* () {
        const filters = [
          sql`(transaction_id, global_position) > (${options.after.xid}::xid8, ${options.after.position})`
        ]
        // Gap-safe: only transactions older than every running one — nothing can still appear below.
        if (options.horizon !== "visible")
          filters.push(sql`transaction_id < pg_snapshot_xmin(pg_current_snapshot())`)
        if (options.eventTypes && options.eventTypes.length > 0)
          filters.push(sql`event_type = ANY(${options.eventTypes})`)
        if (options.streamId !== undefined) filters.push(sql`stream_id = ${options.streamId}`)
        // A filtered gap-safe read also asks for the last event below the horizon, in the same
        // snapshot: when fewer than `limit` events match, every event up to it was scanned and none
        // other matched, so the checkpoint moves there. Otherwise a reader of rare types would scan
        // every event since its last match again on each poll (cost growing with the log).
        const horizonToo =
          options.horizon !== "visible" &&
          ((options.eventTypes !== undefined && options.eventTypes.length > 0) ||
            options.streamId !== undefined)
        const [batch] = yield* sql<{ events: string | null; horizon: string | null }>`
          SELECT (SELECT ${feedBatch}
                    FROM (SELECT * FROM event_store.events WHERE ${sql.and(filters)}
                           ORDER BY transaction_id, global_position LIMIT ${options.limit}) e) AS events,
                 ${horizonToo ? sql`(${horizonQuery})` : sql`NULL`} AS horizon`
        const events = yield* decrypt(parseBatch(batch?.events), batch?.events)
        const last = events[events.length - 1]
        const checkpoint = last ? checkpointOf(last) : options.after
        return {
          events,
          checkpoint: events.length < options.limit ? laterOf(checkpoint, batch?.horizon ?? null) : checkpoint
        }
      }),

    streamInfo: (streamId) =>
      Effect.map(
        sql<StreamInfo>`SELECT stream_id AS "streamId", stream_type AS "streamType", version,
          created_at AS "createdAt", updated_at AS "updatedAt" FROM event_store.streams WHERE stream_id = ${streamId}`,
        (rows) => Option.fromNullable(rows[0])
      ),

    head: Effect.map(
      sql<{ position: number | null; recordedAt: Date | null }>`
        SELECT global_position AS position, recorded_at AS "recordedAt" FROM event_store.events
         WHERE transaction_id < pg_snapshot_xmin(pg_current_snapshot())
         ORDER BY transaction_id DESC, global_position DESC LIMIT 1`,
      (rows) => ({ position: rows[0]?.position ?? 0, recordedAt: Option.fromNullable(rows[0]?.recordedAt) })
    ),

    forgetSubject: (subjectId) =>
      sql.withTransaction(
        Effect.gen(function* () {
          const existed = yield* keyring.forget(subjectId)
          yield* sql`UPDATE event_store.public_events
                        SET data = jsonb_build_object('id', data->'id', 'shredded', true)
                      WHERE subject_id = ${subjectId}`
          return existed
        })
      )
  }
  return store
})

export const EventStoreLive = Layer.effect(EventStore, makeEventStore)
