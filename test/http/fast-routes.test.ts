/**
 * Fast routes (http/FastRoutes.ts) answer hot `GET <prefix>:id` reads before the router. Whatever
 * they answer must be what the routed handler answers: the same status, body and headers (the
 * request id aside), for every credential and outcome. A query string sends the same request through
 * the router, so each case is asked both ways and compared. `GET /v1/products/:id` answers from the
 * product cache (catalog/cache.ts): every change — an update, a stock adjustment, a reservation, a
 * release, an archive — shows in the very next fast read.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import * as Ids from "../../src/kernel/Ids.js"
import { createProduct, release, reserve, stockedProduct } from "../support/catalog.js"
import { adminToken, createCustomer, registeredShopper } from "../support/customers.js"
import { apiKeyWith, call, IdentityHttp, type Reply } from "../support/identity.js"
import { placeOrder } from "../support/orders.js"

/** Headers minus the per-response ones. */
const comparable = (headers: Readonly<Record<string, string>>) => {
  const { "request-id": _id, date: _date, ...rest } = headers
  return rest
}

/** An error body without its request id (each response has its own). */
const withoutRequestId = (reply: Reply) => {
  const body = reply.body
  if (typeof body !== "object" || body === null || !("error" in body)) return body
  const { requestId, ...error } = body.error as Record<string, unknown>
  expect(requestId).toBe(reply.headers["request-id"])
  return { error }
}

