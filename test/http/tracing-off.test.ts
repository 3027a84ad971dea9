/**
 * Without an OTLP endpoint nothing is traced (issue #17): the platform's HTTP server tracer does not
 * run (no span per request, no URL parsing or header attributes) and Effect spans are the no-op span.
 * With an endpoint, test/http/tracing.test.ts shows the whole trace.
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
import { Context, Effect, Layer, Option, Schema, Tracer } from "effect"
import { expect } from "vitest"
import { AppConfig, makeAppConfig } from "../../src/config.js"
import { apiMiddleware } from "../../src/http/middleware.js"
import { TracingLive } from "../../src/observability/Tracing.js"

const Probe = Schema.Struct({ requestSpan: Schema.Boolean, innerSpanRecorded: Schema.Boolean })

class Probes extends HttpApiGroup.make("probes").add(
  HttpApiEndpoint.get("spans", "/probe/spans").addSuccess(Probe)
) {}
class ProbeApi extends HttpApi.make("probe").add(Probes) {}

const ProbesLive = HttpApiBuilder.group(ProbeApi, "probes", (h) =>
  h.handle("spans", () =>
    Effect.gen(function* () {
      const requestSpan = Option.isSome(yield* Effect.option(Effect.currentSpan))
      const inner = yield* Effect.currentSpan.pipe(Effect.withSpan("probe.inner"), Effect.orDie)
      // The no-op span carries DisablePropagation; a recorded span does not.
      return { requestSpan, innerSpanRecorded: !Context.get(inner.context, Tracer.DisablePropagation) }
    })
  )
)

const server = (tracing: Layer.Layer<never, never, AppConfig>) =>
  HttpApiBuilder.serve(apiMiddleware({ accessLog: false })).pipe(
    Layer.provide(HttpApiBuilder.api(ProbeApi).pipe(Layer.provide(ProbesLive))),
    Layer.provideMerge(NodeHttpServer.layerTest),
    Layer.provide(tracing),
    Layer.provide(Layer.succeed(AppConfig, makeAppConfig({})))
  )

const probe = Effect.gen(function* () {
  const client = yield* HttpClient.HttpClient
  const response = yield* client.execute(HttpClientRequest.get("/probe/spans"))
  expect(response.status).toBe(200)
  return yield* Effect.flatMap(response.json, Schema.decodeUnknown(Probe))
})

layer(server(TracingLive))("TracingLive without OTEL_EXPORTER_OTLP_ENDPOINT", (it) => {
  it.effect("runs no HTTP server span and records no Effect span", () =>
    Effect.gen(function* () {
      expect(yield* probe).toEqual({ requestSpan: false, innerSpanRecorded: false })
    })
  )
})

layer(server(Layer.empty))("the platform's defaults (what TracingLive turns off)", (it) => {
  it.effect("trace every request and record spans", () =>
    Effect.gen(function* () {
      expect(yield* probe).toEqual({ requestSpan: true, innerSpanRecorded: true })
    })
  )
})
