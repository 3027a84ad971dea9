/**
 * The notifications HTTP contract (spec §2.7, §3.2, §4.4; design/API.md): notifications with
 * scheduling, cancel and resend, trigger settings, and Liquid templates. Staff credentials with the
 * `notifications` scopes only; shoppers have no access.
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Arbitrary, JSONSchema, Schema } from "effect"
import { ApiBase } from "../http/ApiBase.js"
import { Authentication } from "../http/Auth.js"
import { byId, scoped } from "../http/Endpoints.js"
import { Conflict, NotFound } from "../http/errors.js"
import { Instant, Text } from "../http/Fields.js"
import { ListOf, PageParams, SortParam } from "../http/Lists.js"
import { EmailSchema } from "../kernel/Email.js"
import { Metadata, MetadataInput } from "../kernel/Metadata.js"
import { CHANNELS, TRIGGERS } from "./channels.js"
import { DEVICE_TOKEN, E164 } from "./content.js"
import { ChannelSchema, RenderedMessage } from "./events.js"
import { SORT_FIELDS } from "./queries.js"

export const STATUSES = ["pending", "sent", "failed", "cancelled"] as const

const Channel = Schema.Literal(...CHANNELS).annotations({
  message: () => ({ message: `channel must be one of ${CHANNELS.join(", ")}`, override: true })
})

const MetadataObject = MetadataInput.annotations({ message: () => "metadata must be a JSON object" })
const DataObject = Metadata.annotations({ message: () => "data must be a JSON object" })

// --- Shapes ----------------------------------------------------------------------------------------

export const Notification = Schema.Struct({
  id: Schema.String,
  eventName: Schema.String,
  channel: ChannelSchema,
  to: Schema.String,
  status: Schema.Literal(...STATUSES),
  /** Email: the subject given at creation (null: the template's); once sent, the subject sent. */
  subject: Schema.NullOr(Schema.String),
  title: Schema.NullOr(Schema.String),
  body: Schema.NullOr(Schema.String),
  templateId: Schema.NullOr(Schema.String),
  data: Metadata,
  metadata: Metadata,
  scheduledAt: Schema.NullOr(Schema.Date),
  parentId: Schema.NullOr(Schema.String),
  /** The customer it is about (automatic notifications, or given on creation). */
  customerId: Schema.NullOr(Schema.String),
  /** Sends tried so far. */
  attempts: Schema.Int,
  /** The reason of the last transient failure while still pending. */
  lastError: Schema.NullOr(Schema.String),
  nextAttemptAt: Schema.NullOr(Schema.Date),
  /** Why it failed (status `failed`). */
  failureReason: Schema.NullOr(Schema.String),
  provider: Schema.NullOr(Schema.String),
  providerMessageId: Schema.NullOr(Schema.String),
  /** What the `log` provider "sent" (no email, SMS or push provider configured). */
  rendered: Schema.NullOr(RenderedMessage),
  sentAt: Schema.NullOr(Schema.Date),
  failedAt: Schema.NullOr(Schema.Date),
  cancelledAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "Notification" })

/** The list shape of spec §4.4. */
export const NotificationSummary = Notification.pick(
  "id",
  "eventName",
  "channel",
  "to",
  "status",
  "sentAt"
).annotations({ identifier: "NotificationSummary" })

export const Template = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  channel: ChannelSchema,
  subject: Schema.NullOr(Schema.String),
  title: Schema.NullOr(Schema.String),
  body: Schema.String,
  /** Variables the template reads (top-level names). */
  variables: Schema.Array(Schema.String),
  /** Built-in templates are read-only; copy one into a new template to change it. */
  builtIn: Schema.Boolean,
  /** The trigger a built-in template serves. */
  trigger: Schema.NullOr(Schema.String),
  createdAt: Schema.NullOr(Schema.Date),
  updatedAt: Schema.NullOr(Schema.Date)
}).annotations({ identifier: "Template" })

