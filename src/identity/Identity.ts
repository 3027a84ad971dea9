/**
 * The identity use cases: register, log in, refresh, log out, password reset, the client
 * credentials grant, API keys and OAuth clients. Each runs its commands in ONE transaction (a
 * registration appends to the customer, user and session streams together) and answers with the
 * service's HTTP errors; `Http.ts` only wires them to routes.
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { AppConfig } from "../config.js"
import { CustomersPort, customerEmailHolders } from "../customers/index.js"
import { isUniqueViolation, provideSqlClient } from "../db/Sql.js"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { type AuthenticatedActor, hasScope } from "../http/Auth.js"
import { BadRequest, Conflict, Forbidden, NotFound, orDieUnlessHttp, Unauthorized } from "../http/errors.js"
import { RateLimiter, rateLimitPolicy } from "../http/RateLimit.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import * as Time from "../kernel/Time.js"
import { commandMetadata, makeTransact } from "../kernel/UseCase.js"
import {
  ApiKeyDecider,
  apiKeyStream,
  OAuthClientDecider,
  oauthClientStream,
  type ResetTokenInvalid,
  SessionDecider,
  sessionStream,
  UserDecider,
  userStream
} from "./decider.js"
import type { ActorRef } from "./events.js"
import { PasswordHasher, passwordProblem } from "./passwords.js"
import { ADMIN_SCOPE, formatScope, isKnownScope, parseScope, type Role, scopesOfRole } from "./permissions.js"
import { ProfileCache } from "./profiles.js"
import {
  type ApiKeyRow,
  findLiveClient,
  findUserByEmail,
  findUserById,
  listLiveApiKeys,
  listLiveClients,
  type OAuthClientRow,
  type Page,
  userEmailHolders
} from "./queries.js"
import { Revocations } from "./Revocations.js"
import { constantTimeEqual, digest, randomBase62 } from "./secrets.js"
import { makeLoginThrottle } from "./throttle.js"
import { AccessTokens, CLIENT_TOKEN_TTL_SECONDS, USER_TOKEN_TTL_SECONDS } from "./tokens.js"
import { API_KEY_PREFIX } from "./Verifier.js"

// --- Token formats -----------------------------------------------------------------------------------

const ID_SUFFIX = "[0-7][0-9a-hjkmnp-tv-z]{25}"
const REFRESH_TOKEN = new RegExp(`^rt_(${ID_SUFFIX})([0-9A-Za-z]{43})$`)
const RESET_TOKEN = new RegExp(`^prt_(${ID_SUFFIX})([0-9A-Za-z]{43})$`)

/** `rt_` + the session id's 26 characters + 43 random base62 characters. */
export const parseRefreshToken = (token: string): string | undefined => {
  const match = REFRESH_TOKEN.exec(token)
  return match ? `ses_${match[1]}` : undefined
}

/** `prt_` + the user id's 26 characters + 43 random base62 characters. */
export const parseResetToken = (token: string): string | undefined => {
  const match = RESET_TOKEN.exec(token)
  return match ? `usr_${match[1]}` : undefined
}

const suffixOf = (id: string) => id.slice(id.indexOf("_") + 1)

// --- Results -------------------------------------------------------------------------------------------

export interface TokenSetResult {
  readonly accessToken: string
  readonly refreshToken: string
  readonly tokenType: "Bearer"
  readonly expiresIn: number
  readonly scope: string
  readonly issuedAt: Date
  readonly userId: string
}

export interface NewUser {
  readonly email: string
  readonly password: string
  readonly firstName: string
  readonly lastName: string
}

const invalidCredentials = Unauthorized.of({
  code: "invalid_credentials",
  message: "wrong email or password"
})
const invalidRefreshToken = Unauthorized.of({
  code: "invalid_token",
  message: "the refresh token is not valid"
})
const revokedToken = Unauthorized.of({ code: "token_revoked", message: "this token has been revoked" })
/** Only said once the password (or refresh token) proved the caller owns the account. */
const accountDeactivated = Forbidden.of({
  code: "account_deactivated",
  message: "this account has been deactivated: contact the store to reactivate it"
})
const notFound = (what: string, param = "id") => NotFound.of({ message: `No such ${what}`, param })

const weakPassword = (message: string) => BadRequest.of({ code: "weak_password", message, param: "password" })

