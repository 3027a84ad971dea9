/**
 * The outermost HTTP middleware. Every request gets a `Request-Id`; bodies are checked before any
 * handler runs (1 MiB limit → 413, exactly `application/json` → else 415, malformed or
 * whitespace-only JSON → 400 `invalid_json`, NUL or lone surrogates in any string → 400
 * `parameter_invalid` with the field in `param`); a known path with another method → 405 with
 * `Allow`; every failure response — our typed errors, schema decode errors, unknown routes,
 * defects — leaves with the one error body of design/API.md and the request id inside it; one access-log line per request.
 */
import { randomBytes } from "node:crypto"
import { performance } from "node:perf_hooks"
import {
  HttpApi,
  type HttpApiGroup,
  HttpApp,
  HttpIncomingMessage,
  HttpMiddleware,
  HttpServerRequest,
  HttpServerResponse
} from "@effect/platform"
import { Cause, Context, Effect, Either, FiberRef, HashMap, LogLevel, Option, Tracer } from "effect"
import { REQUEST_ID_ANNOTATION } from "../base/RequestId.js"
import { unreachableInCause, unreachableReason } from "../db/Reachability.js"
import {
  type ErrorBody,
  type ErrorType,
  errorBody,
  typeForStatus,
  UNAVAILABLE_RETRY_AFTER_SECONDS,
  unavailableBody
} from "./errors.js"

export const MAX_BODY_BYTES = 1024 * 1024

/** Paths whose bodies are form-encoded (OAuth token endpoint), not JSON. */
export const FORM_PATHS: ReadonlySet<string> = new Set(["/auth/token"])

/**
 * Paths that parse their own bodies (`/rpc` speaks ndjson; Stripe's events are verified over their
 * exact bytes before they are parsed): only the size limit applies here.
 */
export const RAW_BODY_PATHS: ReadonlySet<string> = new Set(["/rpc", "/v1/processor-events/stripe"])

/** Requests that can carry a body we must check. */
const BODY_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"])

const ID_BYTES = 12
/** Random bytes for 512 ids at a time: one call into the CSPRNG per 512 requests, not per request. */
let idPool = Buffer.alloc(0)
let idOffset = 0

export const newRequestId = (): string => {
  if (idOffset + ID_BYTES > idPool.length) {
    idPool = randomBytes(ID_BYTES * 512)
    idOffset = 0
  }
  const id = idPool.toString("base64url", idOffset, idOffset + ID_BYTES)
  idOffset += ID_BYTES
  return `req_${id}`
}

const encoder = new TextEncoder()
const decoder = new TextDecoder()

const jsonResponse = (status: number, body: ErrorBody) =>
  HttpServerResponse.uint8Array(encoder.encode(JSON.stringify(body)), {
    status,
    contentType: "application/json"
  })

const fail = (status: number, code: string, message: string, type: ErrorType = typeForStatus(status)) =>
  jsonResponse(status, errorBody(type, { code, message }))

/** The media type of a Content-Type, without parameters (`Application/JSON; charset=utf-8` → `application/json`). */
const mediaType = (contentType: string) => (contentType.split(";")[0] ?? "").trim().toLowerCase()

/**
 * Exactly `application/json`: the platform reads only that type as JSON, and any other `+json`
 * type (`application/merge-patch+json`, …) it would wait on forever for a body already read here.
 */
const isJsonType = (contentType: string) => mediaType(contentType) === "application/json"
const isFormType = (contentType: string) => mediaType(contentType) === "application/x-www-form-urlencoded"

