/**
 * The access-log line and the request's log annotations (issue #17 keeps them while the middleware
 * got cheaper): with the level at info, one `http request` line per request carrying the response's
 * `Request-Id`, and a handler's own lines carry it too; with the level above info, no access line
 * (and the middleware does not build one); request ids stay unique and opaque.
 */
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpClient,
  HttpClientRequest
} from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { layer } from "@effect/vitest"
import { Effect, Layer, Logger, LogLevel, Schema } from "effect"
import { expect } from "vitest"
import { apiMiddleware, newRequestId } from "../../src/http/middleware.js"

class Probes extends HttpApiGroup.make("probes").add(
  HttpApiEndpoint.get("hello", "/probe/hello").addSuccess(Schema.Struct({ ok: Schema.Boolean }))
) {}
class ProbeApi extends HttpApi.make("probe").add(Probes) {}

const ProbesLive = HttpApiBuilder.group(ProbeApi, "probes", (h) =>
  h.handle("hello", () => Effect.as(Effect.logWarning("handler says hello"), { ok: true }))
)

interface JsonLog {
  readonly message: unknown
  readonly annotations: Record<string, unknown>
}

const server = (level: LogLevel.LogLevel, lines: Array<JsonLog>) =>
  HttpApiBuilder.serve(apiMiddleware()).pipe(
    Layer.provide(HttpApiBuilder.api(ProbeApi).pipe(Layer.provide(ProbesLive))),
    Layer.provideMerge(NodeHttpServer.layerTest),
    Layer.provide(
      Logger.replace(
        Logger.defaultLogger,
        Logger.map(Logger.jsonLogger, (line) => {
          lines.push(JSON.parse(line) as JsonLog)
        })
      )
    ),
    Layer.provide(Logger.minimumLogLevel(level))
  )

const hello = Effect.gen(function* () {
  const client = yield* HttpClient.HttpClient
  const response = yield* client.execute(HttpClientRequest.get("/probe/hello"))
  expect(response.status).toBe(200)
  const requestId = response.headers["request-id"]
  expect(requestId).toMatch(/^req_[A-Za-z0-9_-]{16}$/)
  return requestId
})

const infoLines: Array<JsonLog> = []
layer(server(LogLevel.Info, infoLines))("access log at info", (it) => {
  it.effect("one line per request with its request id; the handler's lines carry it too", () =>
    Effect.gen(function* () {
      const first = yield* hello
      const second = yield* hello
      expect(first).not.toBe(second)
      for (const requestId of [first, second]) {
        const mine = infoLines.filter((l) => l.annotations.requestId === requestId)
        expect(mine.map((l) => l.message)).toEqual(["handler says hello", "http request"])
        expect(mine[1]?.annotations).toMatchObject({
          requestId,
          method: "GET",
          path: "/probe/hello",
          status: "200"
        })
        expect(mine[1]?.annotations.durationMs).toMatch(/^\d+\.\d$/)
      }
    })
  )
})

layer(server(LogLevel.Info, infoLines))("access log of the liveness probe", (it) => {
  it.effect("GET /health, answered by the middleware itself, has its line and request id too", () =>
    Effect.gen(function* () {
      const client = yield* HttpClient.HttpClient
      const response = yield* client.execute(HttpClientRequest.get("/health"))
      expect(response.status).toBe(200)
      const requestId = response.headers["request-id"]
      const mine = infoLines.filter((l) => l.annotations.requestId === requestId)
      expect(mine.map((l) => l.message)).toEqual(["http request"])
      expect(mine[0]?.annotations).toMatchObject({ method: "GET", path: "/health", status: "200" })
    })
  )
})

const warningLines: Array<JsonLog> = []
layer(server(LogLevel.Warning, warningLines))("access log above info", (it) => {
  it.effect("no access line; the handler's warning still carries the request id", () =>
    Effect.gen(function* () {
      const requestId = yield* hello
      expect(warningLines.map((l) => l.message)).toEqual(["handler says hello"])
      expect(warningLines[0]?.annotations.requestId).toBe(requestId)
    })
  )
})

layer(Layer.empty)("request ids", (it) => {
  it.effect("are unique across many requests", () =>
    Effect.sync(() => {
      const ids = new Set(Array.from({ length: 5000 }, newRequestId))
      expect(ids.size).toBe(5000)
      for (const id of ids) expect(id).toMatch(/^req_[A-Za-z0-9_-]{16}$/)
    })
  )
})
