/**
 * The error model over a real socket: every failure — unknown routes, malformed or oversized
 * bodies, wrong content types, schema failures, auth failures, defects — answers the one documented
 * error body with a request id, and hostile input never produces a 5xx.
 */
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpClient,
  HttpClientRequest
} from "@effect/platform"
import { describe, layer } from "@effect/vitest"
import { Effect, Layer, Logger, Schema } from "effect"
import { expect } from "vitest"
import { Authentication, AuthenticationLive, NoRouteScopes, requireScope } from "../../src/http/Auth.js"
import {
  BadRequest,
  Conflict,
  Forbidden,
  InternalError,
  PayloadTooLarge,
  UnsupportedMediaType
} from "../../src/http/errors.js"
import { allowedMethods, apiMiddleware, MAX_BODY_BYTES, MAX_JSON_DEPTH } from "../../src/http/middleware.js"
import { NodeServerTest, rawRequest, TestCredentials, TestHttp } from "../support/http.js"

interface ErrorJson {
  readonly error: {
    readonly type: string
    readonly code: string
    readonly message: string
    readonly param?: string
    readonly requestId: string
  }
}

const send = (request: HttpClientRequest.HttpClientRequest) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const res = yield* client.execute(request)
    const text = yield* res.text
    return { status: res.status, headers: res.headers, text }
  })

const expectError = (
  r: { status: number; headers: Record<string, string>; text: string },
  status: number,
  code: string
) => {
  expect(r.status).toBe(status)
  const body = JSON.parse(r.text) as ErrorJson
  expect(body.error.code).toBe(code)
  expect(typeof body.error.message).toBe("string")
  expect(body.error.requestId).toMatch(/^req_/)
  expect(r.headers["request-id"]).toBe(body.error.requestId)
  expect(r.headers["content-type"]).toMatch(/application\/json/)
  return body
}

// A test-only API exercising what the service's endpoints will do.
class Open extends HttpApiGroup.make("open")
  .add(HttpApiEndpoint.get("boom", "/probe/boom"))
  .add(
    HttpApiEndpoint.post("echo", "/probe/echo")
      .setPayload(Schema.Struct({ name: Schema.String.pipe(Schema.minLength(1)), count: Schema.Int }))
      .addSuccess(Schema.Struct({ name: Schema.String, count: Schema.Int }))
      .addError(Conflict)
  ) {}
class Secure extends HttpApiGroup.make("secure")
  .add(
    HttpApiEndpoint.get("events", "/probe/events")
      .addSuccess(Schema.Struct({ ok: Schema.Boolean }))
      .addError(Forbidden)
  )
  .middleware(Authentication) {}
class ProbeApi extends HttpApi.make("probe")
  .add(Open)
  .add(Secure)
  .addError(BadRequest)
  .addError(PayloadTooLarge)
  .addError(UnsupportedMediaType)
  .addError(InternalError) {}

const ProbeHandlers = Layer.mergeAll(
  HttpApiBuilder.group(ProbeApi, "open", (h) =>
    h
      .handle("boom", () => Effect.die(new Error("secret internal detail: password=hunter2")))
      .handle("echo", ({ payload }) =>
        payload.name === "taken"
          ? Effect.fail(
              Conflict.of({ code: "resource_already_exists", message: "name is taken", param: "name" })
            )
          : Effect.succeed(payload)
      )
  ),
  HttpApiBuilder.group(ProbeApi, "secure", (h) =>
    h.handle("events", () => Effect.as(requireScope("read:events"), { ok: true }))
  ).pipe(Layer.provide(AuthenticationLive.pipe(Layer.provide([TestCredentials, NoRouteScopes]))))
)

/** Every line the probe server logs, with its level. */
const probeLogs: Array<{ readonly level: string; readonly message: string }> = []
const CaptureLogs = Logger.add(
  Logger.make(({ logLevel, message }) => {
    probeLogs.push({ level: logLevel.label, message: String(message) })
  })
)

const ProbeServer = HttpApiBuilder.serve(
  apiMiddleware({ accessLog: false, allow: allowedMethods(ProbeApi) })
).pipe(
  Layer.provide(HttpApiBuilder.api(ProbeApi).pipe(Layer.provide(ProbeHandlers))),
  Layer.provideMerge(NodeServerTest),
  Layer.provide(CaptureLogs)
)

const WHITESPACE_BODY = " \n\t\r\n "

