/**
 * Automatic notifications (spec §6.5): a process manager over the public events that maps each
 * trigger event to one notification per enabled channel, per the settings (default: email).
 * The notification id derives from `<trigger>:<public event id>:<channel>`, so an event seen again
 * (a replay, a reset checkpoint) finds its notification already requested and adds nothing.
 *
 * Adding a trigger's source is one line in `AUTOMATIC_TRIGGERS`.
 */
import type { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { AppConfig } from "../config.js"
import { findCustomer } from "../customers/index.js"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { defineEvent } from "../eventstore/EventType.js"
import type { PublicEvent } from "../eventstore/PublicEvents.js"
import type { CommandRunner } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import { defineProcessManager, isTimedOut, outputId } from "../kernel/ProcessManager.js"
import * as Time from "../kernel/Time.js"
import type { DueWork } from "../processors/DueWork.js"
import {
  type CommandHandlers,
  processManagerSubscription,
  runBatch
} from "../processors/ProcessManagerRunner.js"
import type { Channel, Trigger } from "./channels.js"
import { recipientProblem, triggerTemplateId } from "./content.js"
import { effectiveSettings } from "./Notifications.js"
import { readSettingRows } from "./queries.js"
import { requestNotification } from "./request.js"

type EventData = Readonly<Record<string, unknown>>

export interface AutomaticTrigger {
  readonly trigger: Trigger
  /** The public event type that fires it. */
  readonly on: string
  /** Variables the templates get on top of the event's data (e.g. the reset link). */
  readonly variables?: (data: EventData, store: { readonly url: string }) => EventData
}

const text = (value: unknown): string | undefined =>
  typeof value === "string" && value !== "" ? value : undefined

const passwordResetVariables = (data: EventData, store: { readonly url: string }): EventData => {
  const token = text(data.resetToken)
  return token === undefined
    ? {}
    : { resetUrl: `${store.url}/reset-password?token=${encodeURIComponent(token)}` }
}

/** Trigger → the public event that fires it. One line each. */
export const AUTOMATIC_TRIGGERS: ReadonlyArray<AutomaticTrigger> = [
  { trigger: "customer.password_reset", on: "customer.password_reset", variables: passwordResetVariables },
  { trigger: "order.confirmed", on: "order.confirmed" },
  { trigger: "order.shipped", on: "order.shipped" },
  { trigger: "order.delivered", on: "order.delivered" },
  { trigger: "order.cancelled", on: "order.cancelled" },
  { trigger: "order.refunded", on: "order.refunded" },
  { trigger: "payment.failed", on: "payment.failed" },
  { trigger: "subscription.created", on: "subscription.created" },
  { trigger: "subscription.renewed", on: "subscription.renewed" },
  { trigger: "subscription.cancelled", on: "subscription.cancelled" }
]

/**
 * Events older than this notify nobody: a replay (a reset checkpoint) or a long outage must not mail
 * shoppers about yesterday's orders with today's settings. A password-reset link is dead by then anyway.
 */
export const MAX_TRIGGER_AGE_MS = 24 * 60 * 60 * 1000

/** The deterministic id of a trigger's notification on one channel. */
export const automaticNotificationId = (
  trigger: Trigger,
  event: Pick<PublicEvent, "id" | "occurredAt">,
  channel: Channel
) => Ids.derive("ntf", `${trigger}:${event.id}:${channel}`, event.occurredAt.getTime())

const TRIGGERS_BY_EVENT = new Map<string, ReadonlyArray<AutomaticTrigger>>()
for (const t of AUTOMATIC_TRIGGERS) TRIGGERS_BY_EVENT.set(t.on, [...(TRIGGERS_BY_EVENT.get(t.on) ?? []), t])

const AUTOMATIC: EventMetadata = { actor: { type: "system", id: "notification-triggers" } }

const isRecord = (value: unknown): value is EventData =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const asObject = (value: unknown): EventData => (isRecord(value) ? value : {})

/** The customer an event is about: `customerId`, or `customer.id` of a snapshot. */
const customerIdOf = (data: EventData): string | undefined => {
  const id = text(data.customerId) ?? text(asObject(data.customer).id)
  return id !== undefined && Ids.isValid("cus", id) ? id : undefined
}

/** What the notifications side is asked for each trigger an event fires: the trigger and the event. */
export interface AutomaticRequest {
  readonly trigger: Trigger
  readonly event: Pick<PublicEvent, "id" | "type" | "data" | "occurredAt">
}

interface AutomaticCommands {
  readonly "notifications.automatic": AutomaticRequest
}

/** The trigger events as the process manager reads them: the snapshot is passed on whole. */
const TRIGGER_EVENTS = [...TRIGGERS_BY_EVENT.keys()].map((type) =>
  defineEvent(type, { schema: Schema.Unknown })
)

/**
 * The reaction as a (stateless) process manager: each trigger a public event fires becomes one
 * request with an id derived from the event. Settings, channels and recipients are the
 * notifications side's business (`requestAutomaticNotifications`).
 */
export const AutomaticNotifications = defineProcessManager<AutomaticCommands>()({
  name: "notification-triggers",
  events: TRIGGER_EVENTS,
  persistence: "none",
  correlate: (input) => input.id,
  initialState: undefined,
  decide: (input) =>
    isTimedOut(input)
      ? []
      : (TRIGGERS_BY_EVENT.get(input.type) ?? []).map((mapping) => ({
          kind: "notifications.automatic" as const,
          id: outputId(input, mapping.trigger),
          input: {
            trigger: mapping.trigger,
            event: { id: input.id, type: input.type, data: input.data, occurredAt: input.occurredAt }
          }
        }))
})

/**
 * The notifications side of one trigger: the settings (enabled, channels), a recipient per channel,
 * then one notification per channel with an id derived from the event. Events over 24 h old notify
 * nobody. Runs in the caller's (the subscription batch's) transaction.
 */
export const requestAutomaticNotifications = ({ trigger, event }: AutomaticRequest) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const store = { name: config.notifications.storeName, url: config.notifications.storeUrl }
    if ((yield* Time.nowMillis) - event.occurredAt.getTime() > MAX_TRIGGER_AGE_MS) {
      yield* Effect.logWarning(`${event.type} ${event.id} is over 24 h old: no automatic notification`)
      return
    }
    const mapping = AUTOMATIC_TRIGGERS.find((t) => t.trigger === trigger && t.on === event.type)
    if (mapping === undefined) return
    const setting = effectiveSettings(yield* readSettingRows).of(trigger)
    if (!setting.enabled) return
    const data = asObject(event.data)
    const customerId = customerIdOf(data)
    const customer = customerId === undefined ? Option.none() : yield* findCustomer(customerId)
    const onRecord = Option.getOrUndefined(customer)
    const deviceToken = onRecord?.metadata.deviceToken
    const recipients: Record<Channel, string | undefined> = {
      email: text(data.email) ?? onRecord?.email,
      sms: text(data.phone) ?? onRecord?.phone ?? undefined,
      push: text(data.deviceToken) ?? (typeof deviceToken === "string" ? deviceToken : undefined)
    }
    // Critical triggers always mail, whatever the stored channels say.
    const channels = new Set<Channel>(setting.critical ? [...setting.channels, "email"] : setting.channels)
    for (const channel of channels) {
      const to = recipients[channel]
      if (to === undefined || recipientProblem(channel, to) !== undefined) {
        yield* Effect.logInfo(`${trigger}: no ${channel} recipient for event ${event.id}; skipped`)
        continue
      }
      yield* requestNotification(
        {
          notificationId: automaticNotificationId(trigger, event, channel),
          customerId,
          eventName: trigger,
          channel,
          to,
          templateId: yield* triggerTemplateId(trigger, channel, setting),
          data: {
            ...data,
            ...(mapping.variables?.(data, store) ?? {}),
            event: { id: event.id, type: event.type, occurredAt: event.occurredAt.toISOString() }
          },
          metadata: {},
          sourceEventId: event.id
        },
        { metadata: AUTOMATIC, dueAt: event.occurredAt }
      ).pipe(
        // The customer was erased meanwhile: nothing personal may be stored for them, so no notice.
        Effect.catchTag("SubjectForgotten", () => Effect.void)
      )
    }
  })

/** The ports the reaction's commands go to. */
const ports: CommandHandlers<AutomaticCommands, unknown, AutomaticServices> = {
  "notifications.automatic": (command) => requestAutomaticNotifications(command.input)
}

type AutomaticServices = SqlClient.SqlClient | CommandRunner | DueWork | AppConfig

/** Notifies for one batch of public events, inside the caller's transaction. */
export const notifyForEvents = (events: ReadonlyArray<PublicEvent>) =>
  runBatch(AutomaticNotifications, ports, events)

/** The automatic notifications processor (`ROLE=worker|all`). */
export const automaticNotifications = () =>
  processManagerSubscription(AutomaticNotifications, ports, { source: "public_events" })