const RESET_TOKEN_ERRORS = {
  unknown: { code: "reset_token_invalid", message: "this password reset token is not valid" },
  used: { code: "reset_token_used", message: "this password reset token has already been used" },
  expired: {
    code: "reset_token_expired",
    message: "this password reset token has expired: request a new one"
  }
} as const

const emailTaken = Conflict.of({
  code: "resource_already_exists",
  message: "an account with this email already exists",
  param: "email"
})

const actorRef = (actor: AuthenticatedActor): ActorRef => ({ type: actor.type, id: actor.id })

/** Unknown scope names → 400; scopes the caller does not hold → 403 (a credential never escalates). */
const grantableScopes = (actor: AuthenticatedActor, requested: ReadonlyArray<string>) => {
  const unknown = requested.filter((s) => !isKnownScope(s))
  if (unknown.length > 0) {
    return Effect.fail(
      BadRequest.of({
        code: "parameter_invalid",
        message: `unknown scope ${unknown.map((s) => JSON.stringify(s)).join(", ")}: scopes are "admin" or <read|write>:<resource>`,
        param: "scopes"
      })
    )
  }
  const missing = requested.filter((s) => !hasScope(actor, s))
  if (missing.length > 0) {
    return Effect.fail(
      Forbidden.of({
        code: "insufficient_scope",
        message: `cannot grant ${missing.join(", ")}: this credential does not hold ${missing.length === 1 ? "it" : "them"}`
      })
    )
  }
  return Effect.succeed([...new Set(requested)])
}

