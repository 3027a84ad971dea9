/**
 * Hot reads answered before the platform's router: `GET <prefix>:id` routes whose answer is one
 * lookup (a product, a customer). The router, the path and query decoding, the handler's middleware
 * chain and the success schema's encoding cost such a read more than the lookup itself (issue #17);
 * a fast route skips them and keeps everything observable (issue #17 item 3): `apiMiddleware` answers
 * it where it answers `/health`, through the rate limits (its `RateLimit-*` headers, its 429), so the
 * response gets its `Request-Id`, the one error body, the access line, metrics and traces as a routed
 * one does; the credential and the route's scope are checked by the same code as the
 * `Authentication` middleware (`authorize`); a database outage answers 503 as `databaseOutage` does;
 * and the route stays in the HttpApi (its document, its handler), which answers whatever a fast route
 * does not take: a query string, an encoded or trailing-slash path, another method. Tests compare the
 * two answers byte for byte.
 *
 * A fast command (`POST /user`, the hottest write) is answered the same way once `apiMiddleware` has
 * checked its body (size, type, JSON): a body its payload schema decodes runs the handler's use case
 * and is encoded by its success schema, with its status. Everything else — a body the schema refuses
 * (the router's decode error is the answer), an `Idempotency-Key` (the idempotency guard claims it),
 * a query string — goes on to the guards and the router. The choice is made before any guard runs,
 * so a request meets each guard once either way.
 */
import { HttpApi, type HttpApiGroup, type HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Context, Effect, Layer, Option, Schema, type SchemaAST } from "effect"
import { fastEncodeSync } from "../base/FastEncode.js"
import type { ReadCache } from "../kernel/ReadCache.js"
import { type AuthenticatedActor, authorize, CredentialVerifier, RouteScopes, routeKey } from "./Auth.js"
import { type HttpError, type NotFound, statusOfHttpError } from "./errors.js"
import { IDEMPOTENCY_KEY_HEADER } from "./Idempotency.js"
import { databaseOutage } from "./middleware.js"

/**
 * A route answered before the router: `GET <prefix><one path segment>`, `GET <literal path>?<query>`,
 * or a fast command.
 */
export type FastRoute = FastRead | FastQueryRead | FastCommand

/** `GET <prefix><one path segment>`. */
export interface FastRead {
  readonly method: "GET"
  /** The HttpApi path it answers, `/v1/products/:id`: a literal prefix, then one parameter. */
  readonly path: string
  readonly query?: undefined
  readonly answer: (
    request: HttpServerRequest.HttpServerRequest,
    param: string
  ) => Effect.Effect<HttpServerResponse.HttpServerResponse, never, HttpServerRequest.HttpServerRequest>
}

/** `GET <literal path>?<query>`: a read whose parameters are all in its query string. */
export interface FastQueryRead {
  readonly method: "GET"
  /** The HttpApi path it answers, a literal (`/v1/usage`). */
  readonly path: string
  readonly query: true
  /**
   * The answer to the query's parameters (each named once, each one the route knows), or `undefined`
   * when the router must answer it (its schema refuses them: the router's decode error is the answer).
   */
  readonly answer: (
    request: HttpServerRequest.HttpServerRequest,
    params: Readonly<Record<string, string>>
  ) =>
    | Effect.Effect<HttpServerResponse.HttpServerResponse, never, HttpServerRequest.HttpServerRequest>
    | undefined
}

/** `POST <literal path>` with a JSON body. */
export interface FastCommand {
  readonly method: "POST"
  readonly path: string
  /** The answer to `body` (the parsed JSON), or `undefined` when the router must answer it. */
  readonly answer: (
    request: HttpServerRequest.HttpServerRequest,
    body: unknown
  ) =>
    | Effect.Effect<HttpServerResponse.HttpServerResponse, never, HttpServerRequest.HttpServerRequest>
    | undefined
}

/** The fast routes of every context (none by default). */
export class FastRoutes extends Context.Tag("http/FastRoutes")<FastRoutes, ReadonlyArray<FastRoute>>() {}

export const NoFastRoutes = Layer.succeed(FastRoutes, [])

const encoder = new TextEncoder()

/** A JSON body, already encoded: what a fast route's lookup answers (and what a cache may keep). */
export type JsonBytes = Uint8Array

/**
 * JSON bytes of `value` as the route's success schema encodes it: the same bytes the HttpApi handler
 * sends for that value. A value its own schema cannot encode is a defect, as in the handler.
 */
export const encodeJson = <A, I>(schema: Schema.Schema<A, I>) => {
  const encode = fastEncodeSync(schema)
  return (value: A): JsonBytes => encoder.encode(JSON.stringify(encode(value)))
}

/**
 * A fast route's lookup through a read cache (kernel/ReadCache.ts) of its answers: on a miss the
 * read model's row (`load`) is kept as `cached(row)`; the bytes are answered when `visible` lets the
 * caller see them, else `notFound` — as for an unknown id.
 */