export const TriggerSettingView = Schema.Struct({
  enabled: Schema.Boolean,
  channels: Schema.Array(ChannelSchema),
  templateId: Schema.NullOr(Schema.String),
  /** Critical triggers (password reset, order confirmation) always send their email. */
  critical: Schema.Boolean
}).annotations({ identifier: "TriggerSetting" })

export const Settings = Schema.Struct({
  events: Schema.Record({ key: Schema.String, value: TriggerSettingView })
}).annotations({ identifier: "NotificationSettings" })

// --- Requests --------------------------------------------------------------------------------------

const EventName = Schema.String.pipe(
  Schema.pattern(/^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$/, {
    message: () => "eventName must be a dotted lower-case name such as order.confirmed"
  }),
  Schema.maxLength(100, { message: () => "eventName must be at most 100 characters" })
)

export const NotificationListParams = Schema.Struct({
  ...PageParams.fields,
  sort: Schema.optional(SortParam(SORT_FIELDS)),
  channel: Schema.optional(Channel),
  status: Schema.optional(
    Schema.Literal(...STATUSES).annotations({
      message: () => ({ message: `status must be one of ${STATUSES.join(", ")}`, override: true })
    })
  ),
  eventName: Schema.optional(EventName),
  to: Schema.optional(
    Schema.String.pipe(Schema.maxLength(4096, { message: () => "to must be at most 4096 characters" }))
  )
})

const TemplateId = Schema.String.pipe(
  Schema.maxLength(100, { message: () => "templateId is not a template id" })
)

/**
 * The shapes each channel takes (what the use case checks, with its own messages): email and sms
 * need a template, push either a template or a title and body; `to` is an address, an E.164 number
 * or a device token; `subject` is for email only, `title` and `body` for push only. The request
 * decodes as one flat object (so a wrong field gets the use case's precise message); these shapes
 * are what the OpenAPI document states and what requests drawn from the schema follow.
 */
const notificationCommon = {
  data: Schema.optional(DataObject),
  metadata: Schema.optional(MetadataObject),
  scheduledAt: Schema.optional(Instant("scheduledAt")),
  eventName: Schema.optional(EventName),
  customerId: Schema.optional(Schema.String)
}
const DeviceToken = Schema.String.pipe(Schema.pattern(DEVICE_TOKEN))
const NotificationByChannel = Schema.Union(
  Schema.Struct({
    channel: Schema.Literal("email"),
    to: EmailSchema,
    templateId: TemplateId,
    subject: Schema.optional(Text("subject", 998)),
    ...notificationCommon
  }),
  Schema.Struct({
    channel: Schema.Literal("sms"),
    to: Schema.String.pipe(Schema.pattern(E164)),
    templateId: TemplateId,
    ...notificationCommon
  }),
  Schema.Struct({
    channel: Schema.Literal("push"),
    to: DeviceToken,
    templateId: TemplateId,
    title: Schema.optional(Text("title", 200)),
    body: Schema.optional(Text("body", 4096)),
    ...notificationCommon
  }),
  Schema.Struct({
    channel: Schema.Literal("push"),
    to: DeviceToken,
    title: Text("title", 200),
    body: Text("body", 4096),
    ...notificationCommon
  })
)

/** The JSON Schema of `schema` inline (no `$schema`), for a `jsonSchema` annotation. */
const inlineJsonSchema = <A, I>(schema: Schema.Schema<A, I>): object => {
  const { $schema: _, ...rest } = JSONSchema.make(schema)
  return rest
}

export const NewNotification = Schema.Struct({
  channel: Channel,
  to: Schema.Trim.pipe(Schema.minLength(1, { message: () => "to must not be empty" })),
  templateId: Schema.optional(TemplateId),
  subject: Schema.optional(Text("subject", 998)),
  title: Schema.optional(Text("title", 200)),
  body: Schema.optional(Text("body", 4096)),
  ...notificationCommon
}).annotations({
  jsonSchema: inlineJsonSchema(NotificationByChannel),
  arbitrary: () => () => Arbitrary.make(NotificationByChannel)
})

