/**
 * What every part of notifications agrees on: the channels, the trigger events of spec §6.5, and
 * the provider interface a rendered message is handed to (SMTP, Twilio-shaped SMS, FCM-shaped push,
 * or the log). Providers classify failures: transient ones are retried, permanent ones fail at once.
 */
import { Context, Data, type Effect } from "effect"

export const CHANNELS = ["email", "sms", "push"] as const
export type Channel = (typeof CHANNELS)[number]

/** Spec §6.5: the events that trigger automatic notifications when enabled. */
export const TRIGGERS = [
  "order.confirmed",
  "order.shipped",
  "order.delivered",
  "order.cancelled",
  "order.refunded",
  "payment.failed",
  "subscription.created",
  "subscription.renewed",
  "subscription.cancelled",
  "customer.password_reset"
] as const
export type Trigger = (typeof TRIGGERS)[number]

export const isTrigger = (name: string): name is Trigger => (TRIGGERS as ReadonlyArray<string>).includes(name)

/** A rendered message, ready for a provider. */
export interface OutgoingMessage {
  /** `ntf_…`: sent as `X-Notification-Id` (email) or the provider's correlation field. */
  readonly notificationId: string
  readonly channel: Channel
  /** Email address, E.164 phone number or device token. */
  readonly to: string
  /** Email subject. */
  readonly subject?: string | undefined
  /** Push title. */
  readonly title?: string | undefined
  /** Email text body, SMS text or push body. */
  readonly body: string
  /** Push data (string values, as FCM requires). */
  readonly data?: Readonly<Record<string, string>> | undefined
}

/** What a provider answers when it accepted the message. */
export interface ProviderReceipt {
  /** The provider's name (`smtp`, `twilio`, `fcm`, `log`). */
  readonly provider: string
  /** The provider's id for the message (SMTP Message-ID, Twilio `sid`, FCM `name`), when it gives one. */
  readonly providerMessageId: string | null
}

/**
 * A send that did not go through. `permanent`: retrying cannot help (SMTP 5xx, provider 4xx other
 * than 408/429, a malformed recipient); otherwise it is retried (network errors, time-outs, SMTP 4xx,
 * 408, 429, 5xx). `reason` is kept on the notification: short, human-readable, no secrets.
 */
export class DeliveryError extends Data.TaggedError("DeliveryError")<{
  readonly permanent: boolean
  readonly reason: string
  /** SMTP reply code or HTTP status, when there was one. */
  readonly code?: number | undefined
  /** Seconds the provider asked us to wait (HTTP Retry-After), when it did. */
  readonly retryAfterSeconds?: number | undefined
}> {}

export interface ChannelProvider {
  readonly name: string
  readonly send: (message: OutgoingMessage) => Effect.Effect<ProviderReceipt, DeliveryError>
}

/** One provider per channel, chosen by configuration (`NotificationProvidersLive`). */
export class NotificationProviders extends Context.Tag("notifications/NotificationProviders")<
  NotificationProviders,
  Readonly<Record<Channel, ChannelProvider>>
>() {}