export const cachedLookup = <Row, V extends { readonly bytes: JsonBytes }, E, R>(options: {
  readonly cache: ReadCache<V>
  readonly id: string
  readonly load: Effect.Effect<Option.Option<Row>, E, R>
  readonly cached: (row: Row) => V
  readonly visible: (value: V) => boolean
  readonly notFound: NotFound
}): Effect.Effect<JsonBytes, E | NotFound, R> =>
  Effect.flatMap(
    options.cache.get(options.id, Effect.map(options.load, Option.map(options.cached))),
    (found) =>
      Option.isSome(found) && options.visible(found.value)
        ? Effect.succeed(found.value.bytes)
        : Effect.fail(options.notFound)
  )

const okResponse = (body: JsonBytes, status = 200) =>
  HttpServerResponse.uint8Array(body, { status, contentType: "application/json" })

/** An HTTP error as the platform answers it: its status, its `{ error }` body (normalized on the way out). */
const errorResponse = (error: HttpError) =>
  HttpServerResponse.uint8Array(encoder.encode(JSON.stringify({ error: error.error })), {
    status: statusOfHttpError(error),
    contentType: "application/json"
  })

/** Path parameters a fast route takes as they come: ids and keys need no decoding. */
const PLAIN_SEGMENT = /^[A-Za-z0-9_-]+$/

/**
 * A fast `GET <path>` (`path` ends in `/:param`): authenticates and authorizes as the route's
 * `Authentication` middleware would (its `RequiredScope` annotation, read from `RouteScopes`), then
 * answers `lookup(actor, param)`'s bytes with 200, or its HTTP error.
 */
export const fastGet = (
  path: string,
  lookup: (actor: AuthenticatedActor, param: string) => Effect.Effect<JsonBytes, HttpError>
): Effect.Effect<FastRoute, never, CredentialVerifier | RouteScopes> =>
  Effect.gen(function* () {
    const answer = yield* authorizedAnswer("GET", path, 200)
    const route: FastRead = {
      method: "GET",
      path,
      answer: (request, param) => answer(request, (actor) => lookup(actor, param))
    }
    return route
  })

/**
 * A fast `GET <path>?<query>` (`path` a literal): query parameters its `params` schema decodes (as the
 * router decodes them: `Schema.decodeUnknown`, default options) are authenticated and authorized as
 * the route's `Authentication` middleware would, then answered with `lookup(actor, params)`'s bytes
 * with 200, or its HTTP error. Parameters the schema refuses, a name it does not declare, or a name
 * given twice are left to the router (the one error body of a decode failure; unknown names are
 * ignored there).
 */
export const fastQueryGet = <A, I>(
  path: string,
  params: Schema.Schema<A, I>,
  lookup: (actor: AuthenticatedActor, params: A) => Effect.Effect<JsonBytes, HttpError>
): Effect.Effect<FastRoute, never, CredentialVerifier | RouteScopes> =>
  Effect.gen(function* () {
    const answer = yield* authorizedAnswer("GET", path, 200)
    const decode = Schema.decodeUnknownOption(params)
    const known = new Set(propertyNames(params.ast))
    return {
      method: "GET",
      path,
      query: true,
      answer: (request, query) => {
        for (const name in query) if (!known.has(name)) return undefined
        const decoded = decode(query)
        return Option.isNone(decoded) ? undefined : answer(request, (actor) => lookup(actor, decoded.value))
      }
    }
  })

/** The property names of a struct schema (through its refinements and transformations). */
const propertyNames = (ast: SchemaAST.AST): ReadonlyArray<string> => {
  switch (ast._tag) {
    case "TypeLiteral":
      return ast.propertySignatures.flatMap((p) => (typeof p.name === "string" ? [p.name] : []))
    case "Refinement":
      return propertyNames(ast.from)
    case "Transformation":
      return propertyNames(ast.from)
    default:
      throw new Error(`a fast query route's parameters are a struct schema, not ${ast._tag}`)
  }
}

/**
 * What a fast route answers for `method path`: the credential checked as the route's
 * `Authentication` middleware would (`authorize`, its `RouteScopes` rule), then `run`'s bytes with
 * `status` or its HTTP error, a database outage as `databaseOutage` answers it.
 */
const authorizedAnswer = (method: "GET" | "POST", path: string, status: number) =>
  Effect.gen(function* () {
    const verifier = yield* CredentialVerifier
    const rule = (yield* RouteScopes).get(routeKey(method, path))
    return (
      request: HttpServerRequest.HttpServerRequest,
      run: (actor: AuthenticatedActor) => Effect.Effect<JsonBytes, HttpError>
    ) =>
      databaseOutage(
        authorize(verifier, rule, request.headers.authorization).pipe(
          Effect.flatMap(run),
          Effect.match({ onFailure: errorResponse, onSuccess: (bytes) => okResponse(bytes, status) })
        )
      )
  })

