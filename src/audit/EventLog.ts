/**
 * The audit feed: the event history, all of it or one stream, from a checkpoint, filtered by type,
 * read in batches with the gap-safe reader (so memory stays flat and a resumed read never misses an
 * event that committed late). Served by the `EventLog.Stream` RPC and `npm run events:export`; both
 * emit the same item shape. Data is as stored (not upcast), personal fields decrypted where the
 * subject's key still exists and `{"_tag":"Shredded"}` where it was erased, and every `Secret` field
 * (password and key hashes, webhook signing secrets, tokens) replaced by `"[secret]"`: the feed and
 * the export leave the process, so `toEventLogItem` is the one place both redact.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Chunk, Clock, Data, Duration, Effect, Option, Queue, Schema, Stream } from "effect"
import type { AppendSignalShape } from "../eventstore/AppendSignal.js"
import * as Checkpoint from "../eventstore/Checkpoint.js"
import { checkpointOf, type EventStoreShape, type StoredEvent } from "../eventstore/EventStore.js"
import { type EventTypes, KnownEventTypes } from "../eventstore/EventType.js"

/** One event of the history, as sent over `/rpc` and written by the export (one JSON line each). */
export const EventLogItem = Schema.Struct({
  position: Schema.Number,
  /** Resume after this event: pass it as `after` (or `--after`). */
  checkpoint: Schema.String,
  streamId: Schema.String,
  streamVersion: Schema.Number,
  eventId: Schema.String,
  type: Schema.String,
  schemaVersion: Schema.Number,
  data: Schema.Unknown,
  metadata: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  /** ISO 8601, UTC. */
  recordedAt: Schema.String
}).annotations({ identifier: "EventLogItem" })
export type EventLogItem = typeof EventLogItem.Type

/** An event as it leaves the process: secrets of the types in `types` read `"[secret]"`. */
export const toEventLogItem = (event: StoredEvent, types: EventTypes): EventLogItem => ({
  position: event.globalPosition,
  checkpoint: Checkpoint.format(checkpointOf(event)),
  streamId: event.streamId,
  streamVersion: event.streamVersion,
  eventId: event.eventId,
  type: event.type,
  schemaVersion: event.schemaVersion,
  data: types.redact(event.type, event.data),
  metadata: event.metadata,
  recordedAt: event.recordedAt.toISOString()
})

/** Limits of one RPC request (HTTP RPC has no backpressure and no cancellation: keep it bounded). */
export const DEFAULT_LIMIT = 1_000
export const MAX_LIMIT = 10_000
export const DEFAULT_FOLLOW_SECONDS = 30
export const MAX_FOLLOW_SECONDS = 300
const MAX_TYPES = 100
const MAX_NAME_LENGTH = 200

/** A request as it arrives (RPC payload or command line), validated by `parseEventLogRequest`. */
export interface EventLogRequest {
  readonly streamId?: string | undefined
  /** A checkpoint string "<xid>:<position>"; the origin when absent. */
  readonly after?: string | undefined
  readonly types?: ReadonlyArray<string> | undefined
  readonly limit?: number | undefined
  /** Keep the stream open after catching up, waiting for new events, for `followSeconds`. */
  readonly follow?: boolean | undefined
  readonly followSeconds?: number | undefined
}

export interface EventLogQuery {
  readonly after: Checkpoint.Checkpoint
  readonly streamId?: string
  readonly eventTypes?: ReadonlyArray<string>
  /** Most events to return; `Infinity` only for the export script. */
  readonly limit: number
  /** How long to wait for new events after catching up (0: end when caught up). */
  readonly followMillis: number
}

export class InvalidEventLogRequest extends Data.TaggedError("InvalidEventLogRequest")<{
  readonly param: string
  readonly code: string
  readonly message: string
}> {}

const invalid = (param: string, message: string, code = "parameter_invalid") =>
  Effect.fail(new InvalidEventLogRequest({ param, code, message }))

const validName = (s: string) => s.length > 0 && s.length <= MAX_NAME_LENGTH && /^[\x21-\x7e]+$/.test(s)

/**
 * Validates a request. `maxLimit` is `MAX_LIMIT` for the RPC; the export passes `Infinity` (it
 * streams to a file with backpressure, so it may read the whole history).
 */
export const parseEventLogRequest = (
  request: EventLogRequest,
  options: { readonly maxLimit?: number; readonly defaultLimit?: number } = {}
): Effect.Effect<EventLogQuery, InvalidEventLogRequest> =>
  Effect.gen(function* () {
    const maxLimit = options.maxLimit ?? MAX_LIMIT
    const after =
      request.after === undefined || request.after.trim() === ""
        ? Checkpoint.origin
        : yield* Checkpoint.parse(request.after).pipe(
            Effect.mapError(
              (e) =>
                new InvalidEventLogRequest({ param: "after", code: "invalid_checkpoint", message: e.message })
            )
          )
    const limit = request.limit ?? options.defaultLimit ?? DEFAULT_LIMIT
    // Unbounded only where the caller allows it (the export), whatever the request asks for.
    const limitOk =
      limit === Number.POSITIVE_INFINITY
        ? maxLimit === Number.POSITIVE_INFINITY
        : Number.isSafeInteger(limit) && limit >= 1 && limit <= maxLimit
    if (!limitOk) {
      return yield* invalid(
        "limit",
        `limit must be an integer between 1 and ${maxLimit === Number.POSITIVE_INFINITY ? "2^53" : maxLimit}`
      )
    }
    if (request.streamId !== undefined && !validName(request.streamId)) {
      return yield* invalid(
        "streamId",
        `a stream id is 1-${MAX_NAME_LENGTH} printable ASCII characters without spaces`
      )
    }
    const types = request.types ?? []
    if (types.length > MAX_TYPES) return yield* invalid("types", `at most ${MAX_TYPES} event types`)
    const badType = types.find((t) => !validName(t))
    if (badType !== undefined) return yield* invalid("types", `"${badType}" is not an event type name`)
    const followSeconds = request.follow === true ? (request.followSeconds ?? DEFAULT_FOLLOW_SECONDS) : 0
    if (
      request.followSeconds !== undefined &&
      (!Number.isFinite(request.followSeconds) ||
        request.followSeconds < 0 ||
        request.followSeconds > MAX_FOLLOW_SECONDS)
    ) {
      return yield* invalid("followSeconds", `followSeconds must be between 0 and ${MAX_FOLLOW_SECONDS}`)
    }
    return {
      after,
      limit,
      followMillis: Math.round(followSeconds * 1000),
      ...(request.streamId === undefined ? {} : { streamId: request.streamId }),
      ...(types.length > 0 ? { eventTypes: [...new Set(types)] } : {})
    }
  })

