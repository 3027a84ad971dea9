/**
 * `GET /user` (spec §4.2 query parameters, §8 limits; design/API.md "Lists" and the filters in "Gaps
 * in the base surface, filled"): the reduced shape, page/display bounds, `q`, `tag`, `since`, every
 * sort field in both directions, and pagination. Every test works on customers carrying a tag (or a
 * search string) of its own, so counts never depend on other tests.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import {
  adminToken,
  type CreatedCustomer,
  createCustomer,
  listCustomers,
  registeredShopper,
  uniqueTag
} from "../support/customers.js"
import { call, expectError, IdentityHttp, uniqueEmail } from "../support/identity.js"

const SUMMARY_KEYS = ["createdAt", "email", "firstName", "id", "lastName", "orderCount", "totalSpent"]

interface Summary {
  readonly id: string
  readonly email: string
  readonly firstName: string
  readonly lastName: string
  readonly orderCount: number
  readonly totalSpent: number
  readonly createdAt: string
}

/** The ids of a list reply, asserting 200. */
const idsOf = (r: { status: number; text: string; body: { models: ReadonlyArray<Summary> } }) => {
  expect(r.status, r.text).toBe(200)
  return r.body.models.map((m) => m.id)
}

const byId = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("GET /user", (it) => {
  it.effect("answers { count, models } with the reduced customer only", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const tag = uniqueTag("shape")
      const created = yield* createCustomer(token, {
        tags: [tag],
        phone: "+14155550123",
        metadata: { secret: "not listed" }
      })
      yield* call("POST", `/user/${created.id}/address`, {
        token,
        json: { line1: "1 Main St", city: "Paris", country: "FR" }
      })
      const r = yield* listCustomers(token, { tag })
      expect(r.status, r.text).toBe(200)
      expect(Object.keys(r.body).sort()).toEqual(["count", "models"])
      expect(r.body.count).toBe(1)
      expect(r.body.models).toHaveLength(1)
      const [model] = r.body.models
      expect(Object.keys(model).sort()).toEqual(SUMMARY_KEYS)
      expect(model).toEqual({
        id: created.id,
        email: created.email,
        firstName: created.firstName,
        lastName: created.lastName,
        orderCount: 0,
        totalSpent: 0,
        createdAt: created.createdAt
      })
    })
  )

  it.effect("display defaults to 20 (max 100), page to 1; out-of-range values are 400", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const tag = uniqueTag("page")
      const created: Array<CreatedCustomer> = []
      for (let i = 0; i < 21; i++) created.push(yield* createCustomer(token, { tags: [tag] }))
      const first = yield* listCustomers(token, { tag })
      expect(first.body.count).toBe(21)
      expect(first.body.models).toHaveLength(20)
      expect(idsOf(yield* listCustomers(token, { tag, page: 1 }))).toEqual(idsOf(first))
      const second = yield* listCustomers(token, { tag, page: 2 })
      expect(second.body).toMatchObject({ count: 21 })
      expect(second.body.models).toHaveLength(1)
      expect(new Set([...idsOf(first), ...idsOf(second)])).toEqual(new Set(created.map((c) => c.id)))
      expect((yield* listCustomers(token, { tag, display: 100 })).body.models).toHaveLength(21)
      expect((yield* listCustomers(token, { tag, display: 1 })).body.models).toHaveLength(1)
      const beyond = yield* listCustomers(token, { tag, page: 99 })
      expect(beyond.body).toEqual({ count: 21, models: [] })
      for (const display of ["0", "101", "-1", "abc", "1.5", ""]) {
        expectError(yield* listCustomers(token, { tag, display }), 400, "parameter_invalid", "display")
      }
      for (const page of ["0", "-2", "x", "2.5"]) {
        expectError(yield* listCustomers(token, { tag, page }), 400, "parameter_invalid", "page")
      }
    })
  )

  it.effect("pages never overlap, in every sort, and count is the total of matches", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const tag = uniqueTag("pages")
      const created: Array<CreatedCustomer> = []
      // Equal sort keys (totalSpent 0, lastName shared) make the id the only tie-breaker.
      for (let i = 0; i < 7; i++)
        created.push(yield* createCustomer(token, { tags: [tag], lastName: "Same" }))
      for (const sort of [
        "createdAt:desc",
        "createdAt:asc",
        "totalSpent:asc",
        "lastName:desc",
        "email:asc"
      ]) {
        const seen: Array<string> = []
        for (let page = 1; page <= 3; page++) {
          const r = yield* listCustomers(token, { tag, sort, display: 3, page })
          expect(r.body.count).toBe(7)
          expect(r.body.models).toHaveLength(page < 3 ? 3 : 1)
          seen.push(...idsOf(r))
        }
        expect(seen, sort).toHaveLength(7)
        expect(new Set(seen), sort).toEqual(new Set(created.map((c) => c.id)))
        // The pages are slices of the one full ordering.
        expect(idsOf(yield* listCustomers(token, { tag, sort, display: 100 })), sort).toEqual(seen)
      }
    })
  )

  it.effect("q: case-insensitive substring of first name, last name or email, and across the names", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const u = uniqueTag("q")
      const byFirst = yield* createCustomer(token, { firstName: `Fx${u}`, lastName: "Plain" })
      const byLast = yield* createCustomer(token, { firstName: "Plain", lastName: `Lx${u}` })
      const byEmail = yield* createCustomer(token, {
        email: `ex${u}@Example.com`,
        firstName: "P",
        lastName: "Q"
      })
      const ada = yield* createCustomer(token, { firstName: `Ada${u}`, lastName: "Lovelace" })
      const search = (q: string) =>
        Effect.map(listCustomers(token, { q, display: 100 }), (r) => new Set(idsOf(r)))
      expect(yield* search(u)).toEqual(new Set([byFirst.id, byLast.id, byEmail.id, ada.id]))
      expect(yield* search(u.toUpperCase())).toEqual(new Set([byFirst.id, byLast.id, byEmail.id, ada.id]))
      expect(yield* search(`fX${u.toUpperCase()}`)).toEqual(new Set([byFirst.id]))
      expect(yield* search(`LX${u}`)).toEqual(new Set([byLast.id]))
      expect(yield* search(`EX${u}@example.COM`)).toEqual(new Set([byEmail.id]))
      // "first last" spans the two names.
      expect(yield* search(`ada${u} lovelace`)).toEqual(new Set([ada.id]))
      expect(yield* search(`  ADA${u} LOVE  `)).toEqual(new Set([ada.id]))
      expect(yield* search(`${u} lovelace`)).toEqual(new Set([ada.id]))
      // Nothing matches across unrelated text.
      expect(yield* search(`lovelace ada${u}`)).toEqual(new Set())
      expect(yield* search(`zz${u}`)).toEqual(new Set())
      const counted = yield* listCustomers(token, { q: u, display: 1 })
      expect(counted.body.count).toBe(4)
      expect(counted.body.models).toHaveLength(1)
      // A blank q does not filter.
      const tag = uniqueTag("blankq")
      yield* createCustomer(token, { tags: [tag] })
      expect((yield* listCustomers(token, { tag, q: "   " })).body.count).toBe(1)
      expect((yield* listCustomers(token, { tag, q: "" })).body.count).toBe(1)
      expectError(yield* listCustomers(token, { q: "x".repeat(201) }), 400, "parameter_invalid", "q")
      expectError(yield* listCustomers(token, { q: "a\u0000b" }), 400, "parameter_invalid")
      // Beyond ASCII too.
      const accented = yield* createCustomer(token, { firstName: `Ünal${u}`, lastName: "ÇELİK" })
      expect(yield* search(`ünal${u}`)).toEqual(new Set([accented.id]))
      expect(yield* search(`ÜNAL${u.toUpperCase()} ç`)).toEqual(new Set([accented.id]))
    })
  )

  it.effect("q: %, _ and \\ match themselves, not as wildcards", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const u = uniqueTag("like")
      const percent = yield* createCustomer(token, { firstName: `100%${u}` })
      yield* createCustomer(token, { firstName: `100x${u}` })
      const underscore = yield* createCustomer(token, { firstName: `a_${u}` })
      yield* createCustomer(token, { firstName: `ab${u}` })
      const backslash = yield* createCustomer(token, { firstName: `c\\${u}` })
      yield* createCustomer(token, { firstName: `cd${u}` })
      const search = (q: string) => Effect.map(listCustomers(token, { q }), (r) => idsOf(r))
      expect(yield* search(`0%${u}`)).toEqual([percent.id])
      expect(yield* search(`a_${u}`)).toEqual([underscore.id])
      expect(yield* search(`c\\${u}`)).toEqual([backslash.id])
      expect(yield* search(`%${u}`)).toEqual([percent.id])
      expect(yield* search(`_${u}`)).toEqual([underscore.id])
      expect(yield* search("%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%")).toEqual([])
      expect((yield* search(u)).length).toBe(6)
    })
  )

  it.effect("tag: only customers carrying that exact tag", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const tag = uniqueTag("tag")
      const both = yield* createCustomer(token, { tags: ["other", tag] })
      const only = yield* createCustomer(token, { tags: [tag] })
      yield* createCustomer(token, { tags: [`${tag}x`, tag.toUpperCase(), tag.slice(0, -1)] })
      const later = yield* createCustomer(token)
      expect(new Set(idsOf(yield* listCustomers(token, { tag })))).toEqual(new Set([both.id, only.id]))
      // Tags added later, by PUT or POST /tag, count; removed ones stop counting.
      yield* call("POST", `/user/${later.id}/tag`, { token, json: { tags: [tag] } })
      expect((yield* listCustomers(token, { tag })).body.count).toBe(3)
      yield* call("PUT", `/user/${only.id}`, { token, json: { tags: ["other"] } })
      expect(new Set(idsOf(yield* listCustomers(token, { tag })))).toEqual(new Set([both.id, later.id]))
      // Combined with q.
      expect(idsOf(yield* listCustomers(token, { tag, q: later.email }))).toEqual([later.id])
      expect((yield* listCustomers(token, { tag: `nobody-${tag}` })).body).toEqual({ count: 0, models: [] })
      expectError(yield* listCustomers(token, { tag: "x".repeat(65) }), 400, "parameter_invalid", "tag")
    })
  )

  it.effect("since: customers created strictly after the instant; a bad date is 400", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const tag = uniqueTag("since")
      const a = yield* createCustomer(token, { tags: [tag] })
      yield* Effect.sleep("5 millis")
      const b = yield* createCustomer(token, { tags: [tag] })
      yield* Effect.sleep("5 millis")
      const c = yield* createCustomer(token, { tags: [tag] })
      expect(Date.parse(b.createdAt)).toBeGreaterThan(Date.parse(a.createdAt))
      expect(Date.parse(c.createdAt)).toBeGreaterThan(Date.parse(b.createdAt))
      const since = (value: string) =>
        Effect.map(listCustomers(token, { tag, since: value, sort: "createdAt:asc" }), idsOf)
      expect(yield* since(a.createdAt)).toEqual([b.id, c.id])
      expect(yield* since(b.createdAt)).toEqual([c.id])
      expect(yield* since(c.createdAt)).toEqual([])
      expect(yield* since(new Date(Date.parse(a.createdAt) - 1).toISOString())).toEqual([a.id, b.id, c.id])
      expect(yield* since("2000-01-01")).toEqual([a.id, b.id, c.id])
      expect(yield* since("2999-12-31")).toEqual([])
      // Offsets are honoured; a date-time without one is UTC.
      expect(
        yield* since(new Date(Date.parse(a.createdAt) - 1).toISOString().replace("Z", "+00:00"))
      ).toEqual([a.id, b.id, c.id])
      // Dates off the calendar, or beyond what PostgreSQL stores, are the client's mistake (never a 500).
      const offCalendar = ["2026-02-30", "-271821-04-20", "+275760-09-13T00:00:00Z", "0000-01-01", "1e10"]
      for (const bad of ["yesterday", "2026-13-45", "", "abc123", ...offCalendar]) {
        expectError(yield* listCustomers(token, { tag, since: bad }), 400, "parameter_invalid", "since")
      }
    })
  )

  it.effect("sort: every field in both directions, ties by id in the same direction", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const sql = yield* SqlClient.SqlClient
      const tag = uniqueTag("sort")
      const specs = [
        { local: "delta", lastName: "Moreau", spent: 500, orders: 2 },
        { local: "Alpha", lastName: "zimmer", spent: 100, orders: 7 },
        { local: "charlie", lastName: "Baker", spent: 900, orders: 2 },
        { local: "bravo", lastName: "adams", spent: 100, orders: 1 },
        { local: "Echo", lastName: "Young", spent: 0, orders: 0 }
      ]
      const created: Array<CreatedCustomer & (typeof specs)[number]> = []
      for (const spec of specs) {
        const customer = yield* createCustomer(token, {
          tags: [tag],
          email: `${spec.local}.${tag}@example.com`,
          lastName: spec.lastName
        })
        created.push({ ...customer, ...spec })
        // Order totals come from the orders and payments contexts; set them in the read model here.
        yield* sql`UPDATE customers.customers SET total_spent = ${spec.spent}, order_count = ${spec.orders}
          WHERE customer_id = ${customer.id}`
      }
      type Row = (typeof created)[number]
      const keys: Record<string, (c: Row) => string | number> = {
        createdAt: (c) => Date.parse(c.createdAt),
        totalSpent: (c) => c.spent,
        orderCount: (c) => c.orders,
        email: (c) => c.email.toLowerCase(),
        lastName: (c) => c.lastName.toLowerCase()
      }
      for (const [field, key] of Object.entries(keys)) {
        const asc = [...created]
          .sort((x, y) => {
            const kx = key(x)
            const ky = key(y)
            return kx < ky ? -1 : kx > ky ? 1 : byId(x.id, y.id)
          })
          .map((c) => c.id)
        const desc = [...asc].reverse()
        expect(idsOf(yield* listCustomers(token, { tag, sort: `${field}:asc` })), `${field}:asc`).toEqual(asc)
        expect(idsOf(yield* listCustomers(token, { tag, sort: `${field}:desc` })), `${field}:desc`).toEqual(
          desc
        )
        // Without a direction: ascending.
        expect(idsOf(yield* listCustomers(token, { tag, sort: field })), field).toEqual(asc)
      }
      // The models carry the totals they are sorted by.
      const bySpent = yield* listCustomers(token, { tag, sort: "totalSpent:desc" })
      const expectedTotals = [...created]
        .sort((x, y) => y.spent - x.spent || byId(y.id, x.id))
        .map((c) => [c.spent, c.orders])
      expect(bySpent.body.models.map((m: Summary) => [m.totalSpent, m.orderCount])).toEqual(expectedTotals)
      // Default: newest first.
      const newest = [...created].sort(
        (x, y) => Date.parse(y.createdAt) - Date.parse(x.createdAt) || byId(y.id, x.id)
      )
      expect(idsOf(yield* listCustomers(token, { tag }))).toEqual(newest.map((c) => c.id))
      for (const sort of [
        "name:asc",
        "createdAt:up",
        "createdAt:",
        "CREATEDAT:asc",
        "createdAt:ASC",
        ":asc",
        "phone",
        "createdAt:asc:desc",
        "createdAt;DROP TABLE"
      ]) {
        expectError(yield* listCustomers(token, { tag, sort }), 400, "parameter_invalid", "sort")
      }
    })
  )

  it.effect("a shopper lists only their own record, whatever the filters", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const tag = uniqueTag("own")
      const other = yield* createCustomer(token, { tags: [tag] })
      const shopper = yield* registeredShopper(uniqueEmail("lister"))
      const own = yield* call("GET", "/user", { token: shopper.accessToken })
      expect(own.status, own.text).toBe(200)
      expect(own.body.count).toBe(1)
      expect(own.body.models).toEqual([
        expect.objectContaining({
          id: shopper.customerId,
          email: shopper.email,
          firstName: "Ann",
          lastName: "Lee"
        })
      ])
      expect((yield* listCustomers(shopper.accessToken, { tag })).body).toEqual({ count: 0, models: [] })
      expect((yield* listCustomers(shopper.accessToken, { q: other.email })).body).toEqual({
        count: 0,
        models: []
      })
      expect((yield* listCustomers(shopper.accessToken, { q: "@" })).body.count).toBe(1)
      // The admin sees both.
      const all = yield* listCustomers(token, { display: 100, q: "example.com" })
      expect(all.body.count).toBeGreaterThanOrEqual(2)
    })
  )
})
