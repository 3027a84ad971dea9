/**
 * The root HttpApi: the service's whole HTTP contract, `ApiBase` (http/ApiBase.ts: id and shared
 * errors) with the system group and every context's routes (`<context>/Api.ts`, registered by its
 * `module.ts`), and `ApiLive`, every group's handlers. One line per context in each: the groups'
 * static types are what the handlers and the OpenAPI document are checked against.
 */
import { HttpApi, HttpApiBuilder, OpenApi } from "@effect/platform"
import { Effect, Layer } from "effect"
import { billingModule } from "./billing/module.js"
import { catalogModule } from "./catalog/module.js"
import { checkoutModule } from "./checkout/module.js"
import { customersModule } from "./customers/module.js"
import { eventsModule } from "./events/module.js"
import { ApiBase, SystemApi } from "./http/ApiBase.js"
import { type RouteRule, routeScopesOf } from "./http/Auth.js"
import { Conflict, IdempotencyKeyReused, TooManyRequests } from "./http/errors.js"
import { FastRoutes } from "./http/FastRoutes.js"
import { type AllowedMethods, allowedMethods } from "./http/middleware.js"
import { cleanOpenApi, documentHttpConventions, documentScopes } from "./http/openapi.js"
import { SystemHttpLive } from "./http/SystemHttp.js"
import { identityModule } from "./identity/module.js"
import { notificationsModule } from "./notifications/module.js"
import { ordersModule } from "./orders/module.js"
import { paymentsModule } from "./payments/module.js"
import { webhooksModule } from "./webhooks/module.js"

/** The scopes of `Api`'s routes, for its OpenAPI document (filled in once `Api` is defined, below). */
let apiScopes: ReadonlyMap<string, RouteRule> = new Map()
/** Which methods each of `Api`'s paths answers, for its 405s (filled in likewise). */
let apiAllow: AllowedMethods = () => undefined

export class Api extends ApiBase.add(SystemApi)
  .addHttpApi(identityModule.routes)
  .addHttpApi(customersModule.routes)
  .addHttpApi(notificationsModule.routes)
  .addHttpApi(webhooksModule.routes)
  .addHttpApi(catalogModule.routes)
  .addHttpApi(eventsModule.routes)
  .addHttpApi(paymentsModule.routes)
  .addHttpApi(ordersModule.routes)
  .addHttpApi(checkoutModule.routes)
  .addHttpApi(billingModule.routes)
  .annotate(OpenApi.Title, "commerce-platform")
  .annotate(OpenApi.Version, "0.1.0")
  .annotate(OpenApi.License, { name: "MIT", url: "https://opensource.org/licenses/MIT" })
  // Relative: the document is served by the service it describes, wherever that is deployed.
  .annotate(OpenApi.Servers, [{ url: "/", description: "The service that serves this document" }])
  // The error bodies the middleware answers with (idempotency keys, rate limits) on any operation.
  .annotate(HttpApi.AdditionalSchemas, [Conflict, IdempotencyKeyReused, TooManyRequests])
  .annotate(OpenApi.Transform, (spec) =>
    documentHttpConventions(documentScopes(cleanOpenApi(spec), apiScopes), apiAllow)
  )
  .annotate(
    OpenApi.Description,
    "Self-hostable, event-sourced commerce back end. Every error has the body " +
      '{ "error": { "type", "code", "message", "param"?, "requestId" } }; every response carries ' +
      "Request-Id. POST, PUT, PATCH and DELETE accept an Idempotency-Key; `/v1` and the credential " +
      "routes of `/auth` are rate limited (RateLimit-* headers, 429 with Retry-After). A method a path " +
      "does not serve → 405 with Allow."
  ) {}

apiScopes = routeScopesOf(Api)
apiAllow = allowedMethods(Api)

/** Every group's handlers. */
export const ApiLive = HttpApiBuilder.api(Api).pipe(
  Layer.provide([
    SystemHttpLive,
    identityModule.http,
    customersModule.http,
    notificationsModule.http,
    webhooksModule.http,
    catalogModule.http,
    eventsModule.http,
    paymentsModule.http,
    ordersModule.http,
    checkoutModule.http,
    billingModule.http
  ])
)

/** The routes answered before the router (http/FastRoutes.ts), from the contexts that have some. */
export const FastRoutesLive = Layer.effect(
  FastRoutes,
  Effect.map(
    Effect.all([
      customersModule.fastRoutes,
      catalogModule.fastRoutes,
      ordersModule.fastRoutes,
      billingModule.fastRoutes
    ]),
    (routes) => routes.flat()
  )
)
