/**
 * The authorization matrix, generated from the route table (`HttpApi.reflect` over the service's
 * Api): every protected route × {no credential, expired token, revoked token, revoked API key,
 * credential without the route's scope, a shopper (customer role)}. A new route is covered the
 * moment it is added; a protected route without a `RequiredScope` must be listed below on purpose.
 */
import { HttpApi } from "@effect/platform"
import { layer } from "@effect/vitest"
import { Context, Effect, Option } from "effect"
import { expect } from "vitest"
import { Api } from "../../src/Api.js"
import { Authentication, RequiredScope, StaffOnly } from "../../src/http/Auth.js"
import { ALL_SCOPES, CUSTOMER_SCOPES } from "../../src/identity/permissions.js"
import { AccessTokens } from "../../src/identity/tokens.js"
import * as Ids from "../../src/kernel/Ids.js"
import { makeShiftedClock } from "../support/clock.js"
import { adminLogin, apiKeyWith, call, IdentityHttp, registerShopper } from "../support/identity.js"
import { placeOrder } from "../support/orders.js"

type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE"

interface ProtectedRoute {
  readonly method: Method
  readonly path: string
  readonly scope: string | undefined
  /** Shoppers are refused although their role holds the scope. */
  readonly staffOnly: boolean
}

/** Routes any authenticated credential may call (they act on the caller itself). */
const SELF_ROUTES = new Set(["POST /auth/logout", "GET /auth/me"])

/** Another shopper's records, which the fixtures below aim at. */
interface OtherCustomer {
  readonly token: string
  readonly customerId: string
  readonly addressId: string
  /** A payment of theirs (made by staff), its intent and a refund of it. */
  readonly paymentId: string
  readonly paymentIntentId: string
  readonly refundId: string
  /** An order of theirs (placed through the orders port, as checkout completion does). */
  readonly orderId: string
  /** An open checkout of theirs (created by them). */
  readonly checkoutId: string
  /** A subscription of theirs (created by them) and its first invoice. */
  readonly subscriptionId: string
  readonly invoiceId: string
}

interface OtherCustomerFixture {
  /** The route's path aimed at the other customer's record. */
  readonly path: (other: OtherCustomer) => string
  /** A valid body, so only ownership can refuse it. */
  readonly json?: unknown
}

/**
 * Routes a shopper reaches that take a record id: each needs a fixture proving another customer's
 * record answers 404 and stays unchanged (added by the contexts that own such routes).
 */
const OTHER_CUSTOMER_FIXTURES: Record<string, OtherCustomerFixture> = {
  "GET /user/:id": { path: (o) => `/user/${o.customerId}` },
  "PUT /user/:id": { path: (o) => `/user/${o.customerId}`, json: { firstName: "Mallory" } },
  "POST /user/:id/address": {
    path: (o) => `/user/${o.customerId}/address`,
    json: { line1: "1 Evil St", city: "Paris", country: "FR" }
  },
  "DELETE /user/:id/address/:address_id": { path: (o) => `/user/${o.customerId}/address/${o.addressId}` },
  "GET /v1/payments/:id": { path: (o) => `/v1/payments/${o.paymentId}` },
  "GET /v1/payment-intents/:id": { path: (o) => `/v1/payment-intents/${o.paymentIntentId}` },
  "GET /v1/refunds/:id": { path: (o) => `/v1/refunds/${o.refundId}` },
  "GET /v1/orders/:id": { path: (o) => `/v1/orders/${o.orderId}` },
  "GET /v1/checkouts/:id": { path: (o) => `/v1/checkouts/${o.checkoutId}` },
  "POST /v1/checkouts/:id/confirm": {
    path: (o) => `/v1/checkouts/${o.checkoutId}/confirm`,
    json: { paymentMethod: "pm_card_visa" }
  },
  "POST /v1/checkouts/:id/expire": { path: (o) => `/v1/checkouts/${o.checkoutId}/expire` },
  "GET /v1/subscriptions/:id": { path: (o) => `/v1/subscriptions/${o.subscriptionId}` },
  "PATCH /v1/subscriptions/:id": {
    path: (o) => `/v1/subscriptions/${o.subscriptionId}`,
    json: { cancelAtPeriodEnd: true }
  },
  "DELETE /v1/subscriptions/:id": { path: (o) => `/v1/subscriptions/${o.subscriptionId}` },
  "GET /v1/invoices/:id": { path: (o) => `/v1/invoices/${o.invoiceId}` }
}

/**
 * Routes a shopper reaches that take the id of a record no customer owns: the store's catalogue is
 * the same for every shopper (they see active products only: test/catalog/routes.test.ts).
 */
const SHARED_RECORD_ROUTES = new Set(["GET /v1/products/:id"])

