/**
 * The customer record over HTTP as staff see it (spec §2.4, §4.2; design/API.md "Gaps in the base
 * surface, filled"): create, read, partial update, addresses, tags, and Idempotency-Key on create.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import * as Ids from "../../src/kernel/Ids.js"
import {
  adminToken,
  createCustomer,
  getCustomer,
  listCustomers,
  NEW_RECORD,
  uniqueTag
} from "../support/customers.js"
import {
  adminLogin,
  call,
  expectError,
  IdentityHttp,
  PASSWORD,
  registerShopper,
  uniqueEmail
} from "../support/identity.js"

const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/

const countEvents = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM event_store.events`, (rows) => rows[0]?.n ?? 0)
)

const address = (fields: Record<string, unknown> = {}) => ({
  line1: "1 Main St",
  city: "Springfield",
  country: "US",
  ...fields
})

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("customers over HTTP", (it) => {
  // --- POST /user --------------------------------------------------------------------------------

  it.effect("POST /user: 201 with exactly id, email, firstName, lastName, createdAt", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const email = uniqueEmail("create")
      const r = yield* call("POST", "/user", {
        token,
        json: { email: `  ${email}  `, firstName: "  Grace ", lastName: "Hopper" }
      })
      expect(r.status, r.text).toBe(201)
      expect(Object.keys(r.body).sort()).toEqual(["createdAt", "email", "firstName", "id", "lastName"])
      expect(r.body).toEqual({
        id: expect.stringMatching(/^cus_[0-9a-z]{26}$/),
        email,
        firstName: "Grace",
        lastName: "Hopper",
        createdAt: expect.stringMatching(ISO_MS)
      })
      expect(Math.abs(Date.parse(r.body.createdAt) - Date.now())).toBeLessThan(60_000)
      const got = yield* getCustomer(token, r.body.id)
      expect(got).toEqual({
        id: r.body.id,
        email,
        firstName: "Grace",
        lastName: "Hopper",
        ...NEW_RECORD,
        hasAccount: false,
        testClockId: null,
        createdAt: r.body.createdAt,
        updatedAt: r.body.createdAt
      })
    })
  )

  it.effect("POST /user stores phone, tags (duplicates dropped, order kept) and metadata", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const created = yield* createCustomer(token, {
        phone: " +1 (415) 555-0123 ",
        tags: ["vip", "wholesale", "vip", "b2b"],
        metadata: { crm: "A-17", score: 3, nested: { a: [1, 2] }, flag: true }
      })
      const got = yield* getCustomer(token, created.id)
      expect(got.phone).toBe("+1 (415) 555-0123")
      expect(got.tags).toEqual(["vip", "wholesale", "b2b"])
      expect(got.metadata).toEqual({ crm: "A-17", score: 3, nested: { a: [1, 2] }, flag: true })
      expect(got.email).toBe(created.email)
    })
  )

  it.effect("POST /user: an email already used by a customer, in any spelling, is 409 on email", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const email = uniqueEmail("dup")
      yield* createCustomer(token, { email })
      for (const spelling of [email, email.toUpperCase(), `  ${email}\t`, ` ${email.toUpperCase()} `]) {
        const r = yield* call("POST", "/user", {
          token,
          json: { email: spelling, firstName: "Other", lastName: "Person" }
        })
        expectError(r, 409, "resource_already_exists", "email")
      }
    })
  )

  it.effect("POST /user: an email used by a registered shopper or an admin login is 409", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const shopperEmail = uniqueEmail("shopper")
      yield* registerShopper(shopperEmail)
      const adminEmail = uniqueEmail("staff")
      yield* adminLogin(adminEmail)
      for (const email of [shopperEmail, adminEmail, adminEmail.toUpperCase()]) {
        const r = yield* call("POST", "/user", { token, json: { email, firstName: "A", lastName: "B" } })
        expectError(r, 409, "resource_already_exists", "email")
      }
    })
  )

  it.effect("one address, one person: registering with a staff-created customer's email is 409", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const customer = yield* createCustomer(token)
      expectError(
        yield* call("POST", "/auth/register", {
          json: {
            email: ` ${customer.email.toUpperCase()}`,
            password: PASSWORD,
            firstName: "A",
            lastName: "B"
          }
        }),
        409,
        "resource_already_exists",
        "email"
      )
      // The record was not adopted by anyone.
      expect((yield* getCustomer(token, customer.id)).hasAccount).toBe(false)
    })
  )

  it.effect("POST /user: concurrent creations of one address give one 201 and 409s, never a 500", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const email = uniqueEmail("race")
      const tag = uniqueTag("race")
      const replies = yield* Effect.all(
        Array.from({ length: 6 }, (_, i) =>
          call("POST", "/user", {
            token,
            json: {
              email: i % 2 === 0 ? email : email.toUpperCase(),
              firstName: "R",
              lastName: "R",
              tags: [tag]
            }
          })
        ),
        { concurrency: "unbounded" }
      )
      expect(replies.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409, 409])
      for (const r of replies.filter((r) => r.status === 409))
        expectError(r, 409, "resource_already_exists", "email")
      expect((yield* listCustomers(token, { tag })).body.count).toBe(1)
      // A registration racing staff creations of one address: exactly one wins as well.
      const other = uniqueEmail("race2")
      const mixed = yield* Effect.all(
        [
          call("POST", "/auth/register", {
            json: { email: other, password: PASSWORD, firstName: "a", lastName: "b" }
          }),
          call("POST", "/user", { token, json: { email: other, firstName: "R", lastName: "R" } }),
          call("POST", "/auth/register", {
            json: { email: other, password: PASSWORD, firstName: "a", lastName: "b" }
          }),
          call("POST", "/user", { token, json: { email: other, firstName: "R", lastName: "R" } })
        ],
        { concurrency: "unbounded" }
      )
      expect(mixed.map((r) => r.status).sort()).toEqual([201, 409, 409, 409])
      expect((yield* listCustomers(token, { q: other })).body.count).toBe(1)
      // With an Idempotency-Key each, the request's transaction is the middleware's (it stores the
      // answer in it): still one 201 and clean 409s, never a 500.
      const keyed = uniqueEmail("keyed")
      const keyedReplies = yield* Effect.all(
        Array.from({ length: 8 }, (_, i) =>
          call("POST", "/user", {
            token,
            headers: { "idempotency-key": `${keyed}-${i}` },
            json: { email: keyed, firstName: "K", lastName: "K" }
          })
        ),
        { concurrency: "unbounded" }
      )
      expect(keyedReplies.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409, 409, 409, 409])
      for (const r of keyedReplies.filter((r) => r.status === 409))
        expectError(r, 409, "resource_already_exists", "email")
      expect((yield* listCustomers(token, { q: keyed })).body.count).toBe(1)
    })
  )

  it.effect("POST /user: a missing required field is 400 parameter_missing naming it", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const full = { email: uniqueEmail(), firstName: "A", lastName: "B" }
      for (const field of ["email", "firstName", "lastName"] as const) {
        const { [field]: _dropped, ...rest } = full
        const r = yield* call("POST", "/user", { token, json: rest })
        expectError(r, 400, "parameter_missing", field)
      }
      // No body at all.
      expect((yield* call("POST", "/user", { token })).status).toBe(400)
    })
  )

  it.effect("POST /user: invalid values are 400 parameter_invalid on the right param, nothing written", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const email = uniqueEmail("invalid")
      const base = { email, firstName: "Ada", lastName: "Lovelace" }
      const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
        [{ email: "not-an-email" }, "email"],
        [{ email: "a@b" }, "email"],
        [{ email: 42 }, "email"],
        [{ firstName: "" }, "firstName"],
        [{ firstName: "   " }, "firstName"],
        [{ lastName: "" }, "lastName"],
        [{ firstName: "x".repeat(101) }, "firstName"],
        [{ firstName: 5 }, "firstName"],
        [{ phone: "call me" }, "phone"],
        [{ phone: "12" }, "phone"],
        [{ phone: 4155550123 }, "phone"],
        [{ metadata: "text" }, "metadata"],
        [{ metadata: [1, 2] }, "metadata"],
        [{ metadata: 7 }, "metadata"],
        [{ metadata: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, i])) }, "metadata"],
        [{ metadata: { ["k".repeat(41)]: 1 } }, "metadata"],
        [{ metadata: { blob: "x".repeat(9 * 1024) } }, "metadata"],
        [{ tags: "vip" }, "tags"],
        [{ tags: Array.from({ length: 101 }, (_, i) => `t${i}`) }, "tags"],
        [{ tags: ["ok", "x".repeat(65)] }, "tags[1]"],
        [{ tags: [""] }, "tags[0]"]
      ]
      const before = yield* countEvents
      for (const [patch, param] of cases) {
        const r = yield* call("POST", "/user", { token, json: { ...base, ...patch } })
        expectError(r, 400, "parameter_invalid", param)
      }
      expect(yield* countEvents).toBe(before)
      // The limits themselves are fine.
      const atLimits = yield* createCustomer(token, {
        ...base,
        tags: Array.from({ length: 100 }, (_, i) => `${i}-${"x".repeat(60)}`),
        metadata: Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`${"k".repeat(38)}${i}`, i]))
      })
      // The email was still free after all those 400s.
      expect(atLimits.email).toBe(email)
      const got = yield* getCustomer(token, atLimits.id)
      expect(got.tags).toHaveLength(100)
      expect(Object.keys(got.metadata)).toHaveLength(50)
    })
  )

  // --- GET /user/:id -----------------------------------------------------------------------------

  it.effect("GET /user/:id: unknown, malformed and other-prefix ids are 404 resource_missing", () =>
    Effect.gen(function* () {
      const admin = yield* adminLogin()
      const unknown = yield* Ids.make("cus")
      const address = yield* Ids.make("adr")
      for (const id of [unknown, "cus_nope", "nothing", admin.userId, address, "me%20", "%00"]) {
        const r = yield* call("GET", `/user/${id}`, { token: admin.accessToken })
        expect(r.status, `${id}: ${r.text}`).toBe(r.text.includes("NUL") ? 400 : 404)
        if (r.status === 404) expectError(r, 404, "resource_missing")
      }
      // A shopper's login id is not their customer id.
      const shopper = yield* registerShopper()
      expectError(
        yield* call("GET", `/user/${shopper.userId}`, { token: admin.accessToken }),
        404,
        "resource_missing",
        "id"
      )
    })
  )

  it.effect("GET /user/:id without a credential is 401, with a key lacking read:customers 403", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const created = yield* createCustomer(token)
      expectError(yield* call("GET", `/user/${created.id}`), 401, "missing_credentials")
      const key = yield* call("POST", "/apikey", {
        token,
        json: { name: "events only", scopes: ["read:events"] }
      })
      expect(key.status, key.text).toBe(201)
      expectError(
        yield* call("GET", `/user/${created.id}`, { token: key.body.key }),
        403,
        "insufficient_scope"
      )
      const reader = yield* call("POST", "/apikey", {
        token,
        json: { name: "reader", scopes: ["read:customers"] }
      })
      expect((yield* call("GET", `/user/${created.id}`, { token: reader.body.key })).status).toBe(200)
      expectError(
        yield* call("PUT", `/user/${created.id}`, { token: reader.body.key, json: { firstName: "X" } }),
        403,
        "insufficient_scope"
      )
      // An API key is a staff credential: with write:customers it creates, edits and tags.
      const writer = yield* call("POST", "/apikey", {
        token,
        json: { name: "writer", scopes: ["read:customers", "write:customers"] }
      })
      const byKey = yield* createCustomer(writer.body.key)
      const tagged = yield* call("POST", `/user/${byKey.id}/tag`, {
        token: writer.body.key,
        json: { tags: ["k"] }
      })
      expect(tagged.status, tagged.text).toBe(200)
      expect(tagged.body.tags).toEqual(["k"])
      // …but it has no customer record of its own.
      expectError(yield* call("GET", "/user/me", { token: writer.body.key }), 404, "resource_missing", "id")
    })
  )

  // --- PUT /user/:id -----------------------------------------------------------------------------

  it.effect("PUT /user/:id changes only the fields sent and returns the full customer", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const created = yield* createCustomer(token, {
        phone: "+14155550100",
        tags: ["a", "b"],
        metadata: { keep: 1, drop: 2 }
      })
      const original = yield* getCustomer(token, created.id)
      const steps: ReadonlyArray<readonly [Record<string, unknown>, Record<string, unknown>]> = [
        [{ firstName: " Amazing " }, { firstName: "Amazing" }],
        [{ lastName: "Grace" }, { lastName: "Grace" }],
        [{ phone: "+44 20 7946 0958" }, { phone: "+44 20 7946 0958" }],
        [{ phone: null }, { phone: null }],
        [{ tags: ["c", "a", "c"] }, { tags: ["c", "a"] }],
        [{ tags: [] }, { tags: [] }],
        [{ metadata: { drop: null, added: "x" } }, { metadata: { keep: 1, added: "x" } }],
        [{ metadata: { keep: { deep: true } } }, { metadata: { keep: { deep: true }, added: "x" } }],
        [{ metadata: null }, { metadata: {} }],
        [{ active: false }, { active: false }],
        [{ active: false }, { active: false }],
        [{ active: true }, { active: true }]
      ]
      let expected = original
      for (const [patch, change] of steps) {
        const r = yield* call("PUT", `/user/${created.id}`, { token, json: patch })
        expect(r.status, `${JSON.stringify(patch)}: ${r.text}`).toBe(200)
        expected = { ...expected, ...change }
        expect(r.body).toEqual({ ...expected, updatedAt: expect.stringMatching(ISO_MS) })
        expect(Date.parse(r.body.updatedAt)).toBeGreaterThanOrEqual(Date.parse(expected.updatedAt))
        expected = { ...expected, updatedAt: r.body.updatedAt }
        expect(yield* getCustomer(token, created.id)).toEqual(r.body)
      }
      // An empty patch is a no-op that still answers the customer.
      const noop = yield* call("PUT", `/user/${created.id}`, { token, json: {} })
      expect(noop.status).toBe(200)
      expect(noop.body).toEqual(expected)
      expect(noop.body.createdAt).toBe(original.createdAt)
    })
  )

  it.effect("PUT /user/:id email: another holder's address is 409; its own in another case is fine", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const taken = yield* createCustomer(token)
      const shopperEmail = uniqueEmail("holder")
      yield* registerShopper(shopperEmail)
      const target = yield* createCustomer(token)
      const before = yield* getCustomer(token, target.id)
      for (const email of [taken.email, ` ${taken.email.toUpperCase()} `, shopperEmail]) {
        const r = yield* call("PUT", `/user/${target.id}`, { token, json: { email, firstName: "Changed" } })
        expectError(r, 409, "resource_already_exists", "email")
      }
      expect(yield* getCustomer(token, target.id)).toEqual(before)
      const recased = yield* call("PUT", `/user/${target.id}`, {
        token,
        json: { email: target.email.toUpperCase() }
      })
      expect(recased.status, recased.text).toBe(200)
      expect(recased.body.email).toBe(target.email.toUpperCase())
      // The old address is free once a customer moved away from it.
      const moved = uniqueEmail("moved")
      expect((yield* call("PUT", `/user/${target.id}`, { token, json: { email: moved } })).body.email).toBe(
        moved
      )
      yield* createCustomer(token, { email: target.email })
    })
  )

  it.effect("PUT /user/:id: concurrent edits of one customer all land; a contested email goes to one", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const customer = yield* createCustomer(token)
      const edits = yield* Effect.all(
        Array.from({ length: 8 }, (_, i) =>
          call("PUT", `/user/${customer.id}`, { token, json: { metadata: { [`k${i}`]: i } } })
        ),
        { concurrency: "unbounded" }
      )
      expect(edits.map((r) => r.status)).toEqual(Array(8).fill(200))
      const addresses = yield* Effect.all(
        Array.from({ length: 8 }, (_, i) =>
          call("POST", `/user/${customer.id}/address`, { token, json: address({ line1: `${i} Race St` }) })
        ),
        { concurrency: "unbounded" }
      )
      expect(addresses.map((r) => r.status)).toEqual(Array(8).fill(201))
      const got = yield* getCustomer(token, customer.id)
      expect(got.metadata).toEqual(Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`k${i}`, i])))
      expect(got.addresses).toHaveLength(8)
      expect(got.addresses.filter((a: { isDefault: boolean }) => a.isDefault)).toHaveLength(1)
      expect(new Set(got.addresses.map((a: { id: string }) => a.id))).toEqual(
        new Set(addresses.map((r) => r.body.id))
      )

      const target = uniqueEmail("contested")
      const contenders = [
        yield* createCustomer(token),
        yield* createCustomer(token),
        yield* createCustomer(token)
      ]
      const moves = yield* Effect.all(
        contenders.map((c) => call("PUT", `/user/${c.id}`, { token, json: { email: target } })),
        { concurrency: "unbounded" }
      )
      expect(moves.map((r) => r.status).sort()).toEqual([200, 409, 409])
      const emails = yield* Effect.forEach(contenders, (c) =>
        Effect.map(getCustomer(token, c.id), (g) => g.email)
      )
      expect(emails.filter((e) => e === target)).toHaveLength(1)
      // The same with an Idempotency-Key each: one 200 and clean 409s, never a 500.
      const keyedTarget = uniqueEmail("contested-keyed")
      const keyedMoves = yield* Effect.all(
        contenders.map((c, i) =>
          call("PUT", `/user/${c.id}`, {
            token,
            headers: { "idempotency-key": `${keyedTarget}-${i}` },
            json: { email: keyedTarget }
          })
        ),
        { concurrency: "unbounded" }
      )
      expect(keyedMoves.map((r) => r.status).sort()).toEqual([200, 409, 409])
    })
  )

  it.effect("PUT /user/:id ignores read-only fields (id, orderCount, hasAccount, createdAt…)", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const customer = yield* createCustomer(token)
      const before = yield* getCustomer(token, customer.id)
      const r = yield* call("PUT", `/user/${customer.id}`, {
        token,
        json: {
          id: "cus_other",
          orderCount: 5,
          totalSpent: 100,
          hasAccount: true,
          addresses: [{ line1: "x" }],
          createdAt: "2000-01-01T00:00:00.000Z",
          updatedAt: "2000-01-01T00:00:00.000Z"
        }
      })
      expect(r.status, r.text).toBe(200)
      expect(r.body).toEqual(before)
    })
  )

  it.effect("PUT /user/:id on a registered shopper moves their login email and name", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const oldEmail = uniqueEmail("login")
      const shopper = yield* registerShopper(oldEmail)
      const me = yield* call("GET", "/auth/me", { token: shopper.accessToken })
      const customerId: string = me.body.customerId
      expect((yield* getCustomer(token, customerId)).hasAccount).toBe(true)
      const newEmail = uniqueEmail("relogin")
      const r = yield* call("PUT", `/user/${customerId}`, {
        token,
        json: { email: newEmail, firstName: "Annie", lastName: "Leigh" }
      })
      expect(r.status, r.text).toBe(200)
      expect(r.body).toMatchObject({
        email: newEmail,
        firstName: "Annie",
        lastName: "Leigh",
        hasAccount: true
      })
      // The session in hand keeps working and reads the new profile.
      const after = yield* call("GET", "/auth/me", { token: shopper.accessToken })
      expect(after.status, after.text).toBe(200)
      expect(after.body).toMatchObject({ email: newEmail, firstName: "Annie", lastName: "Leigh", customerId })
      expectError(
        yield* call("POST", "/auth/login", { json: { email: oldEmail, password: PASSWORD } }),
        401,
        "invalid_credentials"
      )
      const login = yield* call("POST", "/auth/login", { json: { email: newEmail, password: PASSWORD } })
      expect(login.status, login.text).toBe(200)
      expect(login.body.userId).toBe(shopper.userId)
      // The old address is free for a new customer and a new registration alike.
      yield* createCustomer(token, { email: oldEmail })
      const reRegister = yield* call("POST", "/auth/register", {
        json: { email: newEmail, password: PASSWORD, firstName: "X", lastName: "Y" }
      })
      expectError(reRegister, 409, "resource_already_exists")
    })
  )

  it.effect("PUT /user/:id: unknown id 404; wrong types 400 with nothing changed", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const unknown = yield* Ids.make("cus")
      for (const id of [unknown, "cus_bad", "usr_01h2xcejqtf2nbrexx3vqjhp41"]) {
        expectError(
          yield* call("PUT", `/user/${id}`, { token, json: { firstName: "Nobody" } }),
          404,
          "resource_missing"
        )
      }
      const created = yield* createCustomer(token, { tags: ["keep"], metadata: { a: 1 } })
      const before = yield* getCustomer(token, created.id)
      const events = yield* countEvents
      const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
        [{ active: "no" }, "active"],
        [{ active: 0 }, "active"],
        [{ tags: "vip" }, "tags"],
        [{ tags: [1] }, "tags[0]"],
        [{ metadata: [1] }, "metadata"],
        [{ metadata: "x" }, "metadata"],
        [{ firstName: "" }, "firstName"],
        [{ firstName: null }, "firstName"],
        [{ email: "nope" }, "email"],
        [{ email: null }, "email"],
        [{ phone: "phone" }, "phone"],
        [{ tags: Array.from({ length: 101 }, (_, i) => `t${i}`) }, "tags"],
        [{ metadata: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, i])) }, "metadata"],
        // A valid field next to an invalid one changes nothing either.
        [{ firstName: "Valid", active: "yes" }, "active"]
      ]
      for (const [patch, param] of cases) {
        const r = yield* call("PUT", `/user/${created.id}`, { token, json: patch })
        expectError(r, 400, "parameter_invalid", param)
      }
      // The limits apply to the merged metadata: 50 keys there, one more is too many.
      const fill = Object.fromEntries(Array.from({ length: 49 }, (_, i) => [`m${i}`, i]))
      expect((yield* call("PUT", `/user/${created.id}`, { token, json: { metadata: fill } })).status).toBe(
        200
      )
      expectError(
        yield* call("PUT", `/user/${created.id}`, { token, json: { metadata: { one: 1 } } }),
        400,
        "parameter_invalid",
        "metadata"
      )
      // …but removing one in the same patch makes room.
      const swap = yield* call("PUT", `/user/${created.id}`, {
        token,
        json: { metadata: { a: null, one: 1 } }
      })
      expect(swap.status, swap.text).toBe(200)
      expect(Object.keys(swap.body.metadata)).toHaveLength(50)
      expect(swap.body.metadata.one).toBe(1)
      expect(swap.body.metadata.a).toBeUndefined()
      // Only the two successful updates wrote anything.
      expect(yield* countEvents).toBe(events + 2)
      expect({ ...(yield* getCustomer(token, created.id)), metadata: before.metadata, updatedAt: 0 }).toEqual(
        {
          ...before,
          updatedAt: 0
        }
      )
    })
  )

  // --- Addresses ---------------------------------------------------------------------------------

  it.effect("addresses: 201 with the address, first default, isDefault moves it, insertion order", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const customer = yield* createCustomer(token)
      const first = yield* call("POST", `/user/${customer.id}/address`, {
        token,
        json: {
          label: " Home ",
          line1: " 1 Main St ",
          city: "Springfield",
          state: "IL",
          postalCode: "62701",
          country: " us "
        }
      })
      expect(first.status, first.text).toBe(201)
      expect(first.body).toEqual({
        id: expect.stringMatching(/^adr_[0-9a-z]{26}$/),
        label: "Home",
        line1: "1 Main St",
        city: "Springfield",
        state: "IL",
        postalCode: "62701",
        country: "US",
        isDefault: true
      })
      const second = yield* call("POST", `/user/${customer.id}/address`, {
        token,
        json: address({ line1: "2 Side St", country: "de", isDefault: false })
      })
      expect(second.status, second.text).toBe(201)
      expect(second.body).toMatchObject({
        label: null,
        state: null,
        postalCode: null,
        country: "DE",
        isDefault: false
      })
      const third = yield* call("POST", `/user/${customer.id}/address`, {
        token,
        json: address({ line1: "3 Third Ave", country: "Fr", isDefault: true })
      })
      expect(third.body).toMatchObject({ country: "FR", isDefault: true })
      const got = yield* getCustomer(token, customer.id)
      expect(got.addresses).toEqual([
        { ...first.body, isDefault: false },
        second.body,
        { ...third.body, isDefault: true }
      ])
      expect(got.addresses.filter((a: { isDefault: boolean }) => a.isDefault)).toHaveLength(1)
      expect(Date.parse(got.updatedAt)).toBeGreaterThanOrEqual(Date.parse(got.createdAt))
    })
  )

  it.effect("addresses: bad input is 400 on the field, unknown customer 404", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const customer = yield* createCustomer(token)
      const path = `/user/${customer.id}/address`
      for (const country of ["XX", "USA", "U", "", "12", 1]) {
        expectError(
          yield* call("POST", path, { token, json: address({ country }) }),
          400,
          "parameter_invalid",
          "country"
        )
      }
      for (const field of ["line1", "city", "country"] as const) {
        const { [field]: _dropped, ...rest } = address()
        expectError(yield* call("POST", path, { token, json: rest }), 400, "parameter_missing", field)
      }
      expectError(
        yield* call("POST", path, { token, json: address({ line1: " " }) }),
        400,
        "parameter_invalid",
        "line1"
      )
      expectError(
        yield* call("POST", path, { token, json: address({ isDefault: "yes" }) }),
        400,
        "parameter_invalid",
        "isDefault"
      )
      expectError(
        yield* call("POST", path, { token, json: address({ postalCode: "9".repeat(21) }) }),
        400,
        "parameter_invalid",
        "postalCode"
      )
      expect((yield* getCustomer(token, customer.id)).addresses).toEqual([])
      const unknown = yield* Ids.make("cus")
      expectError(
        yield* call("POST", `/user/${unknown}/address`, { token, json: address() }),
        404,
        "resource_missing",
        "id"
      )
    })
  )

  it.effect("DELETE address: 204; the default's removal promotes the oldest remaining; unknown 404", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const customer = yield* createCustomer(token)
      const add = (line1: string, isDefault = false) =>
        Effect.map(
          call("POST", `/user/${customer.id}/address`, { token, json: address({ line1, isDefault }) }),
          (r) => {
            expect(r.status, r.text).toBe(201)
            return r.body.id as string
          }
        )
      const a = yield* add("A")
      const b = yield* add("B")
      const c = yield* add("C", true)
      const d = yield* add("D")
      const ids = (got: { addresses: ReadonlyArray<{ id: string; isDefault: boolean }> }) =>
        got.addresses.map((x) => `${x.id}${x.isDefault ? "*" : ""}`)
      expect(ids(yield* getCustomer(token, customer.id))).toEqual([a, b, `${c}*`, d])
      // Removing a non-default address keeps the default.
      const removed = yield* call("DELETE", `/user/${customer.id}/address/${b}`, { token })
      expect(removed.status, removed.text).toBe(204)
      expect(removed.text).toBe("")
      expect(ids(yield* getCustomer(token, customer.id))).toEqual([a, `${c}*`, d])
      // Removing the default promotes the oldest remaining one.
      expect((yield* call("DELETE", `/user/${customer.id}/address/${c}`, { token })).status).toBe(204)
      expect(ids(yield* getCustomer(token, customer.id))).toEqual([`${a}*`, d])
      expect((yield* call("DELETE", `/user/${customer.id}/address/${a}`, { token })).status).toBe(204)
      expect(ids(yield* getCustomer(token, customer.id))).toEqual([`${d}*`])
      // Gone, unknown, malformed, or another customer's: 404 on address_id.
      const other = yield* createCustomer(token)
      const theirs = yield* Effect.map(
        call("POST", `/user/${other.id}/address`, { token, json: address() }),
        (r) => r.body.id as string
      )
      for (const addressId of [a, yield* Ids.make("adr"), "adr_nope", "nothing", theirs]) {
        expectError(
          yield* call("DELETE", `/user/${customer.id}/address/${addressId}`, { token }),
          404,
          "resource_missing",
          "address_id"
        )
      }
      expect(ids(yield* getCustomer(token, customer.id))).toEqual([`${d}*`])
      expect((yield* getCustomer(token, other.id)).addresses.map((x: { id: string }) => x.id)).toEqual([
        theirs
      ])
      // The last one can go too; a later address is the default again.
      expect((yield* call("DELETE", `/user/${customer.id}/address/${d}`, { token })).status).toBe(204)
      expect((yield* getCustomer(token, customer.id)).addresses).toEqual([])
      const e = yield* add("E")
      expect(ids(yield* getCustomer(token, customer.id))).toEqual([`${e}*`])
      const unknown = yield* Ids.make("cus")
      expectError(
        yield* call("DELETE", `/user/${unknown}/address/${e}`, { token }),
        404,
        "resource_missing",
        "id"
      )
    })
  )

  it.effect("addresses: at most 50; the 51st is 409 address_limit_reached, and removing one makes room", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const customer = yield* createCustomer(token)
      const ids: Array<string> = []
      for (let i = 0; i < 50; i++) {
        const r = yield* call("POST", `/user/${customer.id}/address`, {
          token,
          json: address({ line1: `${i} Main St` })
        })
        expect(r.status, r.text).toBe(201)
        ids.push(r.body.id)
      }
      const over = yield* call("POST", `/user/${customer.id}/address`, { token, json: address() })
      expectError(over, 409, "address_limit_reached")
      const got = yield* getCustomer(token, customer.id)
      expect(got.addresses.map((a: { id: string }) => a.id)).toEqual(ids)
      expect((yield* call("DELETE", `/user/${customer.id}/address/${ids[10]}`, { token })).status).toBe(204)
      expect((yield* call("POST", `/user/${customer.id}/address`, { token, json: address() })).status).toBe(
        201
      )
    })
  )

  // --- POST /user/:id/tag --------------------------------------------------------------------------

  it.effect("POST /user/:id/tag adds tags as a set union in order and answers the full customer", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const customer = yield* createCustomer(token, { tags: ["b", "a"] })
      const r = yield* call("POST", `/user/${customer.id}/tag`, {
        token,
        json: { tags: ["c", "a", "d", "c"] }
      })
      expect(r.status, r.text).toBe(200)
      expect(r.body.tags).toEqual(["b", "a", "c", "d"])
      expect(r.body).toEqual(yield* getCustomer(token, customer.id))
      expect(Object.keys(r.body).sort()).toEqual(
        [
          "active",
          "addresses",
          "createdAt",
          "email",
          "firstName",
          "hasAccount",
          "id",
          "lastName",
          "metadata",
          "orderCount",
          "phone",
          "tags",
          "testClockId",
          "totalSpent",
          "updatedAt"
        ].sort()
      )
      // Only already-present tags: nothing changes, still 200 with the customer.
      const events = yield* countEvents
      const again = yield* call("POST", `/user/${customer.id}/tag`, { token, json: { tags: ["a", "d"] } })
      expect(again.status).toBe(200)
      expect(again.body.tags).toEqual(["b", "a", "c", "d"])
      expect(yield* countEvents).toBe(events)
      // Tags are case-sensitive and trimmed.
      const cased = yield* call("POST", `/user/${customer.id}/tag`, { token, json: { tags: [" A "] } })
      expect(cased.body.tags).toEqual(["b", "a", "c", "d", "A"])
    })
  )

  it.effect("POST /user/:id/tag: empty or invalid lists are 400, too many tags 400, unknown 404", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const customer = yield* createCustomer(token, {
        tags: Array.from({ length: 99 }, (_, i) => `t${i}`)
      })
      const path = `/user/${customer.id}/tag`
      expectError(yield* call("POST", path, { token, json: { tags: [] } }), 400, "parameter_invalid", "tags")
      expectError(yield* call("POST", path, { token, json: {} }), 400, "parameter_missing", "tags")
      expectError(
        yield* call("POST", path, { token, json: { tags: "vip" } }),
        400,
        "parameter_invalid",
        "tags"
      )
      expectError(
        yield* call("POST", path, { token, json: { tags: [""] } }),
        400,
        "parameter_invalid",
        "tags[0]"
      )
      expectError(
        yield* call("POST", path, { token, json: { tags: ["x".repeat(65)] } }),
        400,
        "parameter_invalid",
        "tags[0]"
      )
      // 99 + 2 new > 100.
      expectError(
        yield* call("POST", path, { token, json: { tags: ["new1", "new2", "t0"] } }),
        400,
        "parameter_invalid",
        "tags"
      )
      expect((yield* getCustomer(token, customer.id)).tags).toHaveLength(99)
      expect((yield* call("POST", path, { token, json: { tags: ["t1", "new1"] } })).body.tags).toHaveLength(
        100
      )
      const unknown = yield* Ids.make("cus")
      expectError(
        yield* call("POST", `/user/${unknown}/tag`, { token, json: { tags: ["x"] } }),
        404,
        "resource_missing",
        "id"
      )
    })
  )

  // --- Idempotency ---------------------------------------------------------------------------------

  it.effect("POST /user with an Idempotency-Key replays the same 201 and creates one customer", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const tag = uniqueTag("idem")
      const json = { email: uniqueEmail("idem"), firstName: "Once", lastName: "Only", tags: [tag] }
      const headers = { "idempotency-key": `create-${tag}` }
      const first = yield* call("POST", "/user", { token, json, headers })
      expect(first.status, first.text).toBe(201)
      const replay = yield* call("POST", "/user", { token, json, headers })
      expect(replay.status).toBe(201)
      expect(replay.headers["idempotent-replayed"]).toBe("true")
      expect(replay.body).toEqual(first.body)
      const listed = yield* listCustomers(token, { tag })
      expect(listed.body.count).toBe(1)
      expectError(
        yield* call("POST", "/user", { token, json: { ...json, firstName: "Twice" }, headers }),
        422,
        "idempotency_key_reused"
      )
      // Without the key the same body is a duplicate email.
      expectError(yield* call("POST", "/user", { token, json }), 409, "resource_already_exists", "email")
    })
  )
})
