/**
 * The webhooks HTTP contract (spec §2.5, §4.3, §4.5, §6; design/API.md, design/WEBHOOKS-NOTIFICATIONS.md):
 * the endpoint registry on the base surface (`/webhook`, with secret rotation, test sends, the
 * delivery log, redelivery and recovery) and the same registry on the commerce surface
 * (`/v1/webhooks`, Stripe's shapes). Staff credentials with the `webhooks` scopes only; shoppers have
 * no access.
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Arbitrary, Schema } from "effect"
import { ApiBase } from "../http/ApiBase.js"
import { Authentication } from "../http/Auth.js"
import { byId, scoped } from "../http/Endpoints.js"
import { Conflict, NotFound } from "../http/errors.js"
import { Instant, StoredUrl } from "../http/Fields.js"
import { ListOf, PageParams, V1List, v1ListParams } from "../http/Lists.js"
import { Metadata, MetadataInput } from "../kernel/Metadata.js"
import { WEBHOOK_EVENT_TYPES } from "./catalogue.js"
import { attemptFields, WebhookStatus } from "./events.js"

export const DELIVERY_STATUSES = ["pending", "succeeded", "failed"] as const
const SETTABLE_STATUSES = ["active", "failing", "disabled"] as const

const MetadataObject = MetadataInput.annotations({ message: () => "metadata must be a JSON object" })

// --- Shapes ----------------------------------------------------------------------------------------

/** A webhook endpoint as `GET`/`PUT` show it: everything but the secret. */
export const Webhook = Schema.Struct({
  id: Schema.String,
  url: StoredUrl,
  events: Schema.Array(Schema.String),
  /** `active` on creation; `failing` after a delivery exhausted its attempts; `disabled`. */
  status: WebhookStatus,
  metadata: Metadata,
  /** When the endpoint started failing (status `failing`; kept while disabled for failing). */
  failingSince: Schema.NullOr(Schema.Date),
  /** Why it is disabled: `manual`, `failing` (3 days of failures) or `gone` (410 from the endpoint). */
  disabledReason: Schema.NullOr(Schema.String),
  /** Until when the secret before the last rotation still signs deliveries. */
  previousSecretExpiresAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "Webhook" })

/** The list shape of spec §4.3 (no secret, no metadata). */
export const WebhookSummary = Webhook.pick("id", "url", "events", "status", "createdAt").annotations({
  identifier: "WebhookSummary"
})

/** What creation answers: the webhook with its signing secret, shown this once. */
export const WebhookWithSecret = Schema.Struct({
  ...Webhook.fields,
  /** `whsec_` + 32 random bytes in base64: keep it, it is never shown again. */
  secret: Schema.String
}).annotations({ identifier: "WebhookWithSecret" })

export const SecretRotation = Schema.Struct({
  /** The new signing secret, shown this once. */
  secret: Schema.String,
  /** Until then deliveries carry a signature with the previous secret too. */
  previousSecretExpiresAt: Schema.Date
}).annotations({ identifier: "WebhookSecretRotation" })

export const TestDelivery = Schema.Struct({
  /** The endpoint answered 2xx. */
  delivered: Schema.Boolean,
  /** Null when no response came (refused, time-out, blocked address). */
  statusCode: Schema.NullOr(Schema.Int),
  durationMs: Schema.Int,
  error: Schema.optional(Schema.String),
  /** `http`, `redirect`, `timeout`, `connect`, `dns`, `tls` or `blocked_ip`. */
  errorClass: Schema.optional(Schema.String),
  /** `X-Service-Delivery` of the test request (not in the delivery log). */
  deliveryId: Schema.String,
  /** The sample event's id, inside the body. */
  eventId: Schema.String
}).annotations({ identifier: "WebhookTestResult" })

export const DeliveryAttempt = Schema.Struct(attemptFields).annotations({
  identifier: "WebhookDeliveryAttempt"
})

export const Delivery = Schema.Struct({
  id: Schema.String,
  webhookId: Schema.String,
  eventId: Schema.String,
  eventType: Schema.String,
  status: Schema.Literal(...DELIVERY_STATUSES),
  attemptCount: Schema.Int,
  lastStatusCode: Schema.NullOr(Schema.Int),
  lastError: Schema.NullOr(Schema.String),
  nextAttemptAt: Schema.NullOr(Schema.Date),
  succeededAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date,
  updatedAt: Schema.Date,
  attempts: Schema.Array(DeliveryAttempt)
}).annotations({ identifier: "WebhookDelivery" })

