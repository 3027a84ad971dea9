/**
 * The HTTP server machinery: an HttpApi with its handlers (the root `Api` and `ApiLive` of src/Api.ts),
 * `/openapi.json`, `/docs`, `/rpc`, `/metrics` and the service-wide middleware, on a Node HTTP server.
 */
import { createServer, type Server } from "node:http"
import { type HttpApi, HttpApiBuilder, HttpApiScalar, type HttpApp } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { AppConfig } from "../config.js"
import { HttpMetrics, HttpMetricsLive, METRICS_PATH, MetricsRouteLive } from "../observability/Metrics.js"
import { idempotencyMiddleware } from "./Idempotency.js"
import { apiMiddleware } from "./middleware.js"
import { RateLimiterLive, rateLimitMiddleware } from "./RateLimit.js"
import { RPC_PATH, RpcLive } from "./Rpc.js"

const rateLimits = rateLimitMiddleware()
const idempotencyKeys = idempotencyMiddleware()

/**
 * Inside `apiMiddleware` (which must stay outermost: its normalizer runs first among the
 * pre-response handlers): rate limits, then idempotency keys (a 429 never claims a key).
 */
export const requestGuards = <E, R>(app: HttpApp.Default<E, R>) => rateLimits(idempotencyKeys(app))

/**
 * The routes and middleware of `api` (served by `apiLive`, its handlers), independent of the socket
 * (tests use NodeHttpServer.layerTest): the HttpApi, `/docs`, `/openapi.json`, `/rpc` (audit and ops)
 * and `/metrics`. Needs the services (EventStore, OpsStatus, CredentialVerifier, …) from the
 * composition root.
 */
export const httpAppLayer = <E, R>(api: HttpApi.HttpApi.Any, apiLive: Layer.Layer<HttpApi.Api, E, R>) =>
  Layer.unwrapEffect(
    Effect.map(HttpMetrics, (metrics) =>
      HttpApiBuilder.serve((app) => apiMiddleware({ onResponse: metrics.record })(requestGuards(app)))
    )
  ).pipe(
    Layer.provide(HttpApiScalar.layer({ path: "/docs" })),
    Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
    Layer.provide([RpcLive, MetricsRouteLive]),
    Layer.provide(RateLimiterLive),
    Layer.provide(apiLive),
    Layer.provide(HttpMetricsLive(api, [RPC_PATH, METRICS_PATH, "/docs", "/openapi.json"]))
  )

/** The Node HTTP server the service listens with (tests listen with it too, on a random port). */
export const makeNodeServer = (): Server => {
  const server = createServer()
  server.keepAliveTimeout = 5_000
  return server
}

/**
 * A Node HTTP server on HOST:PORT. On shutdown it stops accepting at once, lets in-flight requests
 * finish, and drops connections still open when the shutdown budget is nearly spent.
 */
export const NodeServerLive = Layer.unwrapScoped(
  Effect.gen(function* () {
    const config = yield* AppConfig
    let server: Server | undefined
    const graceMs = Math.max(500, config.shutdownTimeoutSeconds * 1000 - 2000)
    const layer = NodeHttpServer.layer(
      () => {
        server = makeNodeServer()
        return server
      },
      { port: config.port, host: config.host }
    )
    // Merged after the server layer, so this finalizer runs first: idle keep-alive sockets go at
    // once and a timer bounds how long in-flight requests may hold the shutdown.
    return Layer.merge(
      layer,
      Layer.scopedDiscard(
        Effect.addFinalizer(() =>
          Effect.sync(() => {
            const s = server
            if (!s) return
            s.closeIdleConnections()
            setTimeout(() => s.closeAllConnections(), graceMs).unref()
          })
        )
      )
    )
  })
)
