/**
 * The notifications use cases behind `/notification`: create (validated per channel, rendered once
 * up front so a missing variable is a 400, not a failed send), reschedule, cancel, resend, settings
 * and templates. Each command runs in ONE transaction with the due-work row that drives its send, so
 * a notification is never requested without being queued, nor cancelled while queued.
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Either, Layer, Option } from "effect"
import { AppConfig } from "../config.js"
import { findCustomer } from "../customers/index.js"
import { provideSqlClient } from "../db/Sql.js"
import type { AuthenticatedActor } from "../http/Auth.js"
import { BadRequest, Conflict, NotFound, orDieUnlessHttp } from "../http/errors.js"
import { parseSort } from "../http/Lists.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import * as Time from "../kernel/Time.js"
import { commandMetadata, makeTransact } from "../kernel/UseCase.js"
import { DueWork } from "../processors/DueWork.js"
import { type Channel, isTrigger, TRIGGERS, type Trigger } from "./channels.js"
import {
  type ContentOverrides,
  composeParts,
  recipientProblem,
  redactData,
  renderVariables,
  resolveTemplate,
  triggerTemplateId
} from "./content.js"
import {
  type NotificationCommand,
  NotificationDecider,
  type NotificationRequest,
  type NotificationState,
  notificationStream,
  SETTINGS_STREAM,
  SettingsDecider,
  type TemplateContent,
  TemplateDecider,
  type TriggerSetting,
  templateStream
} from "./decider.js"
import {
  findNotification,
  findTemplate,
  listNotifications,
  listTemplates,
  type NotificationRow,
  readSettingRows,
  SORT_FIELDS,
  type TemplateRow,
  templateUsers
} from "./queries.js"
import { requestNotification, SEND_KIND } from "./request.js"
import {
  BUILT_IN_TEMPLATES,
  type BuiltInTemplate,
  findBuiltInTemplate,
  renderTemplate,
  type TemplateParts,
  validateTemplate
} from "./templates.js"

/** Template variables of one notification, as JSON. */
export const MAX_DATA_BYTES = 32 * 1024

/** Triggers whose email cannot be switched off: the shopper needs it (Novu's "critical"). */
export const CRITICAL_TRIGGERS: ReadonlySet<Trigger> = new Set(["customer.password_reset", "order.confirmed"])

export const DEFAULT_SETTING: TriggerSetting = { enabled: true, channels: ["email"], templateId: null }

export interface EffectiveSetting extends TriggerSetting {
  readonly critical: boolean
}

/** Every trigger's setting: the stored ones over the default (email on). */
export const effectiveSettings = (stored: ReadonlyArray<{ readonly trigger: string } & TriggerSetting>) => {
  const byTrigger = new Map(stored.map((row) => [row.trigger, row]))
  const of = (trigger: Trigger): EffectiveSetting => {
    const row = byTrigger.get(trigger)
    const setting = row
      ? { enabled: row.enabled, channels: row.channels, templateId: row.templateId }
      : DEFAULT_SETTING
    return { ...setting, critical: CRITICAL_TRIGGERS.has(trigger) }
  }
  const all: Record<string, EffectiveSetting> = Object.fromEntries(TRIGGERS.map((t) => [t, of(t)]))
  return { of, all }
}

export interface NewNotificationInput {
  readonly channel: Channel
  readonly to: string
  readonly templateId?: string | undefined
  readonly subject?: string | undefined
  readonly title?: string | undefined
  readonly body?: string | undefined
  readonly data?: Readonly<Record<string, unknown>> | undefined
  readonly metadata?: Readonly<Record<string, unknown>> | undefined
  readonly scheduledAt?: Date | undefined
  readonly eventName?: string | undefined
  readonly customerId?: string | undefined
}

export interface ListInput {
  readonly page: number
  readonly display: number
  readonly sort?: string | undefined
  readonly channel?: Channel | undefined
  readonly status?: "pending" | "sent" | "failed" | "cancelled" | undefined
  readonly eventName?: string | undefined
  readonly to?: string | undefined
}

export interface SettingsPatchInput {
  readonly events: Readonly<
    Record<
      string,
      {
        readonly enabled?: boolean | undefined
        readonly channels?: ReadonlyArray<Channel> | undefined
        readonly templateId?: string | null | undefined
      }
    >
  >
}

