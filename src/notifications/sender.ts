/**
 * The sender: a supervised due-work worker that delivers due notifications. It claims a send (once,
 * across processes), renders the template and calls the channel's provider outside any transaction,
 * then records the outcome with the claim's fenced update: `sent`, a transient failure retried with
 * back-off (at most 8 tries, every retry within 30 minutes of the first try since the notification
 * became due), or `failed` with its reason.
 *
 * At-least-once: if the process dies after the provider accepted a message but before the outcome
 * is recorded, the claim expires and the message is sent again (email carries `X-Notification-Id`
 * and a stable Message-ID, so receivers can drop the repeat).
 */
import { createHash } from "node:crypto"
import type { SqlClient } from "@effect/sql"
import { Duration, Effect, Option } from "effect"
import { AppConfig } from "../config.js"
import { type EventMetadata, EventStore } from "../eventstore/EventStore.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Time from "../kernel/Time.js"
import { type DueItem, DueOutcome, type DueWork, dueWorker } from "../processors/DueWork.js"
import type { Processor } from "../processors/Supervisor.js"
import { NotificationProviders } from "./channels.js"
import { composeParts, pushData, renderVariables, resolveTemplate } from "./content.js"
import { type NotificationCommand, NotificationDecider, notificationStream } from "./decider.js"
import { SEND_KIND } from "./request.js"
import { renderTemplate } from "./templates.js"

/** Sends tried per notification, in all. */
export const MAX_SEND_ATTEMPTS = 8
/** Every retry is due within this long after the first try (since the notification became due). */
export const RETRY_WINDOW_MS = 30 * 60 * 1000
/** Base delay after the n-th failed try (n = 1…7): 10 s doubling, 27.7 min in all. */
const BASE_DELAYS_SECONDS = [10, 30, 60, 120, 240, 480, 720] as const

/**
 * The delay after the `attempt`-th failed try: its base less up to 20 % jitter, derived from the
 * notification id so a provider outage does not bring every retry back in the same instant, and so
 * tests can compute it.
 */
export const retryDelayMs = (notificationId: string, attempt: number): number => {
  const base = BASE_DELAYS_SECONDS[Math.min(Math.max(attempt, 1), BASE_DELAYS_SECONDS.length) - 1] ?? 720
  const fraction =
    createHash("sha256").update(`${notificationId}:${attempt}`).digest().readUInt16BE(0) / 65_536
  return Math.round(base * 1000 * (1 - 0.2 * fraction))
}

const SENDER: EventMetadata = { actor: { type: "system", id: "notification-sender" } }

/**
 * When the current run of tries began: the first failed try recorded since the notification was
 * requested or last rescheduled (its recording time: the end of that try, at most one provider
 * deadline after it began). Undefined when there is none (this failure is that first try). Read
 * only on the retry path of a notification tried before, so a successful send costs nothing extra.
 */
const firstTryOfRun = (stream: string) =>
  Effect.gen(function* () {
    const store = yield* EventStore
    const events = yield* store
      .readStream(stream)
      .pipe(Effect.catchTag("StreamNotFound", () => Effect.succeed([])))
    let first: number | undefined
    for (const event of events) {
      if (event.type === "notification.requested" || event.type === "notification.rescheduled")
        first = undefined
      else if (event.type === "notification.attempted" && first === undefined)
        first = event.recordedAt.getTime()
    }
    return first
  })