/** `GET path` fast and through the router: both answers, asserted equal. */
const bothWays = (path: string, token?: string) =>
  Effect.gen(function* () {
    const options = token === undefined ? {} : { token }
    const fast = yield* call("GET", path, options)
    const routed = yield* call("GET", `${path}?via=router`, options)
    expect(fast.status, fast.text).toBe(routed.status)
    expect(withoutRequestId(fast)).toEqual(withoutRequestId(routed))
    expect(comparable(fast.headers)).toEqual(comparable(routed.headers))
    expect(fast.headers["request-id"]).toMatch(/^req_/)
    expect(fast.headers["request-id"]).not.toBe(routed.headers["request-id"])
    return fast
  })

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("fast routes: GET /user/:id", (it) => {
  it.effect("staff: a customer, an unknown id, a malformed or foreign id", () =>
    Effect.gen(function* () {
      const admin = yield* adminToken
      const customer = yield* createCustomer(admin, { phone: "+12025550123", tags: ["vip"] })
      const found = yield* bothWays(`/user/${customer.id}`, admin)
      expect(found.status).toBe(200)
      expect(found.body).toMatchObject({ id: customer.id, email: customer.email, tags: ["vip"] })
      expect((yield* bothWays("/user/cus_01m8bs2426ekzad0v58jt7x6n3", admin)).status).toBe(404)
      expect((yield* bothWays("/user/nope", admin)).status).toBe(404)
      expect((yield* bothWays("/user/prod_01m8bs2426ekzad0v58jt7x6n3", admin)).status).toBe(404)
      // `me` of a credential without a customer record.
      expect((yield* bothWays("/user/me", admin)).status).toBe(404)
    })
  )

  it.effect("credentials: none, invalid, without the scope, with only the scope", () =>
    Effect.gen(function* () {
      const admin = yield* adminToken
      const customer = yield* createCustomer(admin)
      const path = `/user/${customer.id}`
      expect((yield* bothWays(path)).status).toBe(401)
      expect((yield* bothWays(path, "sk_not_a_key")).status).toBe(401)
      const unscoped = yield* apiKeyWith(["read:products"])
      expect((yield* bothWays(path, unscoped.key)).status).toBe(403)
      const reader = yield* apiKeyWith(["read:customers"])
      expect((yield* bothWays(path, reader.key)).status).toBe(200)
    })
  )

  it.effect("shoppers: their own record (by id and as me), another's is 404", () =>
    Effect.gen(function* () {
      const shopper = yield* registeredShopper()
      const other = yield* registeredShopper()
      const own = yield* bothWays(`/user/${shopper.customerId}`, shopper.accessToken)
      expect(own.status).toBe(200)
      expect(own.body).toMatchObject({ id: shopper.customerId, hasAccount: true })
      expect((yield* bothWays("/user/me", shopper.accessToken)).body).toEqual(own.body)
      expect((yield* bothWays(`/user/${other.customerId}`, shopper.accessToken)).status).toBe(404)
    })
  )

  it.effect("what a fast route does not take still reaches the router", () =>
    Effect.gen(function* () {
      const admin = yield* adminToken
      const customer = yield* createCustomer(admin)
      // A trailing slash and an encoded segment are the router's to answer, as with a query string.
      const slash = yield* call("GET", `/user/${customer.id}/`, { token: admin })
      const slashRouted = yield* call("GET", `/user/${customer.id}/?via=router`, { token: admin })
      expect(slash.status).toBe(slashRouted.status)
      expect(withoutRequestId(slash)).toEqual(withoutRequestId(slashRouted))
      const encoded = yield* call("GET", `/user/${customer.id.replace("_", "%5F")}`, { token: admin })
      expect(encoded.status, encoded.text).toBe(200)
      expect(encoded.body).toMatchObject({ id: customer.id })
      // A write, then the fast read sees it.
      const put = yield* call("PUT", `/user/${customer.id}`, { token: admin, json: { firstName: "Ada" } })
      expect(put.status, put.text).toBe(200)
      expect((yield* bothWays(`/user/${customer.id}`, admin)).body).toMatchObject({ firstName: "Ada" })
    })
  )
})

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })(
  "fast routes: GET /v1/products/:id",
  (it) => {
    it.effect("staff and shoppers, every status, unknown, malformed and foreign ids, scopes", () =>
      Effect.gen(function* () {
        const admin = yield* adminToken
        const shopper = yield* registeredShopper()
        const active = yield* stockedProduct(admin, 10)
        const draft = yield* createProduct(admin, { status: "draft" })
        const archived = yield* createProduct(admin)
        expect((yield* call("DELETE", `/v1/products/${archived.id}`, { token: admin })).status).toBe(200)
        for (const token of [admin, shopper.accessToken]) {
          expect((yield* bothWays(`/v1/products/${active.id}`, token)).status).toBe(200)
          yield* bothWays(`/v1/products/${draft.id}`, token)
          yield* bothWays(`/v1/products/${archived.id}`, token)
          expect(
            (yield* bothWays(`/v1/products/${Ids.fromUuid("prod", crypto.randomUUID())}`, token)).status
          ).toBe(404)
          expect((yield* bothWays("/v1/products/nope", token)).status).toBe(404)
          expect((yield* bothWays(`/v1/products/${createIdLike("cus")}`, token)).status).toBe(404)
        }
        // Shoppers see only active products.
        expect((yield* bothWays(`/v1/products/${draft.id}`, shopper.accessToken)).status).toBe(404)
        expect((yield* bothWays(`/v1/products/${archived.id}`, shopper.accessToken)).status).toBe(404)
        expect((yield* bothWays(`/v1/products/${draft.id}`, admin)).status).toBe(200)
        expect((yield* bothWays(`/v1/products/${active.id}`)).status).toBe(401)
        const unscoped = yield* apiKeyWith(["read:customers"])
        expect((yield* bothWays(`/v1/products/${active.id}`, unscoped.key)).status).toBe(403)
        const reader = yield* apiKeyWith(["read:products"])
        expect((yield* bothWays(`/v1/products/${active.id}`, reader.key)).status).toBe(200)
      })
    )

    it.effect("every change shows in the next fast read (the cache never answers an old product)", () =>
      Effect.gen(function* () {
        const admin = yield* adminToken
        const product = yield* stockedProduct(admin, 10)
        const path = `/v1/products/${product.id}`
        const inventory = (reply: Reply) => (reply.body as { inventory: Record<string, number> }).inventory
        // Cached now.
        yield* bothWays(path, admin)
        yield* bothWays(path, admin)
        const renamed = yield* call("PATCH", path, {
          token: admin,
          json: { name: "Renamed", inventory: { adjustBy: 5 } }
        })
        expect(renamed.status, renamed.text).toBe(200)
        const afterPatch = yield* bothWays(path, admin)
        expect(afterPatch.body).toMatchObject({ name: "Renamed" })
        expect(inventory(afterPatch)).toMatchObject({ stockedQuantity: 15, reservedQuantity: 0 })
        const owner = yield* Ids.make("chk")
        yield* reserve(owner, [{ productId: product.id, quantity: 4 }])
        expect(inventory(yield* bothWays(path, admin))).toMatchObject({
          reservedQuantity: 4,
          availableQuantity: 11
        })
        yield* release(owner)
        expect(inventory(yield* bothWays(path, admin))).toMatchObject({
          reservedQuantity: 0,
          availableQuantity: 15
        })
        expect((yield* call("DELETE", path, { token: admin })).status).toBe(200)
        expect((yield* bothWays(path, admin)).body).toMatchObject({ status: "archived" })
      })
    )
  }
)

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })(
  "fast routes: GET /v1/orders/:id",
  (it) => {
    it.effect("staff, the shopper who placed it, another shopper, unknown and malformed ids, scopes", () =>
      Effect.gen(function* () {
        const admin = yield* adminToken
        const shopper = yield* registeredShopper()
        const other = yield* registeredShopper()
        const order = yield* placeOrder({ customerId: shopper.customerId, email: shopper.email })
        const path = `/v1/orders/${order.id}`
        const found = yield* bothWays(path, admin)
        expect(found.status).toBe(200)
        expect(found.body).toMatchObject({ id: order.id, displayId: order.displayId })
        expect((yield* bothWays(path, shopper.accessToken)).status).toBe(200)
        expect((yield* bothWays(path, other.accessToken)).status).toBe(404)
        expect(
          (yield* bothWays(`/v1/orders/${Ids.fromUuid("ord", crypto.randomUUID())}`, admin)).status
        ).toBe(404)
        expect((yield* bothWays("/v1/orders/nope", admin)).status).toBe(404)
        expect((yield* bothWays(`/v1/orders/${createIdLike("cus")}`, admin)).status).toBe(404)
        expect((yield* bothWays(path)).status).toBe(401)
        expect((yield* bothWays(path, (yield* apiKeyWith(["read:products"])).key)).status).toBe(403)
        expect((yield* bothWays(path, (yield* apiKeyWith(["read:orders"])).key)).status).toBe(200)
      })
    )
  }
)

/** A well-formed id of another type. */
const createIdLike = (prefix: "cus") => Ids.fromUuid(prefix, crypto.randomUUID())
