/**
 * The service's `CredentialVerifier`: turns a bearer credential into the current actor.
 * - `sk_…` → an API key, looked up by its SHA-256 (revoked → 401 `token_revoked`, unknown → 401
 *   `invalid_api_key`). A live key is then remembered by that hash (ApiKeyCache): presenting it again
 *   costs no SQL, and its revocation — at once from this process, within the revocation poll's second
 *   from another — refuses it all the same. A key's scopes never change (there is no such event).
 * - anything else → a JWT access token (user or OAuth client): signature, issuer and expiry
 *   (401 `token_expired`), then the revocation list (401 `token_revoked`); malformed, tampered,
 *   `alg: none` or signed with another key → 401 `invalid_token`.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Layer, Option } from "effect"
import { provideSqlClient } from "../db/Sql.js"
import { type AuthenticatedActor, CredentialVerifier, type CredentialVerifierShape } from "../http/Auth.js"
import { Unauthorized } from "../http/errors.js"
import { isValid } from "../kernel/Ids.js"
import { findApiKeyByHash } from "./queries.js"
import { Revocations } from "./Revocations.js"
import { digest } from "./secrets.js"
import { AccessTokens } from "./tokens.js"

export const API_KEY_PREFIX = "sk_"

const invalidToken = Unauthorized.of({ code: "invalid_token", message: "the access token is not valid" })
const expiredToken = Unauthorized.of({
  code: "token_expired",
  message: "the access token has expired: exchange your refresh token at POST /auth/refresh"
})
const revokedToken = Unauthorized.of({ code: "token_revoked", message: "this token has been revoked" })

/** How long a verified API key is remembered, at most. */
export const API_KEY_CACHE_TTL = Duration.seconds(60)
/** How many verified API keys a process remembers (the oldest go first). */
export const API_KEY_CACHE_SIZE = 10_000
/**
 * The cache is trusted only while the revocation poll keeps up: past this since its last success
 * (three missed polls), every key is looked up again, so a stalled poll never keeps a key alive.
 */
export const API_KEY_CACHE_MAX_POLL_AGE = Duration.seconds(3)

const revokedKey = Unauthorized.of({ code: "token_revoked", message: "this API key has been revoked" })

export const makeCredentialVerifier = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const tokens = yield* AccessTokens
  const revocations = yield* Revocations
  const ttlMs = Duration.toMillis(API_KEY_CACHE_TTL)
  const maxPollAgeMs = Duration.toMillis(API_KEY_CACHE_MAX_POLL_AGE)
  // SHA-256 of the key → its actor and until when (epoch ms) it may be used from here.
  const cache = new Map<string, { readonly actor: AuthenticatedActor; readonly until: number }>()

  const remember = (hash: string, actor: AuthenticatedActor, nowMs: number) => {
    if (cache.size >= API_KEY_CACHE_SIZE && !cache.has(hash)) {
      const oldest = cache.keys().next()
      if (!oldest.done) cache.delete(oldest.value)
    }
    cache.set(hash, { actor, until: nowMs + ttlMs })
  }

  const lookUp = (hash: string, nowMs: number) =>
    findApiKeyByHash(hash).pipe(
      provideSqlClient(sql),
      Effect.orDie,
      Effect.flatMap(
        Option.match({
          onNone: () =>
            Effect.fail(Unauthorized.of({ code: "invalid_api_key", message: "this API key is not valid" })),
          onSome: (row) => {
            if (row.revokedAt) return Effect.fail(revokedKey)
            const actor: AuthenticatedActor = { type: "api_key", id: row.keyId, scopes: new Set(row.scopes) }
            // Revoked while the lookup ran: known here already, so not remembered.
            if (!revocations.isApiKeyRevoked(row.keyId)) remember(hash, actor, nowMs)
            return Effect.succeed(actor)
          }
        })
      )
    )

  const apiKey = (key: string) =>
    Effect.flatMap(Clock.currentTimeMillis, (nowMs) => {
      const hash = digest(key)
      const cached = cache.get(hash)
      if (cached !== undefined) {
        if (revocations.isApiKeyRevoked(cached.actor.id)) {
          cache.delete(hash)
          return Effect.fail(revokedKey)
        }
        const polledAt = revocations.lastPolledAt()
        if (cached.until > nowMs && polledAt !== undefined && nowMs - polledAt <= maxPollAgeMs) {
          return Effect.succeed(cached.actor)
        }
        cache.delete(hash)
      }
      return lookUp(hash, nowMs)
    })

  const accessToken = (token: string) =>
    tokens.verify(token).pipe(
      Effect.mapError((e) => (e.reason === "expired" ? expiredToken : invalidToken)),
      Effect.flatMap((claims) => {
        if (revocations.isRevoked(claims)) return Effect.fail(revokedToken)
        if (isValid("usr", claims.sub) && claims.role !== undefined && claims.sid !== undefined) {
          return Effect.succeed<AuthenticatedActor>({
            type: "user",
            id: claims.sub,
            role: claims.role,
            scopes: new Set(claims.scopes),
            tokenId: claims.jti,
            sessionId: claims.sid,
            ...(claims.cus === undefined ? {} : { customerId: claims.cus })
          })
        }
        if (isValid("cli", claims.sub)) {
          return Effect.succeed<AuthenticatedActor>({
            type: "oauth_client",
            id: claims.sub,
            scopes: new Set(claims.scopes),
            tokenId: claims.jti
          })
        }
        return Effect.fail(invalidToken)
      })
    )

  const verifier: CredentialVerifierShape = {
    verify: (credential) =>
      credential.startsWith(API_KEY_PREFIX) ? apiKey(credential) : accessToken(credential)
  }
  return verifier
})

export const CredentialVerifierLive = Layer.effect(CredentialVerifier, makeCredentialVerifier)
