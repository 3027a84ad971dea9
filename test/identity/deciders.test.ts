/**
 * The identity aggregates as pure deciders (no database): users and password resets, sessions
 * (refresh-token rotation and reuse detection), API keys and OAuth clients.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fc from "fast-check"
import type { EventMetadata } from "../../src/eventstore/EventStore.js"
import { type DomainEvent, shredded } from "../../src/eventstore/EventType.js"
import {
  ApiKeyDecider,
  OAuthClientDecider,
  SessionDecider,
  type SessionState,
  UserDecider,
  type UserState
} from "../../src/identity/decider.js"
import {
  type ActorRef,
  ApiKeyCreated,
  ApiKeyRevoked,
  OAuthClientCreated,
  OAuthClientDeleted,
  OAuthClientTokenIssued,
  OAuthClientTokenRevoked,
  SessionRevoked,
  SessionStarted,
  TokenRefreshed,
  UserDeactivated,
  UserErased,
  UserLoggedIn,
  UserPasswordReset,
  UserPasswordResetRequested,
  UserProfileChanged,
  UserReactivated,
  UserRegistered
} from "../../src/identity/events.js"
import { revocationOf } from "../../src/identity/projection.js"
import { digest, randomBase62 } from "../../src/identity/secrets.js"
import { fold, type Recorded } from "../../src/kernel/Decider.js"
import { deciderSpec } from "../support/decider.js"

const user = deciderSpec(UserDecider)
const session = deciderSpec(SessionDecider)
const apiKey = deciderSpec(ApiKeyDecider)
const oauthClient = deciderSpec(OAuthClientDecider)

const admin: ActorRef = { type: "user", id: "usr_01jd4x8m6ffq2b3n5r7t9v1w3y" }
const at = (iso: string) => new Date(iso)

/** An event as the store hands it back: decided data plus where and when it was recorded. */
const record = <E extends DomainEvent>(event: E, recordedAt: Date): Recorded<E> => ({
  ...event,
  globalPosition: 1,
  transactionId: "1234",
  streamId: "stream-1",
  streamVersion: 1,
  eventId: "0190f6c0-0000-7000-8000-000000000001",
  schemaVersion: 1,
  metadata: {},
  recordedAt
})

// --- Users -----------------------------------------------------------------------------------------

const userId = "usr_01jd4x8m6ffq2b3n5r7t9v1w3a"
const customerId = "cus_01jd4x8m6ffq2b3n5r7t9v1w3b"

const register = {
  _tag: "Register",
  userId,
  email: "ann@example.com",
  firstName: "Ann",
  lastName: "Lee",
  passwordHash: "scrypt$old",
  role: "customer",
  customerId
} as const

/** What registering decides: the command's fields, as they are. */
const { _tag: _, ...registration } = register
const registeredEvent = UserRegistered.make(registration)
const registered: UserState = fold(UserDecider, [registeredEvent])

const resetToken = () => `prt_${userId.slice(4)}${randomBase62()}`
const requestedAt = at("2030-01-01T10:00:00.000Z")
const resetExpiresAt = at("2030-01-01T10:30:00.000Z")

const requestReset = (state: UserState, resetId: string, token: string, expiresAt = resetExpiresAt) =>
  user.givenState(state).when({
    _tag: "RequestPasswordReset",
    resetId,
    token,
    tokenHash: digest(token),
    expiresAt
  })