const pathOf = (url: string) => {
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

/**
 * The path as the router matches it (find-my-way): an absolute-form target loses its origin,
 * repeated slashes collapse, `?`, `;` or `#` ends it, escapes are decoded and case is ignored. A
 * rule compared with the raw URL would let `//v1/…`, `/V1/…` or `/%761/…` reach its routes unlimited.
 */
export const routePath = (url: string) => {
  let path = url.startsWith("/") ? url : url.replace(/^https?:\/\/.*?\//, "/")
  path = path.replace(/\/\/+/g, "/")
  const end = path.slice(1).search(/[?;#]/)
  if (end !== -1) path = path.slice(0, end + 1)
  try {
    path = decodeURI(path)
  } catch {
    // a malformed escape: the router finds no route either
  }
  return path.toLowerCase()
}

/** A request without a JSON body to hand on (none, a form, a raw body). */
const NO_JSON = Either.right(Option.none<unknown>())

/**
 * Reads and checks the body up front (the platform caches the text, so handlers read it again for
 * free). Left: the response refusing the request; right: the body's JSON value, if it has one.
 */
const checkBody = (
  request: HttpServerRequest.HttpServerRequest
): Effect.Effect<Either.Either<Option.Option<unknown>, HttpServerResponse.HttpServerResponse>> =>
  Effect.gen(function* () {
    let json = Option.none<unknown>()
    const length = request.headers["content-length"]
    const chunked = /chunked/i.test(request.headers["transfer-encoding"] ?? "")
    if (length !== undefined && !/^\d+$/.test(length)) {
      return refused(fail(400, "invalid_content_length", "Content-Length must be a non-negative integer"))
    }
    if (length !== undefined && Number(length) > MAX_BODY_BYTES) {
      return refused(fail(413, "payload_too_large", `request bodies are limited to ${MAX_BODY_BYTES} bytes`))
    }
    if (!chunked && (length === undefined || Number(length) === 0)) return NO_JSON
    const contentType = request.headers["content-type"] ?? ""
    const route = routePath(request.url)
    const form = FORM_PATHS.has(route)
    const raw = RAW_BODY_PATHS.has(route)
    if (!raw && (form ? !isFormType(contentType) : !isJsonType(contentType))) {
      return refused(
        fail(
          415,
          "unsupported_media_type",
          form
            ? "this endpoint expects Content-Type: application/x-www-form-urlencoded"
            : "request bodies must be JSON sent as Content-Type: application/json (no other type, +json ones included)"
        )
      )
    }
    const text = yield* request.text.pipe(
      HttpIncomingMessage.withMaxBodySize(Option.some(MAX_BODY_BYTES)),
      Effect.either
    )
    if (text._tag === "Left") {
      const tooLarge = /too large|maxBytes|exceed/i.test(
        String(text.left.cause ?? text.left.description ?? "")
      )
      return refused(
        tooLarge || chunked
          ? fail(413, "payload_too_large", `request bodies are limited to ${MAX_BODY_BYTES} bytes`)
          : fail(400, "invalid_body", "the request body could not be read")
      )
    }
    if (!form && !raw && text.right !== "" && text.right.trim() === "") {
      return refused(
        fail(400, "invalid_json", "the request body is only whitespace: send a JSON value or no body")
      )
    }
    if (!form && !raw && text.right !== "") {
      // Before parsing: a parse of thousands of levels can itself overflow the stack.
      if (jsonDepth(text.right) > MAX_JSON_DEPTH) {
        return refused(
          fail(400, "invalid_json", `JSON values may be nested at most ${MAX_JSON_DEPTH} levels deep`)
        )
      }
      let value: unknown
      try {
        value = JSON.parse(text.right)
      } catch (e) {
        return refused(
          fail(
            400,
            "invalid_json",
            `the request body is not valid JSON: ${e instanceof Error ? e.message : String(e)}`
          )
        )
      }
      const bad = badText(value, [])
      if (bad !== undefined) return refused(badTextRefused(bad))
      json = Option.some(value)
    }
    if (form && /%00/i.test(text.right)) return refused(nulRefused)
    return Either.right(json)
  })

const refused = (refusal: HttpServerResponse.HttpServerResponse) => Either.left(refusal)

/**
 * Deeper JSON than any request needs: serializing a value nested thousands of levels deep (metadata,
 * stored events) overflows the stack, so such a body is refused up front as bad input.
 */
export const MAX_JSON_DEPTH = 64

/** The deepest nesting of arrays and objects in a JSON text (one linear scan, strings skipped). */
const jsonDepth = (text: string): number => {
  let depth = 0
  let max = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92 /* \ */) i++
      else if (c === 34 /* " */) inString = false
    } else if (c === 34) inString = true
    else if (c === 91 /* [ */ || c === 123 /* { */) max = Math.max(max, ++depth)
    else if (c === 93 /* ] */ || c === 125 /* } */) depth--
  }
  return max
}

/** PostgreSQL text cannot hold U+0000: refused up front, wherever it appears, as bad input. */
const NUL_MESSAGE = "text must not contain NUL (U+0000) characters"
const nulRefused = fail(400, "parameter_invalid", NUL_MESSAGE)

/** A UTF-16 surrogate without its partner (JSON's `"\ud800"` escape): not a character, and PostgreSQL refuses it. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

interface BadText {
  /** The field holding the bad string, or the object holding the bad field name. */
  readonly path: ReadonlyArray<string | number>
  readonly inKey: boolean
  readonly problem: "nul" | "surrogate"
}

