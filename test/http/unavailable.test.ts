/**
 * A database that cannot be reached is an outage, not a bug: whatever the request hits it through —
 * a handler, the authentication middleware's credential lookup — the answer is 503
 * `service_unavailable` with `Retry-After` in the one error body, logged as a warning without a
 * stack. A genuine SQL bug stays a 500 `internal_error`. (The real outage, through a cut TCP proxy in
 * front of PostgreSQL, is in test/ops.test.ts.)
 */
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpClient,
  HttpClientRequest
} from "@effect/platform"
import { SqlError } from "@effect/sql/SqlError"
import { describe, layer } from "@effect/vitest"
import { Effect, Layer, Logger, Schema } from "effect"
import { expect, it as plain } from "vitest"
import { isDatabaseUnreachable, unreachableReason } from "../../src/db/Reachability.js"
import { Authentication, AuthenticationLive, CredentialVerifier, NoRouteScopes } from "../../src/http/Auth.js"
import { InternalError } from "../../src/http/errors.js"
import { allowedMethods, apiMiddleware, databaseOutage } from "../../src/http/middleware.js"
import { NodeServerTest, TestCredentials } from "../support/http.js"

const errno = (code: string, message: string) => Object.assign(new Error(message), { code })

/** What @effect/sql-pg fails with when the server refuses connections. */
const refused = new SqlError({
  message: "Failed to acquire connection",
  cause: errno("ECONNREFUSED", "connect ECONNREFUSED 127.0.0.1:5432")
})
/** `localhost` tried on ::1 and 127.0.0.1: an AggregateError with an empty message. */
const refusedTwice = new SqlError({
  message: "Failed to acquire connection",
  cause: Object.assign(
    new AggregateError([
      errno("ECONNREFUSED", "connect ECONNREFUSED ::1:5432"),
      errno("ECONNREFUSED", "connect ECONNREFUSED 127.0.0.1:5432")
    ]),
    { code: "ECONNREFUSED" }
  )
})
const adminShutdown = new SqlError({
  message: "Failed to execute statement",
  cause: errno("57P01", "terminating connection due to administrator command")
})
const terminated = new SqlError({
  message: "Failed to execute statement",
  cause: new Error("Connection terminated unexpectedly")
})
const poolTimeout = new SqlError({
  message: "Failed to acquire connection",
  cause: new Error("timeout exceeded when trying to connect")
})
const syntaxError = new SqlError({
  message: "Failed to execute statement",
  cause: errno("42601", 'syntax error at or near "SELEC"')
})
const uniqueViolation = new SqlError({
  message: "Failed to execute statement",
  cause: errno("23505", "duplicate key value violates unique constraint")
})
/** A lost connection's pool wrapper over a server-side refusal that is not an outage (bad password). */
const badPassword = new SqlError({
  message: "Failed to acquire connection",
  cause: errno("28P01", 'password authentication failed for user "root"')
})

describe("isDatabaseUnreachable", () => {
  plain("recognizes refused, reset, timed-out and shut-down connections, and nothing else", () => {
    for (const e of [refused, refusedTwice, adminShutdown, terminated, poolTimeout]) {
      expect(isDatabaseUnreachable(e), String(e)).toBe(true)
    }
    const sqlError = (cause: unknown) => new SqlError({ message: "Failed to execute statement", cause })
    expect(isDatabaseUnreachable(sqlError(errno("57P03", "the database system is starting up")))).toBe(true)
    expect(isDatabaseUnreachable(sqlError(errno("08006", "connection failure")))).toBe(true)
    // Wrapped further (a domain error over the SqlError) it is still the database's outage…
    expect(isDatabaseUnreachable(new Error("could not load", { cause: refused }))).toBe(true)
    // …but a refused connection to anything else (an SMTP server, a webhook receiver) is not.
    const smtpRefused = errno("ECONNREFUSED", "connect ECONNREFUSED 127.0.0.1:587")
    for (const e of [
      syntaxError,
      uniqueViolation,
      badPassword,
      smtpRefused,
      new Error("boom"),
      "text",
      null
    ]) {
      expect(isDatabaseUnreachable(e), String(e)).toBe(false)
    }
    expect(unreachableReason(refusedTwice)).toBe("ECONNREFUSED")
    expect(unreachableReason(adminShutdown)).toBe("57P01")
  })
})

class Probe extends HttpApiGroup.make("probe")
  .add(HttpApiEndpoint.get("refused", "/probe/refused"))
  .add(HttpApiEndpoint.get("refusedTwice", "/probe/refused-twice"))
  .add(HttpApiEndpoint.get("shutdown", "/probe/shutdown"))
  .add(HttpApiEndpoint.get("terminated", "/probe/terminated"))
  .add(HttpApiEndpoint.get("poolTimeout", "/probe/pool-timeout"))
  .add(HttpApiEndpoint.get("failed", "/probe/failed"))
  .add(HttpApiEndpoint.get("bug", "/probe/bug")) {}
