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
import { actorEmail } from "../identity/index.js"
import { CommandRunner, type LoadedAggregate, type StreamCommand } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import * as Time from "../kernel/Time.js"
import { requestNotification, WEBHOOK_DISABLED_TEMPLATE_ID } from "../notifications/index.js"
import { type DueItem, DueOutcome, DueWork, dueWorker, type ScheduleInput } from "../processors/DueWork.js"
import { subscriptionProcessor } from "../processors/Subscription.js"
import type { Processor } from "../processors/Supervisor.js"
import { WEBHOOK_EVENT_TYPES } from "./catalogue.js"
import {
  type DeliveryCommand,
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
import { excerptOf } from "./projection.js"
import { type DeliverableEvent, liveEndpoints, publicEventById, publicEventsByIds } from "./queries.js"
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

/**
 * One POST of an event body to an endpoint, signed for `at` (spec §6.2 and Standard Webhooks
 * headers), under the 30 s deadline and the response cap: scheduled attempts and test sends alike.
 */
export const postSigned = (input: {
  readonly url: string
  readonly deliveryId: string
  readonly eventType: string
  readonly body: string
  readonly at: Date
  readonly secret: string
  readonly previousSecret: string | undefined
  readonly allowPrivate: boolean
}) =>
  attempt({
    url: input.url,
    headers: deliveryHeaders({
      deliveryId: input.deliveryId,
      eventType: input.eventType,
      timestamp: Math.floor(input.at.getTime() / 1000),
      body: input.body,
      secret: input.secret,
      previousSecret: input.previousSecret
    }),
    body: input.body,
    timeoutMs: TIMEOUT_MS,
    maxResponseBytes: RESPONSE_READ_BYTES,
    allowPrivate: input.allowPrivate
  })

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

/**
 * Creates the deliveries of one batch of public events, inside the subscription's batch transaction:
 * all of them with one multi-stream append and one due-work insert (a replayed batch finds its
 * deliveries already created and schedules nothing again).
 */
export const dispatchEvents = (events: ReadonlyArray<PublicEvent>) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const work = yield* DueWork
    const endpoints = yield* liveEndpoints
    if (endpoints.length === 0) return 0
    const now = yield* Time.now
    const commands: Array<StreamCommand<DeliveryCommand, DeliveryState>> = []
    const schedules: Array<ScheduleInput> = []
    for (const event of events) {
      for (const endpoint of endpoints) {
        // An endpoint gets what happened after it was registered, not the history before it.
        if (!endpoint.events.includes(event.type) || event.occurredAt < endpoint.createdAt) continue
        const deliveryId = deliveryIdOf(event.id, endpoint.id, event.occurredAt)
        commands.push({
          streamId: deliveryStream(deliveryId),
          command: {
            _tag: "Create",
            deliveryId,
            webhookId: endpoint.id,
            eventId: event.id,
            eventType: event.type
          }
        })
        schedules.push(deliveryWork(deliveryId, endpoint.id, now))
      }
    }
    if (commands.length === 0) return 0
    const results = yield* runner.executeMany(DeliveryDecider, commands, { metadata: DISPATCHER })
    // Already dispatched (a replayed batch): its attempts are already scheduled.
    const created = schedules.filter((_, i) => (results[i]?.events.length ?? 0) > 0)
    yield* work.scheduleMany(created)
    return created.length
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
    const config = yield* AppConfig
    const now = yield* Time.now
    const creator = endpoint.createdBy === undefined ? Option.none() : yield* actorEmail(endpoint.createdBy)
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
      yield* requestNotification(
        {
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
        { metadata: DELIVERER, dueAt: now }
      )
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

const excerpt = (text: string | null) => (text === null ? null : excerptOf(text))

/** Recorded with other attempts' outcomes in one transaction (see `dueWorker`'s `recordBatched`). */
type BatchedAttempt = StreamCommand<DeliveryCommand, DeliveryState>

/** What the attempt's outcome records, and what else it changes (health, alerts, the schedule). */
export const recordOutcome = (
  loaded: LoadedAggregate<DeliveryState>,
  endpoint: WebhookState,
  result: AttemptResult,
  attemptedAt: Date
) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const work = yield* DueWork
    const finishedAt = yield* Time.now
    const delivery = loaded.state
    const { deliveryId, webhookId } = delivery
    const trigger = delivery.manual ? "manual" : "auto"
    const failures = delivery.autoFailures + (trigger === "auto" && !result.ok ? 1 : 0)
    const next =
      result.ok || result.gone || trigger === "manual"
        ? undefined
        : nextAttemptAt(failures, finishedAt, result.retryAfterSeconds)
    const command: DeliveryCommand = {
      _tag: "RecordAttempt",
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
    const onEndpoint = (endpointCommand: Parameters<typeof WebhookDecider.decide>[0]) =>
      runner.execute(WebhookDecider, webhookStream(webhookId), endpointCommand, { metadata: DELIVERER })
    const recordAttempt = runner.execute(DeliveryDecider, deliveryStream(deliveryId), command, {
      metadata: DELIVERER
    })
    const seventhFailure = !result.ok && !result.gone && trigger === "auto" && next === undefined
    // Most outcomes only record the attempt: those can be group-committed with others. The rest also
    // change the endpoint (recovery, 410, the 7th failure) and are recorded alone.
    const onlyTheAttempt = result.ok ? endpoint.status !== "failing" : !result.gone && !seventhFailure
    const writes = Effect.gen(function* () {
      yield* recordAttempt
      if (onlyTheAttempt) return
      if (result.ok) {
        // Only a failing endpoint has anything to recover (as loaded for this attempt: if it turned
        // failing meanwhile, the next success recovers it).
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
      } else {
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
    const batched: BatchedAttempt | undefined = onlyTheAttempt
      ? { streamId: deliveryStream(deliveryId), command, loaded }
      : undefined
    const recorded = { inTransaction: writes, ...(batched === undefined ? {} : { batched }) }
    return next === undefined
      ? DueOutcome.done(recorded)
      : DueOutcome.retry({ at: next, error: result.error ?? "failed", ...recorded })
  })

/** What an attempt reads: the delivery, its endpoint and the public event it sends. */
interface AttemptContext {
  readonly delivery: LoadedAggregate<DeliveryState>
  readonly endpoint: WebhookState
  readonly event: Option.Option<DeliverableEvent>
}

/** Makes one attempt (the HTTP POST, outside any transaction) and decides what it records. */
const attemptDelivery = (item: DueItem, context: AttemptContext) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const config = yield* AppConfig
    const deliveryId = item.key
    const { delivery, endpoint, event } = context
    if (delivery.state.status !== "pending") return DueOutcome.done()
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
    if (Option.isNone(event)) return abandon(`event ${delivery.state.eventId} no longer exists`)
    const attemptedAt = yield* Time.now
    const secrets = signingSecrets(endpoint, attemptedAt)
    if (secrets.current === undefined) return abandon("the endpoint's secret was destroyed")
    const result = yield* postSigned({
      url: endpoint.url,
      deliveryId,
      eventType: delivery.state.eventType,
      body: deliveryBody(event.value),
      at: attemptedAt,
      secret: secrets.current,
      previousSecret: secrets.previous,
      allowPrivate: config.webhooks.allowPrivate
    })
    return yield* recordOutcome(delivery, endpoint, result, attemptedAt)
  }).pipe(Effect.annotateLogs({ "webhook.delivery": item.key }))

/** One claimed delivery, read on its own (three queries; the worker reads a whole batch at once). */
export const handleDelivery = (item: DueItem) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const delivery = yield* runner.load(DeliveryDecider, deliveryStream(item.key))
    const { state: endpoint } = yield* loadEndpoint(delivery.state.webhookId)
    const event = yield* publicEventById(delivery.state.eventId)
    return yield* attemptDelivery(item, { delivery, endpoint, event })
  })

