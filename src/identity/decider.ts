/**
 * Identity aggregates as pure deciders: users, sessions (refresh-token families with rotation and
 * reuse detection), API keys and OAuth clients. Tested without a database (test/identity).
 */
import { Data, Effect } from "effect"
import { revealOr, type Shredded } from "../eventstore/EventType.js"
import { defineDecider } from "../kernel/Decider.js"
import {
  type ActorRef,
  ApiKeyCreated,
  type ApiKeyEvent,
  ApiKeyRevoked,
  OAuthClientCreated,
  OAuthClientDeleted,
  type OAuthClientEvent,
  OAuthClientTokenIssued,
  OAuthClientTokenRevoked,
  type SessionEvent,
  SessionRevoked,
  SessionStarted,
  TokenRefreshed,
  UserDeactivated,
  UserErased,
  type UserEvent,
  UserLoggedIn,
  UserPasswordReset,
  UserPasswordResetRequested,
  UserProfileChanged,
  UserReactivated,
  UserRegistered,
  userEventTypes
} from "./events.js"
import type { Role } from "./permissions.js"

export const userStream = (userId: string) => `user-${userId}`
export const sessionStream = (sessionId: string) => `session-${sessionId}`
export const apiKeyStream = (keyId: string) => `apikey-${keyId}`
export const oauthClientStream = (clientId: string) => `oauth_client-${clientId}`

// --- Domain errors (handlers map them to HTTP) -----------------------------------------------------

export class UserAlreadyExists extends Data.TaggedError("UserAlreadyExists")<{ readonly userId: string }> {}
export class UserNotFound extends Data.TaggedError("UserNotFound")<{ readonly userId: string }> {}
export class UserIsDeactivated extends Data.TaggedError("UserIsDeactivated")<{ readonly userId: string }> {}
export class ResetTokenInvalid extends Data.TaggedError("ResetTokenInvalid")<{
  readonly reason: "unknown" | "used" | "expired"
}> {}
export class SessionNotFound extends Data.TaggedError("SessionNotFound")<{ readonly sessionId: string }> {}
export class SessionIsRevoked extends Data.TaggedError("SessionIsRevoked")<{ readonly sessionId: string }> {}
export class RefreshTokenExpired extends Data.TaggedError("RefreshTokenExpired")<{
  readonly sessionId: string
}> {}
export class SessionAlreadyStarted extends Data.TaggedError("SessionAlreadyStarted")<{
  readonly sessionId: string
}> {}
export class ApiKeyAlreadyExists extends Data.TaggedError("ApiKeyAlreadyExists")<{
  readonly keyId: string
}> {}
export class OAuthClientAlreadyExists extends Data.TaggedError("OAuthClientAlreadyExists")<{
  readonly clientId: string
}> {}
export class ApiKeyNotFound extends Data.TaggedError("ApiKeyNotFound")<{ readonly keyId: string }> {}
/** The revoker does not hold every scope of the key (revoking, like creating, never reaches above). */
export class ApiKeyScopesNotHeld extends Data.TaggedError("ApiKeyScopesNotHeld")<{
  readonly keyId: string
  readonly missing: ReadonlyArray<string>
}> {}
export class OAuthClientNotFound extends Data.TaggedError("OAuthClientNotFound")<{
  readonly clientId: string
}> {}

// --- Users -----------------------------------------------------------------------------------------

export interface PendingReset {
  readonly resetId: string
  readonly tokenHash: string
  readonly expiresAt: Date
}

export interface UserState {
  readonly status: "none" | "active" | "erased"
  readonly userId: string
  readonly email: string | null
  readonly firstName: string | null
  readonly lastName: string | null
  readonly passwordHash: string | null
  readonly role: Role
  readonly customerId: string | undefined
  readonly pendingReset: PendingReset | undefined
  /** Hashes of reset tokens already used or superseded (the latest few), to answer "used". */
  readonly spentResetHashes: ReadonlyArray<string>
  readonly sessionsValidAfter: Date | undefined
  /** Its customer record is deactivated: logins are refused until it is reactivated. */
  readonly deactivated: boolean
}

const initialUser: UserState = {
  status: "none",
  userId: "",
  email: null,
  firstName: null,
  lastName: null,
  passwordHash: null,
  role: "customer",
  customerId: undefined,
  pendingReset: undefined,
  spentResetHashes: [],
  sessionsValidAfter: undefined,
  deactivated: false
}

