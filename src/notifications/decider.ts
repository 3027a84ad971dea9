/**
 * The notification aggregate (`pending` → `sent` | `failed`, `pending` → `cancelled`), the template
 * aggregate and the settings aggregate. Pure: tested without a database (test/notifications).
 * Delivery outcomes are facts recorded by the sender; once a notification left `pending` a late
 * outcome changes nothing, so recording one twice is harmless.
 */
import { Data, Effect } from "effect"
import { revealOr, type Shredded } from "../eventstore/EventType.js"
import { defineDecider } from "../kernel/Decider.js"
import { applyMetadataPatch, type Metadata, type MetadataPatch, metadataProblem } from "../kernel/Metadata.js"
import type { Channel, Trigger } from "./channels.js"
import {
  NotificationAttempted,
  NotificationCancelled,
  type NotificationEvent,
  NotificationFailed,
  NotificationMetadataUpdated,
  NotificationRequested,
  NotificationRescheduled,
  NotificationSent,
  notificationEventTypes,
  SettingsChanged,
  settingsEventTypes,
  TemplateCreated,
  TemplateDeleted,
  TemplateUpdated,
  templateEventTypes
} from "./events.js"

export const notificationStream = (notificationId: string) => `notification-${notificationId}`
export const templateStream = (templateId: string) => `notification_template-${templateId}`
/** One store, one settings stream. */
export const SETTINGS_STREAM = "notification_settings-store"

export type NotificationStatus = "pending" | "sent" | "failed" | "cancelled"

// --- Domain errors ----------------------------------------------------------------------------------

export class NotificationNotFound extends Data.TaggedError("NotificationNotFound")<{
  readonly notificationId: string
}> {}
/** Only a pending notification can be changed or cancelled. */
export class NotificationNotPending extends Data.TaggedError("NotificationNotPending")<{
  readonly notificationId: string
  readonly status: NotificationStatus
}> {}
export class NotificationMetadataInvalid extends Data.TaggedError("NotificationMetadataInvalid")<{
  readonly message: string
}> {}
export class TemplateNotFound extends Data.TaggedError("TemplateNotFound")<{ readonly templateId: string }> {}

// --- Notification -----------------------------------------------------------------------------------

const reveal = <A>(value: A | Shredded | undefined): A | undefined => revealOr(value, undefined)

export interface NotificationState {
  readonly status: "none" | NotificationStatus
  readonly notificationId: string
  readonly subjectId: string
  readonly customerId: string | undefined
  readonly eventName: string
  readonly channel: Channel
  readonly to: string | undefined
  readonly subject: string | undefined
  readonly title: string | undefined
  readonly body: string | undefined
  readonly templateId: string | undefined
  readonly data: Metadata
  readonly metadata: Metadata
  readonly scheduledAt: Date | undefined
  readonly parentId: string | undefined
  readonly sourceEventId: string | undefined
  /** Sends tried so far (failed ones included). */
  readonly attempts: number
  readonly createdAt: Date
}

const initial: NotificationState = {
  status: "none",
  notificationId: "",
  subjectId: "",
  customerId: undefined,
  eventName: "",
  channel: "email",
  to: undefined,
  subject: undefined,
  title: undefined,
  body: undefined,
  templateId: undefined,
  data: {},
  metadata: {},
  scheduledAt: undefined,
  parentId: undefined,
  sourceEventId: undefined,
  attempts: 0,
  createdAt: new Date(0)
}

export interface NotificationRequest {
  readonly notificationId: string
  readonly customerId?: string | undefined
  readonly eventName: string
  readonly channel: Channel
  readonly to: string
  readonly subject?: string | undefined
  readonly title?: string | undefined
  readonly body?: string | undefined
  readonly templateId?: string | undefined
  readonly data: Metadata
  readonly metadata: Metadata
  readonly scheduledAt?: Date | undefined
  readonly parentId?: string | undefined
  readonly sourceEventId?: string | undefined
}

export type NotificationCommand =
  | ({ readonly _tag: "Request" } & NotificationRequest)
  | {
      readonly _tag: "Update"
      /** `null`: send as soon as possible; absent: unchanged. */
      readonly scheduledAt?: Date | null | undefined
      readonly metadata?: MetadataPatch | undefined
    }
  | { readonly _tag: "Cancel" }
  | {
      readonly _tag: "RecordAttempt"
      readonly attempt: number
      readonly error: string
      readonly code?: number | undefined
      readonly nextAttemptAt: Date
    }
  | {
      readonly _tag: "MarkSent"
      readonly attempt: number
      readonly provider: string
      readonly providerMessageId: string | null
      /** Email: the subject as sent (rendered). */
      readonly subject?: string | undefined
      readonly rendered?:
        | { readonly subject?: string; readonly title?: string; readonly body: string }
        | undefined
    }
  | {
      readonly _tag: "MarkFailed"
      readonly attempt: number
      readonly reason: string
      readonly code?: number | undefined
    }

