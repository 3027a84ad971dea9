/**
 * Idempotency-Key over a real socket, on a test-only API whose endpoints count their side effects:
 * replays, reuse with another request, in-flight claims, concurrent duplicates, scopes, what is not
 * stored, key syntax, the crashed-process lease and the 24 h expiry (time moved by a shifted Clock
 * the server runs on).
 */
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpClient,
  HttpClientRequest,
  HttpServerRequest
} from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { describe, it, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Logger, LogLevel, Option, Redacted, Schedule, Schema } from "effect"
import pg from "pg"
import { expect } from "vitest"
import { AppConfig } from "../../src/config.js"
import { isUniqueViolation } from "../../src/db/Sql.js"
import { PersistenceLive } from "../../src/eventstore/layers.js"
import { Authentication, AuthenticationLive, CredentialVerifier, NoRouteScopes } from "../../src/http/Auth.js"
import {
  BadRequest,
  Conflict,
  InternalError,
  PayloadTooLarge,
  TooManyRequests,
  Unauthorized,
  UnsupportedMediaType
} from "../../src/http/errors.js"
import {
  idempotencyLockKey,
  idempotencyMiddleware,
  idempotencyPurgeProcessor,
  idempotencyTarget,
  parseIdempotencyKey,
  purgeExpiredIdempotencyKeys
} from "../../src/http/Idempotency.js"
import { apiMiddleware } from "../../src/http/middleware.js"
import {
  RateLimiterLive,
  rateLimitMiddleware,
  rateLimitPolicy,
  requesterKey
} from "../../src/http/RateLimit.js"
import { CommandRunnerLive } from "../../src/kernel/CommandRunner.js"
import { ProjectionsLive } from "../../src/kernel/Projection.js"
import { processors } from "../../src/registry.js"
import { makeShiftedClock } from "../support/clock.js"
import { testConfig, usingRealPostgres } from "../support/database.js"

// --- Time the server runs on: the live clock shifted by an offset the tests move forward ----------

const { clock: shifted, advance } = makeShiftedClock()

// --- The probe API: side effects are counted per item, only when the handler succeeds ------------

const executions = new Map<string, number>()
const executed = (item: string) => executions.get(item) ?? 0
let hold: { readonly started: Deferred.Deferred<void>; readonly gate: Deferred.Deferred<void> } | undefined
let throttled = false
let failNext = false
let flipAccepted = false
const vanished = new Set<string>()

const Order = Schema.Struct({ item: Schema.String, quantity: Schema.optional(Schema.Int) })
const Created = Schema.Struct({ id: Schema.String, item: Schema.String, execution: Schema.Int })

class Probe extends HttpApiGroup.make("probe")
  .add(
    HttpApiEndpoint.post("create", "/probe/orders")
      .setPayload(Order)
      .addSuccess(Created, { status: 201 })
      .addError(Conflict)
      .addError(TooManyRequests)
  )
  .add(HttpApiEndpoint.put("replace", "/probe/orders").setPayload(Order).addSuccess(Created))
  .add(HttpApiEndpoint.post("other", "/probe/other").setPayload(Order).addSuccess(Created, { status: 201 }))
  .add(HttpApiEndpoint.del("remove", "/probe/orders/:id").setPath(Schema.Struct({ id: Schema.String })))
  .add(
    HttpApiEndpoint.post("limited", "/probe/limited").setPayload(Order).addSuccess(Created, { status: 201 })
  )
  .add(
    HttpApiEndpoint.post("unique", "/probe/unique")
      .setPayload(Order)
      .addSuccess(Created, { status: 201 })
      .addError(Conflict)
  )
  .add(HttpApiEndpoint.get("count", "/probe/count").addSuccess(Schema.Struct({ total: Schema.Int }))) {}

class Secure extends HttpApiGroup.make("secure")
  .add(
    HttpApiEndpoint.post("create", "/probe/secure/orders")
      .setPayload(Order)
      .addSuccess(Created, { status: 201 })
      .addError(Conflict)
      .addError(TooManyRequests)
  )
  .middleware(Authentication) {}

