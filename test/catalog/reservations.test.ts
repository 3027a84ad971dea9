/**
 * The catalog's reservation port (issue #18 item 3 and the oversell test of item 8), called as
 * checkout and orders will call it: inside a transaction of the app's own layers, on PostgreSQL
 * (DATABASE_URL) and on embedded PGlite. 200 concurrent one-unit reservations against 10 units:
 * exactly 10 hold, 190 are refused with `InsufficientStock` (no 5xx, no conflict errors), 10 end
 * reserved, one `inventory.out_of_stock`. All or nothing across products, same-product lines summed,
 * idempotent per owner, untracked products, unavailable products, the caller's rollback, and the
 * release → convert → fulfil → restock life of a hold.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect, Either } from "effect"
import { expect } from "vitest"
import { CatalogPort, type ReservationLine } from "../../src/catalog/index.js"
import { CommandRunner } from "../../src/kernel/CommandRunner.js"
import * as Ids from "../../src/kernel/Ids.js"
import { type Body, createProduct, getProduct, stockedProduct, unique } from "../support/catalog.js"
import { adminToken } from "../support/customers.js"
import { call, IdentityHttp } from "../support/identity.js"

const OPTIONS = { excludeTestServices: true, timeout: 180_000 } as const
const META = { actor: { type: "system" as const, id: "test" } }

/** `port.reserve` in a transaction of its own, as checkout creation will run it. */
const reserve = (ownerId: string, lines: ReadonlyArray<ReservationLine>) =>
  Effect.gen(function* () {
    const port = yield* CatalogPort
    const runner = yield* CommandRunner
    return yield* runner.transact(port.reserve(ownerId, lines, META))
  })

const inventoryOf = (token: string, id: string) => Effect.map(getProduct(token, id), (p: Body) => p.inventory)

const publicTypes = (productId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ type: string }>`SELECT type FROM event_store.public_events
        WHERE stream_id = ${`product-${productId}`} ORDER BY position`,
      (rows) => rows.map((r) => r.type)
    )
  )

const holdsOf = (ownerId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ productId: string; quantity: string | number }>`SELECT product_id AS "productId", quantity
      FROM catalog.reservations WHERE owner_id = ${ownerId} ORDER BY product_id`
  )

