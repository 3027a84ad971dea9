/**
 * Rate limiting: the token-bucket `RateLimiter` under TestClock, and the HTTP middleware over a real
 * socket with the service's route table (`/auth/*` per client IP, `/v1/*` per credential) from
 * configuration, time moved by a shifted Clock the server runs on.
 */
import { request } from "node:http"
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpClient,
  HttpClientRequest,
  HttpServer,
  HttpServerResponse
} from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Layer, Schema, TestClock } from "effect"
import { AppConfig, makeAppConfig, type RateLimitSettings } from "../../src/config.js"
import { BadRequest, InternalError, PayloadTooLarge, UnsupportedMediaType } from "../../src/http/errors.js"
import { fastRouteMatcher } from "../../src/http/FastRoutes.js"
import { apiMiddleware } from "../../src/http/middleware.js"
import {
  makeRateLimiter,
  RateLimiter,
  RateLimiterLive,
  rateLimitMiddleware,
  rateLimitPolicy
} from "../../src/http/RateLimit.js"
import { guardedFastRoutes } from "../../src/http/Server.js"
import { makeShiftedClock } from "../support/clock.js"

describe("RateLimiter (token bucket, TestClock)", () => {
  const five = rateLimitPolicy("five-per-minute", { limit: 5, window: "1 minute" })

  it.effect("N requests pass, the next is refused with Retry-After, and refused ones take nothing", () =>
    Effect.gen(function* () {
      const limiter = yield* makeRateLimiter()
      for (let i = 0; i < 5; i++) {
        const d = yield* limiter.consume(five, "k")
        expect(d).toMatchObject({ allowed: true, limit: 5, remaining: 4 - i, retryAfterSeconds: 0 })
      }
      const refused = yield* limiter.consume(five, "k")
      expect(refused).toMatchObject({ allowed: false, limit: 5, remaining: 0, retryAfterSeconds: 12 })
      expect(refused.resetSeconds).toBe(60)
      yield* TestClock.adjust("11 seconds")
      expect((yield* limiter.consume(five, "k")).allowed).toBe(false)
      yield* TestClock.adjust("1 second")
      // 12 s = one token back, although two requests were refused meanwhile.
      expect(yield* limiter.consume(five, "k")).toMatchObject({ allowed: true, remaining: 0 })
      expect((yield* limiter.consume(five, "k")).retryAfterSeconds).toBe(12)
    })
  )

  it.effect("buckets refill with time up to their capacity", () =>
    Effect.gen(function* () {
      const limiter = yield* makeRateLimiter()
      for (let i = 0; i < 5; i++) yield* limiter.consume(five, "k")
      yield* TestClock.adjust("30 seconds")
      expect(yield* limiter.peek(five, "k")).toMatchObject({ allowed: true, remaining: 2, resetSeconds: 30 })
      yield* TestClock.adjust("1 hour")
      expect(yield* limiter.consume(five, "k")).toMatchObject({
        allowed: true,
        remaining: 4,
        resetSeconds: 12
      })
    })
  )

  it.effect("keys and policies are independent", () =>
    Effect.gen(function* () {
      const limiter = yield* makeRateLimiter()
      const other = rateLimitPolicy("other", { limit: 1, window: "1 minute" })
      for (let i = 0; i < 5; i++) yield* limiter.consume(five, "a")
      expect((yield* limiter.consume(five, "a")).allowed).toBe(false)
      expect((yield* limiter.consume(five, "b")).allowed).toBe(true)
      expect((yield* limiter.consume(other, "a")).allowed).toBe(true)
      expect((yield* limiter.consume(other, "a")).allowed).toBe(false)
    })
  )

  it.effect("cost, burst, peek and reset", () =>
    Effect.gen(function* () {
      const limiter = yield* makeRateLimiter()
      const api = rateLimitPolicy("api", { limit: 2, window: "1 second", burst: 4 })
      expect(yield* limiter.consume(api, "k", 3)).toMatchObject({ allowed: true, limit: 4, remaining: 1 })
      expect(yield* limiter.consume(api, "k", 2)).toMatchObject({
        allowed: false,
        remaining: 1,
        retryAfterSeconds: 1
      })
      expect((yield* limiter.consume(api, "k", 5)).allowed).toBe(false)
      expect(yield* limiter.peek(api, "k")).toMatchObject({ allowed: true, remaining: 1 })
      expect(yield* limiter.peek(api, "k")).toMatchObject({ allowed: true, remaining: 1 })
      yield* limiter.consume(api, "k")
      expect((yield* limiter.peek(api, "k")).allowed).toBe(false)
      yield* limiter.reset(api, "k")
      expect(yield* limiter.peek(api, "k")).toMatchObject({ allowed: true, remaining: 4 })
      // Login-failure style: 10 per 15 minutes.
      const failures = rateLimitPolicy("login-failures", { limit: 10, window: "15 minutes" })
      for (let i = 0; i < 10; i++) yield* limiter.consume(failures, "usr_1")
      expect((yield* limiter.peek(failures, "usr_1")).allowed).toBe(false)
      expect((yield* limiter.consume(failures, "usr_1")).retryAfterSeconds).toBe(90)
    })
  )

  it.effect("memory is bounded: past the bound the least recently used bucket is dropped", () =>
    Effect.gen(function* () {
      const limiter = yield* makeRateLimiter({ maxBucketsPerPolicy: 3 })
      const one = rateLimitPolicy("one", { limit: 1, window: "1 hour" })
      for (const key of ["a", "b", "c"]) expect((yield* limiter.consume(one, key)).allowed).toBe(true)
      expect((yield* limiter.consume(one, "a")).allowed).toBe(false) // a is now the most recent
      expect((yield* limiter.consume(one, "d")).allowed).toBe(true) // b goes
      expect((yield* limiter.consume(one, "a")).allowed).toBe(false)
      expect((yield* limiter.consume(one, "c")).allowed).toBe(false)
      expect((yield* limiter.consume(one, "b")).allowed).toBe(true) // forgotten: a fresh bucket
    })
  )

  it("rejects nonsensical policies", () => {
    expect(() => rateLimitPolicy("x", { limit: 0, window: "1 minute" })).toThrow(RangeError)
    expect(() => rateLimitPolicy("x", { limit: 1, window: 0 })).toThrow(RangeError)
  })
})