export interface TemplateInput {
  readonly name: string
  readonly channel: Channel
  readonly subject?: string | undefined
  readonly title?: string | undefined
  readonly body: string
}

export interface TemplatePatchInput {
  readonly name?: string | undefined
  readonly subject?: string | null | undefined
  readonly title?: string | null | undefined
  readonly body?: string | undefined
}

const notFound = NotFound.of({ message: "No such notification", param: "id" })
const templateNotFound = NotFound.of({ message: "No such template", param: "id" })
const invalid = (param: string, message: string, code = "parameter_invalid") =>
  BadRequest.of({ code, message, param })
const notPending = (status: string) =>
  Conflict.of({
    code: "notification_not_pending",
    message: `the notification is ${status}: only a pending notification can be changed or cancelled`
  })
const sending = Conflict.of({
  code: "notification_sending",
  message: "the notification is being sent right now; check its status again in a moment"
})

export const notificationView = (row: NotificationRow) => ({ ...row, data: redactData(row.data) })

/** A template as the API shows it: a custom one's row, or a built-in one (no timestamps). */
export interface TemplateView extends Omit<TemplateRow, "createdAt" | "updatedAt"> {
  readonly variables: ReadonlyArray<string>
  readonly builtIn: boolean
  readonly trigger: string | null
  readonly createdAt: Date | null
  readonly updatedAt: Date | null
}

const templateView = (row: TemplateRow): TemplateView => ({
  ...row,
  variables: Either.match(validateTemplate(row.channel, partsOf(row)), {
    onLeft: () => [],
    onRight: (v) => v.variables
  }),
  builtIn: false,
  trigger: null
})

const builtInView = (t: BuiltInTemplate): TemplateView => ({
  id: t.id,
  name: t.name,
  channel: t.channel,
  subject: t.subject ?? null,
  title: t.title ?? null,
  body: t.body,
  variables: t.variables,
  builtIn: true,
  trigger: t.trigger,
  createdAt: null,
  updatedAt: null
})

const partsOf = (t: {
  readonly subject?: string | null | undefined
  readonly title?: string | null | undefined
  readonly body: string
}): TemplateParts => ({
  body: t.body,
  ...(t.subject === null || t.subject === undefined ? {} : { subject: t.subject }),
  ...(t.title === null || t.title === undefined ? {} : { title: t.title })
})