export const Recovery = Schema.Struct({
  /** Failed deliveries queued again (at most 1000 per call). */
  recovered: Schema.Int,
  deliveryIds: Schema.Array(Schema.String),
  /** More failed deliveries remain: call again. */
  hasMore: Schema.Boolean
}).annotations({ identifier: "WebhookRecovery" })

/** `/v1/webhooks`: Stripe's webhook endpoint object. */
export const V1WebhookEndpoint = Schema.Struct({
  object: Schema.Literal("webhook_endpoint"),
  ...Webhook.pick("id", "url", "events", "status", "metadata", "createdAt", "updatedAt").fields
}).annotations({ identifier: "V1WebhookEndpoint" })

export const V1WebhookEndpointWithSecret = Schema.Struct({
  ...V1WebhookEndpoint.fields,
  secret: Schema.String
}).annotations({ identifier: "V1WebhookEndpointWithSecret" })

/** Stripe's deleted-object shape. */
export const V1DeletedWebhookEndpoint = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("webhook_endpoint"),
  deleted: Schema.Literal(true)
}).annotations({ identifier: "V1DeletedWebhookEndpoint" })

// --- Requests --------------------------------------------------------------------------------------

// The rules below are checked by the use case (its messages name what is wrong); the annotations
// state the same rules in the OpenAPI document and in the requests drawn from these schemas, so a
// request valid by the document is one the service accepts (test/http/schema-property.test.ts).

/** An http(s) URL with a DNS name or an IPv4 address: what `new URL` and the shape check accept. */
const URL_PATTERN =
  "^https?://(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\.)*[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?" +
  "|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9]))" +
  "(?::[0-9]{1,4})?(?:[/?#][A-Za-z0-9._~!$&'()*+,;=:@%/?#-]*)?$"

const Url = Schema.String.annotations({
  message: () => "url must be a string",
  jsonSchema: { type: "string", pattern: URL_PATTERN, maxLength: 2048 },
  arbitrary: () => (fc) => fc.stringMatching(new RegExp(URL_PATTERN)).filter((url) => url.length <= 2048)
})

/** Element errors too answer with this one message (and `param: "events"`). */
const EventTypes = Schema.Array(Schema.String).annotations({
  message: () => ({ message: "events must be an array of event type strings", override: true }),
  jsonSchema: {
    type: "array",
    items: { type: "string", enum: [...WEBHOOK_EVENT_TYPES] },
    minItems: 1
  },
  arbitrary: () => (fc) => fc.array(fc.constantFrom(...WEBHOOK_EVENT_TYPES), { minLength: 1, maxLength: 5 })
})

/** `failing` decodes so that the use case can say why it cannot be set; the document leaves it out. */
const SettableStatus = Schema.Literal(...SETTABLE_STATUSES).annotations({
  message: () => ({ message: "status must be one of active, disabled", override: true }),
  jsonSchema: { type: "string", enum: ["active", "disabled"] },
  arbitrary: () => (fc) => fc.constantFrom("active" as const, "disabled" as const)
})

export const NewWebhook = Schema.Struct({
  url: Url,
  events: EventTypes,
  metadata: Schema.optional(MetadataObject)
})

const WebhookPatchFields = Schema.Struct({
  url: Schema.optional(Url),
  events: Schema.optional(EventTypes),
  metadata: Schema.optional(Schema.NullOr(MetadataObject)),
  status: Schema.optional(SettableStatus)
})

/** At least one field (the use case answers 400 `parameter_missing` for an empty patch). */
export const WebhookPatch = WebhookPatchFields.annotations({
  jsonSchema: { minProperties: 1 },
  arbitrary: () => () =>
    Arbitrary.make(WebhookPatchFields).filter((patch) => Object.values(patch).some((v) => v !== undefined))
})

export const RotateParams = Schema.Struct({
  force: Schema.optional(
    Schema.Literal("true", "false").annotations({ message: () => "force must be true or false" })
  )
})

export const TestRequest = Schema.Struct({
  event: Schema.String.annotations({
    message: () => "event must be a string (an event type)",
    jsonSchema: { type: "string", enum: [...WEBHOOK_EVENT_TYPES] },
    arbitrary: () => (fc) => fc.constantFrom(...WEBHOOK_EVENT_TYPES)
  })
})

export const RecoverRequest = Schema.Struct({ since: Instant("since") })

