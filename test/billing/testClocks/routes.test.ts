/**
 * `/v1/test/clocks` over real HTTP (issue #21 item 4): every route and its errors — create, get,
 * list (the /v1 list conventions), delete (Stripe's deleted object), advance (forward only) —, who
 * may call them (staff: admin or `read:`/`write:subscriptions` keys; shoppers 403; no credential
 * 401); customers created with and without `testClockId`; and, with the Stripe processor, every
 * route answering 404 and `testClockId` refused. (What an advance runs: advance.test.ts.)
 */
import { layer } from "@effect/vitest"
import { Effect, Layer, Logger, LogLevel, Option, Redacted } from "effect"
import { expect } from "vitest"
import { TestClocksProjection } from "../../../src/billing/testClocks/projection.js"
import { makeAppConfig } from "../../../src/config.js"
import { CustomersProjection } from "../../../src/customers/projection.js"
import { rebuildProjection } from "../../../src/processors/Rebuild.js"
import { createCustomer, getCustomer, NEW_RECORD, registeredShopper } from "../../support/customers.js"
import { rowsOf } from "../../support/database.js"
import { call, expectError, IdentityHttp, identityHttp, uniqueEmail } from "../../support/identity.js"
import { ok, staffToken } from "../../support/payments.js"

const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
const GHOST = "clock_01jd4x8m6ffq2b3n5r7t9v1w3y"
const T0 = "2031-05-01T12:00:00.000Z"

const createClock = (token: string, json: Record<string, unknown>) =>
  call("POST", "/v1/test/clocks", { token, json })

