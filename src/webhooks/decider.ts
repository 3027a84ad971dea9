/**
 * The webhook endpoint and delivery aggregates, and the retry schedule (spec §6.4, §3.1). Pure:
 * times come in with the commands, so the deciders are tested without a database or a clock.
 */
import { Data, Effect } from "effect"
import { revealOr } from "../eventstore/EventType.js"
import { defineDecider } from "../kernel/Decider.js"
import { applyMetadataPatch, type Metadata, type MetadataPatch, metadataProblem } from "../kernel/Metadata.js"
import {
  type Attempt,
  DeliveryAbandoned,
  DeliveryAttempted,
  DeliveryCreated,
  type DeliveryEvent,
  DeliveryRedeliveryRequested,
  type DisableReason,
  deliveryEventTypes,
  WebhookCreated,
  WebhookDeleted,
  WebhookDisabled,
  WebhookEnabled,
  type WebhookEvent,
  WebhookFailing,
  WebhookRecovered,
  WebhookSecretRotated,
  type WebhookStatus,
  WebhookUpdated,
  webhookEventTypes
} from "./events.js"

export const webhookStream = (webhookId: string) => `webhook-${webhookId}`
export const deliveryStream = (deliveryId: string) => `webhook_delivery-${deliveryId}`

// --- Schedule (spec §6.4) ---------------------------------------------------------------------------

/** Attempts of one delivery on the automatic schedule. */
export const MAX_ATTEMPTS = 7
/** The wait after the n-th failed attempt (n = 1…6): 1 min, 5 min, 30 min, 2 h, 8 h, 24 h. */
export const RETRY_DELAYS_MS: ReadonlyArray<number> = [
  60_000,
  5 * 60_000,
  30 * 60_000,
  2 * 3_600_000,
  8 * 3_600_000,
  24 * 3_600_000
]
/** Spec §3.1: a webhook failing this long is disabled. */
export const DISABLE_AFTER_MS = 72 * 3_600_000
/** Spec §6.3: the previous secret's validity after a rotation. */
export const PREVIOUS_SECRET_VALIDITY_MS = 24 * 3_600_000

/**
 * When the next automatic attempt is due after the `failedAttempt`-th failed one, or undefined when
 * that was the last. A `Retry-After` (429/503) is honoured within [delay, 2 × delay]: never sooner
 * than the schedule, never so late that the schedule is lost.
 */
export const nextAttemptAt = (
  failedAttempt: number,
  failedAt: Date,
  retryAfterSeconds?: number | null
): Date | undefined => {
  if (failedAttempt >= MAX_ATTEMPTS) return undefined
  const delay = RETRY_DELAYS_MS[Math.max(1, failedAttempt) - 1] ?? 0
  const asked = (retryAfterSeconds ?? 0) * 1000
  return new Date(failedAt.getTime() + Math.min(Math.max(delay, asked), 2 * delay))
}

// --- Errors -----------------------------------------------------------------------------------------

export class WebhookNotFound extends Data.TaggedError("WebhookNotFound")<{ readonly webhookId: string }> {}
export class WebhookMetadataInvalid extends Data.TaggedError("WebhookMetadataInvalid")<{
  readonly message: string
}> {}
/** A second rotation while the previous secret is still valid (unless forced). */
export class WebhookRotationInProgress extends Data.TaggedError("WebhookRotationInProgress")<{
  readonly previousSecretExpiresAt: Date
}> {}
/** `failing` is the system's to set. */
export class WebhookStatusInvalid extends Data.TaggedError("WebhookStatusInvalid")<{
  readonly message: string
}> {}
export class DeliveryNotFound extends Data.TaggedError("DeliveryNotFound")<{ readonly deliveryId: string }> {}

// --- Endpoint ---------------------------------------------------------------------------------------

export interface Creator {
  readonly type: "user" | "api_key" | "oauth_client" | "system"
  readonly id: string
}

export interface WebhookState {
  readonly exists: boolean
  readonly deleted: boolean
  readonly webhookId: string
  readonly url: string
  readonly events: ReadonlyArray<string>
  readonly metadata: Metadata
  readonly status: WebhookStatus
  /** Undefined once shredded (a deleted endpoint). */
  readonly secret: string | undefined
  readonly previousSecret: string | undefined
  readonly previousSecretExpiresAt: Date | undefined
  readonly failingSince: Date | undefined
  readonly disabledReason: DisableReason | undefined
  readonly createdBy: Creator | undefined
}

