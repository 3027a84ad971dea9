/**
 * What the contexts' endpoint declarations share, each said once and applied with `.pipe(…)`:
 *
 *   HttpApiEndpoint.put("update", "/webhook/:id")
 *     .setPayload(WebhookPatch)
 *     .addSuccess(Webhook)
 *     .pipe(scoped("write:webhooks"), byId)
 *
 * `scoped`: the scope the authentication middleware checks, and the 403 it answers without it.
 * `byId`: one resource named by the `:id` path parameter, and the 404 when there is none.
 */
import type { HttpApiEndpoint } from "@effect/platform/HttpApiEndpoint"
import type { HttpMethod } from "@effect/platform/HttpMethod"
import { Schema } from "effect"
import { RequiredScope } from "./Auth.js"
import { Forbidden, NotFound } from "./errors.js"

/** The `:id` path parameter of a route on one resource. */
export const IdPath = Schema.Struct({ id: Schema.String })

/** An endpoint behind a scope (`read:webhooks`, `admin`…): a credential without it gets 403. */
export const scoped =
  (scope: string) =>
  <N extends string, M extends HttpMethod, P, U, B, H, S, E, R, RE>(
    endpoint: HttpApiEndpoint<N, M, P, U, B, H, S, E, R, RE>
  ) =>
    endpoint.addError(Forbidden).annotate(RequiredScope, scope)

/** An endpoint on one resource (`…/:id`): its id in the path, and 404 when there is no such resource. */
export const byId = <N extends string, M extends HttpMethod, P, U, B, H, S, E, R, RE>(
  endpoint: HttpApiEndpoint<N, M, P, U, B, H, S, E, R, RE>
) => endpoint.setPath(IdPath).addError(NotFound)
