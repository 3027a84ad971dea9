/**
 * Machine credentials over a real socket (spec §2.3, §4.1, §5, §7.1; design/API.md "Auth"): API
 * keys (create, list, scopes, no escalation, revoke, stored hashed), OAuth clients (admin only,
 * secret shown once, stored hashed) and the client credentials grant (form or HTTP Basic client
 * authentication, scope narrowing, error codes, revocation by deletion and by logout).
 */
import { createHash } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import {
  adminLogin,
  apiKeyWith,
  call,
  expectError,
  IdentityHttp,
  registerShopper
} from "../support/identity.js"

const ISO_MILLIS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
const KEY_ID = /^key_[0-7][0-9a-hjkmnp-tv-z]{25}$/
const CLIENT_ID = /^cli_[0-7][0-9a-hjkmnp-tv-z]{25}$/
/** Well-formed ids that name nothing. */
const NO_SUCH_KEY = "key_01jd4x8m6ffq2b3n5r7t9v1w3y"
const NO_SUCH_CLIENT = "cli_01jd4x8m6ffq2b3n5r7t9v1w3y"

const sha256 = (text: string) => createHash("sha256").update(text, "utf8").digest("hex")

/**
 * Where `needle` occurs in clear: the identity tables, the event store, the public events and the
 * stored responses of idempotent requests.
 */
const placesHolding = (needle: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const count = (rows: ReadonlyArray<{ n: number }>) => rows[0]?.n ?? 0
    const places: Record<string, number> = {
      "identity.api_keys": count(
        yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM identity.api_keys t
          WHERE strpos(t::text, ${needle}) > 0`
      ),
      "identity.oauth_clients": count(
        yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM identity.oauth_clients t
          WHERE strpos(t::text, ${needle}) > 0`
      ),
      "event_store.events": count(
        yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM event_store.events
          WHERE strpos(data::text, ${needle}) > 0 OR strpos(metadata::text, ${needle}) > 0`
      ),
      "event_store.public_events": count(
        yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM event_store.public_events
          WHERE strpos(data::text, ${needle}) > 0`
      ),
      "event_store.snapshots": count(
        yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM event_store.snapshots
          WHERE strpos(state::text, ${needle}) > 0`
      ),
      "http.idempotency_keys": count(
        yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM http.idempotency_keys
          WHERE position(convert_to(${needle}, 'UTF8') IN body) > 0`
      )
    }
    return Object.entries(places)
      .filter(([, n]) => n > 0)
      .map(([place]) => place)
  })

const liveKeyCount = (token: string) =>
  Effect.map(call("GET", "/apikey?display=1", { token }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.body.count as number
  })

const createClient = (token: string, json: { name: string; scopes?: ReadonlyArray<string> }) =>
  Effect.map(call("POST", "/oauth/clients", { token, json }), (r) => {
    expect(r.status, r.text).toBe(201)
    return r.body as { id: string; clientId: string; clientSecret: string; scopes: ReadonlyArray<string> }
  })

const grant = (form: Record<string, string>, headers?: Record<string, string>) =>
  call("POST", "/auth/token", headers === undefined ? { form } : { form, headers })

const clientToken = (client: { clientId: string; clientSecret: string }, scope?: string) =>
  Effect.map(
    grant({
      grant_type: "client_credentials",
      client_id: client.clientId,
      client_secret: client.clientSecret,
      ...(scope === undefined ? {} : { scope })
    }),
    (r) => {
      expect(r.status, r.text).toBe(200)
      return r.body as { accessToken: string; scope: string }
    }
  )

const basic = (id: string, secret: string) => ({
  authorization: `Basic ${Buffer.from(`${id}:${secret}`, "utf8").toString("base64")}`
})