export const DeliveryListParams = Schema.Struct({
  ...PageParams.fields,
  status: Schema.optional(
    Schema.Literal(...DELIVERY_STATUSES).annotations({
      message: () => ({ message: `status must be one of ${DELIVERY_STATUSES.join(", ")}`, override: true })
    })
  ),
  eventId: Schema.optional(
    Schema.String.pipe(Schema.maxLength(100, { message: () => "eventId must be an event id (evt_…)" }))
  )
})

const DeliveryPath = Schema.Struct({ id: Schema.String, delivery_id: Schema.String })

// --- Endpoints ---------------------------------------------------------------------------------------

const URL_RULES =
  "`url` must be http(s), at most 2048 characters; hosts on loopback, private, link-local or metadata " +
  "addresses are refused (400) unless `WEBHOOK_ALLOW_PRIVATE=true`."
const EVENTS_RULES = `\`events\` lists at least one of ${WEBHOOK_EVENT_TYPES.join(", ")} (duplicates dropped).`

export class WebhooksApi extends HttpApiGroup.make("webhooks")
  .add(
    HttpApiEndpoint.get("list", "/webhook")
      .setUrlParams(PageParams)
      .addSuccess(ListOf(WebhookSummary, "WebhookList"))
      .pipe(scoped("read:webhooks"))
      .annotate(OpenApi.Summary, "List webhook endpoints, oldest first (no secret, no metadata)")
      .annotate(OpenApi.Description, "`page` ≥ 1, `display` 1–100 (default 20).")
  )
  .add(
    HttpApiEndpoint.get("get", "/webhook/:id")
      .addSuccess(Webhook)
      .pipe(scoped("read:webhooks"), byId)
      .annotate(OpenApi.Summary, "A webhook endpoint with its health (never its secret)")
  )
  .add(
    HttpApiEndpoint.post("create", "/webhook")
      .setPayload(NewWebhook)
      .addSuccess(WebhookWithSecret, { status: 201 })
      .addError(Conflict)
      .pipe(scoped("write:webhooks"))
      .annotate(
        OpenApi.Summary,
        "Register a webhook endpoint; the answer holds its signing secret, shown once"
      )
      .annotate(
        OpenApi.Description,
        `${URL_RULES} ${EVENTS_RULES} Deliveries are signed (X-Service-Signature: hex HMAC-SHA256 of ` +
          "`<X-Service-Timestamp>.<raw body>` keyed with the secret) and carry the Standard Webhooks headers too."
      )
  )
  .add(
    HttpApiEndpoint.put("update", "/webhook/:id")
      .setPayload(WebhookPatch)
      .addSuccess(Webhook)
      .addError(Conflict)
      .pipe(scoped("write:webhooks"), byId)
      .annotate(OpenApi.Summary, "Change a webhook's url, events, metadata or status")
      .annotate(
        OpenApi.Description,
        `Send at least one field. ${URL_RULES} ${EVENTS_RULES} \`metadata\` is merged (a key set to null is ` +
          'removed, `metadata: null` clears it). `status`: `"active"` re-enables a disabled or failing ' +
          'endpoint, `"disabled"` stops its deliveries; `failing` is set by deliveries only (400).'
      )
  )
  .add(
    HttpApiEndpoint.del("remove", "/webhook/:id")
      .addSuccess(HttpApiSchema.NoContent)
      .addError(Conflict)
      .pipe(scoped("write:webhooks"), byId)
      .annotate(OpenApi.Summary, "Delete a webhook endpoint: no more deliveries, its secret is destroyed")
  )
  .add(
    HttpApiEndpoint.post("rotateSecret", "/webhook/:id/rotate-secret")
      .setUrlParams(RotateParams)
      .addSuccess(SecretRotation)
      .addError(Conflict)
      .pipe(scoped("write:webhooks"), byId)
      .annotate(OpenApi.Summary, "Rotate the signing secret; the previous one stays valid 24 hours")
      .annotate(
        OpenApi.Description,
        "During the 24 hours deliveries carry both signatures (X-Service-Signature-Previous). Rotating " +
          "again inside that window → 409 `rotation_in_progress`, unless `?force=true` (which ends the " +
          "previous secret's window early)."
      )
  )
  .add(
    HttpApiEndpoint.post("test", "/webhook/:id/test")
      .setPayload(TestRequest)
      .addSuccess(TestDelivery)
      .pipe(scoped("write:webhooks"), byId)
      .annotate(OpenApi.Summary, "Send a sample event of a type to the endpoint, once, now")
      .annotate(
        OpenApi.Description,
        `\`event\`: one of ${WEBHOOK_EVENT_TYPES.join(", ")}. One synchronous, signed attempt (30 s at most) ` +
          "with a sample `data`; never retried, never counted towards the endpoint's health, not in the " +
          "delivery log. A failed attempt is still a 200, with `delivered: false`."
      )
  )
  .add(
    HttpApiEndpoint.get("deliveries", "/webhook/:id/deliveries")
      .setUrlParams(DeliveryListParams)
      .addSuccess(ListOf(Delivery, "WebhookDeliveryList"))
      .pipe(scoped("read:webhooks"), byId)
      .annotate(OpenApi.Summary, "The endpoint's delivery log, newest first, with every attempt")
      .annotate(
        OpenApi.Description,
        `Filters: \`status\` (${DELIVERY_STATUSES.join(", ")}), \`eventId\`. \`page\` ≥ 1, \`display\` 1–100 (default 20).`
      )
  )
  .add(
    HttpApiEndpoint.post("redeliver", "/webhook/:id/deliveries/:delivery_id/redeliver")
      .setPath(DeliveryPath)
      .addSuccess(Delivery, { status: 202 })
      .addError(NotFound)
      .addError(Conflict)
      .pipe(scoped("write:webhooks"))
      .annotate(OpenApi.Summary, "Queue one more attempt of a delivery (same delivery id)")
      .annotate(
        OpenApi.Description,
        "A pending delivery is tried now. A disabled endpoint → 409 `webhook_disabled` (re-enable it first)."
      )
  )
  .add(
    HttpApiEndpoint.post("recover", "/webhook/:id/recover")
      .setPayload(RecoverRequest)
      .addSuccess(Recovery, { status: 202 })
      .addError(Conflict)
      .pipe(scoped("write:webhooks"), byId)
      .annotate(OpenApi.Summary, "Queue again every failed delivery created since a time")
      .annotate(
        OpenApi.Description,
        "`since` is within the last 14 days and not in the future (else 400). At most 1000 per call " +
          "(`hasMore`: call again). A disabled endpoint → 409 `webhook_disabled`."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Webhooks")
  .annotate(
    OpenApi.Description,
    "Webhook endpoints that receive signed events (Standard Webhooks), their delivery log, redelivery " +
      "and recovery. Staff only."
  ) {}

export class V1WebhooksApi extends HttpApiGroup.make("v1Webhooks")
  .add(
    HttpApiEndpoint.post("create", "/v1/webhooks")
      .setPayload(NewWebhook)
      .addSuccess(V1WebhookEndpointWithSecret, { status: 201 })
      .addError(Conflict)
      .pipe(scoped("write:webhooks"))
      .annotate(
        OpenApi.Summary,
        "Create a webhook endpoint (the registry of /webhook); the secret is shown once"
      )
      .annotate(OpenApi.Description, `${URL_RULES} ${EVENTS_RULES}`)
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/webhooks")
      .setUrlParams(v1ListParams("wh"))
      .addSuccess(V1List(V1WebhookEndpoint, "V1WebhookEndpointList"))
      .pipe(scoped("read:webhooks"))
      .annotate(OpenApi.Summary, "List webhook endpoints, newest first")
      .annotate(
        OpenApi.Description,
        "`limit` 1–100 (default 10); `startingAfter` (an endpoint id: the next, older page) or " +
          "`endingBefore` (the previous, newer page), not both; an id of no endpoint → 400 `resource_missing`."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/webhooks/:id")
      .addSuccess(V1WebhookEndpoint)
      .pipe(scoped("read:webhooks"), byId)
      .annotate(OpenApi.Summary, "A webhook endpoint (never its secret)")
  )
  .add(
    HttpApiEndpoint.del("remove", "/v1/webhooks/:id")
      .addSuccess(V1DeletedWebhookEndpoint)
      .addError(Conflict)
      .pipe(scoped("write:webhooks"), byId)
      .annotate(OpenApi.Summary, "Delete a webhook endpoint")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Webhooks (v1)")
  .annotate(
    OpenApi.Description,
    "The same webhook endpoints on the `/v1` surface, in Stripe's shapes (list objects, keyset " +
      "pagination with `limit`, `startingAfter`, `endingBefore`)."
  ) {}

/** This context's routes on the service's API (`ApiBase`): what its handlers are built against. */
export const WebhooksRoutes = ApiBase.add(WebhooksApi).add(V1WebhooksApi)
