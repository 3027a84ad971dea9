/**
 * Webhook delivery: the dispatcher (public events → one delivery per subscribed endpoint), the
 * attempt worker (one signed HTTP POST per claim, outside any transaction, its outcome recorded with
 * the claim's fenced completion) and the endpoint health clock (failing → disabled after 72 h, the
 * owner emailed first).
 *
 * At-least-once: a process that dies after the receiver answered but before the outcome is recorded
 * leaves the claim to expire (lease = the 30 s deadline + margin); the attempt is then made again,
 * with the same `X-Service-Delivery` and body `id`, so receivers dedupe on those.
 */
import type { SqlClient } from "@effect/sql"
import { Duration, Effect, Option } from "effect"
import { AppConfig } from "../config.js"
import type { EventMetadata } from "../eventstore/EventStore.js"
import type { PublicEvent } from "../eventstore/PublicEvents.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import * as Time from "../kernel/Time.js"
import { NotificationDecider, notificationStream } from "../notifications/decider.js"
import { SEND_KIND } from "../notifications/Notifications.js"
import { WEBHOOK_DISABLED_TEMPLATE_ID } from "../notifications/templates.js"
import { type DueItem, DueOutcome, DueWork, dueWorker, type ScheduleInput } from "../processors/DueWork.js"
import { subscriptionProcessor } from "../processors/Subscription.js"
import type { Processor } from "../processors/Supervisor.js"
import { WEBHOOK_EVENT_TYPES } from "./catalogue.js"
import {
  type AttemptOutcome,
  DeliveryDecider,
  type DeliveryState,
  DISABLE_AFTER_MS,
  deliveryStream,
  nextAttemptAt,
  signingSecrets,
  WebhookDecider,
  type WebhookState,
  webhookStream
} from "./decider.js"
import { EXCERPT_CHARS } from "./projection.js"
import { liveEndpoints, ownerEmail, publicEventById } from "./queries.js"
import { deliveryBody, deliveryHeaders } from "./signature.js"
import { type AttemptResult, attempt } from "./transport.js"

/** Due-work kind of a delivery's next attempt (key = delivery id, group = endpoint id). */
export const DELIVERY_KIND = "webhook.delivery"
/** Due-work kind of an endpoint's disable clock (key = endpoint id), due 72 h after `failingSince`. */
export const DISABLE_CHECK_KIND = "webhook.disable_check"
/** Spec §6.4 / §8: one total deadline per attempt. */
export const TIMEOUT_MS = 30_000
/** The response is read up to this much, then the connection is dropped. */
export const RESPONSE_READ_BYTES = 16 * 1024

export const deliveryWork = (deliveryId: string, webhookId: string, dueAt: Date): ScheduleInput => ({
  kind: DELIVERY_KIND,
  key: deliveryId,
  group: webhookId,
  dueAt
})

/** A delivery's id: one per (event, endpoint), ordered by the event's time. */
export const deliveryIdOf = (eventId: string, webhookId: string, occurredAt: Date) =>
  Ids.derive("dlv", `${eventId}:${webhookId}`, occurredAt.getTime())

const DISPATCHER: EventMetadata = { actor: { type: "system", id: "webhook-dispatcher" } }
const DELIVERER: EventMetadata = { actor: { type: "system", id: "webhook-delivery" } }

// --- Dispatcher ---------------------------------------------------------------------------------------

/** Creates the deliveries of one batch of public events, inside the subscription's batch transaction. */
export const dispatchEvents = (events: ReadonlyArray<PublicEvent>) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const work = yield* DueWork
    const endpoints = yield* liveEndpoints
    if (endpoints.length === 0) return 0
    const now = yield* Time.now
    let created = 0
    for (const event of events) {
      for (const endpoint of endpoints) {
        // An endpoint gets what happened after it was registered, not the history before it.
        if (!endpoint.events.includes(event.type) || event.occurredAt < endpoint.createdAt) continue
        const deliveryId = deliveryIdOf(event.id, endpoint.id, event.occurredAt)
        const result = yield* runner.execute(
          DeliveryDecider,
          deliveryStream(deliveryId),
          { _tag: "Create", deliveryId, webhookId: endpoint.id, eventId: event.id, eventType: event.type },
          { metadata: DISPATCHER }
        )
        // Already dispatched (a replayed batch): its attempts are already scheduled.
        if (result.events.length === 0) continue
        yield* work.schedule(deliveryWork(deliveryId, endpoint.id, now))
        created++
      }
    }
    return created
  })

/** The dispatcher processor (`ROLE=worker|all`). */
export const webhookDispatcher = () =>
  subscriptionProcessor<unknown, SqlClient.SqlClient | CommandRunner | DueWork>({
    name: "webhook-dispatcher",
    source: "public_events",
    eventTypes: [...WEBHOOK_EVENT_TYPES],
    // Small batches: each commits its deliveries sooner, so the first attempts start sooner (a
    // 500-event batch held back 2,000 deliveries for seconds).
    batchSize: 50,
    handle: (events) =>
      Effect.flatMap(dispatchEvents(events), (created) =>
        created > 0 ? Effect.flatMap(DueWork, (w) => w.wake) : Effect.void
      )
  })