class ProbeApi extends HttpApi.make("probe")
  .add(Probe)
  .add(Secure)
  .addError(BadRequest)
  .addError(PayloadTooLarge)
  .addError(UnsupportedMediaType)
  .addError(InternalError) {}

const execute = (item: string) =>
  Effect.sync(() => {
    const n = executed(item) + 1
    executions.set(item, n)
    return { id: `ord_${item}_${n}`, item, execution: n }
  })

const create = (item: string) =>
  Effect.gen(function* () {
    const h = hold
    if (item.startsWith("hold") && h) {
      yield* Deferred.succeed(h.started, undefined)
      yield* Deferred.await(h.gate)
    }
    if (item.startsWith("slow")) yield* Effect.sleep("100 millis")
    if (item === "conflict") {
      return yield* Effect.fail(Conflict.of({ code: "resource_already_exists", message: "already there" }))
    }
    if (item.startsWith("bad")) {
      return yield* Effect.fail(
        BadRequest.of({ code: "parameter_invalid", message: "bad item", param: "item" })
      )
    }
    if (item.startsWith("throttle") && throttled) {
      return yield* Effect.fail(TooManyRequests.of({ code: "rate_limited", message: "slow down" }))
    }
    if (item.startsWith("boom") && failNext) {
      failNext = false
      return yield* Effect.die(new Error("the transaction rolled back"))
    }
    return yield* execute(item)
  })

const FlipCredentials = Layer.succeed(CredentialVerifier, {
  verify: (credential) =>
    (credential === "flip" && flipAccepted) || credential === "good"
      ? Effect.succeed({ type: "api_key" as const, id: "key_flip", scopes: new Set<string>(["*"]) })
      : Effect.fail(Unauthorized.of({ code: "invalid_token", message: "the credential is not valid" }))
})

const ProbeHandlers = Layer.mergeAll(
  HttpApiBuilder.group(ProbeApi, "probe", (h) =>
    h
      .handle("create", ({ payload }) => create(payload.item))
      .handle("replace", ({ payload }) => execute(`put:${payload.item}`))
      .handle("other", ({ payload }) => execute(`other:${payload.item}`))
      .handle("remove", ({ path }) => Effect.asVoid(execute(`delete:${path.id}`)))
      .handle("limited", ({ payload }) => execute(payload.item))
      .handle("unique", ({ payload }) =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          // A uniqueness rule, checked by the database as a command's append would be.
          const inserted = yield* sql`INSERT INTO probe_unique (item) VALUES (${payload.item})`.pipe(
            Effect.as(true),
            Effect.catchIf(isUniqueViolation, () => Effect.succeed(false)),
            Effect.orDie
          )
          if (!inserted) {
            return yield* Effect.fail(
              Conflict.of({ code: "resource_already_exists", message: "already there" })
            )
          }
          // The request ends without its answer after its write (the process went away).
          if (payload.item.startsWith("vanish") && !vanished.has(payload.item)) {
            vanished.add(payload.item)
            return yield* Effect.interrupt
          }
          return yield* execute(`unique:${payload.item}`)
        })
      )
      .handle("count", () =>
        Effect.sync(() => ({ total: [...executions.values()].reduce((a, b) => a + b, 0) }))
      )
  ),
  HttpApiBuilder.group(ProbeApi, "secure", (h) =>
    h.handle("create", ({ payload }) => create(payload.item))
  ).pipe(Layer.provide(AuthenticationLive.pipe(Layer.provide([FlipCredentials, NoRouteScopes]))))
)

const limited = rateLimitPolicy("probe.limited", { limit: 1, window: "1 minute" })

const ProbeServer = HttpApiBuilder.serve((app) =>
  apiMiddleware({ accessLog: false })(
    rateLimitMiddleware({ rules: [{ prefix: "/probe/limited", keyBy: "credential", policy: limited }] })(
      idempotencyMiddleware()(app)
    )
  )
).pipe(
  Layer.provide(HttpApiBuilder.api(ProbeApi).pipe(Layer.provide(ProbeHandlers))),
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provide(RateLimiterLive),
  Layer.provide(CommandRunnerLive.pipe(Layer.provide(ProjectionsLive([])))),
  Layer.provideMerge(
    PersistenceLive.pipe(
      Layer.provideMerge(
        testConfig({ rateLimit: { enabled: true, authPerMinute: 30, apiPerSecond: 25, apiBurst: 50 } })
      )
    )
  ),
  Layer.provide(
    Logger.minimumLogLevel(process.env.TEST_LOG_LEVEL === "debug" ? LogLevel.Debug : LogLevel.Warning)
  ),
  Layer.provide(Layer.setClock(shifted))
)

