/**
 * Public events (spec §6.1 / §6.5): the snapshot as of a domain event, written by the command's
 * transaction. Webhooks, notifications and `GET /v1/events` read them with the same gap-safe
 * (transaction_id, position) protocol as the event store.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { type Checkpoint, laterOf } from "./Checkpoint.js"

/** A public event to insert (its `evt_…` id is chosen by the caller, deterministically). */
export interface PublicEventRow {
  readonly id: string
  readonly type: string
  readonly data: unknown
  readonly occurredAt: Date
  /** The domain event it was derived from. */
  readonly sourceEventId: string
  readonly streamId: string
  /** The data subject the snapshot is about, so erasure can redact it. */
  readonly subjectId?: string
}

/** A stored public event: the inserted row, with its place in the feed. */
export interface PublicEvent extends Omit<PublicEventRow, "subjectId"> {
  readonly position: number
  readonly transactionId: string
  readonly subjectId: string | null
}

/** Rows as the jsonb array `insertPublicEvents` and `event_store.append_command` insert. */
export const publicEventsPayload = (rows: ReadonlyArray<PublicEventRow>): string =>
  JSON.stringify(
    rows.map((r) => ({
      id: r.id,
      type: r.type,
      // JSON null rather than a missing key, so an absent snapshot is still valid jsonb.
      data: r.data === undefined ? null : r.data,
      occurred_at: r.occurredAt.toISOString(),
      source_event_id: r.sourceEventId,
      stream_id: r.streamId,
      subject_id: r.subjectId ?? null
    }))
  )

/**
 * Inserts rows in one statement, in order (positions follow the array). Run it inside the command's
 * transaction so the snapshots commit with their domain events.
 */
export const insertPublicEvents = (
  rows: ReadonlyArray<PublicEventRow>
): Effect.Effect<void, SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    if (rows.length === 0) return
    const sql = yield* SqlClient.SqlClient
    yield* sql`
      INSERT INTO event_store.public_events
        (id, type, data, occurred_at, source_event_id, stream_id, subject_id)
      SELECT r.value->>'id', r.value->>'type', r.value->'data', (r.value->>'occurred_at')::timestamptz,
             (r.value->>'source_event_id')::uuid, r.value->>'stream_id', r.value->>'subject_id'
        FROM jsonb_array_elements(${publicEventsPayload(rows)}::jsonb) WITH ORDINALITY AS r(value, ord)
       ORDER BY r.ord`
  })

export interface ReadPublicEventsOptions {
  readonly after: Checkpoint
  readonly limit: number
  readonly types?: ReadonlyArray<string>
}

export interface ReadPublicEventsResult {
  readonly events: ReadonlyArray<PublicEvent>
  /**
   * Where the next read starts: after the last returned event or, when a filtered read returned
   * fewer than `limit` events, after the last event below the horizon it scanned up to.
   */
  readonly checkpoint: Checkpoint
}

const COLUMNS = `position, transaction_id::text AS "transactionId", id, type, data, occurred_at AS "occurredAt",
  source_event_id::text AS "sourceEventId", stream_id AS "streamId", subject_id AS "subjectId"`

/** Gap-safe read after a checkpoint: only transactions older than every running one are visible. */
export const readPublicEvents = (
  options: ReadPublicEventsOptions
): Effect.Effect<ReadPublicEventsResult, SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const filters = [
      sql`(transaction_id, position) > (${options.after.xid}::xid8, ${options.after.position})`,
      sql`transaction_id < pg_snapshot_xmin(pg_current_snapshot())`
    ]
    if (!options.types || options.types.length === 0) {
      const events = yield* sql<PublicEvent>`SELECT ${sql.literal(COLUMNS)} FROM event_store.public_events
        WHERE ${sql.and(filters)} ORDER BY transaction_id, position LIMIT ${options.limit}`
      return { events, checkpoint: after(events, options.after) }
    }
    // Filtered: the last event below the horizon comes too (same snapshot), so a reader of rare
    // types moves past the events it skipped instead of scanning them again on every poll.
    filters.push(sql`type = ANY(${options.types})`)
    const rows = yield* sql<
      { readonly [K in keyof PublicEvent]: PublicEvent[K] | null } & { readonly horizon: string | null }
    >`
      SELECT ${sql.literal(COLUMNS)}, h.horizon
        FROM (SELECT (SELECT transaction_id::text || ':' || position FROM event_store.public_events
                       WHERE transaction_id < pg_snapshot_xmin(pg_current_snapshot())
                       ORDER BY transaction_id DESC, position DESC LIMIT 1) AS horizon) h
        LEFT JOIN LATERAL (
          SELECT * FROM event_store.public_events
           WHERE ${sql.and(filters)} ORDER BY transaction_id, position LIMIT ${options.limit}) p ON true
       ORDER BY p.transaction_id, p.position`
    const horizon = rows[0]?.horizon ?? null
    const events: Array<PublicEvent> = []
    for (const row of rows) {
      const { horizon: _, ...event } = row
      if (isEvent(event)) events.push(event)
    }
    const checkpoint = after(events, options.after)
    return { events, checkpoint: events.length < options.limit ? laterOf(checkpoint, horizon) : checkpoint }
  })

/** A row of the LEFT JOIN above that holds an event (the columns of none are all null). */
const isEvent = (row: { readonly [K in keyof PublicEvent]: PublicEvent[K] | null }): row is PublicEvent =>
  row.id !== null

const after = (events: ReadonlyArray<PublicEvent>, start: Checkpoint): Checkpoint => {
  const last = events[events.length - 1]
  return last ? { xid: last.transactionId, position: last.position } : start
}