describe("UserDecider", () => {
  it("registers a user once; a second registration is UserAlreadyExists", () => {
    const { state } = user.when(register).thenEvents([registeredEvent])
    expect(state).toEqual(registered)
    expect(state).toMatchObject({
      status: "active",
      ...registration,
      pendingReset: undefined,
      spentResetHashes: [],
      sessionsValidAfter: undefined
    })

    user.givenState(state).when(register).thenFails({ _tag: "UserAlreadyExists", userId })
  })

  it("an admin without a linked customer has no customerId key in the event", () => {
    const [event] = user.when({
      _tag: "Register",
      userId,
      email: "root@example.com",
      firstName: "Root",
      lastName: "Admin",
      passwordHash: "h",
      role: "admin"
    }).events
    expect(event?.data).not.toHaveProperty("customerId")
    expect(event?.data).toMatchObject({ role: "admin" })
  })

  it("commands other than Register on an unknown user are UserNotFound", () => {
    user.when({ _tag: "RecordLogin", sessionId: "ses_1" }).thenFails("UserNotFound")
    user
      .when({ _tag: "ResetPassword", tokenHash: digest("x"), passwordHash: "h", now: requestedAt })
      .thenFails("UserNotFound")
  })

  it("records a login without changing the state", () => {
    const { state } = user
      .givenState(registered)
      .when({
        _tag: "RecordLogin",
        sessionId: "ses_x"
      })
      .thenEvents([UserLoggedIn.make({ userId, sessionId: "ses_x" })])
    expect(state).toEqual(registered)
  })

  it("a reset request leaves a pending reset", () => {
    const token = resetToken()
    const { events, state } = requestReset(registered, "prs_1", token)
    expect(events).toEqual([
      UserPasswordResetRequested.make({
        userId,
        resetId: "prs_1",
        tokenHash: digest(token),
        token,
        expiresAt: resetExpiresAt
      })
    ])
    expect(state.pendingReset).toEqual({
      resetId: "prs_1",
      tokenHash: digest(token),
      expiresAt: resetExpiresAt
    })
    expect(state.spentResetHashes).toEqual([])
    expect(state.passwordHash).toBe("scrypt$old")
  })

  it("the right token before expiry resets the password; sessionsValidAfter = now", () => {
    const token = resetToken()
    const pending = requestReset(registered, "prs_1", token).state
    const now = new Date(resetExpiresAt.getTime() - 1) // the last valid millisecond
    const { state } = user
      .givenState(pending)
      .when({
        _tag: "ResetPassword",
        tokenHash: digest(token),
        passwordHash: "scrypt$new",
        now
      })
      .thenEvents([
        UserPasswordReset.make({
          userId,
          resetId: "prs_1",
          passwordHash: "scrypt$new",
          sessionsValidAfter: now
        })
      ])
    expect(state.passwordHash).toBe("scrypt$new")
    expect(state.sessionsValidAfter).toEqual(now)
    expect(state.pendingReset).toBeUndefined()
    expect(state.spentResetHashes).toEqual([digest(token)])
  })

  it("a token that was never issued is ResetTokenInvalid unknown", () => {
    const pending = requestReset(registered, "prs_1", resetToken()).state
    user
      .givenState(pending)
      .when({ _tag: "ResetPassword", tokenHash: digest(resetToken()), passwordHash: "h", now: requestedAt })
      .thenFails({ _tag: "ResetTokenInvalid", reason: "unknown" })
    // Without any pending reset, too.
    user
      .givenState(registered)
      .when({ _tag: "ResetPassword", tokenHash: digest(resetToken()), passwordHash: "h", now: requestedAt })
      .thenFails({ _tag: "ResetTokenInvalid", reason: "unknown" })
  })

  it("a token already used is ResetTokenInvalid used", () => {
    const token = resetToken()
    const pending = requestReset(registered, "prs_1", token).state
    const command = {
      _tag: "ResetPassword",
      tokenHash: digest(token),
      passwordHash: "scrypt$new",
      now: requestedAt
    } as const
    const afterReset = user.givenState(pending).when(command).state
    user.givenState(afterReset).when(command).thenFails({ _tag: "ResetTokenInvalid", reason: "used" })
  })

  it("a token superseded by a second request is used; the newer one works", () => {
    const first = resetToken()
    const second = resetToken()
    const once = requestReset(registered, "prs_1", first).state
    const twice = requestReset(once, "prs_2", second).state
    expect(twice.pendingReset?.resetId).toBe("prs_2")
    expect(twice.spentResetHashes).toEqual([digest(first)])

    user
      .givenState(twice)
      .when({ _tag: "ResetPassword", tokenHash: digest(first), passwordHash: "h", now: requestedAt })
      .thenFails({ _tag: "ResetTokenInvalid", reason: "used" })

    const [event] = user
      .givenState(twice)
      .when({ _tag: "ResetPassword", tokenHash: digest(second), passwordHash: "h", now: requestedAt }).events
    expect(event).toMatchObject({ type: "user.password_reset", data: { resetId: "prs_2" } })
  })

  it("a token at or after its expiry is ResetTokenInvalid expired", () => {
    const token = resetToken()
    const pending = requestReset(registered, "prs_1", token).state
    for (const now of [resetExpiresAt, new Date(resetExpiresAt.getTime() + 1), at("2031-01-01T00:00:00Z")]) {
      user
        .givenState(pending)
        .when({ _tag: "ResetPassword", tokenHash: digest(token), passwordHash: "h", now })
        .thenFails({ _tag: "ResetTokenInvalid", reason: "expired" })
    }
  })

  it("an admin SetPassword spends the pending reset token", () => {
    const token = resetToken()
    const pending = requestReset(registered, "prs_1", token).state
    const now = at("2030-01-01T10:05:00Z")
    const { events, state } = user
      .givenState(pending)
      .when({
        _tag: "SetPassword",
        passwordHash: "scrypt$admin",
        now
      })
      .thenEvents([UserPasswordReset.make({ userId, passwordHash: "scrypt$admin", sessionsValidAfter: now })])
    expect(events[0]?.data).not.toHaveProperty("resetId")
    expect(state.sessionsValidAfter).toEqual(now)
    user
      .givenState(state)
      .when({ _tag: "ResetPassword", tokenHash: digest(token), passwordHash: "h", now })
      .thenFails({ _tag: "ResetTokenInvalid", reason: "used" })
  })

  it("only the latest ten spent tokens answer used; older ones are unknown", () => {
    const tokens = Array.from({ length: 12 }, () => resetToken())
    let state = registered
    for (const [i, token] of tokens.entries()) state = requestReset(state, `prs_${i}`, token).state
    // 11 superseded, the 12th pending: the newest 10 superseded are remembered.
    expect(state.spentResetHashes).toHaveLength(10)
    const reasonOf = (token: string) => {
      const e = user
        .givenState(state)
        .when({ _tag: "ResetPassword", tokenHash: digest(token), passwordHash: "h", now: requestedAt }).error
      return e._tag === "ResetTokenInvalid" ? e.reason : e._tag
    }
    expect(reasonOf(tokens[0] ?? "")).toBe("unknown")
    expect(reasonOf(tokens[1] ?? "")).toBe("used")
    expect(reasonOf(tokens[10] ?? "")).toBe("used")
  })

  it("a reset request publishes customer.password_reset with the token and the subject", () => {
    const token = resetToken()
    const { events, state } = requestReset(registered, "prs_1", token)
    const [event] = events
    if (event === undefined || event.type !== "user.password_reset_requested") {
      return expect.fail("expected a user.password_reset_requested event")
    }
    const metadata: EventMetadata = {}
    const recorded: Recorded<typeof event> = {
      ...event,
      globalPosition: 7,
      transactionId: "1234",
      streamId: `user-${userId}`,
      streamVersion: 2,
      eventId: "0190f6c0-0000-7000-8000-000000000000",
      schemaVersion: 1,
      metadata,
      recordedAt: requestedAt
    }
    const publicEvents = UserDecider.publicEvents
    if (publicEvents === undefined) return expect.fail("UserDecider has no public events")
    expect(publicEvents(recorded, state)).toEqual([
      {
        type: "customer.password_reset",
        data: {
          userId,
          customerId,
          email: "ann@example.com",
          firstName: "Ann",
          lastName: "Lee",
          resetToken: token,
          expiresAt: resetExpiresAt.toISOString()
        },
        subjectId: userId
      }
    ])

    // Other user events publish nothing.
    const login = UserLoggedIn.make({ userId, sessionId: "ses_1" })
    expect(publicEvents({ ...recorded, ...login }, state)).toEqual([])
  })
})