const NotificationPatchFields = Schema.Struct({
  metadata: Schema.optional(Schema.NullOr(MetadataObject)),
  scheduledAt: Schema.optional(Schema.NullOr(Instant("scheduledAt")))
})

/** At least one field (the use case answers 400 `parameter_missing` for an empty patch). */
export const NotificationPatch = NotificationPatchFields.annotations({
  jsonSchema: { minProperties: 1 },
  arbitrary: () => () =>
    Arbitrary.make(NotificationPatchFields).filter((patch) =>
      Object.values(patch).some((v) => v !== undefined)
    )
})

export const ResendRequest = Schema.Struct({
  channel: Schema.optional(Channel),
  to: Schema.optional(Schema.Trim.pipe(Schema.minLength(1, { message: () => "to must not be empty" })))
})

const TriggerSettingPatch = Schema.Struct({
  enabled: Schema.optional(Schema.Boolean),
  channels: Schema.optional(
    Schema.Array(Channel).pipe(
      Schema.maxItems(3, { message: () => "channels lists each channel at most once" })
    )
  ),
  templateId: Schema.optional(Schema.NullOr(TemplateId))
})

/** Keys are triggers (another key → 400 naming the triggers), each channel at most once. */
export const SettingsPatch = Schema.Struct({
  events: Schema.Record({ key: Schema.String, value: TriggerSettingPatch }).annotations({
    jsonSchema: {
      type: "object",
      propertyNames: { enum: [...TRIGGERS] },
      additionalProperties: inlineJsonSchema(
        TriggerSettingPatch.pipe(
          Schema.omit("channels"),
          Schema.extend(Schema.Struct({ channels: Schema.optional(Schema.Array(Channel)) }))
        )
      )
    },
    arbitrary: () => (fc) =>
      fc.dictionary(
        fc.constantFrom(...TRIGGERS),
        fc.record(
          {
            enabled: fc.boolean(),
            channels: fc.uniqueArray(fc.constantFrom(...CHANNELS), { maxLength: CHANNELS.length }),
            templateId: fc.constant(null)
          },
          { requiredKeys: [] }
        ),
        { maxKeys: 3 }
      )
  })
})

/** A body, subject or title a template needs: not blank. */
const NonBlank = Schema.String.pipe(Schema.pattern(/\S/))
const templateCommon = { name: Text("name", 200), body: NonBlank }
/** What each channel's template has: email a subject, push a title, sms neither. */
const TemplateByChannel = Schema.Union(
  Schema.Struct({ channel: Schema.Literal("email"), subject: NonBlank, ...templateCommon }),
  Schema.Struct({ channel: Schema.Literal("sms"), ...templateCommon }),
  Schema.Struct({ channel: Schema.Literal("push"), title: NonBlank, ...templateCommon })
)

/** Decoded flat (the use case names a misplaced field); documented and drawn per channel. */
export const NewTemplate = Schema.Struct({
  name: Text("name", 200),
  channel: Channel,
  subject: Schema.optional(Schema.String),
  title: Schema.optional(Schema.String),
  body: Schema.String
}).annotations({
  jsonSchema: inlineJsonSchema(TemplateByChannel),
  arbitrary: () => () => Arbitrary.make(TemplateByChannel)
})

export const TemplatePatch = Schema.Struct({
  name: Schema.optional(Text("name", 200)),
  subject: Schema.optional(Schema.NullOr(Schema.String)),
  title: Schema.optional(Schema.NullOr(Schema.String)),
  // Not blank (the use case answers 400 `template_invalid`): stated for the document and drawn requests.
  body: Schema.optional(
    Schema.String.annotations({
      jsonSchema: { type: "string", pattern: "\\S" },
      arbitrary: () => (fc) => fc.string().filter((body) => body.trim() !== "")
    })
  )
})

// --- Endpoints ---------------------------------------------------------------------------------------