const apiKey = (token: string, scopes: ReadonlyArray<string>) =>
  Effect.map(
    call("POST", "/apikey", { token, json: { name: `clocks ${scopes.join(" ")}`, scopes } }),
    (r) => {
      expect(r.status, r.text).toBe(201)
      return String(r.body.key)
    }
  )

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("test clocks over HTTP", (it) => {
  it.effect("create 201, get, advance 200, delete: Stripe's shapes in camelCase", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const created = ok(201)(
        yield* createClock(token, { frozenTime: "2031-05-01T14:00:00+02:00", name: " Trial run " })
      )
      expect(created).toEqual({
        object: "test_clock",
        id: expect.stringMatching(/^clock_[0-9a-z]{26}$/),
        frozenTime: T0,
        name: "Trial run",
        status: "ready",
        createdAt: expect.stringMatching(ISO_MS)
      })
      expect(ok(200)(yield* call("GET", `/v1/test/clocks/${created.id}`, { token }))).toEqual(created)
      const unnamed = ok(201)(yield* createClock(token, { frozenTime: "2031-05-01" }))
      expect(unnamed).toMatchObject({ name: null, frozenTime: "2031-05-01T00:00:00.000Z", status: "ready" })

      const advanced = yield* call("POST", `/v1/test/clocks/${created.id}/advance`, {
        token,
        json: { frozenTime: "2031-06-01T12:00:00Z" }
      })
      expect(ok(200)(advanced)).toEqual({ ...created, frozenTime: "2031-06-01T12:00:00.000Z" })
      expect(ok(200)(yield* call("GET", `/v1/test/clocks/${created.id}`, { token })).frozenTime).toBe(
        "2031-06-01T12:00:00.000Z"
      )

      const deleted = yield* call("DELETE", `/v1/test/clocks/${created.id}`, { token })
      expect(ok(200)(deleted)).toEqual({ id: created.id, object: "test_clock", deleted: true })
      expectError(
        yield* call("GET", `/v1/test/clocks/${created.id}`, { token }),
        404,
        "resource_missing",
        "id"
      )
    })
  )

  it.effect("bad input: the one error body with param, nothing created", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const before = ok(200)(yield* call("GET", "/v1/test/clocks?limit=100", { token })).data.length
      expectError(yield* createClock(token, {}), 400, "parameter_missing", "frozenTime")
      expectError(
        yield* createClock(token, { frozenTime: "tomorrow" }),
        400,
        "parameter_invalid",
        "frozenTime"
      )
      expectError(
        yield* createClock(token, { frozenTime: "2031-02-30" }),
        400,
        "parameter_invalid",
        "frozenTime"
      )
      expectError(
        yield* createClock(token, { frozenTime: 1_900_000_000 }),
        400,
        "parameter_invalid",
        "frozenTime"
      )
      // Its subscriptions' periods run years ahead of it: a clock stops short of 9900 (year 10000 has
      // no timestamp here; such a period once failed a usage record with a 500).
      expectError(
        yield* createClock(token, { frozenTime: "9999-12-31T23:59:59Z" }),
        400,
        "parameter_invalid",
        "frozenTime"
      )
      expectError(yield* createClock(token, { frozenTime: T0, name: "" }), 400, "parameter_invalid", "name")
      expectError(
        yield* createClock(token, { frozenTime: T0, name: "x".repeat(301) }),
        400,
        "parameter_invalid",
        "name"
      )
      expect(ok(200)(yield* call("GET", "/v1/test/clocks?limit=100", { token })).data.length).toBe(before)

      const clock = ok(201)(yield* createClock(token, { frozenTime: T0 }))
      const advance = (json: unknown) => call("POST", `/v1/test/clocks/${clock.id}/advance`, { token, json })
      expectError(yield* advance({}), 400, "parameter_missing", "frozenTime")
      expectError(yield* advance({ frozenTime: "soon" }), 400, "parameter_invalid", "frozenTime")
      expectError(yield* advance({ frozenTime: T0 }), 400, "parameter_invalid", "frozenTime")
      expectError(yield* advance({ frozenTime: "9900-01-01" }), 400, "parameter_invalid", "frozenTime")
      expectError(
        yield* advance({ frozenTime: "2031-04-30T12:00:00Z" }),
        400,
        "parameter_invalid",
        "frozenTime"
      )
      expect(ok(200)(yield* call("GET", `/v1/test/clocks/${clock.id}`, { token }))).toEqual(clock)

      for (const id of [GHOST, "clock_nope", "cus_01jd4x8m6ffq2b3n5r7t9v1w3y"]) {
        expectError(yield* call("GET", `/v1/test/clocks/${id}`, { token }), 404, "resource_missing", "id")
        expectError(yield* call("DELETE", `/v1/test/clocks/${id}`, { token }), 404, "resource_missing", "id")
        expectError(
          yield* call("POST", `/v1/test/clocks/${id}/advance`, { token, json: { frozenTime: "2040-01-01" } }),
          404,
          "resource_missing",
          "id"
        )
      }
    })
  )

  it.effect("list: newest first, limit, startingAfter / endingBefore, bad cursors 400", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const ids: Array<string> = []
      for (let i = 0; i < 4; i++)
        ids.push(ok(201)(yield* createClock(token, { frozenTime: T0, name: `l${i}` })).id)
      const newest = [...ids].reverse()
      const first = ok(200)(yield* call("GET", "/v1/test/clocks?limit=2", { token }))
      expect(first).toMatchObject({ object: "list", hasMore: true })
      expect(first.data.map((c: { id: string }) => c.id)).toEqual(newest.slice(0, 2))
      const second = ok(200)(
        yield* call("GET", `/v1/test/clocks?limit=2&startingAfter=${newest[1]}`, { token })
      )
      expect(second.data.map((c: { id: string }) => c.id)).toEqual(newest.slice(2, 4))
      const back = ok(200)(yield* call("GET", `/v1/test/clocks?limit=2&endingBefore=${newest[2]}`, { token }))
      expect(back.data.map((c: { id: string }) => c.id)).toEqual(newest.slice(0, 2))
      expectError(yield* call("GET", "/v1/test/clocks?limit=0", { token }), 400, "parameter_invalid", "limit")
      expectError(
        yield* call("GET", "/v1/test/clocks?startingAfter=cus_01jd4x8m6ffq2b3n5r7t9v1w3y", { token }),
        400,
        "parameter_invalid",
        "startingAfter"
      )
      expectError(
        yield* call("GET", `/v1/test/clocks?startingAfter=${GHOST}`, { token }),
        400,
        "resource_missing",
        "startingAfter"
      )
    })
  )

  it.effect("staff only: admin and subscriptions-scoped keys; shoppers 403; no credential 401", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const shopper = yield* registeredShopper()
      const writer = yield* apiKey(token, ["write:subscriptions"])
      const reader = yield* apiKey(token, ["read:subscriptions"])
      const other = yield* apiKey(token, ["write:customers", "read:customers"])
      const clock = ok(201)(yield* createClock(writer, { frozenTime: T0 }))
      expect(ok(200)(yield* call("GET", `/v1/test/clocks/${clock.id}`, { token: reader })).id).toBe(clock.id)
      expect(ok(200)(yield* call("GET", "/v1/test/clocks", { token: reader })).object).toBe("list")
      expectError(yield* createClock(reader, { frozenTime: T0 }), 403, "insufficient_scope")
      expectError(yield* createClock(other, { frozenTime: T0 }), 403, "insufficient_scope")
      expectError(
        yield* call("GET", `/v1/test/clocks/${clock.id}`, { token: other }),
        403,
        "insufficient_scope"
      )
      // Shoppers hold read:/write:subscriptions (their own subscriptions), not test clocks.
      for (const [method, path] of [
        ["POST", "/v1/test/clocks"],
        ["GET", "/v1/test/clocks"],
        ["GET", `/v1/test/clocks/${clock.id}`],
        ["DELETE", `/v1/test/clocks/${clock.id}`],
        ["POST", `/v1/test/clocks/${clock.id}/advance`]
      ] as const) {
        const json = method === "POST" ? { frozenTime: "2040-01-01" } : undefined
        expect((yield* call(method, path, { token: shopper.accessToken, json })).status).toBe(403)
        expect((yield* call(method, path, { json })).status).toBe(401)
      }
      expect(ok(200)(yield* call("GET", `/v1/test/clocks/${clock.id}`, { token })).frozenTime).toBe(T0)
    })
  )

  it.effect(
    "customers: testClockId null by default, set at creation (GET shows it), an unknown clock 400",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const plain = yield* createCustomer(token)
        expect(yield* getCustomer(token, plain.id)).toMatchObject({ ...NEW_RECORD, testClockId: null })

        const clock = ok(201)(yield* createClock(token, { frozenTime: T0 }))
        // POST /user answers the spec's reduced shape; the customer object shows the clock.
        const onClock = yield* createCustomer(token, { testClockId: clock.id })
        expect(Object.keys(onClock).sort()).toEqual(["createdAt", "email", "firstName", "id", "lastName"])
        expect(yield* getCustomer(token, onClock.id)).toMatchObject({ testClockId: clock.id })
        const list = ok(200)(yield* call("GET", `/user?q=${encodeURIComponent(onClock.email)}`, { token }))
        expect(list.models.map((c: { id: string }) => c.id)).toEqual([onClock.id])

        const email = uniqueEmail("refused")
        const refuse = (testClockId: unknown) =>
          call("POST", "/user", { token, json: { email, firstName: "A", lastName: "B", testClockId } })
        expectError(yield* refuse(GHOST), 400, "resource_missing", "testClockId")
        expectError(yield* refuse("clock_nope"), 400, "parameter_invalid", "testClockId")
        expectError(yield* refuse(42), 400, "parameter_invalid", "testClockId")
        // Nothing was created: the address is still free.
        ok(201)(yield* call("POST", "/user", { token, json: { email, firstName: "A", lastName: "B" } }))
      })
  )
})

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("test clocks read model", (it) => {
  it.effect("a rebuild from the log reproduces every row (created, advanced twice, deleted)", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const ids: Array<string> = []
      for (let i = 0; i < 3; i++)
        ids.push(ok(201)(yield* createClock(token, { frozenTime: T0, name: `r${i}` })).id)
      for (const day of ["2031-06-01", "2031-07-01"])
        ok(200)(
          yield* call("POST", `/v1/test/clocks/${ids[0]}/advance`, { token, json: { frozenTime: day } })
        )
      ok(200)(yield* call("DELETE", `/v1/test/clocks/${ids[1]}`, { token }))
      const onClock = yield* createCustomer(token, { testClockId: ids[2] })
      const before = yield* rowsOf("billing.test_clocks", "clock_id")
      expect(before.map((r) => r.clock_id)).toEqual(expect.arrayContaining([ids[0], ids[2]]))
      expect(before.map((r) => r.clock_id)).not.toContain(ids[1])
      const report = yield* rebuildProjection(TestClocksProjection, { batchSize: 2 })
      expect(report.events).toBeGreaterThanOrEqual(7)
      expect(yield* rowsOf("billing.test_clocks", "clock_id")).toEqual(before)
      const customers = yield* rowsOf("customers.customers", "customer_id")
      yield* rebuildProjection(CustomersProjection, { batchSize: 5 })
      expect(yield* rowsOf("customers.customers", "customer_id")).toEqual(customers)
      expect(customers.find((r) => r.customer_id === onClock.id)?.test_clock_id).toBe(ids[2])
      expect(ok(200)(yield* call("GET", `/v1/test/clocks/${ids[0]}`, { token })).frozenTime).toBe(
        "2031-07-01T00:00:00.000Z"
      )
    })
  )
})

