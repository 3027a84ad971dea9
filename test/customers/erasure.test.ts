/**
 * Erasure (`DELETE /user/:id`, spec §4.2 rule 1; design/API.md: "the customer's data key is
 * destroyed, the read model row removed") down to the event store: personal fields read back as
 * Shredded, the log keeps only ciphertext envelopes and the erasure events, both data keys are gone,
 * public snapshots are redacted and the email is free again. Also: the public events a customer's
 * life writes (`customer.created` / `customer.updated` snapshots, `customer.deleted`).
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { EventStore } from "../../src/eventstore/EventStore.js"
import { isShredded } from "../../src/eventstore/EventType.js"
import * as Ids from "../../src/kernel/Ids.js"
import {
  adminToken,
  createCustomer,
  getCustomer,
  listCustomers,
  registeredShopper,
  uniqueTag
} from "../support/customers.js"
import { call, expectError, IdentityHttp, PASSWORD } from "../support/identity.js"

interface PublicRow {
  readonly type: string
  // biome-ignore lint/suspicious/noExplicitAny: snapshots are inspected field by field
  readonly data: any
  readonly subjectId: string | null
}

const publicEventsOf = (customerId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<PublicRow>`SELECT type, data, subject_id AS "subjectId" FROM event_store.public_events
      WHERE stream_id = ${`customer-${customerId}`} ORDER BY position`
  )

const subjectKey = (subjectId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ hasKey: boolean; shredded: boolean }>`SELECT wrapped_dek IS NOT NULL AS "hasKey",
          shredded_at IS NOT NULL AS shredded
        FROM event_store.subject_keys WHERE subject_id = ${subjectId}`,
      (rows) => rows[0]
    )
  )

/** Events anywhere in the log whose stored JSON contains `text` in clear. */
const clearTextHits = (text: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ n: number }>`SELECT count(*)::int AS n FROM event_store.events
        WHERE strpos(lower(data::text), lower(${text})) > 0 OR strpos(lower(metadata::text), lower(${text})) > 0`,
      (rows) => rows[0]?.n ?? 0
    )
  )

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("customer erasure", (it) => {
  it.effect("DELETE /user/:id: 204, then 404 everywhere, gone from the list, the email free again", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const tag = uniqueTag("erase")
      const customer = yield* createCustomer(token, { tags: [tag], phone: "+14155550123" })
      yield* call("POST", `/user/${customer.id}/address`, {
        token,
        json: { line1: "1 Main St", city: "Berlin", country: "DE" }
      })
      const keep = yield* createCustomer(token, { tags: [tag] })
      expect((yield* listCustomers(token, { tag })).body.count).toBe(2)

      const erased = yield* call("DELETE", `/user/${customer.id}`, { token })
      expect(erased.status, erased.text).toBe(204)
      expect(erased.text).toBe("")

      expectError(yield* call("GET", `/user/${customer.id}`, { token }), 404, "resource_missing", "id")
      expectError(yield* call("DELETE", `/user/${customer.id}`, { token }), 404, "resource_missing", "id")
      expectError(
        yield* call("PUT", `/user/${customer.id}`, { token, json: { firstName: "Back" } }),
        404,
        "resource_missing"
      )
      expectError(
        yield* call("POST", `/user/${customer.id}/address`, {
          token,
          json: { line1: "2 Main St", city: "Berlin", country: "DE" }
        }),
        404,
        "resource_missing"
      )
      expectError(
        yield* call("POST", `/user/${customer.id}/tag`, { token, json: { tags: ["x"] } }),
        404,
        "resource_missing"
      )
      const listed = yield* listCustomers(token, { tag })
      expect(listed.body.count).toBe(1)
      expect(listed.body.models.map((m: { id: string }) => m.id)).toEqual([keep.id])
      expect((yield* listCustomers(token, { q: customer.email })).body.count).toBe(0)
      // The read model holds nothing of it.
      const sql = yield* SqlClient.SqlClient
      expect(yield* sql`SELECT 1 FROM customers.customers WHERE customer_id = ${customer.id}`).toHaveLength(0)
      expect(yield* sql`SELECT 1 FROM customers.addresses WHERE customer_id = ${customer.id}`).toHaveLength(0)
      // The other customer is untouched.
      expect((yield* getCustomer(token, keep.id)).tags).toEqual([tag])
      // The address can be used again, by a new record with a new id.
      const again = yield* createCustomer(token, { email: customer.email })
      expect(again.id).not.toBe(customer.id)
      // Unknown and malformed ids: 404.
      for (const id of [yield* Ids.make("cus"), "cus_x", "nothing"]) {
        expectError(yield* call("DELETE", `/user/${id}`, { token }), 404, "resource_missing")
      }
    })
  )

  it.effect(
    "erasing a registered shopper ends their login: tokens 401, login fails, the email registers again",
    () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const shopper = yield* registeredShopper()
        expect((yield* call("DELETE", `/user/${shopper.customerId}`, { token })).status).toBe(204)
        expectError(yield* call("GET", "/auth/me", { token: shopper.accessToken }), 401, "token_revoked")
        expectError(yield* call("GET", "/user/me", { token: shopper.accessToken }), 401, "token_revoked")
        const refreshed = yield* call("POST", "/auth/refresh", {
          json: { refreshToken: shopper.refreshToken }
        })
        expect(refreshed.status, refreshed.text).toBe(401)
        expectError(
          yield* call("POST", "/auth/login", { json: { email: shopper.email, password: PASSWORD } }),
          401,
          "invalid_credentials"
        )
        // A password reset for the erased address reveals nothing and sends nothing.
        expect((yield* call("POST", "/auth/password-reset", { json: { email: shopper.email } })).status).toBe(
          202
        )
        const registered = yield* call("POST", "/auth/register", {
          json: { email: shopper.email, password: PASSWORD, firstName: "New", lastName: "Person" }
        })
        expect(registered.status, registered.text).toBe(201)
        expect(registered.body.userId).not.toBe(shopper.userId)
        const me = yield* call("GET", "/auth/me", { token: registered.body.accessToken })
        expect(me.body.customerId).not.toBe(shopper.customerId)
        expect(me.body).toMatchObject({ email: shopper.email, firstName: "New" })
        // The old session stays dead after the address was reused.
        expectError(yield* call("GET", "/auth/me", { token: shopper.accessToken }), 401, "token_revoked")
      })
  )

  it.effect(
    "in the event store: shredded personal fields, ciphertext only, no keys, erasure events kept",
    () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const store = yield* EventStore
        const sql = yield* SqlClient.SqlClient
        const shopper = yield* registeredShopper()
        const { customerId, userId } = shopper
        yield* call("PUT", `/user/${customerId}`, {
          token,
          json: { phone: "+33 1 23 45 67 89", metadata: { note: "likes tea" }, tags: ["vip"] }
        })
        yield* call("POST", `/user/${customerId}/address`, {
          token,
          json: { label: "Home", line1: "12 Secret Lane", city: "Paris", country: "FR" }
        })
        // A password-reset notification snapshot about the user (subject: the user).
        expect((yield* call("POST", "/auth/password-reset", { json: { email: shopper.email } })).status).toBe(
          202
        )
        // Readable before.
        const before = yield* store.readStream(`customer-${customerId}`)
        expect(before[0]?.type).toBe("customer.created")
        expect((before[0]?.data as { email?: unknown } | undefined)?.email).toBe(shopper.email)
        expect(yield* subjectKey(customerId)).toEqual({ hasKey: true, shredded: false })
        expect(yield* subjectKey(userId)).toEqual({ hasKey: true, shredded: false })

        expect((yield* call("DELETE", `/user/${customerId}`, { token })).status).toBe(204)

        // Decoded: every personal field of the customer's events is Shredded; ids and tags stay.
        const events = yield* store.readStream(`customer-${customerId}`)
        expect(events.map((e) => e.type)).toEqual([
          "customer.created",
          "customer.updated",
          "customer.address_added",
          "customer.erased"
        ])
        const [created, updated, added, erased] = events.map((e) => e.data as Record<string, unknown>)
        for (const field of ["email", "firstName", "lastName", "phone", "metadata"]) {
          expect(isShredded(created?.[field]), `customer.created ${field}`).toBe(true)
        }
        expect(created?.customerId).toBe(customerId)
        expect(created?.userId).toBe(userId)
        expect(isShredded(updated?.phone)).toBe(true)
        expect(isShredded(updated?.metadata)).toBe(true)
        expect(updated?.tags).toEqual(["vip"])
        for (const field of ["label", "line1", "city", "country"]) {
          expect(isShredded(added?.[field]), `customer.address_added ${field}`).toBe(true)
        }
        expect(added?.isDefault).toBe(true)
        expect(erased).toEqual({ customerId, userId })
        const userEvents = yield* store.readStream(`user-${userId}`)
        const types = userEvents.map((e) => e.type)
        expect(types[0]).toBe("user.registered")
        expect(types[types.length - 1]).toBe("user.erased")
        const registered = userEvents[0]?.data as Record<string, unknown>
        for (const field of ["email", "firstName", "lastName", "passwordHash"]) {
          expect(isShredded(registered[field]), `user.registered ${field}`).toBe(true)
        }
        expect(registered.customerId).toBe(customerId)
        const reset = userEvents.find((e) => e.type === "user.password_reset_requested")?.data as Record<
          string,
          unknown
        >
        expect(isShredded(reset.token)).toBe(true)

        // Raw: the stored JSON holds ciphertext envelopes, never the clear values.
        const [raw] = yield* sql<{ data: string }>`SELECT data::text AS data FROM event_store.events
        WHERE stream_id = ${`customer-${customerId}`} AND event_type = 'customer.created'`
        expect(raw?.data).toContain('"$pii"')
        expect(raw?.data).not.toContain(shopper.email)
        expect(raw?.data).not.toContain("Ann")
        for (const secret of [shopper.email, "12 Secret Lane", "likes tea", "+33 1 23 45 67 89"]) {
          expect(yield* clearTextHits(secret), secret).toBe(0)
        }
        // Both data keys destroyed (tombstones kept, so nothing new is ever written under them).
        expect(yield* subjectKey(customerId)).toEqual({ hasKey: false, shredded: true })
        expect(yield* subjectKey(userId)).toEqual({ hasKey: false, shredded: true })

        // Public events: snapshots about the customer and the user are redacted; customer.deleted stays.
        const published = yield* publicEventsOf(customerId)
        const snapshots = published.filter((p) => p.subjectId === customerId)
        expect(snapshots.map((p) => p.type)).toEqual([
          "customer.created",
          "customer.updated",
          "customer.updated"
        ])
        for (const p of snapshots) expect(p.data).toEqual({ id: customerId, shredded: true })
        const deleted = published.filter((p) => p.type === "customer.deleted")
        expect(deleted).toHaveLength(1)
        expect(deleted[0]?.data).toEqual({ id: customerId, deleted: true })
        const aboutUser = yield* sql<{ data: unknown }>`SELECT data FROM event_store.public_events
        WHERE subject_id = ${userId}`
        expect(aboutUser.length).toBeGreaterThan(0)
        for (const p of aboutUser) expect(JSON.stringify(p.data)).not.toContain(shopper.email)
        expect(
          yield* sql`SELECT 1 FROM event_store.public_events WHERE strpos(data::text, ${shopper.email}) > 0`
        ).toHaveLength(0)
        // The read models hold nothing of either.
        expect(yield* sql`SELECT 1 FROM identity.users WHERE user_id = ${userId}`).toHaveLength(0)
        expect(yield* sql`SELECT 1 FROM customers.customers WHERE customer_id = ${customerId}`).toHaveLength(
          0
        )
      })
  )

  it.effect("public events: customer.created and customer.updated carry the snapshot as of each change", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const customer = yield* createCustomer(token, { tags: ["new"], metadata: { source: "pos" } })
      let rows = yield* publicEventsOf(customer.id)
      expect(rows).toHaveLength(1)
      expect(rows[0]?.type).toBe("customer.created")
      expect(rows[0]?.subjectId).toBe(customer.id)
      expect(rows[0]?.data).toEqual({
        id: customer.id,
        email: customer.email,
        firstName: "Grace",
        lastName: "Hopper",
        phone: null,
        metadata: { source: "pos" },
        addresses: [],
        orderCount: 0,
        totalSpent: 0,
        tags: ["new"],
        active: true,
        hasAccount: false,
        testClockId: null,
        createdAt: customer.createdAt,
        updatedAt: customer.createdAt
      })

      const updated = yield* call("PUT", `/user/${customer.id}`, {
        token,
        json: { firstName: "Amazing", metadata: { source: null, crm: 1 } }
      })
      rows = yield* publicEventsOf(customer.id)
      expect(rows).toHaveLength(2)
      expect(rows[1]?.type).toBe("customer.updated")
      expect(rows[1]?.data).toMatchObject({
        id: customer.id,
        firstName: "Amazing",
        lastName: "Hopper",
        metadata: { crm: 1 },
        updatedAt: updated.body.updatedAt
      })

      const address = yield* call("POST", `/user/${customer.id}/address`, {
        token,
        json: { label: "Office", line1: "9 Dock Rd", city: "Leeds", postalCode: "LS1", country: "gb" }
      })
      rows = yield* publicEventsOf(customer.id)
      expect(rows).toHaveLength(3)
      expect(rows[2]?.type).toBe("customer.updated")
      expect(rows[2]?.data.addresses).toEqual([address.body])

      yield* call("POST", `/user/${customer.id}/tag`, { token, json: { tags: ["vip"] } })
      yield* call("PUT", `/user/${customer.id}`, { token, json: { active: false } })
      yield* call("DELETE", `/user/${customer.id}/address/${address.body.id}`, { token })
      rows = yield* publicEventsOf(customer.id)
      expect(rows.map((r) => r.type)).toEqual([
        "customer.created",
        "customer.updated",
        "customer.updated",
        "customer.updated",
        "customer.updated",
        "customer.updated"
      ])
      expect(rows[3]?.data.tags).toEqual(["new", "vip"])
      expect(rows[4]?.data.active).toBe(false)
      expect(rows[5]?.data).toMatchObject({ addresses: [], active: false, tags: ["new", "vip"] })
      // The last snapshot is what GET answers.
      expect(rows[5]?.data).toEqual(yield* getCustomer(token, customer.id))

      // A no-op (same values) publishes nothing.
      yield* call("PUT", `/user/${customer.id}`, { token, json: { firstName: "Amazing", active: false } })
      expect(yield* publicEventsOf(customer.id)).toHaveLength(6)
    })
  )

  it.effect("a registered shopper's customer.created snapshot says hasAccount", () =>
    Effect.gen(function* () {
      const shopper = yield* registeredShopper()
      const rows = yield* publicEventsOf(shopper.customerId)
      expect(rows.map((r) => r.type)).toEqual(["customer.created"])
      expect(rows[0]?.data).toMatchObject({
        id: shopper.customerId,
        email: shopper.email,
        firstName: "Ann",
        lastName: "Lee",
        hasAccount: true
      })
    })
  )
})
