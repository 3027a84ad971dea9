/**
 * Register, login, refresh (rotation and reuse detection), logout, /auth/me and login throttling,
 * over a real socket with real credentials (spec §4.1, §5, §7.1; design/API.md "Auth").
 */
import { readFileSync } from "node:fs"
import { SqlClient } from "@effect/sql"
import { describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { makeAppConfig } from "../../src/config.js"
import { ALL_SCOPES, CUSTOMER_SCOPES } from "../../src/identity/permissions.js"
import { makeShiftedClock } from "../support/clock.js"
import {
  adminLogin,
  call,
  expectError,
  IdentityHttp,
  identityHttp,
  PASSWORD,
  type Reply,
  registerShopper,
  uniqueEmail
} from "../support/identity.js"

const countEvents = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM event_store.events`, (rows) => rows[0]?.n ?? 0)
)

const throttled = {
  ...makeAppConfig().identity,
  loginMaxFailuresPerAccount: 3,
  loginMaxFailuresPerIp: 5
}

const base64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url")

describe("identity over HTTP", () => {
  layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("sessions", (it) => {
    it.effect("register: 201 with a token set, the user and its customer record (customer.created)", () =>
      Effect.gen(function* () {
        const email = uniqueEmail()
        const r = yield* call("POST", "/auth/register", {
          json: { email: `  ${email}  `, password: PASSWORD, firstName: "Ann", lastName: "Lee" }
        })
        expect(r.status, r.text).toBe(201)
        expect(r.body).toMatchObject({ tokenType: "Bearer", expiresIn: 3600 })
        expect(r.body.accessToken.split(".")).toHaveLength(3)
        expect(r.body.refreshToken).toMatch(/^rt_[0-9a-z]{26}[0-9A-Za-z]{43}$/)
        expect(r.body.user).toEqual({
          id: r.body.userId,
          email,
          firstName: "Ann",
          lastName: "Lee",
          createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
        })
        expect(r.body.user.id).toMatch(/^usr_/)
        const sql = yield* SqlClient.SqlClient
        const customers = yield* sql<{ customerId: string; email: string; userId: string }>`
          SELECT customer_id AS "customerId", email, user_id AS "userId" FROM customers.customers WHERE user_id = ${r.body.userId}`
        expect(customers).toHaveLength(1)
        expect(customers[0]?.email).toBe(email)
        const published = yield* sql<{ data: { id: string; email: string; orderCount: number } }>`
          SELECT data FROM event_store.public_events WHERE type = 'customer.created' AND subject_id = ${customers[0]?.customerId ?? ""}`
        expect(published).toHaveLength(1)
        expect(published[0]?.data).toMatchObject({
          id: customers[0]?.customerId,
          email,
          orderCount: 0,
          totalSpent: 0
        })
        // Personal fields are ciphertext in the log.
        const raw = yield* sql<{
          n: number
        }>`SELECT count(*)::int AS n FROM event_store.events WHERE data::text LIKE ${`%${email}%`}`
        expect(raw[0]?.n).toBe(0)
      })
    )

    it.effect(
      "register refuses a taken address (any case) with 409, and bad input with 400, writing nothing",
      () =>
        Effect.gen(function* () {
          const email = uniqueEmail()
          yield* registerShopper(email)
          const before = yield* countEvents
          const body = (overrides: Record<string, unknown>) => ({
            email: uniqueEmail(),
            password: PASSWORD,
            firstName: "Ann",
            lastName: "Lee",
            ...overrides
          })
          expectError(
            yield* call("POST", "/auth/register", { json: body({ email: email.toUpperCase() }) }),
            409,
            "resource_already_exists",
            "email"
          )
          expectError(
            yield* call("POST", "/auth/register", { json: body({ email: "not-an-email" }) }),
            400,
            "parameter_invalid",
            "email"
          )
          expectError(
            yield* call("POST", "/auth/register", { json: body({ password: "short12" }) }),
            400,
            "weak_password",
            "password"
          )
          expectError(
            yield* call("POST", "/auth/register", { json: body({ password: "x".repeat(129) }) }),
            400,
            "weak_password",
            "password"
          )
          expectError(
            yield* call("POST", "/auth/register", { json: body({ password: "        " }) }),
            400,
            "weak_password"
          )
          expectError(
            yield* call("POST", "/auth/register", { json: body({ firstName: "  " }) }),
            400,
            "parameter_invalid",
            "firstName"
          )
          const { lastName: _omitted, ...missing } = body({})
          expectError(
            yield* call("POST", "/auth/register", { json: missing }),
            400,
            "parameter_missing",
            "lastName"
          )
          expect(yield* countEvents).toBe(before)
          // 8 and 128 characters are accepted.
          expect(
            (yield* call("POST", "/auth/register", { json: body({ password: "12345678" }) })).status
          ).toBe(201)
          expect(
            (yield* call("POST", "/auth/register", { json: body({ password: "p".repeat(128) }) })).status
          ).toBe(201)
        })
    )

    it.effect("two registrations of one address at once: one 201, one 409", () =>
      Effect.gen(function* () {
        const email = uniqueEmail()
        const json = { email, password: PASSWORD, firstName: "Ann", lastName: "Lee" }
        const replies = yield* Effect.all(
          [call("POST", "/auth/register", { json }), call("POST", "/auth/register", { json })],
          {
            concurrency: 2
          }
        )
        expect(replies.map((r) => r.status).sort()).toEqual([201, 409])
        const sql = yield* SqlClient.SqlClient
        const users = yield* sql<{
          n: number
        }>`SELECT count(*)::int AS n FROM identity.users WHERE email_normalized = ${email}`
        expect(users[0]?.n).toBe(1)
      })
    )

    it.effect(
      "login: token set with userId; lastLoginAt moves; wrong password and unknown email look alike",
      () =>
        Effect.gen(function* () {
          const email = uniqueEmail()
          const registered = yield* registerShopper(email)
          const meBefore = yield* call("GET", "/auth/me", { token: registered.accessToken })
          const r = yield* call("POST", "/auth/login", {
            json: { email: email.toUpperCase(), password: PASSWORD }
          })
          expect(r.status, r.text).toBe(200)
          expect(r.body).toMatchObject({ tokenType: "Bearer", expiresIn: 3600, userId: registered.userId })
          expect(r.body.refreshToken).toMatch(/^rt_/)
          expect(r.body.user).toBeUndefined()
          const me = yield* call("GET", "/auth/me", { token: r.body.accessToken })
          expect(Date.parse(me.body.lastLoginAt)).toBeGreaterThan(Date.parse(meBefore.body.lastLoginAt))
          const wrong = yield* call("POST", "/auth/login", { json: { email, password: "wrong password" } })
          const unknown = yield* call("POST", "/auth/login", {
            json: { email: uniqueEmail(), password: "wrong password" }
          })
          expectError(wrong, 401, "invalid_credentials")
          expectError(unknown, 401, "invalid_credentials")
          const strip = (reply: Reply) => ({ ...reply.body.error, requestId: undefined })
          expect(strip(wrong)).toEqual(strip(unknown))
          expectError(
            yield* call("POST", "/auth/login", { json: { email } }),
            400,
            "parameter_missing",
            "password"
          )
        })
    )

    it.effect("/auth/me: role, permissions and customerId of a shopper; every permission for an admin", () =>
      Effect.gen(function* () {
        const shopper = yield* registerShopper()
        const me = yield* call("GET", "/auth/me", { token: shopper.accessToken })
        expect(me.status).toBe(200)
        expect(me.body).toMatchObject({
          id: shopper.userId,
          role: "customer",
          firstName: "Ann",
          lastName: "Lee"
        })
        expect([...me.body.permissions].sort()).toEqual([...CUSTOMER_SCOPES].sort())
        expect(me.body.customerId).toMatch(/^cus_/)
        const admin = yield* adminLogin()
        const adminMe = yield* call("GET", "/auth/me", { token: admin.accessToken })
        expect(adminMe.body.role).toBe("admin")
        expect([...adminMe.body.permissions].sort()).toEqual([...ALL_SCOPES].sort())
        expect(adminMe.body.customerId).toBeUndefined()
      })
    )

    it.effect("refresh rotates; a reused refresh token revokes the whole family", () =>
      Effect.gen(function* () {
        const first = yield* registerShopper()
        const second = yield* call("POST", "/auth/refresh", { json: { refreshToken: first.refreshToken } })
        expect(second.status, second.text).toBe(200)
        expect(second.body).toMatchObject({ tokenType: "Bearer", expiresIn: 3600, userId: first.userId })
        expect(second.body.refreshToken).not.toBe(first.refreshToken)
        expect((yield* call("GET", "/auth/me", { token: second.body.accessToken })).status).toBe(200)
        // The first token again: reuse. Every token of the session dies.
        expectError(
          yield* call("POST", "/auth/refresh", { json: { refreshToken: first.refreshToken } }),
          401,
          "token_revoked"
        )
        expectError(
          yield* call("POST", "/auth/refresh", { json: { refreshToken: second.body.refreshToken } }),
          401,
          "token_revoked"
        )
        expectError(yield* call("GET", "/auth/me", { token: second.body.accessToken }), 401, "token_revoked")
        expectError(yield* call("GET", "/auth/me", { token: first.accessToken }), 401, "token_revoked")
        const sql = yield* SqlClient.SqlClient
        const sessions = yield* sql<{
          reason: string
        }>`SELECT revoke_reason AS reason FROM identity.sessions WHERE user_id = ${first.userId}`
        expect(sessions.map((s) => s.reason)).toEqual(["refresh_token_reused"])
        // Another login is a new family and works.
        const email = (yield* call("GET", "/auth/me", { token: (yield* registerShopper()).accessToken })).body
          .email
        expect((yield* call("POST", "/auth/login", { json: { email, password: PASSWORD } })).status).toBe(200)
      })
    )

    it.effect("refresh refuses malformed, unknown and access tokens with 401 invalid_token", () =>
      Effect.gen(function* () {
        const session = yield* registerShopper()
        for (const refreshToken of [
          "",
          "garbage",
          session.accessToken,
          `${session.refreshToken.slice(0, -1)}${session.refreshToken.endsWith("A") ? "B" : "A"}`,
          `rt_01jd4x8m6ffq2b3n5r7t9v1w3y${"A".repeat(43)}`
        ]) {
          expectError(yield* call("POST", "/auth/refresh", { json: { refreshToken } }), 401, "invalid_token")
        }
        // A wrong guess does not revoke the family.
        expect(
          (yield* call("POST", "/auth/refresh", { json: { refreshToken: session.refreshToken } })).status
        ).toBe(200)
        expectError(
          yield* call("POST", "/auth/refresh", { json: {} }),
          400,
          "parameter_missing",
          "refreshToken"
        )
      })
    )

    it.effect("logout: 204; the access token and its refresh token are revoked; other sessions live on", () =>
      Effect.gen(function* () {
        const email = uniqueEmail()
        const session = yield* registerShopper(email)
        const other = (yield* call("POST", "/auth/login", { json: { email, password: PASSWORD } })).body
        const r = yield* call("POST", "/auth/logout", { token: session.accessToken })
        expect(r.status).toBe(204)
        expect(r.text).toBe("")
        expectError(yield* call("GET", "/auth/me", { token: session.accessToken }), 401, "token_revoked")
        expectError(
          yield* call("POST", "/auth/refresh", { json: { refreshToken: session.refreshToken } }),
          401,
          "token_revoked"
        )
        expectError(yield* call("POST", "/auth/logout", { token: session.accessToken }), 401, "token_revoked")
        expect((yield* call("GET", "/auth/me", { token: other.accessToken })).status).toBe(200)
      })
    )

    it.effect("a tampered, unsigned or foreign-key token is 401 invalid_token", () =>
      Effect.gen(function* () {
        const session = yield* registerShopper()
        const [header, payload, signature] = session.accessToken.split(".")
        const claims = JSON.parse(Buffer.from(payload ?? "", "base64url").toString())
        const forged = [
          `${header}.${base64url({ ...claims, role: "admin" })}.${signature}`,
          `${base64url({ alg: "none", typ: "JWT" })}.${base64url({ ...claims, role: "admin" })}.`,
          `${base64url({ alg: "HS256", typ: "JWT" })}.${payload}.${Buffer.from("x".repeat(32)).toString("base64url")}`,
          `${header}.${payload}`,
          `${header}.${payload}.${signature}.extra`
        ]
        for (const token of forged)
          expectError(yield* call("GET", "/auth/me", { token }), 401, "invalid_token")
        expect((yield* call("GET", "/auth/me", { token: session.accessToken })).status).toBe(200)
      })
    )
  })

  const { clock, advance } = makeShiftedClock()

  layer(identityHttp({}, clock), { excludeTestServices: true, timeout: 60_000 })("expiry", (it) => {
    it.effect("an access token past its hour → 401 token_expired; a refresh token past 30 days too", () =>
      Effect.gen(function* () {
        const session = yield* registerShopper()
        yield* advance("59 minutes")
        expect((yield* call("GET", "/auth/me", { token: session.accessToken })).status).toBe(200)
        yield* advance("2 minutes")
        expectError(yield* call("GET", "/auth/me", { token: session.accessToken }), 401, "token_expired")
        const refreshed = yield* call("POST", "/auth/refresh", {
          json: { refreshToken: session.refreshToken }
        })
        expect(refreshed.status, refreshed.text).toBe(200)
        expect((yield* call("GET", "/auth/me", { token: refreshed.body.accessToken })).status).toBe(200)
        yield* advance("31 days")
        expectError(
          yield* call("POST", "/auth/refresh", { json: { refreshToken: refreshed.body.refreshToken } }),
          401,
          "token_expired"
        )
      })
    )
  })

  layer(
    identityHttp({
      identity: { ...throttled },
      // RATE_LIMIT_ENABLED=false: the HTTP rate limits are off, login throttling is not.
      rateLimit: { ...makeAppConfig().rateLimit, enabled: false }
    }),
    { excludeTestServices: true, timeout: 60_000 }
  )("login throttling", (it) => {
    it.effect("failures per account: 429 rate_limited with Retry-After, even for the right password", () =>
      Effect.gen(function* () {
        const email = uniqueEmail()
        yield* registerShopper(email)
        for (let i = 0; i < 3; i++) {
          expectError(
            yield* call("POST", "/auth/login", { json: { email, password: "wrong password" } }),
            401,
            "invalid_credentials"
          )
        }
        const refused = yield* call("POST", "/auth/login", { json: { email, password: PASSWORD } })
        expectError(refused, 429, "rate_limited")
        expect(refused.body.error.type).toBe("rate_limit_error")
        expect(Number(refused.headers["retry-after"])).toBeGreaterThanOrEqual(1)
        expect(Number(refused.headers["retry-after"])).toBeLessThanOrEqual(15 * 60)
        // Another account from the same address is not affected by this account's count.
        const other = uniqueEmail()
        yield* registerShopper(other)
        expect(
          (yield* call("POST", "/auth/login", { json: { email: other, password: PASSWORD } })).status
        ).toBe(200)
      })
    )

    it("the README documents RATE_LIMIT_ENABLED=false and login throttling together: it stays on (as in this layer)", () => {
      const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8")
      const row = (name: string) => readme.split("\n").find((line) => line.startsWith(`| \`${name}\``)) ?? ""
      const rateLimit = row("RATE_LIMIT_ENABLED")
      const perAccount = row("LOGIN_MAX_FAILURES_PER_ACCOUNT")
      const perIp = row("LOGIN_MAX_FAILURES_PER_IP")
      // Documented together: each row names the other settings and says the throttle stays on.
      expect(rateLimit).toContain("LOGIN_MAX_FAILURES_PER_ACCOUNT")
      expect(rateLimit).toContain("LOGIN_MAX_FAILURES_PER_IP")
      expect(rateLimit).toMatch(/login throttling[^|]*stays on/)
      for (const login of [perAccount, perIp]) {
        expect(login).toContain("RATE_LIMIT_ENABLED=false")
        expect(login).toMatch(/even with `RATE_LIMIT_ENABLED=false`/)
      }
    })

    it.effect("failures per address across accounts: 429 once the address is spent", () =>
      Effect.gen(function* () {
        // 3 failures were spent from this address above; 5 are allowed per address.
        for (let i = 0; i < 2; i++) {
          expectError(
            yield* call("POST", "/auth/login", {
              json: { email: uniqueEmail(), password: "wrong password" }
            }),
            401,
            "invalid_credentials"
          )
        }
        const email = uniqueEmail()
        yield* registerShopper(email)
        expectError(
          yield* call("POST", "/auth/login", { json: { email, password: PASSWORD } }),
          429,
          "rate_limited"
        )
      })
    )
  })
})
