/**
 * Password reset over a real socket (design/API.md "Auth" → passwords): the request always answers
 * 202 and, for a real account, emits `customer.password_reset` carrying a single-use token; the
 * confirmation sets the password, revokes every earlier session, and refuses used, unknown,
 * superseded and expired tokens with their own codes.
 */
import { createHash } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { makeShiftedClock } from "../support/clock.js"
import {
  adminLogin,
  call,
  expectError,
  IdentityHttp,
  identityHttp,
  PASSWORD,
  registerShopper,
  uniqueEmail
} from "../support/identity.js"

const NEW_PASSWORD = "a brand new passphrase"
const RESET_TOKEN = /^prt_[0-7][0-9a-hjkmnp-tv-z]{25}[0-9A-Za-z]{43}$/
const ISO_MILLIS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/

interface ResetEvent {
  readonly id: string
  readonly subjectId: string | null
  readonly occurredAt: Date
  readonly data: {
    readonly userId: string
    readonly customerId?: string
    readonly email: string
    readonly firstName: string
    readonly lastName: string
    readonly resetToken: string
    readonly expiresAt: string
  }
}

/** The `customer.password_reset` events about `userId`, oldest first. */
const resetEventsOf = (userId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ id: string; subjectId: string | null; occurredAt: Date; data: string }>`
      SELECT id, subject_id AS "subjectId", occurred_at AS "occurredAt", data::text AS data
        FROM event_store.public_events
       WHERE type = 'customer.password_reset' AND (subject_id = ${userId} OR data->>'userId' = ${userId})
       ORDER BY position`
    return rows.map((r): ResetEvent => ({ ...r, data: JSON.parse(r.data) }))
  }).pipe(Effect.orDie)

/** Waits (up to 5 s: the request's work runs in a background fiber) for the `count`-th event. */
const awaitResetEvent = (userId: string, count = 1) =>
  Effect.gen(function* () {
    for (let attempt = 0; attempt < 100; attempt++) {
      const events = yield* resetEventsOf(userId)
      const event = events[count - 1]
      if (event !== undefined) return event
      yield* Effect.sleep("50 millis")
    }
    return yield* Effect.dieMessage(`no customer.password_reset #${count} for ${userId} within 5 s`)
  })

const requestReset = (email: string) =>
  Effect.map(call("POST", "/auth/password-reset", { json: { email } }), (r) => {
    expect(r.status, r.text).toBe(202)
    expect(r.body).toEqual({ status: "accepted" })
    return r
  })

/** Requests a reset for a fresh shopper and answers the token mailed to them. */
const shopperWithResetToken = Effect.gen(function* () {
  const email = uniqueEmail()
  const shopper = yield* registerShopper(email)
  yield* requestReset(email)
  const event = yield* awaitResetEvent(shopper.userId)
  return { email, shopper, token: event.data.resetToken }
})

const confirm = (token: string, password = NEW_PASSWORD) =>
  call("POST", "/auth/password-reset/confirm", { json: { token, password } })

const login = (email: string, password: string) => call("POST", "/auth/login", { json: { email, password } })