/** Status line, headers (lower-cased names) and body of a raw HTTP/1.1 response. */
const parseRaw = (text: string) => {
  const end = text.indexOf("\r\n\r\n")
  const head = end === -1 ? text : text.slice(0, end)
  const [statusLine = "", ...lines] = head.split("\r\n")
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(":")
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  return { status: Number(statusLine.split(" ")[1]), headers, text: end === -1 ? "" : text.slice(end + 4) }
}

describe("error model", () => {
  layer(ProbeServer, { excludeTestServices: true })("probe api", (it) => {
    it.effect("a defect is a 500 internal_error that leaks nothing", () =>
      Effect.gen(function* () {
        const r = yield* send(HttpClientRequest.get("/probe/boom"))
        const body = expectError(r, 500, "internal_error")
        expect(body.error.type).toBe("api_error")
        expect(r.text).not.toContain("hunter2")
        expect(r.text).not.toContain("Error")
      })
    )

    it.effect("schema failures are 400 parameter_missing / parameter_invalid with the param", () =>
      Effect.gen(function* () {
        const missing = yield* send(
          HttpClientRequest.post("/probe/echo").pipe(HttpClientRequest.bodyUnsafeJson({ count: 1 }))
        )
        const m = expectError(missing, 400, "parameter_missing")
        expect(m.error.param).toBe("name")
        expect(m.error.type).toBe("invalid_request_error")
        const wrong = yield* send(
          HttpClientRequest.post("/probe/echo").pipe(
            HttpClientRequest.bodyUnsafeJson({ name: "a", count: "three" })
          )
        )
        expect(expectError(wrong, 400, "parameter_invalid").error.param).toBe("count")
        const empty = yield* send(HttpClientRequest.post("/probe/echo"))
        expect(empty.status).toBe(400)
      })
    )

    it.effect("typed domain errors keep their status, code and param", () =>
      Effect.gen(function* () {
        const r = yield* send(
          HttpClientRequest.post("/probe/echo").pipe(
            HttpClientRequest.bodyUnsafeJson({ name: "taken", count: 1 })
          )
        )
        expect(expectError(r, 409, "resource_already_exists").error.param).toBe("name")
        const ok = yield* send(
          HttpClientRequest.post("/probe/echo").pipe(
            HttpClientRequest.bodyUnsafeJson({ name: "x", count: 2, extra: true })
          )
        )
        expect(ok.status).toBe(200)
        expect(JSON.parse(ok.text)).toEqual({ name: "x", count: 2 })
        expect(ok.headers["request-id"]).toMatch(/^req_/)
      })
    )

    it.effect("a whitespace-only JSON body is a 400 invalid_json and logs no ERROR", () =>
      Effect.gen(function* () {
        probeLogs.length = 0
        const r = yield* send(
          HttpClientRequest.post("/probe/echo").pipe(
            HttpClientRequest.bodyText(WHITESPACE_BODY, "application/json")
          )
        )
        expectError(r, 400, "invalid_json")
        expect(probeLogs.filter((l) => l.level === "ERROR" || l.level === "FATAL")).toEqual([])
      })
    )

    it.effect("a request line over 16 KB, or one Node cannot parse, gets the error body", () =>
      Effect.gen(function* () {
        const long = parseRaw(
          (yield* rawRequest(`GET /probe/${"a".repeat(17 * 1024)} HTTP/1.1\r\nHost: x\r\n\r\n`)).text
        )
        expect(long.status).toBe(431)
        expect(long.headers["content-type"]).toMatch(/application\/json/)
        const body = JSON.parse(long.text) as ErrorJson
        expect(body.error).toMatchObject({ type: "invalid_request_error", code: "request_header_too_large" })
        expect(body.error.requestId).toMatch(/^req_/)
        expect(long.headers["request-id"]).toBe(body.error.requestId)
        const garbage = parseRaw((yield* rawRequest("NOT AN HTTP REQUEST\r\n\r\n")).text)
        expect(garbage.status).toBe(400)
        expect((JSON.parse(garbage.text) as ErrorJson).error.code).toBe("invalid_request")
      })
    )

    it.effect("a wrong method on a known path is a 405 with Allow", () =>
      Effect.gen(function* () {
        const r = yield* send(HttpClientRequest.get("/probe/echo"))
        expect(expectError(r, 405, "method_not_allowed").error.message).toContain("GET")
        expect(r.headers.allow).toBe("POST")
      })
    )

    it.effect("authentication and scopes", () =>
      Effect.gen(function* () {
        expect(
          expectError(yield* send(HttpClientRequest.get("/probe/events")), 401, "missing_credentials").error
            .type
        ).toBe("authentication_error")
        const basic = yield* send(
          HttpClientRequest.get("/probe/events").pipe(
            HttpClientRequest.setHeader("authorization", "Basic test-admin")
          )
        )
        expectError(basic, 401, "missing_credentials")
        const bad = yield* send(
          HttpClientRequest.get("/probe/events").pipe(HttpClientRequest.bearerToken("nope"))
        )
        expectError(bad, 401, "invalid_token")
        const nobody = yield* send(
          HttpClientRequest.get("/probe/events").pipe(HttpClientRequest.bearerToken("test-nobody"))
        )
        expect(expectError(nobody, 403, "insufficient_scope").error.type).toBe("permission_error")
        const reader = yield* send(
          HttpClientRequest.get("/probe/events").pipe(HttpClientRequest.bearerToken("test-reader"))
        )
        expect(reader.status).toBe(200)
      })
    )
  })
})

