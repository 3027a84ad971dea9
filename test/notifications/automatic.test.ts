/**
 * Automatic notifications (spec §6.5; design/WEBHOOKS-NOTIFICATIONS.md "Automatic notifications"):
 * public events → one notification per enabled channel with a deterministic id, delivered through
 * the local peers. The password reset end to end, then synthetic order events inserted straight into
 * the public feed (as the orders context will write them): settings, channels without a recipient,
 * disabled triggers, replays, and erasure.
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { origin } from "../../src/eventstore/Checkpoint.js"
import { insertPublicEvents, type PublicEvent, readPublicEvents } from "../../src/eventstore/PublicEvents.js"
import * as Ids from "../../src/kernel/Ids.js"
import { automaticNotificationId, notifyForEvents } from "../../src/notifications/automatic.js"
import type { Channel, Trigger } from "../../src/notifications/channels.js"
import { builtInTemplateId } from "../../src/notifications/templates.js"
import { registeredShopper } from "../support/customers.js"
import { call, expectError, uniqueEmail } from "../support/identity.js"
import { eventually, notificationsHttp, Peers, staffRequest } from "../support/notifications.js"
import type { ReceivedMail, SmtpSink } from "../support/smtp.js"

// biome-ignore lint/suspicious/noExplicitAny: reply bodies are inspected field by field
type Json = any

const RESET_TOKEN = /^prt_[0-9a-z]{26}[0-9A-Za-z]{43}$/
const NEW_PASSWORD = "a brand new passphrase"

const request = staffRequest

const getNotification = (id: string) => request("GET", `/notification/${id}`)

/** Polls until the notification exists and `predicate` holds (default: sent). */
const until = (
  id: string,
  predicate: (n: Json) => boolean = (n) => n.status === "sent",
  timeoutMs = 10_000
) =>
  eventually(
    Effect.map(
      getNotification(id),
      (r): Json => (r.status === 200 && predicate(r.body) ? r.body : undefined)
    ),
    timeoutMs
  )

const listNotifications = (params: Record<string, string>) =>
  Effect.map(request("GET", `/notification?${new URLSearchParams(params)}`), (r): Json => {
    expect(r.status, r.text).toBe(200)
    return r.body
  })

const changeSettings = (events: Record<string, unknown>) =>
  Effect.map(request("POST", "/notification/settings", { events }), (r): Json => {
    expect(r.status, r.text).toBe(200)
    return r.body
  })

const createCustomer = (fields: Record<string, unknown>) =>
  Effect.map(
    request("POST", "/user", {
      email: uniqueEmail("buyer"),
      firstName: "Grace",
      lastName: "Hopper",
      ...fields
    }),
    (r): Json => {
      expect(r.status, r.text).toBe(201)
      return r.body
    }
  )

const mailsFor = (smtp: SmtpSink, id: string): Array<ReceivedMail> =>
  smtp.messages.filter((m) => m.headers["x-notification-id"] === id)

/**
 * Inserts one public event in its own transaction, as a command of the orders context would, and
 * answers it as the feed will read it (the fields `automaticNotificationId` uses are exact).
 */
const publish = (type: string, data: Record<string, unknown>, subjectId?: string, occurredAt = new Date()) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const id = yield* Ids.make("evt")
    const row = {
      id,
      type,
      data,
      occurredAt,
      sourceEventId: randomUUID(),
      streamId: `order-${String(data.id ?? id)}`,
      ...(subjectId === undefined ? {} : { subjectId })
    }
    yield* sql.withTransaction(insertPublicEvents([row]))
    const event: PublicEvent = { ...row, position: 0, transactionId: "0", subjectId: subjectId ?? null }
    return event
  })

const idOf = (trigger: Trigger, event: PublicEvent, channel: Channel) =>
  automaticNotificationId(trigger, event, channel)

let orders = 1000
const order = (fields: Record<string, unknown> = {}) => {
  const n = ++orders
  return {
    id: Ids.fromUuid("ord", randomUUID()),
    displayId: String(n),
    status: "confirmed",
    email: uniqueEmail(`order${n}`),
    total: 4999,
    currency: "USD",
    createdAt: "2030-03-04T10:00:00.000Z",
    ...fields
  }
}

/** The read model's columns the API does not show. */
const sourceEventOf = (notificationId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ sourceEventId: string | null }>`SELECT source_event_id AS "sourceEventId"
        FROM notifications.notifications WHERE notification_id = ${notificationId}`,
      (rows) => rows[0]?.sourceEventId
    )
  )

