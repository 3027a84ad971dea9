/** Read-model lookups of notifications (`GET /notification…`), templates and settings. */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import type { Sort } from "../http/Lists.js"
import type { Channel } from "./channels.js"
import type { NotificationStatus } from "./decider.js"
import { NOTIFICATIONS, normalizeRecipient, SETTINGS, TEMPLATES } from "./projection.js"

export const SORT_FIELDS = ["createdAt", "sentAt", "scheduledAt"] as const
export type SortField = (typeof SORT_FIELDS)[number]

const SORT_COLUMNS: Record<SortField, string> = {
  createdAt: "created_at",
  sentAt: "sent_at",
  scheduledAt: "scheduled_at"
}

export interface NotificationListQuery {
  readonly page: number
  readonly display: number
  readonly sort: Sort<SortField>
  readonly channel?: Channel | undefined
  readonly status?: NotificationStatus | undefined
  readonly eventName?: string | undefined
  readonly to?: string | undefined
}

export interface NotificationSummaryRow {
  readonly id: string
  readonly eventName: string
  readonly channel: Channel
  readonly to: string
  readonly status: NotificationStatus
  readonly sentAt: Date | null
}

export interface NotificationRow extends NotificationSummaryRow {
  readonly customerId: string | null
  readonly subject: string | null
  readonly title: string | null
  readonly body: string | null
  readonly templateId: string | null
  readonly data: Readonly<Record<string, unknown>>
  readonly metadata: Readonly<Record<string, unknown>>
  readonly scheduledAt: Date | null
  readonly parentId: string | null
  readonly attempts: number
  readonly lastError: string | null
  readonly nextAttemptAt: Date | null
  readonly failureReason: string | null
  readonly provider: string | null
  readonly providerMessageId: string | null
  readonly rendered: { readonly subject?: string; readonly title?: string; readonly body: string } | null
  readonly failedAt: Date | null
  readonly cancelledAt: Date | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

export const listNotifications = (query: NotificationListQuery) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const table = sql(NOTIFICATIONS)
    // Without a channel, `to` is compared as an email address when it looks like one.
    const to =
      query.to === undefined
        ? undefined
        : normalizeRecipient(query.channel ?? (query.to.includes("@") ? "email" : "sms"), query.to)
    const where = sql.and([
      ...(query.channel === undefined ? [] : [sql`channel = ${query.channel}`]),
      ...(query.status === undefined ? [] : [sql`status = ${query.status}`]),
      ...(query.eventName === undefined ? [] : [sql`event_name = ${query.eventName}`]),
      ...(to === undefined ? [] : [sql`recipient_normalized = ${to}`])
    ])
    // Column and direction come from closed lists, never from the request text.
    const direction = query.sort.direction === "asc" ? "ASC" : "DESC"
    // Notifications not sent (or not scheduled) yet have no value: they come last either way.
    const order = sql.literal(
      `${SORT_COLUMNS[query.sort.field]} ${direction} NULLS LAST, notification_id ${direction}`
    )
    return Effect.all(
      {
        count: Effect.map(
          sql<{ count: number }>`SELECT count(*)::int AS count FROM ${table} WHERE ${where}`,
          (rows) => rows[0]?.count ?? 0
        ),
        models: sql<NotificationSummaryRow>`SELECT notification_id AS id, event_name AS "eventName", channel,
            recipient AS "to", status, sent_at AS "sentAt"
          FROM ${table} WHERE ${where}
          ORDER BY ${order} LIMIT ${query.display} OFFSET ${(query.page - 1) * query.display}`
      },
      { concurrency: 1 }
    )
  })

export const findNotification = (notificationId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<NotificationRow>`SELECT notification_id AS id, customer_id AS "customerId", event_name AS "eventName",
          channel, recipient AS "to", status, subject, title, body, template_id AS "templateId", data, metadata,
          scheduled_at AS "scheduledAt", parent_id AS "parentId", attempts, last_error AS "lastError",
          next_attempt_at AS "nextAttemptAt", failure_reason AS "failureReason", provider,
          provider_message_id AS "providerMessageId", rendered, sent_at AS "sentAt", failed_at AS "failedAt",
          cancelled_at AS "cancelledAt", created_at AS "createdAt", updated_at AS "updatedAt"
        FROM ${sql(NOTIFICATIONS)} WHERE notification_id = ${notificationId}`,
      (rows) => Option.fromNullable(rows[0])
    )
  )

export interface TemplateRow {
  readonly id: string
  readonly name: string
  readonly channel: Channel
  readonly subject: string | null
  readonly title: string | null
  readonly body: string
  readonly createdAt: Date
  readonly updatedAt: Date
}

const TEMPLATE_COLUMNS = `template_id AS id, name, channel, subject, title, body, created_at AS "createdAt",
  updated_at AS "updatedAt"`

/** Custom templates, oldest first. */
export const listTemplates = (channel?: Channel) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const where = channel === undefined ? sql`TRUE` : sql`channel = ${channel}`
    return sql<TemplateRow>`SELECT ${sql.literal(TEMPLATE_COLUMNS)} FROM ${sql(TEMPLATES)} WHERE ${where}
      ORDER BY created_at, template_id`
  })

export const findTemplate = (templateId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<TemplateRow>`SELECT ${sql.literal(TEMPLATE_COLUMNS)} FROM ${sql(TEMPLATES)}
        WHERE template_id = ${templateId}`,
      (rows) => Option.fromNullable(rows[0])
    )
  )

/** What still uses a template (then it cannot be deleted): triggers' settings and pending notifications. */
export const templateUsers = (templateId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all(
      {
        triggers: Effect.map(
          sql<{ trigger: string }>`SELECT trigger FROM ${sql(SETTINGS)} WHERE template_id = ${templateId}
            ORDER BY trigger`,
          (rows) => rows.map((r) => r.trigger)
        ),
        pending: Effect.map(
          sql<{ count: number }>`SELECT count(*)::int AS count FROM ${sql(NOTIFICATIONS)}
            WHERE template_id = ${templateId} AND status = 'pending'`,
          (rows) => rows[0]?.count ?? 0
        )
      },
      { concurrency: 1 }
    )
  )

export interface SettingRow {
  readonly trigger: string
  readonly enabled: boolean
  readonly channels: ReadonlyArray<Channel>
  readonly templateId: string | null
}

export const readSettingRows = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql<SettingRow>`SELECT trigger, enabled, channels, template_id AS "templateId" FROM ${sql(SETTINGS)}`
)
