/**
 * The HTTP contract's schemas and its handlers agree (issue #16 item 7): for EVERY operation of the
 * root `Api`, requests are drawn from the endpoint's own Effect Schemas (`Arbitrary.make` of the
 * path, query, header and body schemas' Type side, then `Schema.encode`d to what goes over the
 * wire) and sent over real HTTP with an admin credential. The service must never answer 5xx, and
 * never refuse such a schema-valid request with 400 (404, 409, 401 for an unknown token… are fine:
 * they depend on state, not on the request's shape). Path ids are drawn from objects created at
 * setup as often as from the schema, so the handlers' deeper checks run, not only their 404s.
 *
 * Strings: Effect's arbitraries (fast-check 3, the version `effect/FastCheck` bundles) draw printable
 * ASCII for `Schema.String`, so lone UTF-16 surrogates and NUL, which the middleware refuses on
 * purpose before any schema runs (item 4), are never drawn and never count as mismatches.
 *
 * Reproducible: fixed seed (`SCHEMA_PROPERTY_SEED` overrides), and a failure names the operation,
 * the seed, the path to replay and the shrunk counterexample. `SCHEMA_PROPERTY_RUNS` sets the runs
 * per operation; `SCHEMA_PROPERTY_COLLECT=1` records every refused request instead of stopping at
 * the first per operation (how the mismatches were counted).
 */
import { HttpApi, type HttpApiEndpoint, type HttpClient, OpenApi } from "@effect/platform"
import type { HttpMethod } from "@effect/platform/HttpMethod"
import { layer } from "@effect/vitest"
import { Arbitrary, type SchemaAST as AST, Effect, FastCheck as fc, Option, Schema } from "effect"
import { describe, expect, it as plain } from "vitest"
import { Api } from "../../src/Api.js"
import { adminLogin, call, identityHttp, PASSWORD, type Reply, uniqueEmail } from "../support/identity.js"
import { placeOrder } from "../support/orders.js"

const SEED = Number(process.env.SCHEMA_PROPERTY_SEED ?? 20_261_126)
const RUNS = Number(process.env.SCHEMA_PROPERTY_RUNS ?? 30)
const COLLECT = process.env.SCHEMA_PROPERTY_COLLECT === "1"

type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE"

interface Operation {
  readonly name: string
  readonly method: Method
  readonly path: string
  readonly endpoint: HttpApiEndpoint.HttpApiEndpoint<string, HttpMethod>
  readonly payloadEncoding: "Json" | "UrlParams" | undefined
}

/** Every operation of the root API, in declaration order. */
const operations: Array<Operation> = []
HttpApi.reflect(Api, {
  onGroup: () => {},
  onEndpoint: ({ group, endpoint, payloads }) => {
    const encodings = [...payloads.values()].map((p) => p.encoding.kind)
    operations.push({
      name: `${group.identifier}.${endpoint.name}`,
      method: endpoint.method as Method,
      path: endpoint.path,
      endpoint,
      payloadEncoding: encodings.includes("UrlParams")
        ? "UrlParams"
        : encodings.length > 0
          ? "Json"
          : undefined
    })
  }
})

/** One drawn request, as it goes over the wire. */
interface WireRequest {
  readonly path: string
  readonly query: ReadonlyArray<readonly [string, string]>
  readonly headers: Readonly<Record<string, string>>
  readonly body: { readonly json: unknown } | { readonly form: Record<string, string> } | undefined
}

/** Values of `schema`'s Type, encoded to its wire form (a value that does not encode fails the run). */
const encodedArbitrary = (declared: { readonly ast: AST.AST }): fc.Arbitrary<unknown> => {
  const schema = Schema.make<unknown, unknown, never>(declared.ast)
  return Arbitrary.make(schema).map((value) => Schema.encodeUnknownSync(schema)(value))
}

const asStringRecord = (value: unknown): Record<string, unknown> =>
  typeof value === "object" && value !== null ? (value as Record<string, unknown>) : {}

/** Ids of objects created at setup, by the path parameter's place in the path. */
type Known = Readonly<Record<string, ReadonlyArray<string>>>

const knownIdsFor = (known: Known, path: string, param: string): ReadonlyArray<string> => {
  const key = `${path.split("/:")[0]}:${param}`
  return known[key] ?? []
}