describe("password reset", () => {
  layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("request and confirm", (it) => {
    it.effect("the request answers 202 alike for a real, an unknown and a malformed address", () =>
      Effect.gen(function* () {
        const email = uniqueEmail()
        yield* registerShopper(email)
        const replies = [
          yield* requestReset(email),
          yield* requestReset(uniqueEmail("nobody")),
          yield* requestReset("not an address")
        ]
        for (const r of replies) {
          expect(r.text).toBe(replies[0]?.text)
          expect(r.headers["content-type"]).toBe(replies[0]?.headers["content-type"])
          expect(r.headers["request-id"]).toMatch(/^req_/)
        }
        expect(new Set(replies.map((r) => r.headers["request-id"])).size).toBe(3)

        expectError(
          yield* call("POST", "/auth/password-reset", { json: {} }),
          400,
          "parameter_missing",
          "email"
        )
        expectError(
          yield* call("POST", "/auth/password-reset", { json: { email: 42 } }),
          400,
          "parameter_invalid",
          "email"
        )
      })
    )

    it.effect(
      "with an Idempotency-Key (its request runs in one transaction): the reset still happens, once",
      () =>
        Effect.gen(function* () {
          const email = uniqueEmail()
          const shopper = yield* registerShopper(email)
          const headers = { "idempotency-key": `reset-${email}` }
          const first = yield* call("POST", "/auth/password-reset", { json: { email }, headers })
          expect(first.status, first.text).toBe(202)
          // The work forked apart runs outside the request's transaction, after it ended.
          yield* awaitResetEvent(shopper.userId)
          const again = yield* call("POST", "/auth/password-reset", { json: { email }, headers })
          expect(again.status).toBe(202)
          expect(again.headers["idempotent-replayed"]).toBe("true")
          yield* Effect.sleep("200 millis")
          expect(yield* resetEventsOf(shopper.userId)).toHaveLength(1)
        })
    )

    it.effect(
      "emits customer.password_reset with the token for a real account, nothing for an unknown one",
      () =>
        Effect.gen(function* () {
          const email = uniqueEmail()
          const unknown = uniqueEmail("nobody")
          const shopper = yield* registerShopper(email)
          const me = yield* call("GET", "/auth/me", { token: shopper.accessToken })
          expect(me.status, me.text).toBe(200)
          const customerId: string = me.body.customerId
          expect(customerId).toMatch(/^cus_/)

          yield* requestReset(unknown)
          const before = Date.now()
          yield* requestReset(email)
          const event = yield* awaitResetEvent(shopper.userId)
          const after = Date.now()
          expect(event.subjectId).toBe(shopper.userId)
          expect(event.id).toMatch(/^evt_/)
          expect(event.data).toEqual({
            userId: shopper.userId,
            customerId,
            email,
            firstName: "Ann",
            lastName: "Lee",
            resetToken: expect.stringMatching(RESET_TOKEN),
            expiresAt: expect.stringMatching(ISO_MILLIS)
          })
          const expiresAt = Date.parse(event.data.expiresAt)
          expect(expiresAt).toBeGreaterThanOrEqual(before + 60 * 60_000 - 1000)
          expect(expiresAt).toBeLessThanOrEqual(after + 60 * 60_000 + 1000)

          // The unknown address was asked first; by now its fiber has long finished.
          yield* Effect.sleep("300 millis")
          const sql = yield* SqlClient.SqlClient
          const strays = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM event_store.public_events
          WHERE type = 'customer.password_reset' AND data->>'email' IN (${unknown}, 'not an address')`
          expect(strays[0]?.n).toBe(0)
          expect(yield* resetEventsOf(shopper.userId)).toHaveLength(1)

          // The domain event keeps the token encrypted (and its hash); only the notification carries it.
          const secret = event.data.resetToken.slice(-43)
          const inEvents = yield* sql<{ type: string }>`SELECT event_type AS type FROM event_store.events
            WHERE strpos(data::text, ${secret}) > 0 OR strpos(metadata::text, ${secret}) > 0`
          expect(inEvents).toEqual([])
          const inUsers = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM identity.users t
            WHERE strpos(t::text, ${secret}) > 0`
          expect(inUsers[0]?.n).toBe(0)
          const requested = yield* sql<{ tokenHash: string }>`SELECT data->>'tokenHash' AS "tokenHash"
            FROM event_store.events WHERE event_type = 'user.password_reset_requested'
             AND stream_id = ${`user-${shopper.userId}`}`
          expect(requested).toEqual([
            { tokenHash: createHash("sha256").update(event.data.resetToken, "utf8").digest("hex") }
          ])
        })
    )

    it.effect("a deactivated shopper gets no reset token (still 202); reactivated, they do", () =>
      Effect.gen(function* () {
        const email = uniqueEmail()
        const shopper = yield* registerShopper(email)
        const me = yield* call("GET", "/auth/me", { token: shopper.accessToken })
        const admin = yield* adminLogin()
        const setActive = (active: boolean) =>
          Effect.map(
            call("PUT", `/user/${me.body.customerId}`, { token: admin.accessToken, json: { active } }),
            (r) => expect(r.status, r.text).toBe(200)
          )
        yield* setActive(false)
        yield* requestReset(email)
        yield* Effect.sleep("300 millis")
        expect(yield* resetEventsOf(shopper.userId)).toHaveLength(0)
        yield* setActive(true)
        yield* requestReset(email)
        expect((yield* awaitResetEvent(shopper.userId)).data.email).toBe(email)
      })
    )

    it.effect("the address is matched whatever its case and surrounding spaces", () =>
      Effect.gen(function* () {
        const email = uniqueEmail()
        const shopper = yield* registerShopper(email)
        yield* requestReset(`  ${email.toUpperCase()}  `)
        const event = yield* awaitResetEvent(shopper.userId)
        expect(event.data.email).toBe(email)
      })
    )

    it.effect(
      "confirm → 204: the new password works, the old one and every earlier session are revoked",
      () =>
        Effect.gen(function* () {
          const email = uniqueEmail()
          const registered = yield* registerShopper(email)
          const second = yield* login(email, PASSWORD)
          expect(second.status, second.text).toBe(200)
          const sessions = [
            { accessToken: registered.accessToken, refreshToken: registered.refreshToken },
            {
              accessToken: second.body.accessToken as string,
              refreshToken: second.body.refreshToken as string
            }
          ]
          for (const s of sessions)
            expect((yield* call("GET", "/auth/me", { token: s.accessToken })).status).toBe(200)

          yield* requestReset(email)
          const { data } = yield* awaitResetEvent(registered.userId)
          const r = yield* confirm(data.resetToken)
          expect(r.status, r.text).toBe(204)
          expect(r.text).toBe("")

          expectError(yield* login(email, PASSWORD), 401, "invalid_credentials")
          for (const s of sessions) {
            expectError(yield* call("GET", "/auth/me", { token: s.accessToken }), 401, "token_revoked")
            expectError(
              yield* call("POST", "/auth/refresh", { json: { refreshToken: s.refreshToken } }),
              401,
              "token_revoked"
            )
          }

          const fresh = yield* login(email, NEW_PASSWORD)
          expect(fresh.status, fresh.text).toBe(200)
          expect(fresh.body.userId).toBe(registered.userId)
          const me = yield* call("GET", "/auth/me", { token: fresh.body.accessToken })
          expect(me.status, me.text).toBe(200)
          expect(me.body.email).toBe(email)
          const refreshed = yield* call("POST", "/auth/refresh", {
            json: { refreshToken: fresh.body.refreshToken }
          })
          expect(refreshed.status, refreshed.text).toBe(200)
          expect((yield* call("GET", "/auth/me", { token: refreshed.body.accessToken })).status).toBe(200)

          const sql = yield* SqlClient.SqlClient
          const rows = yield* sql<{ sessionId: string; reason: string | null }>`
          SELECT session_id AS "sessionId", revoke_reason AS reason FROM identity.sessions
           WHERE user_id = ${registered.userId} ORDER BY started_at`
          expect(rows).toHaveLength(3)
          expect(rows.slice(0, 2).map((row) => row.reason)).toEqual(["password_reset", "password_reset"])
          expect(rows[2]?.reason).toBeNull()
        })
    )

    it.effect("a token is single use: reused → 400 reset_token_used", () =>
      Effect.gen(function* () {
        const { email, token } = yield* shopperWithResetToken
        expect((yield* confirm(token)).status).toBe(204)
        expectError(yield* confirm(token, "yet another passphrase"), 400, "reset_token_used", "token")
        expectError(yield* login(email, "yet another passphrase"), 401, "invalid_credentials")
        expect((yield* login(email, NEW_PASSWORD)).status).toBe(200)
      })
    )

    it.effect("two confirmations of one token at once: one 204, the other 400 reset_token_used", () =>
      Effect.gen(function* () {
        const { email, token } = yield* shopperWithResetToken
        const replies = yield* Effect.all(
          [confirm(token, "first racing passphrase"), confirm(token, "second racing passphrase")],
          { concurrency: "unbounded" }
        )
        expect(replies.map((r) => r.status).sort(), replies.map((r) => r.text).join(" | ")).toEqual([
          204, 400
        ])
        const loser = replies.find((r) => r.status === 400)
        if (loser !== undefined) expectError(loser, 400, "reset_token_used", "token")
        const winner = replies[0]?.status === 204 ? "first racing passphrase" : "second racing passphrase"
        expect((yield* login(email, winner)).status).toBe(200)
      })
    )

    it.effect("garbage, or a well-formed token with a wrong secret → 400 reset_token_invalid", () =>
      Effect.gen(function* () {
        const { email, shopper, token } = yield* shopperWithResetToken
        const suffix = shopper.userId.slice("usr_".length)
        const forged = `prt_${suffix}${token.endsWith("A") ? "B".repeat(43) : "A".repeat(43)}`
        const unknownUser = `prt_01jd4x8m6ffq2b3n5r7t9v1w3y${token.slice(-43)}`
        for (const candidate of [
          "garbage",
          "",
          forged,
          unknownUser,
          `${token}x`,
          token.slice(0, -1),
          token.replace("prt_", "rt_")
        ]) {
          expectError(yield* confirm(candidate), 400, "reset_token_invalid", "token")
        }
        // None of it spent the real token.
        expect((yield* confirm(token)).status).toBe(204)
        expect((yield* login(email, NEW_PASSWORD)).status).toBe(200)
      })
    )

    it.effect("a second request supersedes the first token", () =>
      Effect.gen(function* () {
        const email = uniqueEmail()
        const shopper = yield* registerShopper(email)
        yield* requestReset(email)
        const first = yield* awaitResetEvent(shopper.userId, 1)
        yield* requestReset(email)
        const second = yield* awaitResetEvent(shopper.userId, 2)
        expect(second.data.resetToken).not.toBe(first.data.resetToken)
        expectError(yield* confirm(first.data.resetToken), 400, "reset_token_used", "token")
        expect((yield* confirm(second.data.resetToken)).status).toBe(204)
        expect((yield* login(email, NEW_PASSWORD)).status).toBe(200)
      })
    )

    it.effect("a weak password → 400 weak_password and the token stays usable", () =>
      Effect.gen(function* () {
        const { email, token } = yield* shopperWithResetToken
        expectError(yield* confirm(token, "7 chars"), 400, "weak_password", "password")
        expectError(yield* confirm(token, "        "), 400, "weak_password", "password")
        expectError(yield* confirm(token, "x".repeat(129)), 400, "weak_password", "password")
        // The password did not change.
        expect((yield* login(email, PASSWORD)).status).toBe(200)
        expect((yield* confirm(token)).status).toBe(204)
        expect((yield* login(email, NEW_PASSWORD)).status).toBe(200)
      })
    )

    it.effect("a confirmation without token or password → 400", () =>
      Effect.gen(function* () {
        for (const json of [{}, { token: "prt_x" }, { password: NEW_PASSWORD }, { token: 1, password: 2 }]) {
          const r = yield* call("POST", "/auth/password-reset/confirm", { json })
          expect(r.status, `${JSON.stringify(json)}: ${r.text}`).toBe(400)
          expect(r.body.error.type).toBe("invalid_request_error")
        }
      })
    )
  })

  const time = makeShiftedClock()
  layer(identityHttp({}, time.clock), { excludeTestServices: true, timeout: 120_000 })("expiry", (it) => {
    it.effect("a token older than PASSWORD_RESET_TTL (60 minutes) → 400 reset_token_expired", () =>
      Effect.gen(function* () {
        const early = yield* shopperWithResetToken
        const late = yield* shopperWithResetToken
        yield* time.advance("59 minutes")
        expect((yield* confirm(early.token)).status).toBe(204)
        yield* time.advance("2 minutes")
        expectError(yield* confirm(late.token), 400, "reset_token_expired", "token")
        expectError(yield* login(late.email, NEW_PASSWORD), 401, "invalid_credentials")
        expect((yield* login(late.email, PASSWORD)).status).toBe(200)

        // A new request starts a new hour.
        yield* requestReset(late.email)
        const renewed = yield* awaitResetEvent(late.shopper.userId, 2)
        expect((yield* confirm(renewed.data.resetToken)).status).toBe(204)
        expect((yield* login(late.email, NEW_PASSWORD)).status).toBe(200)
      })
    )
  })
})
