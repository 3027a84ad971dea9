/**
 * Access tokens: HS256 JWTs signed with `JWT_SECRET` (jose). Claims: `iss`, `sub` (usr_… or cli_…),
 * `jti`, `iat`, `exp`, `scope` (space-separated), and for users `role`, `sid` (the session) and
 * `cus` (the linked customer). Verification pins the algorithm (no `alg: none`, no key confusion),
 * the issuer, and reads time from Effect's Clock so expiry is testable.
 */
import { createSecretKey, type KeyObject } from "node:crypto"
import { Clock, Context, Data, Effect, Layer } from "effect"
import { errors, jwtVerify, SignJWT } from "jose"
import { localSecret } from "../base/LocalSecret.js"
import { AppConfig } from "../config.js"
import type { Role } from "./permissions.js"

export const ISSUER = "commerce-platform"
/** Spec §5 rule 5: 3600 s for user sessions, 7200 s for the client credentials grant. */
export const USER_TOKEN_TTL_SECONDS = 3600
export const CLIENT_TOKEN_TTL_SECONDS = 7200
/** The longest an access token lives: revocations older than this no longer matter. */
export const MAX_TOKEN_TTL_SECONDS = CLIENT_TOKEN_TTL_SECONDS

export class SigningKeyError extends Data.TaggedError("SigningKeyError")<{ readonly message: string }> {}

export class InvalidAccessToken extends Data.TaggedError("InvalidAccessToken")<{
  readonly reason: "expired" | "invalid"
}> {}

export interface AccessClaims {
  readonly sub: string
  readonly jti: string
  readonly scopes: ReadonlyArray<string>
  readonly role?: Role
  readonly sid?: string
  readonly cus?: string
  readonly iat: number
  readonly exp: number
}

export interface IssueInput {
  readonly subject: string
  readonly tokenId: string
  readonly scopes: ReadonlyArray<string>
  readonly ttlSeconds: number
  readonly role?: Role
  readonly sessionId?: string
  readonly customerId?: string
}

export interface IssuedToken {
  readonly token: string
  readonly issuedAt: Date
  readonly expiresAt: Date
}

export interface AccessTokensShape {
  readonly issue: (input: IssueInput) => Effect.Effect<IssuedToken>
  readonly verify: (token: string) => Effect.Effect<AccessClaims, InvalidAccessToken>
}

export class AccessTokens extends Context.Tag("identity/AccessTokens")<AccessTokens, AccessTokensShape>() {}

const MIN_SECRET_BYTES = 32

/**
 * The signing key: `JWT_SECRET` (required in production, ≥ 32 bytes); otherwise generated once and
 * kept beside the embedded data (`<DATA_DIR>/jwt-secret.key`), or per process for `memory://`.
 */
export const loadSigningKey = Effect.gen(function* () {
  const config = yield* AppConfig
  const secret = yield* localSecret({
    configured: config.identity.jwtSecret,
    variable: "JWT_SECRET",
    fileName: "jwt-secret.key"
  }).pipe(Effect.mapError((e) => new SigningKeyError({ message: e.message })))
  if (secret.source === "generated") {
    yield* Effect.logWarning(
      `JWT_SECRET is not set: generated a signing key in ${secret.file}. Set JWT_SECRET in production.`
    )
  }
  const bytes = new TextEncoder().encode(secret.text.trim())
  if (bytes.length < MIN_SECRET_BYTES) {
    return yield* new SigningKeyError({ message: `JWT_SECRET must be at least ${MIN_SECRET_BYTES} bytes` })
  }
  return bytes
})

const stringClaim = (payload: Record<string, unknown>, name: string): string | undefined => {
  const value = payload[name]
  return typeof value === "string" && value !== "" ? value : undefined
}

/** Verified tokens kept so a token presented again skips the signature check (expiry is re-checked). */
const VERIFIED_CACHE_SIZE = 10_000

export const makeAccessTokens = (secret: Uint8Array): AccessTokensShape => {
  // Imported once: jose would otherwise import raw key bytes again on every sign and verify.
  const key: KeyObject = createSecretKey(secret)
  // token → claims, least recently used first. Keyed by the whole token: any change is a miss.
  const verified = new Map<string, AccessClaims>()
  const remember = (token: string, claims: AccessClaims) => {
    verified.set(token, claims)
    if (verified.size > VERIFIED_CACHE_SIZE) {
      const oldest = verified.keys().next()
      if (!oldest.done) verified.delete(oldest.value)
    }
  }
  return {
    issue: (input) =>
      Effect.flatMap(Clock.currentTimeMillis, (nowMs) => {
        const iat = Math.floor(nowMs / 1000)
        const exp = iat + input.ttlSeconds
        const claims: Record<string, string> = { scope: input.scopes.join(" ") }
        if (input.role) claims.role = input.role
        if (input.sessionId) claims.sid = input.sessionId
        if (input.customerId) claims.cus = input.customerId
        return Effect.map(
          Effect.promise(() =>
            new SignJWT(claims)
              .setProtectedHeader({ alg: "HS256", typ: "JWT" })
              .setIssuer(ISSUER)
              .setSubject(input.subject)
              .setJti(input.tokenId)
              .setIssuedAt(iat)
              .setExpirationTime(exp)
              .sign(key)
          ),
          (token) => ({ token, issuedAt: new Date(iat * 1000), expiresAt: new Date(exp * 1000) })
        )
      }),
    verify: (token) =>
      Effect.flatMap(Clock.currentTimeMillis, (nowMs) => {
        const cached = verified.get(token)
        if (cached !== undefined) {
          // jose's rule: expired once now ≥ exp.
          return Math.floor(nowMs / 1000) >= cached.exp
            ? Effect.fail(new InvalidAccessToken({ reason: "expired" }))
            : Effect.succeed(cached)
        }
        return Effect.tryPromise({
          try: () =>
            jwtVerify(token, key, {
              algorithms: ["HS256"],
              issuer: ISSUER,
              currentDate: new Date(nowMs),
              requiredClaims: ["sub", "jti", "iat", "exp"]
            }),
          catch: (error) =>
            new InvalidAccessToken({ reason: error instanceof errors.JWTExpired ? "expired" : "invalid" })
        }).pipe(
          Effect.flatMap(({ payload }) => {
            const sub = stringClaim(payload, "sub")
            const jti = stringClaim(payload, "jti")
            const role = payload.role
            if (!sub || !jti || typeof payload.iat !== "number" || typeof payload.exp !== "number")
              return Effect.fail(new InvalidAccessToken({ reason: "invalid" }))
            if (role !== undefined && role !== "admin" && role !== "customer")
              return Effect.fail(new InvalidAccessToken({ reason: "invalid" }))
            const scope = typeof payload.scope === "string" ? payload.scope : ""
            const sid = stringClaim(payload, "sid")
            const cus = stringClaim(payload, "cus")
            const claims: AccessClaims = {
              sub,
              jti,
              scopes: scope.split(" ").filter((s) => s !== ""),
              iat: payload.iat,
              exp: payload.exp,
              ...(role === undefined ? {} : { role }),
              ...(sid === undefined ? {} : { sid }),
              ...(cus === undefined ? {} : { cus })
            }
            // Only expiry can change the verdict on a cached token; one with `nbf` (never issued
            // here) is verified in full every time.
            if (payload.nbf === undefined) remember(token, claims)
            return Effect.succeed(claims)
          })
        )
      })
  }
}

export const AccessTokensLive = Layer.effect(AccessTokens, Effect.map(loadSigningKey, makeAccessTokens))
