/**
 * The notifications read models: notifications (one row each, in clear text), custom templates and
 * trigger settings. Each notification event first moves the row's `version` forward, so applying an
 * event twice changes nothing. Erasing a customer deletes their notifications; on a replay their
 * events decode with shredded fields and recreate nothing.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { CustomerErased } from "../customers/index.js"
import { optionalColumn, textArray } from "../db/Sql.js"
import { isShredded, revealOr } from "../eventstore/EventType.js"
import { normalizeEmail } from "../kernel/Email.js"
import { defineProjection } from "../kernel/Projection.js"
import { notificationEventTypes, settingsEventTypes, templateEventTypes } from "./events.js"

export const NOTIFICATIONS = "notifications.notifications"
export const TEMPLATES = "notifications.templates"
export const SETTINGS = "notifications.settings"

/** How `to` is compared: email addresses case-insensitively, phone numbers and tokens as given. */
export const normalizeRecipient = (channel: string, to: string) =>
  channel === "email" ? normalizeEmail(to) : to.trim()

export const NotificationsProjection = defineProjection({
  name: "notifications",
  tables: [NOTIFICATIONS, TEMPLATES, SETTINGS],
  events: [...notificationEventTypes, ...templateEventTypes, ...settingsEventTypes, CustomerErased],
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const notifications = sql(target.table(NOTIFICATIONS))
      const templates = sql(target.table(TEMPLATES))
      const settings = sql(target.table(SETTINGS))
      /** Moves the row to this event's version; false when there is nothing (more) to apply. */
      const advance = (notificationId: string, version: number, at: Date) =>
        Effect.map(
          sql`UPDATE ${notifications} SET version = ${version}, updated_at = ${at}
            WHERE notification_id = ${notificationId} AND version < ${version} RETURNING 1 AS ok`,
          (rows) => rows.length > 0
        )
      const update = (notificationId: string, changes: Record<string, unknown>) =>
        sql`UPDATE ${notifications} SET ${sql.update(changes)} WHERE notification_id = ${notificationId}`
      for (const e of events) {
        const at = e.recordedAt
        switch (e.type) {
          case "notification.requested": {
            const d = e.data
            if (isShredded(d.to)) break
            const text = (v: string | { readonly _tag: "Shredded" } | undefined) =>
              v === undefined || isShredded(v) ? null : v
            yield* sql`INSERT INTO ${notifications} (notification_id, customer_id, event_name, channel, recipient,
                recipient_normalized, status, subject, title, body, template_id, data, metadata, scheduled_at,
                parent_id, source_event_id, created_at, updated_at, version)
              VALUES (${d.notificationId}, ${d.customerId ?? null}, ${d.eventName}, ${d.channel}, ${d.to},
                ${normalizeRecipient(d.channel, d.to)}, 'pending', ${text(d.subject)}, ${text(d.title)},
                ${text(d.body)}, ${d.templateId ?? null}, ${JSON.stringify(revealOr(d.data, {}))}::jsonb,
                ${JSON.stringify(revealOr(d.metadata, {}))}::jsonb, ${d.scheduledAt ?? null}, ${d.parentId ?? null},
                ${d.sourceEventId ?? null}, ${at}, ${at}, ${e.streamVersion})
              ON CONFLICT (notification_id) DO NOTHING`
            break
          }
          case "notification.rescheduled": {
            const d = e.data
            if (!(yield* advance(d.notificationId, e.streamVersion, at))) break
            yield* update(d.notificationId, { scheduled_at: d.scheduledAt })
            break
          }
          case "notification.metadata_updated": {
            const d = e.data
            if (!(yield* advance(d.notificationId, e.streamVersion, at))) break
            const metadata = revealOr(d.metadata, undefined)
            if (metadata !== undefined)
              yield* update(d.notificationId, { metadata: JSON.stringify(metadata) })
            break
          }
          case "notification.cancelled": {
            const d = e.data
            if (!(yield* advance(d.notificationId, e.streamVersion, at))) break
            yield* update(d.notificationId, { status: "cancelled", cancelled_at: at })
            break
          }
          case "notification.attempted": {
            const d = e.data
            if (!(yield* advance(d.notificationId, e.streamVersion, at))) break
            yield* update(d.notificationId, {
              attempts: d.attempt,
              next_attempt_at: d.nextAttemptAt,
              ...optionalColumn("last_error", revealOr(d.error, undefined))
            })
            break
          }
          case "notification.sent": {
            const d = e.data
            if (!(yield* advance(d.notificationId, e.streamVersion, at))) break
            const rendered = d.rendered === undefined ? undefined : revealOr(d.rendered, undefined)
            // Email: the subject it was sent with replaces the override given at creation (if any).
            const subject = d.subject === undefined ? undefined : revealOr(d.subject, undefined)
            yield* update(d.notificationId, {
              status: "sent",
              sent_at: at,
              attempts: d.attempt,
              next_attempt_at: null,
              provider: d.provider,
              provider_message_id: d.providerMessageId,
              ...optionalColumn("subject", subject),
              ...optionalColumn("rendered", rendered === undefined ? undefined : JSON.stringify(rendered))
            })
            break
          }
          case "notification.failed": {
            const d = e.data
            if (!(yield* advance(d.notificationId, e.streamVersion, at))) break
            yield* update(d.notificationId, {
              status: "failed",
              failed_at: at,
              attempts: d.attempt,
              next_attempt_at: null,
              ...optionalColumn("failure_reason", revealOr(d.reason, undefined))
            })
            break
          }
          case "customer.erased":
            yield* sql`DELETE FROM ${notifications} WHERE customer_id = ${e.data.customerId}`
            break
          case "notification_template.created":
          case "notification_template.updated": {
            const d = e.data
            yield* sql`INSERT INTO ${templates} AS t (template_id, name, channel, subject, title, body, created_at,
                updated_at, version)
              VALUES (${d.templateId}, ${d.name}, ${d.channel}, ${d.subject ?? null}, ${d.title ?? null}, ${d.body},
                ${at}, ${at}, ${e.streamVersion})
              ON CONFLICT (template_id) DO UPDATE SET name = EXCLUDED.name, channel = EXCLUDED.channel,
                subject = EXCLUDED.subject, title = EXCLUDED.title, body = EXCLUDED.body,
                updated_at = EXCLUDED.updated_at, version = EXCLUDED.version
              WHERE t.version < EXCLUDED.version`
            break
          }
          case "notification_template.deleted":
            yield* sql`DELETE FROM ${templates} WHERE template_id = ${e.data.templateId}`
            break
          case "notification_settings.changed":
            for (const [trigger, s] of Object.entries(e.data.events)) {
              yield* sql`INSERT INTO ${settings} (trigger, enabled, channels, template_id, updated_at)
                VALUES (${trigger}, ${s.enabled}, ${textArray(sql, s.channels)}, ${s.templateId}, ${at})
                ON CONFLICT (trigger) DO UPDATE SET enabled = EXCLUDED.enabled, channels = EXCLUDED.channels,
                  template_id = EXCLUDED.template_id, updated_at = EXCLUDED.updated_at`
            }
            break
        }
      }
    })
})
