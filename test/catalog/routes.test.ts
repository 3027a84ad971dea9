/**
 * `/v1/products` over real HTTP (spec §4.5, COMMERCE decision 1, research §1.1, issue #18 items 1,
 * 2, 6 and 7): every route with its statuses and errors — creation with defaults, recurring and
 * metered prices, bad input (one error body with `param`, never a 5xx, never a partial write), the
 * SKU conflict under concurrent creates, reads (shoppers see active products only), the keyset list
 * and its filters, partial updates (metadata merge, price versions, atomic stock adjustments under
 * concurrency, read-only quantities), archiving and its `resource_in_use` guard, scopes, and the
 * public events every change writes.
 */
import { SqlClient } from "@effect/sql"
import { describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import * as Ids from "../../src/kernel/Ids.js"
import {
  type Body,
  createProduct,
  getProduct,
  query,
  release,
  reserve,
  stockedProduct,
  unique
} from "../support/catalog.js"
import { adminToken, registeredShopper } from "../support/customers.js"
import { apiKeyWith, call, expectError, IdentityHttp } from "../support/identity.js"

const OPTIONS = { excludeTestServices: true, timeout: 120_000 } as const
const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
const PRODUCT_KEYS = [
  "createdAt",
  "deletedAt",
  "description",
  "id",
  "images",
  "inventory",
  "metadata",
  "name",
  "object",
  "price",
  "sku",
  "status",
  "updatedAt"
]

/** The public events of a product, oldest first. */
const publicEventsOf = (productId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ type: string; data: Body }>`SELECT type, data FROM event_store.public_events
      WHERE stream_id = ${`product-${productId}`} ORDER BY position`
  )

/** How many products a search finds (admin, archived included): what a refused request must not change. */
const countMatching = (token: string, q: string) =>
  Effect.map(
    call("GET", `/v1/products${query({ q, includeArchived: "true", limit: 100 })}`, { token }),
    (r) => {
      expect(r.status, r.text).toBe(200)
      return (r.body.data as Array<Body>).length
    }
  )