const protectedRoutes: ReadonlyArray<ProtectedRoute> = (() => {
  const routes: Array<ProtectedRoute> = []
  HttpApi.reflect(Api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint, middleware, mergedAnnotations }) => {
      if (![...middleware].some((m) => m.key === Authentication.key)) return
      const method = endpoint.method
      if (
        method !== "GET" &&
        method !== "POST" &&
        method !== "PUT" &&
        method !== "PATCH" &&
        method !== "DELETE"
      ) {
        throw new Error(`unexpected method ${method}`)
      }
      routes.push({
        method,
        path: endpoint.path,
        scope: Option.getOrUndefined(Context.getOption(mergedAnnotations, RequiredScope)),
        staffOnly: Option.getOrElse(Context.getOption(mergedAnnotations, StaffOnly), () => false)
      })
    }
  })
  return routes
})()

const key = (r: ProtectedRoute) => `${r.method} ${r.path}`

/** A concrete path: every `:param` gets a well-formed id that names nothing. */
const concrete = (path: string) => path.replace(/:[A-Za-z_]+/g, () => "key_01jd4x8m6ffq2b3n5r7t9v1w3y")

/** A scope every route but this one's would accept. */
const otherScope = (scope: string) => (scope === "read:events" ? "read:products" : "read:events")