describe("the service", () => {
  layer(TestHttp, { excludeTestServices: true, timeout: 60_000 })("hostile input never gets a 5xx", (it) => {
    it.effect("unknown routes are 404 resource_missing", () =>
      Effect.gen(function* () {
        const r = yield* send(HttpClientRequest.get("/nope"))
        expect(expectError(r, 404, "resource_missing").error.message).toContain("/nope")
        expectError(yield* send(HttpClientRequest.del("/nope/deeper")), 404, "resource_missing")
      })
    )

    it.effect("a wrong method on an existing path is a 405 listing the path's methods in Allow", () =>
      Effect.gen(function* () {
        const del = yield* send(HttpClientRequest.del("/health"))
        expectError(del, 405, "method_not_allowed")
        expect(del.headers.allow).toBe("GET, HEAD")
        const get = yield* send(HttpClientRequest.get("/auth/register"))
        expectError(get, 405, "method_not_allowed")
        expect(get.headers.allow).toBe("POST")
        // Templates with parameters, the router's case and trailing-slash rules, raw routes.
        const user = yield* send(HttpClientRequest.post("/User/usr_x/"))
        expectError(user, 405, "method_not_allowed")
        expect(user.headers.allow).toBe("GET, HEAD, PUT, DELETE")
        expect((yield* send(HttpClientRequest.get("/rpc"))).headers.allow).toBe("POST")
        expect((yield* send(HttpClientRequest.del("/metrics"))).headers.allow).toBe("GET, HEAD")
        expect((yield* send(HttpClientRequest.head("/health"))).status).toBe(200)
      })
    )

    it.effect("a lone UTF-16 surrogate in any JSON string is a 400 naming the field", () =>
      Effect.gen(function* () {
        const cases: ReadonlyArray<readonly [string, string, string | undefined]> = [
          ["/auth/register", '{"email":"a@example.com","password":"\\ud800whatever1"}', "password"],
          ["/auth/register", '{"email":"a\\udc00@example.com","password":"whatever12"}', "email"],
          [
            "/auth/register",
            '{"email":"s@example.com","password":"whatever12","firstName":"Ada\\ud800","lastName":"L"}',
            "firstName"
          ],
          [
            "/auth/login",
            '{"email":"a@example.com","password":"whatever1","m":{"x":["ok","\\udfff"]}}',
            "m.x.1"
          ],
          ["/auth/login", '{"email":"a@example.com","password":"whatever1","\\ud83d":1}', undefined],
          ["/auth/login", '{"email":"a@example.com","password":"\\ude00\\ud83d"}', "password"]
        ]
        for (const [path, body, param] of cases) {
          const r = yield* send(
            HttpClientRequest.post(path).pipe(HttpClientRequest.bodyText(body, "application/json"))
          )
          expect(expectError(r, 400, "parameter_invalid").error.param, body).toBe(param)
        }
        // A surrogate pair (one character, escaped or not) is ordinary text.
        for (const password of ["\\ud83d\\ude00whatever", "\ud83d\ude00whatever"]) {
          const pair = yield* send(
            HttpClientRequest.post("/auth/login").pipe(
              HttpClientRequest.bodyText(
                `{"email":"a@example.com","password":"${password}"}`,
                "application/json"
              )
            )
          )
          expectError(pair, 401, "invalid_credentials")
        }
        // URLs cannot carry one: percent-decoding yields U+FFFD or no match, never a lone surrogate.
        for (const url of ["/user/%ED%A0%80", "/user?q=%ED%A0%80", "/user?tag=%ED%A0%80&sort=%ED%A0%80"]) {
          const r = yield* send(HttpClientRequest.get(url).pipe(HttpClientRequest.bearerToken("test-admin")))
          expect(r.status, `${url}: ${r.text}`).toBeLessThan(500)
        }
      })
    )

    it.effect("JSON bodies are application/json exactly: other +json types are a prompt 415", () =>
      Effect.gen(function* () {
        const body = '{"email":"a@example.com","password":"whatever1"}'
        for (const [method, path] of [
          ["POST", "/auth/register"],
          ["POST", "/auth/login"],
          ["PUT", "/user/usr_x"],
          ["POST", "/health"]
        ] as const) {
          for (const type of [
            "application/merge-patch+json",
            "application/vnd.api+json",
            "application/json-seq"
          ]) {
            const r = yield* send(
              HttpClientRequest.make(method)(path).pipe(
                HttpClientRequest.bearerToken("test-admin"),
                HttpClientRequest.bodyText(body, type)
              )
            ).pipe(
              Effect.timeoutFail({
                duration: "5 seconds",
                onTimeout: () => `${method} ${path} ${type} hangs`
              })
            )
            expectError(r, 415, "unsupported_media_type")
          }
        }
        const charset = yield* send(
          HttpClientRequest.post("/auth/login").pipe(
            HttpClientRequest.bodyText(body, "Application/JSON; charset=utf-8")
          )
        )
        expectError(charset, 401, "invalid_credentials")
        // Without a body a Content-Type is irrelevant.
        const empty = yield* send(
          HttpClientRequest.post("/auth/logout").pipe(
            HttpClientRequest.setHeader("content-type", "application/merge-patch+json")
          )
        ).pipe(
          Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => "an empty merge-patch body hangs" })
        )
        expect(empty.status).toBeLessThan(500)
      })
    )

    it.effect("a whitespace-only JSON body is a 400 invalid_json", () =>
      Effect.gen(function* () {
        for (const path of ["/auth/register", "/auth/login", "/health"]) {
          const r = yield* send(
            HttpClientRequest.post(path).pipe(HttpClientRequest.bodyText(WHITESPACE_BODY, "application/json"))
          )
          expectError(r, 400, "invalid_json")
        }
      })
    )

    it.effect("malformed JSON, wrong content types and oversized bodies", () =>
      Effect.gen(function* () {
        const malformed = yield* send(
          HttpClientRequest.post("/health").pipe(HttpClientRequest.bodyText("{bad json", "application/json"))
        )
        expectError(malformed, 400, "invalid_json")
        const text = yield* send(
          HttpClientRequest.post("/health").pipe(HttpClientRequest.bodyText("hello", "text/plain"))
        )
        expectError(text, 415, "unsupported_media_type")
        const big = "x".repeat(MAX_BODY_BYTES + 10)
        const tooBig = yield* send(
          HttpClientRequest.post("/health").pipe(
            HttpClientRequest.bodyText(JSON.stringify({ big }), "application/json")
          )
        )
        expectError(tooBig, 413, "payload_too_large")
      })
    )

    it.effect("JSON nested deeper than MAX_JSON_DEPTH is a 400; at the limit it is read", () =>
      Effect.gen(function* () {
        const nested = (depth: number) =>
          `{"email":"a@example.com","password":"whatever1","m":${"[".repeat(depth - 1)}"a\\"]{["${"]".repeat(depth - 1)}}`
        const deep = yield* send(
          HttpClientRequest.post("/auth/login").pipe(
            HttpClientRequest.bodyText(nested(200_000), "application/json")
          )
        )
        expect(expectError(deep, 400, "invalid_json").error.message).toContain(`${MAX_JSON_DEPTH} levels`)
        // Brackets inside strings (and escaped quotes) do not count.
        const atLimit = yield* send(
          HttpClientRequest.post("/auth/login").pipe(
            HttpClientRequest.bodyText(nested(MAX_JSON_DEPTH), "application/json")
          )
        )
        expect(atLimit.status, atLimit.text).toBe(401)
      })
    )

    it.effect("a NUL character (which PostgreSQL text cannot hold) is a 400 wherever it is sent", () =>
      Effect.gen(function* () {
        for (const body of [
          '{"email":"a\\u0000b@example.com","password":"whatever1"}',
          '{"email":"a@example.com","password":"whatever1","a\\u0000":1}',
          '{"email":"a@example.com","password":"whatever1","nested":["x","\\u0000"]}'
        ]) {
          const r = yield* send(
            HttpClientRequest.post("/auth/login").pipe(HttpClientRequest.bodyText(body, "application/json"))
          )
          expectError(r, 400, "parameter_invalid")
        }
        const form = yield* send(
          HttpClientRequest.post("/auth/token").pipe(
            HttpClientRequest.bodyText(
              "grant_type=client_credentials&client_id=a%00",
              "application/x-www-form-urlencoded"
            )
          )
        )
        expectError(form, 400, "parameter_invalid")
        const query = expectError(
          yield* send(HttpClientRequest.get("/health?a=1&x=b%00")),
          400,
          "parameter_invalid"
        )
        expect(query.error.param).toBe("x")
        const inName = expectError(
          yield* send(HttpClientRequest.get("/health?x%00=1")),
          400,
          "parameter_invalid"
        )
        expect(inName.error.param).toBeUndefined()
        // An escaped backslash followed by "u0000" is ordinary text.
        const literal = yield* send(
          HttpClientRequest.post("/auth/login").pipe(
            HttpClientRequest.bodyText(
              '{"email":"a\\\\u0000@example.com","password":"whatever1"}',
              "application/json"
            )
          )
        )
        expectError(literal, 401, "invalid_credentials")
      })
    )

    it.effect("odd paths, headers and methods", () =>
      Effect.gen(function* () {
        const requests = [
          HttpClientRequest.get("/%E0%A4%A"),
          HttpClientRequest.get("/health/../../etc/passwd"),
          HttpClientRequest.get(`/${"a".repeat(4000)}`),
          HttpClientRequest.get("/health?x=%ZZ&&&=="),
          HttpClientRequest.get("/health").pipe(HttpClientRequest.setHeader("x-weird", "\u00ff".repeat(100))),
          HttpClientRequest.get("/health").pipe(HttpClientRequest.setHeader("authorization", "Bearer")),
          HttpClientRequest.patch("/ready").pipe(HttpClientRequest.bodyUnsafeJson([1, 2, 3])),
          HttpClientRequest.put("/docs").pipe(HttpClientRequest.bodyUnsafeJson(null)),
          HttpClientRequest.post("/openapi.json").pipe(
            HttpClientRequest.bodyText("a=b", "application/x-www-form-urlencoded")
          ),
          HttpClientRequest.options("/health"),
          HttpClientRequest.head("/nope")
        ]
        for (const request of requests) {
          const r = yield* send(request)
          expect(r.status, `${request.method} ${request.url}`).toBeLessThan(500)
          expect(r.headers["request-id"]).toMatch(/^req_/)
        }
      })
    )

    it.effect("health, readiness, OpenAPI and docs", () =>
      Effect.gen(function* () {
        const health = yield* send(HttpClientRequest.get("/health"))
        expect(JSON.parse(health.text)).toEqual({ status: "ok" })
        const ready = yield* send(HttpClientRequest.get("/ready"))
        expect(ready.status).toBe(200)
        expect(JSON.parse(ready.text)).toMatchObject({
          status: "ready",
          checks: { database: { ok: true }, migrations: { ok: true } }
        })
        const spec = JSON.parse((yield* send(HttpClientRequest.get("/openapi.json"))).text) as {
          openapi: string
          paths: object
        }
        expect(spec.openapi).toBe("3.1.0")
        expect(Object.keys(spec.paths)).toEqual(expect.arrayContaining(["/health", "/ready"]))
        const docs = yield* send(HttpClientRequest.get("/docs"))
        expect(docs.status).toBe(200)
        expect(docs.headers["content-type"]).toMatch(/text\/html/)
        // The API reference with its document and Scalar's script inline (loaded on this first
        // request, not at start), not fetched from a CDN: it works offline.
        expect(docs.text).toContain('<script id="api-reference" type="application/json">')
        expect(docs.text).toContain('"openapi":"3.1.0"')
        expect(docs.text).not.toMatch(/<script src="[^"]*@scalar\/api-reference/)
        expect(docs.text.length).toBeGreaterThan(1_000_000)
        expect((yield* send(HttpClientRequest.get("/docs"))).text).toBe(docs.text)
      })
    )

    it.effect("every response has a distinct request id", () =>
      Effect.gen(function* () {
        const ids = new Set<string>()
        for (let i = 0; i < 20; i++)
          ids.add((yield* send(HttpClientRequest.get("/health"))).headers["request-id"] ?? "")
        expect(ids.size).toBe(20)
      })
    )
  })
})