const initialWebhook: WebhookState = {
  exists: false,
  deleted: false,
  webhookId: "",
  url: "",
  events: [],
  metadata: {},
  status: "active",
  secret: undefined,
  previousSecret: undefined,
  previousSecretExpiresAt: undefined,
  failingSince: undefined,
  disabledReason: undefined,
  createdBy: undefined
}

export interface WebhookChanges {
  readonly url?: string | undefined
  readonly events?: ReadonlyArray<string> | undefined
  /** Merged into the current metadata (a key set to null is removed; null clears it). */
  readonly metadata?: MetadataPatch | undefined
  readonly status?: "active" | "disabled" | undefined
}

export type WebhookCommand =
  | {
      readonly _tag: "Create"
      readonly webhookId: string
      readonly url: string
      readonly events: ReadonlyArray<string>
      readonly metadata: Metadata
      readonly secret: string
      readonly createdBy: Creator
    }
  | { readonly _tag: "Update"; readonly changes: WebhookChanges }
  | { readonly _tag: "RotateSecret"; readonly secret: string; readonly at: Date; readonly force: boolean }
  | { readonly _tag: "MarkFailing"; readonly at: Date; readonly deliveryId: string }
  | { readonly _tag: "MarkSucceeded"; readonly deliveryId: string }
  /** `failing`: only if still failing since `failingSince` (a recovery in between cancels it). */
  | {
      readonly _tag: "Disable"
      readonly reason: "failing" | "gone"
      readonly failingSince?: Date | undefined
      readonly deliveryId?: string | undefined
    }
  | { readonly _tag: "Delete" }

type WebhookError =
  | WebhookNotFound
  | WebhookMetadataInvalid
  | WebhookRotationInProgress
  | WebhookStatusInvalid

const sameList = (a: ReadonlyArray<string>, b: ReadonlyArray<string>) =>
  a.length === b.length && a.every((x, i) => x === b[i])

const decideWebhook = (
  command: WebhookCommand,
  state: WebhookState
): Effect.Effect<ReadonlyArray<WebhookEvent>, WebhookError> => {
  if (command._tag === "Create") {
    if (state.exists) return Effect.succeed([])
    const problem = metadataProblem(command.metadata)
    if (problem) return Effect.fail(new WebhookMetadataInvalid({ message: problem }))
    return Effect.succeed([
      WebhookCreated.make({
        webhookId: command.webhookId,
        url: command.url,
        events: [...command.events],
        metadata: command.metadata,
        secret: command.secret,
        createdBy: command.createdBy
      })
    ])
  }
  if (!state.exists || state.deleted) return Effect.fail(new WebhookNotFound({ webhookId: state.webhookId }))
  const { webhookId } = state
  switch (command._tag) {
    case "Update": {
      const { changes } = command
      const events: Array<WebhookEvent> = []
      const merged =
        changes.metadata === undefined ? undefined : applyMetadataPatch(state.metadata, changes.metadata)
      if (merged !== undefined) {
        const problem = metadataProblem(merged)
        if (problem) return Effect.fail(new WebhookMetadataInvalid({ message: problem }))
      }
      const url = changes.url !== undefined && changes.url !== state.url ? changes.url : undefined
      const list =
        changes.events !== undefined && !sameList(changes.events, state.events)
          ? [...changes.events]
          : undefined
      const metadata =
        merged !== undefined && JSON.stringify(merged) !== JSON.stringify(state.metadata) ? merged : undefined
      if (url !== undefined || list !== undefined || metadata !== undefined) {
        events.push(
          WebhookUpdated.make({
            webhookId,
            ...(url === undefined ? {} : { url }),
            ...(list === undefined ? {} : { events: list }),
            ...(metadata === undefined ? {} : { metadata })
          })
        )
      }
      if (changes.status === "active") {
        if (state.status === "disabled") events.push(WebhookEnabled.make({ webhookId }))
        else if (state.status === "failing") events.push(WebhookRecovered.make({ webhookId }))
      } else if (changes.status === "disabled" && state.status !== "disabled") {
        events.push(WebhookDisabled.make({ webhookId, reason: "manual" }))
      }
      return Effect.succeed(events)
    }
    case "RotateSecret": {
      const open = state.previousSecretExpiresAt
      if (open !== undefined && open.getTime() > command.at.getTime() && !command.force) {
        return Effect.fail(new WebhookRotationInProgress({ previousSecretExpiresAt: open }))
      }
      return Effect.succeed([
        WebhookSecretRotated.make({
          webhookId,
          secret: command.secret,
          previousSecretExpiresAt: new Date(command.at.getTime() + PREVIOUS_SECRET_VALIDITY_MS)
        })
      ])
    }
    case "MarkFailing":
      // Only an active endpoint starts the clock; failing keeps its first `failingSince`.
      return Effect.succeed(
        state.status === "active"
          ? [WebhookFailing.make({ webhookId, failingSince: command.at, deliveryId: command.deliveryId })]
          : []
      )
    case "MarkSucceeded":
      return Effect.succeed(
        state.status === "failing"
          ? [WebhookRecovered.make({ webhookId, deliveryId: command.deliveryId })]
          : []
      )
    case "Disable": {
      if (state.status === "disabled") return Effect.succeed([])
      if (command.reason === "failing") {
        const since = state.failingSince
        const stillFailing =
          state.status === "failing" &&
          since !== undefined &&
          (command.failingSince === undefined || since.getTime() === command.failingSince.getTime())
        if (!stillFailing) return Effect.succeed([])
        return Effect.succeed([WebhookDisabled.make({ webhookId, reason: "failing", failingSince: since })])
      }
      return Effect.succeed([
        WebhookDisabled.make({
          webhookId,
          reason: "gone",
          ...(command.deliveryId === undefined ? {} : { deliveryId: command.deliveryId })
        })
      ])
    }
    case "Delete":
      return Effect.succeed([WebhookDeleted.make({ webhookId })])
  }
}