// --- Health -------------------------------------------------------------------------------------------

/**
 * Emails the endpoint's owner (the admin who created it, and `WEBHOOK_ALERT_EMAIL`) through the
 * notification pipeline, in the caller's transaction: the disable and its alert commit together.
 */
const alertOwner = (endpoint: WebhookState, reason: string, key: string) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const work = yield* DueWork
    const config = yield* AppConfig
    const now = yield* Time.now
    const creator = endpoint.createdBy === undefined ? Option.none() : yield* ownerEmail(endpoint.createdBy)
    const recipients = new Set(
      [...Option.toArray(creator), ...Option.toArray(config.webhooks.alertEmail)].map((e) => e.trim())
    )
    if (recipients.size === 0) {
      yield* Effect.logWarning(
        `webhook ${endpoint.webhookId} disabled; nobody to tell (no creator email, no WEBHOOK_ALERT_EMAIL)`
      )
      return
    }
    for (const to of recipients) {
      const notificationId = Ids.derive(
        "ntf",
        `webhook.disabled:${endpoint.webhookId}:${key}:${to}`,
        now.getTime()
      )
      const result = yield* runner.execute(
        NotificationDecider,
        notificationStream(notificationId),
        {
          _tag: "Request",
          notificationId,
          eventName: "webhook.disabled",
          channel: "email",
          to,
          templateId: WEBHOOK_DISABLED_TEMPLATE_ID,
          data: {
            webhook: {
              id: endpoint.webhookId,
              url: endpoint.url,
              failingSince: endpoint.failingSince?.toISOString() ?? null
            },
            reason
          },
          metadata: { webhookId: endpoint.webhookId }
        },
        { metadata: DELIVERER }
      )
      if (result.events.length > 0) yield* work.schedule({ kind: SEND_KIND, key: notificationId, dueAt: now })
    }
  })

const loadEndpoint = (webhookId: string) =>
  Effect.flatMap(CommandRunner, (runner) => runner.load(WebhookDecider, webhookStream(webhookId)))

/** Disables a failing endpoint whose clock ran out, unless it recovered or was re-enabled meanwhile. */
export const handleDisableCheck = (item: DueItem) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const webhookId = item.key
    const { state } = yield* loadEndpoint(webhookId)
    if (!state.exists || state.deleted || state.status !== "failing" || state.failingSince === undefined)
      return DueOutcome.done()
    const now = yield* Time.nowMillis
    const due = state.failingSince.getTime() + DISABLE_AFTER_MS
    // Re-armed by a later failing period: wait for that one.
    if (due > now) return DueOutcome.retry({ at: new Date(due), error: "not yet due" })
    const since = state.failingSince
    const hours = Math.round((now - since.getTime()) / 3_600_000)
    return DueOutcome.done({
      inTransaction: Effect.gen(function* () {
        // The owner is told first; the disable commits with the alert.
        yield* alertOwner(
          state,
          `Every delivery to it has failed since ${since.toISOString()} (${hours} hours): each event was tried 7 times over about 35 hours without a 2xx answer.`,
          since.toISOString()
        )
        yield* runner.execute(
          WebhookDecider,
          webhookStream(webhookId),
          { _tag: "Disable", reason: "failing", failingSince: since },
          { metadata: DELIVERER }
        )
      })
    })
  }).pipe(Effect.annotateLogs({ "webhook.id": item.key }))

// --- Attempts -----------------------------------------------------------------------------------------

const excerpt = (text: string | null) => (text === null ? null : text.slice(0, EXCERPT_CHARS))