/** `PAYMENT_PROCESSOR=stripe` (never called here): test clocks do not exist. */
const StripeConfigured = identityHttp({
  payments: {
    ...makeAppConfig().payments,
    processor: "stripe",
    stripe: Option.some({
      secretKey: Redacted.make("sk_test_clocks_not_called"),
      webhookSecret: Option.none(),
      apiBase: Option.some(new URL("http://127.0.0.1:9"))
    })
  }
}).pipe(Layer.provideMerge(Logger.minimumLogLevel(LogLevel.Warning)))

layer(StripeConfigured, { excludeTestServices: true, timeout: 120_000 })("test clocks with Stripe", (it) => {
  it.effect("every route answers 404 and testClockId is refused", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      for (const [method, path] of [
        ["POST", "/v1/test/clocks"],
        ["GET", "/v1/test/clocks"],
        ["GET", `/v1/test/clocks/${GHOST}`],
        ["DELETE", `/v1/test/clocks/${GHOST}`],
        ["POST", `/v1/test/clocks/${GHOST}/advance`]
      ] as const) {
        const json = method === "POST" ? { frozenTime: "2040-01-01" } : undefined
        const reply = yield* call(method, path, { token, json })
        expectError(reply, 404, "resource_missing")
        expect(reply.body.error.message).toContain("PAYMENT_PROCESSOR=test")
      }
      const refused = yield* call("POST", "/user", {
        token,
        json: { email: uniqueEmail("stripe"), firstName: "A", lastName: "B", testClockId: GHOST }
      })
      expectError(refused, 400, "parameter_invalid", "testClockId")
      const plain = yield* createCustomer(token)
      expect((yield* getCustomer(token, plain.id)).testClockId).toBe(null)
    })
  )
})