export const handleSend = (item: DueItem) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const providers = yield* NotificationProviders
    const config = yield* AppConfig
    const notificationId = item.key
    const stream = notificationStream(notificationId)
    const record = (command: NotificationCommand) =>
      Effect.asVoid(runner.execute(NotificationDecider, stream, command, { metadata: SENDER }))

    const { state } = yield* runner.load(NotificationDecider, stream)
    if (state.status !== "pending" || state.to === undefined) return DueOutcome.done()
    const now = yield* Time.nowMillis
    if (state.scheduledAt !== undefined && state.scheduledAt.getTime() > now) {
      return DueOutcome.retry({ at: state.scheduledAt, error: "rescheduled" })
    }
    const triedBefore = state.attempts
    const fail = (reason: string, code?: number) =>
      DueOutcome.failed({
        error: reason,
        inTransaction: record({ _tag: "MarkFailed", attempt: triedBefore, reason, code })
      })

    // What to send: the template as it is now, with the notification's own content over it.
    let template: Parameters<typeof composeParts>[1]
    if (state.templateId !== undefined) {
      const found = yield* resolveTemplate(state.templateId)
      if (Option.isNone(found)) return fail(`template ${state.templateId} no longer exists`)
      template = found.value
    }
    const parts = composeParts(state.channel, template, state)
    if (parts === undefined) return fail("nothing to send: no template and no body")
    const store = { name: config.notifications.storeName, url: config.notifications.storeUrl }
    const rendered = yield* Effect.either(renderTemplate(parts, renderVariables(state.data, store)))
    if (rendered._tag === "Left")
      return fail(`template ${state.templateId ?? "content"}: ${rendered.left.message}`)

    const attempt = triedBefore + 1
    const provider = providers[state.channel]
    const sent = yield* Effect.either(
      provider.send({
        notificationId,
        channel: state.channel,
        to: state.to,
        subject: rendered.right.subject,
        title: rendered.right.title,
        body: rendered.right.body,
        ...(state.channel === "push" ? { data: pushData(state.data) } : {})
      })
    )
    if (sent._tag === "Right") {
      const receipt = sent.right
      return DueOutcome.done({
        inTransaction: record({
          _tag: "MarkSent",
          attempt,
          provider: receipt.provider,
          providerMessageId: receipt.providerMessageId,
          // Email: the subject as sent, so the notification shows it (not only its override).
          ...(rendered.right.subject === undefined ? {} : { subject: rendered.right.subject }),
          // The log provider sent nothing: keep what it would have sent.
          ...(receipt.provider === "log" ? { rendered: rendered.right } : {})
        })
      })
    }
    const error = sent.left
    if (error.permanent) {
      return DueOutcome.failed({
        error: error.reason,
        inTransaction: record({ _tag: "MarkFailed", attempt, reason: error.reason, code: error.code })
      })
    }
    // Transient: again after the back-off (or the provider's Retry-After), inside the window. The
    // window runs from the first try, not from when the send became due: a send first tried late (a
    // worker backlog, `scheduledAt` cleared long after creation) still gets its retries.
    const windowStart = (triedBefore === 0 ? undefined : yield* firstTryOfRun(stream)) ?? now
    const windowEnd = windowStart + RETRY_WINDOW_MS
    const retryAfterMs = (error.retryAfterSeconds ?? 0) * 1000
    const delay = Math.max(retryDelayMs(notificationId, attempt), retryAfterMs)
    const next = Math.min(now + delay, windowEnd)
    // A provider's Retry-After is never cut short: trying before it would only be refused again.
    const beyondRetryAfter = now + retryAfterMs > windowEnd
    if (attempt >= MAX_SEND_ATTEMPTS || next <= now || beyondRetryAfter) {
      const why = beyondRetryAfter
        ? ` (Retry-After ${error.retryAfterSeconds} s is past the ${RETRY_WINDOW_MS / 60_000} min retry window)`
        : ""
      const reason = `gave up after ${attempt} attempts: ${error.reason}${why}`
      return DueOutcome.failed({
        error: reason,
        inTransaction: record({ _tag: "MarkFailed", attempt, reason, code: error.code })
      })
    }
    const nextAttemptAt = new Date(next)
    return DueOutcome.retry({
      at: nextAttemptAt,
      error: error.reason,
      inTransaction: record({
        _tag: "RecordAttempt",
        attempt,
        error: error.reason,
        code: error.code,
        nextAttemptAt
      })
    })
  }).pipe(Effect.annotateLogs({ "notification.id": item.key }))

/** The sender processor (`ROLE=worker|all`): `NOTIFICATION_CONCURRENCY` sends at once per process. */
export const notificationSender = (): Processor<
  SqlClient.SqlClient | AppConfig | CommandRunner | NotificationProviders | DueWork | EventStore
> => {
  const name = "notification-sender"
  return {
    name,
    run: Effect.flatMap(
      AppConfig,
      (config) =>
        dueWorker({
          name,
          kinds: [SEND_KIND],
          concurrency: config.notifications.senderConcurrency,
          // Longer than one provider call may take, so a slow send keeps its claim.
          leaseTtl: Duration.seconds(Math.max(60, config.notifications.sendTimeoutSeconds * 3)),
          // Unexpected errors (the database, a defect) retry too, but never forever.
          maxAttempts: 20,
          handle: handleSend
        }).run
    )
  }
}