describe("machine credentials", () => {
  layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("API keys", (it) => {
    it.effect("an admin creates a key: 201, the secret shown once, listed without it", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const r = yield* call("POST", "/apikey", {
          token: admin.accessToken,
          json: { name: "  reporting  ", scopes: ["read:orders", "read:customers"] }
        })
        expect(r.status, r.text).toBe(201)
        expect(r.body.id).toMatch(KEY_ID)
        expect(r.body.name).toBe("reporting")
        expect(r.body.key).toMatch(/^sk_[0-9A-Za-z]{43}$/)
        expect([...r.body.scopes].sort()).toEqual(["read:customers", "read:orders"])
        expect(r.body.last4).toBe(r.body.key.slice(-4))
        expect(r.body.createdAt).toMatch(ISO_MILLIS)

        const list = yield* call("GET", "/apikey", { token: admin.accessToken })
        expect(list.status, list.text).toBe(200)
        expect(list.body.count).toBeGreaterThanOrEqual(1)
        expect(list.body.models.length).toBeLessThanOrEqual(20)
        const listed = list.body.models.find((m: { id: string }) => m.id === r.body.id)
        expect(listed).toEqual({
          id: r.body.id,
          name: "reporting",
          scopes: r.body.scopes,
          last4: r.body.last4,
          createdAt: r.body.createdAt
        })
        for (const model of list.body.models) expect(model).not.toHaveProperty("key")
        expect(list.text).not.toContain(r.body.key)
        expect(list.text).not.toContain(r.body.key.slice(3))
      })
    )

    it.effect("page and display page through the newest first; display 0 or 101 → 400", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const created: Array<string> = []
        for (const name of ["first", "second", "third"]) {
          const r = yield* call("POST", "/apikey", {
            token: admin.accessToken,
            json: { name, scopes: ["read:events"] }
          })
          expect(r.status, r.text).toBe(201)
          created.push(r.body.id)
        }
        const total = yield* liveKeyCount(admin.accessToken)
        const page1 = yield* call("GET", "/apikey?page=1&display=2", { token: admin.accessToken })
        const page2 = yield* call("GET", "/apikey?page=2&display=2", { token: admin.accessToken })
        expect(page1.status, page1.text).toBe(200)
        expect(page2.status, page2.text).toBe(200)
        expect(page1.body.count).toBe(total)
        expect(page2.body.count).toBe(total)
        expect(page1.body.models.map((m: { id: string }) => m.id)).toEqual([created[2], created[1]])
        expect(page2.body.models[0]?.id).toBe(created[0])
        const beyond = yield* call("GET", `/apikey?page=${total + 1}&display=1`, { token: admin.accessToken })
        expect(beyond.status, beyond.text).toBe(200)
        expect(beyond.body).toEqual({ count: total, models: [] })

        for (const query of ["display=0", "display=101", "display=abc", "page=0"]) {
          const r = yield* call("GET", `/apikey?${query}`, { token: admin.accessToken })
          expect(r.status, `${query}: ${r.text}`).toBe(400)
          expect(r.body.error.type).toBe("invalid_request_error")
          expect(r.body.error.requestId).toMatch(/^req_/)
        }
        expectError(
          yield* call("GET", "/apikey?display=101", { token: admin.accessToken }),
          400,
          "parameter_invalid",
          "display"
        )
        expectError(
          yield* call("GET", "/apikey?display=0", { token: admin.accessToken }),
          400,
          "parameter_invalid",
          "display"
        )
        const max = yield* call("GET", "/apikey?display=100", { token: admin.accessToken })
        expect(max.status, max.text).toBe(200)
      })
    )

    it.effect("a key is a bearer credential within its scopes and 403 insufficient_scope outside", () =>
      Effect.gen(function* () {
        const reader = yield* apiKeyWith(["read:apikeys"])
        const list = yield* call("GET", "/apikey", { token: reader.key })
        expect(list.status, list.text).toBe(200)
        expect(list.body.models.map((m: { id: string }) => m.id)).toContain(reader.id)
        expectError(
          yield* call("POST", "/apikey", {
            token: reader.key,
            json: { name: "x", scopes: ["read:apikeys"] }
          }),
          403,
          "insufficient_scope"
        )
        expectError(
          yield* call("DELETE", `/apikey/${reader.id}`, { token: reader.key }),
          403,
          "insufficient_scope"
        )
        expectError(yield* call("GET", "/oauth/clients", { token: reader.key }), 403, "insufficient_scope")
        // An API key is not a user.
        expectError(yield* call("GET", "/auth/me", { token: reader.key }), 404, "resource_missing")
      })
    )

    it.effect("a key never mints more than it holds: 403 and nothing created", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const minter = yield* apiKeyWith(["write:apikeys", "read:apikeys"])
        const before = yield* liveKeyCount(admin.accessToken)
        for (const scopes of [
          ["admin"],
          ["read:customers"],
          ["read:apikeys", "write:orders"],
          ["write:apikeys", "read:events"]
        ]) {
          expectError(
            yield* call("POST", "/apikey", { token: minter.key, json: { name: "escalation", scopes } }),
            403,
            "insufficient_scope"
          )
        }
        expect(yield* liveKeyCount(admin.accessToken)).toBe(before)

        // Within its own scopes it may mint.
        const child = yield* call("POST", "/apikey", {
          token: minter.key,
          json: { name: "child", scopes: ["read:apikeys"] }
        })
        expect(child.status, child.text).toBe(201)
        expect(child.body.scopes).toEqual(["read:apikeys"])
        expect(yield* liveKeyCount(admin.accessToken)).toBe(before + 1)
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ createdByType: string; createdById: string }>`
          SELECT created_by_type AS "createdByType", created_by_id AS "createdById"
            FROM identity.api_keys WHERE key_id = ${child.body.id}`
        expect(rows).toEqual([{ createdByType: "api_key", createdById: minter.id }])
      })
    )

    it.effect("unknown scope names and empty or missing scopes → 400, nothing created", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const before = yield* liveKeyCount(admin.accessToken)
        for (const scopes of [["read:everything"], ["read:orders", "superuser"], ["READ:ORDERS"], ["*"]]) {
          expectError(
            yield* call("POST", "/apikey", { token: admin.accessToken, json: { name: "bad", scopes } }),
            400,
            "parameter_invalid",
            "scopes"
          )
        }
        expectError(
          yield* call("POST", "/apikey", { token: admin.accessToken, json: { name: "x", scopes: [] } }),
          400,
          "parameter_invalid",
          "scopes"
        )
        expectError(
          yield* call("POST", "/apikey", { token: admin.accessToken, json: { name: "x" } }),
          400,
          "parameter_missing",
          "scopes"
        )
        expectError(
          yield* call("POST", "/apikey", {
            token: admin.accessToken,
            json: { name: "   ", scopes: ["read:orders"] }
          }),
          400,
          "parameter_invalid",
          "name"
        )
        expect(yield* liveKeyCount(admin.accessToken)).toBe(before)
      })
    )

    it.effect("DELETE /apikey/:id → 204; the key then gets 401 token_revoked; again → 404", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const key = yield* apiKeyWith(["read:apikeys"])
        expect((yield* call("GET", "/apikey", { token: key.key })).status).toBe(200)
        const r = yield* call("DELETE", `/apikey/${key.id}`, { token: admin.accessToken })
        expect(r.status, r.text).toBe(204)
        expect(r.text).toBe("")
        expectError(yield* call("GET", "/apikey", { token: key.key }), 401, "token_revoked")
        expectError(
          yield* call("DELETE", `/apikey/${key.id}`, { token: admin.accessToken }),
          404,
          "resource_missing"
        )
        for (const id of [NO_SUCH_KEY, "key_nope", "not-an-id", "cli_01jd4x8m6ffq2b3n5r7t9v1w3y"]) {
          expectError(
            yield* call("DELETE", `/apikey/${id}`, { token: admin.accessToken }),
            404,
            "resource_missing"
          )
        }
        const list = yield* call("GET", "/apikey?display=100", { token: admin.accessToken })
        expect(list.body.models.map((m: { id: string }) => m.id)).not.toContain(key.id)
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ revoked: boolean }>`SELECT revoked_at IS NOT NULL AS revoked
          FROM identity.api_keys WHERE key_id = ${key.id}`
        expect(rows).toEqual([{ revoked: true }])
      })
    )

    it.effect(
      "a key never revokes a key holding more than it holds: 403 insufficient_scope, nothing written",
      () =>
        Effect.gen(function* () {
          const admin = yield* adminLogin()
          const revoker = yield* apiKeyWith(["write:apikeys", "read:apikeys", "read:orders"])
          const sql = yield* SqlClient.SqlClient
          const streamEvents = (keyId: string) =>
            Effect.map(
              sql<{ n: number }>`SELECT count(*)::int AS n FROM event_store.events
              WHERE stream_id = ${`apikey-${keyId}`}`,
              (rows) => rows[0]?.n ?? 0
            )
          for (const scopes of [["admin"], ["read:customers"], ["read:apikeys", "write:orders"]]) {
            const target = yield* apiKeyWith(scopes)
            const before = yield* liveKeyCount(admin.accessToken)
            // Creating such a key answers this; revoking one answers the same.
            expectError(
              yield* call("POST", "/apikey", { token: revoker.key, json: { name: "escalation", scopes } }),
              403,
              "insufficient_scope"
            )
            expectError(
              yield* call("DELETE", `/apikey/${target.id}`, { token: revoker.key }),
              403,
              "insufficient_scope"
            )
            // Nothing written: no event on the key's stream beyond its creation, the row live, the key works.
            expect(yield* streamEvents(target.id), scopes.join(" ")).toBe(1)
            const rows = yield* sql<{ revoked: boolean }>`SELECT revoked_at IS NOT NULL AS revoked
            FROM identity.api_keys WHERE key_id = ${target.id}`
            expect(rows).toEqual([{ revoked: false }])
            expect(yield* liveKeyCount(admin.accessToken)).toBe(before)
            const probe = yield* call("GET", "/apikey", { token: target.key })
            expect(probe.status, probe.text).not.toBe(401)
          }

          // Within its own scopes it may revoke: a key holding a subset, and itself.
          const child = yield* apiKeyWith(["read:apikeys", "read:orders"])
          const revoked = yield* call("DELETE", `/apikey/${child.id}`, { token: revoker.key })
          expect(revoked.status, revoked.text).toBe(204)
          expectError(yield* call("GET", "/apikey", { token: child.key }), 401, "token_revoked")
          const self = yield* call("DELETE", `/apikey/${revoker.id}`, { token: revoker.key })
          expect(self.status, self.text).toBe(204)

          // An unknown key is still 404, not 403 (whoever asks, nothing is said about its scopes).
          const other = yield* apiKeyWith(["write:apikeys"])
          expectError(
            yield* call("DELETE", `/apikey/${NO_SUCH_KEY}`, { token: other.key }),
            404,
            "resource_missing"
          )
        })
    )

    it.effect("two revocations of one key at once: one 204, the other 404", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const key = yield* apiKeyWith(["read:apikeys"])
        const replies = yield* Effect.all(
          [
            call("DELETE", `/apikey/${key.id}`, { token: admin.accessToken }),
            call("DELETE", `/apikey/${key.id}`, { token: admin.accessToken })
          ],
          { concurrency: "unbounded" }
        )
        expect(replies.map((r) => r.status).sort(), replies.map((r) => r.text).join(" | ")).toEqual([
          204, 404
        ])
        expectError(yield* call("GET", "/apikey", { token: key.key }), 401, "token_revoked")
      })
    )

    it.effect("stored hashed: the row holds the SHA-256 hex, nothing holds the key in clear", () =>
      Effect.gen(function* () {
        const key = yield* apiKeyWith(["read:orders"])
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ keyHash: string; keyLast4: string }>`
          SELECT key_hash AS "keyHash", key_last4 AS "keyLast4" FROM identity.api_keys WHERE key_id = ${key.id}`
        expect(rows).toEqual([{ keyHash: sha256(key.key), keyLast4: key.key.slice(-4) }])
        expect(yield* placesHolding(key.key)).toEqual([])
        expect(yield* placesHolding(key.key.slice(3))).toEqual([])
      })
    )
  })

  layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })(
    "secrets at rest with an Idempotency-Key",
    (it) => {
      // design/API.md: the secret is "shown once, stored as a hash". An idempotent creation keeps its
      // response for replays (24 h): that stored copy must not hold the secret in clear either.
      it.effect("POST /apikey with an Idempotency-Key: the key is stored nowhere in clear", () =>
        Effect.gen(function* () {
          const admin = yield* adminLogin()
          const r = yield* call("POST", "/apikey", {
            token: admin.accessToken,
            json: { name: "idempotent", scopes: ["read:orders"] },
            headers: { "idempotency-key": `apikey-${Date.now()}` }
          })
          expect(r.status, r.text).toBe(201)
          expect(yield* placesHolding(r.body.key.slice(3))).toEqual([])
        })
      )

      it.effect("POST /oauth/clients with an Idempotency-Key: the secret is stored nowhere in clear", () =>
        Effect.gen(function* () {
          const admin = yield* adminLogin()
          const r = yield* call("POST", "/oauth/clients", {
            token: admin.accessToken,
            json: { name: "idempotent" },
            headers: { "idempotency-key": `client-${Date.now()}` }
          })
          expect(r.status, r.text).toBe(201)
          expect(yield* placesHolding(r.body.clientSecret)).toEqual([])
        })
      )
    }
  )

  layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("OAuth clients", (it) => {
    it.effect("an admin registers a client: 201 with the secret once; listed without it", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const r = yield* call("POST", "/oauth/clients", { token: admin.accessToken, json: { name: "erp" } })
        expect(r.status, r.text).toBe(201)
        expect(r.body.clientId).toMatch(CLIENT_ID)
        expect(r.body.id).toBe(r.body.clientId)
        expect(typeof r.body.clientSecret).toBe("string")
        expect(r.body.clientSecret.length).toBeGreaterThanOrEqual(43)
        expect(r.body.name).toBe("erp")
        expect(r.body.scopes).toEqual(["admin"])
        expect(r.body.createdAt).toMatch(ISO_MILLIS)

        const narrow = yield* createClient(admin.accessToken, { name: "reader", scopes: ["read:orders"] })
        expect(narrow.scopes).toEqual(["read:orders"])

        const list = yield* call("GET", "/oauth/clients", { token: admin.accessToken })
        expect(list.status, list.text).toBe(200)
        expect(list.body.count).toBeGreaterThanOrEqual(2)
        const listed = list.body.models.find((m: { clientId: string }) => m.clientId === r.body.clientId)
        expect(listed).toEqual({
          id: r.body.id,
          clientId: r.body.clientId,
          name: "erp",
          scopes: ["admin"],
          createdAt: r.body.createdAt
        })
        for (const model of list.body.models) expect(model).not.toHaveProperty("clientSecret")
        expect(list.text).not.toContain(r.body.clientSecret)
        expect(list.text).not.toContain(narrow.clientSecret)

        expectError(
          yield* call("POST", "/oauth/clients", {
            token: admin.accessToken,
            json: { name: "bad", scopes: ["read:everything"] }
          }),
          400,
          "parameter_invalid",
          "scopes"
        )
      })
    )

    it.effect("a shopper or an API key without admin → 403 insufficient_scope", () =>
      Effect.gen(function* () {
        const shopper = yield* registerShopper()
        const key = yield* apiKeyWith(["write:apikeys", "read:apikeys"])
        for (const token of [shopper.accessToken, key.key]) {
          expectError(
            yield* call("POST", "/oauth/clients", { token, json: { name: "sneaky" } }),
            403,
            "insufficient_scope"
          )
          expectError(
            yield* call("POST", "/oauth/clients", {
              token,
              json: { name: "sneaky", scopes: ["read:apikeys"] }
            }),
            403,
            "insufficient_scope"
          )
          expectError(yield* call("GET", "/oauth/clients", { token }), 403, "insufficient_scope")
          expectError(
            yield* call("DELETE", `/oauth/clients/${NO_SUCH_CLIENT}`, { token }),
            403,
            "insufficient_scope"
          )
        }
        // An API key holding admin may.
        const adminKey = yield* apiKeyWith(["admin"])
        const r = yield* call("POST", "/oauth/clients", { token: adminKey.key, json: { name: "by key" } })
        expect(r.status, r.text).toBe(201)
      })
    )

    it.effect("the secret is stored as its SHA-256 hex, never in clear", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const client = yield* createClient(admin.accessToken, { name: "hashed" })
        // A token issued, so the client's stream holds more than its creation.
        yield* clientToken(client)
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ secretHash: string }>`SELECT secret_hash AS "secretHash"
          FROM identity.oauth_clients WHERE client_id = ${client.clientId}`
        expect(rows).toEqual([{ secretHash: sha256(client.clientSecret) }])
        expect(yield* placesHolding(client.clientSecret)).toEqual([])
      })
    )

    it.effect("DELETE /oauth/clients/:id → 204; again or a malformed id → 404", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const client = yield* createClient(admin.accessToken, { name: "short-lived" })
        const r = yield* call("DELETE", `/oauth/clients/${client.clientId}`, { token: admin.accessToken })
        expect(r.status, r.text).toBe(204)
        const list = yield* call("GET", "/oauth/clients?display=100", { token: admin.accessToken })
        expect(list.body.models.map((m: { clientId: string }) => m.clientId)).not.toContain(client.clientId)
        for (const id of [client.clientId, NO_SUCH_CLIENT, "cli_nope", NO_SUCH_KEY]) {
          expectError(
            yield* call("DELETE", `/oauth/clients/${id}`, { token: admin.accessToken }),
            404,
            "resource_missing"
          )
        }
      })
    )
  })

  layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("client credentials grant", (it) => {
    it.effect("form-encoded grant → 200 token without a refresh token; it works on admin routes", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const client = yield* createClient(admin.accessToken, { name: "machine" })
        const r = yield* grant({
          grant_type: "client_credentials",
          client_id: client.clientId,
          client_secret: client.clientSecret
        })
        expect(r.status, r.text).toBe(200)
        expect(r.body).toEqual({
          accessToken: expect.any(String),
          tokenType: "Bearer",
          expiresIn: 7200,
          scope: "admin",
          issuedAt: expect.stringMatching(ISO_MILLIS)
        })
        expect(r.body).not.toHaveProperty("refreshToken")
        expect(r.body.accessToken.split(".")).toHaveLength(3)
        const payload = JSON.parse(
          Buffer.from(r.body.accessToken.split(".")[1], "base64url").toString("utf8")
        )
        expect(payload.sub).toBe(client.clientId)
        expect(payload.exp - payload.iat).toBe(7200)

        const list = yield* call("GET", "/apikey", { token: r.body.accessToken })
        expect(list.status, list.text).toBe(200)
        const clients = yield* call("GET", "/oauth/clients", { token: r.body.accessToken })
        expect(clients.status, clients.text).toBe(200)
        const key = yield* call("POST", "/apikey", {
          token: r.body.accessToken,
          json: { name: "from a client", scopes: ["read:orders"] }
        })
        expect(key.status, key.text).toBe(201)
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ createdByType: string; createdById: string }>`
          SELECT created_by_type AS "createdByType", created_by_id AS "createdById"
            FROM identity.api_keys WHERE key_id = ${key.body.id}`
        expect(rows).toEqual([{ createdByType: "oauth_client", createdById: client.clientId }])
        // A client is not a user.
        expectError(yield* call("GET", "/auth/me", { token: r.body.accessToken }), 404, "resource_missing")
      })
    )

    it.effect("HTTP Basic client authentication works too", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const client = yield* createClient(admin.accessToken, { name: "basic" })
        const r = yield* grant(
          { grant_type: "client_credentials" },
          basic(client.clientId, client.clientSecret)
        )
        expect(r.status, r.text).toBe(200)
        expect(r.body.scope).toBe("admin")
        expect(r.body).not.toHaveProperty("refreshToken")
        expect((yield* call("GET", "/apikey", { token: r.body.accessToken })).status).toBe(200)
        expectError(
          yield* grant(
            { grant_type: "client_credentials" },
            basic(client.clientId, `${client.clientSecret}x`)
          ),
          401,
          "invalid_client"
        )
      })
    )

    it.effect("bad client authentication → 401 invalid_client", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const client = yield* createClient(admin.accessToken, { name: "target" })
        const attempts: ReadonlyArray<[string, Record<string, string>]> = [
          [
            "wrong secret",
            // The last character changed (a secret ending in "0" must not stay the same: a 1-in-62 flake).
            {
              client_id: client.clientId,
              client_secret: `${client.clientSecret.slice(0, -1)}${client.clientSecret.endsWith("0") ? "1" : "0"}`
            }
          ],
          ["unknown client", { client_id: NO_SUCH_CLIENT, client_secret: client.clientSecret }],
          ["malformed client id", { client_id: "not-a-client", client_secret: client.clientSecret }],
          ["another id type", { client_id: NO_SUCH_KEY, client_secret: client.clientSecret }]
        ]
        for (const [label, form] of attempts) {
          const r = yield* grant({ grant_type: "client_credentials", ...form })
          expect(r.status, `${label}: ${r.text}`).toBe(401)
          expectError(r, 401, "invalid_client")
        }
        // The right secret still works afterwards.
        yield* clientToken(client)
      })
    )

    it.effect("malformed requests → 400 parameter_missing / unsupported_grant_type; JSON → 415", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const client = yield* createClient(admin.accessToken, { name: "strict" })
        const creds = { client_id: client.clientId, client_secret: client.clientSecret }
        expectError(yield* grant({ ...creds }), 400, "parameter_missing", "grant_type")
        expectError(yield* grant({ grant_type: "", ...creds }), 400, "parameter_missing", "grant_type")
        expectError(
          yield* grant({ grant_type: "password", ...creds, username: "a@example.com", password: "x" }),
          400,
          "unsupported_grant_type",
          "grant_type"
        )
        expectError(
          yield* grant({ grant_type: "authorization_code", ...creds }),
          400,
          "unsupported_grant_type",
          "grant_type"
        )
        expectError(
          yield* grant({ grant_type: "client_credentials", client_id: client.clientId }),
          400,
          "parameter_missing",
          "client_secret"
        )
        expectError(
          yield* grant({ grant_type: "client_credentials", client_secret: client.clientSecret }),
          400,
          "parameter_missing",
          "client_id"
        )
        expectError(
          yield* call("POST", "/auth/token", { json: { grant_type: "client_credentials", ...creds } }),
          415,
          "unsupported_media_type"
        )
      })
    )

    it.effect("scope narrows the token; a scope the client lacks → 400 invalid_scope", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const full = yield* createClient(admin.accessToken, { name: "full" })
        const narrowed = yield* clientToken(full, "read:apikeys")
        expect(narrowed.scope).toBe("read:apikeys")
        expect((yield* call("GET", "/apikey", { token: narrowed.accessToken })).status).toBe(200)
        expectError(
          yield* call("POST", "/apikey", {
            token: narrowed.accessToken,
            json: { name: "x", scopes: ["read:apikeys"] }
          }),
          403,
          "insufficient_scope"
        )
        expectError(
          yield* call("GET", "/oauth/clients", { token: narrowed.accessToken }),
          403,
          "insufficient_scope"
        )

        const reader = yield* createClient(admin.accessToken, { name: "reader", scopes: ["read:apikeys"] })
        const own = yield* clientToken(reader)
        expect(own.scope).toBe("read:apikeys")
        expectError(
          yield* grant({
            grant_type: "client_credentials",
            client_id: reader.clientId,
            client_secret: reader.clientSecret,
            scope: "write:apikeys"
          }),
          400,
          "invalid_scope",
          "scope"
        )
        for (const scope of ["admin", "read:apikeys write:apikeys", "read:everything"]) {
          expectError(
            yield* grant({
              grant_type: "client_credentials",
              client_id: reader.clientId,
              client_secret: reader.clientSecret,
              scope
            }),
            400,
            "invalid_scope",
            "scope"
          )
        }
      })
    )

    it.effect("deleting the client revokes its live tokens and refuses new grants", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const client = yield* createClient(admin.accessToken, { name: "doomed" })
        const token = yield* clientToken(client)
        expect((yield* call("GET", "/apikey", { token: token.accessToken })).status).toBe(200)
        const r = yield* call("DELETE", `/oauth/clients/${client.clientId}`, { token: admin.accessToken })
        expect(r.status, r.text).toBe(204)
        expectError(yield* call("GET", "/apikey", { token: token.accessToken }), 401, "token_revoked")
        expectError(
          yield* grant({
            grant_type: "client_credentials",
            client_id: client.clientId,
            client_secret: client.clientSecret
          }),
          401,
          "invalid_client"
        )
      })
    )

    it.effect("logout with a client token revokes that token only; with an API key → 400", () =>
      Effect.gen(function* () {
        const admin = yield* adminLogin()
        const client = yield* createClient(admin.accessToken, { name: "sessions" })
        const first = yield* clientToken(client)
        const second = yield* clientToken(client)
        const r = yield* call("POST", "/auth/logout", { token: first.accessToken })
        expect(r.status, r.text).toBe(204)
        expectError(yield* call("GET", "/apikey", { token: first.accessToken }), 401, "token_revoked")
        expectError(yield* call("POST", "/auth/logout", { token: first.accessToken }), 401, "token_revoked")
        expect((yield* call("GET", "/apikey", { token: second.accessToken })).status).toBe(200)
        // New grants still work.
        const third = yield* clientToken(client)
        expect((yield* call("GET", "/apikey", { token: third.accessToken })).status).toBe(200)

        const key = yield* apiKeyWith(["read:apikeys"])
        const keyLogout = yield* call("POST", "/auth/logout", { token: key.key })
        expect(keyLogout.status, keyLogout.text).toBe(400)
        expect(keyLogout.body.error.type).toBe("invalid_request_error")
        expect(keyLogout.body.error.requestId).toMatch(/^req_/)
        // …and the key is untouched.
        expect((yield* call("GET", "/apikey", { token: key.key })).status).toBe(200)
      })
    )
  })
})
