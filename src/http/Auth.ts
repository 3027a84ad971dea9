/**
 * One authentication middleware for every protected group of both surfaces. It accepts
 * `Authorization: Bearer <credential>` where the credential is a JWT access token, an API key
 * (`sk_…`) or a client-credentials token; a `CredentialVerifier` (supplied by the identity context)
 * turns it into the current actor. Authorization is a scope check per endpoint (`<action>:<resource>`).
 */
import {
  HttpApi,
  type HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSecurity,
  HttpRouter,
  HttpServerRequest,
  OpenApi
} from "@effect/platform"
import { Context, Effect, Layer, Option, Schema } from "effect"
import type { Actor } from "../eventstore/EventStore.js"
import { Forbidden, Unauthorized } from "./errors.js"

export interface AuthenticatedActor extends Actor {
  /** `admin` or `customer` for users; absent for API keys and OAuth clients. */
  readonly role?: "admin" | "customer"
  /** Granted scopes, `<action>:<resource>`; `admin` (or `*`) grants everything. */
  readonly scopes: ReadonlySet<string>
  /** For customers: the customer record they own. */
  readonly customerId?: string
  /** For access tokens: the token's id (`jti`) and, for users, its session. */
  readonly tokenId?: string
  readonly sessionId?: string
}

export class CurrentActor extends Context.Tag("CurrentActor")<CurrentActor, AuthenticatedActor>() {}

export interface CredentialVerifierShape {
  readonly verify: (credential: string) => Effect.Effect<AuthenticatedActor, Unauthorized>
}

export class CredentialVerifier extends Context.Tag("CredentialVerifier")<
  CredentialVerifier,
  CredentialVerifierShape
>() {}

const bearer = HttpApiSecurity.bearer.pipe(
  HttpApiSecurity.annotate(
    OpenApi.Description,
    "An access token (JWT), an API key (sk_…) or a client-credentials token"
  )
)

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Authentication", {
  failure: Schema.Union(Unauthorized, Forbidden),
  provides: CurrentActor,
  security: { bearer }
}) {}

const missing = Unauthorized.of({
  code: "missing_credentials",
  message: "authentication required: send Authorization: Bearer <token or API key>"
})

/** The actor behind an `Authorization: Bearer <credential>` header (REST and RPC alike). */
export const authenticate = (
  verifier: CredentialVerifierShape,
  authorization: string | undefined
): Effect.Effect<AuthenticatedActor, Unauthorized> => {
  const credential = /^bearer\s+(\S.*)$/i.exec((authorization ?? "").trim())?.[1]?.trim()
  return credential ? verifier.verify(credential) : Effect.fail(missing)
}

/**
 * The actor behind `authorization`, if it may call a route with `rule` (its scope; staff only):
 * 401 without a valid credential, 403 without the scope. The `Authentication` middleware and the
 * fast routes (http/FastRoutes.ts) both check with it.
 */
export const authorize = (
  verifier: CredentialVerifierShape,
  rule: RouteRule | undefined,
  authorization: string | undefined
): Effect.Effect<AuthenticatedActor, Unauthorized | Forbidden> =>
  Effect.flatMap(authenticate(verifier, authorization), (actor) => {
    if (rule === undefined) return Effect.succeed(actor)
    if (!hasScope(actor, rule.scope)) return Effect.fail(insufficient(rule.scope))
    if (rule.staffOnly && actor.role === "customer") return Effect.fail(staffOnly)
    return Effect.succeed(actor)
  })

/**
 * Authenticates, then authorizes by the route's `RequiredScope` annotation — before the request
 * body is read, so a credential without the scope gets 403 whatever it sends.
 */
export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.gen(function* () {
    const verifier = yield* CredentialVerifier
    const scopes = yield* RouteScopes
    return Authentication.of({
      // The platform's decoded token is "" for a missing header and ignores the scheme: read the
      // header itself instead.
      // Runs on every authenticated request: plain steps, no generator.
      bearer: () =>
        Effect.withFiberRuntime((fiber) => {
          const context = fiber.currentContext
          const request = Context.unsafeGet(context, HttpServerRequest.HttpServerRequest)
          const route = Context.getOption(context, HttpRouter.RouteContext)
          const rule = Option.flatMapNullable(route, (r) =>
            scopes.get(routeKey(r.route.method, r.route.path))
          )
          return authorize(verifier, Option.getOrUndefined(rule), request.headers.authorization)
        })
    })
  })
)

/** Until the identity context supplies credentials, every credential is refused. */
export const NoCredentialVerifier = Layer.succeed(CredentialVerifier, {
  verify: () =>
    Effect.fail(Unauthorized.of({ code: "invalid_token", message: "the credential is not valid" }))
})

/** The scope that grants every other one (the admin role, or a credential granted `admin`). */
export const ADMIN_SCOPE = "admin"

export const hasScope = (actor: AuthenticatedActor, scope: string): boolean =>
  actor.role === "admin" || actor.scopes.has(ADMIN_SCOPE) || actor.scopes.has("*") || actor.scopes.has(scope)

const insufficient = (scope: string) =>
  Forbidden.of({ code: "insufficient_scope", message: `this credential lacks the ${scope} scope` })

const staffOnly = Forbidden.of({
  code: "insufficient_scope",
  message: "this operation needs a staff credential (an admin user, an API key or an OAuth client)"
})

/** Fails with 403 `insufficient_scope` unless the current actor holds `scope`. */
export const requireScope = (scope: string) =>
  Effect.flatMap(CurrentActor, (actor) =>
    hasScope(actor, scope) ? Effect.succeed(actor) : Effect.fail(insufficient(scope))
  )

/**
 * The scope an endpoint (or a whole group) requires, as an annotation on the route table. The
 * authentication middleware enforces it; the authorization-matrix tests read it.
 */
export class RequiredScope extends Context.Tag("http/RequiredScope")<RequiredScope, string>() {}

/**
 * An endpoint shoppers may not call even though their role holds its scope (creating, tagging or
 * erasing customers acts on other records than their own): their tokens get 403.
 */
export class StaffOnly extends Context.Tag("http/StaffOnly")<StaffOnly, boolean>() {}

export const routeKey = (method: string, path: string): string => `${method.toUpperCase()} ${path}`

export interface RouteRule {
  readonly scope: string
  readonly staffOnly: boolean
}

/** `METHOD /path/:param` → what it requires, from the HttpApi's `RequiredScope`/`StaffOnly` annotations. */
export class RouteScopes extends Context.Tag("http/RouteScopes")<
  RouteScopes,
  ReadonlyMap<string, RouteRule>
>() {}

export const routeScopesOf = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  api: HttpApi.HttpApi<Id, Groups, E, R>
): ReadonlyMap<string, RouteRule> => {
  const table = new Map<string, RouteRule>()
  HttpApi.reflect(api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint, mergedAnnotations }) => {
      const scope = Context.getOption(mergedAnnotations, RequiredScope)
      if (Option.isNone(scope)) return
      table.set(routeKey(endpoint.method, endpoint.path), {
        scope: scope.value,
        staffOnly: Option.getOrElse(Context.getOption(mergedAnnotations, StaffOnly), () => false)
      })
    }
  })
  return table
}

/** For an API without `RequiredScope` annotations (handlers check scopes themselves). */
export const NoRouteScopes = Layer.succeed(RouteScopes, new Map<string, RouteRule>())