export const makeNotifications = Effect.gen(function* () {
  const runner = yield* CommandRunner
  const work = yield* DueWork
  const config = yield* AppConfig
  const transact = yield* makeTransact
  const sql = yield* SqlClient.SqlClient
  const withSql = provideSqlClient(sql)
  const store = { name: config.notifications.storeName, url: config.notifications.storeUrl }

  const execute = (notificationId: string, command: NotificationCommand, actor: AuthenticatedActor) =>
    Effect.flatMap(commandMetadata(actor), (metadata) =>
      runner.execute(NotificationDecider, notificationStream(notificationId), command, { metadata })
    )

  const view = (notificationId: string) =>
    Effect.flatMap(withSql(findNotification(notificationId)), (row) =>
      Option.match(row, {
        onNone: () => Effect.fail(notFound),
        onSome: (r) => Effect.succeed(notificationView(r))
      })
    )

  const validId = (id: string) => (Ids.isValid("ntf", id) ? Effect.succeed(id) : Effect.fail(notFound))

  /**
   * Checks what a new notification would send, exactly as the sender will render it: recipient,
   * template and channel, content, and every variable the template reads.
   */
  const prepare = (input: {
    readonly channel: Channel
    readonly to: string
    readonly templateId: string | undefined
    readonly overrides: ContentOverrides
    readonly data: Readonly<Record<string, unknown>>
  }) =>
    Effect.gen(function* () {
      const problem = recipientProblem(input.channel, input.to)
      if (problem !== undefined) return yield* Effect.fail(invalid("to", problem))
      let template: TemplateParts | undefined
      if (input.templateId !== undefined) {
        const found = yield* withSql(resolveTemplate(input.templateId)).pipe(Effect.orDie)
        if (Option.isNone(found)) {
          return yield* Effect.fail(
            invalid("templateId", `no template ${input.templateId}`, "resource_missing")
          )
        }
        if (found.value.channel !== input.channel) {
          return yield* Effect.fail(
            invalid(
              "templateId",
              `template ${input.templateId} is for ${found.value.channel}, not ${input.channel}`
            )
          )
        }
        template = found.value
      } else if (input.channel !== "push") {
        return yield* Effect.fail(
          invalid(
            "templateId",
            `templateId is required for the ${input.channel} channel`,
            "parameter_missing"
          )
        )
      }
      const parts = composeParts(input.channel, template, input.overrides)
      if (parts === undefined || (input.channel === "push" && parts.title === undefined)) {
        const missing = parts === undefined ? "body" : "title"
        return yield* Effect.fail(
          invalid(missing, `${missing} is required for push without a template`, "parameter_missing")
        )
      }
      const checked = validateTemplate(input.channel, parts)
      if (Either.isLeft(checked)) return yield* Effect.fail(invalid(checked.left.field, checked.left.message))
      if (Buffer.byteLength(JSON.stringify(input.data), "utf8") > MAX_DATA_BYTES) {
        return yield* Effect.fail(invalid("data", `data must be at most ${MAX_DATA_BYTES} bytes as JSON`))
      }
      yield* renderTemplate(parts, renderVariables(input.data, store)).pipe(
        // A variable `data` lacks is the request's fault; so is content that cannot render within the limits.
        Effect.mapError((e) =>
          invalid(
            "data",
            e.message,
            e.missingVariable === undefined ? "template_render_failed" : "template_variable_missing"
          )
        )
      )
    })

  /** Requests the notification and queues its send, in the caller's transaction. */
  const enqueue = (request: NotificationRequest, actor: AuthenticatedActor) =>
    Effect.flatMap(commandMetadata(actor), (metadata) => requestNotification(request, { metadata }))

  const customerContact = (customerId: string) => withSql(findCustomer(customerId)).pipe(Effect.orDie)

  const list = (input: ListInput) =>
    withSql(
      listNotifications({
        page: input.page,
        display: input.display,
        sort: parseSort(SORT_FIELDS, input.sort, { field: "createdAt", direction: "desc" }),
        channel: input.channel,
        status: input.status,
        eventName: input.eventName,
        to: input.to?.trim() === "" ? undefined : input.to
      })
    ).pipe(Effect.orDie)

  const get = (id: string) => Effect.flatMap(validId(id), view).pipe(orDieUnlessHttp)

  const create = (actor: AuthenticatedActor, input: NewNotificationInput) =>
    Effect.gen(function* () {
      if (input.channel !== "email" && input.subject !== undefined)
        return yield* Effect.fail(invalid("subject", "subject is only for the email channel"))
      if (input.channel !== "push" && (input.title !== undefined || input.body !== undefined))
        return yield* Effect.fail(
          invalid(
            input.title !== undefined ? "title" : "body",
            "title and body are only for the push channel"
          )
        )
      if (input.customerId !== undefined) {
        const known =
          Ids.isValid("cus", input.customerId) && Option.isSome(yield* customerContact(input.customerId))
        if (!known)
          return yield* Effect.fail(
            invalid("customerId", `no customer ${input.customerId}`, "resource_missing")
          )
      }
      const data = input.data ?? {}
      const overrides: ContentOverrides = { subject: input.subject, title: input.title, body: input.body }
      yield* prepare({ channel: input.channel, to: input.to, templateId: input.templateId, overrides, data })
      const notificationId = yield* Ids.make("ntf")
      yield* transact(
        enqueue(
          {
            notificationId,
            customerId: input.customerId,
            eventName: input.eventName ?? "manual",
            channel: input.channel,
            to: input.to,
            ...overrides,
            templateId: input.templateId,
            data,
            metadata: input.metadata ?? {},
            scheduledAt: input.scheduledAt
          },
          actor
        )
      ).pipe(
        Effect.catchTag("NotificationMetadataInvalid", (e) => Effect.fail(invalid("metadata", e.message)))
      )
      yield* work.wake
      return yield* view(notificationId)
    }).pipe(orDieUnlessHttp)

  const update = (
    actor: AuthenticatedActor,
    id: string,
    patch: {
      readonly metadata?: Readonly<Record<string, unknown>> | null | undefined
      readonly scheduledAt?: Date | null | undefined
    }
  ) =>
    Effect.gen(function* () {
      const notificationId = yield* validId(id)
      if (patch.metadata === undefined && patch.scheduledAt === undefined) {
        return yield* Effect.fail(
          invalid("metadata", "send metadata or scheduledAt (only those can change)", "parameter_missing")
        )
      }
      yield* transact(
        Effect.gen(function* () {
          const result = yield* execute(
            notificationId,
            { _tag: "Update", metadata: patch.metadata, scheduledAt: patch.scheduledAt },
            actor
          )
          if (!result.events.some((e) => e.type === "notification.rescheduled")) return
          const dueAt = patch.scheduledAt ?? (yield* Time.now)
          // The row is locked by this update until commit, so no worker claims it meanwhile.
          const item = yield* work.schedule({ kind: SEND_KIND, key: notificationId, dueAt })
          if (item.status === "claimed") return yield* Effect.fail(sending)
        })
      ).pipe(
        Effect.catchTags({
          NotificationNotFound: () => Effect.fail(notFound),
          NotificationNotPending: (e) => Effect.fail(notPending(e.status)),
          NotificationMetadataInvalid: (e) => Effect.fail(invalid("metadata", e.message))
        })
      )
      yield* work.wake
      return yield* view(notificationId)
    }).pipe(orDieUnlessHttp)

  const cancel = (actor: AuthenticatedActor, id: string) =>
    Effect.gen(function* () {
      const notificationId = yield* validId(id)
      yield* transact(
        Effect.gen(function* () {
          yield* execute(notificationId, { _tag: "Cancel" }, actor)
          const cancelled = yield* work.cancel(SEND_KIND, notificationId, { pendingOnly: true })
          if (cancelled) return
          // Not pending in the queue: a worker holds it, and its send may already be out.
          const item = yield* work.get(SEND_KIND, notificationId)
          if (Option.isSome(item) && item.value.status === "claimed") return yield* Effect.fail(sending)
        })
      ).pipe(
        Effect.catchTags({
          NotificationNotFound: () => Effect.fail(notFound),
          NotificationNotPending: (e) => Effect.fail(notPending(e.status))
        })
      )
      return yield* view(notificationId)
    }).pipe(orDieUnlessHttp)

  const readSettings = withSql(readSettingRows).pipe(Effect.orDie, Effect.map(effectiveSettings))

  /** The recipient of `channel` on the customer's record (email, phone, metadata `deviceToken`). */
  const contactOn = (customerId: string | undefined, channel: Channel) =>
    Effect.gen(function* () {
      if (customerId === undefined) return undefined
      const customer = yield* customerContact(customerId)
      if (Option.isNone(customer)) return undefined
      const c = customer.value
      const token = c.metadata.deviceToken
      return channel === "email"
        ? c.email
        : channel === "sms"
          ? (c.phone ?? undefined)
          : typeof token === "string"
            ? token
            : undefined
    })

  const resend = (
    actor: AuthenticatedActor,
    id: string,
    input: { readonly channel?: Channel | undefined; readonly to?: string | undefined }
  ) =>
    Effect.gen(function* () {
      const originalId = yield* validId(id)
      const loaded = yield* runner
        .load(NotificationDecider, notificationStream(originalId))
        .pipe(Effect.orDie)
      const original: NotificationState = loaded.state
      if (original.status === "none" || original.to === undefined) return yield* Effect.fail(notFound)
      const channel = input.channel ?? original.channel
      const sameChannel = channel === original.channel
      // Another channel needs that channel's template: only an automatic notification has one (per
      // trigger). Checked before the recipient, which cannot help a notification with its own content.
      if (!sameChannel && !isTrigger(original.eventName)) {
        return yield* Effect.fail(
          invalid(
            "channel",
            `notification ${originalId} was sent on ${original.channel} with its own content; it can only be resent on ${original.channel}`
          )
        )
      }
      const to = input.to ?? (sameChannel ? original.to : yield* contactOn(original.customerId, channel))
      if (to === undefined) {
        return yield* Effect.fail(
          invalid(
            "to",
            `notification ${originalId} has no customer with a ${channel} recipient on record: give \`to\``,
            "parameter_missing"
          )
        )
      }
      let templateId = original.templateId
      let overrides: ContentOverrides = {
        subject: original.subject,
        title: original.title,
        body: original.body
      }
      if (!sameChannel && isTrigger(original.eventName)) {
        overrides = {}
        const settings = yield* readSettings
        templateId = yield* withSql(
          triggerTemplateId(original.eventName, channel, settings.of(original.eventName))
        ).pipe(Effect.orDie)
      }
      yield* prepare({ channel, to, templateId, overrides, data: original.data }).pipe(
        // The original's content failing now (e.g. its template was deleted) is the state's fault.
        Effect.catchIf(
          (e) => e.error.param !== "to",
          (e) => Effect.fail(Conflict.of({ code: "notification_not_resendable", message: e.error.message }))
        )
      )
      const notificationId = yield* Ids.make("ntf")
      yield* transact(
        enqueue(
          {
            notificationId,
            customerId: original.customerId,
            eventName: original.eventName,
            channel,
            to,
            ...overrides,
            templateId,
            data: original.data,
            metadata: {},
            parentId: originalId,
            sourceEventId: original.sourceEventId
          },
          actor
        )
      )
      yield* work.wake
      return yield* view(notificationId)
    }).pipe(orDieUnlessHttp)

  // --- Settings ------------------------------------------------------------------------------------

  const getSettings = Effect.map(readSettings, (settings) => ({ events: settings.all }))

  const changeSettings = (actor: AuthenticatedActor, patch: SettingsPatchInput) =>
    Effect.gen(function* () {
      const current = yield* readSettings
      const changed: Record<string, TriggerSetting> = {}
      for (const [trigger, change] of Object.entries(patch.events)) {
        const param = `events.${trigger}`
        if (!isTrigger(trigger)) {
          return yield* Effect.fail(
            invalid(param, `${trigger} is not a trigger: use one of ${TRIGGERS.join(", ")}`)
          )
        }
        const before = current.of(trigger)
        const channels = change.channels ?? before.channels
        if (new Set(channels).size !== channels.length) {
          return yield* Effect.fail(invalid(`${param}.channels`, "channels lists each channel at most once"))
        }
        const next: TriggerSetting = {
          enabled: change.enabled ?? before.enabled,
          channels,
          templateId: change.templateId === undefined ? before.templateId : change.templateId
        }
        if (CRITICAL_TRIGGERS.has(trigger) && (!next.enabled || !next.channels.includes("email"))) {
          return yield* Effect.fail(
            invalid(param, `${trigger} is critical: its email cannot be turned off`, "critical_notification")
          )
        }
        if (next.templateId !== null) {
          const template = yield* withSql(resolveTemplate(next.templateId)).pipe(Effect.orDie)
          if (Option.isNone(template)) {
            return yield* Effect.fail(
              invalid(`${param}.templateId`, `no template ${next.templateId}`, "resource_missing")
            )
          }
          const builtIn = Option.getOrUndefined(findBuiltInTemplate(next.templateId))
          if (builtIn !== undefined && builtIn.trigger !== trigger) {
            return yield* Effect.fail(
              invalid(
                `${param}.templateId`,
                `${next.templateId} is the built-in template of ${builtIn.trigger}, not of ${trigger}: select a custom template or null`
              )
            )
          }
          if (!next.channels.includes(template.value.channel)) {
            return yield* Effect.fail(
              invalid(
                `${param}.templateId`,
                `template ${next.templateId} is for ${template.value.channel}, which ${trigger} does not use`
              )
            )
          }
        }
        changed[trigger] = next
      }
      const metadata = yield* commandMetadata(actor)
      yield* transact(
        runner.execute(SettingsDecider, SETTINGS_STREAM, { _tag: "Change", events: changed }, { metadata })
      )
      return yield* getSettings
    }).pipe(orDieUnlessHttp)

  // --- Templates -----------------------------------------------------------------------------------

  const customTemplate = (id: string) =>
    Ids.isValid("tpl", id)
      ? Effect.flatMap(withSql(findTemplate(id)).pipe(Effect.orDie), (row) =>
          Option.match(row, { onNone: () => Effect.fail(templateNotFound), onSome: Effect.succeed })
        )
      : Effect.fail(templateNotFound)

  const readOnly = (id: string) =>
    Conflict.of({
      code: "template_read_only",
      message: `${id} is a built-in template: create your own and select it in the settings instead`
    })

  const checked = (content: TemplateContent) => {
    const result = validateTemplate(content.channel, partsOf(content))
    return Either.isLeft(result)
      ? Effect.fail(invalid(result.left.field, result.left.message, "template_invalid"))
      : Effect.void
  }

  const templateCommand = (
    templateId: string,
    command: Parameters<typeof TemplateDecider.decide>[0],
    actor: AuthenticatedActor
  ) =>
    Effect.flatMap(commandMetadata(actor), (metadata) =>
      transact(runner.execute(TemplateDecider, templateStream(templateId), command, { metadata }))
    )

  /** Every template (built-ins first, then custom ones, oldest first), unpaged, as a base list. */
  const listTemplatesView = (channel: Channel | undefined) =>
    Effect.map(withSql(listTemplates(channel)).pipe(Effect.orDie), (rows) => {
      const models = [
        ...BUILT_IN_TEMPLATES.filter((t) => channel === undefined || t.channel === channel).map(builtInView),
        ...rows.map(templateView)
      ]
      return { count: models.length, models }
    })

  const getTemplate = (id: string): Effect.Effect<TemplateView, NotFound> => {
    const builtIn = findBuiltInTemplate(id)
    return Option.isSome(builtIn)
      ? Effect.succeed(builtInView(builtIn.value))
      : Effect.map(customTemplate(id), templateView)
  }

  const createTemplate = (actor: AuthenticatedActor, input: TemplateInput) =>
    Effect.gen(function* () {
      const content: TemplateContent = {
        name: input.name,
        channel: input.channel,
        subject: input.subject,
        title: input.title,
        body: input.body
      }
      yield* checked(content)
      const templateId = yield* Ids.make("tpl")
      yield* templateCommand(templateId, { _tag: "Create", templateId, ...content }, actor)
      // Projected inline by the command: it is there (read-your-writes).
      return yield* getTemplate(templateId).pipe(
        Effect.orDieWith(() => new Error(`${templateId} not projected`))
      )
    }).pipe(orDieUnlessHttp)

  const updateTemplate = (actor: AuthenticatedActor, id: string, patch: TemplatePatchInput) =>
    Effect.gen(function* () {
      if (Option.isSome(findBuiltInTemplate(id))) return yield* Effect.fail(readOnly(id))
      const row = yield* customTemplate(id)
      const pick = (value: string | null | undefined, current: string | null) =>
        value === undefined ? (current ?? undefined) : (value ?? undefined)
      const content: TemplateContent = {
        name: patch.name ?? row.name,
        channel: row.channel,
        subject: pick(patch.subject, row.subject),
        title: pick(patch.title, row.title),
        body: patch.body ?? row.body
      }
      yield* checked(content)
      yield* templateCommand(id, { _tag: "Update", ...content }, actor).pipe(
        Effect.catchTag("TemplateNotFound", () => Effect.fail(templateNotFound))
      )
      return yield* getTemplate(id)
    }).pipe(orDieUnlessHttp)

  const deleteTemplate = (actor: AuthenticatedActor, id: string) =>
    Effect.gen(function* () {
      if (Option.isSome(findBuiltInTemplate(id))) return yield* Effect.fail(readOnly(id))
      yield* customTemplate(id)
      const users = yield* withSql(templateUsers(id)).pipe(Effect.orDie)
      if (users.triggers.length > 0 || users.pending > 0) {
        const by = [
          ...(users.triggers.length > 0 ? [`the settings of ${users.triggers.join(", ")}`] : []),
          ...(users.pending > 0 ? [`${users.pending} pending notification(s)`] : [])
        ]
        return yield* Effect.fail(
          Conflict.of({
            code: "template_in_use",
            message: `${by.join(" and ")} use this template: select another one, or let them be sent or cancel them, first`
          })
        )
      }
      yield* templateCommand(id, { _tag: "Delete" }, actor).pipe(
        Effect.catchTag("TemplateNotFound", () => Effect.fail(templateNotFound))
      )
    }).pipe(orDieUnlessHttp)

  return {
    list,
    get,
    create,
    update,
    cancel,
    resend,
    getSettings: getSettings.pipe(orDieUnlessHttp),
    changeSettings,
    listTemplates: (channel: Channel | undefined) => listTemplatesView(channel).pipe(orDieUnlessHttp),
    getTemplate: (id: string) => getTemplate(id).pipe(orDieUnlessHttp),
    createTemplate,
    updateTemplate,
    deleteTemplate
  }
})

export type NotificationsShape = Effect.Effect.Success<typeof makeNotifications>

export class Notifications extends Context.Tag("notifications/Notifications")<
  Notifications,
  NotificationsShape
>() {}

export const NotificationsLive = Layer.effect(Notifications, makeNotifications)
