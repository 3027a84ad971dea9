/**
 * Observability of one request: the tracing layer (with an in-memory exporter injected as its span
 * processor) records the HTTP server span, the command (`CommandRunner.execute`), the append
 * (`EventStore.append`) and their SQL statements as one trace of nested spans; and the JSON logs of
 * the request carry its request id and trace id.
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
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Effect, Layer, Logger, Schema } from "effect"
import { expect } from "vitest"
import { PersistenceLive } from "../../src/eventstore/layers.js"
import { apiMiddleware } from "../../src/http/middleware.js"
import { CommandRunner, CommandRunnerLive } from "../../src/kernel/CommandRunner.js"
import { ProjectionsLive } from "../../src/kernel/Projection.js"
import { otlpTracesUrl, tracingLayer } from "../../src/observability/Tracing.js"
import { eventually } from "../processors/helpers.js"
import { testConfig } from "../support/database.js"
import { AccountDecider, openAccount } from "../support/sample.js"

class Accounts extends HttpApiGroup.make("accounts").add(
  HttpApiEndpoint.post("open", "/probe/accounts/:id")
    .setPath(Schema.Struct({ id: Schema.String }))
    .addSuccess(Schema.Struct({ version: Schema.Number }))
) {}
class ProbeApi extends HttpApi.make("probe").add(Accounts) {}

const AccountsLive = HttpApiBuilder.group(ProbeApi, "accounts", (h) =>
  h.handle("open", ({ path }) =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      yield* Effect.logInfo("opening an account")
      const result = yield* runner
        .execute(AccountDecider, `account-${path.id}`, openAccount(path.id, "Ada", "EUR"))
        .pipe(Effect.orDie)
      return { version: result.version }
    })
  )
)

const exporter = new InMemorySpanExporter()
const lines: Array<string> = []

/** JSON log lines (the production format), captured instead of printed. */
const CaptureLogs = Logger.replace(
  Logger.defaultLogger,
  Logger.map(Logger.jsonLogger, (line) => {
    lines.push(line)
  })
)

const Server = HttpApiBuilder.serve(apiMiddleware()).pipe(
  Layer.provide(HttpApiBuilder.api(ProbeApi).pipe(Layer.provide(AccountsLive))),
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(CommandRunnerLive.pipe(Layer.provideMerge(ProjectionsLive([])))),
  Layer.provideMerge(PersistenceLive.pipe(Layer.provideMerge(testConfig()))),
  Layer.provide(CaptureLogs),
  Layer.provide(
    tracingLayer({ serviceName: "commerce-platform-test", spanProcessor: new SimpleSpanProcessor(exporter) })
  )
)

interface JsonLog {
  readonly message: unknown
  readonly logLevel: string
  readonly annotations: Record<string, unknown>
}

const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId

/** True when `ancestor` is on the parent chain of `span`. */
const descends = (spans: ReadonlyArray<ReadableSpan>, span: ReadableSpan, ancestor: ReadableSpan) => {
  const byId = new Map(spans.map((s) => [s.spanContext().spanId, s]))
  let current: ReadableSpan | undefined = span
  while (current) {
    const parent = parentOf(current)
    if (parent === ancestor.spanContext().spanId) return true
    current = parent === undefined ? undefined : byId.get(parent)
  }
  return false
}

layer(Server, { excludeTestServices: true, timeout: 60_000 })("tracing and logs", (it) => {
  it.effect("one request: server span → command → append → SQL, one trace; logs carry the ids", () =>
    Effect.gen(function* () {
      exporter.reset()
      lines.length = 0
      const client = yield* HttpClient.HttpClient
      const res = yield* client.execute(HttpClientRequest.post("/probe/accounts/a1"))
      expect(res.status).toBe(200)
      const requestId = res.headers["request-id"]
      expect(requestId).toMatch(/^req_/)

      const serverSpan = () =>
        exporter.getFinishedSpans().find((s) => s.name === "http.server POST" && s.kind === 1)
      yield* eventually(Effect.sync(() => serverSpan() !== undefined))
      const spans = exporter.getFinishedSpans()
      const server = serverSpan() as ReadableSpan
      const traceId = server.spanContext().traceId
      expect(server.attributes["url.path"]).toBe("/probe/accounts/a1")
      expect(server.attributes["http.response.status_code"]).toBe(200)
      expect(server.resource.attributes["service.name"]).toBe("commerce-platform-test")

      const command = spans.find((s) => s.name === "CommandRunner.execute")
      const append = spans.find((s) => s.name === "EventStore.append")
      expect(command, "CommandRunner.execute span").toBeDefined()
      expect(append, "EventStore.append span").toBeDefined()
      if (!command || !append) return
      expect(command.attributes["stream.id"]).toBe("account-a1")
      expect(descends(spans, command, server)).toBe(true)
      expect(descends(spans, append, command)).toBe(true)

      const sqlUnderAppend = spans.filter((s) => s.name === "sql.execute" && descends(spans, s, append))
      expect(sqlUnderAppend.length).toBeGreaterThanOrEqual(1)
      const statements = sqlUnderAppend.map((s) => String(s.attributes["db.query.text"] ?? ""))
      expect(statements.some((q) => /event_store\.append_(events|command)\(/.test(q))).toBe(true)
      const sqlUnderCommand = spans.filter((s) => s.name === "sql.execute" && descends(spans, s, command))
      expect(sqlUnderCommand.length).toBeGreaterThan(sqlUnderAppend.length)
      for (const s of [command, append, ...sqlUnderCommand]) expect(s.spanContext().traceId).toBe(traceId)

      // JSON logs: the handler's line and the access line both carry request and trace ids.
      const logs = lines.map((l) => JSON.parse(l) as JsonLog)
      const handler = logs.find((l) => l.message === "opening an account")
      const access = logs.find((l) => l.message === "http request" && l.annotations.requestId === requestId)
      expect(handler?.annotations).toMatchObject({ requestId, traceId, spanId: server.spanContext().spanId })
      expect(access?.annotations).toMatchObject({
        requestId,
        traceId,
        method: "POST",
        path: "/probe/accounts/a1",
        status: "200"
      })
    })
  )

  it.effect("separate requests are separate traces", () =>
    Effect.gen(function* () {
      exporter.reset()
      const client = yield* HttpClient.HttpClient
      yield* client.execute(HttpClientRequest.post("/probe/accounts/b1"))
      yield* client.execute(HttpClientRequest.post("/probe/accounts/b2"))
      const servers = () => exporter.getFinishedSpans().filter((s) => s.name === "http.server POST")
      yield* eventually(Effect.sync(() => servers().length === 2))
      const [a, b] = servers()
      expect(a?.spanContext().traceId).not.toBe(b?.spanContext().traceId)
    })
  )

  it("OTEL_EXPORTER_OTLP_ENDPOINT is a base URL", () => {
    expect(otlpTracesUrl("http://collector:4318")).toBe("http://collector:4318/v1/traces")
    expect(otlpTracesUrl("http://collector:4318/")).toBe("http://collector:4318/v1/traces")
    expect(otlpTracesUrl("http://collector:4318/v1/traces")).toBe("http://collector:4318/v1/traces")
  })
})