describe("UserDecider: profile changes, deactivation and erasure", () => {
  const deactivatedAt = at("2030-02-01T09:00:00.000Z")
  const deactivated: UserState = fold(
    UserDecider,
    [UserDeactivated.make({ userId, sessionsValidAfter: deactivatedAt })],
    registered
  )

  it("ChangeProfile carries only the fields that changed", () => {
    const { events, state } = user
      .givenState(registered)
      .when({
        _tag: "ChangeProfile",
        email: "ann@example.com",
        firstName: "Anne",
        lastName: "Lee"
      })
      .thenEvents([UserProfileChanged.make({ userId, firstName: "Anne" })])
    expect(events[0]?.data).not.toHaveProperty("email")
    expect(events[0]?.data).not.toHaveProperty("lastName")
    expect(state).toEqual({ ...registered, firstName: "Anne" })

    const all = user.givenState(registered).when({
      _tag: "ChangeProfile",
      email: "anne@example.org",
      firstName: "Anne",
      lastName: "Li"
    })
    expect(all.events).toEqual([
      UserProfileChanged.make({ userId, email: "anne@example.org", firstName: "Anne", lastName: "Li" })
    ])
    expect(all.state).toEqual({
      ...registered,
      email: "anne@example.org",
      firstName: "Anne",
      lastName: "Li"
    })
    // The password, role and link are untouched.
    expect(all.state).toMatchObject({ passwordHash: "scrypt$old", role: "customer", customerId })
  })

  it("ChangeProfile with nothing new decides no event", () => {
    user.givenState(registered).when({ _tag: "ChangeProfile" }).thenNothing()
    user
      .givenState(registered)
      .when({ _tag: "ChangeProfile", email: "ann@example.com", firstName: "Ann", lastName: "Lee" })
      .thenNothing()
    // A deactivated login still follows its record.
    user
      .givenState(deactivated)
      .when({ _tag: "ChangeProfile", lastName: "Li" })
      .thenEvents([UserProfileChanged.make({ userId, lastName: "Li" })])
  })

  it("Deactivate records sessionsValidAfter = now and refuses logins", () => {
    const { state } = user
      .givenState(registered)
      .when({
        _tag: "Deactivate",
        now: deactivatedAt
      })
      .thenEvents([UserDeactivated.make({ userId, sessionsValidAfter: deactivatedAt })])
    expect(state).toEqual({ ...registered, deactivated: true, sessionsValidAfter: deactivatedAt })
    expect(state).toEqual(deactivated)

    user
      .givenState(state)
      .when({ _tag: "RecordLogin", sessionId: "ses_x" })
      .thenFails({ _tag: "UserIsDeactivated", userId })
  })

  it("Deactivate is idempotent: no event when already deactivated", () => {
    const again = user
      .givenState(deactivated)
      .when({ _tag: "Deactivate", now: at("2030-02-02T00:00:00.000Z") }).events
    expect(again).toEqual([])
  })

  it("deactivation never moves sessionsValidAfter back before a later password reset", () => {
    const resetAt = at("2030-03-01T00:00:00.000Z")
    const reset = user.givenState(registered).when({
      _tag: "SetPassword",
      passwordHash: "h",
      now: resetAt
    }).state
    // A deactivation decided with an earlier clock reading.
    const { state } = user.givenState(reset).when({ _tag: "Deactivate", now: deactivatedAt })
    expect(state.deactivated).toBe(true)
    expect(state.sessionsValidAfter).toEqual(resetAt)
    // And a later one moves it forward.
    const later = at("2030-04-01T00:00:00.000Z")
    const forward = user.givenState(reset).when({ _tag: "Deactivate", now: later })
    expect(forward.state.sessionsValidAfter).toEqual(later)
  })

  it("Reactivate lifts the deactivation; the sessions it killed stay dead", () => {
    const { state } = user
      .givenState(deactivated)
      .when({ _tag: "Reactivate" })
      .thenEvents([UserReactivated.make({ userId })])
    expect(state.deactivated).toBe(false)
    expect(state.sessionsValidAfter).toEqual(deactivatedAt)
    const login = user.givenState(state).when({ _tag: "RecordLogin", sessionId: "ses_y" }).events
    expect(login).toEqual([UserLoggedIn.make({ userId, sessionId: "ses_y" })])
    // Reactivating an active user decides nothing.
    user.givenState(state).when({ _tag: "Reactivate" }).thenNothing()
    user.givenState(registered).when({ _tag: "Reactivate" }).thenNothing()
  })

  it("Erase keeps only the id; afterwards every command is UserNotFound", () => {
    const erasedAt = at("2030-05-01T00:00:00.000Z")
    for (const from of [registered, deactivated]) {
      const { state } = user
        .givenState(from)
        .when({ _tag: "Erase", now: erasedAt })
        .thenEvents([UserErased.make({ userId, sessionsValidAfter: erasedAt })])
      expect(state).toEqual({ ...UserDecider.initialState, status: "erased", userId })
      expect(state).toMatchObject({ email: null, firstName: null, lastName: null, passwordHash: null })

      const commands: ReadonlyArray<Parameters<typeof UserDecider.decide>[0]> = [
        { _tag: "RecordLogin", sessionId: "ses_z" },
        { _tag: "ChangeProfile", firstName: "Zed" },
        { _tag: "ChangeProfile" },
        { _tag: "Deactivate", now: erasedAt },
        { _tag: "Reactivate" },
        { _tag: "Erase", now: erasedAt },
        { _tag: "SetPassword", passwordHash: "h", now: erasedAt },
        {
          _tag: "RequestPasswordReset",
          resetId: "prs_9",
          token: "t",
          tokenHash: digest("t"),
          expiresAt: erasedAt
        },
        { _tag: "ResetPassword", tokenHash: digest("t"), passwordHash: "h", now: erasedAt }
      ]
      for (const command of commands) {
        const error = user.givenState(state).when(command).error
        expect(error, command._tag).toMatchObject({ _tag: "UserNotFound", userId })
      }
      user.givenState(state).when(register).thenFails({ _tag: "UserAlreadyExists", userId })
    }
  })

  it("the new commands on an unknown user are UserNotFound", () => {
    const now = at("2030-05-01T00:00:00.000Z")
    for (const command of [
      { _tag: "ChangeProfile", firstName: "Zed" },
      { _tag: "Deactivate", now },
      { _tag: "Reactivate" },
      { _tag: "Erase", now }
    ] as const) {
      const error = user.when(command).error
      expect(error._tag, command._tag).toBe("UserNotFound")
    }
  })

  it("shredded personal fields fold to null without throwing", () => {
    const state = fold(UserDecider, [
      UserRegistered.make({
        userId,
        email: shredded,
        firstName: shredded,
        lastName: shredded,
        passwordHash: shredded,
        role: "customer",
        customerId
      }),
      UserProfileChanged.make({ userId, email: shredded, firstName: shredded }),
      UserDeactivated.make({ userId, sessionsValidAfter: deactivatedAt })
    ])
    expect(state).toMatchObject({
      status: "active",
      userId,
      email: null,
      firstName: null,
      lastName: null,
      passwordHash: null,
      customerId,
      deactivated: true
    })
    // A shredded profile change over clear fields nulls only what it carries.
    const partly = fold(UserDecider, [UserProfileChanged.make({ userId, lastName: shredded })], registered)
    expect(partly).toEqual({ ...registered, lastName: null })
  })

  it("profile changes, deactivation, reactivation and erasure publish nothing", () => {
    const publicEvents = UserDecider.publicEvents
    if (publicEvents === undefined) return expect.fail("UserDecider has no public events")
    const now = at("2030-05-01T00:00:00.000Z")
    for (const event of [
      UserProfileChanged.make({ userId, firstName: "Anne" }),
      UserDeactivated.make({ userId, sessionsValidAfter: now }),
      UserReactivated.make({ userId }),
      UserErased.make({ userId, sessionsValidAfter: now })
    ]) {
      expect(publicEvents(record(event, now), registered), event.type).toEqual([])
    }
  })
})

