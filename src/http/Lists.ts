/**
 * List conventions (design/API.md "Lists"). Base surface: `page` (≥ 1, default 1), `display` (1–100,
 * default 20; outside → 400) and a `{ count, models }` response. `/v1` surface: `limit` (1–100,
 * default 10; outside → 400), `startingAfter` / `endingBefore` (object ids, keyset pagination) and a
 * `{ object: "list", data, hasMore }` response.
 */
import type { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { type KeysetSource, keysetPage, type SqlNames, type TrustedNames } from "../db/Keyset.js"
import { type IdPrefix, isValid } from "../kernel/Ids.js"
import { BadRequest } from "./errors.js"

/**
 * An integer query parameter. Documented as what a client sends, an `integer` with its bounds (not
 * the string it travels as), so generated clients and test generators pass numbers.
 */
const IntFromString = (name: string, min: number, max: number, fallback: number) =>
  Schema.NumberFromString.pipe(
    Schema.int({ message: () => `${name} must be an integer` }),
    Schema.between(min, max, { message: () => `${name} must be between ${min} and ${max}` })
  ).annotations({
    jsonSchema: {
      type: "integer",
      minimum: min,
      maximum: max,
      default: fallback,
      description: `an integer from ${min} to ${max} (default ${fallback})`
    }
  })

export const MAX_DISPLAY = 100

export const PageParams = Schema.Struct({
  page: Schema.optionalWith(IntFromString("page", 1, 1_000_000, 1), { default: () => 1 }),
  display: Schema.optionalWith(IntFromString("display", 1, MAX_DISPLAY, 20), { default: () => 20 })
})
export type PageParams = typeof PageParams.Type

export const ListOf = <A, I, R>(model: Schema.Schema<A, I, R>, identifier: string) =>
  Schema.Struct({ count: Schema.Int, models: Schema.Array(model) }).annotations({ identifier })

export const MAX_LIMIT = 100

/** An object id of `prefix` (`wh_` + 26 Crockford base32 characters, a UUID): the ids a cursor takes. */
const idPattern = (prefix: IdPrefix) => new RegExp(`^${prefix}_[0-7][0-9a-hjkmnp-tv-z]{25}$`)

/**
 * `/v1` list parameters of the resource whose ids start with `prefix`. A cursor of another shape is
 * a 400 here; one of no object is the use case's (`v1Page`: 400 `resource_missing`, as Stripe).
 */
export const v1ListParams = (prefix: IdPrefix) => {
  const cursor = (param: string) =>
    Schema.String.pipe(
      Schema.pattern(idPattern(prefix), {
        message: () => `${param} must be an id of this list (${prefix}_…)`
      })
    )
  return Schema.Struct({
    limit: Schema.optionalWith(IntFromString("limit", 1, MAX_LIMIT, 10), { default: () => 10 }),
    startingAfter: Schema.optional(cursor("startingAfter")),
    endingBefore: Schema.optional(cursor("endingBefore"))
  })
}

/**
 * `/v1` list parameters of any list (the cursors' prefix is then checked by `v1Page`); what every
 * list's parameters decode to.
 */
export const V1ListParams = Schema.Struct({
  limit: Schema.optionalWith(IntFromString("limit", 1, MAX_LIMIT, 10), { default: () => 10 }),
  startingAfter: Schema.optional(
    Schema.String.pipe(Schema.maxLength(100, { message: () => "startingAfter must be an object id" }))
  ),
  endingBefore: Schema.optional(
    Schema.String.pipe(Schema.maxLength(100, { message: () => "endingBefore must be an object id" }))
  )
})
export type V1ListParams = typeof V1ListParams.Type

/** A `/v1` list page (Stripe's list object, camelCase). */
export const V1List = <A, I, R>(model: Schema.Schema<A, I, R>, identifier: string) =>
  Schema.Struct({
    object: Schema.Literal("list"),
    data: Schema.Array(model),
    hasMore: Schema.Boolean
  }).annotations({ identifier })

export interface V1Page<A> {
  readonly object: "list"
  readonly data: ReadonlyArray<A>
  readonly hasMore: boolean
}

/** The filters of a list shoppers may read. */
export interface OwnedListFilters {
  /**
   * A shopper's own customer id (the table's `customer_id`): the list holds only their rows, and a
   * cursor naming anyone else's row is unknown (400 `resource_missing`), as an id that never existed.
   */
  readonly owner?: string | undefined
}

/**
 * One `/v1` list page over a read-model table, newest first, keyset-paged by `(created_at, id)`
 * (`db/Keyset.ts`). The cursors are checked first, with the documented 400s: an id of another
 * resource (`parameter_invalid`), both cursors at once (`parameter_invalid` on `endingBefore`), an
 * id of no row (`resource_missing`, as Stripe). A database failure is a defect (a 500). Each list is
 * one call:
 *
 *   v1Page(sql, { table: "catalog.products", idColumn: "product_id", idPrefix: "prod",
 *                 columns: PRODUCT_COLUMNS, where: sql`status = ${status}`, params, toItem: productView })
 */
export const v1Page = <Row extends object, A, N extends SqlNames>(
  sql: SqlClient.SqlClient,
  options: TrustedNames<N> &
    KeysetSource<Row, A> & {
      /** The prefix of the listed resource's ids (`wh`, `prod`…): the cursors must carry it. */
      readonly idPrefix: IdPrefix
      readonly params: V1ListParams
    } & OwnedListFilters
): Effect.Effect<V1Page<A>, BadRequest> =>
  Effect.gen(function* () {
    const { idPrefix, params } = options
    for (const param of ["startingAfter", "endingBefore"] as const) {
      const id = params[param]
      if (id !== undefined && !isValid(idPrefix, id))
        return yield* BadRequest.of({
          code: "parameter_invalid",
          message: `${param} must be an id of this list (${idPrefix}_…)`,
          param
        })
    }
    if (params.startingAfter !== undefined && params.endingBefore !== undefined)
      return yield* BadRequest.of({
        code: "parameter_invalid",
        message: "pass startingAfter or endingBefore, not both",
        param: "endingBefore"
      })
    const owned = options.owner === undefined ? undefined : sql`customer_id = ${options.owner}`
    const scope =
      owned === undefined
        ? {}
        : { where: options.where === undefined ? owned : sql.and([owned, options.where]), cursorWhere: owned }
    const page = yield* keysetPage<Row, A, N>(sql, { ...options, ...scope, ...params }).pipe(
      Effect.catchTags({
        SqlError: Effect.die,
        KeysetCursorNotFound: (e) =>
          Effect.fail(
            BadRequest.of({ code: "resource_missing", message: `No such object: ${e.id}`, param: e.param })
          )
      })
    )
    return { object: "list", ...page }
  })

export interface Sort<F extends string> {
  readonly field: F
  readonly direction: "asc" | "desc"
}

/** `sort=<field>[:<asc|desc>]` over a closed list of fields (anything else → 400). */
export const SortParam = (fields: ReadonlyArray<string>) => {
  const pattern = new RegExp(`^(${fields.join("|")})(:(asc|desc))?$`)
  return Schema.String.pipe(
    Schema.pattern(pattern, {
      message: () => `sort must be <field>:<asc|desc> with field one of ${fields.join(", ")}`
    })
  )
}

/**
 * A `sort` already checked by `SortParam`, narrowed to its field; `fallback` when absent. A field
 * without a direction sorts ascending.
 */
export const parseSort = <F extends string>(
  fields: ReadonlyArray<F>,
  sort: string | undefined,
  fallback: Sort<F>
): Sort<F> => {
  const [name, direction] = (sort ?? "").split(":")
  const field = fields.find((f) => f === name)
  if (field === undefined) return fallback
  return { field, direction: direction === "desc" ? "desc" : "asc" }
}
