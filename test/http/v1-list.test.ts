/**
 * The generic `/v1` list page (`v1Page` over `db/Keyset.ts`) on a scratch table of a real database:
 * newest first by `(created_at, id)`, ties broken by id, `startingAfter` / `endingBefore` walking
 * forwards and back across pages, `hasMore`, limit bounds, caller filters, an empty table, and the
 * documented 400s (both cursors, a cursor of another resource, a cursor of no row).
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect, Either, Layer, Schema } from "effect"
import { expect } from "vitest"
import { uuidv7FromMillis } from "../../src/base/Uuid.js"
import { DatabaseLive } from "../../src/db/Database.js"
import { keysetPage } from "../../src/db/Keyset.js"
import { V1ListParams, v1Page } from "../../src/http/Lists.js"
import * as Ids from "../../src/kernel/Ids.js"
import { TestConfig } from "../support/database.js"

const TABLE = "scratch.items"
const COLUMNS = `item_id AS id, status, created_at AS "createdAt"`

interface Item {
  readonly id: string
  readonly status: "open" | "closed"
  readonly createdAt: Date
}

/** 25 rows over 9 instants (ties of 2 or 3 rows), ids unrelated to their times; a third closed. */
const ROWS: ReadonlyArray<Item> = Array.from({ length: 25 }, (_, i) => ({
  id: Ids.fromUuid("prod", uuidv7FromMillis(1_700_000_000_000 + ((i * 7) % 25))),
  status: i % 3 === 0 ? "closed" : "open",
  createdAt: new Date(Date.UTC(2026, 0, 1, 0, 0, (i * 4) % 9))
}))

/** The order every page must follow: newest first, then the greater id first. */
const newestFirst = (items: ReadonlyArray<Item>) =>
  [...items].sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime() || (a.id < b.id ? 1 : -1))

const ALL = newestFirst(ROWS)
const ids = (items: ReadonlyArray<Item>) => items.map((item) => item.id)

const params = (input: Record<string, string>) => Schema.decodeUnknownSync(V1ListParams)(input)

const page = (
  input: Record<string, string>,
  options: { readonly table?: "scratch.empty"; readonly open?: true } = {}
) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    v1Page(sql, {
      table: options.table ?? TABLE,
      idColumn: "item_id",
      idPrefix: "prod",
      columns: COLUMNS,
      where: options.open ? sql`status = ${"open"}` : undefined,
      params: params(input),
      toItem: (row: Item) => row
    })
  )

/** Every page from the first, following `startingAfter`; the pages' sizes and the items in order. */
const walkForwards = (limit: number, open?: true) =>
  Effect.gen(function* () {
    const sizes: Array<number> = []
    const items: Array<Item> = []
    let after: string | undefined
    while (true) {
      const next = yield* page(
        { limit: String(limit), ...(after === undefined ? {} : { startingAfter: after }) },
        open ? { open } : {}
      )
      sizes.push(next.data.length)
      items.push(...next.data)
      after = next.data[next.data.length - 1]?.id
      if (!next.hasMore) return { sizes, items }
    }
  })

const failure = <
  A,
  E extends { readonly error: { readonly code: string; readonly param?: string | undefined } }
>(
  effect: Effect.Effect<A, E, SqlClient.SqlClient>
) => Effect.map(Effect.flip(effect), (e) => ({ code: e.error.code, param: e.error.param }))

const Scratch = Layer.effectDiscard(
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.gen(function* () {
      yield* sql`CREATE SCHEMA scratch`
      for (const table of ["items", "empty"]) {
        yield* sql`CREATE TABLE ${sql(`scratch.${table}`)} (
          item_id text PRIMARY KEY, status text NOT NULL, created_at timestamptz NOT NULL)`
      }
      yield* sql`INSERT INTO scratch.items ${sql.insert(
        ROWS.map((r) => ({ item_id: r.id, status: r.status, created_at: r.createdAt }))
      )}`
    })
  )
).pipe(Layer.provideMerge(DatabaseLive), Layer.provide(TestConfig))