// --- Sessions --------------------------------------------------------------------------------------

const sessionId = "ses_01jd4x8m6ffq2b3n5r7t9v1w3c"
const startedAt = at("2030-01-01T00:00:00.000Z")
const sessionExpiresAt = at("2030-01-31T00:00:00.000Z")
const h0 = digest("rt-0")
const h1 = digest("rt-1")
const h2 = digest("rt-2")

/** The fields of the sample session's start: its command's and its event's. */
const sessionStart = {
  sessionId,
  userId,
  refreshTokenHash: h0,
  accessTokenId: "jti-0",
  startedAt,
  expiresAt: sessionExpiresAt
}
const sessionStarted = SessionStarted.make(sessionStart)
const started: SessionState = fold(SessionDecider, [sessionStarted])

const refresh = (
  presentedHash: string,
  refreshTokenHash: string,
  now: Date,
  sessionsValidAfter: Date | undefined = undefined
) =>
  ({
    _tag: "Refresh",
    presentedHash,
    refreshTokenHash,
    accessTokenId: `jti-${refreshTokenHash.slice(0, 6)}`,
    expiresAt: new Date(now.getTime() + 30 * 86_400_000),
    now,
    sessionsValidAfter
  }) as const

describe("SessionDecider", () => {
  it("starts a session; starting it again fails", () => {
    const command = { _tag: "Start", ...sessionStart } as const
    const { state } = session.when(command).thenEvents([sessionStarted])
    expect(state).toEqual({
      status: "active",
      sessionId,
      userId,
      startedAt,
      currentHash: h0,
      usedHashes: [],
      expiresAt: sessionExpiresAt
    })
    session.givenState(state).when(command).thenFails("SessionAlreadyStarted")
  })

  it("refreshing with the current token rotates it: the old hash becomes used", () => {
    const now = at("2030-01-02T00:00:00Z")
    const command = refresh(h0, h1, now)
    const { state } = session
      .givenState(started)
      .when(command)
      .thenEvents([
        TokenRefreshed.make({
          sessionId,
          userId,
          previousTokenHash: h0,
          refreshTokenHash: h1,
          accessTokenId: command.accessTokenId,
          expiresAt: command.expiresAt
        })
      ])
    expect(state.status).toBe("active")
    expect(state.currentHash).toBe(h1)
    expect(state.usedHashes).toEqual([h0])
    expect(state.expiresAt).toEqual(command.expiresAt)
    expect(state.startedAt).toEqual(startedAt)
  })

  it("presenting a rotated-away token revokes the whole family (reuse detection)", () => {
    const now = at("2030-01-02T00:00:00Z")
    const rotated = session.givenState(started).when(refresh(h0, h1, now)).state
    const { state } = session
      .givenState(rotated)
      .when(refresh(h0, h2, now))
      .thenEvents([SessionRevoked.make({ sessionId, userId, reason: "refresh_token_reused" })])
    expect(state.status).toBe("revoked")
    // The legitimate holder of the current token is locked out too.
    session
      .givenState(state)
      .when(refresh(h1, h2, now))
      .thenFails({ _tag: "SessionIsRevoked", sessionId })
  })

  it("any earlier token of a rotation chain is detected as reuse", () =>
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 8 }), fc.nat(), (rotations, pick) => {
        const hashes = Array.from({ length: rotations + 1 }, (_, i) => digest(`chain-${i}`))
        const now = at("2030-01-02T00:00:00Z")
        let state = fold(SessionDecider, [
          SessionStarted.make({
            sessionId,
            userId,
            refreshTokenHash: hashes[0] ?? "",
            accessTokenId: "jti",
            startedAt,
            expiresAt: sessionExpiresAt
          })
        ])
        for (let i = 1; i <= rotations; i++) {
          const rotated = session.givenState(state).when(refresh(hashes[i - 1] ?? "", hashes[i] ?? "", now))
          expect(rotated.events.map((e) => e.type)).toEqual(["token.refreshed"])
          state = rotated.state
        }
        expect(state.usedHashes).toEqual(hashes.slice(0, rotations))
        const stale = hashes[pick % rotations] ?? ""
        session
          .givenState(state)
          .when(refresh(stale, digest("next"), now))
          .thenEvents([SessionRevoked.make({ sessionId, userId, reason: "refresh_token_reused" })])
      }),
      { numRuns: 50 }
    ))

  it("refreshing a revoked session is SessionIsRevoked", () => {
    const revoked = session.givenState(started).when({ _tag: "Revoke", reason: "logout" }).state
    session
      .givenState(revoked)
      .when(refresh(h0, h1, at("2030-01-02T00:00:00Z")))
      .thenFails({ _tag: "SessionIsRevoked", sessionId })
  })

  it("refreshing at or after the refresh token's expiry is RefreshTokenExpired", () => {
    for (const now of [sessionExpiresAt, new Date(sessionExpiresAt.getTime() + 60_000)]) {
      session
        .givenState(started)
        .when(refresh(h0, h1, now))
        .thenFails({ _tag: "RefreshTokenExpired", sessionId })
    }
    const justBefore = new Date(sessionExpiresAt.getTime() - 1)
    const events = session.givenState(started).when(refresh(h0, h1, justBefore)).events
    expect(events.map((e) => e.type)).toEqual(["token.refreshed"])
  })

  it("a session started before the user's sessionsValidAfter is revoked (password_reset)", () => {
    const now = at("2030-01-05T00:00:00Z")
    const resetAt = at("2030-01-04T00:00:00Z")
    const { state } = session
      .givenState(started)
      .when(refresh(h0, h1, now, resetAt))
      .thenEvents([SessionRevoked.make({ sessionId, userId, reason: "password_reset" })])
    expect(state.status).toBe("revoked")
    // A reset at the very instant the session started does not revoke it.
    const same = session.givenState(started).when(refresh(h0, h1, now, startedAt)).events
    expect(same.map((e) => e.type)).toEqual(["token.refreshed"])
  })

  it("an unknown refresh token is SessionNotFound", () => {
    session
      .givenState(started)
      .when(refresh(digest("never issued"), h1, at("2030-01-02T00:00:00Z")))
      .thenFails({ _tag: "SessionNotFound", sessionId })
    session.when(refresh(h0, h1, at("2030-01-02T00:00:00Z"))).thenFails("SessionNotFound")
    session.when({ _tag: "Revoke", reason: "logout" }).thenFails("SessionNotFound")
  })

  it("revoking twice decides nothing the second time", () => {
    const first = session.givenState(started).when({ _tag: "Revoke", reason: "logout" })
    expect(first.events).toEqual([SessionRevoked.make({ sessionId, userId, reason: "logout" })])
    expect(first.state.status).toBe("revoked")
    const second = session.givenState(first.state).when({ _tag: "Revoke", reason: "logout" }).events
    expect(second).toEqual([])
  })
})