const problemOf = (text: string): BadText["problem"] | undefined =>
  text.includes("\u0000") ? "nul" : LONE_SURROGATE.test(text) ? "surrogate" : undefined

/**
 * The first string or field name of a parsed JSON body that text columns cannot hold, with where it
 * is. Recursion is bounded by MAX_JSON_DEPTH, checked before parsing.
 */
const badText = (value: unknown, path: ReadonlyArray<string | number>): BadText | undefined => {
  if (typeof value === "string") {
    const problem = problemOf(value)
    return problem === undefined ? undefined : { path, inKey: false, problem }
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const bad = badText(value[i], [...path, i])
      if (bad !== undefined) return bad
    }
    return undefined
  }
  if (typeof value === "object" && value !== null) {
    for (const [key, field] of Object.entries(value)) {
      const problem = problemOf(key)
      if (problem !== undefined) return { path, inKey: true, problem }
      const bad = badText(field, [...path, key])
      if (bad !== undefined) return bad
    }
  }
  return undefined
}

const badTextRefused = (bad: BadText) => {
  const param = bad.path.length > 0 ? bad.path.map(String).join(".") : undefined
  const what = bad.inKey ? `a field name in ${param ?? "the body"}` : (param ?? "the body")
  const message =
    bad.problem === "nul"
      ? `${what}: ${NUL_MESSAGE}`
      : `${what}: text must be well-formed Unicode (a lone UTF-16 surrogate such as \\ud800 is not a character)`
  return jsonResponse(
    400,
    errorBody("invalid_request_error", {
      code: "parameter_invalid",
      message,
      ...(param === undefined || bad.inKey ? {} : { param })
    })
  )
}

/**
 * A query string carrying an encoded NUL is refused before any handler sees it, naming the
 * parameter whose value holds it (none when it is in a parameter's name).
 */
const checkQuery = (request: HttpServerRequest.HttpServerRequest) => {
  const query = request.url.indexOf("?")
  if (query === -1 || !/%00/i.test(request.url.slice(query)))
    return Option.none<HttpServerResponse.HttpServerResponse>()
  for (const [name, value] of new URLSearchParams(request.url.slice(query + 1))) {
    if (name.includes("\u0000")) break
    if (value.includes("\u0000"))
      return Option.some(badTextRefused({ path: [name], inKey: false, problem: "nul" }))
  }
  return Option.some(nulRefused)
}

interface DecodeIssue {
  readonly _tag?: string
  readonly path?: ReadonlyArray<unknown>
  readonly message?: string
}