// --- Over HTTP -------------------------------------------------------------------------------------

const { clock: shifted, advance } = makeShiftedClock()

class Probe extends HttpApiGroup.make("probe", { topLevel: true })
  .add(HttpApiEndpoint.post("login", "/auth/login").addSuccess(Schema.Struct({ ok: Schema.Boolean })))
  .add(HttpApiEndpoint.get("things", "/v1/things").addSuccess(Schema.Struct({ ok: Schema.Boolean })))
  .add(HttpApiEndpoint.get("free", "/probe/free").addSuccess(Schema.Struct({ ok: Schema.Boolean })))
  .add(
    HttpApiEndpoint.get("processorEvents", "/v1/processor-events/probe").addSuccess(
      Schema.Struct({ ok: Schema.Boolean })
    )
  ) {}
class ProbeApi extends HttpApi.make("probe")
  .add(Probe)
  .addError(BadRequest)
  .addError(PayloadTooLarge)
  .addError(UnsupportedMediaType)
  .addError(InternalError) {}

const ok = () => Effect.succeed({ ok: true })
const ProbeHandlers = HttpApiBuilder.group(ProbeApi, "probe", (h) =>
  h.handle("login", ok).handle("things", ok).handle("free", ok).handle("processorEvents", ok)
)

/** A fast route (answered by apiMiddleware before the router), guarded as the server guards them. */
const fast = guardedFastRoutes(
  fastRouteMatcher(
    [
      {
        method: "GET",
        path: "/v1/fast/:id",
        answer: (_request: unknown, id: string) => Effect.succeed(HttpServerResponse.unsafeJson({ id }))
      }
    ],
    new Set()
  )
)

const server = (rateLimit: RateLimitSettings) =>
  HttpApiBuilder.serve((app) =>
    apiMiddleware({ accessLog: false, ...(fast === undefined ? {} : { fast }) })(rateLimitMiddleware()(app))
  ).pipe(
    Layer.provide(HttpApiBuilder.api(ProbeApi).pipe(Layer.provide(ProbeHandlers))),
    Layer.provideMerge(NodeHttpServer.layerTest),
    Layer.provideMerge(RateLimiterLive),
    Layer.provideMerge(Layer.succeed(AppConfig, makeAppConfig({ rateLimit, trustProxyHops: 1 }))),
    Layer.provide(Layer.setClock(shifted))
  )

interface Answer {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly text: string
}