/**
 * A fast `POST <path>` (a literal path) of a JSON body: a body its `payload` schema decodes (as the
 * router decodes it: `Schema.decodeUnknown`, default options) is authenticated and authorized as
 * the route's `Authentication` middleware would, then answered with `run(actor, payload)`'s bytes
 * and `status`, or its HTTP error. A body the schema refuses is left to the router, whose answer is
 * the one error body of a decode failure (after the same credential check, as there).
 */
export const fastPost = <A, I>(
  path: string,
  payload: Schema.Schema<A, I>,
  status: number,
  run: (actor: AuthenticatedActor, payload: A) => Effect.Effect<JsonBytes, HttpError>
): Effect.Effect<FastRoute, never, CredentialVerifier | RouteScopes> =>
  Effect.gen(function* () {
    const answer = yield* authorizedAnswer("POST", path, status)
    const decode = Schema.decodeUnknownOption(payload)
    return {
      method: "POST",
      path,
      answer: (request, body) => {
        const decoded = decode(body)
        return Option.isNone(decoded) ? undefined : answer(request, (actor) => run(actor, decoded.value))
      }
    }
  })

/** The `GET` paths of `api` without parameters (`/user/me`-like literals a fast route must not take). */
export const literalGetPaths = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  api: HttpApi.HttpApi<Id, Groups, E, R>
): ReadonlySet<string> => {
  const paths = new Set<string>()
  HttpApi.reflect(api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => {
      if (endpoint.method === "GET" && !endpoint.path.includes("/:")) paths.add(endpoint.path)
    }
  })
  return paths
}

/** Picks the fast answer of a request, or `undefined` to leave it to the router. */
export type FastRouteMatcher = (
  request: HttpServerRequest.HttpServerRequest
) =>
  | Effect.Effect<HttpServerResponse.HttpServerResponse, never, HttpServerRequest.HttpServerRequest>
  | undefined

/**
 * The parameters of a query string (`a=1&b=2`), or `undefined` when a name comes twice or a NUL is
 * encoded in it (the middleware's query check answers that, on the router's way).
 */
const plainQuery = (query: string): Record<string, string> | undefined => {
  if (/%00/i.test(query)) return undefined
  const out: Record<string, string> = {}
  for (const [name, value] of new URLSearchParams(query)) {
    if (Object.hasOwn(out, name)) return undefined
    out[name] = value
  }
  return out
}

/**
 * The matcher of `routes`: a `GET` whose URL is a route's prefix and one plain segment, without a
 * query string, unless another route has that literal path (`literals`); a `GET` of a query
 * route's path with a query string whose names come once each; everything else is left to the
 * router (`undefined`).
 */
export const fastRouteMatcher = (
  routes: ReadonlyArray<FastRoute>,
  literals: ReadonlySet<string>
): FastRouteMatcher | undefined => {
  const byPrefix = new Map<string, FastRead>()
  const byPath = new Map<string, FastQueryRead>()
  for (const route of routes) {
    if (route.method !== "GET") continue
    if (route.query === true) {
      byPath.set(route.path, route)
      continue
    }
    const colon = route.path.lastIndexOf("/:")
    if (colon < 0) throw new Error(`a fast route ends in /:param: ${route.path}`)
    byPrefix.set(route.path.slice(0, colon + 1), route)
  }
  if (byPrefix.size === 0 && byPath.size === 0) return undefined
  return (request) => {
    if (request.method !== "GET") return undefined
    const url = request.url
    const mark = url.indexOf("?")
    if (mark >= 0) {
      const route = byPath.get(url.slice(0, mark))
      const params = route === undefined ? undefined : plainQuery(url.slice(mark + 1))
      return params === undefined ? undefined : route?.answer(request, params)
    }
    const slash = url.lastIndexOf("/")
    const route = slash > 0 ? byPrefix.get(url.slice(0, slash + 1)) : undefined
    if (route === undefined || literals.has(url)) return undefined
    const param = url.slice(slash + 1)
    return PLAIN_SEGMENT.test(param) ? route.answer(request, param) : undefined
  }
}

/** Picks the fast answer of a request with a JSON body, or `undefined` to leave it to the router. */
export type FastCommandMatcher = (
  request: HttpServerRequest.HttpServerRequest,
  body: unknown
) =>
  | Effect.Effect<HttpServerResponse.HttpServerResponse, never, HttpServerRequest.HttpServerRequest>
  | undefined

/**
 * The matcher of the fast commands among `routes`: a `POST` to exactly a route's path (no query
 * string) that asks for no idempotent replay (an `Idempotency-Key` is the guard's to claim, so such
 * a request goes to the router); everything else is left to the router (`undefined`).
 */
export const fastCommandMatcher = (routes: ReadonlyArray<FastRoute>): FastCommandMatcher | undefined => {
  const byPath = new Map<string, FastCommand>()
  for (const route of routes) if (route.method === "POST") byPath.set(route.path, route)
  if (byPath.size === 0) return undefined
  return (request, body) => {
    if (request.method !== "POST" || request.headers[IDEMPOTENCY_KEY_HEADER] !== undefined) return undefined
    return byPath.get(request.url)?.answer(request, body)
  }
}