const SPENT_RESETS_KEPT = 10
const spend = (spent: ReadonlyArray<string>, pending: PendingReset | undefined) =>
  pending ? [pending.tokenHash, ...spent].slice(0, SPENT_RESETS_KEPT) : spent

const reveal = (value: string | Shredded) => revealOr(value, null)

export type UserCommand =
  | {
      readonly _tag: "Register"
      readonly userId: string
      readonly email: string
      readonly firstName: string
      readonly lastName: string
      readonly passwordHash: string
      readonly role: Role
      readonly customerId?: string
    }
  | { readonly _tag: "RecordLogin"; readonly sessionId: string }
  | {
      readonly _tag: "RequestPasswordReset"
      readonly resetId: string
      readonly token: string
      readonly tokenHash: string
      readonly expiresAt: Date
    }
  | {
      readonly _tag: "ResetPassword"
      readonly tokenHash: string
      readonly passwordHash: string
      readonly now: Date
    }
  | { readonly _tag: "SetPassword"; readonly passwordHash: string; readonly now: Date }
  | {
      readonly _tag: "ChangeProfile"
      readonly email?: string
      readonly firstName?: string
      readonly lastName?: string
    }
  | { readonly _tag: "Deactivate"; readonly now: Date }
  | { readonly _tag: "Reactivate" }
  | { readonly _tag: "Erase"; readonly now: Date }

const laterOf = (a: Date | undefined, b: Date): Date => (a !== undefined && a.getTime() > b.getTime() ? a : b)