const evolveWebhook = (state: WebhookState, event: WebhookEvent): WebhookState => {
  switch (event.type) {
    case "webhook.created": {
      const d = event.data
      return {
        ...initialWebhook,
        exists: true,
        webhookId: d.webhookId,
        url: d.url,
        events: d.events,
        metadata: d.metadata,
        secret: revealOr(d.secret, undefined),
        createdBy: d.createdBy
      }
    }
    case "webhook.updated": {
      const d = event.data
      return {
        ...state,
        ...(d.url === undefined ? {} : { url: d.url }),
        ...(d.events === undefined ? {} : { events: d.events }),
        ...(d.metadata === undefined ? {} : { metadata: d.metadata })
      }
    }
    case "webhook.secret_rotated":
      return {
        ...state,
        previousSecret: state.secret,
        secret: revealOr(event.data.secret, undefined),
        previousSecretExpiresAt: event.data.previousSecretExpiresAt
      }
    case "webhook.failing":
      return { ...state, status: "failing", failingSince: event.data.failingSince }
    case "webhook.recovered":
      return { ...state, status: "active", failingSince: undefined, disabledReason: undefined }
    case "webhook.disabled":
      return { ...state, status: "disabled", disabledReason: event.data.reason }
    case "webhook.enabled":
      return { ...state, status: "active", failingSince: undefined, disabledReason: undefined }
    case "webhook.deleted":
      return { ...state, deleted: true, secret: undefined, previousSecret: undefined }
  }
}

export const WebhookDecider = defineDecider({
  streamType: "webhook",
  events: webhookEventTypes,
  initialState: initialWebhook,
  evolve: evolveWebhook,
  decide: decideWebhook
})

/** The secrets that sign at `at`: the current one, and the previous one inside its window. */
export const signingSecrets = (state: WebhookState, at: Date) => ({
  current: state.secret,
  previous:
    state.previousSecret !== undefined &&
    state.previousSecretExpiresAt !== undefined &&
    state.previousSecretExpiresAt.getTime() > at.getTime()
      ? state.previousSecret
      : undefined
})

// --- Delivery ---------------------------------------------------------------------------------------

export type DeliveryStatus = "pending" | "succeeded" | "failed"

export interface DeliveryState {
  readonly status: "none" | DeliveryStatus
  readonly deliveryId: string
  readonly webhookId: string
  readonly eventId: string
  readonly eventType: string
  /** Attempts so far, manual ones included. */
  readonly attempts: number
  /** Failed attempts on the automatic schedule (the count that reaches 7). */
  readonly autoFailures: number
  /** The next attempt is a manual one (redeliver / recover): tried once, never retried. */
  readonly manual: boolean
}