/** What the attempt's outcome records, and what else it changes (health, alerts, the schedule). */
export const recordOutcome = (
  delivery: DeliveryState,
  endpoint: WebhookState,
  result: AttemptResult,
  attemptedAt: Date
) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const work = yield* DueWork
    const finishedAt = yield* Time.now
    const { deliveryId, webhookId } = delivery
    const trigger = delivery.manual ? "manual" : "auto"
    const failures = delivery.autoFailures + (trigger === "auto" && !result.ok ? 1 : 0)
    const next =
      result.ok || result.gone || trigger === "manual"
        ? undefined
        : nextAttemptAt(failures, finishedAt, result.retryAfterSeconds)
    const outcome: AttemptOutcome = {
      trigger,
      attemptedAt,
      succeeded: result.ok,
      statusCode: result.statusCode,
      durationMs: result.durationMs,
      errorClass: result.errorClass,
      error: result.error,
      responseExcerpt: excerpt(result.responseExcerpt),
      nextAttemptAt: next
    }
    const onEndpoint = (command: Parameters<typeof WebhookDecider.decide>[0]) =>
      runner.execute(WebhookDecider, webhookStream(webhookId), command, { metadata: DELIVERER })
    const writes = Effect.gen(function* () {
      yield* runner.execute(
        DeliveryDecider,
        deliveryStream(deliveryId),
        { _tag: "RecordAttempt", ...outcome },
        { metadata: DELIVERER }
      )
      if (result.ok) {
        // Only a failing endpoint has anything to recover (as loaded for this attempt: if it turned
        // failing meanwhile, the next success recovers it).
        if (endpoint.status !== "failing") return
        const recovered = yield* onEndpoint({ _tag: "MarkSucceeded", deliveryId })
        if (recovered.events.length > 0) yield* work.cancel(DISABLE_CHECK_KIND, webhookId)
      } else if (result.gone) {
        // 410: the receiver says the endpoint is gone for good (Standard Webhooks): stop now. Read
        // again inside the transaction: of several 410s at once, only the first disables and alerts
        // (a concurrent one conflicts on the stream version and is retried, then finds it disabled).
        const current = yield* loadEndpoint(webhookId)
        if (current.state.status === "disabled") return
        yield* alertOwner(
          endpoint,
          `It answered 410 Gone to delivery ${deliveryId} at ${attemptedAt.toISOString()}, which means it no longer wants deliveries.`,
          `gone:${deliveryId}`
        )
        yield* onEndpoint({ _tag: "Disable", reason: "gone", deliveryId })
        yield* work.cancel(DISABLE_CHECK_KIND, webhookId)
      } else if (trigger === "auto" && next === undefined) {
        // The 7th failure: the endpoint is failing; its disable clock runs from now.
        const marked = yield* onEndpoint({ _tag: "MarkFailing", at: finishedAt, deliveryId })
        if (marked.events.length > 0) {
          yield* work.schedule({
            kind: DISABLE_CHECK_KIND,
            key: webhookId,
            dueAt: new Date(finishedAt.getTime() + DISABLE_AFTER_MS),
            replace: true
          })
        }
      }
    })
    return next === undefined
      ? DueOutcome.done({ inTransaction: writes })
      : DueOutcome.retry({ at: next, error: result.error ?? "failed", inTransaction: writes })
  })

export const handleDelivery = (item: DueItem) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const config = yield* AppConfig
    const deliveryId = item.key
    const { state: delivery } = yield* runner.load(DeliveryDecider, deliveryStream(deliveryId))
    if (delivery.status !== "pending") return DueOutcome.done()
    const { state: endpoint } = yield* loadEndpoint(delivery.webhookId)
    // Deleted: its log went with it; nothing to record.
    if (!endpoint.exists || endpoint.deleted) return DueOutcome.done()
    const abandon = (reason: string) =>
      DueOutcome.done({
        inTransaction: Effect.asVoid(
          runner.execute(
            DeliveryDecider,
            deliveryStream(deliveryId),
            { _tag: "Abandon", reason },
            { metadata: DELIVERER }
          )
        )
      })
    if (endpoint.status === "disabled") return abandon("endpoint disabled")
    const event = yield* publicEventById(delivery.eventId)
    if (Option.isNone(event)) return abandon(`event ${delivery.eventId} no longer exists`)
    const attemptedAt = yield* Time.now
    const secrets = signingSecrets(endpoint, attemptedAt)
    if (secrets.current === undefined) return abandon("the endpoint's secret was destroyed")
    const body = deliveryBody(event.value)
    const result = yield* attempt({
      url: endpoint.url,
      headers: deliveryHeaders({
        deliveryId,
        eventType: delivery.eventType,
        timestamp: Math.floor(attemptedAt.getTime() / 1000),
        body,
        secret: secrets.current,
        previousSecret: secrets.previous
      }),
      body,
      timeoutMs: TIMEOUT_MS,
      maxResponseBytes: RESPONSE_READ_BYTES,
      allowPrivate: config.webhooks.allowPrivate
    })
    return yield* recordOutcome(delivery, endpoint, result, attemptedAt)
  }).pipe(Effect.annotateLogs({ "webhook.delivery": item.key }))

type WorkerServices = SqlClient.SqlClient | AppConfig | CommandRunner | DueWork

/** The attempt worker (`ROLE=worker|all`): `WEBHOOK_CONCURRENCY` at once, per endpoint capped. */
export const webhookDeliveryWorker = (): Processor<WorkerServices> => {
  const name = "webhook-delivery"
  return {
    name,
    run: Effect.flatMap(
      AppConfig,
      (config) =>
        dueWorker({
          name,
          kinds: [DELIVERY_KIND],
          concurrency: config.webhooks.concurrency,
          groupCap: config.webhooks.endpointConcurrency,
          // The 30 s deadline, recording, and a margin: a live attempt never loses its claim.
          leaseTtl: Duration.seconds(90),
          maxAttempts: 20,
          handle: handleDelivery
        }).run
    )
  }
}

/** The disable clock (`ROLE=worker|all`). */
export const webhookHealthWorker = (): Processor<WorkerServices> => ({
  name: "webhook-health",
  run: dueWorker({
    name: "webhook-health",
    kinds: [DISABLE_CHECK_KIND],
    concurrency: 2,
    maxAttempts: 20,
    handle: handleDisableCheck
  }).run
})