type NotificationError = NotificationNotFound | NotificationNotPending | NotificationMetadataInvalid

const optional = <K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } =>
  (value === undefined ? {} : { [key]: value }) as { [P in K]?: V }

const decideNotification = (
  command: NotificationCommand,
  state: NotificationState
): Effect.Effect<ReadonlyArray<NotificationEvent>, NotificationError> => {
  if (command._tag === "Request") {
    // Idempotent: the same id requested again (a replayed trigger) adds nothing.
    if (state.status !== "none") return Effect.succeed([])
    const problem = metadataProblem(command.metadata)
    if (problem) return Effect.fail(new NotificationMetadataInvalid({ message: problem }))
    const subjectId = command.customerId ?? command.notificationId
    return Effect.succeed([
      NotificationRequested.make({
        notificationId: command.notificationId,
        subjectId,
        ...optional("customerId", command.customerId),
        eventName: command.eventName,
        channel: command.channel,
        to: command.to,
        ...optional("subject", command.subject),
        ...optional("title", command.title),
        ...optional("body", command.body),
        ...optional("templateId", command.templateId),
        data: command.data,
        metadata: command.metadata,
        ...optional("scheduledAt", command.scheduledAt),
        ...optional("parentId", command.parentId),
        ...optional("sourceEventId", command.sourceEventId)
      })
    ])
  }
  if (state.status === "none")
    return Effect.fail(new NotificationNotFound({ notificationId: state.notificationId }))
  const { notificationId, subjectId } = state
  // Outcomes arriving after the notification left `pending` (a reclaimed send, a cancel) are dropped.
  const settled = state.status !== "pending"
  switch (command._tag) {
    case "Update": {
      if (settled) return Effect.fail(new NotificationNotPending({ notificationId, status: state.status }))
      const events: Array<NotificationEvent> = []
      if (command.scheduledAt !== undefined) {
        const next = command.scheduledAt
        if (next?.getTime() !== state.scheduledAt?.getTime())
          events.push(NotificationRescheduled.make({ notificationId, scheduledAt: next }))
      }
      if (command.metadata !== undefined) {
        const metadata = applyMetadataPatch(state.metadata, command.metadata)
        const problem = metadataProblem(metadata)
        if (problem) return Effect.fail(new NotificationMetadataInvalid({ message: problem }))
        if (JSON.stringify(metadata) !== JSON.stringify(state.metadata))
          events.push(NotificationMetadataUpdated.make({ notificationId, subjectId, metadata }))
      }
      return Effect.succeed(events)
    }
    case "Cancel":
      return settled
        ? Effect.fail(new NotificationNotPending({ notificationId, status: state.status }))
        : Effect.succeed([NotificationCancelled.make({ notificationId })])
    case "RecordAttempt":
      return Effect.succeed(
        settled
          ? []
          : [
              NotificationAttempted.make({
                notificationId,
                subjectId,
                attempt: command.attempt,
                error: command.error,
                ...optional("code", command.code),
                nextAttemptAt: command.nextAttemptAt
              })
            ]
      )
    case "MarkSent":
      return Effect.succeed(
        settled
          ? []
          : [
              NotificationSent.make({
                notificationId,
                subjectId,
                attempt: command.attempt,
                provider: command.provider,
                providerMessageId: command.providerMessageId,
                ...optional("subject", command.subject),
                ...optional("rendered", command.rendered)
              })
            ]
      )
    case "MarkFailed":
      return Effect.succeed(
        settled
          ? []
          : [
              NotificationFailed.make({
                notificationId,
                subjectId,
                attempt: command.attempt,
                reason: command.reason,
                ...optional("code", command.code)
              })
            ]
      )
  }
}