// --- API keys --------------------------------------------------------------------------------------

describe("ApiKeyDecider", () => {
  const keyId = "key_01jd4x8m6ffq2b3n5r7t9v1w3d"
  const key = {
    keyId,
    name: "ci",
    scopes: ["read:orders"],
    keyHash: digest("sk_secret"),
    keyLast4: "cret",
    createdBy: admin
  }
  const create = { _tag: "Create", ...key } as const

  /** A revoker holding everything (an admin), and one holding only `held`. */
  const holdsAll = () => true
  const holdsOnly =
    (...held: ReadonlyArray<string>) =>
    (scope: string) =>
      held.includes(scope)
  const revoke = { _tag: "Revoke", revokedBy: admin, callerHolds: holdsAll } as const

  it("creates, revokes, and a second revoke is ApiKeyNotFound", () => {
    const created = apiKey.when(create)
    expect(created.events).toEqual([ApiKeyCreated.make(key)])
    expect(created.state).toEqual({ status: "active", keyId, scopes: ["read:orders"] })

    const revoked = apiKey.givenState(created.state).when(revoke)
    expect(revoked.events).toEqual([ApiKeyRevoked.make({ keyId, revokedBy: admin })])
    expect(revoked.state).toEqual({ status: "revoked", keyId, scopes: ["read:orders"] })

    apiKey.givenState(revoked.state).when(revoke).thenFails({ _tag: "ApiKeyNotFound", keyId })
  })

  it("a revoker must hold every scope of the key: else ApiKeyScopesNotHeld naming the missing ones", () => {
    const state = fold(ApiKeyDecider, apiKey.when({ ...create, scopes: ["read:orders", "admin"] }).events)
    apiKey
      .givenState(state)
      .when({ ...revoke, callerHolds: holdsOnly("read:orders", "write:apikeys") })
      .thenFails({ _tag: "ApiKeyScopesNotHeld", keyId, missing: ["admin"] })
    const held = apiKey.givenState(state).when({ ...revoke, callerHolds: holdsOnly("read:orders", "admin") })
    expect(held.events).toEqual([ApiKeyRevoked.make({ keyId, revokedBy: admin })])
    // A key that does not exist is not found, whatever the revoker holds.
    apiKey.when({ ...revoke, callerHolds: holdsOnly() }).thenFails("ApiKeyNotFound")
  })

  it("revoking a key that never existed, or creating one twice, fails", () => {
    apiKey.when(revoke).thenFails("ApiKeyNotFound")
    const state = fold(ApiKeyDecider, apiKey.when(create).events)
    apiKey.givenState(state).when(create).thenFails("ApiKeyAlreadyExists")
  })
})