layer(IdentityHttp, OPTIONS)("stock reservations", (it) => {
  it.effect("200 concurrent one-unit reservations against 10 in stock: exactly 10 hold, never oversold", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const p = yield* stockedProduct(token, 10, { lowStockThreshold: 3 })
      const run = unique("storm")
      const outcomes = yield* Effect.all(
        Array.from({ length: 200 }, (_, i) =>
          Effect.either(reserve(`chk_${run}_${i}`, [{ productId: p.id, quantity: 1 }]))
        ),
        { concurrency: "unbounded" }
      )
      const held = outcomes.filter(Either.isRight)
      const refused = outcomes.filter(Either.isLeft).map((o) => o.left)
      expect(held).toHaveLength(10)
      expect(refused).toHaveLength(190)
      // Refused for stock, every one: not a conflict, not a defect.
      for (const error of refused) {
        expect(error).toMatchObject({
          _tag: "InsufficientStock",
          line: 0,
          productId: p.id,
          requested: 1,
          available: 0
        })
      }
      expect(yield* inventoryOf(token, p.id)).toMatchObject({
        stockedQuantity: 10,
        reservedQuantity: 10,
        availableQuantity: 0
      })
      const types = yield* publicTypes(p.id)
      expect(types.filter((t) => t === "inventory.out_of_stock")).toHaveLength(1)
      expect(types.filter((t) => t === "inventory.low_stock")).toHaveLength(1)
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{
        n: number
      }>`SELECT count(*)::int AS n FROM catalog.reservations WHERE product_id = ${p.id}`
      expect(rows[0]?.n).toBe(10)
    })
  )

  it.effect(
    "150 concurrent reservations of one product that all fit: every one holds, no conflict errors",
    () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const p = yield* stockedProduct(token, 1_000)
        const run = unique("fit")
        const outcomes = yield* Effect.all(
          Array.from({ length: 150 }, (_, i) =>
            Effect.either(reserve(`chk_${run}_${i}`, [{ productId: p.id, quantity: 2 }]))
          ),
          { concurrency: "unbounded" }
        )
        expect(outcomes.filter(Either.isLeft).map((o) => o.left)).toEqual([])
        expect((yield* inventoryOf(token, p.id)).reservedQuantity).toBe(300)
      })
  )

  it.effect("all or nothing: a second line short of stock reserves nothing, naming that line", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const plenty = yield* stockedProduct(token, 50)
      const scarce = yield* stockedProduct(token, 2)
      const owner = `chk_${unique()}`
      const result = yield* Effect.either(
        reserve(owner, [
          { productId: plenty.id, quantity: 5 },
          { productId: scarce.id, quantity: 3 }
        ])
      )
      expect(Either.isLeft(result) && result.left).toMatchObject({
        _tag: "InsufficientStock",
        line: 1,
        productId: scarce.id,
        requested: 3,
        available: 2
      })
      expect((yield* inventoryOf(token, plenty.id)).reservedQuantity).toBe(0)
      expect((yield* inventoryOf(token, scarce.id)).reservedQuantity).toBe(0)
      expect(yield* holdsOf(owner)).toEqual([])
    })
  )

  it.effect("quantities of one product are summed before the check (Medusa #16502)", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const p = yield* stockedProduct(token, 5)
      const result = yield* Effect.either(
        reserve(`chk_${unique()}`, [
          { productId: p.id, quantity: 3 },
          { productId: p.id, quantity: 3 }
        ])
      )
      expect(Either.isLeft(result) && result.left).toMatchObject({
        _tag: "InsufficientStock",
        line: 0,
        requested: 6
      })
      expect((yield* inventoryOf(token, p.id)).reservedQuantity).toBe(0)
      const ok = yield* reserve(`chk_${unique()}`, [
        { productId: p.id, quantity: 2 },
        { productId: p.id, quantity: 3 }
      ])
      expect(ok.map(({ productId, quantity }) => ({ productId, quantity }))).toEqual([
        { productId: p.id, quantity: 5 }
      ])
      expect((yield* inventoryOf(token, p.id)).reservedQuantity).toBe(5)
      // Each held product as the reservation left it: what the read model now shows.
      expect(ok[0]?.product.inventory).toEqual(yield* inventoryOf(token, p.id))
    })
  )

  it.effect("idempotent per owner: a retried reservation holds nothing more", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const a = yield* stockedProduct(token, 10)
      const b = yield* stockedProduct(token, 10)
      const owner = `chk_${unique()}`
      const lines = [
        { productId: a.id, quantity: 2 },
        { productId: b.id, quantity: 4 }
      ]
      const first = yield* reserve(owner, lines)
      const again = yield* reserve(owner, lines)
      expect(again).toEqual(first)
      expect((yield* inventoryOf(token, a.id)).reservedQuantity).toBe(2)
      expect((yield* inventoryOf(token, b.id)).reservedQuantity).toBe(4)
    })
  )

  it.effect("untracked products always succeed and hold nothing; backorders go below 0", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const digital = yield* createProduct(token)
      const preorder = yield* stockedProduct(token, 1, { allowBackorder: true })
      const held = yield* reserve(`chk_${unique()}`, [
        { productId: digital.id, quantity: 1_000 },
        { productId: preorder.id, quantity: 4 }
      ])
      expect(held.map(({ productId, quantity }) => ({ productId, quantity }))).toEqual(
        [
          { productId: digital.id, quantity: 0 },
          { productId: preorder.id, quantity: 4 }
        ].sort((x, y) => (x.productId < y.productId ? -1 : 1))
      )
      expect((yield* inventoryOf(token, digital.id)).reservedQuantity).toBe(0)
      expect((yield* inventoryOf(token, preorder.id)).availableQuantity).toBe(-3)
    })
  )

  it.effect("unknown, malformed, draft and archived products, and bad quantities, are typed refusals", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const ok = yield* stockedProduct(token, 10)
      const draft = yield* stockedProduct(token, 10, {})
      yield* call("PATCH", `/v1/products/${draft.id}`, { token, json: { status: "draft" } })
      const archived = yield* stockedProduct(token, 10)
      yield* call("DELETE", `/v1/products/${archived.id}`, { token })
      const unknown = yield* Ids.make("prod")
      const refusal = (lines: ReadonlyArray<ReservationLine>) =>
        Effect.map(Effect.flip(reserve(`chk_${unique()}`, lines)), (e) => e)
      expect(
        yield* refusal([
          { productId: ok.id, quantity: 1 },
          { productId: unknown, quantity: 1 }
        ])
      ).toMatchObject({
        _tag: "ProductUnavailable",
        line: 1,
        reason: "not_found"
      })
      expect(yield* refusal([{ productId: "cus_123", quantity: 1 }])).toMatchObject({
        _tag: "ProductUnavailable",
        line: 0,
        reason: "not_found"
      })
      expect(yield* refusal([{ productId: draft.id, quantity: 1 }])).toMatchObject({
        _tag: "ProductUnavailable",
        reason: "draft"
      })
      expect(yield* refusal([{ productId: archived.id, quantity: 1 }])).toMatchObject({
        _tag: "ProductUnavailable",
        reason: "archived"
      })
      expect(
        yield* refusal([
          { productId: ok.id, quantity: 1 },
          { productId: ok.id, quantity: 0 }
        ])
      ).toMatchObject({
        _tag: "ReservationLineInvalid",
        line: 1
      })
      expect(yield* refusal([{ productId: ok.id, quantity: 1.5 }])).toMatchObject({
        _tag: "ReservationLineInvalid",
        line: 0
      })
      expect((yield* inventoryOf(token, ok.id)).reservedQuantity).toBe(0)
    })
  )

  it.effect("joins the caller's transaction: when the caller fails afterwards, nothing stays reserved", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const p = yield* stockedProduct(token, 10)
      const port = yield* CatalogPort
      const runner = yield* CommandRunner
      const owner = `chk_${unique()}`
      const outcome = yield* Effect.either(
        runner.transact(
          Effect.zipRight(
            port.reserve(owner, [{ productId: p.id, quantity: 4 }], META),
            Effect.fail("the checkout could not be created" as const)
          )
        )
      )
      expect(Either.isLeft(outcome)).toBe(true)
      expect((yield* inventoryOf(token, p.id)).reservedQuantity).toBe(0)
      expect(yield* holdsOf(owner)).toEqual([])
    })
  )

  it.effect("a hot product's long stream loads from its snapshot and stays exact", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const port = yield* CatalogPort
      const p = yield* stockedProduct(token, 100)
      const run = unique("hot")
      // 130 events: 65 reservations, each released.
      for (let i = 0; i < 65; i++) {
        yield* reserve(`chk_${run}_${i}`, [{ productId: p.id, quantity: 1 }])
        if (i < 60) yield* port.release(`chk_${run}_${i}`, META)
      }
      const sql = yield* SqlClient.SqlClient
      const snapshots = yield* sql<{ version: string | number }>`SELECT version FROM event_store.snapshots
        WHERE stream_id = ${`product-${p.id}`}`
      expect(Number(snapshots[0]?.version ?? 0)).toBeGreaterThanOrEqual(100)
      // Decided from the snapshot plus what followed: the holds are all there.
      for (let i = 60; i < 65; i++) yield* port.release(`chk_${run}_${i}`, META)
      expect(yield* inventoryOf(token, p.id)).toMatchObject({ stockedQuantity: 100, reservedQuantity: 0 })
      yield* reserve(`chk_${run}_last`, [{ productId: p.id, quantity: 100 }])
      expect((yield* inventoryOf(token, p.id)).availableQuantity).toBe(0)
    })
  )

  it.effect("a hold's life: release, convert to an order, fulfil (in parts, once per key), restock", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const port = yield* CatalogPort
      const p = yield* stockedProduct(token, 10, { lowStockThreshold: 2 })
      const checkout = `chk_${unique()}`
      // Expired checkout: released, twice is once.
      yield* reserve(checkout, [{ productId: p.id, quantity: 3 }])
      yield* port.release(checkout, META)
      yield* port.release(checkout, META)
      expect((yield* inventoryOf(token, p.id)).reservedQuantity).toBe(0)

      // Completed checkout: its hold becomes the order's.
      const paid = `chk_${unique()}`
      const order = `ord_${unique()}`
      yield* reserve(paid, [{ productId: p.id, quantity: 4 }])
      yield* port.convertToOrder(paid, order, META)
      yield* port.convertToOrder(paid, order, META)
      expect(yield* holdsOf(paid)).toEqual([])
      expect((yield* holdsOf(order)).map((h) => Number(h.quantity))).toEqual([4])
      // A release of the checkout now gives nothing back: the order holds it.
      yield* port.release(paid, META)
      expect((yield* inventoryOf(token, p.id)).reservedQuantity).toBe(4)

      // Partial fulfilment, repeated: once.
      yield* port.consume(order, { key: "ful_1", lines: [{ productId: p.id, quantity: 1 }] }, META)
      yield* port.consume(order, { key: "ful_1", lines: [{ productId: p.id, quantity: 1 }] }, META)
      expect(yield* inventoryOf(token, p.id)).toMatchObject({ stockedQuantity: 9, reservedQuantity: 3 })
      // The rest.
      yield* port.consume(order, { key: "ful_2" }, META)
      expect(yield* inventoryOf(token, p.id)).toMatchObject({
        stockedQuantity: 6,
        reservedQuantity: 0,
        availableQuantity: 6
      })
      expect(yield* holdsOf(order)).toEqual([])

      // Refund with restock, repeated: once.
      yield* port.restock(order, { key: "re_1", lines: [{ productId: p.id, quantity: 2 }] }, META)
      yield* port.restock(order, { key: "re_1", lines: [{ productId: p.id, quantity: 2 }] }, META)
      expect((yield* inventoryOf(token, p.id)).stockedQuantity).toBe(8)

      // The lookup checkout snapshots prices from.
      const found = yield* port.findProduct(p.id)
      expect(found._tag === "Some" && found.value.price).toMatchObject({
        amount: 1999,
        currency: "USD",
        version: 1
      })
      expect((yield* port.findProduct("prod_nope"))._tag).toBe("None")
    })
  )
})