/** Turns whatever failure body a response carries into the one error body, with the request id. */
const normalizeBody = (
  status: number,
  raw: unknown,
  request: HttpServerRequest.HttpServerRequest
): ErrorBody => {
  if (typeof raw === "object" && raw !== null) {
    const maybe = raw as {
      error?: { type?: unknown; code?: unknown; message?: unknown }
      _tag?: unknown
      issues?: unknown
    }
    if (maybe.error && typeof maybe.error.code === "string" && typeof maybe.error.message === "string") {
      return { error: maybe.error as ErrorBody["error"] }
    }
    if (maybe._tag === "HttpApiDecodeError" && Array.isArray(maybe.issues)) {
      const issue = (maybe.issues as ReadonlyArray<DecodeIssue>)[0]
      // Array indexes as Stripe writes them: `lineItems[2].quantity`.
      const param =
        issue?.path && issue.path.length > 0
          ? issue.path.reduce<string>(
              (acc, key) =>
                typeof key === "number"
                  ? `${acc}[${key}]`
                  : acc === ""
                    ? String(key)
                    : `${acc}.${String(key)}`,
              ""
            )
          : undefined
      const missing = issue?._tag === "Missing"
      const field = issue?.path?.[issue.path.length - 1]
      // "display must be …" already names its field; "must be a valid email address" does not.
      const named = typeof field === "string" && issue?.message?.startsWith(`${field} `) === true
      // The body as a whole is not an object (absent, `null`, an array…): say so, not "Expected {…}".
      if (param === undefined && issue?._tag === "Type" && request.method !== "GET") {
        return errorBody("invalid_request_error", {
          code: "parameter_invalid",
          message: "the request body must be a JSON object"
        })
      }
      return errorBody("invalid_request_error", {
        code: missing ? "parameter_missing" : "parameter_invalid",
        message:
          missing && param
            ? `${param} is required`
            : param && !named
              ? `${param}: ${issue?.message ?? "is invalid"}`
              : (issue?.message ?? "invalid request"),
        ...(param ? { param } : {})
      })
    }
  }
  switch (status) {
    case 400:
      return errorBody("invalid_request_error", {
        code: "invalid_request",
        message: "the request is invalid"
      })
    case 401:
      return errorBody("authentication_error", {
        code: "missing_credentials",
        message: "authentication required"
      })
    case 404:
      return errorBody("invalid_request_error", {
        code: "resource_missing",
        message: `Unrecognized request URL (${request.method}: ${pathOf(request.url)})`
      })
    case 405:
      return errorBody("invalid_request_error", {
        code: "method_not_allowed",
        message: `${request.method} is not allowed here`
      })
    default:
      return errorBody(typeForStatus(status), {
        code: status >= 500 ? "internal_error" : "request_failed",
        message:
          status >= 500
            ? "An internal error occurred. It has been logged; retry later."
            : "the request failed"
      })
  }
}

const withRequestId = (
  response: HttpServerResponse.HttpServerResponse,
  requestId: string,
  request: HttpServerRequest.HttpServerRequest
): HttpServerResponse.HttpServerResponse => {
  const withHeader = HttpServerResponse.setHeader(response, "request-id", requestId)
  if (response.status < 400) return withHeader
  const body = response.body
  let raw: unknown
  if (body._tag === "Uint8Array") {
    try {
      raw = JSON.parse(decoder.decode(body.body))
    } catch {
      raw = undefined
    }
  } else if (body._tag !== "Empty") {
    return withHeader
  }
  const normalized = normalizeBody(response.status, raw, request)
  const final: ErrorBody = { error: { ...normalized.error, requestId } }
  return HttpServerResponse.uint8Array(encoder.encode(JSON.stringify(final)), {
    status: response.status,
    headers: withHeader.headers,
    contentType: "application/json"
  })
}

/** The `Allow` header for a request path (routePath), or undefined when no route has that path. */
export type AllowedMethods = (path: string) => string | undefined

const METHOD_ORDER = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]

