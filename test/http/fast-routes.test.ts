/**
 * Fast routes (http/FastRoutes.ts) answer hot `GET <prefix>:id` reads, and `POST /user`, before the
 * router. Whatever they answer must be what the routed handler answers: the same status, body and
 * headers (the request id aside), for every credential and outcome. A query string sends the same
 * request through the router (for `GET /v1/usage?…`, a parameter it does not declare), so each case
 * is asked both ways and compared. `GET /v1/products/:id` answers from the
 * product cache (catalog/cache.ts): every change — an update, a stock adjustment, a reservation, a
 * release, an archive — shows in the very next fast read.
 */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { expect, it as plainIt } from "vitest"
import { type FastRoute, fastCommandMatcher, fastRouteMatcher } from "../../src/http/FastRoutes.js"
import * as Ids from "../../src/kernel/Ids.js"
import {
  DAY,
  HOUR,
  recordUsage,
  subscriptionReadModelFixture,
  sumPrice,
  uniqueMeter
} from "../billing/usage/fixtures.js"
import { createProduct, release, reserve, stockedProduct } from "../support/catalog.js"
import { adminToken, createCustomer, registeredShopper } from "../support/customers.js"
import { apiKeyWith, call, IdentityHttp, type Reply, uniqueEmail } from "../support/identity.js"
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

/**
 * `GET path` fast and through the router (`routedPath`: by default the same with a query string):
 * both answers, asserted equal (their bodies as `comparableBody` leaves them).
 */
