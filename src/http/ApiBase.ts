/**
 * What every part of the HTTP contract shares: `ApiBase` (the API's id and the errors every endpoint
 * can answer, declared once so the OpenAPI document shows the real error body everywhere) and the
 * system group (`/health`, `/ready`). Each context builds its groups' handlers against
 * `ApiBase.add(<its groups>)`; the root `Api` (src/Api.ts) is `ApiBase` with every context's groups.
 */
import { HttpApi, HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import {
  BadRequest,
  InternalError,
  PayloadTooLarge,
  ServiceUnavailable,
  UnsupportedMediaType
} from "./errors.js"

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
    processors: ReadinessCheck,
    /** With ADMIN_EMAIL: whether that admin exists (it can log in once this is ok). */
    admin: Schema.optional(ReadinessCheck)
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
  .annotate(OpenApi.Title, "System")
  .annotate(
    OpenApi.Description,
    "Liveness and readiness probes for orchestrators and load balancers; no credentials needed."
  ) {}

/**
 * The API's id and its errors, without groups. Handlers of a group are built against
 * `ApiBase.add(group)`: same id, so the root `Api` (which adds every group) accepts them.
 */
export const ApiBase = HttpApi.make("commerce-platform")
  .addError(BadRequest)
  .addError(PayloadTooLarge)
  .addError(UnsupportedMediaType)
  .addError(InternalError)
  // Any route, while the database cannot be reached (`service_unavailable`, with Retry-After).
  .addError(ServiceUnavailable)