const send = (
  request: HttpClientRequest.HttpClientRequest,
  options: { readonly ip?: string; readonly token?: string } = {}
) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    let r = request
    if (options.ip) r = HttpClientRequest.setHeader(r, "x-forwarded-for", `203.0.113.9, ${options.ip}`)
    if (options.token) r = HttpClientRequest.bearerToken(r, options.token)
    const res = yield* client.execute(r)
    const text = yield* res.text
    expect(res.status).toBeLessThan(500)
    return { status: res.status, headers: res.headers, text } satisfies Answer
  })

const login = (ip: string, token?: string) =>
  send(HttpClientRequest.post("/auth/login"), { ip, ...(token ? { token } : {}) })
const things = (token: string | undefined, ip = "198.51.100.1") =>
  send(HttpClientRequest.get("/v1/things"), { ip, ...(token ? { token } : {}) })

const expectLimited = (r: Answer, retryAfter: number) => {
  expect(r.status).toBe(429)
  const body = JSON.parse(r.text) as {
    error: { type: string; code: string; message: string; requestId: string }
  }
  expect(body.error).toMatchObject({ type: "rate_limit_error", code: "rate_limited" })
  expect(body.error.requestId).toMatch(/^req_/)
  expect(r.headers["request-id"]).toBe(body.error.requestId)
  expect(r.headers["content-type"]).toMatch(/application\/json/)
  expect(r.headers["retry-after"]).toBe(String(retryAfter))
  expect(r.headers["ratelimit-remaining"]).toBe("0")
}