// --- OAuth clients ---------------------------------------------------------------------------------

describe("OAuthClientDecider", () => {
  const clientId = "cli_01jd4x8m6ffq2b3n5r7t9v1w3e"
  const expiresAt = at("2030-01-01T02:00:00Z")

  it("creates, issues and revokes tokens, deletes; then issuing is OAuthClientNotFound", () => {
    const created = oauthClient.when({
      _tag: "Create",
      clientId,
      name: "erp",
      scopes: ["read:orders", "write:orders"],
      secretHash: digest("secret"),
      createdBy: admin
    })
    expect(created.events).toEqual([
      OAuthClientCreated.make({
        clientId,
        name: "erp",
        scopes: ["read:orders", "write:orders"],
        secretHash: digest("secret"),
        createdBy: admin
      })
    ])
    expect(created.state).toEqual({ status: "active", clientId, scopes: ["read:orders", "write:orders"] })

    const issue = { _tag: "IssueToken", tokenId: "tok-1", scopes: ["read:orders"], expiresAt } as const
    const issued = oauthClient.givenState(created.state).when(issue)
    expect(issued.events).toEqual([
      OAuthClientTokenIssued.make({ clientId, tokenId: "tok-1", scopes: ["read:orders"], expiresAt })
    ])
    expect(issued.state).toEqual(created.state)

    const revokedToken = oauthClient.givenState(issued.state).when({
      _tag: "RevokeToken",
      tokenId: "tok-1"
    })
    expect(revokedToken.events).toEqual([OAuthClientTokenRevoked.make({ clientId, tokenId: "tok-1" })])

    const deleted = oauthClient.givenState(revokedToken.state).when({
      _tag: "Delete",
      deletedBy: admin
    })
    expect(deleted.events).toEqual([OAuthClientDeleted.make({ clientId, deletedBy: admin })])
    expect(deleted.state.status).toBe("deleted")

    oauthClient.givenState(deleted.state).when(issue).thenFails({ _tag: "OAuthClientNotFound", clientId })
    oauthClient
      .givenState(deleted.state)
      .when({ _tag: "Delete", deletedBy: admin })
      .thenFails("OAuthClientNotFound")
  })

  it("issuing for a client that never existed is OAuthClientNotFound", () => {
    oauthClient
      .when({ _tag: "IssueToken", tokenId: "t", scopes: [], expiresAt })
      .thenFails("OAuthClientNotFound")
  })
})

