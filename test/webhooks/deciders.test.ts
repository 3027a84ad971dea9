/** The webhook endpoint and delivery deciders, pure: no database, no clock. */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { fold } from "../../src/kernel/Decider.js"
import {
  DeliveryDecider,
  type DeliveryState,
  PREVIOUS_SECRET_VALIDITY_MS,
  signingSecrets,
  WebhookDecider,
  type WebhookState
} from "../../src/webhooks/decider.js"
import type { DeliveryEvent, WebhookEvent } from "../../src/webhooks/events.js"

const T = new Date(Date.UTC(2030, 0, 1))
const later = (ms: number) => new Date(T.getTime() + ms)

const runWebhook = (
  events: ReadonlyArray<WebhookEvent>,
  command: Parameters<typeof WebhookDecider.decide>[0]
) => {
  const state = fold(WebhookDecider, events)
  return Effect.runSyncExit(WebhookDecider.decide(command, state))
}
const okWebhook = (
  events: ReadonlyArray<WebhookEvent>,
  command: Parameters<typeof WebhookDecider.decide>[0]
) => {
  const exit = runWebhook(events, command)
  if (Exit.isFailure(exit)) throw new Error(`decide failed: ${String(exit.cause)}`)
  return exit.value
}

const created = okWebhook([], {
  _tag: "Create",
  webhookId: "wh_1",
  url: "https://example.com/hook",
  events: ["order.created"],
  metadata: {},
  secret: "whsec_first",
  createdBy: { type: "user", id: "usr_1" }
})
const stateOf = (events: ReadonlyArray<WebhookEvent>): WebhookState => fold(WebhookDecider, events)

describe("webhook endpoint decider", () => {
  it("create is idempotent and starts active with its secret", () => {
    expect(created.map((e) => e.type)).toEqual(["webhook.created"])
    expect(stateOf(created)).toMatchObject({
      status: "active",
      secret: "whsec_first",
      url: "https://example.com/hook"
    })
    expect(
      okWebhook(created, {
        _tag: "Create",
        webhookId: "wh_1",
        url: "x",
        events: [],
        metadata: {},
        secret: "s",
        createdBy: { type: "user", id: "u" }
      })
    ).toEqual([])
  })

  it("update records only what changed; status active re-enables, disabled disables", () => {
    expect(
      okWebhook(created, {
        _tag: "Update",
        changes: { url: "https://example.com/hook", events: ["order.created"] }
      })
    ).toEqual([])
    const changed = okWebhook(created, {
      _tag: "Update",
      changes: { events: ["order.updated"], status: "disabled" }
    })
    expect(changed.map((e) => e.type)).toEqual(["webhook.updated", "webhook.disabled"])
    const disabled = [...created, ...changed]
    expect(stateOf(disabled)).toMatchObject({
      status: "disabled",
      disabledReason: "manual",
      events: ["order.updated"]
    })
    const enabled = okWebhook(disabled, { _tag: "Update", changes: { status: "active" } })
    expect(enabled.map((e) => e.type)).toEqual(["webhook.enabled"])
    expect(stateOf([...disabled, ...enabled]).status).toBe("active")
  })

  it("metadata over the limits is refused", () => {
    const big = Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, i]))
    const exit = runWebhook(created, { _tag: "Update", changes: { metadata: big } })
    expect(Exit.isFailure(exit)).toBe(true)
  })

  it("rotation: the previous secret signs for 24 h; a second rotation inside the window needs force", () => {
    const rotated = okWebhook(created, { _tag: "RotateSecret", secret: "whsec_second", at: T, force: false })
    const state = stateOf([...created, ...rotated])
    expect(state.previousSecretExpiresAt?.getTime()).toBe(T.getTime() + PREVIOUS_SECRET_VALIDITY_MS)
    expect(signingSecrets(state, later(1000))).toEqual({ current: "whsec_second", previous: "whsec_first" })
    expect(signingSecrets(state, later(PREVIOUS_SECRET_VALIDITY_MS))).toEqual({
      current: "whsec_second",
      previous: undefined
    })
    const again = runWebhook([...created, ...rotated], {
      _tag: "RotateSecret",
      secret: "whsec_third",
      at: later(1000),
      force: false
    })
    expect(Exit.isFailure(again) && String(again.cause)).toContain("WebhookRotationInProgress")
    expect(
      okWebhook([...created, ...rotated], {
        _tag: "RotateSecret",
        secret: "whsec_third",
        at: later(1000),
        force: true
      })
    ).toHaveLength(1)
    expect(
      okWebhook([...created, ...rotated], {
        _tag: "RotateSecret",
        secret: "whsec_third",
        at: later(PREVIOUS_SECRET_VALIDITY_MS),
        force: false
      })
    ).toHaveLength(1)
  })

  it("health: failing keeps its first failingSince; success recovers; disable only if still failing since then", () => {
    const failing = okWebhook(created, { _tag: "MarkFailing", at: T, deliveryId: "dlv_1" })
    const f = [...created, ...failing]
    expect(stateOf(f)).toMatchObject({ status: "failing", failingSince: T })
    expect(okWebhook(f, { _tag: "MarkFailing", at: later(5000), deliveryId: "dlv_2" })).toEqual([])
    // A disable check armed for an earlier failing period does nothing.
    expect(okWebhook(f, { _tag: "Disable", reason: "failing", failingSince: later(-1) })).toEqual([])
    const disabled = okWebhook(f, { _tag: "Disable", reason: "failing", failingSince: T })
    expect(stateOf([...f, ...disabled])).toMatchObject({ status: "disabled", disabledReason: "failing" })
    const recovered = okWebhook(f, { _tag: "MarkSucceeded", deliveryId: "dlv_3" })
    expect(stateOf([...f, ...recovered])).toMatchObject({ status: "active", failingSince: undefined })
    // Success on an active endpoint changes nothing; a failing-disable on an active one neither.
    expect(okWebhook(created, { _tag: "MarkSucceeded", deliveryId: "dlv_4" })).toEqual([])
    expect(okWebhook(created, { _tag: "Disable", reason: "failing" })).toEqual([])
    // 410 disables an active endpoint at once.
    expect(
      okWebhook(created, { _tag: "Disable", reason: "gone", deliveryId: "dlv_5" }).map((e) => e.type)
    ).toEqual(["webhook.disabled"])
  })

  it("deleted: every command is not found, and the secret is forgotten", () => {
    const deleted = [...created, ...okWebhook(created, { _tag: "Delete" })]
    expect(stateOf(deleted).secret).toBeUndefined()
    expect(Exit.isFailure(runWebhook(deleted, { _tag: "Update", changes: { status: "active" } }))).toBe(true)
    expect(Exit.isFailure(runWebhook([], { _tag: "Delete" }))).toBe(true)
  })
})