const expectError = (
  r: { status: number; body: { error?: { code?: string } } },
  status: number,
  code: string,
  label: string
) => {
  expect(r.status, label).toBe(status)
  expect(r.body?.error?.code, label).toBe(code)
}

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("authorization matrix", (it) => {
  it("the route table has protected routes, each with a scope or listed as a self route", () => {
    expect(protectedRoutes.length).toBeGreaterThanOrEqual(8)
    for (const route of protectedRoutes) {
      if (route.scope === undefined)
        expect(SELF_ROUTES.has(key(route)), `${key(route)} declares no RequiredScope`).toBe(true)
      else expect([...ALL_SCOPES, "admin"], `${key(route)} requires an unknown scope`).toContain(route.scope)
    }
  })

  it.effect("no credential → 401 missing_credentials; garbage → 401 invalid_token", () =>
    Effect.gen(function* () {
      for (const route of protectedRoutes) {
        const path = concrete(route.path)
        expectError(
          yield* call(route.method, path),
          401,
          "missing_credentials",
          `${key(route)} without credential`
        )
        expectError(
          yield* call(route.method, path, { headers: { authorization: "Basic dXNlcjpwYXNz" } }),
          401,
          "missing_credentials",
          `${key(route)} with a Basic header`
        )
        expectError(
          yield* call(route.method, path, { token: "not.a.jwt" }),
          401,
          "invalid_token",
          `${key(route)} with garbage`
        )
        expectError(
          yield* call(route.method, path, { token: "sk_unknownkeyunknownkeyunknownkeyunknownkey123" }),
          401,
          "invalid_api_key",
          `${key(route)} with an unknown API key`
        )
      }
    })
  )

  it.effect("an expired access token → 401 token_expired", () =>
    Effect.gen(function* () {
      const tokens = yield* AccessTokens
      const { clock } = makeShiftedClock(-3 * 3600_000)
      const admin = yield* adminLogin()
      const expired = yield* tokens
        .issue({
          subject: admin.userId,
          tokenId: "expired-token",
          scopes: ["admin"],
          ttlSeconds: 3600,
          role: "admin",
          sessionId: yield* Ids.make("ses")
        })
        .pipe(Effect.withClock(clock))
      for (const route of protectedRoutes) {
        expectError(
          yield* call(route.method, concrete(route.path), { token: expired.token }),
          401,
          "token_expired",
          `${key(route)} with an expired token`
        )
      }
    })
  )

  it.effect("a revoked access token (after logout) and a revoked API key → 401 token_revoked", () =>
    Effect.gen(function* () {
      const admin = yield* adminLogin()
      const revokedKey = yield* apiKeyWith(["admin"])
      expect((yield* call("POST", "/auth/logout", { token: admin.accessToken })).status).toBe(204)
      const keeper = yield* adminLogin()
      expect((yield* call("DELETE", `/apikey/${revokedKey.id}`, { token: keeper.accessToken })).status).toBe(
        204
      )
      for (const route of protectedRoutes) {
        const path = concrete(route.path)
        expectError(
          yield* call(route.method, path, { token: admin.accessToken }),
          401,
          "token_revoked",
          `${key(route)} with a logged-out token`
        )
        expectError(
          yield* call(route.method, path, { token: revokedKey.key }),
          401,
          "token_revoked",
          `${key(route)} with a revoked API key`
        )
      }
    })
  )

  it.effect("a credential without the route's scope → 403 insufficient_scope, whatever the body", () =>
    Effect.gen(function* () {
      for (const route of protectedRoutes) {
        if (route.scope === undefined) continue
        const apiKey = yield* apiKeyWith([otherScope(route.scope)])
        expectError(
          yield* call(route.method, concrete(route.path), { token: apiKey.key, json: { unexpected: true } }),
          403,
          "insufficient_scope",
          `${key(route)} with an API key lacking ${route.scope}`
        )
      }
    })
  )

  it.effect("the route's own scope is enough to get past authorization", () =>
    Effect.gen(function* () {
      for (const route of protectedRoutes) {
        if (route.scope === undefined || route.scope === "admin") continue
        const apiKey = yield* apiKeyWith([route.scope])
        const r = yield* call(route.method, concrete(route.path), { token: apiKey.key, json: {} })
        expect([401, 403], `${key(route)} with ${route.scope}: ${r.text}`).not.toContain(r.status)
      }
    })
  )

  it.effect(
    "a shopper reaches only routes within the customer role, and never another customer's records",
    () =>
      Effect.gen(function* () {
        for (const route of protectedRoutes) {
          // A fresh shopper per route: one of them is logout.
          const shopper = yield* registerShopper()
          const r = yield* call(route.method, concrete(route.path), { token: shopper.accessToken, json: {} })
          const allowed = route.scope === undefined || CUSTOMER_SCOPES.includes(route.scope)
          if (!allowed || route.staffOnly) {
            expectError(r, 403, "insufficient_scope", `${key(route)} as a shopper`)
            continue
          }
          expect([401, 403], `${key(route)} as a shopper: ${r.text}`).not.toContain(r.status)
          if (
            route.scope !== undefined &&
            /:[A-Za-z_]+/.test(route.path) &&
            !SHARED_RECORD_ROUTES.has(key(route))
          ) {
            expect(
              Object.keys(OTHER_CUSTOMER_FIXTURES),
              `${key(route)} takes a record id a shopper can reach: add its other-customer fixture`
            ).toContain(key(route))
          }
        }
      })
  )
  it.effect("another customer's records answer 404 to a shopper and stay unchanged", () =>
    Effect.gen(function* () {
      const me = yield* registerShopper()
      const victim = yield* registerShopper()
      const victimMe = yield* call("GET", "/auth/me", { token: victim.accessToken })
      const customerId: string = victimMe.body.customerId
      const address = yield* call("POST", "/user/me/address", {
        token: victim.accessToken,
        json: { line1: "1 Main St", city: "Lyon", country: "FR" }
      })
      expect(address.status, address.text).toBe(201)
      const staff = yield* adminLogin()
      const payment = yield* call("POST", "/v1/payments", {
        token: staff.accessToken,
        json: { amount: 1000, currency: "USD", paymentMethod: "pm_card_visa", customerId }
      })
      expect(payment.status, payment.text).toBe(201)
      const refund = yield* call("POST", `/v1/payments/${payment.body.id}/refund`, {
        token: staff.accessToken,
        json: { amount: 100 }
      })
      expect(refund.status, refund.text).toBe(200)
      const product = yield* call("POST", "/v1/products", {
        token: staff.accessToken,
        json: { name: "Shirt", price: { amount: 1500, currency: "USD" }, inventory: { stockedQuantity: 5 } }
      })
      expect(product.status, product.text).toBe(201)
      const checkout = yield* call("POST", "/v1/checkouts", {
        token: victim.accessToken,
        json: { lineItems: [{ productId: product.body.id, quantity: 1 }] }
      })
      expect(checkout.status, checkout.text).toBe(201)
      const plan = yield* call("POST", "/v1/products", {
        token: staff.accessToken,
        json: {
          name: "Plan",
          price: { amount: 900, currency: "USD", type: "recurring", recurring: { interval: "month" } }
        }
      })
      expect(plan.status, plan.text).toBe(201)
      const subscription = yield* call("POST", "/v1/subscriptions", {
        token: victim.accessToken,
        json: { productId: plan.body.id, paymentMethod: "pm_card_visa" }
      })
      expect(subscription.status, subscription.text).toBe(201)
      const other: OtherCustomer = {
        token: victim.accessToken,
        customerId,
        addressId: address.body.id,
        paymentId: payment.body.id,
        paymentIntentId: payment.body.paymentIntentId,
        refundId: refund.body.id,
        orderId: (yield* placeOrder({ customerId, email: victimMe.body.email })).id,
        checkoutId: checkout.body.id,
        subscriptionId: subscription.body.id,
        invoiceId: subscription.body.latestInvoice.id
      }
      const before = yield* call("GET", `/user/${customerId}`, { token: victim.accessToken })
      expect(before.status).toBe(200)
      for (const [route, fixture] of Object.entries(OTHER_CUSTOMER_FIXTURES)) {
        const method = route.slice(0, route.indexOf(" ")) as Method
        const r = yield* call(method, fixture.path(other), {
          token: me.accessToken,
          ...(fixture.json === undefined ? {} : { json: fixture.json })
        })
        expectError(r, 404, "resource_missing", `${route} on another customer's record`)
      }
      const after = yield* call("GET", `/user/${customerId}`, { token: victim.accessToken })
      expect(after.body).toEqual(before.body)
      const checkoutAfter = yield* call("GET", `/v1/checkouts/${checkout.body.id}`, {
        token: victim.accessToken
      })
      expect(checkoutAfter.body).toMatchObject({ status: "open", orderId: null })
      const subscriptionAfter = yield* call("GET", `/v1/subscriptions/${subscription.body.id}`, {
        token: victim.accessToken
      })
      expect(subscriptionAfter.body).toEqual(subscription.body)
    })
  )
})