class Secure extends HttpApiGroup.make("secure")
  .add(HttpApiEndpoint.get("me", "/probe/me").addSuccess(Schema.Struct({ ok: Schema.Boolean })))
  .middleware(Authentication) {}
class ProbeApi extends HttpApi.make("probe").add(Probe).add(Secure).addError(InternalError) {}

/** An API-key lookup while the database is down: the verifier's query dies with the pool's error. */
const ProbeCredentials = Layer.effect(
  CredentialVerifier,
  Effect.map(CredentialVerifier, (inner) => ({
    verify: (credential: string) =>
      credential === "sk_db_down" ? Effect.die(refused) : inner.verify(credential)
  }))
).pipe(Layer.provide(TestCredentials))

const ProbeHandlers = Layer.mergeAll(
  HttpApiBuilder.group(ProbeApi, "probe", (h) =>
    h
      .handle("refused", () => Effect.die(refused))
      .handle("refusedTwice", () => Effect.die(refusedTwice))
      .handle("shutdown", () => Effect.die(adminShutdown))
      .handle("terminated", () => Effect.die(terminated))
      .handle("poolTimeout", () => Effect.die(poolTimeout))
      // Not only defects: a failure that escaped as such is the same outage.
      .handle("failed", () => Effect.orDie(Effect.fail(refused)))
      .handle("bug", () => Effect.die(syntaxError))
  ),
  HttpApiBuilder.group(ProbeApi, "secure", (h) => h.handle("me", () => Effect.succeed({ ok: true }))).pipe(
    Layer.provide(AuthenticationLive.pipe(Layer.provide([ProbeCredentials, NoRouteScopes])))
  )
)

const logs: Array<{ readonly level: string; readonly message: string; readonly hasCause: boolean }> = []
const CaptureLogs = Logger.add(
  Logger.make(({ logLevel, message, cause }) => {
    logs.push({ level: logLevel.label, message: String(message), hasCause: cause._tag !== "Empty" })
  })
)

const ProbeServer = HttpApiBuilder.serve(
  apiMiddleware({ accessLog: false, allow: allowedMethods(ProbeApi) })
).pipe(
  Layer.provide(HttpApiBuilder.api(ProbeApi).pipe(Layer.provide(ProbeHandlers))),
  // As src/http/Server.ts composes it.
  Layer.provide(HttpApiBuilder.middleware(databaseOutage)),
  Layer.provideMerge(NodeServerTest),
  Layer.provide(CaptureLogs)
)

const get = (path: string, token?: string) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const request = HttpClientRequest.get(path)
    const res = yield* client.execute(token ? HttpClientRequest.bearerToken(request, token) : request)
    return {
      status: res.status,
      headers: res.headers,
      body: (yield* res.json) as { error: Record<string, string> }
    }
  })

describe("database unreachable → 503", () => {
  layer(ProbeServer, { excludeTestServices: true })("probe api", (it) => {
    it.effect("handlers and the credential lookup answer 503 service_unavailable with Retry-After", () =>
      Effect.gen(function* () {
        logs.length = 0
        for (const [path, token] of [
          ["/probe/refused"],
          ["/probe/refused-twice"],
          ["/probe/shutdown"],
          ["/probe/terminated"],
          ["/probe/pool-timeout"],
          ["/probe/failed"],
          ["/probe/me", "sk_db_down"]
        ] as const) {
          const r = yield* get(path, token)
          expect(r.status, path).toBe(503)
          expect(r.headers["retry-after"], path).toMatch(/^[1-9]\d*$/)
          expect(r.body.error).toMatchObject({ type: "api_error", code: "service_unavailable" })
          expect(r.body.error.requestId).toBe(r.headers["request-id"])
          expect(JSON.stringify(r.body)).not.toContain("5432")
        }
        // Warned once per request, without a stack; never an ERROR.
        expect(logs.filter((l) => l.level === "ERROR")).toEqual([])
        expect(logs.filter((l) => l.level === "WARN" && /database unreachable/.test(l.message))).toHaveLength(
          7
        )
        expect(logs.some((l) => l.hasCause)).toBe(false)
      })
    )

    it.effect("a genuine SQL bug is still a 500 internal_error, logged as an error", () =>
      Effect.gen(function* () {
        logs.length = 0
        const r = yield* get("/probe/bug")
        expect(r.status).toBe(500)
        expect(r.headers["retry-after"]).toBeUndefined()
        expect(r.body.error.code).toBe("internal_error")
        expect(logs.filter((l) => l.level === "ERROR")).toHaveLength(1)
        const ok = yield* get("/probe/me", "test-admin")
        expect(ok.status).toBe(200)
      })
    )
  })
})
