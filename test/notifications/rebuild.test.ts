/**
 * The notifications read models are a pure function of the log: after a varied history (sent,
 * failed, retried, rescheduled, cancelled and resent notifications, template edits and deletions,
 * settings changes, an automatic password-reset email, an erased customer) a rebuild from position
 * zero reproduces exactly the rows of `notifications.notifications`, `.templates` and `.settings`.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { NotificationsProjection } from "../../src/notifications/projection.js"
import { rebuildProjection } from "../../src/processors/Rebuild.js"
import { createCustomer } from "../support/customers.js"
import { rowsOf } from "../support/database.js"
import { adminLogin, call, registerShopper } from "../support/identity.js"
import { eventually, notificationsHttp, Peers } from "../support/notifications.js"

const tables = Effect.all({
  notifications: rowsOf("notifications.notifications", "notification_id"),
  templates: rowsOf("notifications.templates", "template_id"),
  settings: rowsOf("notifications.settings", "trigger")
})

const ok = (status: number) => (r: { status: number; text: string }) => {
  expect(r.status, r.text).toBe(status)
  // biome-ignore lint/suspicious/noExplicitAny: test bodies are inspected field by field
  return r as { status: number; text: string; body: any }
}

layer(notificationsHttp(), { excludeTestServices: true, timeout: 120_000 })(
  "notifications projection rebuild",
  (it) => {
    it.effect("rebuilding from the log reproduces every notifications row", () =>
      Effect.gen(function* () {
        const peers = yield* Peers
        const token = (yield* adminLogin()).accessToken
        const status = (id: string, wanted: string) =>
          eventually(
            Effect.map(call("GET", `/notification/${id}`, { token }), (r) =>
              r.body.status === wanted ? r.body : undefined
            )
          )

        const template = (yield* Effect.map(
          call("POST", "/notification/template", {
            token,
            json: { name: "Hello", channel: "email", subject: "Hi {{ name }}", body: "Hello {{ name }}" }
          }),
          ok(201)
        )).body
        yield* Effect.map(
          call("PUT", `/notification/template/${template.id}`, {
            token,
            json: { body: "Hello again {{ name }}" }
          }),
          ok(200)
        )
        const doomed = (yield* Effect.map(
          call("POST", "/notification/template", {
            token,
            json: { name: "Short", channel: "sms", body: "Hi" }
          }),
          ok(201)
        )).body
        yield* Effect.map(call("DELETE", `/notification/template/${doomed.id}`, { token }), ok(204))
        yield* Effect.map(
          call("POST", "/notification/settings", {
            token,
            json: {
              events: {
                "order.shipped": { channels: ["email", "sms"] },
                "order.delivered": { enabled: false }
              }
            }
          }),
          ok(200)
        )

        const email = (to: string, extra: Record<string, unknown> = {}) =>
          Effect.map(
            call("POST", "/notification", {
              token,
              json: { channel: "email", to, templateId: template.id, data: { name: "Ann" }, ...extra }
            }),
            ok(201)
          )
        // Sent; failed for good (550); sent after one transient failure (451).
        const sent = (yield* email("sent@example.com", { metadata: { a: 1 } })).body
        yield* status(sent.id, "sent")
        peers.smtp.rejectNext(550, "5.1.1 no such user")
        const failed = (yield* email("nobody@example.com")).body
        yield* status(failed.id, "failed")
        peers.smtp.rejectNext(451, "4.3.0 try again later")
        const retried = (yield* email("later@example.com")).body
        yield* eventually(
          Effect.map(call("GET", `/notification/${retried.id}`, { token }), (r) =>
            r.body.attempts === 1 ? r : undefined
          )
        )
        // Cancelled before its retry is due, so nothing changes while the tables are compared.
        yield* Effect.map(call("DELETE", `/notification/${retried.id}`, { token }), ok(200))
        // Scheduled far ahead, rescheduled, metadata merged; another cancelled; a resend of the sent one.
        const later = (yield* email("scheduled@example.com", { scheduledAt: "2099-01-01T00:00:00Z" })).body
        yield* Effect.map(
          call("PUT", `/notification/${later.id}`, {
            token,
            json: { scheduledAt: "2098-06-01T00:00:00Z", metadata: { batch: "7" } }
          }),
          ok(200)
        )
        const cancelled = (yield* email("cancel@example.com", { scheduledAt: "2099-01-01T00:00:00Z" })).body
        yield* Effect.map(call("DELETE", `/notification/${cancelled.id}`, { token }), ok(200))
        const resent = (yield* Effect.map(
          call("POST", `/notification/${sent.id}/resend`, { token, json: {} }),
          ok(201)
        )).body
        yield* status(resent.id, "sent")
        // An automatic password-reset email, and a customer erased after being notified.
        const shopper = yield* registerShopper()
        yield* Effect.map(
          call("POST", "/auth/password-reset", { json: { email: shopper.user.email } }),
          ok(202)
        )
        yield* eventually(
          Effect.map(call("GET", "/notification?eventName=customer.password_reset", { token }), (r) =>
            r.body.count === 1 ? r : undefined
          )
        )
        const customer = yield* createCustomer(token)
        const erased = (yield* email(customer.email, { customerId: customer.id })).body
        yield* status(erased.id, "sent")
        yield* Effect.map(call("DELETE", `/user/${customer.id}`, { token }), ok(204))
        yield* Effect.map(call("GET", `/notification/${erased.id}`, { token }), ok(404))

        const before = yield* tables
        expect(before.templates).toHaveLength(1)
        expect(before.settings).toHaveLength(2)
        expect(before.notifications.length).toBeGreaterThanOrEqual(7)

        const sql = yield* SqlClient.SqlClient
        yield* sql`UPDATE notifications.notifications SET status = 'damaged', recipient = 'x', data = '{}'`
        yield* sql`DELETE FROM notifications.templates`
        yield* sql`UPDATE notifications.settings SET enabled = NOT enabled`

        const report = yield* rebuildProjection(NotificationsProjection, { batchSize: 5 })
        expect(report.events).toBeGreaterThan(20)
        expect(yield* tables).toEqual(before)
      })
    )
  }
)
