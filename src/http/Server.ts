/**
 * The HTTP server machinery: an HttpApi with its handlers (the root `Api` and `ApiLive` of src/Api.ts),
 * `/openapi.json`, `/docs`, `/rpc`, `/metrics` and the service-wide middleware, on a Node HTTP server.
 */
import { createServer, maxHeaderSize, type Server, STATUS_CODES } from "node:http"
import type { Duplex } from "node:stream"
import {
  type HttpApi,
  HttpApiBuilder,
  type HttpApiGroup,
  type HttpApp,
  HttpRouter,
  type HttpServerRequest
} from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { AppConfig } from "../config.js"
import { HttpMetrics, HttpMetricsLive, METRICS_PATH, MetricsRouteLive } from "../observability/Metrics.js"
import { docsLayer } from "./Docs.js"
import { errorBody } from "./errors.js"
import {
  type FastCommandMatcher,
  type FastRouteMatcher,
  FastRoutes,
  fastCommandMatcher,
  fastRouteMatcher,
  literalGetPaths,
  NoFastRoutes
} from "./FastRoutes.js"
import { idempotencyMiddleware } from "./Idempotency.js"
import { allowedMethods, apiMiddleware, databaseOutage, newRequestId } from "./middleware.js"
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
 * The fast routes' answers (http/FastRoutes.ts), for `apiMiddleware` to give beside `/health`, behind
 * the one request guard a `GET` meets: the rate limits (an idempotency key claims nothing on a GET).
 */
export const guardedFastRoutes = (match: FastRouteMatcher | undefined) =>
  match === undefined
    ? undefined
    : (request: HttpServerRequest.HttpServerRequest) => {
        const answer = match(request)
        return answer === undefined ? undefined : rateLimits(answer)
      }

/**
 * The fast commands' answers (http/FastRoutes.ts), for `apiMiddleware` to give after the body
 * checks, behind the rate limits (the matcher leaves a request with an idempotency key to the
 * router's guard). A request is matched before any guard runs, so one the router answers after all
 * meets each guard once.
 */
export const guardedFastCommands = (match: FastCommandMatcher | undefined) =>
  match === undefined
    ? undefined
    : (request: HttpServerRequest.HttpServerRequest, body: unknown) => {
        const answer = match(request, body)
        return answer === undefined ? undefined : rateLimits(answer)
      }

/** The routes served beside the HttpApi (not in its document). */
const RAW_ROUTES = [
  { method: "POST", path: RPC_PATH },
  { method: "GET", path: METRICS_PATH },
  { method: "GET", path: "/docs" },
  { method: "GET", path: "/openapi.json" }
] as const

/** The longest path parameter routed (a longer one is left unrouted: 404). */
const MAX_PATH_PARAMETER = 2048

/**
 * The routes and middleware of `api` (served by `apiLive`, its handlers), independent of the socket
 * (tests use NodeHttpServer.layerTest): the HttpApi, `/docs`, `/openapi.json`, `/rpc` (audit and ops)
 * and `/metrics`. Needs the services (EventStore, OpsStatus, CredentialVerifier, …) from the
 * composition root.
 */
export const httpAppLayer = <
  Id extends string,
  Groups extends HttpApiGroup.HttpApiGroup.Any,
  AE,
  AR,
  E,
  R,
  FE = never,
  FR = never
>(
  api: HttpApi.HttpApi<Id, Groups, AE, AR>,
  apiLive: Layer.Layer<HttpApi.Api, E, R>,
  /** The routes answered before the router (http/FastRoutes.ts); none by default. */
  fastRoutes: Layer.Layer<FastRoutes, FE, FR> = NoFastRoutes
) =>
  Layer.unwrapEffect(
    Effect.map(Effect.all([HttpMetrics, FastRoutes]), ([metrics, routes]) => {
      // Once, at start-up: which methods each path answers, for the 405s' Allow header.
      const allow = allowedMethods(api, RAW_ROUTES)
      const fast = guardedFastRoutes(fastRouteMatcher(routes, literalGetPaths(api)))
      const fastBody = guardedFastCommands(fastCommandMatcher(routes))
      return HttpApiBuilder.serve((app) =>
        apiMiddleware({
          onResponse: metrics.record,
          allow,
          ...(fast === undefined ? {} : { fast }),
          ...(fastBody === undefined ? {} : { fastBody })
        })(requestGuards(app))
      )
    })
  ).pipe(
    // find-my-way's default (100 characters) left a longer path parameter unrouted, which the 405
    // answer then contradicted ("GET is not allowed …; it answers GET"): a long id is a 404 as any
    // unknown id (API.md), decided by its handler.
    Layer.provide(HttpRouter.setRouterConfig({ maxParamLength: MAX_PATH_PARAMETER })),
    Layer.provide(HttpApiBuilder.middleware(databaseOutage)),
    Layer.provide(docsLayer("/docs")),
    Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
    Layer.provide([RpcLive, MetricsRouteLive]),
    Layer.provide(RateLimiterLive),
    Layer.provide(apiLive),
    Layer.provide(fastRoutes),
    Layer.provide(
      HttpMetricsLive(
        api,
        RAW_ROUTES.map((r) => r.path)
      )
    )
  )

/** What Node's HTTP parser refused, as the one error body (Node itself would send an empty 400/431). */
const clientErrorResponse = (code: string | undefined) => {
  switch (code) {
    case "HPE_HEADER_OVERFLOW":
      return {
        status: 431,
        code: "request_header_too_large",
        message: `the request line and headers must fit in ${maxHeaderSize} bytes`
      }
    case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
      return { status: 413, code: "payload_too_large", message: "chunk extensions are too large" }
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return { status: 408, code: "request_timeout", message: "the request was not received in time" }
    default:
      return { status: 400, code: "invalid_request", message: "the request is not valid HTTP/1.1" }
  }
}

/** Whether a response has already started on this connection (then nothing more may be written). */
const responseStarted = (socket: Duplex) => {
  const current: unknown = Reflect.get(socket, "_httpMessage")
  return typeof current === "object" && current !== null && Reflect.get(current, "headersSent") === true
}

/**
 * A request Node cannot parse (a request line or headers over `maxHeaderSize`, 16 KiB by default;
 * malformed HTTP) never reaches the app: answer it with the error body and a request id, then close.
 */
const onClientError = (error: NodeJS.ErrnoException, socket: Duplex) => {
  if (error.code === "ECONNRESET" || !socket.writable || responseStarted(socket)) {
    socket.destroy()
    return
  }
  const { status, code, message } = clientErrorResponse(error.code)
  const requestId = newRequestId()
  const body = JSON.stringify({
    error: { ...errorBody("invalid_request_error", { code, message }).error, requestId }
  })
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}\r\n` +
      "Content-Type: application/json\r\n" +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      `Request-Id: ${requestId}\r\n` +
      "Connection: close\r\n\r\n" +
      body
  )
}

/** The Node HTTP server the service listens with (tests listen with it too, on a random port). */
export const makeNodeServer = (): Server => {
  const server = createServer()
  server.keepAliveTimeout = 5_000
  server.on("clientError", onClientError)
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