/** `/user/:id` → a regex for the lower-cased paths it matches (`:param` is one segment). */
const templateRegex = (template: string) => {
  const segments = template
    .split("/")
    .map((segment) => (segment.startsWith(":") ? "[^/]+" : segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")))
  return new RegExp(`^${segments.join("/")}/?$`)
}

/**
 * The methods each path of `api` (plus `extraRoutes`, the raw routes beside it) answers, computed
 * once, matched as the router matches (case ignored, trailing slash ignored, `:param` one segment).
 * A GET route also answers HEAD.
 */
export const allowedMethods = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  api: HttpApi.HttpApi<Id, Groups, E, R>,
  extraRoutes: ReadonlyArray<{ readonly method: string; readonly path: string }> = []
): AllowedMethods => {
  const routes: Array<{ readonly method: string; readonly path: string }> = [...extraRoutes]
  HttpApi.reflect(api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => {
      routes.push({ method: endpoint.method, path: endpoint.path })
    }
  })
  const byTemplate = new Map<string, Set<string>>()
  for (const route of routes) {
    const template = route.path.toLowerCase().replace(/\/+$/, "")
    const methods = byTemplate.get(template) ?? new Set<string>()
    methods.add(route.method.toUpperCase())
    if (route.method.toUpperCase() === "GET") methods.add("HEAD")
    byTemplate.set(template, methods)
  }
  const compiled = [...byTemplate].map(([template, methods]) => ({ methods, regex: templateRegex(template) }))
  return (path) => {
    const methods = new Set<string>()
    for (const c of compiled) if (c.regex.test(path)) for (const m of c.methods) methods.add(m)
    if (methods.size === 0) return undefined
    const rank = (m: string) => (METHOD_ORDER.includes(m) ? METHOD_ORDER.indexOf(m) : METHOD_ORDER.length)
    return [...methods].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b)).join(", ")
  }
}

/** An unknown route: 405 with `Allow` when the path exists under other methods, else 404. */
const routeNotFound = (request: HttpServerRequest.HttpServerRequest, allow: AllowedMethods | undefined) => {
  const methods = allow?.(routePath(request.url))
  // The path's template answers this very method (the router left it unrouted: a path parameter
  // beyond its length limit): no such resource, never a 405 naming the method it refused.
  if (methods === undefined || methods.split(", ").includes(request.method.toUpperCase()))
    return HttpServerResponse.empty({ status: 404 })
  return HttpServerResponse.setHeader(
    fail(
      405,
      "method_not_allowed",
      `${request.method} is not allowed on ${pathOf(request.url)}; it answers ${methods}`
    ),
    "allow",
    methods
  )
}

/** The router's own miss (an empty 404, unlike a handler's NotFound) may be a 405. */
const routeMissToAllow = (
  response: HttpServerResponse.HttpServerResponse,
  request: HttpServerRequest.HttpServerRequest,
  allow: AllowedMethods | undefined
) => (response.status === 404 && response.body._tag === "Empty" ? routeNotFound(request, allow) : response)

const causeToResponse = (
  cause: Cause.Cause<unknown>,
  request: HttpServerRequest.HttpServerRequest,
  allow: AllowedMethods | undefined
) => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) {
    const error = failure.value as { _tag?: unknown }
    if (error._tag === "RouteNotFound") return Effect.succeed(routeNotFound(request, allow))
    if (error._tag === "RequestError")
      return Effect.succeed(fail(400, "invalid_body", "the request could not be read"))
  }
  // The database cannot be reached (in the request guards: idempotency keys): an outage to wait
  // out, not a bug (one warning line, no stack).
  const unreachable = unreachableInCause(cause)
  if (Option.isSome(unreachable)) {
    return Effect.as(
      Effect.logWarning(`database unreachable (${unreachableReason(unreachable.value)}): answered 503`),
      unavailableResponse()
    )
  }
  return Effect.as(
    Effect.logError("unhandled failure while serving a request", cause),
    HttpServerResponse.empty({ status: 500 })
  )
}

/**
 * A request stopped by a database outage (a failure or defect anywhere under it: handler, credential
 * lookup, `/rpc`) answers 503 instead of the platform's 500. An HttpApi-level middleware
 * (`HttpApiBuilder.middleware`): the platform turns a failed app into a sent 500 before the serve
 * middleware (`apiMiddleware`) sees the cause, so this must run inside it.
 */