layer(Scratch, { excludeTestServices: true, timeout: 60_000 })("v1Page", (it) => {
  it.effect("an empty table: no data, no more", () =>
    Effect.gen(function* () {
      expect(yield* page({}, { table: "scratch.empty" })).toEqual({
        object: "list",
        data: [],
        hasMore: false
      })
    })
  )

  it.effect("the first page: the newest 10 (the default limit), with more to come", () =>
    Effect.gen(function* () {
      const first = yield* page({})
      expect(first.object).toBe("list")
      expect(ids(first.data)).toEqual(ids(ALL.slice(0, 10)))
      expect(first.data[0]).toEqual(ALL[0])
      expect(first.hasMore).toBe(true)
    })
  )

  it.effect("startingAfter walks forwards to the oldest; endingBefore walks back to the newest", () =>
    Effect.gen(function* () {
      const forwards = yield* walkForwards(10)
      expect(forwards.sizes).toEqual([10, 10, 5])
      expect(ids(forwards.items)).toEqual(ids(ALL))

      // Back from the last page: each earlier page again, `hasMore` while newer rows remain.
      const last = ALL.slice(20)
      const second = yield* page({ limit: "10", endingBefore: last[0]?.id ?? "" })
      expect(ids(second.data)).toEqual(ids(ALL.slice(10, 20)))
      expect(second.hasMore).toBe(true)
      const first = yield* page({ limit: "10", endingBefore: second.data[0]?.id ?? "" })
      expect(ids(first.data)).toEqual(ids(ALL.slice(0, 10)))
      expect(first.hasMore).toBe(false)
      // Before the newest, nothing; after the oldest, nothing (neither is an error).
      expect(yield* page({ endingBefore: ALL[0]?.id ?? "" })).toEqual({
        object: "list",
        data: [],
        hasMore: false
      })
      expect(yield* page({ startingAfter: ALL[24]?.id ?? "" })).toEqual({
        object: "list",
        data: [],
        hasMore: false
      })
    })
  )

  it.effect("rows created in the same instant are ordered by id, and pages split them without loss", () =>
    Effect.gen(function* () {
      const tied = ALL.filter((item) => item.createdAt.getTime() === ALL[0]?.createdAt.getTime())
      expect(tied.length).toBeGreaterThan(1)
      expect(ids(tied)).toEqual([...ids(tied)].sort().reverse())
      // Ids are not in time order here, so only (created_at, id) gives this order.
      expect(ids(ALL)).not.toEqual([...ids(ALL)].sort().reverse())
      for (const limit of [1, 2, 4, 7]) {
        const walked = yield* walkForwards(limit)
        expect(ids(walked.items), `limit ${limit}`).toEqual(ids(ALL))
        expect(walked.sizes.slice(0, -1).every((size) => size === limit)).toBe(true)
      }
      // Back across a tie, one row at a time.
      const back: Array<string> = []
      let before = ALL[5]?.id ?? ""
      while (true) {
        const previous = yield* page({ limit: "1", endingBefore: before })
        back.unshift(...ids(previous.data))
        if (!previous.hasMore) break
        before = previous.data[0]?.id ?? ""
      }
      expect(back).toEqual(ids(ALL.slice(0, 5)))
    })
  )

  it.effect("limit: 1 to 100 (default 10); outside, or not an integer, is refused by the parameters", () =>
    Effect.gen(function* () {
      expect(params({}).limit).toBe(10)
      for (const limit of ["0", "101", "-1", "2.5", "ten"])
        expect(Either.isLeft(Schema.decodeUnknownEither(V1ListParams)({ limit })), limit).toBe(true)
      const one = yield* page({ limit: "1" })
      expect(ids(one.data)).toEqual(ids(ALL.slice(0, 1)))
      expect(one.hasMore).toBe(true)
      const all = yield* page({ limit: "100" })
      expect(ids(all.data)).toEqual(ids(ALL))
      expect(all.hasMore).toBe(false)
      const exactly = yield* page({ limit: "25" })
      expect(exactly.data).toHaveLength(25)
      expect(exactly.hasMore).toBe(false)
    })
  )

  it.effect(
    "a filter keeps only its rows, on every page; a cursor that it excludes still places the page",
    () =>
      Effect.gen(function* () {
        const open = ALL.filter((item) => item.status === "open")
        const walked = yield* walkForwards(4, true)
        expect(ids(walked.items)).toEqual(ids(open))
        const closed = ALL.findIndex((item, index) => item.status === "closed" && index > 3)
        const after = yield* page({ limit: "100", startingAfter: ALL[closed]?.id ?? "" }, { open: true })
        expect(ids(after.data)).toEqual(ids(ALL.slice(closed + 1).filter((item) => item.status === "open")))
      })
  )

  it.effect("both cursors, a cursor of another resource, or of no row → 400", () =>
    Effect.gen(function* () {
      const a = ALL[3]?.id ?? ""
      const b = ALL[8]?.id ?? ""
      expect(yield* failure(page({ startingAfter: a, endingBefore: b }))).toEqual({
        code: "parameter_invalid",
        param: "endingBefore"
      })
      expect(yield* failure(page({ startingAfter: Ids.fromUuid("cus", uuidv7FromMillis(0)) }))).toEqual({
        code: "parameter_invalid",
        param: "startingAfter"
      })
      expect(yield* failure(page({ endingBefore: "nope" }))).toEqual({
        code: "parameter_invalid",
        param: "endingBefore"
      })
      const unknown = Ids.fromUuid("prod", uuidv7FromMillis(0))
      expect(yield* failure(page({ startingAfter: unknown }))).toEqual({
        code: "resource_missing",
        param: "startingAfter"
      })
      expect(yield* failure(page({ endingBefore: unknown }))).toEqual({
        code: "resource_missing",
        param: "endingBefore"
      })
    })
  )

  it.effect("created_at is compared in SQL: microseconds apart within one millisecond still page apart", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE scratch.micro (id text PRIMARY KEY, created_at timestamptz NOT NULL)`
      const [early, late] = [
        Ids.fromUuid("prod", uuidv7FromMillis(2)),
        Ids.fromUuid("prod", uuidv7FromMillis(1))
      ]
      yield* sql`INSERT INTO scratch.micro VALUES (${early}, '2026-01-01T00:00:00.000100Z'),
        (${late}, '2026-01-01T00:00:00.000200Z')`
      const micro = (cursor: { readonly startingAfter?: string; readonly endingBefore?: string }) =>
        keysetPage(sql, {
          table: "scratch.micro",
          columns: "id",
          limit: 10,
          ...cursor,
          toItem: (r: { id: string }) => r.id
        })
      expect((yield* micro({})).data).toEqual([late, early])
      expect(yield* micro({ startingAfter: late })).toEqual({ data: [early], hasMore: false })
      expect(yield* micro({ endingBefore: early })).toEqual({ data: [late], hasMore: false })
    })
  )

  it("table, id column and columns must be literals of the code (a plain string does not compile)", () => {
    const fromInput: string = "scratch.items; DROP TABLE scratch.items"
    const typeChecks = (sql: SqlClient.SqlClient) => [
      // @ts-expect-error a string from input is not a trusted table name
      keysetPage(sql, { table: fromInput, limit: 1, toItem: (r: Item) => r }),
      // @ts-expect-error nor a trusted select list
      keysetPage(sql, { table: TABLE, columns: fromInput, limit: 1, toItem: (r: Item) => r })
    ]
    expect(typeChecks).toBeTypeOf("function")
  })
})
