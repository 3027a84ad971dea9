/**
 * What the product reads and writes cost in SQL statements, counted on the wire (test/support/wire.ts):
 * `GET /v1/products/:id` is ONE single-row statement by primary key on a cache miss and none on a hit
 * (the product cache), a list page is one statement
 * (limit + 1 rows, keyset on `(created_at, product_id)`), and a stock change is one short
 * transaction of at most 7 statements (issue #17's ceiling per command).
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { oneLine } from "../../scripts/bench/pgwire.js"
import { apiKeyWith, call } from "../support/identity.js"
import { fewestStatements, statementsOf, WiredHttp } from "../support/wire.js"

/** The fewest statements of `runs` sends (a background poll may fall into one window, hardly all). */
layer(WiredHttp, { timeout: 120_000 })("product statements", (it) => {
  it.effect(
    "GET /v1/products/:id: one statement by primary key on a miss, none on a hit; a list page: one statement",
    () =>
      Effect.gen(function* () {
        const key = (yield* apiKeyWith(["read:products", "write:products"])).key
        const created = yield* call("POST", "/v1/products", {
          token: key,
          json: { name: "Lamp", price: { amount: 100, currency: "USD" }, inventory: { stockedQuantity: 9 } }
        })
        expect(created.status, created.text).toBe(201)
        const readAt = (path: string) =>
          call("GET", path, { token: key }).pipe(Effect.tap((r) => expect(r.status, r.text).toBe(200)))
        const read = readAt(`/v1/products/${created.body.id}`)
        // The first read after the write misses the product cache: one statement by primary key (the
        // cache's event-store poll may share the window: only the product statements are counted).
        const miss = (yield* statementsOf(read)).statements.map(oneLine).filter((s) => s.includes("catalog"))
        expect(miss, miss.join("\n")).toHaveLength(1)
        expect(miss[0]).toMatch(/FROM "catalog"\."products" WHERE product_id = \$1$/)
        // Then it is answered from memory: no statement at all.
        const hit = yield* fewestStatements(5, read)
        expect(hit, hit.join("\n")).toHaveLength(0)
        // Through the router (the handler the fast route stands in for): one statement by primary key.
        const routed = yield* fewestStatements(5, readAt(`/v1/products/${created.body.id}?via=router`))
        expect(routed, routed.join("\n")).toHaveLength(1)
        expect(routed[0]).toMatch(/FROM "catalog"\."products" WHERE product_id = \$1$/)

        const list = call("GET", "/v1/products?limit=20", { token: key }).pipe(
          Effect.tap((r) => expect(r.status, r.text).toBe(200))
        )
        yield* list
        const page = yield* fewestStatements(5, list)
        expect(page, page.join("\n")).toHaveLength(1)
        expect(page[0]).toMatch(/ORDER BY created_at DESC, "product_id" DESC LIMIT \$\d+$/)

        const adjust = call("PATCH", `/v1/products/${created.body.id}`, {
          token: key,
          json: { inventory: { adjustBy: 1 } }
        }).pipe(Effect.tap((r) => expect(r.status, r.text).toBe(200)))
        yield* adjust
        const write = yield* fewestStatements(3, adjust)
        // BEGIN, the row lock, the snapshot and stream reads, the append, the read-model UPDATE, COMMIT;
        // the reply comes from the aggregate's state, not from reading the row back.
        expect(write.length, write.join("\n")).toBeLessThanOrEqual(7)
        expect(write[0]).toBe("BEGIN")
      })
  )
})