const bothWays = (
  path: string,
  token?: string,
  routedPath = `${path}?via=router`,
  comparableBody: (reply: Reply) => unknown = withoutRequestId
) =>
  Effect.gen(function* () {
    const options = token === undefined ? {} : { token }
    const fast = yield* call("GET", path, options)
    const routed = yield* call("GET", routedPath, options)
    expect(fast.status, fast.text).toBe(routed.status)
    expect(comparableBody(fast)).toEqual(comparableBody(routed))
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

/** A summary body without its request id and its `asOf` (each answer's own instant). */
const withoutAsOf = (reply: Reply) => {
  const body = withoutRequestId(reply)
  if (typeof body !== "object" || body === null || !("asOf" in body)) return body
  const { asOf, ...rest } = body
  expect(Number.isNaN(Date.parse(String(asOf)))).toBe(false)
  return rest
}

/** `GET /v1/usage?query` fast and through the router (a parameter it does not declare). */
const summaryBothWays = (query: string, token?: string) =>
  bothWays(`/v1/usage?${query}`, token, `/v1/usage?${query}&via=router`, withoutAsOf)

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })(
  "fast routes: GET /v1/usage (summary)",
  (it) => {
    it.effect("staff: by subscription or customer, ranges, buckets, every refusal", () =>
      Effect.gen(function* () {
        const admin = yield* adminToken
        const sub = yield* subscriptionReadModelFixture()
        const meter = sub.usage?.meter ?? ""
        for (const [i, value] of [3, 4.5, 12].entries())
          yield* recordUsage(admin, {
            subscriptionId: sub.id,
            meter,
            value,
            identifier: `fast-${i}`,
            timestamp: new Date(Date.now() - (i + 1) * HOUR).toISOString()
          })
        const found = yield* summaryBothWays(`subscriptionId=${sub.id}`, admin)
        expect(found.status).toBe(200)
        expect(found.body).toMatchObject({ object: "usage_summary", quantity: 19.5, eventCount: 3 })
        const from = new Date(Date.now() - 2.5 * HOUR).toISOString()
        const to = new Date(Date.now() + HOUR).toISOString()
        const ranged = yield* summaryBothWays(
          new URLSearchParams({ subscriptionId: sub.id, meter, from, to, groupBy: "hour" }).toString(),
          admin
        )
        expect(ranged.body).toMatchObject({ quantity: 7.5, eventCount: 2 })
        expect((yield* summaryBothWays(`customerId=${sub.customerId}&groupBy=day`, admin)).status).toBe(200)
        // Refusals of the use case (answered fast) and of the schema (left to the router).
        const unknown = Ids.fromUuid("sub", crypto.randomUUID())
        expect((yield* summaryBothWays(`subscriptionId=${unknown}`, admin)).status).toBe(404)
        expect((yield* summaryBothWays(`subscriptionId=${sub.id}&meter=other`, admin)).status).toBe(400)
        const unmetered = yield* subscriptionReadModelFixture({ usage: null })
        expect((yield* summaryBothWays(`subscriptionId=${unmetered.id}`, admin)).status).toBe(400)
        const backwards = new URLSearchParams({ subscriptionId: sub.id, from: to, to: from }).toString()
        expect((yield* summaryBothWays(backwards, admin)).status).toBe(400)
        const wide = new URLSearchParams({
          subscriptionId: sub.id,
          from: new Date(Date.now() - 100 * DAY).toISOString(),
          groupBy: "hour"
        }).toString()
        expect((yield* summaryBothWays(wide, admin)).status).toBe(400)
        expect((yield* summaryBothWays(`subscriptionId=${sub.id}&groupBy=week`, admin)).status).toBe(400)
        expect((yield* summaryBothWays("subscriptionId=nope", admin)).status).toBe(404)
        expect(
          (yield* summaryBothWays(`subscriptionId=${sub.id}&customerId=${sub.customerId}`, admin)).status
        ).toBe(400)
        expect((yield* summaryBothWays(`from=${encodeURIComponent(from)}`, admin)).status).toBe(400)
      })
    )

    it.effect("credentials: none, invalid, without the scope; shoppers read only their own", () =>
      Effect.gen(function* () {
        const shopper = yield* registeredShopper()
        const own = yield* subscriptionReadModelFixture({ customerId: shopper.customerId })
        const foreign = yield* subscriptionReadModelFixture({ usage: sumPrice(uniqueMeter()) })
        const query = `subscriptionId=${own.id}`
        expect((yield* summaryBothWays(query)).status).toBe(401)
        expect((yield* summaryBothWays(query, "sk_not_a_key")).status).toBe(401)
        expect((yield* summaryBothWays(query, (yield* apiKeyWith(["read:products"])).key)).status).toBe(403)
        expect((yield* summaryBothWays(query, (yield* apiKeyWith(["read:usage"])).key)).status).toBe(200)
        expect((yield* summaryBothWays(query, shopper.accessToken)).status).toBe(200)
        expect((yield* summaryBothWays(`customerId=${shopper.customerId}`, shopper.accessToken)).status).toBe(
          200
        )
        expect((yield* summaryBothWays(`subscriptionId=${foreign.id}`, shopper.accessToken)).status).toBe(404)
        expect((yield* summaryBothWays(`customerId=${foreign.customerId}`, shopper.accessToken)).status).toBe(
          404
        )
      })
    )
  }
)

/** `POST /user` with `json` fast and through the router (`label`s differ: the routed email is its own). */
const createBothWays = (
  json: (label: string) => Record<string, unknown>,
  token?: string,
  headers?: Record<string, string>
) =>
  Effect.gen(function* () {
    const options = { ...(token === undefined ? {} : { token }), ...(headers ? { headers } : {}) }
    const fast = yield* call("POST", "/user", { ...options, json: json("fast") })
    const routed = yield* call("POST", "/user?via=router", { ...options, json: json("rout") })
    expect(fast.status, fast.text).toBe(routed.status)
    expect(comparable(fast.headers)).toEqual(comparable(routed.headers))
    expect(fast.headers["request-id"]).toMatch(/^req_/)
    return { fast, routed }
  })

/** A created customer's answer without what differs between two creations. */
const sameShape = (reply: Reply) => {
  const { id, email, createdAt, ...rest } = reply.body as Record<string, unknown>
  expect(id).toMatch(/^cus_/)
  expect(typeof email).toBe("string")
  expect(Number.isNaN(Date.parse(String(createdAt)))).toBe(false)
  return rest
}