// --- Revocations -----------------------------------------------------------------------------------

describe("revocationOf", () => {
  const recordedAt = at("2030-06-01T12:00:00.000Z")
  const validAfter = at("2030-06-01T11:59:59.000Z")

  it("a password reset, a deactivation and an erasure revoke the user as of sessionsValidAfter", () => {
    for (const event of [
      UserPasswordReset.make({ userId, passwordHash: "h", sessionsValidAfter: validAfter }),
      UserDeactivated.make({ userId, sessionsValidAfter: validAfter }),
      UserErased.make({ userId, sessionsValidAfter: validAfter })
    ]) {
      // The entry's time is the decided instant, not when the event was recorded.
      expect(revocationOf(record(event, recordedAt)), event.type).toEqual({
        kind: "user",
        subjectId: userId,
        revokedAt: validAfter
      })
    }
  })

  it("a revoked session, a revoked client token and a deleted client revoke as of recording", () => {
    expect(
      revocationOf(record(SessionRevoked.make({ sessionId, userId, reason: "logout" }), recordedAt))
    ).toEqual({ kind: "session", subjectId: sessionId, revokedAt: recordedAt })
    const clientId = "cli_01jd4x8m6ffq2b3n5r7t9v1w3e"
    expect(
      revocationOf(record(OAuthClientTokenRevoked.make({ clientId, tokenId: "tok-1" }), recordedAt))
    ).toEqual({ kind: "token", subjectId: "tok-1", revokedAt: recordedAt })
    expect(revocationOf(record(OAuthClientDeleted.make({ clientId, deletedBy: admin }), recordedAt))).toEqual(
      { kind: "client", subjectId: clientId, revokedAt: recordedAt }
    )
  })

  it("reactivation, profile changes, logins and the rest revoke nothing", () => {
    for (const event of [
      UserReactivated.make({ userId }),
      UserProfileChanged.make({ userId, firstName: "Anne" }),
      UserLoggedIn.make({ userId, sessionId }),
      UserPasswordResetRequested.make({
        userId,
        resetId: "prs_1",
        tokenHash: digest("t"),
        token: "t",
        expiresAt: resetExpiresAt
      }),
      sessionStarted,
      ApiKeyRevoked.make({ keyId: "key_1", revokedBy: admin })
    ]) {
      expect(revocationOf(record(event, recordedAt)), event.type).toBeUndefined()
    }
  })
})