describe("rate limits over HTTP", () => {
  layer(server({ enabled: true, authPerMinute: 3, apiPerSecond: 1, apiBurst: 2 }), {
    excludeTestServices: true,
    timeout: 30_000
  })("enabled", (it) => {
    it.effect("/auth/* per client IP: headers, then 429 with Retry-After and the error body", () =>
      Effect.gen(function* () {
        for (let i = 0; i < 3; i++) {
          const r = yield* login("192.0.2.1")
          expect(r.status).toBe(200)
          expect(r.headers["ratelimit-limit"]).toBe("3")
          expect(r.headers["ratelimit-remaining"]).toBe(String(2 - i))
          expect(Number(r.headers["ratelimit-reset"])).toBeGreaterThan(0)
          expect(r.headers["request-id"]).toMatch(/^req_/)
        }
        expectLimited(yield* login("192.0.2.1"), 20)
        // Another credential from the same address does not help on /auth.
        expectLimited(yield* login("192.0.2.1", "someone-else"), 20)
        // Another address has its own bucket.
        expect((yield* login("192.0.2.2")).status).toBe(200)
        // Unlimited routes carry no RateLimit headers.
        const free = yield* send(HttpClientRequest.get("/probe/free"), { ip: "192.0.2.1" })
        expect(free.status).toBe(200)
        expect(free.headers["ratelimit-limit"]).toBeUndefined()
      })
    )

    it.effect("/v1/* per credential (token bucket with burst)", () =>
      Effect.gen(function* () {
        expect((yield* things("tok-a")).headers["ratelimit-limit"]).toBe("2")
        expect((yield* things("tok-a")).headers["ratelimit-remaining"]).toBe("0")
        expectLimited(yield* things("tok-a"), 1)
        // Same credential from another address: same bucket.
        expectLimited(yield* things("tok-a", "198.51.100.2"), 1)
        expect((yield* things("tok-b")).status).toBe(200)
        // Without a credential: per address.
        expect((yield* things(undefined, "198.51.100.3")).status).toBe(200)
        // Answers from the app (here a 404 under /v1) carry the headers too.
        const missing = yield* send(HttpClientRequest.get("/v1/nope"), { token: "tok-c" })
        expect(missing.status).toBe(404)
        expect(missing.headers["ratelimit-limit"]).toBe("2")
        expect(missing.headers["ratelimit-remaining"]).toBe("1")
      })
    )

    it.effect("processors' event deliveries under /v1 are not limited", () =>
      Effect.gen(function* () {
        for (let i = 0; i < 5; i++) {
          const r = yield* send(HttpClientRequest.get("/v1/processor-events/probe"), { ip: "198.51.100.9" })
          expect(r.status).toBe(200)
          expect(r.headers["ratelimit-limit"]).toBeUndefined()
        }
      })
    )

    it.effect("fast routes (answered before the router) are limited too, in the same bucket", () =>
      Effect.gen(function* () {
        const first = yield* send(HttpClientRequest.get("/v1/fast/a1"), { token: "tok-f" })
        expect(first.status).toBe(200)
        expect(JSON.parse(first.text)).toEqual({ id: "a1" })
        expect(first.headers["ratelimit-limit"]).toBe("2")
        expect(first.headers["ratelimit-remaining"]).toBe("1")
        expect(first.headers["request-id"]).toMatch(/^req_/)
        // The routed /v1 route of the same credential draws on the same bucket.
        expect((yield* things("tok-f")).headers["ratelimit-remaining"]).toBe("0")
        expectLimited(yield* send(HttpClientRequest.get("/v1/fast/a1"), { token: "tok-f" }), 1)
      })
    )

    it.effect("a rule applies however its route is spelled (case, slashes, escapes, absolute form)", () =>
      Effect.gen(function* () {
        const ip = "192.0.2.60"
        for (let i = 0; i < 3; i++) expect((yield* login(ip)).status).toBe(200)
        expectLimited(yield* login(ip), 20)
        for (const path of [
          "/AUTH/login",
          "//auth/login",
          "/%61uth/login",
          "/auth//login",
          "/auth/login;x"
        ]) {
          expectLimited(yield* send(HttpClientRequest.post(path), { ip }), 20)
        }
        // An absolute-form request target (`POST http://host/auth/login`) routes like its path.
        const address = (yield* HttpServer.HttpServer).address
        if (address._tag !== "TcpAddress") throw new Error("expected a TCP server")
        const status = yield* Effect.async<number>((resume) => {
          const req = request(
            {
              host: "127.0.0.1",
              port: address.port,
              method: "POST",
              path: "http://example.test/auth/login",
              headers: { "x-forwarded-for": `203.0.113.9, ${ip}` }
            },
            (res) => {
              res.resume()
              resume(Effect.succeed(res.statusCode ?? 0))
            }
          )
          req.on("error", (e) => resume(Effect.die(e)))
          req.end()
        })
        expect(status).toBe(429)
        // A malformed escape finds no route: a 404, not a 5xx.
        expect((yield* send(HttpClientRequest.post("/auth/login%"), { ip: "192.0.2.61" })).status).toBe(404)
        // Authenticated /auth routes (me, logout) are not in the per-address budget.
        for (const path of ["/auth/me", "/auth/logout"]) {
          const r = yield* send(HttpClientRequest.post(path), { ip })
          expect(r.headers["ratelimit-limit"], path).toBeUndefined()
          expect(r.status, path).not.toBe(429)
        }
      })
    )

    it.effect("buckets refill with time", () =>
      Effect.gen(function* () {
        for (let i = 0; i < 3; i++) yield* login("192.0.2.50")
        expectLimited(yield* login("192.0.2.50"), 20)
        yield* advance("20 seconds")
        const again = yield* login("192.0.2.50")
        expect(again.status).toBe(200)
        expect(again.headers["ratelimit-remaining"]).toBe("0")
        expectLimited(yield* login("192.0.2.50"), 20)
        yield* things("tok-refill")
        yield* things("tok-refill")
        expectLimited(yield* things("tok-refill"), 1)
        yield* advance("1 second")
        expect((yield* things("tok-refill")).status).toBe(200)
        yield* advance("1 minute")
        for (let i = 0; i < 3; i++) expect((yield* login("192.0.2.50")).status).toBe(200)
      })
    )

    it.effect("the limiter is a shared service other code can call", () =>
      Effect.gen(function* () {
        for (let i = 0; i < 3; i++) yield* login("192.0.2.77")
        const limiter = yield* RateLimiter
        const auth = rateLimitPolicy("http.auth", { limit: 3, window: "1 minute" })
        expect((yield* limiter.peek(auth, "ip:192.0.2.77")).allowed).toBe(false)
        yield* limiter.reset(auth, "ip:192.0.2.77")
        expect((yield* login("192.0.2.77")).status).toBe(200)
      })
    )
  })

  layer(server({ enabled: false, authPerMinute: 1, apiPerSecond: 1, apiBurst: 1 }), {
    excludeTestServices: true,
    timeout: 30_000
  })("disabled", (it) => {
    it.effect("RATE_LIMIT_ENABLED=false: no headers, never 429", () =>
      Effect.gen(function* () {
        for (let i = 0; i < 5; i++) {
          const r = yield* login("192.0.2.1")
          expect(r.status).toBe(200)
          expect(r.headers["ratelimit-limit"]).toBeUndefined()
          expect((yield* things("tok")).status).toBe(200)
        }
      })
    )
  })
})
