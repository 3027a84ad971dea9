/**
 * Reads of the public events (`event_store.public_events`, written by each command's transaction;
 * eventstore/PublicEvents.ts): one page of the feed and one event by id.
 *
 * The feed is ordered by `(transaction_id, position)`, the key the webhook dispatcher reads by, newest
 * first, and shows only transactions older than every running one (`pg_snapshot_xmin`). So a page
 * never changes once read, and an event that commits later always sorts after every event already
 * shown: a pull consumer that asks `endingBefore=<newest it saw>` misses nothing, where ordering by
 * `position` alone would (positions are drawn before commit; ARCHITECTURE.md §3 rule 2).
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import { KeysetCursorNotFound } from "../db/Keyset.js"

/** A stored public event as the feed reads it. */
export interface PublicEventRecord {
  readonly id: string
  readonly type: string
  readonly data: unknown
  readonly occurredAt: Date
}

/** `type=customer.created` (exact) or `type=customer.*` (every type under `customer.`). */
export type TypeFilter =
  | { readonly _tag: "Exact"; readonly type: string }
  | { readonly _tag: "Prefix"; readonly prefix: string }

export interface FeedQuery {
  readonly type?: TypeFilter | undefined
  /** Strictly after / strictly before, on the event's time (`occurred_at`). */
  readonly createdAfter?: Date | undefined
  readonly createdBefore?: Date | undefined
  readonly limit: number
  /** At most one cursor (the caller checks); `endingBefore` wins. */
  readonly startingAfter?: string | undefined
  readonly endingBefore?: string | undefined
}

export interface FeedPage {
  readonly data: ReadonlyArray<PublicEventRecord>
  /** More events in the direction of travel (older after `startingAfter` or none, newer before `endingBefore`). */
  readonly hasMore: boolean
}

const COLUMNS = `id, type, data, occurred_at AS "occurredAt"`

/** One page of the feed, newest first; an id of no event as a cursor → `KeysetCursorNotFound`. */
export const feedPage = (
  query: FeedQuery
): Effect.Effect<FeedPage, KeysetCursorNotFound | SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const before = query.endingBefore
    const cursor = before ?? query.startingAfter
    const towardsOlder = before === undefined
    const order = sql.literal(towardsOlder ? "DESC" : "ASC")
    const filters = [sql`transaction_id < pg_snapshot_xmin(pg_current_snapshot())`]
    if (query.type?._tag === "Exact") filters.push(sql`type = ${query.type.type}`)
    if (query.type?._tag === "Prefix") filters.push(sql`starts_with(type, ${query.type.prefix})`)
    if (query.createdAfter !== undefined) filters.push(sql`occurred_at > ${query.createdAfter}`)
    if (query.createdBefore !== undefined) filters.push(sql`occurred_at < ${query.createdBefore}`)
    if (cursor !== undefined) {
      // Placed by the cursor's key, looked up in the whole table (not only among the filtered rows).
      const at = sql`(SELECT transaction_id, position FROM event_store.public_events WHERE id = ${cursor})`
      filters.push(
        towardsOlder ? sql`(transaction_id, position) < ${at}` : sql`(transaction_id, position) > ${at}`
      )
    }
    const rows = yield* sql<PublicEventRecord>`SELECT ${sql.literal(COLUMNS)} FROM event_store.public_events
      WHERE ${sql.and(filters)} ORDER BY transaction_id ${order}, position ${order} LIMIT ${query.limit + 1}`
    // An empty page may be an unknown cursor (the comparison with no row is NULL): tell them apart.
    if (cursor !== undefined && rows.length === 0 && Option.isNone(yield* publicEventById(cursor)))
      return yield* new KeysetCursorNotFound({
        param: towardsOlder ? "startingAfter" : "endingBefore",
        id: cursor
      })
    const page = rows.slice(0, query.limit)
    return { data: towardsOlder ? page : page.reverse(), hasMore: rows.length > query.limit }
  })

/** One public event by id, committed (no horizon: an id a delivery carried is readable at once). */
export const publicEventById = (
  id: string
): Effect.Effect<Option.Option<PublicEventRecord>, SqlError, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<PublicEventRecord>`SELECT ${sql.literal(COLUMNS)} FROM event_store.public_events WHERE id = ${id}`,
      (rows) => Option.fromNullable(rows[0])
    )
  )