/** Unique emails of equal length for the fast and the routed request (equal Content-Length). */
const pairEmail = (run: string) => (label: string) => `${label}.${run}@example.com`

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("fast routes: POST /user", (it) => {
  it.effect("created (201), then the same email again (409), both ways alike", () =>
    Effect.gen(function* () {
      const admin = yield* adminToken
      const run = uniqueEmail("pair").split("@")[0] ?? "pair"
      const created = yield* createBothWays(
        (label) => ({ email: pairEmail(run)(label), firstName: "Grace", lastName: "Hopper", tags: ["vip"] }),
        admin
      )
      expect(created.fast.status).toBe(201)
      expect(sameShape(created.fast)).toEqual(sameShape(created.routed))
      expect(created.fast.body).toMatchObject({ email: pairEmail(run)("fast"), firstName: "Grace" })
      // The record is there (with what only the command wrote), and its email is taken now.
      const id = (created.fast.body as { id: string }).id
      expect((yield* call("GET", `/user/${id}`, { token: admin })).body).toMatchObject({ id, tags: ["vip"] })
      const fastAgain = yield* call("POST", "/user", {
        token: admin,
        json: { email: pairEmail(run)("fast"), firstName: "G", lastName: "H" }
      })
      const routedAgain = yield* call("POST", "/user?via=router", {
        token: admin,
        json: { email: pairEmail(run)("fast"), firstName: "G", lastName: "H" }
      })
      expect(fastAgain.status, fastAgain.text).toBe(409)
      expect(withoutRequestId(fastAgain)).toEqual(withoutRequestId(routedAgain))
      expect(comparable(fastAgain.headers)).toEqual(comparable(routedAgain.headers))
    })
  )

  it.effect("credentials: none, invalid, without the scope, a shopper (staff only)", () =>
    Effect.gen(function* () {
      const body = (label: string) => ({ email: uniqueEmail(label), firstName: "A", lastName: "B" })
      const shopper = yield* registeredShopper()
      const unscoped = yield* apiKeyWith(["read:customers"])
      for (const [token, status] of [
        [undefined, 401],
        ["sk_not_a_key", 401],
        [unscoped.key, 403],
        [shopper.accessToken, 403]
      ] as const) {
        const { fast, routed } = yield* createBothWays(body, token)
        expect(fast.status).toBe(status)
        expect(withoutRequestId(fast)).toEqual(withoutRequestId(routed))
      }
      const writer = yield* apiKeyWith(["write:customers"])
      expect((yield* createBothWays(body, writer.key)).fast.status).toBe(201)
    })
  )

  it.effect("bodies the payload schema refuses, or with unknown fields, answer as the router does", () =>
    Effect.gen(function* () {
      const admin = yield* adminToken
      const cases: ReadonlyArray<(label: string) => Record<string, unknown>> = [
        () => ({ email: "not-an-email", firstName: "A", lastName: "B" }),
        () => ({ firstName: "A", lastName: "B" }),
        (label) => ({ email: uniqueEmail(label), firstName: "", lastName: "B" }),
        (label) => ({ email: uniqueEmail(label), firstName: "A", lastName: "B", tags: "vip" }),
        (label) => ({ email: uniqueEmail(label), firstName: "A", lastName: "B", testClockId: "clock_nope" }),
        (label) => ({ email: uniqueEmail(label), firstName: "A", lastName: "B", whatever: 1 })
      ]
      for (const json of cases) {
        const { fast, routed } = yield* createBothWays(json, admin)
        if (fast.status === 201) expect(sameShape(fast)).toEqual(sameShape(routed))
        else expect(withoutRequestId(fast)).toEqual(withoutRequestId(routed))
      }
      // A body that is not an object at all.
      const fast = yield* call("POST", "/user", { token: admin, json: [1, 2] })
      const routed = yield* call("POST", "/user?via=router", { token: admin, json: [1, 2] })
      expect(fast.status).toBe(400)
      expect(withoutRequestId(fast)).toEqual(withoutRequestId(routed))
    })
  )

  it.effect("an Idempotency-Key request goes to the router: its retry is the stored answer", () =>
    Effect.gen(function* () {
      const admin = yield* adminToken
      const headers = { "idempotency-key": `fast-${crypto.randomUUID()}` }
      const json = { email: uniqueEmail("idem"), firstName: "A", lastName: "B" }
      const first = yield* call("POST", "/user", { token: admin, json, headers })
      const again = yield* call("POST", "/user", { token: admin, json, headers })
      expect(first.status, first.text).toBe(201)
      expect(again.status).toBe(201)
      expect(again.headers["idempotent-replayed"]).toBe("true")
      expect(again.body).toEqual(first.body)
    })
  )
})