export const UserDecider = defineDecider({
  streamType: "user",
  events: userEventTypes,
  initialState: initialUser,
  // No snapshots: they would keep personal fields in clear beyond crypto-shredding. A user's stream
  // grows by one event per login, which stays short at any realistic login rate.
  evolve: (state: UserState, event: UserEvent): UserState => {
    switch (event.type) {
      case "user.registered":
        return {
          ...initialUser,
          status: "active",
          userId: event.data.userId,
          email: reveal(event.data.email),
          firstName: reveal(event.data.firstName),
          lastName: reveal(event.data.lastName),
          passwordHash: reveal(event.data.passwordHash),
          role: event.data.role,
          customerId: event.data.customerId
        }
      case "user.logged_in":
        return state
      case "user.password_reset_requested":
        return {
          ...state,
          spentResetHashes: spend(state.spentResetHashes, state.pendingReset),
          pendingReset: {
            resetId: event.data.resetId,
            tokenHash: event.data.tokenHash,
            expiresAt: event.data.expiresAt
          }
        }
      case "user.password_reset":
        return {
          ...state,
          passwordHash: reveal(event.data.passwordHash),
          spentResetHashes: spend(state.spentResetHashes, state.pendingReset),
          pendingReset: undefined,
          sessionsValidAfter: laterOf(state.sessionsValidAfter, event.data.sessionsValidAfter)
        }
      case "user.profile_changed": {
        const d = event.data
        return {
          ...state,
          ...(d.email === undefined ? {} : { email: reveal(d.email) }),
          ...(d.firstName === undefined ? {} : { firstName: reveal(d.firstName) }),
          ...(d.lastName === undefined ? {} : { lastName: reveal(d.lastName) })
        }
      }
      case "user.deactivated":
        return {
          ...state,
          deactivated: true,
          sessionsValidAfter: laterOf(state.sessionsValidAfter, event.data.sessionsValidAfter)
        }
      case "user.reactivated":
        return { ...state, deactivated: false }
      case "user.erased":
        return { ...initialUser, status: "erased", userId: state.userId }
    }
  },
  decide: (
    command: UserCommand,
    state: UserState
  ): Effect.Effect<
    ReadonlyArray<UserEvent>,
    UserAlreadyExists | UserNotFound | UserIsDeactivated | ResetTokenInvalid
  > => {
    if (command._tag === "Register") {
      return state.status !== "none"
        ? Effect.fail(new UserAlreadyExists({ userId: command.userId }))
        : Effect.succeed([
            UserRegistered.make({
              userId: command.userId,
              email: command.email,
              firstName: command.firstName,
              lastName: command.lastName,
              passwordHash: command.passwordHash,
              role: command.role,
              ...(command.customerId === undefined ? {} : { customerId: command.customerId })
            })
          ])
    }
    if (state.status !== "active") return Effect.fail(new UserNotFound({ userId: state.userId }))
    switch (command._tag) {
      case "RecordLogin":
        if (state.deactivated) return Effect.fail(new UserIsDeactivated({ userId: state.userId }))
        return Effect.succeed([UserLoggedIn.make({ userId: state.userId, sessionId: command.sessionId })])
      case "RequestPasswordReset":
        return Effect.succeed([
          UserPasswordResetRequested.make({
            userId: state.userId,
            resetId: command.resetId,
            tokenHash: command.tokenHash,
            token: command.token,
            expiresAt: command.expiresAt
          })
        ])
      case "ResetPassword": {
        const pending = state.pendingReset
        if (!pending || pending.tokenHash !== command.tokenHash) {
          const used = state.spentResetHashes.includes(command.tokenHash)
          return Effect.fail(new ResetTokenInvalid({ reason: used ? "used" : "unknown" }))
        }
        if (pending.expiresAt.getTime() <= command.now.getTime()) {
          return Effect.fail(new ResetTokenInvalid({ reason: "expired" }))
        }
        return Effect.succeed([
          UserPasswordReset.make({
            userId: state.userId,
            resetId: pending.resetId,
            passwordHash: command.passwordHash,
            sessionsValidAfter: command.now
          })
        ])
      }
      case "SetPassword":
        return Effect.succeed([
          UserPasswordReset.make({
            userId: state.userId,
            passwordHash: command.passwordHash,
            sessionsValidAfter: command.now
          })
        ])
      case "ChangeProfile": {
        const changed = {
          ...(command.email === undefined || command.email === state.email ? {} : { email: command.email }),
          ...(command.firstName === undefined || command.firstName === state.firstName
            ? {}
            : { firstName: command.firstName }),
          ...(command.lastName === undefined || command.lastName === state.lastName
            ? {}
            : { lastName: command.lastName })
        }
        return Effect.succeed(
          Object.keys(changed).length === 0
            ? []
            : [UserProfileChanged.make({ userId: state.userId, ...changed })]
        )
      }
      case "Deactivate":
        return Effect.succeed(
          state.deactivated
            ? []
            : [UserDeactivated.make({ userId: state.userId, sessionsValidAfter: command.now })]
        )
      case "Reactivate":
        return Effect.succeed(state.deactivated ? [UserReactivated.make({ userId: state.userId })] : [])
      case "Erase":
        return Effect.succeed([UserErased.make({ userId: state.userId, sessionsValidAfter: command.now })])
    }
  },
  publicEvents: (event, state) =>
    event.type === "user.password_reset_requested"
      ? [
          {
            type: "customer.password_reset",
            data: {
              userId: state.userId,
              ...(state.customerId === undefined ? {} : { customerId: state.customerId }),
              email: state.email,
              firstName: state.firstName,
              lastName: state.lastName,
              resetToken: revealOr(event.data.token, null),
              expiresAt: event.data.expiresAt.toISOString()
            },
            subjectId: state.userId
          }
        ]
      : []
})

// --- Sessions --------------------------------------------------------------------------------------

export interface SessionState {
  readonly status: "none" | "active" | "revoked"
  readonly sessionId: string
  readonly userId: string
  readonly startedAt: Date
  readonly currentHash: string
  /** Refresh tokens already rotated away: presenting one again is reuse. */
  readonly usedHashes: ReadonlyArray<string>
  readonly expiresAt: Date
}

const initialSession: SessionState = {
  status: "none",
  sessionId: "",
  userId: "",
  startedAt: new Date(0),
  currentHash: "",
  usedHashes: [],
  expiresAt: new Date(0)
}

export type SessionCommand =
  | {
      readonly _tag: "Start"
      readonly sessionId: string
      readonly userId: string
      readonly refreshTokenHash: string
      readonly accessTokenId: string
      readonly startedAt: Date
      readonly expiresAt: Date
    }
  | {
      readonly _tag: "Refresh"
      readonly presentedHash: string
      readonly refreshTokenHash: string
      readonly accessTokenId: string
      readonly expiresAt: Date
      readonly now: Date
      /** From the user: sessions started before it were revoked by a password reset. */
      readonly sessionsValidAfter: Date | undefined
    }
  | { readonly _tag: "Revoke"; readonly reason: "logout" | "refresh_token_reused" | "password_reset" }