const PENDING_ONLY = "Only a pending notification can be changed (else 409 `notification_not_pending`)."

export class NotificationsApi extends HttpApiGroup.make("notifications")
  .add(
    HttpApiEndpoint.get("list", "/notification")
      .setUrlParams(NotificationListParams)
      .addSuccess(ListOf(NotificationSummary, "NotificationList"))
      .pipe(scoped("read:notifications"))
      .annotate(OpenApi.Summary, "List notifications, filtered and sorted")
      .annotate(
        OpenApi.Description,
        `Filters: \`channel\` (${CHANNELS.join(", ")}), \`status\` (${STATUSES.join(", ")}), \`eventName\`, \`to\` ` +
          "(exact recipient; email addresses case-insensitively). " +
          `\`sort\`: \`<field>:<asc|desc>\` with field ${SORT_FIELDS.join(", ")} (default \`createdAt:desc\`; ` +
          "notifications without that time come last). " +
          "`page` ≥ 1, `display` 1–100 (default 20)."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/notification/:id")
      .addSuccess(Notification)
      .pipe(scoped("read:notifications"), byId)
      .annotate(OpenApi.Summary, "A notification with its delivery state")
  )
  .add(
    HttpApiEndpoint.post("create", "/notification")
      .setPayload(NewNotification)
      .addSuccess(Notification, { status: 201 })
      .addError(NotFound)
      .pipe(scoped("write:notifications"))
      .annotate(OpenApi.Summary, "Send (or schedule) a notification")
      .annotate(
        OpenApi.Description,
        "Per channel: **email** `to` (an address), `templateId` (its `subject` may be overridden by `subject`); " +
          "**sms** `to` (E.164, e.g. +14155550123), `templateId`; **push** `to` (a device token), `title` and " +
          "`body` (or a push `templateId`), `data` (sent as string values). `data` holds the template " +
          "variables (at most 32 KiB as JSON); a variable the template reads but `data` lacks → 400. Templates " +
          "render with `store.name` and `store.url` as well. `scheduledAt` delays the send; absent or past " +
          "means now. `eventName` defaults to `manual`. Delivery is at-least-once: a crash between the " +
          "provider's acceptance and recording it can repeat a send (email carries `X-Notification-Id`)."
      )
  )
  .add(
    HttpApiEndpoint.put("update", "/notification/:id")
      .setPayload(NotificationPatch)
      .addSuccess(Notification)
      .addError(Conflict)
      .pipe(scoped("write:notifications"), byId)
      .annotate(OpenApi.Summary, "Change a pending notification's metadata or scheduledAt")
      .annotate(
        OpenApi.Description,
        "`metadata` is merged (a key set to null is removed, `metadata: null` clears it); `scheduledAt: null` " +
          `sends as soon as possible. ${PENDING_ONLY} While a send is in flight → 409 \`notification_sending\`.`
      )
  )
  .add(
    HttpApiEndpoint.del("cancel", "/notification/:id")
      .addSuccess(Notification)
      .addError(Conflict)
      .pipe(scoped("write:notifications"), byId)
      .annotate(OpenApi.Summary, "Cancel a pending notification (status `cancelled`)")
      .annotate(
        OpenApi.Description,
        `${PENDING_ONLY} While a send is in flight → 409 \`notification_sending\`.`
      )
  )
  .add(
    HttpApiEndpoint.post("resend", "/notification/:id/resend")
      // Every field is optional, so no body at all is fine too.
      .setPayload(Schema.NullOr(ResendRequest))
      .addSuccess(Notification, { status: 201 })
      .addError(Conflict)
      .pipe(scoped("write:notifications"), byId)
      .annotate(OpenApi.Summary, "Send a notification again as a new pending one with parentId")
      .annotate(
        OpenApi.Description,
        "Any status. The original is unchanged; the new notification has the same template, data and " +
          "content. `channel` (default: the original's) may differ: the recipient then comes from `to` or " +
          "from the customer's record (email, phone, or metadata `deviceToken`), and an automatic " +
          "notification uses that channel's template for its trigger. Content that no longer renders (e.g. " +
          "its template was deleted) → 409 `notification_not_resendable`."
      )
  )
  .add(
    HttpApiEndpoint.get("getSettings", "/notification/settings")
      .addSuccess(Settings)
      .pipe(scoped("read:notifications"))
      .annotate(OpenApi.Summary, "Which trigger events send automatic notifications, on which channels")
  )
  .add(
    HttpApiEndpoint.post("changeSettings", "/notification/settings")
      .setPayload(SettingsPatch)
      .addSuccess(Settings)
      .pipe(scoped("write:notifications"))
      .annotate(OpenApi.Summary, "Configure automatic notifications (merged); returns the full settings")
      .annotate(
        OpenApi.Description,
        `Body \`{ "events": { "<trigger>": { "enabled", "channels", "templateId" } } }\` with triggers ` +
          `${TRIGGERS.join(", ")}. Only the fields sent change. Default: email on for every trigger. ` +
          "`templateId` is a custom template for one of the trigger's channels (null: the built-in one). " +
          "customer.password_reset and order.confirmed are critical: their email cannot be turned off (400)."
      )
  )
  .add(
    HttpApiEndpoint.get("listTemplates", "/notification/template")
      .setUrlParams(Schema.Struct({ channel: Schema.optional(Channel) }))
      .addSuccess(ListOf(Template, "TemplateList"))
      .pipe(scoped("read:notifications"))
      .annotate(OpenApi.Summary, "Built-in and custom templates")
      .annotate(
        OpenApi.Description,
        "`{count, models}` like every base list, with every template at once (not paged): the built-ins, " +
          "then custom templates oldest first; `channel` filters."
      )
  )
  .add(
    HttpApiEndpoint.post("createTemplate", "/notification/template")
      .setPayload(NewTemplate)
      .addSuccess(Template, { status: 201 })
      .pipe(scoped("write:notifications"))
      .annotate(OpenApi.Summary, "Create a Liquid template (validated on save)")
      .annotate(
        OpenApi.Description,
        "Liquid syntax (liquidjs). **email** needs `subject` and `body`; **sms** `body` only; **push** `title` " +
          "and `body`. Rendering is strict: a variable the data lacks fails the notification with a clear " +
          "reason (use `| default:` or `{% if %}` for optional ones). `include`, `render` and `layout` are " +
          "not available. Filters: Liquid's own plus `money` (`{{ total | money: currency }}`)."
      )
  )
  .add(
    HttpApiEndpoint.get("getTemplate", "/notification/template/:id")
      .addSuccess(Template)
      .pipe(scoped("read:notifications"), byId)
      .annotate(OpenApi.Summary, "A template (built-in or custom)")
  )
  .add(
    HttpApiEndpoint.put("updateTemplate", "/notification/template/:id")
      .setPayload(TemplatePatch)
      .addSuccess(Template)
      .addError(Conflict)
      .pipe(scoped("write:notifications"), byId)
      .annotate(OpenApi.Summary, "Change a custom template (validated); built-in ones → 409")
  )
  .add(
    HttpApiEndpoint.del("deleteTemplate", "/notification/template/:id")
      .addSuccess(HttpApiSchema.NoContent)
      .addError(Conflict)
      .pipe(scoped("write:notifications"), byId)
      .annotate(
        OpenApi.Summary,
        "Delete a custom template; one that settings or pending notifications use, or a built-in one → 409"
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Notifications")
  .annotate(
    OpenApi.Description,
    "Email, SMS and push notifications (sent now or scheduled, cancelled, resent), the trigger events " +
      "that send them automatically, and their Liquid templates. Staff only."
  ) {}

/** This context's routes on the service's API (`ApiBase`): what its handlers are built against. */
export const NotificationsRoutes = ApiBase.add(NotificationsApi)
