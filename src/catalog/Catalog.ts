/**
 * The catalog use cases behind `/v1/products`. Each write runs in ONE transaction: the SKU check
 * (under the SKU's advisory lock, so concurrent claims of one SKU queue and the second gets a clean
 * 409; the read model's unique index is the backstop), the product's row lock (stock changes queue
 * behind reservations of the same product) and the command. Shoppers (role `customer`) see active products only; anything else is
 * 404 to them, exactly like an unknown id.
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { isUniqueViolation } from "../db/Sql.js"
import type { AuthenticatedActor } from "../http/Auth.js"
import { BadRequest, Conflict, NotFound, orDieUnlessHttp } from "../http/errors.js"
import { cachedLookup } from "../http/FastRoutes.js"
import { v1Page } from "../http/Lists.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import { commandMetadata, makeTransact } from "../kernel/UseCase.js"
import type { NewProductInput, PriceInput, ProductListParams, ProductPatchInput } from "./Api.js"
import { type CachedProduct, ProductCache } from "./cache.js"
import {
  type NewProduct,
  ProductChangeInvalid,
  type ProductChanges,
  type ProductCommand,
  ProductDecider,
  ProductInUse,
  ProductNotFound,
  productStream
} from "./decider.js"
import type { PriceData } from "./events.js"
import { PRODUCTS } from "./projection.js"
import {
  lockProducts,
  PRODUCT_COLUMNS,
  type ProductView,
  productView,
  selectProduct,
  skuTaken,
  stateView
} from "./queries.js"

const notFound = NotFound.of({ message: "No such product", param: "id" })
const skuConflict = Conflict.of({
  code: "resource_already_exists",
  message: "a product with this sku already exists",
  param: "sku"
})
const inUse = (e: ProductInUse) =>
  Conflict.of({
    code: "resource_in_use",
    message: `the product is held by open reservations (${e.reservedQuantity} units): release them (checkouts expire, orders are fulfilled or cancelled) before archiving it`
  })

const isShopper = (actor: AuthenticatedActor) => actor.role === "customer"

/** The price as recorded: defaults filled in (one-time, interval count 1, no trial, no usage). */
export const priceData = (input: PriceInput): PriceData => ({
  amount: input.amount,
  currency: input.currency,
  type: input.type ?? "one_time",
  recurring:
    input.recurring === undefined
      ? null
      : {
          interval: input.recurring.interval,
          intervalCount: input.recurring.intervalCount ?? 1,
          trialPeriodDays: input.recurring.trialPeriodDays ?? null,
          usage:
            input.recurring.usage === undefined
              ? null
              : {
                  meter: input.recurring.usage.meter,
                  aggregation: input.recurring.usage.aggregation,
                  unitAmount: input.recurring.usage.unitAmount,
                  includedUnits: input.recurring.usage.includedUnits ?? 0,
                  ...(input.recurring.usage.uniqueKey === undefined
                    ? {}
                    : { uniqueKey: input.recurring.usage.uniqueKey })
                }
        }
})

/** The `Create` command for a new product's input (optional fields at their defaults). */
export const createProductCommand = (
  productId: string,
  input: NewProductInput
): ProductCommand & NewProduct => ({
  _tag: "Create",
  productId,
  name: input.name,
  description: input.description ?? null,
  sku: input.sku ?? null,
  status: input.status ?? "active",
  price: priceData(input.price),
  images: input.images ?? [],
  metadata: input.metadata ?? {},
  inventory: {
    // Stock given means stock counted, unless said otherwise.
    tracked: input.inventory?.tracked ?? input.inventory?.stockedQuantity !== undefined,
    stockedQuantity: input.inventory?.stockedQuantity ?? 0,
    lowStockThreshold: input.inventory?.lowStockThreshold ?? 5,
    allowBackorder: input.inventory?.allowBackorder ?? false
  }
})

const changesOf = (patch: ProductPatchInput): ProductChanges => {
  const inv = patch.inventory
  return {
    ...(patch.name === undefined ? {} : { name: patch.name }),
    ...(patch.description === undefined ? {} : { description: patch.description }),
    ...(patch.sku === undefined ? {} : { sku: patch.sku }),
    ...(patch.status === undefined ? {} : { status: patch.status }),
    ...(patch.price === undefined ? {} : { price: priceData(patch.price) }),
    ...(patch.images === undefined ? {} : { images: patch.images }),
    ...(patch.metadata === undefined ? {} : { metadata: patch.metadata }),
    ...(inv?.tracked === undefined ? {} : { tracked: inv.tracked }),
    ...(inv?.lowStockThreshold === undefined ? {} : { lowStockThreshold: inv.lowStockThreshold }),
    ...(inv?.allowBackorder === undefined ? {} : { allowBackorder: inv.allowBackorder }),
    ...(inv?.stockedQuantity === undefined ? {} : { stockedQuantity: inv.stockedQuantity }),
    ...(inv?.adjustBy === undefined ? {} : { adjustBy: inv.adjustBy })
  }
}

/** `%`, `_` and `\` match themselves in a search, not as LIKE wildcards. */
const likeEscape = (text: string) => text.replace(/[\\%_]/g, (c) => `\\${c}`)