export interface ReadEventLogOptions {
  /** Events per database read (default 500). */
  readonly batchSize?: number
  /** Wakes a follower at once after a local append (otherwise it polls). */
  readonly signal?: AppendSignalShape
  /** Poll interval while following (default 500 ms). */
  readonly pollInterval?: Duration.DurationInput
}

interface Page {
  readonly after: Checkpoint.Checkpoint
  readonly remaining: number
}

/**
 * The history matching `query`, in (xid, position) order, read `batchSize` events at a time. Each
 * read is a short statement of its own (no transaction held open), run uninterruptibly: cancelling
 * a query needs a second connection, which the embedded database does not have.
 */
export const readEventLog = (
  store: EventStoreShape,
  query: EventLogQuery,
  options: ReadEventLogOptions = {}
): Stream.Stream<StoredEvent, SqlError> =>
  Stream.unwrapScoped(
    Effect.gen(function* () {
      const batchSize = Math.max(1, options.batchSize ?? 500)
      const poll = Duration.toMillis(options.pollInterval ?? "500 millis")
      const following = query.followMillis > 0
      const wake =
        following && options.signal
          ? Option.some(yield* options.signal.listen)
          : Option.none<Queue.Dequeue<void>>()
      const deadline = (yield* Clock.currentTimeMillis) + query.followMillis

      const read = (page: Page, n: number) =>
        Effect.uninterruptible(
          store.readAll({
            after: page.after,
            limit: n,
            ...(query.streamId === undefined ? {} : { streamId: query.streamId }),
            ...(query.eventTypes === undefined ? {} : { eventTypes: query.eventTypes })
          })
        )

      const waitForMore = (until: number) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => {
          const sleep = Effect.sleep(Duration.millis(Math.max(0, Math.min(poll, until - now))))
          return Option.isSome(wake) ? Effect.raceFirst(Queue.take(wake.value), sleep) : sleep
        })

      const next = (
        page: Page
      ): Effect.Effect<readonly [Chunk.Chunk<StoredEvent>, Option.Option<Page>], SqlError> =>
        Effect.gen(function* () {
          let current = page
          while (true) {
            const n = Math.min(batchSize, current.remaining)
            const { events, checkpoint } = yield* read(current, n)
            const after: Page = { after: checkpoint, remaining: current.remaining - events.length }
            const caughtUp = events.length < n
            if (events.length > 0) {
              const more = after.remaining > 0 && (!caughtUp || following)
              return [
                Chunk.unsafeFromArray(events as Array<StoredEvent>),
                more ? Option.some(after) : Option.none()
              ]
            }
            if (!following || (yield* Clock.currentTimeMillis) >= deadline)
              return [Chunk.empty(), Option.none()]
            yield* waitForMore(deadline)
            current = after
          }
        })

      return query.limit <= 0
        ? Stream.empty
        : Stream.paginateChunkEffect({ after: query.after, remaining: query.limit } as Page, next)
    })
  )

export interface ExportSummary {
  readonly events: number
  readonly firstPosition: number | null
  readonly lastPosition: number | null
  /** Checkpoint after the last exported event (the starting one when nothing was exported). */
  readonly checkpoint: string
}

/**
 * Writes the history as NDJSON, one `EventLogItem` per line, through `write` (which should wait
 * for the sink to drain, so memory stays flat), and returns a summary.
 */
export const exportEventLog = <E, R>(
  store: EventStoreShape,
  query: EventLogQuery,
  write: (chunk: string) => Effect.Effect<void, E, R>,
  options: ReadEventLogOptions = {}
): Effect.Effect<ExportSummary, SqlError | E, R | KnownEventTypes> =>
  Effect.gen(function* () {
    const types = yield* KnownEventTypes
    const seen: { events: number; first: StoredEvent | null; last: StoredEvent | null } = {
      events: 0,
      first: null,
      last: null
    }
    yield* readEventLog(store, query, options).pipe(
      Stream.runForEachChunk((chunk) => {
        if (Chunk.isEmpty(chunk)) return Effect.void
        let text = ""
        for (const event of chunk) {
          text += `${JSON.stringify(toEventLogItem(event, types))}\n`
          seen.first ??= event
          seen.last = event
          seen.events++
        }
        return write(text)
      })
    )
    return {
      events: seen.events,
      firstPosition: seen.first?.globalPosition ?? null,
      lastPosition: seen.last?.globalPosition ?? null,
      checkpoint: Checkpoint.format(seen.last ? checkpointOf(seen.last) : query.after)
    }
  })