const requestArbitrary = (op: Operation, known: Known): fc.Arbitrary<WireRequest> => {
  const e = op.endpoint
  const pathArb: fc.Arbitrary<Record<string, unknown>> = Option.match(e.pathSchema, {
    onNone: () => fc.constant({}),
    onSome: (schema) => {
      const drawn = encodedArbitrary(schema).map(asStringRecord)
      const params = [...op.path.matchAll(/:(\w+)/g)].map((m) => m[1] ?? "")
      const fromSetup = params.map((p) => knownIdsFor(known, op.path, p))
      if (fromSetup.some((ids) => ids.length === 0)) return drawn
      // Real objects half of the time: the handler's own checks run, not only its 404.
      const real = fc
        .tuple(...fromSetup.map((ids) => fc.constantFrom(...ids)))
        .map((ids) => Object.fromEntries(params.map((p, i) => [p, ids[i]])))
      return fc.oneof(drawn, real)
    }
  })
  const queryArb = Option.match(e.urlParamsSchema, {
    onNone: () => fc.constant<Record<string, unknown>>({}),
    onSome: (schema) => encodedArbitrary(schema).map(asStringRecord)
  })
  const headersArb = Option.match(e.headersSchema, {
    onNone: () => fc.constant<Record<string, unknown>>({}),
    onSome: (schema) => encodedArbitrary(schema).map(asStringRecord)
  })
  const bodyArb: fc.Arbitrary<WireRequest["body"]> = Option.match(e.payloadSchema, {
    onNone: () => fc.constant(undefined),
    onSome: (schema) =>
      encodedArbitrary(schema).map((value) =>
        op.payloadEncoding === "UrlParams"
          ? {
              form: Object.fromEntries(
                Object.entries(asStringRecord(value)).flatMap(([k, v]) =>
                  v === undefined ? [] : [[k, String(v)]]
                )
              )
            }
          : { json: value }
      )
  })
  return fc.record({ path: pathArb, query: queryArb, headers: headersArb, body: bodyArb }).map((r) => ({
    path: op.path.replace(/:(\w+)/g, (_, p: string) => encodeURIComponent(String(r.path[p]))),
    query: Object.entries(r.query).flatMap(([k, v]) =>
      v === undefined
        ? []
        : Array.isArray(v)
          ? v.map((x): [string, string] => [k, String(x)])
          : [[k, String(v)] as const]
    ),
    headers: Object.fromEntries(
      Object.entries(r.headers).flatMap(([k, v]) => (v === undefined ? [] : [[k, String(v)]]))
    ),
    body: r.body
  }))
}

const send = (op: Operation, request: WireRequest, token: string) => {
  const query = new URLSearchParams(request.query.map(([k, v]): [string, string] => [k, v])).toString()
  return call(op.method, query === "" ? request.path : `${request.path}?${query}`, {
    token,
    headers: request.headers,
    ...(request.body === undefined ? {} : request.body)
  })
}

/**
 * The 400s a request's shape cannot avoid, because they depend on state, time or a secret rather
 * than on the request (no JSON Schema can state them; each is documented on its operation). Each
 * is named by operation, code and the parameter it points at; every other 400 is a mismatch.
 */
