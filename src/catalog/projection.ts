/**
 * The catalog read model: one row per product (what `GET /v1/products/:id` reads, in one statement)
 * and one per open stock hold (which products an owner holds: what release, conversion and
 * fulfilment look up). Each event first moves the product row's `version` forward and stops there
 * when the row is already at or past it, so applying an event twice changes nothing and a rebuild
 * from position zero reproduces the rows exactly.
 */
import { SqlClient, type Statement } from "@effect/sql"
import { Effect } from "effect"
import { deferInTransaction, optionalColumn } from "../db/Sql.js"
import { defineProjection } from "../kernel/Projection.js"
import { productEventTypes } from "./events.js"

export const PRODUCTS = "catalog.products"
export const RESERVATIONS = "catalog.reservations"

export const CatalogProjection = defineProjection({
  name: "catalog",
  tables: [PRODUCTS, RESERVATIONS],
  events: productEventTypes,
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const products = sql(target.table(PRODUCTS))
      const reservations = sql(target.table(RESERVATIONS))
      /**
       * Applies `set` to the product's row together with this event's version, in one statement;
       * false when the row is already at or past it (or absent): nothing (more) to apply.
       */
      const advance = (productId: string, version: number, set: Statement.Fragment = sql``) =>
        Effect.map(
          sql`UPDATE ${products} SET version = ${version}${set}
            WHERE product_id = ${productId} AND version < ${version} RETURNING 1 AS ok`,
          (rows) => rows.length > 0
        )
      /**
       * `advance` and then, only when it applied, `quantity` added to the owner's hold (and, with
       * `from`, that owner's hold of the product dropped: a transfer) — one statement.
       */
      const advanceAndHold = (
        productId: string,
        version: number,
        set: Statement.Fragment,
        hold: {
          readonly ownerId: string
          readonly quantity: number
          readonly at: Date
          readonly from?: string
        }
      ) =>
        sql`WITH advanced AS (
              UPDATE ${products} SET version = ${version}${set}
               WHERE product_id = ${productId} AND version < ${version} RETURNING 1 AS ok
            )${
              hold.from === undefined
                ? sql``
                : sql`, moved AS (
              DELETE FROM ${reservations}
               WHERE owner_id = ${hold.from} AND product_id = ${productId} AND EXISTS (SELECT 1 FROM advanced)
            )`
            }
            INSERT INTO ${reservations} (owner_id, product_id, quantity, created_at, updated_at)
              SELECT ${hold.ownerId}, ${productId}, ${hold.quantity}, ${hold.at}, ${hold.at} FROM advanced
            ON CONFLICT (owner_id, product_id) DO UPDATE
              SET quantity = ${reservations}.quantity + EXCLUDED.quantity, updated_at = EXCLUDED.updated_at`
      /**
       * Takes `quantity` off a hold; the row goes when nothing is left. The DELETE comes first: after
       * the UPDATE, a hold left with no more than `quantity` (2 − 1) would match it and vanish.
       */
      const unhold = (ownerId: string, productId: string, quantity: number, at: Date) =>
        Effect.zipRight(
          sql`DELETE FROM ${reservations}
            WHERE owner_id = ${ownerId} AND product_id = ${productId} AND quantity <= ${quantity}`,
          sql`UPDATE ${reservations} SET quantity = quantity - ${quantity}, updated_at = ${at}
            WHERE owner_id = ${ownerId} AND product_id = ${productId} AND quantity > ${quantity}`
        )
      for (const e of events) {
        const at = e.recordedAt
        switch (e.type) {
          case "product.created": {
            const d = e.data
            yield* sql`INSERT INTO ${products} (product_id, name, description, sku, status, price, price_type,
                price_version, images, metadata, tracked, stocked_quantity, reserved_quantity, low_stock_threshold,
                allow_backorder, created_at, updated_at, version)
              VALUES (${d.productId}, ${d.name}, ${d.description}, ${d.sku}, ${d.status},
                ${JSON.stringify(d.price)}::jsonb, ${d.price.type}, 1, ${JSON.stringify(d.images)}::jsonb,
                ${JSON.stringify(d.metadata)}::jsonb, ${d.inventory.tracked}, ${d.inventory.stockedQuantity}, 0,
                ${d.inventory.lowStockThreshold}, ${d.inventory.allowBackorder}, ${at}, ${at}, ${e.streamVersion})
              ON CONFLICT (product_id) DO NOTHING`
            break
          }
          case "product.updated": {
            const d = e.data
            const changes: Record<string, string | number | boolean | null | Date> = {
              ...optionalColumn("name", d.name),
              ...optionalColumn("description", d.description),
              ...optionalColumn("sku", d.sku),
              ...optionalColumn("status", d.status),
              ...optionalColumn("images", d.images === undefined ? undefined : JSON.stringify(d.images)),
              ...optionalColumn(
                "metadata",
                d.metadata === undefined ? undefined : JSON.stringify(d.metadata)
              ),
              ...optionalColumn("tracked", d.tracked),
              ...optionalColumn("low_stock_threshold", d.lowStockThreshold),
              ...optionalColumn("allow_backorder", d.allowBackorder),
              ...optionalColumn("stocked_quantity", d.stockedQuantity),
              ...(d.status === undefined ? {} : { deleted_at: d.status === "archived" ? at : null }),
              ...(d.price === undefined ? {} : { price: JSON.stringify(d.price), price_type: d.price.type }),
              updated_at: at
            }
            const priceVersion = d.price === undefined ? sql`` : sql`, price_version = price_version + 1`
            yield* advance(d.productId, e.streamVersion, sql`, ${sql.update(changes)}${priceVersion}`)
            break
          }
          case "product.archived": {
            const d = e.data
            yield* advance(
              d.productId,
              e.streamVersion,
              sql`, status = 'archived', deleted_at = ${at}, updated_at = ${at}`
            )
            break
          }
          case "product.stock_reserved": {
            const d = e.data
            yield* deferInTransaction(
              advanceAndHold(
                d.productId,
                e.streamVersion,
                sql`, reserved_quantity = reserved_quantity + ${d.quantity}`,
                { ownerId: d.ownerId, quantity: d.quantity, at }
              )
            )
            break
          }
          case "product.reservation_released": {
            const d = e.data
            if (
              !(yield* advance(
                d.productId,
                e.streamVersion,
                sql`, reserved_quantity = reserved_quantity - ${d.quantity}`
              ))
            )
              break
            yield* sql`DELETE FROM ${reservations} WHERE owner_id = ${d.ownerId} AND product_id = ${d.productId}`
            break
          }
          case "product.reservation_transferred": {
            const d = e.data
            yield* deferInTransaction(
              advanceAndHold(d.productId, e.streamVersion, sql``, {
                ownerId: d.toOwnerId,
                quantity: d.quantity,
                at,
                from: d.fromOwnerId
              })
            )
            break
          }
          case "product.stock_consumed": {
            const d = e.data
            const set = sql`, stocked_quantity = greatest(0, stocked_quantity - ${d.quantity}),
              reserved_quantity = reserved_quantity - ${d.fromHold}`
            if (!(yield* advance(d.productId, e.streamVersion, set))) break
            if (d.fromHold > 0) yield* unhold(d.ownerId, d.productId, d.fromHold, at)
            break
          }
          case "product.stock_returned": {
            const d = e.data
            yield* advance(
              d.productId,
              e.streamVersion,
              sql`, stocked_quantity = stocked_quantity + ${d.quantity}`
            )
            break
          }
          case "product.stock_level_changed":
            yield* advance(e.data.productId, e.streamVersion)
            break
        }
      }
    })
})
