/**
 * The catalog read model is a pure function of the log: after a varied history (creates, partial
 * updates, price changes, SKU changes, archive and back, stock set and adjusted, reservations
 * released, converted, fulfilled in parts, restocked) a rebuild from position zero
 * (src/processors/Rebuild.ts) reproduces exactly the rows of `catalog.products` and
 * `catalog.reservations`, and the rebuilt tables stay live.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { CatalogPort } from "../../src/catalog/index.js"
import { CatalogProjection } from "../../src/catalog/projection.js"
import { rebuildProjection } from "../../src/processors/Rebuild.js"
import { createProduct, getProduct, reserve, stockedProduct, unique } from "../support/catalog.js"
import { adminToken } from "../support/customers.js"
import { rowsOf } from "../support/database.js"
import { call, IdentityHttp } from "../support/identity.js"

const META = { actor: { type: "system" as const, id: "test" } }

const catalogTables = Effect.all({
  products: rowsOf("catalog.products", "product_id"),
  reservations: rowsOf("catalog.reservations", "owner_id, product_id")
})

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("catalog projection rebuild", (it) => {
  it.effect("rebuilding from the log reproduces every catalog row", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const port = yield* CatalogPort
      const ok = (r: { status: number; text: string }) => expect(r.status, r.text).toBe(200)

      const mug = yield* stockedProduct(token, 20, { lowStockThreshold: 4 })
      const plan = yield* createProduct(token, {
        sku: unique("PLAN"),
        description: "Monthly",
        metadata: { tier: "gold", seats: 5 },
        images: ["https://cdn.example.com/p.png"],
        price: {
          amount: 4900,
          currency: "eur",
          type: "recurring",
          recurring: {
            interval: "month",
            usage: { meter: "calls", aggregation: "max", unitAmount: 3, includedUnits: 10 }
          }
        }
      })
      const draft = yield* createProduct(token, { status: "draft" })
      ok(
        yield* call("PATCH", `/v1/products/${plan.id}`, {
          token,
          json: { name: "Plan+", metadata: { seats: null, x: 1 } }
        })
      )
      ok(
        yield* call("PATCH", `/v1/products/${plan.id}`, {
          token,
          json: { price: { amount: 5900, currency: "EUR" } }
        })
      )
      ok(
        yield* call("PATCH", `/v1/products/${plan.id}`, {
          token,
          json: { sku: unique("PLAN2"), description: null }
        })
      )
      ok(
        yield* call("PATCH", `/v1/products/${mug.id}`, {
          token,
          json: { inventory: { adjustBy: -3, allowBackorder: false } }
        })
      )
      ok(yield* call("PATCH", `/v1/products/${draft.id}`, { token, json: { status: "archived" } }))
      ok(yield* call("PATCH", `/v1/products/${draft.id}`, { token, json: { status: "active" } }))
      ok(yield* call("DELETE", `/v1/products/${draft.id}`, { token }))

      yield* reserve("chk_rb_1", [{ productId: mug.id, quantity: 5 }])
      yield* reserve("chk_rb_2", [{ productId: mug.id, quantity: 4 }])
      yield* reserve("chk_rb_3", [{ productId: mug.id, quantity: 2 }])
      yield* port.release("chk_rb_2", META)
      yield* port.convertToOrder("chk_rb_1", "ord_rb_1", META)
      yield* port.consume("ord_rb_1", { key: "ful_a", lines: [{ productId: mug.id, quantity: 2 }] }, META)
      yield* port.restock("ord_rb_1", { key: "re_a", lines: [{ productId: mug.id, quantity: 1 }] }, META)
      ok(
        yield* call("PATCH", `/v1/products/${mug.id}`, {
          token,
          json: { inventory: { stockedQuantity: 30 } }
        })
      )

      const before = yield* catalogTables
      expect(before.products.length).toBeGreaterThanOrEqual(3)
      expect(before.reservations.length).toBe(2)

      // Damage the read model: the rebuild must not start from it.
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE catalog.products SET name = 'Damaged', reserved_quantity = 0`
      yield* sql`DELETE FROM catalog.reservations`

      const report = yield* rebuildProjection(CatalogProjection, { batchSize: 5 })
      expect(report.events).toBeGreaterThan(15)
      expect(yield* catalogTables).toEqual(before)

      // The rebuilt tables are live.
      ok(yield* call("PATCH", `/v1/products/${mug.id}`, { token, json: { inventory: { adjustBy: 1 } } }))
      expect((yield* getProduct(token, mug.id)).inventory).toMatchObject({
        stockedQuantity: 31,
        reservedQuantity: 5
      })
    })
  )
})
