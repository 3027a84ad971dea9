/**
 * What a notification says and to whom, shared by the HTTP use cases, the sender and the automatic
 * trigger processor: recipient checks per channel, template lookup (built-in or custom), and the
 * parts a template renders with the request's overrides.
 */

import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import { isEmail } from "../kernel/Email.js"
import * as Ids from "../kernel/Ids.js"
import type { Channel, Trigger } from "./channels.js"
import { findTemplate } from "./queries.js"
import { builtInTemplate, findBuiltInTemplate, type TemplateParts } from "./templates.js"

/** E.164: a `+`, a country code and up to 15 digits in all. */
export const E164 = /^\+[1-9][0-9]{6,14}$/
/** FCM registration tokens and APNs device tokens: URL-safe characters, no spaces. */
export const DEVICE_TOKEN = /^[A-Za-z0-9_:.-]{32,4096}$/

/** Why `to` cannot receive on `channel`, or undefined when it can. */
export const recipientProblem = (channel: Channel, to: string): string | undefined => {
  switch (channel) {
    case "email":
      return isEmail(to) ? undefined : "to must be a valid email address for the email channel"
    case "sms":
      return E164.test(to)
        ? undefined
        : "to must be a phone number in E.164 form (e.g. +14155550123) for the sms channel"
    case "push":
      return DEVICE_TOKEN.test(to)
        ? undefined
        : "to must be a device token (32–4096 letters, digits, _ : . -) for the push channel"
  }
}

export interface ResolvedTemplate extends TemplateParts {
  readonly id: string
  readonly channel: Channel
  readonly builtIn: boolean
}

/** A template, built-in or a custom row, as the sender uses it (no subject or title where it has none). */
const resolved = (
  template: {
    readonly id: string
    readonly channel: Channel
    readonly body: string
    readonly subject?: string | null | undefined
    readonly title?: string | null | undefined
  },
  builtIn: boolean
): ResolvedTemplate => ({
  id: template.id,
  channel: template.channel,
  builtIn,
  body: template.body,
  ...(template.subject == null ? {} : { subject: template.subject }),
  ...(template.title == null ? {} : { title: template.title })
})

/** A built-in template by its fixed id, or a custom one from the read model. */
export const resolveTemplate = (
  templateId: string
): Effect.Effect<Option.Option<ResolvedTemplate>, SqlError, SqlClient.SqlClient> => {
  const builtIn = Option.getOrUndefined(findBuiltInTemplate(templateId))
  if (builtIn !== undefined) return Effect.succeed(Option.some(resolved(builtIn, true)))
  if (!Ids.isValid("tpl", templateId)) return Effect.succeed(Option.none())
  return Effect.map(
    findTemplate(templateId),
    Option.map((row) => resolved(row, false))
  )
}

/**
 * The template a trigger uses on a channel: the one its settings select when it is for that channel
 * (one custom template serves one channel), else the built-in one.
 */
export const triggerTemplateId = (
  trigger: Trigger,
  channel: Channel,
  setting: { readonly templateId: string | null }
): Effect.Effect<string, SqlError, SqlClient.SqlClient> => {
  const fallback = builtInTemplate(trigger, channel).id
  if (setting.templateId === null) return Effect.succeed(fallback)
  return Effect.map(resolveTemplate(setting.templateId), (found) =>
    Option.isSome(found) && found.value.channel === channel ? found.value.id : fallback
  )
}

/** Content given with the notification itself (it wins over the template's). */
export interface ContentOverrides {
  readonly subject?: string | undefined
  readonly title?: string | undefined
  readonly body?: string | undefined
}

/**
 * The parts to render for `channel`: the template's, with the overrides the channel uses (email:
 * subject; push: title and body). Undefined when neither gives a body.
 */
export const composeParts = (
  channel: Channel,
  template: TemplateParts | undefined,
  overrides: ContentOverrides
): TemplateParts | undefined => {
  const subject = channel === "email" ? (overrides.subject ?? template?.subject) : undefined
  const title = channel === "push" ? (overrides.title ?? template?.title) : undefined
  const body = channel === "push" ? (overrides.body ?? template?.body) : template?.body
  if (body === undefined) return undefined
  return {
    body,
    ...(subject === undefined ? {} : { subject }),
    ...(title === undefined ? {} : { title })
  }
}

/** Template variables of every notification: its data, plus the store's name and URL. */
export const renderVariables = (
  data: Readonly<Record<string, unknown>>,
  store: { readonly name: string; readonly url: string }
): Record<string, unknown> => ({ ...data, store: { name: store.name, url: store.url } })

/** Data keys holding secrets (a password-reset token): never shown by the API. */
const SECRET_DATA_KEYS: ReadonlySet<string> = new Set(["resetToken", "resetUrl"])

export const redactData = (data: Readonly<Record<string, unknown>>): Record<string, unknown> =>
  Object.fromEntries(Object.entries(data).map(([k, v]) => [k, SECRET_DATA_KEYS.has(k) ? "[redacted]" : v]))

/** Push data travels as strings (FCM requires it): objects as JSON, null and undefined dropped. */
export const pushData = (data: Readonly<Record<string, unknown>>): Record<string, string> =>
  Object.fromEntries(
    Object.entries(data)
      .filter(([k, v]) => v !== null && v !== undefined && !SECRET_DATA_KEYS.has(k))
      .map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)])
  )