// --- Helpers ---------------------------------------------------------------------------------------

interface Answer {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly text: string
}

interface ErrorJson {
  readonly error: { type: string; code: string; message: string; param?: string; requestId: string }
}

const send = (request: HttpClientRequest.HttpClientRequest) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const res = yield* client.execute(request)
    const text = yield* res.text
    return { status: res.status, headers: res.headers, text } satisfies Answer
  })

const order = (
  body: unknown,
  options: {
    readonly key?: string
    readonly token?: string
    readonly path?: string
    readonly method?: "POST" | "PUT" | "PATCH" | "DELETE"
  } = {}
) => {
  let request = HttpClientRequest.make(options.method ?? "POST")(options.path ?? "/probe/orders").pipe(
    HttpClientRequest.bodyUnsafeJson(body)
  )
  if (options.key !== undefined)
    request = HttpClientRequest.setHeader(request, "idempotency-key", options.key)
  if (options.token !== undefined) request = HttpClientRequest.bearerToken(request, options.token)
  return send(request)
}

const expectError = (r: Answer, status: number, code: string, type?: string) => {
  expect(r.status, r.text).toBe(status)
  const body = JSON.parse(r.text) as ErrorJson
  expect(body.error.code).toBe(code)
  if (type) expect(body.error.type).toBe(type)
  expect(body.error.requestId).toMatch(/^req_/)
  expect(r.headers["request-id"]).toBe(body.error.requestId)
  expect(r.headers["idempotent-replayed"]).toBeUndefined()
  return body
}

const expectReplayOf = (replay: Answer, original: Answer) => {
  expect(replay.status).toBe(original.status)
  expect(replay.text).toBe(original.text)
  expect(replay.headers["idempotent-replayed"]).toBe("true")
  expect(replay.headers["content-type"]).toBe(original.headers["content-type"])
  expect(replay.headers["request-id"]).toMatch(/^req_/)
  expect(replay.headers["request-id"]).not.toBe(original.headers["request-id"])
}