const deliveryRun = (
  events: ReadonlyArray<DeliveryEvent>,
  command: Parameters<typeof DeliveryDecider.decide>[0]
) => {
  const exit = Effect.runSyncExit(DeliveryDecider.decide(command, fold(DeliveryDecider, events)))
  if (Exit.isFailure(exit)) throw new Error(`decide failed: ${String(exit.cause)}`)
  return exit.value
}
const dState = (events: ReadonlyArray<DeliveryEvent>): DeliveryState => fold(DeliveryDecider, events)
const attemptOf = (succeeded: boolean, next: Date | undefined, trigger: "auto" | "manual" = "auto") =>
  ({
    _tag: "RecordAttempt",
    trigger,
    attemptedAt: T,
    succeeded,
    statusCode: succeeded ? 200 : 500,
    durationMs: 12.4,
    errorClass: succeeded ? null : "http",
    error: succeeded ? null : "HTTP 500",
    responseExcerpt: null,
    nextAttemptAt: next
  }) as const

describe("webhook delivery decider", () => {
  const made = deliveryRun([], {
    _tag: "Create",
    deliveryId: "dlv_1",
    webhookId: "wh_1",
    eventId: "evt_1",
    eventType: "order.created"
  })

  it("attempts count up; a failure with a next time stays pending, without one it has failed", () => {
    const first = deliveryRun(made, attemptOf(false, later(60_000)))
    const one = [...made, ...first]
    expect(dState(one)).toMatchObject({ status: "pending", attempts: 1, autoFailures: 1 })
    expect(first[0]).toMatchObject({ data: { attempt: 1, durationMs: 12 } })
    const last = [...one, ...deliveryRun(one, attemptOf(false, undefined))]
    expect(dState(last)).toMatchObject({ status: "failed", attempts: 2, autoFailures: 2 })
    // Late outcomes (a reclaimed attempt) are dropped once it is no longer pending.
    expect(deliveryRun(last, attemptOf(true, undefined))).toEqual([])
  })

  it("redelivery: one manual attempt, which does not count towards the automatic schedule", () => {
    const failed = [...made, ...deliveryRun(made, attemptOf(false, undefined))]
    const asked = deliveryRun(failed, { _tag: "RequestRedelivery", source: "redeliver" })
    const queued = [...failed, ...asked]
    expect(dState(queued)).toMatchObject({ status: "pending", manual: true })
    // Asked twice: nothing more.
    expect(deliveryRun(queued, { _tag: "RequestRedelivery", source: "recover" })).toEqual([])
    const tried = [...queued, ...deliveryRun(queued, attemptOf(false, undefined, "manual"))]
    expect(dState(tried)).toMatchObject({ status: "failed", attempts: 2, autoFailures: 1, manual: false })
  })

  it("abandon only a pending delivery; create twice adds nothing", () => {
    expect(deliveryRun(made, { _tag: "Abandon", reason: "endpoint disabled" }).map((e) => e.type)).toEqual([
      "webhook_delivery.abandoned"
    ])
    const done = [...made, ...deliveryRun(made, attemptOf(true, undefined))]
    expect(deliveryRun(done, { _tag: "Abandon", reason: "x" })).toEqual([])
    expect(
      deliveryRun(done, {
        _tag: "Create",
        deliveryId: "dlv_1",
        webhookId: "wh_1",
        eventId: "evt_1",
        eventType: "order.created"
      })
    ).toEqual([])
  })
})