export const NotificationDecider = defineDecider({
  streamType: "notification",
  events: notificationEventTypes,
  initialState: initial,
  decide: decideNotification,
  evolve: (state, event): NotificationState => {
    switch (event.type) {
      case "notification.requested": {
        const d = event.data
        return {
          ...state,
          status: "pending",
          notificationId: d.notificationId,
          subjectId: d.subjectId,
          customerId: d.customerId,
          eventName: d.eventName,
          channel: d.channel,
          to: reveal(d.to),
          subject: reveal(d.subject),
          title: reveal(d.title),
          body: reveal(d.body),
          templateId: d.templateId,
          data: reveal(d.data) ?? {},
          metadata: reveal(d.metadata) ?? {},
          scheduledAt: d.scheduledAt,
          parentId: d.parentId,
          sourceEventId: d.sourceEventId
        }
      }
      case "notification.rescheduled":
        return { ...state, scheduledAt: event.data.scheduledAt ?? undefined }
      case "notification.metadata_updated":
        return { ...state, metadata: reveal(event.data.metadata) ?? {} }
      case "notification.cancelled":
        return { ...state, status: "cancelled" }
      case "notification.attempted":
        return { ...state, attempts: Math.max(state.attempts, event.data.attempt) }
      case "notification.sent":
        return { ...state, status: "sent", attempts: Math.max(state.attempts, event.data.attempt) }
      case "notification.failed":
        return { ...state, status: "failed", attempts: Math.max(state.attempts, event.data.attempt) }
    }
  }
})

// --- Template ---------------------------------------------------------------------------------------

export interface TemplateContent {
  readonly name: string
  readonly channel: Channel
  readonly subject?: string | undefined
  readonly title?: string | undefined
  readonly body: string
}

export interface TemplateState {
  readonly status: "none" | "live" | "deleted"
  readonly templateId: string
  readonly content: TemplateContent | undefined
}

export type TemplateCommand =
  | ({ readonly _tag: "Create"; readonly templateId: string } & TemplateContent)
  | ({ readonly _tag: "Update" } & TemplateContent)
  | { readonly _tag: "Delete" }

const sameContent = (a: TemplateContent, b: TemplateContent) =>
  a.name === b.name &&
  a.channel === b.channel &&
  a.subject === b.subject &&
  a.title === b.title &&
  a.body === b.body

const templateFields = (templateId: string, c: TemplateContent) => ({
  templateId,
  name: c.name,
  channel: c.channel,
  ...optional("subject", c.subject),
  ...optional("title", c.title),
  body: c.body
})

export const TemplateDecider = defineDecider({
  streamType: "notification_template",
  events: templateEventTypes,
  initialState: { status: "none", templateId: "", content: undefined } as TemplateState,
  decide: (command: TemplateCommand, state: TemplateState) => {
    if (command._tag === "Create") {
      return state.status === "none"
        ? Effect.succeed([TemplateCreated.make(templateFields(command.templateId, command))])
        : Effect.succeed([])
    }
    if (state.status !== "live" || state.content === undefined)
      return Effect.fail(new TemplateNotFound({ templateId: state.templateId }))
    if (command._tag === "Delete")
      return Effect.succeed([TemplateDeleted.make({ templateId: state.templateId })])
    return Effect.succeed(
      sameContent(state.content, command)
        ? []
        : [TemplateUpdated.make(templateFields(state.templateId, command))]
    )
  },
  evolve: (state, event): TemplateState => {
    switch (event.type) {
      case "notification_template.created":
      case "notification_template.updated": {
        const { templateId, ...content } = event.data
        return { status: "live", templateId, content }
      }
      case "notification_template.deleted":
        return { ...state, status: "deleted" }
    }
  }
})

// --- Settings ---------------------------------------------------------------------------------------

export interface TriggerSetting {
  readonly enabled: boolean
  readonly channels: ReadonlyArray<Channel>
  readonly templateId: string | null
}

export type TriggerSettings = Readonly<Record<Trigger, TriggerSetting>>

export interface SettingsState {
  /** Only the triggers ever configured; the others use the defaults. */
  readonly events: Readonly<Partial<Record<string, TriggerSetting>>>
}

export type SettingsCommand = {
  readonly _tag: "Change"
  readonly events: Readonly<Record<string, TriggerSetting>>
}

const sameSetting = (a: TriggerSetting | undefined, b: TriggerSetting) =>
  a !== undefined &&
  a.enabled === b.enabled &&
  a.templateId === b.templateId &&
  a.channels.length === b.channels.length &&
  a.channels.every((c, i) => b.channels[i] === c)

export const SettingsDecider = defineDecider({
  streamType: "notification_settings",
  events: settingsEventTypes,
  initialState: { events: {} } as SettingsState,
  decide: (command: SettingsCommand, state: SettingsState) => {
    const changed = Object.fromEntries(
      Object.entries(command.events).filter(
        ([trigger, setting]) => !sameSetting(state.events[trigger], setting)
      )
    )
    return Effect.succeed(
      Object.keys(changed).length === 0 ? [] : [SettingsChanged.make({ events: changed })]
    )
  },
  evolve: (state, event): SettingsState => ({ events: { ...state.events, ...event.data.events } })
})