export const makeCatalog = Effect.gen(function* () {
  const runner = yield* CommandRunner
  const transact = yield* makeTransact
  const sql = yield* SqlClient.SqlClient
  const cache = yield* ProductCache

  /** Malformed and foreign-prefixed ids are unknown ids: 404. */
  const validId = (id: string) => (Ids.isValid("prod", id) ? Effect.succeed(id) : Effect.fail(notFound))

  const view = (productId: string, actor: AuthenticatedActor) =>
    Effect.flatMap(selectProduct(sql, productId), (row) =>
      Option.isSome(row) && (!isShopper(actor) || row.value.status === "active")
        ? Effect.succeed(productView(row.value))
        : Effect.fail(notFound)
    )

  /** One mapper for the decider's refusals (the reservation-only ones cannot come from a request: defects). */
  const domainErrors = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.mapError(effect, (e): E | NotFound | BadRequest | Conflict => {
      if (e instanceof ProductNotFound) return notFound
      if (e instanceof ProductInUse) return inUse(e)
      if (e instanceof ProductChangeInvalid)
        return BadRequest.of({ code: "parameter_invalid", message: e.message, param: e.field })
      return e
    })

  const execute = (productId: string, command: ProductCommand, actor: AuthenticatedActor) =>
    Effect.flatMap(commandMetadata(actor), (metadata) =>
      runner.execute(ProductDecider, productStream(productId), command, {
        metadata,
        // A creation's id was minted just before: there is no stream to read.
        newStream: command._tag === "Create"
      })
    )

  /** Refuses a SKU another product holds (under the SKU's lock: see `skuTaken`). */
  const ensureSkuFree = (sku: string | null | undefined, productId?: string) =>
    sku === undefined || sku === null
      ? Effect.void
      : Effect.flatMap(skuTaken(sql, sku, productId), (taken) =>
          taken ? Effect.fail(skuConflict) : Effect.void
        )

  const create = (actor: AuthenticatedActor, input: NewProductInput) =>
    Effect.gen(function* () {
      const productId = yield* Ids.make("prod")
      const result = yield* transact(
        Effect.zipRight(
          ensureSkuFree(input.sku),
          execute(productId, createProductCommand(productId, input), actor)
        )
      ).pipe(
        // The backstop: the read model's unique index refused a SKU (see `skuTaken`).
        Effect.catchIf(isUniqueViolation, () => Effect.fail(skuConflict)),
        domainErrors,
        // A creation names no existing product.
        Effect.catchTag("NotFound", Effect.die)
      )
      return stateView(result.state)
    }).pipe(orDieUnlessHttp)

  const get = (actor: AuthenticatedActor, id: string) =>
    Effect.flatMap(validId(id), (productId) => view(productId, actor)).pipe(orDieUnlessHttp)

  /**
   * `get` for the fast route: the product's JSON bytes as `encode` (the route's success schema)
   * makes them, from the product cache (one row read on a miss).
   */
  const getEncoded = (actor: AuthenticatedActor, id: string, encode: (view: ProductView) => Uint8Array) =>
    Effect.flatMap(validId(id), (productId) =>
      cachedLookup({
        cache,
        id: productId,
        load: selectProduct(sql, productId),
        cached: (row): CachedProduct => ({ status: row.status, bytes: encode(productView(row)) }),
        visible: (product) => !isShopper(actor) || product.status === "active",
        notFound
      })
    ).pipe(orDieUnlessHttp)

  const list = (actor: AuthenticatedActor, params: ProductListParams) => {
    const q = params.q?.trim()
    const status = isShopper(actor) ? "active" : params.status
    // A shopper asking for drafts or archived products gets none.
    const refused = isShopper(actor) && params.status !== undefined && params.status !== "active"
    const where = sql.and([
      ...(refused ? [sql`FALSE`] : []),
      ...(status !== undefined
        ? [sql`status = ${status}`]
        : params.includeArchived === "true"
          ? []
          : [sql`status <> 'archived'`]),
      ...(params.type === undefined ? [] : [sql`price_type = ${params.type}`]),
      ...(q === undefined || q === "" ? [] : [sql`search_text LIKE '%' || lower(${likeEscape(q)}) || '%'`])
    ])
    return v1Page(sql, {
      table: PRODUCTS,
      idColumn: "product_id",
      idPrefix: "prod",
      columns: PRODUCT_COLUMNS,
      where,
      // A draft was never shown to shoppers: as their cursor it is unknown, like an id that never
      // existed (an archived one they may have paged past still places the next page).
      ...(isShopper(actor) ? { cursorWhere: sql`status <> 'draft'` } : {}),
      params,
      toItem: productView
    })
  }

  const update = (actor: AuthenticatedActor, id: string, patch: ProductPatchInput) =>
    Effect.gen(function* () {
      const productId = yield* validId(id)
      const result = yield* transact(
        Effect.gen(function* () {
          // Stock changes queue behind this product's reservations (see CatalogPort).
          yield* lockProducts(sql, [productId])
          yield* ensureSkuFree(patch.sku, productId)
          return yield* execute(productId, { _tag: "Update", changes: changesOf(patch) }, actor)
        })
      ).pipe(
        Effect.catchIf(isUniqueViolation, () => Effect.fail(skuConflict)),
        domainErrors
      )
      return stateView(result.state)
    }).pipe(orDieUnlessHttp)

  const archive = (actor: AuthenticatedActor, id: string) =>
    Effect.gen(function* () {
      const productId = yield* validId(id)
      const result = yield* transact(
        Effect.zipRight(lockProducts(sql, [productId]), execute(productId, { _tag: "Archive" }, actor))
      ).pipe(domainErrors)
      return stateView(result.state)
    }).pipe(orDieUnlessHttp)

  return { create, get, getEncoded, list, update, archive }
})

export type CatalogShape = Effect.Effect.Success<typeof makeCatalog>

export class Catalog extends Context.Tag("catalog/Catalog")<Catalog, CatalogShape>() {}

export const CatalogLive = Layer.effect(Catalog, makeCatalog)