plainIt(
  "the fast command matcher takes a plain POST of its path and a body its schema decodes, nothing else",
  () => {
    const answered = Effect.succeed(HttpServerResponse.empty({ status: 201 }))
    const Payload = Schema.Struct({ name: Schema.String })
    const decode = Schema.decodeUnknownOption(Payload)
    const routes: ReadonlyArray<FastRoute> = [
      {
        method: "POST",
        path: "/things",
        answer: (_request, body) => (decode(body)._tag === "Some" ? answered : undefined)
      }
    ]
    const match = fastCommandMatcher(routes)
    const request = (url: string, init: { method?: string; headers?: Record<string, string> } = {}) =>
      HttpServerRequest.fromWeb(
        new Request(`http://localhost${url}`, {
          method: init.method ?? "POST",
          ...(init.headers ? { headers: init.headers } : {})
        })
      )
    expect(match?.(request("/things"), { name: "a" })).toBe(answered)
    expect(match?.(request("/things"), { name: 1 })).toBeUndefined()
    expect(match?.(request("/things?x=1"), { name: "a" })).toBeUndefined()
    expect(match?.(request("/things/"), { name: "a" })).toBeUndefined()
    expect(match?.(request("/other"), { name: "a" })).toBeUndefined()
    expect(match?.(request("/things", { method: "PUT" }), { name: "a" })).toBeUndefined()
    expect(
      match?.(request("/things", { headers: { "idempotency-key": "k" } }), { name: "a" })
    ).toBeUndefined()
    expect(fastCommandMatcher([])).toBeUndefined()
  }
)

plainIt("the fast read matcher takes a query route's path with each parameter once, nothing else", () => {
  const answered = Effect.succeed(HttpServerResponse.empty({ status: 200 }))
  const seen: Array<Readonly<Record<string, string>>> = []
  const routes: ReadonlyArray<FastRoute> = [
    {
      method: "GET",
      path: "/things",
      query: true,
      answer: (_request, params) => {
        seen.push(params)
        return answered
      }
    }
  ]
  const match = fastRouteMatcher(routes, new Set(["/things"]))
  const request = (url: string, method = "GET") =>
    HttpServerRequest.fromWeb(new Request(`http://localhost${url}`, { method }))
  expect(match?.(request("/things?a=1&b=x%20y"))).toBe(answered)
  expect(seen).toEqual([{ a: "1", b: "x y" }])
  expect(match?.(request("/things?a=1&a=2"))).toBeUndefined()
  expect(match?.(request("/things?a=%00"))).toBeUndefined()
  expect(match?.(request("/things"))).toBeUndefined()
  expect(match?.(request("/things/?a=1"))).toBeUndefined()
  expect(match?.(request("/other?a=1"))).toBeUndefined()
  expect(match?.(request("/things?a=1", "DELETE"))).toBeUndefined()
  expect(seen).toHaveLength(1)
})

/** A well-formed id of another type. */
const createIdLike = (prefix: "cus") => Ids.fromUuid(prefix, crypto.randomUUID())