const STATEFUL_400S: ReadonlyArray<{
  readonly op: string
  readonly code: string
  readonly param?: string
  /** Messages of this code that are shape errors all the same (the schemas state those). */
  readonly unless?: RegExp
}> = [
  // A reset token is a secret: an unknown one is refused like a wrong password.
  { op: "auth.confirmPasswordReset", code: "reset_token_invalid", param: "token" },
  // A cursor naming no object (Stripe's 400), or both cursors at once.
  { op: "v1Webhooks.list", code: "resource_missing" },
  { op: "v1Webhooks.list", code: "parameter_invalid", param: "endingBefore" },
  { op: "v1Events.list", code: "resource_missing" },
  { op: "v1Events.list", code: "parameter_invalid", param: "endingBefore" },
  // Two instants against each other: `createdBefore` later than `createdAfter`.
  { op: "v1Events.list", code: "parameter_invalid", param: "createdBefore" },
  { op: "products.list", code: "resource_missing" },
  { op: "products.list", code: "parameter_invalid", param: "endingBefore" },
  // Stock against the product's stock and reservations (stored): never below 0, nor below what is
  // reserved without backorders. Other `inventory` refusals are shape errors all the same.
  {
    op: "products.update",
    code: "parameter_invalid",
    param: "inventory",
    unless: /^(?!stock cannot go below|more units are reserved)/
  },
  // "Within the last 14 days and not in the future" moves with the clock.
  { op: "webhooks.recover", code: "parameter_invalid", param: "since" },
  // References to objects that do not exist, or exist for another channel.
  { op: "notifications.create", code: "resource_missing" },
  { op: "notifications.create", code: "parameter_invalid", param: "templateId" },
  { op: "notifications.changeSettings", code: "resource_missing" },
  // A template's variables against the data sent.
  { op: "notifications.create", code: "template_variable_missing" },
  { op: "notifications.create", code: "template_render_failed" },
  // Liquid syntax (body, subject or title); an update's fields against the template's channel
  // (stored). A field missing or out of place for the channel is a shape error all the same.
  { op: "notifications.createTemplate", code: "template_invalid", unless: /required for|have no/ },
  { op: "notifications.updateTemplate", code: "template_invalid", unless: /required for/ },
  // A resend's recipient against the channel of the original (stored).
  { op: "notifications.resend", code: "parameter_invalid", param: "to" },
  // Content of the original's own (push without a template) stays on its channel.
  { op: "notifications.resend", code: "parameter_invalid", param: "channel" },
  // Critical triggers keep their email (order.confirmed, customer.password_reset).
  { op: "notifications.changeSettings", code: "critical_notification" },
  // Payments: a customer that does not exist; confirming an intent that has no payment method;
  // amounts beyond what the payment's state leaves to capture or refund; list cursors as above.
  { op: "v1PaymentIntents.create", code: "resource_missing", param: "customerId" },
  { op: "v1Payments.create", code: "resource_missing", param: "customerId" },
  { op: "v1PaymentIntents.create", code: "parameter_missing", param: "paymentMethod" },
  { op: "v1PaymentIntentConfirm.confirm", code: "parameter_missing", param: "paymentMethod" },
  { op: "v1PaymentIntents.capture", code: "amount_too_large", param: "amountToCapture" },
  { op: "v1Payments.capture", code: "amount_too_large", param: "amountToCapture" },
  { op: "v1Payments.refund", code: "amount_too_large", param: "amount" },
  { op: "v1Payments.list", code: "resource_missing" },
  { op: "v1Payments.list", code: "parameter_invalid", param: "endingBefore" },
  // Orders: list cursors as above; lines and quantities against the order (stored): a line it does
  // not have, more units than remain to ship, more than remains refundable.
  { op: "orders.list", code: "resource_missing" },
  { op: "orders.list", code: "parameter_invalid", param: "endingBefore" },
  { op: "orders.fulfill", code: "parameter_invalid", unless: /^(?!the order has no line)/ },
  { op: "orders.fulfill", code: "fulfillment_quantity_exceeded" },
  { op: "orders.refund", code: "parameter_invalid", unless: /^(?!the order has no line)/ },
  { op: "orders.refund", code: "amount_too_large" },
  // Checkouts: products and customers that do not exist, or products that cannot be bought as they
  // stand (draft, archived, recurring, another currency, a total over the limit); a guest needs an
  // email (a shopper does not); confirming an intent that has no payment method.
  { op: "checkouts.create", code: "resource_missing" },
  { op: "checkouts.create", code: "parameter_invalid", unless: /^(?!Product )/ },
  { op: "checkouts.create", code: "currency_mismatch" },
  { op: "checkouts.create", code: "amount_too_large", param: "lineItems" },
  { op: "checkouts.create", code: "parameter_missing", param: "email" },
  { op: "checkouts.confirm", code: "parameter_missing", param: "paymentMethod" },
  // Subscriptions: list cursors as above; products and customers that do not exist, or products
  // that cannot be subscribed to as they stand (draft, archived, one-time, another currency); staff
  // name the customer (a shopper does not); a payment method unless the product has a trial; an
  // unknown payment method (the processor's); price × quantity over the limit (the price is stored).
  { op: "subscriptions.list", code: "resource_missing" },
  { op: "subscriptions.list", code: "parameter_invalid", param: "endingBefore" },
  { op: "invoices.list", code: "resource_missing" },
  { op: "invoices.list", code: "parameter_invalid", param: "endingBefore" },
  { op: "subscriptions.create", code: "resource_missing" },
  { op: "subscriptions.create", code: "parameter_invalid", param: "productId" },
  { op: "subscriptions.create", code: "parameter_invalid", param: "paymentMethod" },
  { op: "subscriptions.create", code: "parameter_missing", param: "customerId" },
  { op: "subscriptions.create", code: "parameter_missing", param: "paymentMethod" },
  { op: "subscriptions.create", code: "amount_too_large", param: "quantity" },
  { op: "subscriptions.update", code: "resource_missing", param: "productId" },
  { op: "subscriptions.update", code: "parameter_invalid", param: "productId" },
  { op: "subscriptions.update", code: "parameter_invalid", param: "paymentMethod" },
  { op: "subscriptions.update", code: "currency_mismatch", param: "productId" },
  { op: "subscriptions.update", code: "amount_too_large", param: "quantity" },
  // Test clocks: list cursors as above; an advance must move the clock forward (its stored time); a
  // customer's test clock must exist.
  { op: "v1TestClocks.list", code: "resource_missing" },
  { op: "v1TestClocks.list", code: "parameter_invalid", param: "endingBefore" },
  {
    op: "v1TestClocks.advance",
    code: "parameter_invalid",
    param: "frozenTime",
    unless: /^(?!frozenTime must be later)/
  },
  { op: "customers.create", code: "resource_missing", param: "testClockId" }
]

