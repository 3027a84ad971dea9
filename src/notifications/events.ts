/**
 * Notification and template events. A notification's personal fields (recipient, content, template
 * variables, metadata, failure reasons that may quote the address) are encrypted under its subject:
 * the customer it is about, or the notification itself when it is about no customer. Erasing the
 * customer therefore shreds their notifications too.
 */
import { Schema } from "effect"
import { defineEvent, type EventOf, Personal } from "../eventstore/EventType.js"
import { Metadata } from "../kernel/Metadata.js"
import { CHANNELS } from "./channels.js"

export const ChannelSchema = Schema.Literal(...CHANNELS)

export const RenderedMessage = Schema.Struct({
  subject: Schema.optional(Schema.String),
  title: Schema.optional(Schema.String),
  body: Schema.String
})

export const NotificationRequested = defineEvent("notification.requested", {
  schema: Schema.Struct({
    notificationId: Schema.String,
    /** Whose key encrypts the personal fields: `customerId` when known, else `notificationId`. */
    subjectId: Schema.String,
    customerId: Schema.optional(Schema.String),
    /** The trigger (`order.confirmed`, …) or `manual` for `POST /notification`. */
    eventName: Schema.String,
    channel: ChannelSchema,
    to: Personal(Schema.String),
    /** Email subject, push title and body given with the request (templates render the rest). */
    subject: Schema.optional(Personal(Schema.String)),
    title: Schema.optional(Personal(Schema.String)),
    body: Schema.optional(Personal(Schema.String)),
    templateId: Schema.optional(Schema.String),
    data: Personal(Metadata),
    metadata: Personal(Metadata),
    scheduledAt: Schema.optional(Schema.Date),
    /** Set by resend: the notification this one repeats. */
    parentId: Schema.optional(Schema.String),
    /** Automatic notifications: the public event (`evt_…`) that triggered it. */
    sourceEventId: Schema.optional(Schema.String)
  }),
  subject: (d) => d.subjectId
})

export const NotificationRescheduled = defineEvent("notification.rescheduled", {
  schema: Schema.Struct({
    notificationId: Schema.String,
    /** Null: send as soon as possible. */
    scheduledAt: Schema.NullOr(Schema.Date)
  })
})

/** The whole new metadata (after the merge). */
export const NotificationMetadataUpdated = defineEvent("notification.metadata_updated", {
  schema: Schema.Struct({
    notificationId: Schema.String,
    subjectId: Schema.String,
    metadata: Personal(Metadata)
  }),
  subject: (d) => d.subjectId
})

export const NotificationCancelled = defineEvent("notification.cancelled", {
  schema: Schema.Struct({ notificationId: Schema.String })
})

/** A send that failed transiently; another attempt is due at `nextAttemptAt`. */
export const NotificationAttempted = defineEvent("notification.attempted", {
  schema: Schema.Struct({
    notificationId: Schema.String,
    subjectId: Schema.String,
    attempt: Schema.Int,
    error: Personal(Schema.String),
    /** SMTP reply code or HTTP status, when there was one. */
    code: Schema.optional(Schema.Int),
    nextAttemptAt: Schema.Date
  }),
  subject: (d) => d.subjectId
})

export const NotificationSent = defineEvent("notification.sent", {
  schema: Schema.Struct({
    notificationId: Schema.String,
    subjectId: Schema.String,
    attempt: Schema.Int,
    provider: Schema.String,
    providerMessageId: Schema.NullOr(Schema.String),
    /** Email: the subject it was sent with (rendered), whatever the provider. */
    subject: Schema.optional(Personal(Schema.String)),
    /** Kept for the log provider only: what would have been sent. */
    rendered: Schema.optional(Personal(RenderedMessage))
  }),
  subject: (d) => d.subjectId
})

export const NotificationFailed = defineEvent("notification.failed", {
  schema: Schema.Struct({
    notificationId: Schema.String,
    subjectId: Schema.String,
    /** 0 when it failed before any send (e.g. a template variable was missing). */
    attempt: Schema.Int,
    reason: Personal(Schema.String),
    code: Schema.optional(Schema.Int)
  }),
  subject: (d) => d.subjectId
})

export const notificationEventTypes = [
  NotificationRequested,
  NotificationRescheduled,
  NotificationMetadataUpdated,
  NotificationCancelled,
  NotificationAttempted,
  NotificationSent,
  NotificationFailed
] as const

export type NotificationEvent = EventOf<(typeof notificationEventTypes)[number]>

// --- Templates (store configuration: no personal data) -----------------------------------------------

const TemplateFields = {
  templateId: Schema.String,
  name: Schema.String,
  channel: ChannelSchema,
  subject: Schema.optional(Schema.String),
  title: Schema.optional(Schema.String),
  body: Schema.String
}

export const TemplateCreated = defineEvent("notification_template.created", {
  schema: Schema.Struct(TemplateFields)
})

/** The whole template after the change (templates are small). */
export const TemplateUpdated = defineEvent("notification_template.updated", {
  schema: Schema.Struct(TemplateFields)
})

export const TemplateDeleted = defineEvent("notification_template.deleted", {
  schema: Schema.Struct({ templateId: Schema.String })
})

export const templateEventTypes = [TemplateCreated, TemplateUpdated, TemplateDeleted] as const

export type TemplateEvent = EventOf<(typeof templateEventTypes)[number]>

// --- Settings (which triggers notify, on which channels) ---------------------------------------------

export const TriggerSetting = Schema.Struct({
  enabled: Schema.Boolean,
  channels: Schema.Array(ChannelSchema),
  /** A custom template for one of the channels; the built-in one is used for the others. */
  templateId: Schema.NullOr(Schema.String)
})

/** The settings of the triggers that changed, each as it now stands. */
export const SettingsChanged = defineEvent("notification_settings.changed", {
  schema: Schema.Struct({ events: Schema.Record({ key: Schema.String, value: TriggerSetting }) })
})

export const settingsEventTypes = [SettingsChanged] as const
