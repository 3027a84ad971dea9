/**
 * Read-model lookups of the catalog: one product (one single-row statement by primary key), a keyset
 * page of products, an owner's open holds, and the row locks reservations take.
 */
import type { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { textArray } from "../db/Sql.js"
import type { ProductState } from "./decider.js"
import type { PriceData } from "./events.js"
import { PRODUCTS, RESERVATIONS } from "./projection.js"

/** A product row as selected (bigints as numbers: quantities are far below 2^53). */
export interface ProductRow {
  readonly id: string
  readonly name: string
  readonly description: string | null
  readonly sku: string | null
  readonly status: "draft" | "active" | "archived"
  readonly price: PriceData
  readonly priceVersion: number
  readonly images: ReadonlyArray<string>
  readonly metadata: Readonly<Record<string, unknown>>
  readonly tracked: boolean
  readonly stockedQuantity: number
  readonly reservedQuantity: number
  readonly lowStockThreshold: number
  readonly allowBackorder: boolean
  readonly deletedAt: Date | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

export const PRODUCT_COLUMNS = `product_id AS id, name, description, sku, status, price, price_version AS "priceVersion",
  images, metadata, tracked, stocked_quantity::float8 AS "stockedQuantity",
  reserved_quantity::float8 AS "reservedQuantity", low_stock_threshold::float8 AS "lowStockThreshold",
  allow_backorder AS "allowBackorder", deleted_at AS "deletedAt", created_at AS "createdAt", updated_at AS "updatedAt"`

/** The `/v1` product object of a row. */
export const productView = (row: ProductRow) => ({
  object: "product" as const,
  id: row.id,
  name: row.name,
  description: row.description,
  sku: row.sku,
  status: row.status,
  price: { ...row.price, version: row.priceVersion },
  inventory: {
    tracked: row.tracked,
    stockedQuantity: row.stockedQuantity,
    reservedQuantity: row.reservedQuantity,
    availableQuantity: row.stockedQuantity - row.reservedQuantity,
    lowStockThreshold: row.lowStockThreshold,
    allowBackorder: row.allowBackorder
  },
  images: row.images,
  metadata: row.metadata,
  deletedAt: row.deletedAt,
  createdAt: row.createdAt,
  updatedAt: row.updatedAt
})
export type ProductView = ReturnType<typeof productView>

/**
 * The same object from the aggregate's state after a command: what a write answers with, without
 * reading back the row it has just written (the route tests check both agree).
 */
export const stateView = (state: ProductState): ProductView =>
  productView({
    id: state.productId,
    name: state.name,
    description: state.description,
    sku: state.sku,
    status: state.status === "none" ? "draft" : state.status,
    price: state.price,
    priceVersion: state.priceVersion,
    images: state.images,
    metadata: state.metadata,
    tracked: state.inventory.tracked,
    stockedQuantity: state.inventory.stockedQuantity,
    reservedQuantity: state.inventory.reservedQuantity,
    lowStockThreshold: state.inventory.lowStockThreshold,
    allowBackorder: state.inventory.allowBackorder,
    deletedAt: state.archivedAt,
    createdAt: state.createdAt,
    updatedAt: state.updatedAt
  })

/** One product by id: a primary-key lookup, nothing else. */
export const selectProduct = (sql: SqlClient.SqlClient, productId: string) =>
  Effect.map(
    sql<ProductRow>`SELECT ${sql.literal(PRODUCT_COLUMNS)} FROM ${sql(PRODUCTS)} WHERE product_id = ${productId}`,
    (rows) => Option.fromNullable(rows[0])
  )

/** Advisory-lock space of SKUs (two-int4 keys; projections use 7701, idempotency keys one bigint). */
export const SKU_LOCK_CLASS = 7_702

/**
 * Whether a product holds `sku` (other than `except`), asked under the SKU's transaction-scoped
 * lock: two transactions claiming one SKU queue on the lock, and the second's check (a statement
 * after the wait, so a fresh snapshot) sees the first's committed row. The refusal is then a clean
 * 409 before any write, rather than a unique violation that would abort the transaction — the
 * caller's too (an Idempotency-Key request stores its answer in it). The unique index stays as the
 * backstop.
 */
export const skuTaken = (sql: SqlClient.SqlClient, sku: string, except?: string) =>
  Effect.zipRight(
    sql`SELECT pg_advisory_xact_lock(${SKU_LOCK_CLASS}, hashtext(${sku}))`,
    Effect.map(
      sql<{ readonly id: string }>`SELECT product_id AS id FROM ${sql(PRODUCTS)} WHERE sku = ${sku}`,
      (rows) => rows.some((r) => r.id !== except)
    )
  )

export interface HoldRow {
  readonly productId: string
  readonly quantity: number
}

/**
 * An owner's open holds, by product id, with their products' rows locked as `lockProducts` locks
 * them (in id order: the rows are locked as the sorted join returns them), in one statement.
 */
export const lockedHoldsOf = (sql: SqlClient.SqlClient, ownerId: string) =>
  sql<HoldRow>`SELECT r.product_id AS "productId", r.quantity::float8 AS quantity
    FROM ${sql(RESERVATIONS)} r JOIN ${sql(PRODUCTS)} p ON p.product_id = r.product_id
    WHERE r.owner_id = ${ownerId} ORDER BY r.product_id FOR UPDATE OF p`

/**
 * Locks the products' rows, in id order, until the transaction ends. Writers of one product then
 * queue here (on PostgreSQL; PGlite runs one transaction at a time anyway) and load its stream only
 * once the previous writer committed: 200 concurrent checkouts of one product decide one after the
 * other instead of all deciding on the same version and retrying on conflicts. The id order means
 * two multi-product reservations never deadlock.
 */
export const lockProducts = (sql: SqlClient.SqlClient, productIds: ReadonlyArray<string>) =>
  productIds.length === 0
    ? Effect.succeed([])
    : sql`SELECT product_id FROM ${sql(PRODUCTS)} WHERE product_id = ANY(${textArray(sql, productIds)})
        ORDER BY product_id FOR UPDATE`