export const SessionDecider = defineDecider({
  streamType: "session",
  events: [SessionStarted, TokenRefreshed, SessionRevoked],
  initialState: initialSession,
  evolve: (state: SessionState, event: SessionEvent): SessionState => {
    switch (event.type) {
      case "session.started":
        return {
          status: "active",
          sessionId: event.data.sessionId,
          userId: event.data.userId,
          startedAt: event.data.startedAt,
          currentHash: event.data.refreshTokenHash,
          usedHashes: [],
          expiresAt: event.data.expiresAt
        }
      case "token.refreshed":
        return {
          ...state,
          currentHash: event.data.refreshTokenHash,
          usedHashes: [...state.usedHashes, event.data.previousTokenHash],
          expiresAt: event.data.expiresAt
        }
      case "session.revoked":
        return { ...state, status: "revoked" }
    }
  },
  decide: (
    command: SessionCommand,
    state: SessionState
  ): Effect.Effect<
    ReadonlyArray<SessionEvent>,
    SessionNotFound | SessionIsRevoked | SessionAlreadyStarted | RefreshTokenExpired
  > => {
    if (command._tag === "Start") {
      return state.status !== "none"
        ? Effect.fail(new SessionAlreadyStarted({ sessionId: command.sessionId }))
        : Effect.succeed([
            SessionStarted.make({
              sessionId: command.sessionId,
              userId: command.userId,
              refreshTokenHash: command.refreshTokenHash,
              accessTokenId: command.accessTokenId,
              startedAt: command.startedAt,
              expiresAt: command.expiresAt
            })
          ])
    }
    if (state.status === "none") return Effect.fail(new SessionNotFound({ sessionId: state.sessionId }))
    const revoke = (reason: "logout" | "refresh_token_reused" | "password_reset") =>
      SessionRevoked.make({ sessionId: state.sessionId, userId: state.userId, reason })
    if (command._tag === "Revoke") {
      return Effect.succeed(state.status === "revoked" ? [] : [revoke(command.reason)])
    }
    if (state.status === "revoked") return Effect.fail(new SessionIsRevoked({ sessionId: state.sessionId }))
    if (command.sessionsValidAfter && state.startedAt.getTime() < command.sessionsValidAfter.getTime()) {
      return Effect.succeed([revoke("password_reset")])
    }
    if (command.presentedHash === state.currentHash) {
      if (state.expiresAt.getTime() <= command.now.getTime()) {
        return Effect.fail(new RefreshTokenExpired({ sessionId: state.sessionId }))
      }
      return Effect.succeed([
        TokenRefreshed.make({
          sessionId: state.sessionId,
          userId: state.userId,
          previousTokenHash: state.currentHash,
          refreshTokenHash: command.refreshTokenHash,
          accessTokenId: command.accessTokenId,
          expiresAt: command.expiresAt
        })
      ])
    }
    // A rotated-away token presented again: someone holds a copy. Revoke the whole family.
    if (state.usedHashes.includes(command.presentedHash)) {
      return Effect.succeed([revoke("refresh_token_reused")])
    }
    return Effect.fail(new SessionNotFound({ sessionId: state.sessionId }))
  }
})

// --- API keys --------------------------------------------------------------------------------------

export interface ApiKeyState {
  readonly status: "none" | "active" | "revoked"
  readonly keyId: string
  /** The scopes the key was created with: only a caller holding all of them may revoke it. */
  readonly scopes: ReadonlyArray<string>
}

export type ApiKeyCommand =
  | {
      readonly _tag: "Create"
      readonly keyId: string
      readonly name: string
      readonly scopes: ReadonlyArray<string>
      readonly keyHash: string
      readonly keyLast4: string
      readonly createdBy: ActorRef
    }
  | {
      readonly _tag: "Revoke"
      readonly revokedBy: ActorRef
      /** Whether the revoking credential holds a scope (`hasScope`: `admin` holds every one). */
      readonly callerHolds: (scope: string) => boolean
    }

