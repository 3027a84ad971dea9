/** The webhook endpoint and delivery deciders, pure: no database, no clock. */
import { describe, expect, it } from "@effect/vitest"
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
import { deciderSpec } from "../support/decider.js"

const T = new Date(Date.UTC(2030, 0, 1))
const later = (ms: number) => new Date(T.getTime() + ms)

const webhook = deciderSpec(WebhookDecider)
const delivery = deciderSpec(DeliveryDecider)

const created = webhook.given([]).when({
  _tag: "Create",
  webhookId: "wh_1",
  url: "https://example.com/hook",
  events: ["order.created"],
  metadata: {},
  secret: "whsec_first",
  createdBy: { type: "user", id: "usr_1" }
}).events
const stateOf = (events: ReadonlyArray<WebhookEvent>): WebhookState => fold(WebhookDecider, events)

describe("webhook endpoint decider", () => {
  it("create is idempotent and starts active with its secret", () => {
    expect(created.map((e) => e.type)).toEqual(["webhook.created"])
    expect(stateOf(created)).toMatchObject({
      status: "active",
      secret: "whsec_first",
      url: "https://example.com/hook"
    })
    webhook
      .given(created)
      .when({
        _tag: "Create",
        webhookId: "wh_1",
        url: "x",
        events: [],
        metadata: {},
        secret: "s",
        createdBy: { type: "user", id: "u" }
      })
      .thenNothing()
  })

  it("update records only what changed; status active re-enables, disabled disables", () => {
    webhook
      .given(created)
      .when({
        _tag: "Update",
        changes: { url: "https://example.com/hook", events: ["order.created"] }
      })
      .thenNothing()
    const changed = webhook.given(created).when({
      _tag: "Update",
      changes: { events: ["order.updated"], status: "disabled" }
    }).events
    expect(changed.map((e) => e.type)).toEqual(["webhook.updated", "webhook.disabled"])
    const disabled = [...created, ...changed]
    expect(stateOf(disabled)).toMatchObject({
      status: "disabled",
      disabledReason: "manual",
      events: ["order.updated"]
    })
    const enabled = webhook.given(disabled).when({ _tag: "Update", changes: { status: "active" } }).events
    expect(enabled.map((e) => e.type)).toEqual(["webhook.enabled"])
    expect(stateOf([...disabled, ...enabled]).status).toBe("active")
  })

  it("metadata over the limits is refused", () => {
    const big = Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, i]))
    webhook
      .given(created)
      .when({ _tag: "Update", changes: { metadata: big } })
      .thenFails("WebhookMetadataInvalid")
  })

  it("rotation: the previous secret signs for 24 h; a second rotation inside the window needs force", () => {
    const rotated = webhook
      .given(created)
      .when({ _tag: "RotateSecret", secret: "whsec_second", at: T, force: false }).events
    const state = stateOf([...created, ...rotated])
    expect(state.previousSecretExpiresAt?.getTime()).toBe(T.getTime() + PREVIOUS_SECRET_VALIDITY_MS)
    expect(signingSecrets(state, later(1000))).toEqual({ current: "whsec_second", previous: "whsec_first" })
    expect(signingSecrets(state, later(PREVIOUS_SECRET_VALIDITY_MS))).toEqual({
      current: "whsec_second",
      previous: undefined
    })
    webhook
      .given([...created, ...rotated])
      .when({ _tag: "RotateSecret", secret: "whsec_third", at: later(1000), force: false })
      .thenFails("WebhookRotationInProgress")
    expect(
      webhook.given([...created, ...rotated]).when({
        _tag: "RotateSecret",
        secret: "whsec_third",
        at: later(1000),
        force: true
      }).events
    ).toHaveLength(1)
    expect(
      webhook.given([...created, ...rotated]).when({
        _tag: "RotateSecret",
        secret: "whsec_third",
        at: later(PREVIOUS_SECRET_VALIDITY_MS),
        force: false
      }).events
    ).toHaveLength(1)
  })

  it("health: failing keeps its first failingSince; success recovers; disable only if still failing since then", () => {
    const failing = webhook.given(created).when({ _tag: "MarkFailing", at: T, deliveryId: "dlv_1" }).events
    const f = [...created, ...failing]
    expect(stateOf(f)).toMatchObject({ status: "failing", failingSince: T })
    webhook
      .given(f)
      .when({ _tag: "MarkFailing", at: later(5000), deliveryId: "dlv_2" })
      .thenNothing()
    // A disable check armed for an earlier failing period does nothing.
    webhook
      .given(f)
      .when({ _tag: "Disable", reason: "failing", failingSince: later(-1) })
      .thenNothing()
    const disabled = webhook.given(f).when({ _tag: "Disable", reason: "failing", failingSince: T }).events
    expect(stateOf([...f, ...disabled])).toMatchObject({ status: "disabled", disabledReason: "failing" })
    const recovered = webhook.given(f).when({ _tag: "MarkSucceeded", deliveryId: "dlv_3" }).events
    expect(stateOf([...f, ...recovered])).toMatchObject({ status: "active", failingSince: undefined })
    // Success on an active endpoint changes nothing; a failing-disable on an active one neither.
    webhook.given(created).when({ _tag: "MarkSucceeded", deliveryId: "dlv_4" }).thenNothing()
    webhook.given(created).when({ _tag: "Disable", reason: "failing" }).thenNothing()
    // 410 disables an active endpoint at once.
    expect(
      webhook
        .given(created)
        .when({ _tag: "Disable", reason: "gone", deliveryId: "dlv_5" })
        .events.map((e) => e.type)
    ).toEqual(["webhook.disabled"])
  })

  it("deleted: every command is not found, and the secret is forgotten", () => {
    const deleted = [...created, ...webhook.given(created).when({ _tag: "Delete" }).events]
    expect(stateOf(deleted).secret).toBeUndefined()
    webhook
      .given(deleted)
      .when({ _tag: "Update", changes: { status: "active" } })
      .thenFails("WebhookNotFound")
    webhook.given([]).when({ _tag: "Delete" }).thenFails("WebhookNotFound")
  })
})

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
  const made = delivery.given([]).when({
    _tag: "Create",
    deliveryId: "dlv_1",
    webhookId: "wh_1",
    eventId: "evt_1",
    eventType: "order.created"
  }).events

  it("attempts count up; a failure with a next time stays pending, without one it has failed", () => {
    const first = delivery.given(made).when(attemptOf(false, later(60_000))).events
    const one = [...made, ...first]
    expect(dState(one)).toMatchObject({ status: "pending", attempts: 1, autoFailures: 1 })
    expect(first[0]).toMatchObject({ data: { attempt: 1, durationMs: 12 } })
    const last = [...one, ...delivery.given(one).when(attemptOf(false, undefined)).events]
    expect(dState(last)).toMatchObject({ status: "failed", attempts: 2, autoFailures: 2 })
    // Late outcomes (a reclaimed attempt) are dropped once it is no longer pending.
    delivery.given(last).when(attemptOf(true, undefined)).thenNothing()
  })

  it("redelivery: one manual attempt, which does not count towards the automatic schedule", () => {
    const failed = [...made, ...delivery.given(made).when(attemptOf(false, undefined)).events]
    const asked = delivery.given(failed).when({ _tag: "RequestRedelivery", source: "redeliver" }).events
    const queued = [...failed, ...asked]
    expect(dState(queued)).toMatchObject({ status: "pending", manual: true })
    // Asked twice: nothing more.
    delivery.given(queued).when({ _tag: "RequestRedelivery", source: "recover" }).thenNothing()
    const tried = [...queued, ...delivery.given(queued).when(attemptOf(false, undefined, "manual")).events]
    expect(dState(tried)).toMatchObject({ status: "failed", attempts: 2, autoFailures: 1, manual: false })
  })

  it("abandon only a pending delivery; create twice adds nothing", () => {
    expect(
      delivery
        .given(made)
        .when({ _tag: "Abandon", reason: "endpoint disabled" })
        .events.map((e) => e.type)
    ).toEqual(["webhook_delivery.abandoned"])
    const done = [...made, ...delivery.given(made).when(attemptOf(true, undefined)).events]
    delivery.given(done).when({ _tag: "Abandon", reason: "x" }).thenNothing()
    delivery
      .given(done)
      .when({
        _tag: "Create",
        deliveryId: "dlv_1",
        webhookId: "wh_1",
        eventId: "evt_1",
        eventType: "order.created"
      })
      .thenNothing()
  })
})