let counter = 0
const unique = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${++counter}`

describe("Idempotency-Key", () => {
  it("is 1–255 printable ASCII characters; the quoted form is the same key", () => {
    const parse = (raw: string) => Option.getOrUndefined(parseIdempotencyKey(raw))
    expect(parse("abc")).toBe("abc")
    expect(parse('"abc"')).toBe("abc")
    expect(parse('"a\\"b"')).toBe('a"b')
    expect(parse("a b ~!")).toBe("a b ~!")
    expect(parse("x".repeat(255))).toHaveLength(255)
    for (const bad of ["", '""', "x".repeat(256), "caf\u00e9", "a\u0001b", "\u{1F600}"]) {
      expect(parse(bad), JSON.stringify(bad)).toBeUndefined()
    }
  })

  layer(ProbeServer, { excludeTestServices: true, timeout: 60_000 })("over HTTP", (it) => {
    it.effect("a retry replays the stored status and body without a second side effect", () =>
      Effect.gen(function* () {
        const item = unique("replay")
        const key = unique("key")
        const first = yield* order({ item, quantity: 1 }, { key })
        expect(first.status).toBe(201)
        expect(first.headers["idempotent-replayed"]).toBeUndefined()
        expect(JSON.parse(first.text)).toMatchObject({ item, execution: 1 })
        const second = yield* order({ item, quantity: 1 }, { key })
        expectReplayOf(second, first)
        // The same JSON with other key order and spacing is the same request.
        const reordered = yield* send(
          HttpClientRequest.post("/probe/orders").pipe(
            HttpClientRequest.bodyText(
              `{ "quantity": 1,\n  "item": ${JSON.stringify(item)} }`,
              "application/json"
            ),
            HttpClientRequest.setHeader("idempotency-key", key)
          )
        )
        expectReplayOf(reordered, first)
        // The IETF structured-field form of the same key is the same key.
        expectReplayOf(yield* order({ item, quantity: 1 }, { key: `"${key}"` }), first)
        expect(executed(item)).toBe(1)
        // Without a key every request executes.
        yield* order({ item, quantity: 1 })
        expect(executed(item)).toBe(2)
      })
    )

    it.effect("a stored error replays its original body (request id included) under a new Request-Id", () =>
      Effect.gen(function* () {
        const key = unique("key")
        const first = yield* order({ item: "conflict" }, { key })
        const body = expectError(first, 409, "resource_already_exists")
        const replay = yield* order({ item: "conflict" }, { key })
        expectReplayOf(replay, first)
        expect((JSON.parse(replay.text) as ErrorJson).error.requestId).toBe(body.error.requestId)
      })
    )

    it.effect("DELETE and PUT are covered; a 204 replays as a 204", () =>
      Effect.gen(function* () {
        const id = unique("ord")
        const key = unique("key")
        const first = yield* send(
          HttpClientRequest.del(`/probe/orders/${id}`).pipe(
            HttpClientRequest.setHeader("idempotency-key", key)
          )
        )
        expect(first.status).toBe(204)
        const second = yield* send(
          HttpClientRequest.del(`/probe/orders/${id}`).pipe(
            HttpClientRequest.setHeader("idempotency-key", key)
          )
        )
        expect(second.status).toBe(204)
        expect(second.text).toBe("")
        expect(second.headers["idempotent-replayed"]).toBe("true")
        expect(executed(`delete:${id}`)).toBe(1)
        const item = unique("put")
        const putKey = unique("key")
        const put = yield* order({ item }, { key: putKey, method: "PUT" })
        expect(put.status).toBe(200)
        expectReplayOf(yield* order({ item }, { key: putKey, method: "PUT" }), put)
        expect(executed(`put:${item}`)).toBe(1)
      })
    )

    it.effect("the same key with another body, path or method is 422 idempotency_key_reused", () =>
      Effect.gen(function* () {
        const item = unique("reuse")
        const key = unique("key")
        const first = yield* order({ item }, { key })
        expect(first.status).toBe(201)
        expectError(
          yield* order({ item, quantity: 2 }, { key }),
          422,
          "idempotency_key_reused",
          "idempotency_error"
        )
        expectError(
          yield* order({ item }, { key, path: "/probe/other" }),
          422,
          "idempotency_key_reused",
          "idempotency_error"
        )
        expectError(yield* order({ item }, { key, method: "PUT" }), 422, "idempotency_key_reused")
        expectError(yield* order({ item }, { key, path: "/probe/orders?x=1" }), 422, "idempotency_key_reused")
        expect(executed(item)).toBe(1)
        expect(executed(`other:${item}`)).toBe(0)
        expect(executed(`put:${item}`)).toBe(0)
        // The stored answer is untouched.
        expectReplayOf(yield* order({ item }, { key }), first)
      })
    )

    it.effect("while the first request runs, the same key is 409 idempotency_request_in_progress", () =>
      Effect.gen(function* () {
        const item = unique("hold")
        const key = unique("key")
        const h = { started: yield* Deferred.make<void>(), gate: yield* Deferred.make<void>() }
        hold = h
        const first = yield* Effect.fork(order({ item }, { key }))
        yield* Deferred.await(h.started)
        const during = yield* order({ item }, { key })
        expectError(during, 409, "idempotency_request_in_progress", "invalid_request_error")
        // A different request with the key still in flight is a reuse, not a wait.
        expectError(yield* order({ item: `${item}-other` }, { key }), 422, "idempotency_key_reused")
        yield* Deferred.succeed(h.gate, undefined)
        const done = yield* Fiber.join(first)
        hold = undefined
        expect(done.status).toBe(201)
        expectReplayOf(yield* order({ item }, { key }), done)
        expect(executed(item)).toBe(1)
      })
    )

    it.effect("10 concurrent duplicates: one execution; every other answer is the replay or 409", () =>
      Effect.gen(function* () {
        const item = unique("slow")
        const key = unique("key")
        const answers = yield* Effect.all(
          Array.from({ length: 10 }, () => order({ item, quantity: 3 }, { key })),
          { concurrency: "unbounded" }
        )
        expect(executed(item)).toBe(1)
        const originals = answers.filter(
          (a) => a.status === 201 && a.headers["idempotent-replayed"] === undefined
        )
        expect(originals).toHaveLength(1)
        const original = originals[0]
        if (!original) return
        for (const a of answers) {
          if (a === original) continue
          if (a.status === 409) expectError(a, 409, "idempotency_request_in_progress")
          else expectReplayOf(a, original)
        }
        // The handler takes 100 ms: the duplicates did overlap the first request.
        expect(answers.some((a) => a.status === 409)).toBe(true)
        expectReplayOf(yield* order({ item, quantity: 3 }, { key }), original)
        expect(executed(item)).toBe(1)
      })
    )

    it.effect("the scope is the credential: different credentials with the same key are independent", () =>
      Effect.gen(function* () {
        const key = unique("shared-key")
        const a = yield* order({ item: unique("a") }, { key, token: "token-a" })
        const b = yield* order({ item: unique("b") }, { key, token: "token-b" })
        const anonymous = yield* order({ item: unique("anon") }, { key })
        for (const r of [a, b, anonymous]) {
          expect(r.status).toBe(201)
          expect(r.headers["idempotent-replayed"]).toBeUndefined()
        }
        const itemA = (JSON.parse(a.text) as { item: string }).item
        expectReplayOf(yield* order({ item: itemA }, { key, token: "token-a" }), a)
        expectError(yield* order({ item: itemA }, { key, token: "token-b" }), 422, "idempotency_key_reused")
      })
    )

    it.effect("400, 401 and 429 answers are not stored: a corrected retry with the same key executes", () =>
      Effect.gen(function* () {
        // 400 from the handler; the corrected request (another body) is not a reuse.
        const key400 = unique("key")
        expectError(yield* order({ item: "bad" }, { key: key400 }), 400, "parameter_invalid")
        const fixed = unique("fixed")
        expect((yield* order({ item: fixed }, { key: key400 })).status).toBe(201)
        expect(executed(fixed)).toBe(1)

        // 400 from schema validation.
        const keySchema = unique("key")
        expectError(yield* order({ quantity: 1 }, { key: keySchema }), 400, "parameter_missing")
        const item = unique("after-schema")
        expect((yield* order({ item }, { key: keySchema })).status).toBe(201)

        // 401 from authentication, then the same request once the credential is accepted.
        const key401 = unique("key")
        const secureItem = unique("secure")
        const denied = yield* order(
          { item: secureItem },
          { key: key401, token: "flip", path: "/probe/secure/orders" }
        )
        expectError(denied, 401, "invalid_token")
        flipAccepted = true
        const accepted = yield* order(
          { item: secureItem },
          { key: key401, token: "flip", path: "/probe/secure/orders" }
        )
        flipAccepted = false
        expect(accepted.status).toBe(201)
        expect(accepted.headers["idempotent-replayed"]).toBeUndefined()
        expect(executed(secureItem)).toBe(1)

        // 429 from the handler (a per-account throttle), then the same request once it lifts.
        const key429 = unique("key")
        const throttledItem = unique("throttle")
        throttled = true
        expectError(yield* order({ item: throttledItem }, { key: key429 }), 429, "rate_limited")
        throttled = false
        expect((yield* order({ item: throttledItem }, { key: key429 })).status).toBe(201)
        expect(executed(throttledItem)).toBe(1)

        // 429 from the rate limiter (1 per minute per credential on /probe/limited).
        const first = unique("limited")
        expect((yield* order({ item: first }, { key: unique("key"), path: "/probe/limited" })).status).toBe(
          201
        )
        const keyLimited = unique("key")
        const second = unique("limited")
        const refused = yield* order({ item: second }, { key: keyLimited, path: "/probe/limited" })
        expectError(refused, 429, "rate_limited", "rate_limit_error")
        expect(Number(refused.headers["retry-after"])).toBeGreaterThanOrEqual(1)
        yield* advance("61 seconds")
        const later = yield* order({ item: second }, { key: keyLimited, path: "/probe/limited" })
        expect(later.status).toBe(201)
        expect(later.headers["idempotent-replayed"]).toBeUndefined()
        expect(executed(second)).toBe(1)
      })
    )

    it.effect(
      "a request that ended without its answer after a write kept nothing: the retry runs, never into the uniqueness rule",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          yield* sql`CREATE TABLE IF NOT EXISTS probe_unique (item text PRIMARY KEY)`
          const item = unique("vanish")
          const key = unique("key")
          const lost = yield* order({ item }, { key, path: "/probe/unique" })
          expect(lost.status).toBe(503)
          const rows = Effect.map(
            sql<{ n: number }>`SELECT count(*)::int AS n FROM probe_unique WHERE item = ${item}`,
            (r) => r[0]?.n
          )
          expect(yield* rows).toBe(0)
          const retry = yield* order({ item }, { key, path: "/probe/unique" })
          expect(retry.status, retry.text).toBe(201)
          expect(retry.headers["idempotent-replayed"]).toBeUndefined()
          expectReplayOf(yield* order({ item }, { key, path: "/probe/unique" }), retry)
          expect(yield* rows).toBe(1)
          expect(executed(`unique:${item}`)).toBe(1)
        })
    )

    it.effect("a 5xx releases the key: the retry runs again", () =>
      Effect.gen(function* () {
        const key = unique("key")
        const item = unique("boom")
        failNext = true
        const failed = yield* order({ item }, { key })
        expectError(failed, 500, "internal_error", "api_error")
        expect(executed(item)).toBe(0)
        const retry = yield* order({ item }, { key })
        expect(retry.status).toBe(201)
        expect(retry.headers["idempotent-replayed"]).toBeUndefined()
        expect(executed(item)).toBe(1)
      })
    )

    it.effect("an invalid key is 400 parameter_invalid and nothing runs", () =>
      Effect.gen(function* () {
        const item = unique("invalid-key")
        for (const key of ["", "x".repeat(256), "caf\u00e9"]) {
          const r = yield* order({ item }, { key })
          const body = expectError(r, 400, "parameter_invalid", "invalid_request_error")
          expect(body.error.param).toBe("Idempotency-Key")
        }
        expect(executed(item)).toBe(0)
        expect((yield* order({ item }, { key: "x".repeat(255) })).status).toBe(201)
      })
    )

    it.effect("safe methods ignore the header", () =>
      Effect.gen(function* () {
        const key = unique("key")
        for (let i = 0; i < 2; i++) {
          const r = yield* send(
            HttpClientRequest.get("/probe/count").pipe(HttpClientRequest.setHeader("idempotency-key", key))
          )
          expect(r.status).toBe(200)
          expect(r.headers["idempotent-replayed"]).toBeUndefined()
        }
      })
    )

    it.effect("a process that died holds nothing: its key is resolvable at once", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const body = { item: unique("crashed") }
        const key = unique("key")
        const target = idempotencyTarget({
          requester: requesterKey(
            HttpServerRequest.fromWeb(
              new Request("http://localhost/probe/orders", {
                method: "POST",
                headers: { authorization: "Bearer crash-token" }
              })
            ),
            0
          ),
          key,
          method: "POST",
          path: "/probe/orders",
          body: JSON.stringify(body),
          contentType: "application/json"
        })
        // A claim an earlier version left behind (`in_flight`, lease still running) holds no outcome.
        const now = new Date(shifted.unsafeCurrentTimeMillis())
        yield* sql`INSERT INTO http.idempotency_keys
            (scope_hash, key, fingerprint, method, path, state, claim_token, lease_until, created_at, expires_at)
          VALUES (${target.scopeHash}, ${key}, ${target.fingerprint}, 'POST', '/probe/orders', 'in_flight', 'old',
                  ${new Date(now.getTime() + 60_000)}, ${now}, ${new Date(now.getTime() + 86_400_000)})`
        const r = yield* order(body, { key, token: "crash-token" })
        expect(r.status).toBe(201)
        expect(r.headers["idempotent-replayed"]).toBeUndefined()
        expect(executed(body.item)).toBe(1)
        expectReplayOf(yield* order(body, { key, token: "crash-token" }), r)
        expect(executed(body.item)).toBe(1)
      })
    )

    it.effect.skipIf(!usingRealPostgres)(
      "another process running the key: 409 while its transaction lives, executed at once when it dies (PostgreSQL)",
      () =>
        Effect.gen(function* () {
          const config = yield* AppConfig
          const url = Option.map(config.databaseUrl, Redacted.value).pipe(Option.getOrThrow)
          const body = { item: unique("other-process") }
          const key = unique("key")
          const target = idempotencyTarget({
            requester: requesterKey(
              HttpServerRequest.fromWeb(
                new Request("http://localhost/probe/orders", {
                  method: "POST",
                  headers: { authorization: "Bearer other-token" }
                })
              ),
              0
            ),
            key,
            method: "POST",
            path: "/probe/orders",
            body: JSON.stringify(body),
            contentType: "application/json"
          })
          // The other process: its request's transaction holds the key's lock.
          const other = new pg.Client({ connectionString: url })
          yield* Effect.promise(() => other.connect())
          other.on("error", () => {})
          yield* Effect.promise(() => other.query("BEGIN"))
          yield* Effect.promise(() =>
            other.query("SELECT pg_advisory_xact_lock($1::bigint)", [idempotencyLockKey(target)])
          )
          expectError(
            yield* order(body, { key, token: "other-token" }),
            409,
            "idempotency_request_in_progress"
          )
          expect(executed(body.item)).toBe(0)
          // It dies (its connection goes, uncommitted): nothing happened, the key runs at once.
          yield* Effect.promise(async () => {
            const stream = (other as unknown as { connection: { stream: { destroy: () => void } } })
              .connection.stream
            stream.destroy()
            await new Promise((resolve) => setTimeout(resolve, 50))
          })
          // (The server notices the closed connection within moments: no lease to wait out.)
          let r = yield* order(body, { key, token: "other-token" })
          for (let i = 0; i < 50 && r.status === 409; i++) {
            yield* Effect.sleep("20 millis")
            r = yield* order(body, { key, token: "other-token" })
          }
          expect(r.status).toBe(201)
          expect(executed(body.item)).toBe(1)
        })
    )

    it.effect("after 24 h the key is free again, and the purge deletes expired keys", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const item = unique("expiry")
        const key = unique("key")
        expect((yield* order({ item }, { key })).status).toBe(201)
        yield* advance("23 hours")
        expect((yield* order({ item }, { key })).headers["idempotent-replayed"]).toBe("true")
        expectError(yield* order({ item: `${item}-2` }, { key }), 422, "idempotency_key_reused")
        yield* advance("1 hour")
        // Expired but not purged yet: reusable at once, by any request.
        const again = yield* order({ item: `${item}-2` }, { key })
        expect(again.status).toBe(201)
        expect(again.headers["idempotent-replayed"]).toBeUndefined()
        expect(executed(`${item}-2`)).toBe(1)

        yield* advance("25 hours")
        const now = new Date(shifted.unsafeCurrentTimeMillis())
        const countExpired = Effect.map(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM http.idempotency_keys WHERE expires_at <= ${now}`,
          (rows) => rows[0]?.n ?? -1
        )
        expect(yield* countExpired).toBeGreaterThan(1)
        // The processor (batches of one here) deletes them all in its first pass.
        const purger = yield* Effect.fork(
          idempotencyPurgeProcessor({ batchSize: 1, interval: "1 hour" }).run.pipe(Effect.withClock(shifted))
        )
        yield* countExpired.pipe(
          Effect.repeat({ until: (n) => n === 0, schedule: Schedule.spaced("20 millis") }),
          Effect.timeout("10 seconds")
        )
        yield* Fiber.interrupt(purger)
        expect(yield* countExpired).toBe(0)
        expect(yield* purgeExpiredIdempotencyKeys().pipe(Effect.withClock(shifted))).toBe(0)
        expect(processors.map((p) => p.name)).toContain("http.idempotency-purge")
      })
    )
  })
})
