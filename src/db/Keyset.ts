/**
 * Keyset pagination over a read-model table, newest first (Stripe's order): rows ordered by
 * `(created_at, <id>)` descending, so rows created in the same instant are still in one total order
 * and a page never skips or repeats a row when others are inserted meanwhile. A page starts after a
 * cursor row (towards older rows) or ends before one (towards newer rows); the cursor is looked up in
 * SQL, so no timestamp goes through a JavaScript `Date` (microseconds would be lost).
 *
 * The table, id column and selected columns are SQL text, so they must be literals of the code:
 * `Trusted` refuses a plain `string` at compile time, and the table and id column are quoted as
 * identifiers besides. Values (cursors, limits, filters' parameters) are always bound parameters.
 */
import type { SqlClient, Statement } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Data, Effect } from "effect"

/** A string type known when compiling (a literal in the code); `string` itself (input) is refused. */
export type Trusted<S extends string> = string extends S ? never : S

export interface KeysetPage<Row> {
  readonly data: ReadonlyArray<Row>
  /** More rows in the direction of travel: older after `startingAfter` (or none), newer before `endingBefore`. */
  readonly hasMore: boolean
}

/** A cursor id names no row of the table (never existed, or deleted since). */
export class KeysetCursorNotFound extends Data.TaggedError("KeysetCursorNotFound")<{
  readonly param: "startingAfter" | "endingBefore"
  readonly id: string
}> {}

/** The SQL names of a listed table: each a literal of the code (see `Trusted`). */
export interface SqlNames {
  /** `schema.table`. */
  readonly table: string
  /** The id column (a text primary key); `id` when absent. */
  readonly idColumn?: string
  /** The select list (`a, b AS "b2"`); `*` when absent. */
  readonly columns?: string
}

/** `SqlNames` whose every name is `Trusted`: a plain `string` (input) in any of them does not compile. */
export type TrustedNames<N extends SqlNames> = {
  readonly [K in keyof N]: N[K] extends string ? Trusted<N[K]> : N[K]
}

/** What a list reads: its table's names, its filters and how a row is shown. */
export interface KeysetSource<Row, A> {
  /** Extra conditions (filters), built with the `sql` tag so their values are parameters. */
  readonly where?: Statement.Fragment | undefined
  /**
   * The rows the caller may see at all (a shopper's own), when not all: a cursor naming any other
   * row is unknown, exactly like an id that never existed (its existence and position stay hidden).
   */
  readonly cursorWhere?: Statement.Fragment | undefined
  /** A selected row as the page shows it (its parameter's type is the row's). */
  readonly toItem: (row: Row) => A
}

/** Which page: rows per page (bounds checked by the caller) and at most one cursor. */
export interface KeysetCursor {
  readonly limit: number
  readonly startingAfter?: string | undefined
  readonly endingBefore?: string | undefined
}

/**
 * One page. Both cursors at once is the caller's to refuse (`endingBefore` wins here). A cursor is
 * looked up in the whole table, not only among the rows `where` keeps, so a row that stopped
 * matching a filter (a status that changed) still places the next page; its position reveals no
 * more than its id does (ids are time-ordered) — among the rows `cursorWhere` keeps, when given. An
 * unknown cursor fails with `KeysetCursorNotFound`.
 */
export const keysetPage = <Row extends object, A, N extends SqlNames>(
  sql: SqlClient.SqlClient,
  options: TrustedNames<N> & KeysetSource<Row, A> & KeysetCursor
): Effect.Effect<KeysetPage<A>, KeysetCursorNotFound | SqlError> =>
  Effect.gen(function* () {
    const table = sql(options.table)
    const id = sql(options.idColumn ?? "id")
    const columns = sql.literal(options.columns ?? "*")
    const where = options.where ?? sql`TRUE`
    const take = options.limit + 1
    const before = options.endingBefore
    const cursor = before ?? options.startingAfter
    const towardsOlder = before === undefined
    const order = sql.literal(towardsOlder ? "DESC" : "ASC")
    const visible = options.cursorWhere ?? sql`TRUE`
    const at = (cursorId: string) =>
      sql`(SELECT created_at, ${id} FROM ${table} WHERE ${id} = ${cursorId} AND (${visible}))`
    const beyond =
      cursor === undefined
        ? sql`TRUE`
        : towardsOlder
          ? sql`(created_at, ${id}) < ${at(cursor)}`
          : sql`(created_at, ${id}) > ${at(cursor)}`
    const rows = yield* sql<Row>`SELECT ${columns} FROM ${table} WHERE (${where}) AND ${beyond}
      ORDER BY created_at ${order}, ${id} ${order} LIMIT ${take}`
    // An empty page may be an unknown cursor (the comparison with no row is NULL): tell them apart.
    if (cursor !== undefined && rows.length === 0) {
      const found = yield* sql`SELECT 1 FROM ${table} WHERE ${id} = ${cursor} AND (${visible})`
      if (found.length === 0)
        return yield* new KeysetCursorNotFound({
          param: towardsOlder ? "startingAfter" : "endingBefore",
          id: cursor
        })
    }
    const page = rows.slice(0, options.limit).map(options.toItem)
    return { data: towardsOlder ? page : page.reverse(), hasMore: rows.length > options.limit }
  })