const initialDelivery: DeliveryState = {
  status: "none",
  deliveryId: "",
  webhookId: "",
  eventId: "",
  eventType: "",
  attempts: 0,
  autoFailures: 0,
  manual: false
}

/** An attempt as the sender reports it: the decider numbers it. */
export interface AttemptOutcome extends Omit<Attempt, "attempt" | "nextAttemptAt"> {
  /** Undefined: no further attempt (success, the 7th failure, a manual attempt, 410). */
  readonly nextAttemptAt: Date | undefined
}

export type DeliveryCommand =
  | {
      readonly _tag: "Create"
      readonly deliveryId: string
      readonly webhookId: string
      readonly eventId: string
      readonly eventType: string
    }
  | ({ readonly _tag: "RecordAttempt" } & AttemptOutcome)
  | { readonly _tag: "RequestRedelivery"; readonly source: "redeliver" | "recover" }
  | { readonly _tag: "Abandon"; readonly reason: string }

const decideDelivery = (
  command: DeliveryCommand,
  state: DeliveryState
): Effect.Effect<ReadonlyArray<DeliveryEvent>, DeliveryNotFound> => {
  if (command._tag === "Create") {
    if (state.status !== "none") return Effect.succeed([])
    return Effect.succeed([
      DeliveryCreated.make({
        deliveryId: command.deliveryId,
        webhookId: command.webhookId,
        eventId: command.eventId,
        eventType: command.eventType
      })
    ])
  }
  if (state.status === "none") return Effect.fail(new DeliveryNotFound({ deliveryId: state.deliveryId }))
  const { deliveryId, webhookId } = state
  switch (command._tag) {
    case "RecordAttempt":
      // An outcome for a delivery no longer pending (a reclaimed attempt recorded twice) is dropped.
      if (state.status !== "pending") return Effect.succeed([])
      return Effect.succeed([
        DeliveryAttempted.make({
          deliveryId,
          webhookId,
          attempt: state.attempts + 1,
          trigger: command.trigger,
          attemptedAt: command.attemptedAt,
          succeeded: command.succeeded,
          statusCode: command.statusCode,
          durationMs: Math.max(0, Math.round(command.durationMs)),
          errorClass: command.errorClass,
          error: command.error,
          responseExcerpt: command.responseExcerpt,
          nextAttemptAt: command.succeeded ? null : (command.nextAttemptAt ?? null)
        })
      ])
    case "RequestRedelivery":
      // Already queued (a retry is due, or a redelivery was asked for): nothing more to ask.
      if (state.status === "pending") return Effect.succeed([])
      return Effect.succeed([
        DeliveryRedeliveryRequested.make({ deliveryId, webhookId, source: command.source })
      ])
    case "Abandon":
      if (state.status !== "pending") return Effect.succeed([])
      return Effect.succeed([DeliveryAbandoned.make({ deliveryId, webhookId, reason: command.reason })])
  }
}

const evolveDelivery = (state: DeliveryState, event: DeliveryEvent): DeliveryState => {
  switch (event.type) {
    case "webhook_delivery.created":
      return {
        ...initialDelivery,
        status: "pending",
        deliveryId: event.data.deliveryId,
        webhookId: event.data.webhookId,
        eventId: event.data.eventId,
        eventType: event.data.eventType
      }
    case "webhook_delivery.attempted": {
      const d = event.data
      const status: DeliveryStatus = d.succeeded
        ? "succeeded"
        : d.nextAttemptAt === null
          ? "failed"
          : "pending"
      return {
        ...state,
        status,
        attempts: d.attempt,
        autoFailures: state.autoFailures + (d.trigger === "auto" && !d.succeeded ? 1 : 0),
        manual: false
      }
    }
    case "webhook_delivery.redelivery_requested":
      return { ...state, status: "pending", manual: true }
    case "webhook_delivery.abandoned":
      return { ...state, status: "failed", manual: false }
  }
}

export const DeliveryDecider = defineDecider({
  streamType: "webhook_delivery",
  events: deliveryEventTypes,
  initialState: initialDelivery,
  evolve: evolveDelivery,
  decide: decideDelivery
})