/**
 * Reads what the attempts of a claimed batch need in three queries for the whole batch: the delivery
 * streams, what is new on their endpoints' streams (endpoints stay cached, brought up to date on each
 * batch) and their public events.
 */
const makeBatchReader = () => {
  const endpoints = new Map<string, LoadedAggregate<WebhookState>>()
  const contexts = new Map<string, AttemptContext>()
  const prepare = (items: ReadonlyArray<DueItem>) =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const deliveries = yield* runner.loadMany(
        DeliveryDecider,
        items.map((i) => ({ streamId: deliveryStream(i.key) }))
      )
      const pending = [...deliveries.values()].filter((d) => d.state.status === "pending")
      const webhookIds = [...new Set(pending.map((d) => d.state.webhookId))]
      const fresh = yield* runner.loadMany(
        WebhookDecider,
        webhookIds.map((id) => {
          const cached = endpoints.get(id)
          return cached === undefined
            ? { streamId: webhookStream(id) }
            : { streamId: webhookStream(id), from: cached }
        })
      )
      for (const id of webhookIds) {
        const loaded = fresh.get(webhookStream(id))
        if (loaded !== undefined) endpoints.set(id, loaded)
      }
      const events = yield* publicEventsByIds([...new Set(pending.map((d) => d.state.eventId))])
      for (const item of items) {
        const delivery = deliveries.get(deliveryStream(item.key))
        if (delivery === undefined) continue
        const endpoint = endpoints.get(delivery.state.webhookId)?.state ?? WebhookDecider.initialState
        contexts.set(item.id, {
          delivery,
          endpoint,
          event: Option.fromNullable(events.get(delivery.state.eventId))
        })
      }
    })
  const handle = (item: DueItem) => {
    const context = contexts.get(item.id)
    if (context === undefined) return handleDelivery(item)
    contexts.delete(item.id)
    return attemptDelivery(item, context)
  }
  return { prepare, handle }
}

type WorkerServices = SqlClient.SqlClient | AppConfig | CommandRunner | DueWork

/** The attempt worker (`ROLE=worker|all`): `WEBHOOK_CONCURRENCY` at once, per endpoint capped. */
export const webhookDeliveryWorker = (): Processor<WorkerServices> => {
  const name = "webhook-delivery"
  return {
    name,
    run: Effect.flatMap(AppConfig, (config) => {
      const reader = makeBatchReader()
      return dueWorker({
        name,
        kinds: [DELIVERY_KIND],
        concurrency: config.webhooks.concurrency,
        groupCap: config.webhooks.endpointConcurrency,
        // The 30 s deadline, recording, and a margin: a live attempt never loses its claim.
        leaseTtl: Duration.seconds(90),
        maxAttempts: 20,
        prepare: reader.prepare,
        handle: reader.handle,
        recordBatched: (batch: ReadonlyArray<BatchedAttempt>) =>
          Effect.flatMap(CommandRunner, (runner) =>
            runner.executeMany(DeliveryDecider, batch, { metadata: DELIVERER })
          )
      }).run
    })
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