export const ApiKeyDecider = defineDecider({
  streamType: "apikey",
  events: [ApiKeyCreated, ApiKeyRevoked],
  initialState: { status: "none", keyId: "", scopes: [] } as ApiKeyState,
  evolve: (state: ApiKeyState, event: ApiKeyEvent): ApiKeyState =>
    event.type === "apikey.created"
      ? { status: "active", keyId: event.data.keyId, scopes: event.data.scopes }
      : { ...state, status: "revoked" },
  decide: (
    command: ApiKeyCommand,
    state: ApiKeyState
  ): Effect.Effect<
    ReadonlyArray<ApiKeyEvent>,
    ApiKeyNotFound | ApiKeyAlreadyExists | ApiKeyScopesNotHeld
  > => {
    if (command._tag === "Create") {
      return state.status !== "none"
        ? Effect.fail(new ApiKeyAlreadyExists({ keyId: command.keyId }))
        : Effect.succeed([
            ApiKeyCreated.make({
              keyId: command.keyId,
              name: command.name,
              scopes: command.scopes,
              keyHash: command.keyHash,
              keyLast4: command.keyLast4,
              createdBy: command.createdBy
            })
          ])
    }
    if (state.status !== "active") return Effect.fail(new ApiKeyNotFound({ keyId: state.keyId }))
    const missing = state.scopes.filter((scope) => !command.callerHolds(scope))
    return missing.length > 0
      ? Effect.fail(new ApiKeyScopesNotHeld({ keyId: state.keyId, missing }))
      : Effect.succeed([ApiKeyRevoked.make({ keyId: state.keyId, revokedBy: command.revokedBy })])
  }
})

// --- OAuth clients ---------------------------------------------------------------------------------

export interface OAuthClientState {
  readonly status: "none" | "active" | "deleted"
  readonly clientId: string
  readonly scopes: ReadonlyArray<string>
}

export type OAuthClientCommand =
  | {
      readonly _tag: "Create"
      readonly clientId: string
      readonly name: string
      readonly scopes: ReadonlyArray<string>
      readonly secretHash: string
      readonly createdBy: ActorRef
    }
  | {
      readonly _tag: "IssueToken"
      readonly tokenId: string
      readonly scopes: ReadonlyArray<string>
      readonly expiresAt: Date
    }
  | { readonly _tag: "RevokeToken"; readonly tokenId: string }
  | { readonly _tag: "Delete"; readonly deletedBy: ActorRef }

export const OAuthClientDecider = defineDecider({
  streamType: "oauth_client",
  events: [OAuthClientCreated, OAuthClientTokenIssued, OAuthClientTokenRevoked, OAuthClientDeleted],
  initialState: { status: "none", clientId: "", scopes: [] } as OAuthClientState,
  evolve: (state: OAuthClientState, event: OAuthClientEvent): OAuthClientState => {
    switch (event.type) {
      case "oauth_client.created":
        return { status: "active", clientId: event.data.clientId, scopes: event.data.scopes }
      case "oauth_client.deleted":
        return { ...state, status: "deleted" }
      default:
        return state
    }
  },
  decide: (
    command: OAuthClientCommand,
    state: OAuthClientState
  ): Effect.Effect<ReadonlyArray<OAuthClientEvent>, OAuthClientNotFound | OAuthClientAlreadyExists> => {
    if (command._tag === "Create") {
      return state.status !== "none"
        ? Effect.fail(new OAuthClientAlreadyExists({ clientId: command.clientId }))
        : Effect.succeed([
            OAuthClientCreated.make({
              clientId: command.clientId,
              name: command.name,
              scopes: command.scopes,
              secretHash: command.secretHash,
              createdBy: command.createdBy
            })
          ])
    }
    if (state.status !== "active") return Effect.fail(new OAuthClientNotFound({ clientId: state.clientId }))
    switch (command._tag) {
      case "IssueToken":
        return Effect.succeed([
          OAuthClientTokenIssued.make({
            clientId: state.clientId,
            tokenId: command.tokenId,
            scopes: command.scopes,
            expiresAt: command.expiresAt
          })
        ])
      case "RevokeToken":
        return Effect.succeed([
          OAuthClientTokenRevoked.make({ clientId: state.clientId, tokenId: command.tokenId })
        ])
      case "Delete":
        return Effect.succeed([
          OAuthClientDeleted.make({ clientId: state.clientId, deletedBy: command.deletedBy })
        ])
    }
  }
})