export const makeIdentity = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const runner = yield* CommandRunner
  const tokens = yield* AccessTokens
  const revocations = yield* Revocations
  const hasher = yield* PasswordHasher
  const config = yield* AppConfig
  const limiter = yield* RateLimiter
  const throttle = makeLoginThrottle(limiter, config)
  const resetRequestsPerAccount = rateLimitPolicy("identity.password-reset.account", {
    limit: 5,
    window: "1 hour"
  })

  const profiles = yield* ProfileCache
  const customers = yield* CustomersPort
  const forgetProfile = profiles.forget

  const withSql = provideSqlClient(sql)

  const transact = yield* makeTransact

  /** A new session's ids, refresh token and the command that starts it (run inside the caller's transaction). */
  const newSession = (userId: string) =>
    Effect.gen(function* () {
      const sessionId = yield* Ids.make("ses")
      const refreshToken = `rt_${suffixOf(sessionId)}${randomBase62()}`
      const tokenId = randomUUID()
      const startedAt = new Date(Ids.timestampOf("ses", sessionId) ?? (yield* Time.nowMillis))
      const expiresAt = Time.addDuration(startedAt, `${config.identity.refreshTokenTtlDays} days`)
      return {
        sessionId,
        refreshToken,
        tokenId,
        start: (metadata: EventMetadata) =>
          runner.execute(
            SessionDecider,
            sessionStream(sessionId),
            {
              _tag: "Start",
              sessionId,
              userId,
              refreshTokenHash: digest(refreshToken),
              accessTokenId: tokenId,
              startedAt,
              expiresAt
            },
            { metadata }
          )
      }
    })

  const tokenSet = (
    user: { readonly userId: string; readonly role: Role; readonly customerId: string | undefined },
    session: { readonly sessionId: string; readonly tokenId: string },
    refreshToken: string
  ) =>
    Effect.map(
      tokens.issue({
        subject: user.userId,
        tokenId: session.tokenId,
        scopes: scopesOfRole(user.role),
        ttlSeconds: USER_TOKEN_TTL_SECONDS,
        role: user.role,
        sessionId: session.sessionId,
        ...(user.customerId === undefined ? {} : { customerId: user.customerId })
      }),
      (issued): TokenSetResult => ({
        accessToken: issued.token,
        refreshToken,
        tokenType: "Bearer",
        expiresIn: USER_TOKEN_TTL_SECONDS,
        scope: formatScope(scopesOfRole(user.role)),
        issuedAt: issued.issuedAt,
        userId: user.userId
      })
    )

  /**
   * One address, one person: refused when a user or a customer record holds it. Registration does
   * not adopt a staff-created customer with the same address: without proof of owning the mailbox,
   * that would hand its addresses and order history to whoever registers first.
   */
  const ensureEmailFree = (email: string) =>
    Effect.flatMap(withSql(Effect.all([userEmailHolders(email), customerEmailHolders(email)])), (holders) =>
      holders.some((rows) => rows.length > 0) ? Effect.fail(emailTaken) : Effect.void
    )

  /** Creates a user (a shopper with its customer record, or an admin) and its first session. */
  const createUser = (input: NewUser, role: Role) =>
    Effect.gen(function* () {
      const problem = passwordProblem(input.password)
      if (problem) return yield* Effect.fail(weakPassword(problem))
      yield* ensureEmailFree(input.email)
      const passwordHash = yield* hasher.hash(input.password)
      const userId = yield* Ids.make("usr")
      const customerId = role === "customer" ? yield* Ids.make("cus") : undefined
      const session = yield* newSession(userId)
      const metadata = yield* commandMetadata({ type: "user", id: userId })
      const created = yield* transact(
        Effect.gen(function* () {
          if (customerId !== undefined) {
            const record = {
              customerId,
              userId,
              email: input.email,
              firstName: input.firstName,
              lastName: input.lastName
            }
            yield* customers.createShopper(record, metadata)
          }
          const user = yield* runner.execute(
            UserDecider,
            userStream(userId),
            {
              _tag: "Register",
              userId,
              email: input.email,
              firstName: input.firstName,
              lastName: input.lastName,
              passwordHash,
              role,
              ...(customerId === undefined ? {} : { customerId })
            },
            { metadata }
          )
          yield* session.start(metadata)
          return user
        })
      ).pipe(
        // Two registrations of one address raced: the read model's unique index refused the second.
        Effect.catchIf(isUniqueViolation, () => Effect.fail(emailTaken))
      )
      const createdAt = created.events[0]?.recordedAt ?? (yield* Time.now)
      const set = yield* tokenSet({ userId, role, customerId }, session, session.refreshToken)
      return {
        ...set,
        user: {
          id: userId,
          email: input.email,
          firstName: input.firstName,
          lastName: input.lastName,
          createdAt
        }
      }
    }).pipe(orDieUnlessHttp)

  const register = (input: NewUser) => createUser(input, "customer")

  const login = (input: { readonly email: string; readonly password: string; readonly ip: string }) =>
    Effect.gen(function* () {
      yield* throttle.check(input.ip, input.email)
      const found = yield* withSql(findUserByEmail(input.email))
      const matches = Option.isSome(found)
        ? yield* hasher.verify(input.password, found.value.passwordHash)
        : yield* hasher.verifyNothing(input.password)
      if (Option.isNone(found) || !matches) {
        yield* throttle.failed(input.ip, input.email)
        return yield* Effect.fail(invalidCredentials)
      }
      const user = found.value
      yield* throttle.succeeded(input.email)
      if (user.deactivatedAt !== null) return yield* Effect.fail(accountDeactivated)
      const session = yield* newSession(user.userId)
      const metadata = yield* commandMetadata({ type: "user", id: user.userId })
      // The contended stream (the user's) first: a conflict there is met before anything else.
      yield* transact(
        Effect.zipRight(
          runner.execute(
            UserDecider,
            userStream(user.userId),
            { _tag: "RecordLogin", sessionId: session.sessionId },
            { metadata }
          ),
          session.start(metadata)
        )
      ).pipe(
        // Deactivated (or erased) between the lookup and the command.
        Effect.catchTags({
          UserIsDeactivated: () => Effect.fail(accountDeactivated),
          UserNotFound: () => Effect.fail(invalidCredentials)
        })
      )
      yield* forgetProfile(user.userId)
      return yield* tokenSet(
        { userId: user.userId, role: user.role, customerId: user.customerId ?? undefined },
        session,
        session.refreshToken
      )
    }).pipe(orDieUnlessHttp)

  const refresh = (input: { readonly refreshToken: string; readonly ip: string }) =>
    Effect.gen(function* () {
      const sessionId = parseRefreshToken(input.refreshToken.trim())
      if (!sessionId) return yield* Effect.fail(invalidRefreshToken)
      const stream = sessionStream(sessionId)
      const loaded = yield* runner.load(SessionDecider, stream)
      if (loaded.state.status === "none") return yield* Effect.fail(invalidRefreshToken)
      const found = yield* withSql(findUserById(loaded.state.userId))
      if (Option.isNone(found)) return yield* Effect.fail(revokedToken)
      const user = found.value
      if (user.deactivatedAt !== null) {
        // Said only to the holder of the session's current token; anything else is just invalid.
        const holder = constantTimeEqual(digest(input.refreshToken.trim()), loaded.state.currentHash)
        return yield* Effect.fail(holder ? accountDeactivated : invalidRefreshToken)
      }
      const refreshToken = `rt_${suffixOf(sessionId)}${randomBase62()}`
      const tokenId = randomUUID()
      const now = yield* Time.now
      const metadata = yield* commandMetadata({ type: "user", id: user.userId })
      const result = yield* transact(
        runner.execute(
          SessionDecider,
          stream,
          {
            _tag: "Refresh",
            presentedHash: digest(input.refreshToken.trim()),
            refreshTokenHash: digest(refreshToken),
            accessTokenId: tokenId,
            expiresAt: Time.addDuration(now, `${config.identity.refreshTokenTtlDays} days`),
            now,
            sessionsValidAfter: user.sessionsValidAfter ?? undefined
          },
          { metadata }
        )
      ).pipe(
        Effect.catchTags({
          SessionNotFound: () => Effect.fail(invalidRefreshToken),
          SessionIsRevoked: () => Effect.fail(revokedToken),
          RefreshTokenExpired: () =>
            Effect.fail(
              Unauthorized.of({
                code: "token_expired",
                message: "the refresh token has expired: log in again"
              })
            )
        })
      )
      if (result.events.some((e) => e.type === "session.revoked")) {
        // Reuse of a rotated token (or a password reset since): the whole family is gone.
        yield* revocations.recordEvents(result.events)
        return yield* Effect.fail(revokedToken)
      }
      return yield* tokenSet(
        { userId: user.userId, role: user.role, customerId: user.customerId ?? undefined },
        { sessionId, tokenId },
        refreshToken
      )
    }).pipe(orDieUnlessHttp)

  const logout = (actor: AuthenticatedActor) =>
    Effect.gen(function* () {
      const metadata = yield* commandMetadata(actorRef(actor))
      if (actor.type === "user" && actor.sessionId !== undefined) {
        const result = yield* transact(
          runner.execute(
            SessionDecider,
            sessionStream(actor.sessionId),
            { _tag: "Revoke", reason: "logout" },
            { metadata }
          )
        ).pipe(Effect.catchTag("SessionNotFound", () => Effect.fail(revokedToken)))
        return yield* revocations.recordEvents(result.events)
      }
      if (actor.type === "oauth_client" && actor.tokenId !== undefined) {
        const result = yield* transact(
          runner.execute(
            OAuthClientDecider,
            oauthClientStream(actor.id),
            { _tag: "RevokeToken", tokenId: actor.tokenId },
            { metadata }
          )
        ).pipe(Effect.catchTag("OAuthClientNotFound", () => Effect.fail(revokedToken)))
        return yield* revocations.recordEvents(result.events)
      }
      return yield* Effect.fail(
        BadRequest.of({
          code: "parameter_invalid",
          message: "an API key is not a session: revoke it with DELETE /apikey/:id"
        })
      )
    }).pipe(orDieUnlessHttp)

  const me = (actor: AuthenticatedActor) =>
    Effect.gen(function* () {
      if (actor.type !== "user") {
        return yield* Effect.fail(
          NotFound.of({
            message: `this credential is ${actor.type === "api_key" ? "an API key" : "an OAuth client"}, not a user`
          })
        )
      }
      const nowMs = yield* Time.nowMillis
      const cached = profiles.get(actor.id, nowMs)
      if (cached !== undefined) return cached
      const found = yield* withSql(findUserById(actor.id))
      if (Option.isNone(found)) return yield* Effect.fail(revokedToken)
      profiles.remember(actor.id, found.value, nowMs)
      return found.value
    }).pipe(orDieUnlessHttp)

  // --- Password reset ---------------------------------------------------------------------------

  const requestPasswordReset = (email: string) =>
    Effect.gen(function* () {
      const found = yield* withSql(findUserByEmail(email))
      if (Option.isNone(found)) return
      const user = found.value
      // A deactivated account cannot log in, so it gets no reset mail (the answer is 202 anyway).
      if (user.deactivatedAt !== null)
        return yield* Effect.logInfo("password reset refused: account deactivated")
      // Silently bounded per account: the answer is 202 either way.
      const allowed = yield* limiter.consume(resetRequestsPerAccount, user.userId)
      if (!allowed.allowed) return yield* Effect.logWarning("password reset requests over the hourly limit")
      const token = `prt_${suffixOf(user.userId)}${randomBase62()}`
      const metadata = yield* commandMetadata({ type: "user", id: user.userId })
      yield* transact(
        runner.execute(
          UserDecider,
          userStream(user.userId),
          {
            _tag: "RequestPasswordReset",
            resetId: yield* Ids.make("prs"),
            token,
            tokenHash: digest(token),
            expiresAt: yield* Time.fromNow(`${config.identity.passwordResetTtlMinutes} minutes`)
          },
          { metadata }
        )
      )
    }).pipe(Effect.catchAllCause((cause) => Effect.logError("password reset request failed", cause)))

  const confirmPasswordReset = (input: { readonly token: string; readonly password: string }) =>
    Effect.gen(function* () {
      const token = input.token.trim()
      const invalid = (reason: ResetTokenInvalid["reason"]) =>
        BadRequest.of({ ...RESET_TOKEN_ERRORS[reason], param: "token" })
      const userId = parseResetToken(token)
      if (!userId) return yield* Effect.fail(invalid("unknown"))
      const problem = passwordProblem(input.password)
      if (problem) return yield* Effect.fail(weakPassword(problem))
      // Check the token before spending a password hash on it.
      const loaded = yield* runner.load(UserDecider, userStream(userId))
      const pending = loaded.state.pendingReset
      const tokenHash = digest(token)
      if (!pending || !constantTimeEqual(pending.tokenHash, tokenHash)) {
        return yield* Effect.fail(
          invalid(loaded.state.spentResetHashes.includes(tokenHash) ? "used" : "unknown")
        )
      }
      const passwordHash = yield* hasher.hash(input.password)
      const now = yield* Time.now
      const metadata = yield* commandMetadata({ type: "user", id: userId })
      const result = yield* transact(
        runner.execute(
          UserDecider,
          userStream(userId),
          { _tag: "ResetPassword", tokenHash, passwordHash, now },
          { metadata }
        )
      ).pipe(
        Effect.catchTags({
          ResetTokenInvalid: (e) => Effect.fail(invalid(e.reason)),
          UserNotFound: () => Effect.fail(invalid("unknown"))
        })
      )
      yield* revocations.recordEvents(result.events)
      yield* forgetProfile(userId)
    }).pipe(orDieUnlessHttp)

  // --- Client credentials grant -------------------------------------------------------------------

  const clientCredentials = (input: {
    readonly grantType: string | undefined
    readonly clientId: string | undefined
    readonly clientSecret: string | undefined
    readonly scope: string | undefined
    readonly ip: string
  }) =>
    Effect.gen(function* () {
      if (input.grantType === undefined || input.grantType === "") {
        return yield* Effect.fail(
          BadRequest.of({ code: "parameter_missing", message: "grant_type is required", param: "grant_type" })
        )
      }
      if (input.grantType !== "client_credentials") {
        return yield* Effect.fail(
          BadRequest.of({
            code: "unsupported_grant_type",
            message: `grant_type ${JSON.stringify(input.grantType)} is not supported: use client_credentials`,
            param: "grant_type"
          })
        )
      }
      for (const [name, value] of [
        ["client_id", input.clientId],
        ["client_secret", input.clientSecret]
      ] as const) {
        if (value === undefined || value === "") {
          return yield* Effect.fail(
            BadRequest.of({ code: "parameter_missing", message: `${name} is required`, param: name })
          )
        }
      }
      const invalidClient = Unauthorized.of({
        code: "invalid_client",
        message: "client authentication failed"
      })
      yield* throttle.check(input.ip, `client:${input.clientId}`)
      const client = Ids.isValid("cli", input.clientId ?? "")
        ? yield* withSql(findLiveClient(input.clientId ?? ""))
        : Option.none<OAuthClientRow>()
      const presented = digest(input.clientSecret ?? "")
      const ok = Option.isSome(client) && constantTimeEqual(presented, client.value.secretHash)
      if (!ok || Option.isNone(client)) {
        yield* throttle.failed(input.ip, `client:${input.clientId}`)
        return yield* Effect.fail(invalidClient)
      }
      const granted = client.value.scopes
      let scopes: ReadonlyArray<string> = granted
      if (input.scope !== undefined && input.scope.trim() !== "") {
        const parsed = parseScope(input.scope)
        const allowed = (s: string) => granted.includes(ADMIN_SCOPE) || granted.includes(s)
        const refused = [...parsed.unknown, ...parsed.scopes.filter((s) => !allowed(s))]
        if (refused.length > 0) {
          return yield* Effect.fail(
            BadRequest.of({
              code: "invalid_scope",
              message: `scope ${refused.join(" ")} is unknown or not granted to this client`,
              param: "scope"
            })
          )
        }
        scopes = parsed.scopes
      }
      const tokenId = randomUUID()
      const issued = yield* tokens.issue({
        subject: client.value.clientId,
        tokenId,
        scopes,
        ttlSeconds: CLIENT_TOKEN_TTL_SECONDS
      })
      const metadata = yield* commandMetadata({ type: "oauth_client", id: client.value.clientId })
      yield* transact(
        runner.execute(
          OAuthClientDecider,
          oauthClientStream(client.value.clientId),
          { _tag: "IssueToken", tokenId, scopes, expiresAt: issued.expiresAt },
          { metadata }
        )
      ).pipe(Effect.catchTag("OAuthClientNotFound", () => Effect.fail(invalidClient)))
      return {
        accessToken: issued.token,
        tokenType: "Bearer" as const,
        expiresIn: CLIENT_TOKEN_TTL_SECONDS,
        scope: formatScope(scopes),
        issuedAt: issued.issuedAt
      }
    }).pipe(orDieUnlessHttp)

  // --- API keys -----------------------------------------------------------------------------------

  const apiKeyView = (row: ApiKeyRow) => ({
    id: row.keyId,
    name: row.name,
    scopes: row.scopes,
    last4: row.keyLast4,
    createdAt: row.createdAt
  })

  const createApiKey = (
    actor: AuthenticatedActor,
    input: { readonly name: string; readonly scopes: ReadonlyArray<string> }
  ) =>
    Effect.gen(function* () {
      const scopes = yield* grantableScopes(actor, input.scopes)
      const keyId = yield* Ids.make("key")
      const key = `${API_KEY_PREFIX}${randomBase62()}`
      const metadata = yield* commandMetadata(actorRef(actor))
      const result = yield* transact(
        runner.execute(
          ApiKeyDecider,
          apiKeyStream(keyId),
          {
            _tag: "Create",
            keyId,
            name: input.name,
            scopes,
            keyHash: digest(key),
            keyLast4: key.slice(-4),
            createdBy: actorRef(actor)
          },
          { metadata }
        )
      )
      return {
        id: keyId,
        name: input.name,
        key,
        scopes,
        last4: key.slice(-4),
        createdAt: result.events[0]?.recordedAt ?? (yield* Time.now)
      }
    }).pipe(orDieUnlessHttp)

  const listApiKeys = (page: Page) =>
    Effect.map(withSql(listLiveApiKeys(page)), ({ count, models }) => ({
      count,
      models: models.map(apiKeyView)
    })).pipe(Effect.orDie)

  const revokeApiKey = (actor: AuthenticatedActor, keyId: string) =>
    Effect.gen(function* () {
      if (!Ids.isValid("key", keyId)) return yield* Effect.fail(notFound("API key"))
      const metadata = yield* commandMetadata(actorRef(actor))
      const result = yield* transact(
        runner.execute(
          ApiKeyDecider,
          apiKeyStream(keyId),
          { _tag: "Revoke", revokedBy: actorRef(actor), callerHolds: (scope) => hasScope(actor, scope) },
          { metadata }
        )
      ).pipe(
        Effect.catchTags({
          ApiKeyNotFound: () => Effect.fail(notFound("API key")),
          // The answer creating such a key gets (grantableScopes): nothing was appended.
          ApiKeyScopesNotHeld: ({ missing }) =>
            Effect.fail(
              Forbidden.of({
                code: "insufficient_scope",
                message: `cannot revoke a key holding ${missing.join(", ")}: this credential does not hold ${missing.length === 1 ? "it" : "them"}`
              })
            )
        })
      )
      // This process's cached copy of the key is refused from the next request on.
      yield* revocations.recordEvents(result.events)
    }).pipe(orDieUnlessHttp)

  // --- OAuth clients --------------------------------------------------------------------------------

  const clientView = (row: Pick<OAuthClientRow, "clientId" | "name" | "scopes" | "createdAt">) => ({
    id: row.clientId,
    clientId: row.clientId,
    name: row.name,
    scopes: row.scopes,
    createdAt: row.createdAt
  })

  const createClient = (
    actor: AuthenticatedActor,
    input: { readonly name: string; readonly scopes: ReadonlyArray<string> | undefined }
  ) =>
    Effect.gen(function* () {
      const scopes = yield* grantableScopes(actor, input.scopes ?? [ADMIN_SCOPE])
      const clientId = yield* Ids.make("cli")
      const clientSecret = `cs_${randomBase62()}`
      const metadata = yield* commandMetadata(actorRef(actor))
      const result = yield* transact(
        runner.execute(
          OAuthClientDecider,
          oauthClientStream(clientId),
          {
            _tag: "Create",
            clientId,
            name: input.name,
            scopes,
            secretHash: digest(clientSecret),
            createdBy: actorRef(actor)
          },
          { metadata }
        )
      )
      const createdAt = result.events[0]?.recordedAt ?? (yield* Time.now)
      return { ...clientView({ clientId, name: input.name, scopes, createdAt }), clientSecret }
    }).pipe(orDieUnlessHttp)

  const listClients = (page: Page) =>
    Effect.map(withSql(listLiveClients(page)), ({ count, models }) => ({
      count,
      models: models.map(clientView)
    })).pipe(Effect.orDie)

  const deleteClient = (actor: AuthenticatedActor, clientId: string) =>
    Effect.gen(function* () {
      if (!Ids.isValid("cli", clientId)) return yield* Effect.fail(notFound("OAuth client"))
      const metadata = yield* commandMetadata(actorRef(actor))
      const result = yield* transact(
        runner.execute(
          OAuthClientDecider,
          oauthClientStream(clientId),
          { _tag: "Delete", deletedBy: actorRef(actor) },
          { metadata }
        )
      ).pipe(Effect.catchTag("OAuthClientNotFound", () => Effect.fail(notFound("OAuth client"))))
      yield* revocations.recordEvents(result.events)
    }).pipe(orDieUnlessHttp)

  // --- Admin bootstrap --------------------------------------------------------------------------------

  /**
   * Creates the admin `email` unless a user with that address exists (idempotent: an existing
   * account is left as it is). Answers whether it created one.
   */
  const ensureAdmin = (input: NewUser) =>
    Effect.gen(function* () {
      const existing = yield* withSql(findUserByEmail(input.email))
      if (Option.isSome(existing)) {
        if (existing.value.role !== "admin") {
          yield* Effect.logWarning(
            `${input.email} already exists as a ${existing.value.role} user: not made admin`
          )
        }
        return { created: false, userId: existing.value.userId, role: existing.value.role }
      }
      const created = yield* createUser(input, "admin").pipe(
        Effect.map((r) => ({ created: true, userId: r.userId, role: "admin" as Role })),
        // Another process created it at the same moment.
        // Another process created it at the same moment — or a customer record holds the address.
        Effect.catchTag("Conflict", (conflict) =>
          Effect.flatMap(withSql(findUserByEmail(input.email)), (found) =>
            Option.match(found, {
              onNone: () =>
                Effect.fail(
                  Conflict.of({
                    code: "resource_already_exists",
                    message: `a customer record already uses ${input.email}: choose another address for the admin`,
                    param: conflict.error.param ?? "email"
                  })
                ),
              onSome: (user) => Effect.succeed({ created: false, userId: user.userId, role: user.role })
            })
          )
        )
      )
      return created
    }).pipe(orDieUnlessHttp)

  return {
    register,
    login,
    refresh,
    logout,
    me,
    requestPasswordReset,
    confirmPasswordReset,
    clientCredentials,
    createApiKey,
    listApiKeys,
    revokeApiKey,
    createClient,
    listClients,
    deleteClient,
    ensureAdmin
  }
})

export type IdentityShape = Effect.Effect.Success<typeof makeIdentity>

export class Identity extends Context.Tag("identity/Identity")<Identity, IdentityShape>() {}

export const IdentityLive = Layer.effect(Identity, makeIdentity)
