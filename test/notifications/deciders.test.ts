/**
 * The notification, template and settings aggregates as pure deciders (no database): the status
 * machine `pending` → `sent` | `failed` | `cancelled` with its 409 cases, metadata patches,
 * rescheduling, late delivery outcomes, idempotent requests, shredded personal fields, and a
 * property over random command sequences against a small model.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import * as fc from "fast-check"
import { shredded } from "../../src/eventstore/EventType.js"
import { fold } from "../../src/kernel/Decider.js"
import * as Ids from "../../src/kernel/Ids.js"
import { automaticNotificationId } from "../../src/notifications/automatic.js"
import {
  type NotificationCommand,
  NotificationDecider,
  type NotificationState,
  SettingsDecider,
  type TemplateCommand,
  TemplateDecider
} from "../../src/notifications/decider.js"
import { NotificationRequested } from "../../src/notifications/events.js"
import { effectiveSettings } from "../../src/notifications/Notifications.js"
import { MAX_SEND_ATTEMPTS, RETRY_WINDOW_MS, retryDelayMs } from "../../src/notifications/sender.js"
import { deciderSpec } from "../support/decider.js"

const notification = deciderSpec(NotificationDecider)
const template = deciderSpec(TemplateDecider)
const settings = deciderSpec(SettingsDecider)
const run = notification.run

const ID = "ntf_0000000000em5vv92qb8mxrkqn"

const request: NotificationCommand = {
  _tag: "Request",
  notificationId: ID,
  customerId: "cus_01jd4x8m6ffq2b3n5r7t9v1w3y",
  eventName: "manual",
  channel: "email",
  to: "ann@example.com",
  templateId: "tpl_builtin_order_confirmed_email",
  data: { displayId: "1001" },
  metadata: { campaign: "spring" }
}

const pending = run(NotificationDecider.initialState, request)

describe("notification requests", () => {
  it("a request makes a pending notification under its customer's key", () => {
    const events = notification.when(request).events
    expect(events.map((e) => e.type)).toEqual(["notification.requested"])
    const data = events[0]?.data
    expect(data).toMatchObject({ notificationId: ID, subjectId: request.customerId, channel: "email" })
    expect(pending.status).toBe("pending")
    expect(pending.to).toBe("ann@example.com")
    expect(pending.metadata).toEqual({ campaign: "spring" })
  })

  it("without a customer, the notification is its own subject", () => {
    const { customerId: _, ...anonymous } = request as Extract<NotificationCommand, { _tag: "Request" }>
    const events = notification.when(anonymous).events
    expect(events[0]?.data).toMatchObject({ subjectId: ID })
  })

  it("a request whose metadata is over the limits is refused", () => {
    const metadata = Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, i]))
    notification.when({ ...request, metadata }).thenFails("NotificationMetadataInvalid")
  })

  it("requesting the same id again adds nothing (replayed triggers)", () => {
    notification.givenState(pending).when(request).thenNothing()
  })

  it("every other command on an unknown notification is not found", () => {
    for (const command of [{ _tag: "Cancel" }, { _tag: "Update", metadata: {} }] as const) {
      notification.when(command).thenFails("NotificationNotFound")
    }
  })

  it("shredded personal fields fold to absent values, not to the marker", () => {
    const event = NotificationRequested.make({
      notificationId: ID,
      subjectId: ID,
      eventName: "manual",
      channel: "sms",
      to: shredded,
      data: shredded,
      metadata: shredded
    })
    const state = fold(NotificationDecider, [event])
    expect(state.to).toBeUndefined()
    expect(state.data).toEqual({})
    expect(state.metadata).toEqual({})
  })
})

describe("updates of a pending notification", () => {
  it("rescheduling records the new time; the same time again is no change", () => {
    const at = new Date("2030-01-01T00:00:00Z")
    const events = notification.givenState(pending).when({ _tag: "Update", scheduledAt: at }).events
    expect(events.map((e) => e.type)).toEqual(["notification.rescheduled"])
    const scheduled = fold(NotificationDecider, events, pending)
    expect(scheduled.scheduledAt).toEqual(at)
    notification
      .givenState(scheduled)
      .when({ _tag: "Update", scheduledAt: new Date(at) })
      .thenNothing()
    const asap = run(scheduled, { _tag: "Update", scheduledAt: null })
    expect(asap.scheduledAt).toBeUndefined()
  })

  it("metadata is merged: a null key is removed, null clears everything", () => {
    const merged = run(pending, { _tag: "Update", metadata: { campaign: null, owner: "ops" } })
    expect(merged.metadata).toEqual({ owner: "ops" })
    expect(run(merged, { _tag: "Update", metadata: null }).metadata).toEqual({})
  })

  it("metadata over the limits is refused", () => {
    const tooMany = Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, i]))
    notification
      .givenState(pending)
      .when({ _tag: "Update", metadata: tooMany })
      .thenFails("NotificationMetadataInvalid")
  })
})

describe("the status machine", () => {
  const sent = run(pending, { _tag: "MarkSent", attempt: 1, provider: "smtp", providerMessageId: "<m>" })
  const failed = run(pending, { _tag: "MarkFailed", attempt: 1, reason: "SMTP 550: no such user", code: 550 })
  const cancelled = run(pending, { _tag: "Cancel" })

  it("pending → sent, failed or cancelled", () => {
    expect(sent.status).toBe("sent")
    expect(sent.attempts).toBe(1)
    expect(failed.status).toBe("failed")
    expect(cancelled.status).toBe("cancelled")
  })

  it("only a pending notification can be updated or cancelled (the 409s)", () => {
    for (const state of [sent, failed, cancelled]) {
      for (const command of [{ _tag: "Cancel" }, { _tag: "Update", metadata: { a: 1 } }] as const) {
        notification.givenState(state).when(command).thenFails({
          _tag: "NotificationNotPending",
          status: state.status
        })
      }
    }
  })

  it("a transient failure keeps it pending and counts the attempt", () => {
    const retried = run(pending, {
      _tag: "RecordAttempt",
      attempt: 1,
      error: "SMTP 451: try later",
      code: 451,
      nextAttemptAt: new Date("2030-01-01T00:00:10Z")
    })
    expect(retried.status).toBe("pending")
    expect(retried.attempts).toBe(1)
  })

  it("outcomes after it left pending are dropped (a reclaimed send, a cancel in between)", () => {
    const late: ReadonlyArray<NotificationCommand> = [
      { _tag: "MarkSent", attempt: 2, provider: "smtp", providerMessageId: null },
      { _tag: "MarkFailed", attempt: 2, reason: "late" },
      { _tag: "RecordAttempt", attempt: 2, error: "late", nextAttemptAt: new Date(0) }
    ]
    for (const state of [sent, failed, cancelled]) {
      for (const command of late) notification.givenState(state).when(command).thenNothing()
    }
  })

  it("a property: any command sequence keeps the state machine's rules", () => {
    const command = fc.oneof(
      fc.constant<NotificationCommand>({ _tag: "Cancel" }),
      fc.constant<NotificationCommand>({
        _tag: "MarkSent",
        attempt: 1,
        provider: "log",
        providerMessageId: null
      }),
      fc.constant<NotificationCommand>({ _tag: "MarkFailed", attempt: 1, reason: "x" }),
      fc.constant<NotificationCommand>({
        _tag: "RecordAttempt",
        attempt: 1,
        error: "x",
        nextAttemptAt: new Date(0)
      }),
      fc
        .option(fc.date({ min: new Date(0), max: new Date("2100-01-01"), noInvalidDate: true }))
        .map((d): NotificationCommand => ({ _tag: "Update", scheduledAt: d })),
      fc
        .dictionary(fc.string({ minLength: 1, maxLength: 5 }), fc.option(fc.integer()))
        .map((m): NotificationCommand => ({ _tag: "Update", metadata: m }))
    )
    fc.assert(
      fc.property(fc.array(command, { maxLength: 20 }), (commands) => {
        let state = pending
        let model: NotificationState["status"] = "pending"
        for (const c of commands) {
          const result = notification.givenState(state).when(c).result
          if (model !== "pending") {
            // Settled: changes are refused, outcomes dropped; the status never moves again.
            if (c._tag === "Cancel" || c._tag === "Update") expect(Either.isLeft(result)).toBe(true)
            else expect(Either.getOrThrow(result)).toEqual([])
          } else if (Either.isRight(result)) {
            if (c._tag === "Cancel") model = "cancelled"
            if (c._tag === "MarkSent") model = "sent"
            if (c._tag === "MarkFailed") model = "failed"
            state = fold(NotificationDecider, result.right, state)
          } else {
            expect(result.left._tag).toBe("NotificationMetadataInvalid")
          }
          expect(state.status).toBe(model)
        }
      })
    )
  })
})

describe("templates and settings", () => {
  const create: TemplateCommand = {
    _tag: "Create",
    templateId: "tpl_0000000000ecbb8hqvs28v1x1b",
    name: "Receipt",
    channel: "email",
    subject: "Order {{ displayId }}",
    body: "Thanks"
  }

  it("a template is created, changed only when its content changes, and deleted once", () => {
    const created = fold(TemplateDecider, template.when(create).events)
    expect(created.status).toBe("live")
    const { _tag, templateId: _, ...content } = create as Extract<TemplateCommand, { _tag: "Create" }>
    template
      .givenState(created)
      .when({ _tag: "Update", ...content })
      .thenNothing()
    const changed = template
      .givenState(created)
      .when({ _tag: "Update", ...content, body: "Thank you" }).events
    expect(changed.map((e) => e.type)).toEqual(["notification_template.updated"])
    const deleted = fold(
      TemplateDecider,
      template.givenState(created).when({ _tag: "Delete" }).events,
      created
    )
    template.givenState(deleted).when({ _tag: "Delete" }).thenFails("TemplateNotFound")
  })

  it("settings record only the triggers that changed", () => {
    const email = { enabled: true, channels: ["email" as const], templateId: null }
    const first = settings.when({
      _tag: "Change",
      events: { "order.shipped": { ...email, channels: ["email", "sms"] } }
    }).events
    const state = fold(SettingsDecider, first)
    const second = settings.givenState(state).when({
      _tag: "Change",
      events: {
        "order.shipped": { ...email, channels: ["email", "sms"] },
        "order.delivered": { ...email, enabled: false }
      }
    }).events
    expect(second.map((e) => Object.keys(e.data.events))).toEqual([["order.delivered"]])
  })

  it("effective settings: email on by default, critical triggers flagged", () => {
    const settings = effectiveSettings([
      { trigger: "order.shipped", enabled: false, channels: ["sms"], templateId: null }
    ])
    expect(settings.of("order.delivered")).toEqual({
      enabled: true,
      channels: ["email"],
      templateId: null,
      critical: false
    })
    expect(settings.of("order.shipped").enabled).toBe(false)
    expect(settings.of("customer.password_reset").critical).toBe(true)
    expect(settings.of("order.confirmed").critical).toBe(true)
    expect(Object.keys(settings.all)).toHaveLength(10)
  })
})

describe("retry schedule and deterministic ids", () => {
  it("at most 8 tries, growing delays, all within 30 minutes", () => {
    for (const id of [ID, "ntf_0000000000ecbb8hqvs28v1x1b", "ntf_01jd4x8m6ffq2b3n5r7t9v1w3y"]) {
      const delays = Array.from({ length: MAX_SEND_ATTEMPTS - 1 }, (_, i) => retryDelayMs(id, i + 1))
      for (let i = 1; i < delays.length; i++) expect(delays[i]).toBeGreaterThan(delays[i - 1] ?? 0)
      expect(delays.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(RETRY_WINDOW_MS)
      expect(delays[0]).toBeGreaterThanOrEqual(8_000)
    }
  })

  it("the jitter is deterministic per notification and attempt", () => {
    expect(retryDelayMs(ID, 3)).toBe(retryDelayMs(ID, 3))
  })

  it("an automatic notification's id depends only on trigger, event and channel, ordered by the event's time", () => {
    const event = {
      id: "evt_0000000000em5vv92qb8mxrkqn",
      type: "order.confirmed",
      data: {},
      occurredAt: new Date("2026-11-21T10:00:00Z"),
      sourceEventId: "00000000-0000-7000-8000-000000000000",
      streamId: "order-1",
      position: 1,
      transactionId: "1",
      subjectId: null
    }
    const a = automaticNotificationId("order.confirmed", event, "email")
    expect(automaticNotificationId("order.confirmed", event, "email")).toBe(a)
    expect(automaticNotificationId("order.confirmed", event, "sms")).not.toBe(a)
    expect(Ids.isValid("ntf", a)).toBe(true)
    expect(Ids.timestampOf("ntf", a)).toBe(event.occurredAt.getTime())
  })
})
