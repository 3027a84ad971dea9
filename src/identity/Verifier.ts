/**
 * The service's `CredentialVerifier`: turns a bearer credential into the current actor.
 * - `sk_…` → an API key, looked up by its SHA-256 (revoked → 401 `token_revoked`, unknown → 401
 *   `invalid_api_key`);
 * - anything else → a JWT access token (user or OAuth client): signature, issuer and expiry
 *   (401 `token_expired`), then the revocation list (401 `token_revoked`); malformed, tampered,
 *   `alg: none` or signed with another key → 401 `invalid_token`.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Option } from "effect"
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

export const makeCredentialVerifier = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const tokens = yield* AccessTokens
  const revocations = yield* Revocations

  const apiKey = (key: string) =>
    findApiKeyByHash(digest(key)).pipe(
      Effect.provideService(SqlClient.SqlClient, sql),
      Effect.orDie,
      Effect.flatMap(
        Option.match({
          onNone: () =>
            Effect.fail(Unauthorized.of({ code: "invalid_api_key", message: "this API key is not valid" })),
          onSome: (row) =>
            row.revokedAt
              ? Effect.fail(
                  Unauthorized.of({ code: "token_revoked", message: "this API key has been revoked" })
                )
              : Effect.succeed<AuthenticatedActor>({
                  type: "api_key",
                  id: row.keyId,
                  scopes: new Set(row.scopes)
                })
        })
      )
    )

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
