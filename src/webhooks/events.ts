/**
 * Webhook endpoint and delivery events. An endpoint's signing secret is `Personal` under the
 * endpoint's own subject: it rests encrypted in the event store, the read model never holds it, and
 * deleting the endpoint destroys its key (the secret is shredded with it). It is also `Secret`: the
 * signer reads it, but it leaves the process (audit feed, export) only as `"[secret]"`.
 */
import { Schema } from "effect"
import { defineEvent, type EventOf, Personal, Secret } from "../eventstore/EventType.js"
import { Metadata } from "../kernel/Metadata.js"

export const WebhookStatus = Schema.Literal("active", "failing", "disabled")
export type WebhookStatus = typeof WebhookStatus.Type

const Creator = Schema.Struct({
  type: Schema.Literal("user", "api_key", "oauth_client", "system"),
  id: Schema.String
})

export const WebhookCreated = defineEvent("webhook.created", {
  schema: Schema.Struct({
    webhookId: Schema.String,
    url: Schema.String,
    events: Schema.Array(Schema.String),
    metadata: Metadata,
    secret: Secret(Personal(Schema.String)),
    /** Who registered it: the owner alerted before an automatic disable. */
    createdBy: Creator
  }),
  subject: (d) => d.webhookId
})

/** Only the fields that changed. */
export const WebhookUpdated = defineEvent("webhook.updated", {
  schema: Schema.Struct({
    webhookId: Schema.String,
    url: Schema.optional(Schema.String),
    events: Schema.optional(Schema.Array(Schema.String)),
    metadata: Schema.optional(Metadata)
  })
})

/** The new secret signs from now on; the previous one is also sent until `previousSecretExpiresAt`. */
export const WebhookSecretRotated = defineEvent("webhook.secret_rotated", {
  schema: Schema.Struct({
    webhookId: Schema.String,
    secret: Secret(Personal(Schema.String)),
    previousSecretExpiresAt: Schema.Date
  }),
  subject: (d) => d.webhookId
})

/** A delivery exhausted its 7 attempts: the endpoint's failure clock starts at `failingSince`. */
export const WebhookFailing = defineEvent("webhook.failing", {
  schema: Schema.Struct({ webhookId: Schema.String, failingSince: Schema.Date, deliveryId: Schema.String })
})

/** Back to `active`: a delivery succeeded (`deliveryId`) or staff re-enabled it. */
export const WebhookRecovered = defineEvent("webhook.recovered", {
  schema: Schema.Struct({ webhookId: Schema.String, deliveryId: Schema.optional(Schema.String) })
})

export const DisableReason = Schema.Literal("failing", "gone", "manual")
export type DisableReason = typeof DisableReason.Type

export const WebhookDisabled = defineEvent("webhook.disabled", {
  schema: Schema.Struct({
    webhookId: Schema.String,
    reason: DisableReason,
    /** `failing`: since when it had failed; `gone`: the delivery that got 410. */
    failingSince: Schema.optional(Schema.Date),
    deliveryId: Schema.optional(Schema.String)
  })
})

export const WebhookEnabled = defineEvent("webhook.enabled", {
  schema: Schema.Struct({ webhookId: Schema.String })
})

export const WebhookDeleted = defineEvent("webhook.deleted", {
  schema: Schema.Struct({ webhookId: Schema.String })
})

export const webhookEventTypes = [
  WebhookCreated,
  WebhookUpdated,
  WebhookSecretRotated,
  WebhookFailing,
  WebhookRecovered,
  WebhookDisabled,
  WebhookEnabled,
  WebhookDeleted
] as const
export type WebhookEvent = EventOf<(typeof webhookEventTypes)[number]>

/** One public event for one endpoint (idempotent on that pair: the id derives from both). */
export const DeliveryCreated = defineEvent("webhook_delivery.created", {
  schema: Schema.Struct({
    deliveryId: Schema.String,
    webhookId: Schema.String,
    eventId: Schema.String,
    eventType: Schema.String
  })
})

/** `auto` (scheduled) or `manual` (redeliver, recover). */
export const AttemptTrigger = Schema.Literal("auto", "manual")
export type AttemptTrigger = typeof AttemptTrigger.Type

/** One HTTP attempt of a delivery, as its event records it and the delivery log shows it. */
export const attemptFields = {
  /** 1-based over the delivery's life (manual attempts included). */
  attempt: Schema.Int,
  trigger: AttemptTrigger,
  attemptedAt: Schema.Date,
  succeeded: Schema.Boolean,
  statusCode: Schema.NullOr(Schema.Int),
  durationMs: Schema.Int,
  /** `http`, `redirect`, `timeout`, `connect`, `dns`, `tls` or `blocked_ip`. */
  errorClass: Schema.NullOr(Schema.String),
  error: Schema.NullOr(Schema.String),
  /** The start of the response body (at most 2048 characters). */
  responseExcerpt: Schema.NullOr(Schema.String),
  /** When the next attempt was scheduled, after a failure. */
  nextAttemptAt: Schema.NullOr(Schema.Date)
}
export type Attempt = Schema.Struct.Type<typeof attemptFields>

/** One HTTP attempt and what it led to: success, another attempt at `nextAttemptAt`, or the end. */
export const DeliveryAttempted = defineEvent("webhook_delivery.attempted", {
  schema: Schema.Struct({ deliveryId: Schema.String, webhookId: Schema.String, ...attemptFields })
})

/** Staff asked for it again (`redeliver` or `recover`): one more attempt, same delivery id. */
export const DeliveryRedeliveryRequested = defineEvent("webhook_delivery.redelivery_requested", {
  schema: Schema.Struct({
    deliveryId: Schema.String,
    webhookId: Schema.String,
    source: Schema.Literal("redeliver", "recover")
  })
})

/** Never attempted (again): the endpoint was disabled or deleted meanwhile. */
export const DeliveryAbandoned = defineEvent("webhook_delivery.abandoned", {
  schema: Schema.Struct({ deliveryId: Schema.String, webhookId: Schema.String, reason: Schema.String })
})

export const deliveryEventTypes = [
  DeliveryCreated,
  DeliveryAttempted,
  DeliveryRedeliveryRequested,
  DeliveryAbandoned
] as const
export type DeliveryEvent = EventOf<(typeof deliveryEventTypes)[number]>