layer(IdentityHttp, OPTIONS)("products over HTTP", (it) => {
  describe("POST /v1/products", () => {
    it.effect("201: the product object with its defaults", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const sku = unique("SKU")
        const p = yield* createProduct(token, {
          name: "  Blue mug ",
          sku,
          price: { amount: 1200, currency: "eur" }
        })
        expect(Object.keys(p).sort()).toEqual(PRODUCT_KEYS)
        expect(p.id).toMatch(/^prod_[0-9a-z]{26}$/)
        expect(p).toMatchObject({
          object: "product",
          name: "Blue mug",
          description: null,
          sku,
          status: "active",
          price: { amount: 1200, currency: "EUR", type: "one_time", recurring: null, version: 1 },
          inventory: {
            tracked: false,
            stockedQuantity: 0,
            reservedQuantity: 0,
            availableQuantity: 0,
            lowStockThreshold: 5,
            allowBackorder: false
          },
          images: [],
          metadata: {},
          deletedAt: null
        })
        expect(p.createdAt).toMatch(ISO_MS)
        expect(p.updatedAt).toBe(p.createdAt)
        // Stock given means stock tracked.
        const stocked = yield* stockedProduct(token, 7)
        expect(stocked.inventory).toMatchObject({ tracked: true, stockedQuantity: 7, availableQuantity: 7 })
        const untracked = yield* stockedProduct(token, 7, { tracked: false })
        expect(untracked.inventory.tracked).toBe(false)
      })
    )

    it.effect("201: a recurring metered price, a draft, images and metadata", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const p = yield* createProduct(token, {
          status: "draft",
          description: "API calls",
          images: ["https://cdn.example.com/a.png"],
          metadata: { plan: "pro", seats: 3 },
          price: {
            amount: 900,
            currency: "USD",
            type: "recurring",
            recurring: {
              interval: "month",
              trialPeriodDays: 14,
              usage: { meter: "api_calls", aggregation: "sum", unitAmount: 2 }
            }
          }
        })
        expect(p).toMatchObject({
          status: "draft",
          description: "API calls",
          images: ["https://cdn.example.com/a.png"],
          metadata: { plan: "pro", seats: 3 },
          price: {
            type: "recurring",
            recurring: {
              interval: "month",
              intervalCount: 1,
              trialPeriodDays: 14,
              usage: { meter: "api_calls", aggregation: "sum", unitAmount: 2, includedUnits: 0 }
            }
          }
        })
      })
    )

    it.effect("400 with param for every bad input; nothing is written", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const marker = unique("bad")
        const base = { name: marker, price: { amount: 100, currency: "USD" } }
        const recurring = (r: Record<string, unknown>) => ({
          ...base,
          price: { amount: 100, currency: "USD", type: "recurring", recurring: { interval: "month", ...r } }
        })
        const cases: Array<[unknown, string, string]> = [
          [{ price: base.price }, "parameter_missing", "name"],
          [{ name: marker }, "parameter_missing", "price"],
          [{ ...base, name: "   " }, "parameter_invalid", "name"],
          [{ ...base, name: "x".repeat(251) }, "parameter_invalid", "name"],
          [{ ...base, price: { currency: "USD" } }, "parameter_missing", "price.amount"],
          [{ ...base, price: { amount: 100 } }, "parameter_missing", "price.currency"],
          [{ ...base, price: { amount: -1, currency: "USD" } }, "parameter_invalid", "price.amount"],
          [{ ...base, price: { amount: 10.5, currency: "USD" } }, "parameter_invalid", "price.amount"],
          [{ ...base, price: { amount: "100", currency: "USD" } }, "parameter_invalid", "price.amount"],
          [{ ...base, price: { amount: 100, currency: "XYZ" } }, "parameter_invalid", "price.currency"],
          [{ ...base, price: { amount: 100, currency: "US" } }, "parameter_invalid", "price.currency"],
          [
            { ...base, price: { amount: 100, currency: "USD", type: "weekly" } },
            "parameter_invalid",
            "price.type"
          ],
          [
            { ...base, price: { amount: 100, currency: "USD", type: "recurring" } },
            "parameter_invalid",
            "price.recurring"
          ],
          [
            { ...base, price: { amount: 100, currency: "USD", recurring: { interval: "month" } } },
            "parameter_invalid",
            "price.type"
          ],
          [recurring({ intervalCount: 0 }), "parameter_invalid", "price.recurring.intervalCount"],
          [recurring({ intervalCount: 1.5 }), "parameter_invalid", "price.recurring.intervalCount"],
          [recurring({ intervalCount: 37 }), "parameter_invalid", "price.recurring.intervalCount"],
          [recurring({ interval: "fortnight" }), "parameter_invalid", "price.recurring.interval"],
          [recurring({ trialPeriodDays: -1 }), "parameter_invalid", "price.recurring.trialPeriodDays"],
          [
            recurring({ usage: { meter: "calls", aggregation: "median", unitAmount: 1 } }),
            "parameter_invalid",
            "price.recurring.usage.aggregation"
          ],
          [
            recurring({ usage: { meter: "calls", aggregation: "sum", unitAmount: -2 } }),
            "parameter_invalid",
            "price.recurring.usage.unitAmount"
          ],
          [{ ...base, status: "archived" }, "parameter_invalid", "status"],
          [{ ...base, status: "deleted" }, "parameter_invalid", "status"],
          [{ ...base, inventory: { stockedQuantity: -3 } }, "parameter_invalid", "inventory.stockedQuantity"],
          [
            { ...base, inventory: { stockedQuantity: 2.5 } },
            "parameter_invalid",
            "inventory.stockedQuantity"
          ],
          [
            { ...base, inventory: { reservedQuantity: 0 } },
            "parameter_invalid",
            "inventory.reservedQuantity"
          ],
          [
            { ...base, inventory: { availableQuantity: 3 } },
            "parameter_invalid",
            "inventory.availableQuantity"
          ],
          [{ ...base, inventory: { tracked: "yes" } }, "parameter_invalid", "inventory.tracked"],
          [{ ...base, images: ["ftp://x"] }, "parameter_invalid", "images[0]"],
          [{ ...base, metadata: [1] }, "parameter_invalid", "metadata"],
          [
            { ...base, metadata: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, i])) },
            "parameter_invalid",
            "metadata"
          ]
        ]
        for (const [json, code, param] of cases) {
          const r = yield* call("POST", "/v1/products", { token, json })
          expectError(r, 400, code, param)
        }
        expect(yield* countMatching(token, marker)).toBe(0)
      })
    )

    it.effect("a 10 MB name is refused by the body limit (413), a malformed body is 400", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const huge = yield* call("POST", "/v1/products", {
          token,
          json: { name: "n".repeat(10 * 1024 * 1024), price: { amount: 1, currency: "USD" } }
        })
        expectError(huge, 413, "payload_too_large")
        const bad = yield* call("POST", "/v1/products", {
          token,
          headers: { "content-type": "application/json" },
          json: undefined
        })
        expect(bad.status).toBe(400)
      })
    )

    it.effect("a duplicate sku → 409 resource_already_exists, also under 20 concurrent creates", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const sku = unique("DUP")
        yield* createProduct(token, { sku })
        expectError(
          yield* call("POST", "/v1/products", {
            token,
            json: { name: "Again", sku, price: { amount: 1, currency: "USD" } }
          }),
          409,
          "resource_already_exists",
          "sku"
        )
        const stormSku = unique("STORM")
        const replies = yield* Effect.all(
          Array.from({ length: 20 }, (_, i) =>
            call("POST", "/v1/products", {
              token,
              json: { name: `Storm ${i}`, sku: stormSku, price: { amount: 1, currency: "USD" } }
            })
          ),
          { concurrency: "unbounded" }
        )
        const statuses = replies.map((r) => r.status).sort()
        expect(statuses.filter((s) => s === 201)).toHaveLength(1)
        for (const r of replies.filter((r) => r.status !== 201))
          expectError(r, 409, "resource_already_exists", "sku")
        expect(yield* countMatching(token, stormSku)).toBe(1)
        // The same with an Idempotency-Key each (the request's transaction is the middleware's): still
        // one 201 and clean 409s, never a 5xx.
        const keyedSku = unique("KEYED")
        const keyed = yield* Effect.all(
          Array.from({ length: 20 }, (_, i) =>
            call("POST", "/v1/products", {
              token,
              headers: { "idempotency-key": `${keyedSku}-${i}` },
              json: { name: `Keyed ${i}`, sku: keyedSku, price: { amount: 1, currency: "USD" } }
            })
          ),
          { concurrency: "unbounded" }
        )
        expect(keyed.filter((r) => r.status === 201)).toHaveLength(1)
        for (const r of keyed.filter((r) => r.status !== 201))
          expectError(r, 409, "resource_already_exists", "sku")
      })
    )

    it.effect(
      "Idempotency-Key: the same create again replays the first product, nothing more is written",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const marker = unique("idem")
          const send = call("POST", "/v1/products", {
            token,
            headers: { "idempotency-key": marker },
            json: { name: marker, price: { amount: 300, currency: "USD" }, inventory: { stockedQuantity: 1 } }
          })
          const first = yield* send
          expect(first.status, first.text).toBe(201)
          const again = yield* send
          expect(again.status).toBe(201)
          expect(again.headers["idempotent-replayed"]).toBe("true")
          expect(again.body).toEqual(first.body)
          expect(yield* countMatching(token, marker)).toBe(1)
        })
    )

    it.effect("401 without a credential; 403 for shoppers and read-only keys", () =>
      Effect.gen(function* () {
        const json = { name: "x", price: { amount: 1, currency: "USD" } }
        expectError(yield* call("POST", "/v1/products", { json }), 401, "missing_credentials")
        const shopper = yield* registeredShopper()
        expectError(
          yield* call("POST", "/v1/products", { token: shopper.accessToken, json }),
          403,
          "insufficient_scope"
        )
        const reader = yield* apiKeyWith(["read:products"])
        expectError(
          yield* call("POST", "/v1/products", { token: reader.key, json }),
          403,
          "insufficient_scope"
        )
        const writer = yield* apiKeyWith(["write:products"])
        expect((yield* call("POST", "/v1/products", { token: writer.key, json })).status).toBe(201)
      })
    )
  })

  describe("GET /v1/products/:id", () => {
    it.effect("200 for staff; malformed, foreign-prefixed and unknown ids → 404", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const p = yield* createProduct(token)
        expect(yield* getProduct(token, p.id)).toEqual(p)
        const unknown = yield* Ids.make("prod")
        const customerId = yield* Ids.make("cus")
        for (const id of [unknown, customerId, "prod_123", "nope", `${p.id}x`, p.id.toUpperCase()]) {
          expectError(yield* call("GET", `/v1/products/${id}`, { token }), 404, "resource_missing")
        }
        expectError(yield* call("GET", `/v1/products/${p.id}`), 401, "missing_credentials")
        const nobody = yield* apiKeyWith(["read:customers"])
        expectError(
          yield* call("GET", `/v1/products/${p.id}`, { token: nobody.key }),
          403,
          "insufficient_scope"
        )
      })
    )

    it.effect("shoppers see active products only: drafts and archived ones are 404 to them", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const shopper = (yield* registeredShopper()).accessToken
        const active = yield* createProduct(token)
        const draft = yield* createProduct(token, { status: "draft" })
        const archived = yield* createProduct(token)
        expect((yield* call("DELETE", `/v1/products/${archived.id}`, { token })).status).toBe(200)
        expect((yield* getProduct(shopper, active.id)).id).toBe(active.id)
        expectError(
          yield* call("GET", `/v1/products/${draft.id}`, { token: shopper }),
          404,
          "resource_missing"
        )
        expectError(
          yield* call("GET", `/v1/products/${archived.id}`, { token: shopper }),
          404,
          "resource_missing"
        )
        // A draft as a shopper's list cursor is unknown too (its existence stays hidden).
        expectError(
          yield* call("GET", `/v1/products?startingAfter=${draft.id}`, { token: shopper }),
          400,
          "resource_missing",
          "startingAfter"
        )
        // Staff (and keys with read:products) see them all.
        const reader = (yield* apiKeyWith(["read:products"])).key
        expect((yield* call("GET", `/v1/products?startingAfter=${draft.id}`, { token: reader })).status).toBe(
          200
        )
        expect((yield* getProduct(reader, draft.id)).status).toBe("draft")
        expect((yield* getProduct(reader, archived.id)).status).toBe("archived")
      })
    )
  })

  describe("GET /v1/products", () => {
    it.effect("newest first, keyset pages both ways, filters, shoppers see active only", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const marker = unique("list")
        const made: Array<Body> = []
        for (let i = 0; i < 5; i++) made.push(yield* createProduct(token, { name: `${marker} item ${i}` }))
        const draft = yield* createProduct(token, { name: `${marker} draft`, status: "draft" })
        const sub = yield* createProduct(token, {
          name: `${marker} plan`,
          sku: `${marker}-PLAN`.toUpperCase(),
          price: { amount: 500, currency: "USD", type: "recurring", recurring: { interval: "year" } }
        })
        const gone = yield* createProduct(token, { name: `${marker} gone` })
        expect((yield* call("DELETE", `/v1/products/${gone.id}`, { token })).status).toBe(200)
        const list = (params: Record<string, string | number | undefined>, t = token) =>
          Effect.map(call("GET", `/v1/products${query({ q: marker, ...params })}`, { token: t }), (r) => {
            expect(r.status, r.text).toBe(200)
            expect(r.body.object).toBe("list")
            return r.body as { data: Array<Body>; hasMore: boolean }
          })
        const ids = (page: { data: Array<Body> }) => page.data.map((p) => p.id)

        // Default: not archived, newest first.
        expect(ids(yield* list({}))).toEqual([sub.id, draft.id, ...made.map((p) => p.id).reverse()])
        expect(ids(yield* list({ includeArchived: "true" }))[0]).toBe(gone.id)
        expect(ids(yield* list({ status: "archived" }))).toEqual([gone.id])
        expect(ids(yield* list({ status: "draft" }))).toEqual([draft.id])
        expect(ids(yield* list({ type: "recurring" }))).toEqual([sub.id])
        // q: case-insensitive, over name and SKU.
        expect(ids(yield* list({ q: `${marker}-plan`.toLowerCase() }))).toEqual([sub.id])
        expect(ids(yield* list({ q: `${marker} ITEM 3`.toUpperCase() }))).toEqual([made[3]?.id])

        // Pages of 2, forwards then back.
        const first = yield* list({ limit: 2 })
        expect(first.hasMore).toBe(true)
        expect(ids(first)).toEqual([sub.id, draft.id])
        const second = yield* list({ limit: 2, startingAfter: draft.id })
        expect(ids(second)).toEqual([made[4]?.id, made[3]?.id])
        const back = yield* list({ limit: 2, endingBefore: made[4]?.id })
        expect(ids(back)).toEqual([sub.id, draft.id])
        expect(back.hasMore).toBe(false)

        // Shoppers: active only, whatever they ask for.
        const shopper = (yield* registeredShopper()).accessToken
        expect(ids(yield* list({}, shopper))).toEqual([sub.id, ...made.map((p) => p.id).reverse()])
        expect(ids(yield* list({ status: "draft" }, shopper))).toEqual([])
        expect(ids(yield* list({ includeArchived: "true" }, shopper))).not.toContain(gone.id)
      })
    )

    it.effect("400s: limit out of range, both cursors, a cursor of another resource or of no product", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const p = yield* createProduct(token)
        expectError(yield* call("GET", "/v1/products?limit=0", { token }), 400, "parameter_invalid", "limit")
        expectError(
          yield* call("GET", "/v1/products?limit=101", { token }),
          400,
          "parameter_invalid",
          "limit"
        )
        expectError(
          yield* call("GET", "/v1/products?status=gone", { token }),
          400,
          "parameter_invalid",
          "status"
        )
        expectError(
          yield* call("GET", "/v1/products?type=monthly", { token }),
          400,
          "parameter_invalid",
          "type"
        )
        expectError(
          yield* call("GET", `/v1/products${query({ startingAfter: p.id, endingBefore: p.id })}`, { token }),
          400,
          "parameter_invalid",
          "endingBefore"
        )
        const cus = yield* Ids.make("cus")
        expectError(
          yield* call("GET", `/v1/products${query({ startingAfter: cus })}`, { token }),
          400,
          "parameter_invalid",
          "startingAfter"
        )
        const none = yield* Ids.make("prod")
        expectError(
          yield* call("GET", `/v1/products${query({ startingAfter: none })}`, { token }),
          400,
          "resource_missing",
          "startingAfter"
        )
      })
    )
  })

  describe("PATCH /v1/products/:id", () => {
    it.effect("changes only the fields sent; metadata merges; a price change bumps its version", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const p = yield* createProduct(token, { description: "Old", metadata: { a: 1, b: 2 } })
        const r = yield* call("PATCH", `/v1/products/${p.id}`, {
          token,
          json: { name: "New name", metadata: { b: null, c: 3 }, price: { amount: 2500, currency: "usd" } }
        })
        expect(r.status, r.text).toBe(200)
        expect(r.body).toMatchObject({
          name: "New name",
          description: "Old",
          metadata: { a: 1, c: 3 },
          price: { amount: 2500, currency: "USD", version: 2 }
        })
        expect(r.body.updatedAt >= p.updatedAt).toBe(true)
        expect(yield* getProduct(token, p.id)).toEqual(r.body)
        // An empty patch changes nothing.
        const same = yield* call("PATCH", `/v1/products/${p.id}`, { token, json: {} })
        expect(same.body).toEqual(r.body)
        // metadata: null clears it; description: null clears it.
        const cleared = yield* call("PATCH", `/v1/products/${p.id}`, {
          token,
          json: { metadata: null, description: null }
        })
        expect(cleared.body).toMatchObject({ metadata: {}, description: null })
      })
    )

    it.effect(
      "stock: set, adjust, never below 0 or below reserved without backorders; read-only fields 400",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const p = yield* stockedProduct(token, 10)
          const patch = (json: unknown) => call("PATCH", `/v1/products/${p.id}`, { token, json })
          expect((yield* patch({ inventory: { adjustBy: -3 } })).body.inventory).toMatchObject({
            stockedQuantity: 7,
            availableQuantity: 7
          })
          expect((yield* patch({ inventory: { stockedQuantity: 12 } })).body.inventory.stockedQuantity).toBe(
            12
          )
          expectError(
            yield* patch({ inventory: { adjustBy: -13 } }),
            400,
            "parameter_invalid",
            "inventory.adjustBy"
          )
          expectError(
            yield* patch({ inventory: { adjustBy: 1, stockedQuantity: 3 } }),
            400,
            "parameter_invalid",
            "inventory.adjustBy"
          )
          expectError(
            yield* patch({ inventory: { reservedQuantity: 1 } }),
            400,
            "parameter_invalid",
            "inventory.reservedQuantity"
          )
          expectError(
            yield* patch({ inventory: { availableQuantity: 1 } }),
            400,
            "parameter_invalid",
            "inventory.availableQuantity"
          )
          expectError(
            yield* patch({ inventory: { adjustBy: 0.5 } }),
            400,
            "parameter_invalid",
            "inventory.adjustBy"
          )
          expectError(
            yield* patch({ price: { amount: -5, currency: "USD" } }),
            400,
            "parameter_invalid",
            "price.amount"
          )
          // 8 units held by a checkout: the stock cannot go below them.
          yield* reserve("chk_route_stock", [{ productId: p.id, quantity: 8 }])
          expect((yield* getProduct(token, p.id)).inventory).toMatchObject({
            stockedQuantity: 12,
            reservedQuantity: 8,
            availableQuantity: 4
          })
          expectError(
            yield* patch({ inventory: { stockedQuantity: 7 } }),
            400,
            "parameter_invalid",
            "inventory.stockedQuantity"
          )
          expectError(
            yield* patch({ inventory: { adjustBy: -5 } }),
            400,
            "parameter_invalid",
            "inventory.adjustBy"
          )
          const backordered = yield* patch({ inventory: { stockedQuantity: 7, allowBackorder: true } })
          expect(backordered.status, backordered.text).toBe(200)
          expect(backordered.body.inventory).toMatchObject({ availableQuantity: -1, allowBackorder: true })
          // Nothing of the refused patches was written.
          expect((yield* getProduct(token, p.id)).inventory.stockedQuantity).toBe(7)
          yield* release("chk_route_stock")
        })
    )

    it.effect("50 concurrent adjustBy +1 add exactly 50 (no read-modify-write race)", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const p = yield* stockedProduct(token, 0)
        const replies = yield* Effect.all(
          Array.from({ length: 50 }, () =>
            call("PATCH", `/v1/products/${p.id}`, { token, json: { inventory: { adjustBy: 1 } } })
          ),
          { concurrency: "unbounded" }
        )
        expect(replies.map((r) => r.status)).toEqual(Array(50).fill(200))
        expect((yield* getProduct(token, p.id)).inventory.stockedQuantity).toBe(50)
      })
    )

    it.effect("409 for a sku another product holds; 404s; 403 without write:products", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const sku = unique("TAKEN")
        yield* createProduct(token, { sku })
        const p = yield* createProduct(token)
        expectError(
          yield* call("PATCH", `/v1/products/${p.id}`, { token, json: { sku } }),
          409,
          "resource_already_exists",
          "sku"
        )
        // Its own sku again is fine.
        const own = unique("OWN")
        expect((yield* call("PATCH", `/v1/products/${p.id}`, { token, json: { sku: own } })).status).toBe(200)
        expect((yield* call("PATCH", `/v1/products/${p.id}`, { token, json: { sku: own } })).status).toBe(200)
        const unknown = yield* Ids.make("prod")
        expectError(
          yield* call("PATCH", `/v1/products/${unknown}`, { token, json: { name: "x" } }),
          404,
          "resource_missing"
        )
        expectError(
          yield* call("PATCH", "/v1/products/cus_x", { token, json: { name: "x" } }),
          404,
          "resource_missing"
        )
        const reader = (yield* apiKeyWith(["read:products"])).key
        expectError(
          yield* call("PATCH", `/v1/products/${p.id}`, { token: reader, json: { name: "x" } }),
          403,
          "insufficient_scope"
        )
      })
    )

    it.effect("status archived and back: archived leaves the default list, active returns", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const p = yield* createProduct(token)
        const archived = yield* call("PATCH", `/v1/products/${p.id}`, { token, json: { status: "archived" } })
        expect(archived.body.status).toBe("archived")
        expect(archived.body.deletedAt).toMatch(ISO_MS)
        const back = yield* call("PATCH", `/v1/products/${p.id}`, { token, json: { status: "active" } })
        expect(back.body).toMatchObject({ status: "active", deletedAt: null })
      })
    )
  })

  describe("DELETE /v1/products/:id", () => {
    it.effect("archives: still readable by id, out of the default list; again is a no-op", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const marker = unique("del")
        const p = yield* createProduct(token, { name: marker })
        const r = yield* call("DELETE", `/v1/products/${p.id}`, { token })
        expect(r.status, r.text).toBe(200)
        expect(r.body).toMatchObject({ id: p.id, object: "product", status: "archived" })
        expect(r.body.deletedAt).toMatch(ISO_MS)
        expect(yield* getProduct(token, p.id)).toEqual(r.body)
        const again = yield* call("DELETE", `/v1/products/${p.id}`, { token })
        expect(again.status).toBe(200)
        expect(again.body).toEqual(r.body)
        const listed = yield* call("GET", `/v1/products${query({ q: marker })}`, { token })
        expect(listed.body.data).toEqual([])
      })
    )

    it.effect("a product held by an open reservation → 409 resource_in_use; after release it archives", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const p = yield* stockedProduct(token, 3)
        yield* reserve("chk_route_delete", [{ productId: p.id, quantity: 1 }])
        expectError(yield* call("DELETE", `/v1/products/${p.id}`, { token }), 409, "resource_in_use")
        expectError(
          yield* call("PATCH", `/v1/products/${p.id}`, { token, json: { status: "archived" } }),
          409,
          "resource_in_use"
        )
        expect((yield* getProduct(token, p.id)).status).toBe("active")
        yield* release("chk_route_delete")
        expect((yield* call("DELETE", `/v1/products/${p.id}`, { token })).status).toBe(200)
      })
    )

    it.effect("404 for unknown and malformed ids; 403 for shoppers", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const unknown = yield* Ids.make("prod")
        expectError(yield* call("DELETE", `/v1/products/${unknown}`, { token }), 404, "resource_missing")
        expectError(yield* call("DELETE", "/v1/products/wh_123", { token }), 404, "resource_missing")
        const p = yield* createProduct(token)
        const shopper = (yield* registeredShopper()).accessToken
        expectError(
          yield* call("DELETE", `/v1/products/${p.id}`, { token: shopper }),
          403,
          "insufficient_scope"
        )
      })
    )
  })

  describe("public events", () => {
    it.effect(
      "created, updated and deleted carry the full snapshot; stock crossings publish inventory.*",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const p = yield* stockedProduct(token, 10, { lowStockThreshold: 3 })
          yield* call("PATCH", `/v1/products/${p.id}`, { token, json: { inventory: { adjustBy: -8 } } })
          yield* call("PATCH", `/v1/products/${p.id}`, { token, json: { inventory: { stockedQuantity: 0 } } })
          yield* call("PATCH", `/v1/products/${p.id}`, {
            token,
            json: { inventory: { stockedQuantity: 20 } }
          })
          const deleted = yield* call("DELETE", `/v1/products/${p.id}`, { token })
          const events = yield* publicEventsOf(p.id)
          expect(events.map((e) => e.type)).toEqual([
            "product.created",
            "product.updated",
            "inventory.low_stock",
            "product.updated",
            "inventory.out_of_stock",
            "product.updated",
            "inventory.restocked",
            "product.deleted"
          ])
          const json = (value: unknown) => JSON.parse(JSON.stringify(value))
          expect(events[0]?.data).toEqual(json(p))
          expect(events[7]?.data).toEqual(json(deleted.body))
          expect(events[2]?.data).toEqual({
            productId: p.id,
            sku: null,
            stockedQuantity: 2,
            reservedQuantity: 0,
            availableQuantity: 2,
            lowStockThreshold: 3,
            previousState: "in_stock",
            state: "low_stock"
          })
        })
    )
  })
})