export const databaseOutage = <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R> =>
  Effect.catchAllCause(app, (cause) =>
    Option.match(unreachableInCause(cause), {
      onNone: () => Effect.failCause(cause),
      onSome: (error) =>
        Effect.as(
          Effect.logWarning(`database unreachable (${unreachableReason(error)}): answered 503`),
          unavailableResponse()
        )
    })
  )

/** 503 `service_unavailable` with `Retry-After`, for a request the database outage stopped. */
export const unavailableResponse = () =>
  HttpServerResponse.setHeader(
    jsonResponse(503, unavailableBody()),
    "retry-after",
    String(UNAVAILABLE_RETRY_AFTER_SECONDS)
  )

/** The service-wide middleware; `onResponse` observes each finished request (metrics). */
export const apiMiddleware = <FR = never>(
  options: {
    readonly accessLog?: boolean
    /** Which methods a path answers, for 405s (allowedMethods); without it every unknown route is a 404. */
    readonly allow?: AllowedMethods
    /**
     * Answers a request before the app (its guards, its router), or `undefined` to pass it on: the
     * fast routes (http/FastRoutes.ts) with the guards they need (rate limits), composed by the server.
     */
    readonly fast?: (
      request: HttpServerRequest.HttpServerRequest
    ) => Effect.Effect<HttpServerResponse.HttpServerResponse, never, FR> | undefined
    /**
     * Answers a request with a JSON body (its value given, after the body checks) before the app,
     * or `undefined` to pass it on: the fast commands (http/FastRoutes.ts), guarded likewise.
     */
    readonly fastBody?: (
      request: HttpServerRequest.HttpServerRequest,
      body: unknown
    ) => Effect.Effect<HttpServerResponse.HttpServerResponse, never, FR> | undefined
    readonly onResponse?: (info: {
      method: string
      route: string
      status: number
      seconds: number
    }) => Effect.Effect<void>
  } = {}
) => {
  const { allow, onResponse, fast: fast_, fastBody: fastBody_ } = options
  const accessLog = options.accessLog !== false
  return HttpMiddleware.make(<E, R>(app: HttpApp.Default<E, R>) =>
    Effect.withFiberRuntime<
      HttpServerResponse.HttpServerResponse,
      E,
      R | FR | HttpServerRequest.HttpServerRequest
    >((fiber) => {
      const request = Context.unsafeGet(fiber.currentContext, HttpServerRequest.HttpServerRequest)
      const requestId = newRequestId()
      const started = performance.now()
      // The server runs each request in a fiber of its own and this middleware is outermost: the
      // request id, the log annotations and the pre-response handler are set on that fiber for good
      // (`Effect.locally`, `annotateLogs` and `withPreResponseHandler` would each save and restore
      // them around the request, which nothing after it needs).
      let annotations = HashMap.set(
        fiber.getFiberRef(FiberRef.currentLogAnnotations),
        REQUEST_ID_ANNOTATION,
        requestId
      )
      const span = Context.getOption(fiber.currentContext, Tracer.ParentSpan)
      if (Option.isSome(span) && span.value._tag === "Span") {
        annotations = HashMap.set(
          HashMap.set(annotations, "traceId", span.value.traceId),
          "spanId",
          span.value.spanId
        )
      }
      // The request id is read back from its log annotation (base/RequestId.ts): one FiberRef to set.
      const tagged = FiberRef.set(FiberRef.currentLogAnnotations, annotations)

      const finish = (response: HttpServerResponse.HttpServerResponse) => {
        const seconds = (performance.now() - started) / 1000
        // The access line's fields are built only when the level keeps the line.
        const log =
          accessLog &&
          LogLevel.greaterThanEqual(LogLevel.Info, fiber.getFiberRef(FiberRef.currentMinimumLogLevel))
            ? Effect.logInfo("http request").pipe(
                Effect.annotateLogs({
                  method: request.method,
                  path: pathOf(request.url),
                  status: String(response.status),
                  durationMs: (seconds * 1000).toFixed(1)
                })
              )
            : Effect.void
        const record =
          onResponse === undefined
            ? Effect.void
            : onResponse({
                method: request.method,
                route: pathOf(request.url),
                status: response.status,
                seconds
              })
        return Effect.as(log === Effect.void ? record : Effect.zipRight(log, record), response)
      }

      // The liveness probe, polled by orchestrators and load balancers many times a second: answered
      // here with the very response its HttpApi handler gives (it stays in the OpenAPI document),
      // with its request id, access line and metrics, but without the router, the request guards
      // and the handler's schema encoding (issue #17: that machinery cost the probe a third).
      if (request.method === "GET" && request.url === HEALTH_PATH) {
        return Effect.zipRight(tagged, finish(healthResponse(requestId)))
      }

      // A request refused here is rewritten directly; responses produced by the app are sent by the
      // platform itself, so they are rewritten in a pre-response handler.
      const handled = Effect.zipRight(
        HttpApp.appendPreResponseHandler((req, res) =>
          Effect.succeed(withRequestId(routeMissToAllow(res, req, allow), requestId, req))
        ),
        app
      )
      // A fast route (a hot single-resource read) is answered here too, without the pre-response
      // handler, the idempotency guard (a GET claims no key) and the router: what the pre-response
      // handler would do to its answer is done directly. A query it takes holds no encoded NUL (it
      // leaves those to the router's way, where `checkQuery` refuses them): nothing to check.
      const fast = fast_?.(request)
      const refusedQuery = fast === undefined ? checkQuery(request) : Option.none()
      // Most requests (no body, a clean query) go straight to the app: no refusal to look at.
      const checked: Effect.Effect<
        HttpServerResponse.HttpServerResponse,
        E,
        R | FR | HttpServerRequest.HttpServerRequest
      > =
        fast !== undefined
          ? Effect.map(fast, (response) => withRequestId(response, requestId, request))
          : Option.isSome(refusedQuery)
            ? Effect.succeed(withRequestId(refusedQuery.value, requestId, request))
            : BODY_METHODS.has(request.method)
              ? Effect.flatMap(
                  checkBody(request),
                  (
                    checked
                  ): Effect.Effect<
                    HttpServerResponse.HttpServerResponse,
                    E,
                    R | FR | HttpServerRequest.HttpServerRequest
                  > => {
                    if (Either.isLeft(checked))
                      return Effect.succeed(withRequestId(checked.left, requestId, request))
                    // A hot command with a body it takes as it comes (http/FastRoutes.ts), answered here
                    // as a fast read is; anything else about it goes on to the guards and the router.
                    const fastAnswer =
                      fastBody_ === undefined || Option.isNone(checked.right)
                        ? undefined
                        : fastBody_(request, checked.right.value)
                    return fastAnswer === undefined
                      ? handled
                      : Effect.map(fastAnswer, (response) => withRequestId(response, requestId, request))
                  }
                )
              : handled
      return Effect.zipRight(tagged, checked).pipe(
        Effect.catchAllCause((cause) =>
          Cause.isInterruptedOnly(cause)
            ? Effect.failCause(cause)
            : Effect.map(causeToResponse(cause, request, allow), (r) => withRequestId(r, requestId, request))
        ),
        Effect.flatMap(finish)
      )
    })
  )
}

/** The liveness probe's path (ApiBase's `health` endpoint) and its one body. */
const HEALTH_PATH = "/health"
const HEALTH_BODY = encoder.encode(JSON.stringify({ status: "ok" }))

/** What the `health` handler answers, byte for byte, with the request's id. */
const healthResponse = (requestId: string) =>
  HttpServerResponse.uint8Array(HEALTH_BODY, {
    status: 200,
    contentType: "application/json",
    headers: { "request-id": requestId }
  })
