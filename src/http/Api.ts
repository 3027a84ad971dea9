/**
 * The root HttpApi: the service's whole HTTP contract. Each bounded context contributes its groups
 * (`<context>/Api.ts`); handlers live apart (`<context>/Http.ts`). Errors every endpoint can answer
 * are declared once here, so the OpenAPI document shows the real error body everywhere.
 */
import { HttpApi, HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { CustomersApi } from "../customers/Api.js"
import { AccountApi, ApiKeysApi, AuthApi, OAuthClientsApi } from "../identity/Api.js"
import { NotificationsApi } from "../notifications/Api.js"
import { V1WebhooksApi, WebhooksApi } from "../webhooks/Api.js"
import { type RouteRule, routeScopesOf } from "./Auth.js"
import {
  BadRequest,
  InternalError,
  PayloadTooLarge,
  ServiceUnavailable,
  UnsupportedMediaType
} from "./errors.js"
import { cleanOpenApi, documentScopes } from "./openapi.js"

export const Health = Schema.Struct({ status: Schema.Literal("ok") }).annotations({ identifier: "Health" })

export const ReadinessCheck = Schema.Struct({
  ok: Schema.Boolean,
  detail: Schema.String
}).annotations({ identifier: "ReadinessCheck" })

export const Readiness = Schema.Struct({
  status: Schema.Literal("ready", "not_ready"),
  checks: Schema.Struct({
    database: ReadinessCheck,
    migrations: ReadinessCheck,
    processors: ReadinessCheck
  })
}).annotations({ identifier: "Readiness" })
export type Readiness = typeof Readiness.Type

export class SystemApi extends HttpApiGroup.make("system", { topLevel: true })
  .add(
    HttpApiEndpoint.get("health", "/health")
      .addSuccess(Health)
      .annotate(OpenApi.Summary, "Liveness: the process is up")
  )
  .add(
    HttpApiEndpoint.get("ready", "/ready")
      .addSuccess(Readiness)
      .addError(ServiceUnavailable)
      .annotate(OpenApi.Summary, "Readiness: database reachable, migrations applied, processors leased")
  )
  .annotate(OpenApi.Title, "System") {}

/** The scopes of `Api`'s routes, for its OpenAPI document (filled in once `Api` is defined, below). */
let apiScopes: ReadonlyMap<string, RouteRule> = new Map()

export class Api extends HttpApi.make("commerce-platform")
  .add(SystemApi)
  .add(AuthApi)
  .add(AccountApi)
  .add(ApiKeysApi)
  .add(OAuthClientsApi)
  .add(CustomersApi)
  .add(NotificationsApi)
  .add(WebhooksApi)
  .add(V1WebhooksApi)
  .addError(BadRequest)
  .addError(PayloadTooLarge)
  .addError(UnsupportedMediaType)
  .addError(InternalError)
  .annotate(OpenApi.Title, "commerce-platform")
  .annotate(OpenApi.Version, "0.1.0")
  .annotate(OpenApi.Transform, (spec) => documentScopes(cleanOpenApi(spec), apiScopes))
  .annotate(
    OpenApi.Description,
    "Self-hostable, event-sourced commerce back end. Every error has the body " +
      '{ "error": { "type", "code", "message", "param"?, "requestId" } }; every response carries Request-Id.'
  ) {}

apiScopes = routeScopesOf(Api)
