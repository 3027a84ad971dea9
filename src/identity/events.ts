/**
 * Identity events. Users, sessions (refresh-token families), API keys and OAuth clients are
 * aggregates of their own. A user's personal fields (email, names, password hash) are encrypted
 * under the user's own key: erasing the linked customer forgets it too. Credentials and what
 * verifies them (password hashes, token and key hashes, the reset token) are `Secret`: readable here,
 * `"[secret]"` wherever events leave the process (the audit feed and export).
 */
import { Schema } from "effect"
import { defineEvent, type EventOf, Personal, Secret } from "../eventstore/EventType.js"

export const RoleSchema = Schema.Literal("admin", "customer")

export const ActorRef = Schema.Struct({
  type: Schema.Literal("user", "api_key", "oauth_client", "system"),
  id: Schema.String
})
export type ActorRef = typeof ActorRef.Type

// --- Users ---------------------------------------------------------------------------------------

export const UserRegistered = defineEvent("user.registered", {
  schema: Schema.Struct({
    userId: Schema.String,
    email: Personal(Schema.String),
    firstName: Personal(Schema.String),
    lastName: Personal(Schema.String),
    passwordHash: Secret(Personal(Schema.String)),
    role: RoleSchema,
    /** The linked customer record (registered shoppers). */
    customerId: Schema.optional(Schema.String)
  }),
  subject: (d) => d.userId
})

export const UserLoggedIn = defineEvent("user.logged_in", {
  schema: Schema.Struct({ userId: Schema.String, sessionId: Schema.String })
})

export const UserPasswordResetRequested = defineEvent("user.password_reset_requested", {
  schema: Schema.Struct({
    userId: Schema.String,
    resetId: Schema.String,
    /** SHA-256 of the single-use token: what a confirmation is checked against. */
    tokenHash: Secret(Schema.String),
    /**
     * The token itself, for the `customer.password_reset` email. Encrypted under the user's key;
     * worthless once used, superseded or expired.
     */
    token: Secret(Personal(Schema.String)),
    expiresAt: Schema.Date
  }),
  subject: (d) => d.userId
})

export const UserPasswordReset = defineEvent("user.password_reset", {
  schema: Schema.Struct({
    userId: Schema.String,
    /** The reset request it completes; absent when an admin tool set the password. */
    resetId: Schema.optional(Schema.String),
    passwordHash: Secret(Personal(Schema.String)),
    /** Sessions and access tokens of this user started before this instant are revoked. */
    sessionsValidAfter: Schema.Date
  }),
  subject: (d) => d.userId
})

/** A registered shopper's customer record changed its email or name: the login follows it. */
export const UserProfileChanged = defineEvent("user.profile_changed", {
  schema: Schema.Struct({
    userId: Schema.String,
    email: Schema.optional(Personal(Schema.String)),
    firstName: Schema.optional(Personal(Schema.String)),
    lastName: Schema.optional(Personal(Schema.String))
  }),
  subject: (d) => d.userId
})

/** The shopper's customer record was deactivated: no login, no refresh, sessions before this die. */
export const UserDeactivated = defineEvent("user.deactivated", {
  schema: Schema.Struct({ userId: Schema.String, sessionsValidAfter: Schema.Date })
})

export const UserReactivated = defineEvent("user.reactivated", {
  schema: Schema.Struct({ userId: Schema.String })
})

/** Erased with its customer record: written just before the user's key is destroyed. */
export const UserErased = defineEvent("user.erased", {
  schema: Schema.Struct({ userId: Schema.String, sessionsValidAfter: Schema.Date })
})

// --- Sessions (one refresh-token family each) ------------------------------------------------------

export const SessionStarted = defineEvent("session.started", {
  schema: Schema.Struct({
    sessionId: Schema.String,
    userId: Schema.String,
    refreshTokenHash: Secret(Schema.String),
    accessTokenId: Schema.String,
    startedAt: Schema.Date,
    expiresAt: Schema.Date
  })
})

export const TokenRefreshed = defineEvent("token.refreshed", {
  schema: Schema.Struct({
    sessionId: Schema.String,
    userId: Schema.String,
    previousTokenHash: Secret(Schema.String),
    refreshTokenHash: Secret(Schema.String),
    accessTokenId: Schema.String,
    expiresAt: Schema.Date
  })
})

export const SessionRevokeReason = Schema.Literal("logout", "refresh_token_reused", "password_reset")

export const SessionRevoked = defineEvent("session.revoked", {
  schema: Schema.Struct({
    sessionId: Schema.String,
    userId: Schema.String,
    reason: SessionRevokeReason
  })
})

// --- API keys ------------------------------------------------------------------------------------

export const ApiKeyCreated = defineEvent("apikey.created", {
  schema: Schema.Struct({
    keyId: Schema.String,
    name: Schema.String,
    scopes: Schema.Array(Schema.String),
    /** SHA-256 of the secret; the secret is shown once and never stored. */
    keyHash: Secret(Schema.String),
    keyLast4: Schema.String,
    createdBy: ActorRef
  })
})

export const ApiKeyRevoked = defineEvent("apikey.revoked", {
  schema: Schema.Struct({ keyId: Schema.String, revokedBy: ActorRef })
})

// --- OAuth clients (client credentials grant) ------------------------------------------------------

export const OAuthClientCreated = defineEvent("oauth_client.created", {
  schema: Schema.Struct({
    clientId: Schema.String,
    name: Schema.String,
    scopes: Schema.Array(Schema.String),
    secretHash: Secret(Schema.String),
    createdBy: ActorRef
  })
})

export const OAuthClientTokenIssued = defineEvent("oauth_client.token_issued", {
  schema: Schema.Struct({
    clientId: Schema.String,
    tokenId: Schema.String,
    scopes: Schema.Array(Schema.String),
    expiresAt: Schema.Date
  })
})

export const OAuthClientTokenRevoked = defineEvent("oauth_client.token_revoked", {
  schema: Schema.Struct({ clientId: Schema.String, tokenId: Schema.String })
})

export const OAuthClientDeleted = defineEvent("oauth_client.deleted", {
  schema: Schema.Struct({ clientId: Schema.String, deletedBy: ActorRef })
})

export const userEventTypes = [
  UserRegistered,
  UserLoggedIn,
  UserPasswordResetRequested,
  UserPasswordReset,
  UserProfileChanged,
  UserDeactivated,
  UserReactivated,
  UserErased
] as const

export const identityEventTypes = [
  ...userEventTypes,
  SessionStarted,
  TokenRefreshed,
  SessionRevoked,
  ApiKeyCreated,
  ApiKeyRevoked,
  OAuthClientCreated,
  OAuthClientTokenIssued,
  OAuthClientTokenRevoked,
  OAuthClientDeleted
] as const

export type UserEvent = EventOf<(typeof userEventTypes)[number]>
export type SessionEvent =
  | EventOf<typeof SessionStarted>
  | EventOf<typeof TokenRefreshed>
  | EventOf<typeof SessionRevoked>
export type ApiKeyEvent = EventOf<typeof ApiKeyCreated> | EventOf<typeof ApiKeyRevoked>
export type OAuthClientEvent =
  | EventOf<typeof OAuthClientCreated>
  | EventOf<typeof OAuthClientTokenIssued>
  | EventOf<typeof OAuthClientTokenRevoked>
  | EventOf<typeof OAuthClientDeleted>