/** Why a reply breaks the property, or undefined. */
const violation = (op: Operation, reply: Reply): string | undefined => {
  if (reply.status >= 500) return `answered ${reply.status}`
  if (reply.status !== 400) return undefined
  const code = String(reply.body?.error?.code ?? "")
  const param = String(reply.body?.error?.param ?? "")
  const param0 = param.split(".")[0]
  const stateful = STATEFUL_400S.some(
    (s) =>
      s.op === op.name &&
      s.code === code &&
      (s.param === undefined || s.param === param0 || s.param === param) &&
      (s.unless === undefined || !s.unless.test(String(reply.body?.error?.message ?? "")))
  )
  return stateful ? undefined : `refused a schema-valid request: 400 ${code}`
}

/** Destructive operations run last, so the others meet the setup objects alive. */
const destructive = (op: Operation) => op.method === "DELETE"

const OPTIONS = { excludeTestServices: true, timeout: 300_000 } as const

layer(identityHttp(), OPTIONS)("every operation against its own schemas", (it) => {
  it.effect(
    "never 5xx, never 400 for a request its schemas accept",
    () =>
      Effect.gen(function* () {
        const adminEmail = uniqueEmail("admin")
        const admin = yield* adminLogin(adminEmail)
        const token = admin.accessToken
        const context = yield* Effect.context<HttpClient.HttpClient>()
        const created = <T>(r: Reply): T => {
          expect(r.status, r.text).toBeLessThan(300)
          return r.body as T
        }
        // Setup: a few real objects of each resource the paths name.
        const customers: Array<string> = []
        const addresses: Array<string> = []
        for (let i = 0; i < 3; i++) {
          const c = created<{ id: string }>(
            yield* call("POST", "/user", {
              token,
              json: { email: uniqueEmail("prop"), firstName: "Ada", lastName: "Lovelace" }
            })
          )
          customers.push(c.id)
          const a = created<{ id: string }>(
            yield* call("POST", `/user/${c.id}/address`, {
              token,
              json: { line1: "1 Main St", city: "Springfield", country: "US" }
            })
          )
          addresses.push(a.id)
        }
        const webhooks: Array<string> = []
        for (let i = 0; i < 3; i++) {
          const w = created<{ id: string }>(
            yield* call("POST", "/webhook", {
              token,
              // Port 9 (discard) on loopback: test sends are refused at once, nothing waits.
              json: { url: `http://127.0.0.1:9/hook/${i}`, events: ["customer.created"] }
            })
          )
          webhooks.push(w.id)
        }
        const notifications: Array<string> = []
        for (let i = 0; i < 3; i++) {
          const n = created<{ id: string }>(
            yield* call("POST", "/notification", {
              token,
              json: {
                channel: "push",
                to: `device-token-${i}-0123456789abcdef0123456789`,
                title: "Hello",
                body: "World",
                scheduledAt: new Date(Date.now() + 86_400_000).toISOString()
              }
            })
          )
          notifications.push(n.id)
        }
        const templates: Array<string> = []
        for (let i = 0; i < 3; i++) {
          const t = created<{ id: string }>(
            yield* call("POST", "/notification/template", {
              token,
              json: { name: `Template ${i}`, channel: "sms", body: "Hi {{ name | default: 'there' }}" }
            })
          )
          templates.push(t.id)
        }
        const apiKeys: Array<string> = []
        const clients: Array<string> = []
        for (let i = 0; i < 3; i++) {
          apiKeys.push(
            created<{ id: string }>(
              yield* call("POST", "/apikey", {
                token,
                json: { name: `key ${i}`, scopes: ["read:customers"] }
              })
            ).id
          )
          clients.push(
            created<{ id: string }>(
              yield* call("POST", "/oauth/clients", { token, json: { name: `client ${i}` } })
            ).id
          )
        }
        // Public events of the customers above (those already past the feed's horizon).
        const events = yield* call("GET", "/v1/events?limit=10", { token })
        const eventIds: ReadonlyArray<string> = (events.body?.data ?? []).map((e: { id: string }) => e.id)
        const products: Array<string> = []
        for (let i = 0; i < 3; i++) {
          products.push(
            created<{ id: string }>(
              yield* call("POST", "/v1/products", {
                token,
                json: {
                  name: `Product ${i}`,
                  price: { amount: 100, currency: "USD" },
                  inventory: { stockedQuantity: 5 }
                }
              })
            ).id
          )
        }
        const payments: Array<{ id: string; paymentIntentId: string }> = []
        for (const captureMethod of ["automatic", "manual", "automatic"]) {
          payments.push(
            created<{ id: string; paymentIntentId: string }>(
              yield* call("POST", "/v1/payments", {
                token,
                json: { amount: 5000, currency: "USD", paymentMethod: "pm_card_visa", captureMethod }
              })
            )
          )
        }
        const refunds = [
          created<{ id: string }>(
            yield* call("POST", `/v1/payments/${payments[0]?.id}/refund`, { token, json: { amount: 100 } })
          ).id
        ]
        const orders: Array<string> = []
        for (const payment of ["captured", "authorized", "captured"] as const) {
          orders.push((yield* placeOrder({ payment })).id)
        }
        const checkouts: Array<string> = []
        for (const productId of products) {
          checkouts.push(
            created<{ id: string }>(
              yield* call("POST", "/v1/checkouts", {
                token,
                json: { email: "buyer@example.com", lineItems: [{ productId, quantity: 1 }] }
              })
            ).id
          )
        }
        const recurring = created<{ id: string }>(
          yield* call("POST", "/v1/products", {
            token,
            json: {
              name: "Plan",
              price: { amount: 500, currency: "USD", type: "recurring", recurring: { interval: "month" } }
            }
          })
        ).id
        const subscriptions: Array<string> = []
        const invoices: Array<string> = []
        for (const customerId of customers.slice(0, 2)) {
          const sub = created<{ id: string; latestInvoice: { id: string } }>(
            yield* call("POST", "/v1/subscriptions", {
              token,
              json: { customerId, productId: recurring, paymentMethod: "pm_card_visa" }
            })
          )
          subscriptions.push(sub.id)
          invoices.push(sub.latestInvoice.id)
        }
        const clocks: Array<string> = []
        for (let i = 0; i < 3; i++) {
          clocks.push(
            created<{ id: string }>(
              yield* call("POST", "/v1/test/clocks", { token, json: { frozenTime: "2030-01-01T00:00:00Z" } })
            ).id
          )
        }
        const known: Known = {
          "/user:id": customers,
          "/user:address_id": addresses,
          "/webhook:id": webhooks,
          "/v1/webhooks:id": webhooks,
          "/v1/events:id": eventIds,
          "/notification:id": notifications,
          "/notification/template:id": templates,
          "/apikey:id": apiKeys,
          "/oauth/clients:id": clients,
          "/v1/products:id": products,
          "/v1/payments:id": payments.map((p) => p.id),
          "/v1/payment-intents:id": payments.map((p) => p.paymentIntentId),
          "/v1/test/payment-intents:id": payments.map((p) => p.paymentIntentId),
          "/v1/refunds:id": refunds,
          "/v1/orders:id": orders,
          "/v1/checkouts:id": checkouts,
          "/v1/subscriptions:id": subscriptions,
          "/v1/invoices:id": invoices,
          "/v1/test/clocks:id": clocks
        }

        const ordered = [...operations.filter((op) => !destructive(op)), ...operations.filter(destructive)]
        const failures: Array<string> = []
        const refused: Array<string> = []
        let cases = 0
        for (const op of ordered) {
          const started = Date.now()
          const before = cases
          const arbitrary = requestArbitrary(op, known)
          const details = yield* Effect.promise(() =>
            fc.check(
              fc.asyncProperty(arbitrary, async (request) => {
                cases++
                // Logout revokes the token it is sent with: each one gets a session of its own.
                const credential =
                  op.name === "account.logout"
                    ? (
                        await Effect.runPromise(
                          call("POST", "/auth/login", {
                            json: { email: adminEmail, password: PASSWORD }
                          }).pipe(Effect.provide(context))
                        )
                      ).body?.accessToken
                    : token
                const reply = await Effect.runPromise(
                  send(op, request, credential).pipe(Effect.provide(context))
                )
                const problem = violation(op, reply)
                if (problem !== undefined && COLLECT) {
                  refused.push(
                    `${op.name} ${op.method} ${request.path}: ${problem} ${reply.text.slice(0, 300)}`
                  )
                  return true
                }
                if (problem !== undefined) throw new Error(`${problem}: ${reply.text.slice(0, 500)}`)
                return true
              }),
              { seed: SEED, numRuns: RUNS }
            )
          )
          if (process.env.SCHEMA_PROPERTY_VERBOSE === "1")
            console.info(`${op.name}: ${cases - before} requests in ${Date.now() - started} ms`)
          if (details.failed)
            failures.push(`${op.name} (${op.method} ${op.path}):\n${fc.defaultReportMessage(details) ?? ""}`)
        }
        console.info(
          `schema property: ${cases} requests over ${operations.length} operations (${RUNS} runs each, seed ${SEED})`
        )
        if (COLLECT) {
          console.info(`refused or 5xx: ${refused.length}\n${refused.join("\n")}`)
        }
        expect(failures, failures.join("\n\n")).toEqual([])
        expect(refused, refused.join("\n")).toEqual([])
      }),
    300_000
  )
})

