/**
 * The credential verifier remembers verified API keys by their hash (issue #17: no SQL lookup per
 * request) without weakening revocation: a key revoked by this process is refused at once, one
 * revoked by another process once the revocation poll (every second) has seen it, and the cache is
 * not trusted past its TTL or while the poll is stalled. A key's scopes never change (no event does
 * that), so what is cached is what the key holds; the tests edit the row behind the cache's back
 * only to tell a cached answer from a looked-up one.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Duration, Effect, Exit } from "effect"
import { expect } from "vitest"
import { CredentialVerifier } from "../../src/http/Auth.js"
import { Revocations, type RevocationsShape } from "../../src/identity/Revocations.js"
import { API_KEY_CACHE_TTL, makeCredentialVerifier } from "../../src/identity/Verifier.js"
import { makeShiftedClock } from "../support/clock.js"
import { apiKeyWith, call, expectError, IdentityHttp } from "../support/identity.js"

const scopesOf = (actor: { readonly scopes: ReadonlySet<string> }) => [...actor.scopes].sort()

/** Another process's scope edit would be invisible to a cached key: how the tests tell a cache hit. */
const editScopes = (keyId: string, scopes: ReadonlyArray<string>) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`UPDATE identity.api_keys SET scopes = ${`{${scopes.join(",")}}`}::text[] WHERE key_id = ${keyId}`
  )

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("API key cache", (it) => {
  it.effect("a verified key is served from the cache (no lookup sees a row edited behind it)", () =>
    Effect.gen(function* () {
      const verifier = yield* CredentialVerifier
      const key = yield* apiKeyWith(["read:customers"])
      expect(scopesOf(yield* verifier.verify(key.key))).toEqual(["read:customers"])
      yield* editScopes(key.id, ["read:orders"])
      expect(scopesOf(yield* verifier.verify(key.key))).toEqual(["read:customers"])
    })
  )

  it.effect("revoked through this process: the cached key is refused on the very next request", () =>
    Effect.gen(function* () {
      const key = yield* apiKeyWith(["read:apikeys"])
      const admin = yield* apiKeyWith(["admin"])
      expect((yield* call("GET", "/apikey", { token: key.key })).status).toBe(200)
      expect((yield* call("DELETE", `/apikey/${key.id}`, { token: admin.key })).status).toBe(204)
      expectError(yield* call("GET", "/apikey", { token: key.key }), 401, "token_revoked")
    })
  )

  it.effect("revoked by another process: refused once the poll ran, within about a second", () =>
    Effect.gen(function* () {
      const verifier = yield* CredentialVerifier
      const sql = yield* SqlClient.SqlClient
      const key = yield* apiKeyWith(["read:customers"])
      yield* verifier.verify(key.key)
      // What the other process's revocation leaves in the shared database: the read model's row.
      const started = Date.now()
      yield* sql`UPDATE identity.api_keys SET revoked_at = now() WHERE key_id = ${key.id}`
      for (;;) {
        const exit = yield* Effect.exit(verifier.verify(key.key))
        if (Exit.isFailure(exit)) {
          expect(JSON.stringify(exit.cause)).toContain("token_revoked")
          break
        }
        expect(Date.now() - started, "still accepted after the poll interval and slack").toBeLessThan(2500)
        yield* Effect.sleep(Duration.millis(25))
      }
      // And it stays refused (looked up again: revoked in the row).
      expect(Exit.isFailure(yield* Effect.exit(verifier.verify(key.key)))).toBe(true)
    })
  )

  /** A verifier over a revocation list whose last successful poll is `polledAgoMs` ago. */
  const verifierPolled = (polledAgoMs: number, clock = makeShiftedClock()) =>
    Effect.gen(function* () {
      const revocations = yield* Revocations
      const stub: RevocationsShape = {
        ...revocations,
        lastPolledAt: () => clock.clock.unsafeCurrentTimeMillis() - polledAgoMs
      }
      const verifier = yield* makeCredentialVerifier.pipe(Effect.provideService(Revocations, stub))
      return { verify: (key: string) => Effect.withClock(verifier.verify(key), clock.clock), clock }
    })

  it.effect("a stalled revocation poll (last success > 3 s ago): every key is looked up again", () =>
    Effect.gen(function* () {
      const { verify } = yield* verifierPolled(10_000)
      const key = yield* apiKeyWith(["read:customers"])
      expect(scopesOf(yield* verify(key.key))).toEqual(["read:customers"])
      yield* editScopes(key.id, ["read:orders"])
      expect(scopesOf(yield* verify(key.key))).toEqual(["read:orders"])
    })
  )

  it.effect("a cached key is looked up again after the TTL", () =>
    Effect.gen(function* () {
      const { verify, clock } = yield* verifierPolled(0)
      const key = yield* apiKeyWith(["read:customers"])
      yield* verify(key.key)
      yield* editScopes(key.id, ["read:orders"])
      expect(scopesOf(yield* verify(key.key))).toEqual(["read:customers"])
      yield* clock.advance(Duration.sum(API_KEY_CACHE_TTL, Duration.millis(1)))
      expect(scopesOf(yield* verify(key.key))).toEqual(["read:orders"])
    })
  )

  it.effect("unknown and revoked keys are never cached", () =>
    Effect.gen(function* () {
      const { verify } = yield* verifierPolled(0)
      const bogus = yield* Effect.exit(verify("sk_not_a_key_at_all"))
      expect(JSON.stringify(bogus)).toContain("invalid_api_key")
      const key = yield* apiKeyWith(["read:customers"])
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE identity.api_keys SET revoked_at = now() WHERE key_id = ${key.id}`
      expect(JSON.stringify(yield* Effect.exit(verify(key.key)))).toContain("token_revoked")
      yield* sql`UPDATE identity.api_keys SET revoked_at = NULL WHERE key_id = ${key.id}`
      // Looked up again (nothing cached from the refusal).
      expect(scopesOf(yield* verify(key.key))).toEqual(["read:customers"])
    })
  )
})