const notificationRows = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql<{ id: string; sourceEventId: string | null }>`SELECT notification_id AS id,
      source_event_id AS "sourceEventId" FROM notifications.notifications ORDER BY notification_id`
)

/** The lease generation of the trigger processor's subscription (bumped on every (re)start). */
const triggersGeneration = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql<{ generation: number | string }>`SELECT generation FROM event_store.subscriptions
      WHERE subscription_id = 'notification-triggers'`,
    (rows) => Number(rows[0]?.generation ?? 0)
  )
)

layer(notificationsHttp(), { excludeTestServices: true, timeout: 120_000 })(
  "automatic notifications",
  (it) => {
    it.effect(
      "password reset end to end: one email with the reset link; its token confirms the new password",
      () =>
        Effect.gen(function* () {
          const { smtp } = yield* Peers
          const email = uniqueEmail("forgetful")
          const shopper = yield* registeredShopper(email)
          const r = yield* call("POST", "/auth/password-reset", { json: { email } })
          expect(r.status, r.text).toBe(202)

          const mail = yield* eventually(
            Effect.sync(() => smtp.messages.find((m) => m.to.includes(email))),
            10_000
          )
          expect(mail.to).toEqual([email])
          expect(mail.subject).toBe("Reset your Test Store password")
          const link = /https:\/\/shop\.example\/reset-password\?token=(\S+)/.exec(mail.text)
          expect(link, mail.text).not.toBeNull()
          const token = decodeURIComponent(link?.[1] ?? "")
          expect(token).toMatch(RESET_TOKEN)
          expect(mail.text).toContain(`reset the password for ${email}`)
          expect(mail.text).toMatch(/^Hi Ann,\n/)

          // Recorded as the trigger's notification, sent, with its secrets hidden from the API.
          const id = mail.headers["x-notification-id"] as string
          const sent = yield* until(id)
          expect(sent).toMatchObject({
            eventName: "customer.password_reset",
            channel: "email",
            to: email,
            customerId: shopper.customerId,
            templateId: builtInTemplateId("customer.password_reset", "email"),
            attempts: 1,
            provider: "smtp"
          })
          expect(sent.data.resetToken).toBe("[redacted]")
          expect(sent.data.resetUrl).toBe("[redacted]")
          const listed = yield* listNotifications({ to: email })
          expect(listed.count).toBe(1)

          // The mailed token works, once.
          const confirmed = yield* call("POST", "/auth/password-reset/confirm", {
            json: { token, password: NEW_PASSWORD }
          })
          expect(confirmed.status, confirmed.text).toBe(204)
          const login = yield* call("POST", "/auth/login", { json: { email, password: NEW_PASSWORD } })
          expect(login.status, login.text).toBe(200)
          // Still exactly one mail for that address.
          expect(smtp.messages.filter((m) => m.to.includes(email))).toHaveLength(1)
        })
    )

    it.effect(
      "order.confirmed (synthetic public event): one email per enabled channel, eventName = trigger, sourceEventId = the event",
      () =>
        Effect.gen(function* () {
          const { smtp } = yield* Peers
          const shopper = yield* registeredShopper()
          const data = order({ email: shopper.email, customerId: shopper.customerId })
          const event = yield* publish("order.confirmed", data, shopper.customerId)
          const id = idOf("order.confirmed", event, "email")
          const sent = yield* until(id)
          expect(sent).toMatchObject({
            id,
            eventName: "order.confirmed",
            channel: "email",
            to: shopper.email,
            customerId: shopper.customerId,
            templateId: builtInTemplateId("order.confirmed", "email"),
            status: "sent",
            attempts: 1
          })
          expect(yield* sourceEventOf(id)).toBe(event.id)
          // The data the template rendered from: the snapshot plus the event's identity.
          expect(sent.data).toMatchObject({
            displayId: data.displayId,
            total: 4999,
            event: { id: event.id, type: "order.confirmed", occurredAt: event.occurredAt.toISOString() }
          })

          const mails = mailsFor(smtp, id)
          expect(mails).toHaveLength(1)
          expect(mails[0]?.to).toEqual([shopper.email])
          expect(mails[0]?.subject).toBe(`Your order #${data.displayId} is confirmed`)
          expect(mails[0]?.text).toContain(`Order: #${data.displayId}`)
          expect(mails[0]?.text).toContain("Placed on: March 4, 2030")
          expect(mails[0]?.text).toContain("Total: $49.99")
          // Default settings: email only.
          for (const channel of ["sms", "push"] as const) {
            expectError(
              yield* getNotification(idOf("order.confirmed", event, channel)),
              404,
              "resource_missing"
            )
          }
          const ofEvent = yield* listNotifications({ eventName: "order.confirmed", to: shopper.email })
          expect(ofEvent.count).toBe(1)
        })
    )

    it.effect(
      "order.shipped with sms enabled and an E.164 phone on the customer: an SMS too; push (no device token) is skipped",
      () =>
        Effect.gen(function* () {
          const { smtp, sms } = yield* Peers
          const settings = yield* changeSettings({ "order.shipped": { channels: ["email", "sms", "push"] } })
          expect(settings.events["order.shipped"]).toMatchObject({
            enabled: true,
            channels: ["email", "sms", "push"]
          })
          const phone = "+14155550199"
          const customer = yield* createCustomer({ phone })
          const data = order({
            status: "shipped",
            email: customer.email,
            customerId: customer.id,
            trackingUrl: "https://track.example/1Z999"
          })
          const event = yield* publish("order.shipped", data, customer.id)

          const email = yield* until(idOf("order.shipped", event, "email"))
          const text = yield* until(idOf("order.shipped", event, "sms"))
          expect(email).toMatchObject({ channel: "email", to: customer.email, eventName: "order.shipped" })
          expect(text).toMatchObject({
            channel: "sms",
            to: phone,
            eventName: "order.shipped",
            customerId: customer.id,
            templateId: builtInTemplateId("order.shipped", "sms"),
            provider: "twilio"
          })
          expect(yield* sourceEventOf(text.id)).toBe(event.id)
          expect(mailsFor(smtp, email.id)).toHaveLength(1)
          const texts = sms.requests.filter((r) => (r.body as Json)?.To === phone)
          expect(texts).toHaveLength(1)
          expect((texts[0]?.body as Json)?.Body).toBe(
            `Test Store: Your order #${data.displayId} has shipped. Track it: https://track.example/1Z999`
          )
          // No device token on record: no push notification at all.
          expectError(yield* getNotification(idOf("order.shipped", event, "push")), 404, "resource_missing")

          // A customer with a device token in their metadata gets the push as well.
          const { push } = yield* Peers
          const token = `fcm:${randomUUID().replace(/-/g, "")}`
          const app = yield* createCustomer({ phone: "+14155550177", metadata: { deviceToken: token } })
          const pushed = yield* publish(
            "order.shipped",
            order({ status: "shipped", email: app.email, customerId: app.id, carrier: "UPS" }),
            app.id
          )
          for (const channel of ["email", "sms"] as const)
            yield* until(idOf("order.shipped", pushed, channel))
          const pushId = idOf("order.shipped", pushed, "push")
          expect(yield* until(pushId)).toMatchObject({ channel: "push", to: token, provider: "fcm" })
          const pushes = push.requests.filter((r) => (r.body as Json)?.message?.token === token)
          expect(pushes).toHaveLength(1)
          expect((pushes[0]?.body as Json)?.message?.notification?.body).toBe(
            "Your order is on its way. Carrier: UPS."
          )
          expect((pushes[0]?.body as Json)?.message?.data?.notificationId).toBe(pushId)

          // An order without a customer (guest checkout): nobody to text, so email only.
          const guest = yield* publish("order.shipped", order({ status: "shipped" }))
          yield* until(idOf("order.shipped", guest, "email"))
          expectError(yield* getNotification(idOf("order.shipped", guest, "sms")), 404, "resource_missing")
          expectError(yield* getNotification(idOf("order.shipped", guest, "push")), 404, "resource_missing")
        })
    )

    it.effect("an event over 24 h old notifies nobody (a replay must not mail about yesterday)", () =>
      Effect.gen(function* () {
        const { smtp } = yield* Peers
        const stale = order({ status: "shipped" })
        const old = yield* publish("order.shipped", stale, undefined, new Date(Date.now() - 25 * 3_600_000))
        const marker = yield* publish("order.cancelled", order({ status: "cancelled" }))
        yield* until(idOf("order.cancelled", marker, "email"))
        expectError(yield* getNotification(idOf("order.shipped", old, "email")), 404, "resource_missing")
        expect(smtp.messages.filter((m) => m.to.includes(stale.email))).toHaveLength(0)
      })
    )

    it.effect("a disabled trigger sends nothing", () =>
      Effect.gen(function* () {
        const { smtp } = yield* Peers
        yield* changeSettings({ "order.delivered": { enabled: false } })
        const silent = order({ status: "delivered" })
        const disabled = yield* publish("order.delivered", silent)
        // A later event the processor handles after it: once that one is notified, the first was seen.
        const marker = yield* publish("order.cancelled", order({ status: "cancelled" }))
        yield* until(idOf("order.cancelled", marker, "email"))
        for (const channel of ["email", "sms", "push"] as const) {
          expectError(
            yield* getNotification(idOf("order.delivered", disabled, channel)),
            404,
            "resource_missing"
          )
        }
        expect((yield* listNotifications({ eventName: "order.delivered" })).count).toBe(0)
        expect(smtp.messages.filter((m) => m.to.includes(silent.email))).toHaveLength(0)
        // Left disabled: settings are read when an event is handled, so re-enabling it would make the
        // replay below notify this old event.
      })
    )

    it.effect("a replayed event adds no second notification: same deterministic id, nothing sent twice", () =>
      Effect.gen(function* () {
        const { smtp } = yield* Peers
        const sql = yield* SqlClient.SqlClient
        const data = order()
        const event = yield* publish("order.refunded", { ...data, status: "refunded", refundedAmount: 4999 })
        const id = idOf("order.refunded", event, "email")
        yield* until(id)

        // The same event handled again, directly: nothing new.
        const [stored] = (yield* readPublicEvents({
          after: origin,
          limit: 10_000,
          types: ["order.refunded"]
        })).events.filter((e) => e.id === event.id)
        expect(stored).toBeDefined()
        const before = yield* notificationRows
        yield* sql.withTransaction(notifyForEvents([stored as PublicEvent]))
        expect(yield* notificationRows).toEqual(before)

        // An operator resets the subscription's checkpoint: every event is handled again.
        const mailsBefore = smtp.messages.length
        const generationBefore = yield* triggersGeneration
        yield* sql`UPDATE event_store.subscriptions SET last_xid = '0', last_position = 0
        WHERE subscription_id = 'notification-triggers'`
        // The batch holding the next event fails its fence, the processor restarts from the start of
        // the feed, and reaches that event only after replaying all the earlier ones.
        const next = yield* publish("order.cancelled", order({ status: "cancelled" }))
        const nextId = idOf("order.cancelled", next, "email")
        yield* until(nextId)
        // The processor did start over: it lost its fence and took its lease again.
        expect(yield* triggersGeneration).toBeGreaterThan(generationBefore)
        const after = yield* notificationRows
        const added = after.filter((r) => !before.some((b) => b.id === r.id))
        expect(added, JSON.stringify(added)).toEqual([{ id: nextId, sourceEventId: next.id }])
        expect(after.filter((r) => r.id !== nextId)).toEqual(before)
        expect(after.filter((r) => r.sourceEventId === event.id)).toEqual([{ id, sourceEventId: event.id }])
        // Only the new event's mail went out; every mail in the sink is a different notification.
        yield* eventually(Effect.sync(() => (smtp.messages.length > mailsBefore ? true : undefined)))
        expect(smtp.messages.length).toBe(mailsBefore + 1)
        const ids = smtp.messages.map((m) => m.headers["x-notification-id"])
        expect(new Set(ids).size).toBe(ids.length)
        expect(mailsFor(smtp, id)).toHaveLength(1)
      })
    )

    it.effect("erasing the customer (DELETE /user/:id) removes their notifications from the list", () =>
      Effect.gen(function* () {
        const customer = yield* createCustomer({ phone: "+14155550188" })
        const data = order({ email: customer.email, customerId: customer.id })
        const confirmed = yield* publish("order.confirmed", data, customer.id)
        const shipped = yield* publish("order.shipped", { ...data, status: "shipped" }, customer.id)
        const ids = [
          idOf("order.confirmed", confirmed, "email"),
          idOf("order.shipped", shipped, "email"),
          idOf("order.shipped", shipped, "sms")
        ]
        for (const id of ids) yield* until(id)
        expect((yield* listNotifications({ to: customer.email })).count).toBe(2)
        expect((yield* listNotifications({ to: "+14155550188" })).count).toBe(1)

        const erased = yield* request("DELETE", `/user/${customer.id}`)
        expect(erased.status, erased.text).toBe(204)
        expect((yield* listNotifications({ to: customer.email })).count).toBe(0)
        expect((yield* listNotifications({ to: "+14155550188" })).count).toBe(0)
        const all = yield* listNotifications({ display: "100" })
        for (const id of ids) {
          expect(all.models.map((n: Json) => n.id)).not.toContain(id)
          expectError(yield* getNotification(id), 404, "resource_missing")
        }
      })
    )
  }
)