describe("the document states the same rules", () => {
  const spec = OpenApi.fromApi(Api)
  const parameter = (path: string, method: "get" | "post", name: string) => {
    const operation = spec.paths[path]?.[method]
    return operation?.parameters.find((p) => p.name === name)?.schema
  }

  plain("integer query parameters are integers with their bounds (generated clients take numbers)", () => {
    for (const path of ["/user", "/notification", "/webhook", "/apikey", "/oauth/clients"]) {
      expect(parameter(path, "get", "page"), path).toMatchObject({
        type: "integer",
        minimum: 1,
        maximum: 1_000_000,
        default: 1
      })
      expect(parameter(path, "get", "display"), path).toMatchObject({
        type: "integer",
        minimum: 1,
        maximum: 100,
        default: 20
      })
    }
    expect(parameter("/webhook/{id}/deliveries", "get", "display")).toMatchObject({
      type: "integer",
      minimum: 1,
      maximum: 100
    })
    expect(parameter("/v1/webhooks", "get", "limit")).toMatchObject({
      type: "integer",
      minimum: 1,
      maximum: 100,
      default: 10
    })
  })

  plain("request fields carry the limits their checks enforce", () => {
    const body = (path: string, method: "post" | "put") =>
      JSON.parse(JSON.stringify(spec.paths[path]?.[method]?.requestBody?.content["application/json"]?.schema))
    const register = body("/auth/register", "post")
    expect(register.properties.password).toMatchObject({ minLength: 8, maxLength: 128 })
    expect(register.properties.firstName).toMatchObject({ minLength: 1, maxLength: 100 })
    expect(register.properties.email).toMatchObject({ maxLength: 254 })
    expect(typeof register.properties.email.pattern).toBe("string")
    const webhook = body("/webhook", "post")
    expect(webhook.properties.url).toMatchObject({ maxLength: 2048 })
    expect(webhook.properties.events).toMatchObject({ minItems: 1, items: { enum: expect.any(Array) } })
    expect(body("/user/{id}/address", "post").properties.country.enum).toContain("US")
    expect(body("/notification", "post").anyOf).toHaveLength(4)
  })
})
