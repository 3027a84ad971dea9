/**
 * Registered shoppers on `/user` (design/API.md "Auth": their own profile only) and deactivation
 * (spec §4.2 rule 2: `active: false` is the non-destructive alternative): the shopper's sessions end,
 * login and refresh are refused with 403 `account_deactivated` (only once the password proved who
 * is asking), and reactivation lets them in again.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import {
  adminToken,
  createCustomer,
  getCustomer,
  listCustomers,
  NEW_RECORD,
  registeredShopper
} from "../support/customers.js"
import { adminLogin, call, expectError, IdentityHttp, PASSWORD, uniqueEmail } from "../support/identity.js"

const login = (email: string, password = PASSWORD) =>
  call("POST", "/auth/login", { json: { email, password } })

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("shoppers on /user", (it) => {
  it.effect("a shopper reads their own record through /user/me and their id, with hasAccount", () =>
    Effect.gen(function* () {
      const shopper = yield* registeredShopper()
      const token = shopper.accessToken
      const me = yield* call("GET", "/user/me", { token })
      expect(me.status, me.text).toBe(200)
      expect(me.body).toMatchObject({
        id: shopper.customerId,
        email: shopper.email,
        firstName: "Ann",
        lastName: "Lee",
        ...NEW_RECORD,
        hasAccount: true
      })
      expect((yield* call("GET", `/user/${shopper.customerId}`, { token })).body).toEqual(me.body)
      // The admin sees the same record.
      expect(yield* getCustomer(yield* adminToken, shopper.customerId)).toEqual(me.body)
    })
  )

  it.effect("a shopper changes their own email, names and phone; the login follows", () =>
    Effect.gen(function* () {
      const shopper = yield* registeredShopper()
      const token = shopper.accessToken
      const newEmail = uniqueEmail("self")
      const r = yield* call("PUT", "/user/me", {
        token,
        json: { email: newEmail, firstName: "Anna", lastName: "Lind", phone: "+46 8 123 456 78" }
      })
      expect(r.status, r.text).toBe(200)
      expect(r.body).toMatchObject({
        id: shopper.customerId,
        email: newEmail,
        firstName: "Anna",
        lastName: "Lind",
        phone: "+46 8 123 456 78"
      })
      const byId = yield* call("PUT", `/user/${shopper.customerId}`, { token, json: { phone: null } })
      expect(byId.status, byId.text).toBe(200)
      expect(byId.body.phone).toBeNull()
      const me = yield* call("GET", "/auth/me", { token })
      expect(me.body).toMatchObject({ email: newEmail, firstName: "Anna", lastName: "Lind" })
      expectError(yield* login(shopper.email), 401, "invalid_credentials")
      expect((yield* login(newEmail)).status).toBe(200)
      // Someone else's address: 409, nothing changed.
      const taken = yield* createCustomer(yield* adminToken)
      expectError(
        yield* call("PUT", "/user/me", { token, json: { email: taken.email, firstName: "X" } }),
        409,
        "resource_already_exists",
        "email"
      )
      expect((yield* call("GET", "/user/me", { token })).body).toEqual(byId.body)
    })
  )

  it.effect(
    "a shopper may not change tags, metadata or active: 403 insufficient_scope, nothing changed",
    () =>
      Effect.gen(function* () {
        const shopper = yield* registeredShopper()
        const token = shopper.accessToken
        const before = (yield* call("GET", "/user/me", { token })).body
        for (const [field, value] of [
          ["tags", ["vip"]],
          ["tags", []],
          ["metadata", { tier: "gold" }],
          ["metadata", null],
          ["active", false],
          ["active", true]
        ] as const) {
          for (const path of ["/user/me", `/user/${shopper.customerId}`]) {
            const r = yield* call("PUT", path, { token, json: { firstName: "Sneaky", [field]: value } })
            expectError(r, 403, "insufficient_scope", field)
          }
        }
        expect((yield* call("GET", "/user/me", { token })).body).toEqual(before)
      })
  )

  it.effect("staff-only routes refuse a shopper with 403, even on their own record", () =>
    Effect.gen(function* () {
      const shopper = yield* registeredShopper()
      const token = shopper.accessToken
      for (const [method, path, json] of [
        ["POST", "/user", { email: uniqueEmail(), firstName: "A", lastName: "B" }],
        ["POST", `/user/${shopper.customerId}/tag`, { tags: ["vip"] }],
        ["POST", "/user/me/tag", { tags: ["vip"] }],
        ["DELETE", `/user/${shopper.customerId}`, undefined],
        ["DELETE", "/user/me", undefined]
      ] as const) {
        const r = yield* call(method, path, { token, ...(json === undefined ? {} : { json }) })
        expectError(r, 403, "insufficient_scope")
      }
      const after = yield* call("GET", "/user/me", { token })
      expect(after.status).toBe(200)
      expect(after.body.tags).toEqual([])
    })
  )

  it.effect("a shopper manages their own addresses through /user/me", () =>
    Effect.gen(function* () {
      const shopper = yield* registeredShopper()
      const token = shopper.accessToken
      const added = yield* call("POST", "/user/me/address", {
        token,
        json: { label: "Home", line1: "5 Rue de Rivoli", city: "Paris", postalCode: "75001", country: "fr" }
      })
      expect(added.status, added.text).toBe(201)
      expect(added.body).toMatchObject({ label: "Home", country: "FR", isDefault: true })
      const work = yield* call("POST", `/user/${shopper.customerId}/address`, {
        token,
        json: { label: "Work", line1: "1 Quai", city: "Lyon", country: "FR", isDefault: true }
      })
      expect(work.status).toBe(201)
      expect((yield* call("DELETE", `/user/me/address/${work.body.id}`, { token })).status).toBe(204)
      const me = yield* call("GET", "/user/me", { token })
      expect(me.body.addresses).toEqual([{ ...added.body, isDefault: true }])
    })
  )

  it.effect("an admin (no customer record) calling /user/me gets 404", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      for (const [method, path, json] of [
        ["GET", "/user/me", undefined],
        ["PUT", "/user/me", { firstName: "Admin" }],
        ["POST", "/user/me/address", { line1: "1 Main St", city: "Paris", country: "FR" }],
        ["POST", "/user/me/tag", { tags: ["x"] }],
        ["DELETE", "/user/me", undefined]
      ] as const) {
        const r = yield* call(method, path, { token, ...(json === undefined ? {} : { json }) })
        expectError(r, 404, "resource_missing", "id")
      }
    })
  )

  it.effect(
    "deactivation ends the shopper's sessions and refuses login and refresh; reactivation undoes it",
    () =>
      Effect.gen(function* () {
        const admin = yield* adminToken
        const shopper = yield* registeredShopper()
        // A second session, to check every session ends.
        const second = yield* login(shopper.email)
        expect(second.status).toBe(200)
        const off = yield* call("PUT", `/user/${shopper.customerId}`, {
          token: admin,
          json: { active: false }
        })
        expect(off.status, off.text).toBe(200)
        expect(off.body).toMatchObject({ id: shopper.customerId, active: false, hasAccount: true })
        for (const token of [shopper.accessToken, second.body.accessToken]) {
          expectError(yield* call("GET", "/auth/me", { token }), 401, "token_revoked")
          expectError(yield* call("GET", "/user/me", { token }), 401, "token_revoked")
        }
        // The right password learns the account is deactivated; a wrong one learns nothing.
        expectError(yield* login(shopper.email), 403, "account_deactivated")
        expectError(yield* login(shopper.email.toUpperCase()), 403, "account_deactivated")
        expectError(yield* login(shopper.email, "wrong password!"), 401, "invalid_credentials")
        for (const refreshToken of [shopper.refreshToken, second.body.refreshToken]) {
          // The refresh token proves who is asking, so it may learn why.
          const refreshed = yield* call("POST", "/auth/refresh", { json: { refreshToken } })
          expectError(refreshed, 403, "account_deactivated")
          // The same session with a wrong secret proves nothing: it learns nothing either.
          const forged = `${refreshToken.slice(0, -43)}${"A".repeat(43)}`
          expectError(
            yield* call("POST", "/auth/refresh", { json: { refreshToken: forged } }),
            401,
            "invalid_token"
          )
        }
        // Staff still see the record, inactive.
        expect((yield* getCustomer(admin, shopper.customerId)).active).toBe(false)
        const listed = yield* listCustomers(admin, { q: shopper.email })
        expect(listed.body.models.map((m: { id: string }) => m.id)).toEqual([shopper.customerId])
        // Deactivating again changes nothing and still answers the customer.
        const again = yield* call("PUT", `/user/${shopper.customerId}`, {
          token: admin,
          json: { active: false }
        })
        expect(again.status).toBe(200)
        expect(again.body.active).toBe(false)
        expectError(yield* login(shopper.email), 403, "account_deactivated")
        // Other edits while inactive keep it inactive.
        const renamed = yield* call("PUT", `/user/${shopper.customerId}`, {
          token: admin,
          json: { firstName: "Still" }
        })
        expect(renamed.body).toMatchObject({ firstName: "Still", active: false })
        expectError(yield* login(shopper.email), 403, "account_deactivated")

        const on = yield* call("PUT", `/user/${shopper.customerId}`, { token: admin, json: { active: true } })
        expect(on.status, on.text).toBe(200)
        expect(on.body.active).toBe(true)
        const back = yield* login(shopper.email)
        expect(back.status, back.text).toBe(200)
        const me = yield* call("GET", "/auth/me", { token: back.body.accessToken })
        expect(me.body).toMatchObject({ customerId: shopper.customerId, firstName: "Still" })
        expect((yield* call("GET", "/user/me", { token: back.body.accessToken })).body.active).toBe(true)
        const refreshed = yield* call("POST", "/auth/refresh", {
          json: { refreshToken: back.body.refreshToken }
        })
        expect(refreshed.status, refreshed.text).toBe(200)
        // The sessions that deactivation ended stay ended.
        expectError(yield* call("GET", "/auth/me", { token: shopper.accessToken }), 401, "token_revoked")
        expectError(
          yield* call("POST", "/auth/refresh", { json: { refreshToken: shopper.refreshToken } }),
          401,
          "token_revoked"
        )
      })
  )

  it.effect("deactivating a customer without a login only flips the flag", () =>
    Effect.gen(function* () {
      const admin = yield* adminToken
      const customer = yield* createCustomer(admin)
      const off = yield* call("PUT", `/user/${customer.id}`, { token: admin, json: { active: false } })
      expect(off.body).toMatchObject({ active: false, hasAccount: false })
      // Staff logins are untouched by it.
      const other = yield* adminLogin()
      expect((yield* call("GET", "/auth/me", { token: other.accessToken })).status).toBe(200)
      expect(
        (yield* call("PUT", `/user/${customer.id}`, { token: admin, json: { active: true } })).body.active
      ).toBe(true)
    })
  )
})
