/**
 * The customers read model is a pure function of the log: after a varied history over HTTP
 * (creates, updates, metadata merges, addresses added and removed, tags, deactivation, a shopper's
 * login changes, erasures) a rebuild from position zero (src/processors/Rebuild.ts) reproduces exactly
 * the rows of `customers.customers` and `customers.addresses` — and of the identity tables, which the
 * same use cases write.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { CustomersProjection } from "../../src/customers/projection.js"
import { IdentityProjection } from "../../src/identity/projection.js"
import { rebuildProjection } from "../../src/processors/Rebuild.js"
import { adminToken, createCustomer, getCustomer, registeredShopper } from "../support/customers.js"
import { rowsOf } from "../support/database.js"
import { call, IdentityHttp, PASSWORD, uniqueEmail } from "../support/identity.js"

const customersTables = Effect.all({
  customers: rowsOf("customers.customers", "customer_id"),
  addresses: rowsOf("customers.addresses", "address_id")
})

const identityTables = Effect.all({
  users: rowsOf("identity.users", "user_id"),
  sessions: rowsOf("identity.sessions", "session_id"),
  apiKeys: rowsOf("identity.api_keys", "key_id"),
  revocations: Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`SELECT * FROM identity.revocations ORDER BY kind, subject_id`
  )
})

const ok = (status: number) => (r: { status: number; text: string }) => {
  expect(r.status, r.text).toBe(status)
  // biome-ignore lint/suspicious/noExplicitAny: test bodies are inspected field by field
  return r as { status: number; text: string; body: any }
}

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("customers projection rebuild", (it) => {
  it.effect("rebuilding from the log reproduces every customers (and identity) row", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const address = (line1: string, extra: Record<string, unknown> = {}) => ({
        line1,
        city: "Madrid",
        country: "es",
        ...extra
      })

      // A staff-created customer with everything.
      const rich = yield* createCustomer(token, {
        phone: "+34 91 123 45 67",
        tags: ["vip", "b2b"],
        metadata: { crm: "X-1", score: 9, nested: { ok: true } }
      })
      yield* Effect.map(
        call("PUT", `/user/${rich.id}`, {
          token,
          json: { firstName: "Rica", metadata: { score: null, extra: [1, 2] }, tags: ["b2b", "gold"] }
        }),
        ok(200)
      )
      const a1 = (yield* Effect.map(
        call("POST", `/user/${rich.id}/address`, {
          token,
          json: address("1 Gran Via", { label: "Home", state: "MD", postalCode: "28013" })
        }),
        ok(201)
      )).body.id
      yield* Effect.map(
        call("POST", `/user/${rich.id}/address`, { token, json: address("2 Gran Via") }),
        ok(201)
      )
      yield* Effect.map(
        call("POST", `/user/${rich.id}/address`, { token, json: address("3 Gran Via", { isDefault: true }) }),
        ok(201)
      )
      yield* Effect.map(call("DELETE", `/user/${rich.id}/address/${a1}`, { token }), ok(204))
      yield* Effect.map(
        call("POST", `/user/${rich.id}/tag`, { token, json: { tags: ["gold", "new"] } }),
        ok(200)
      )

      // Deactivated, then reactivated; and one left deactivated.
      const flip = yield* createCustomer(token)
      yield* Effect.map(call("PUT", `/user/${flip.id}`, { token, json: { active: false } }), ok(200))
      yield* Effect.map(
        call("PUT", `/user/${flip.id}`, { token, json: { active: true, phone: "+1 212 555 0100" } }),
        ok(200)
      )
      const off = yield* createCustomer(token, { metadata: { a: 1 } })
      yield* Effect.map(
        call("PUT", `/user/${off.id}`, { token, json: { active: false, metadata: null } }),
        ok(200)
      )

      // A registered shopper who edits themselves and is then renamed by staff and deactivated.
      const shopper = yield* registeredShopper()
      yield* Effect.map(
        call("POST", "/user/me/address", { token: shopper.accessToken, json: address("9 Calle Mayor") }),
        ok(201)
      )
      const shopperEmail = uniqueEmail("moved")
      yield* Effect.map(
        call("PUT", "/user/me", {
          token: shopper.accessToken,
          json: { email: shopperEmail, lastName: "Moved" }
        }),
        ok(200)
      )
      yield* Effect.map(
        call("POST", "/auth/login", { json: { email: shopperEmail, password: PASSWORD } }),
        ok(200)
      )
      yield* Effect.map(
        call("PUT", `/user/${shopper.customerId}`, { token, json: { active: false } }),
        ok(200)
      )

      // Erased: a staff-created customer with an address, and a registered shopper; their emails reused.
      const gone = yield* createCustomer(token, { tags: ["gone"] })
      yield* Effect.map(
        call("POST", `/user/${gone.id}/address`, { token, json: address("7 Ghost St") }),
        ok(201)
      )
      yield* Effect.map(call("DELETE", `/user/${gone.id}`, { token }), ok(204))
      yield* createCustomer(token, { email: gone.email, firstName: "Second" })
      const goneShopper = yield* registeredShopper()
      yield* Effect.map(call("DELETE", `/user/${goneShopper.customerId}`, { token }), ok(204))
      yield* Effect.map(
        call("POST", "/auth/register", {
          json: { email: goneShopper.email, password: PASSWORD, firstName: "Re", lastName: "Born" }
        }),
        ok(201)
      )

      const customersBefore = yield* customersTables
      expect(customersBefore.customers.length).toBeGreaterThanOrEqual(6)
      expect(customersBefore.addresses.length).toBe(3)
      const identityBefore = yield* identityTables

      // Damage both read models first: what comes back can only come from the log.
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE customers.customers SET first_name = 'Damaged', tags = '{}', active = NOT active`
      yield* sql`DELETE FROM customers.addresses WHERE line1 = '3 Gran Via'`
      yield* sql`UPDATE identity.users SET deactivated_at = NULL, first_name = 'Damaged'`

      const report = yield* rebuildProjection(CustomersProjection, { batchSize: 7 })
      expect(report.events).toBeGreaterThan(20)
      expect(yield* customersTables).toEqual(customersBefore)

      yield* rebuildProjection(IdentityProjection, { batchSize: 7 })
      expect(yield* identityTables).toEqual(identityBefore)

      // The rebuilt tables are live: the service keeps reading and writing them.
      const richNow = yield* getCustomer(token, rich.id)
      expect(richNow).toMatchObject({
        firstName: "Rica",
        tags: ["b2b", "gold", "new"],
        metadata: { crm: "X-1", nested: { ok: true }, extra: [1, 2] }
      })
      expect(
        richNow.addresses.map((a: { line1: string; isDefault: boolean }) => [a.line1, a.isDefault])
      ).toEqual([
        ["2 Gran Via", false],
        ["3 Gran Via", true]
      ])
      const later = yield* createCustomer(token, { tags: ["after-rebuild"] })
      expect((yield* getCustomer(token, later.id)).tags).toEqual(["after-rebuild"])
      expect(
        (yield* call("POST", "/auth/login", { json: { email: shopperEmail, password: PASSWORD } })).body.error
          .code
      ).toBe("account_deactivated")
    })
  )
})
