/**
 * The HTTP server: the root HttpApi with every group's handlers, `/openapi.json`, `/docs`, and the
 * service-wide middleware, on a Node HTTP server.
 */
import { createServer, type Server } from "node:http"
import { HttpApiBuilder, HttpApiScalar, type HttpApp, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { AppConfig } from "../config.js"
import { CustomersHttpLive } from "../customers/Http.js"
import { IdentityHttpLive } from "../identity/Http.js"
import { NotificationsHttpLive } from "../notifications/Http.js"
import { HttpMetrics, HttpMetricsLive, METRICS_PATH, MetricsRouteLive } from "../observability/Metrics.js"
import { WebhooksHttpLive } from "../webhooks/Http.js"
import { Api } from "./Api.js"
import { idempotencyMiddleware } from "./Idempotency.js"
import { apiMiddleware } from "./middleware.js"
import { RateLimiterLive, rateLimitMiddleware } from "./RateLimit.js"
import { RPC_PATH, RpcLive } from "./Rpc.js"
import { SystemHttpLive } from "./SystemHttp.js"

/** Every group's handlers. Contexts add their `<Context>HttpLive` here. */
export const ApiLive = HttpApiBuilder.api(Api).pipe(
  Layer.provide([
    SystemHttpLive,
    IdentityHttpLive,
    CustomersHttpLive,
    NotificationsHttpLive,
    WebhooksHttpLive
  ])
)

const rateLimits = rateLimitMiddleware()
const idempotencyKeys = idempotencyMiddleware()

/**
 * Inside `apiMiddleware` (which must stay outermost: its normalizer runs first among the
 * pre-response handlers): rate limits, then idempotency keys (a 429 never claims a key).
 */
export const requestGuards = <E, R>(app: HttpApp.Default<E, R>) => rateLimits(idempotencyKeys(app))

/**
 * The routes and middleware, independent of the socket (tests use NodeHttpServer.layerTest):
 * the HttpApi, `/docs`, `/openapi.json`, `/rpc` (audit and ops) and `/metrics`. Needs the services
 * (EventStore, OpsStatus, CredentialVerifier, …) from the composition root.
 */
export const HttpAppLive = Layer.unwrapEffect(
  Effect.map(HttpMetrics, (metrics) =>
    HttpApiBuilder.serve((app) => apiMiddleware({ onResponse: metrics.record })(requestGuards(app)))
  )
).pipe(
  Layer.provide(HttpApiScalar.layer({ path: "/docs" })),
  Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
  Layer.provide([RpcLive, MetricsRouteLive]),
  Layer.provide(RateLimiterLive),
  Layer.provide(ApiLive),
  Layer.provide(HttpMetricsLive(Api, [RPC_PATH, METRICS_PATH, "/docs", "/openapi.json"]))
)

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
        server = createServer()
        server.keepAliveTimeout = 5_000
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

export const HttpLive = HttpAppLive.pipe(HttpServer.withLogAddress, Layer.provide(NodeServerLive))
