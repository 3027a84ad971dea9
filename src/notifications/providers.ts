/**
 * The channel providers behind `NotificationProviders`: SMTP (nodemailer, pooled), a
 * Twilio-Messages-shaped SMS API, an FCM-HTTP-v1-shaped push API, and the log provider used for a
 * channel that is not configured. Every call has one deadline (`sendTimeoutSeconds`) and every
 * failure becomes a `DeliveryError` whose `permanent` flag tells the sender whether a retry can help.
 * Reasons are short, one line, and scrubbed of the credentials the provider was given.
 */
import { Clock, Duration, Effect, Layer, Option, Redacted, Schema, type Scope } from "effect"
import nodemailer from "nodemailer"
import { AppConfig, type NodeEnv, type NotificationSettings } from "../config.js"
import {
  type Channel,
  type ChannelProvider,
  DeliveryError,
  NotificationProviders,
  type OutgoingMessage,
  type ProviderReceipt
} from "./channels.js"

/** Provider answers are small; a larger body is cut here rather than buffered whole. */
export const MAX_RESPONSE_BYTES = 16 * 1024
const MAX_REASON_CHARS = 300
/** Connections of the SMTP pool (nodemailer). */
export const DEFAULT_SMTP_CONNECTIONS = 5

// --- Shared helpers --------------------------------------------------------------------------------

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

const oneLine = (text: string): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > MAX_REASON_CHARS ? `${flat.slice(0, MAX_REASON_CHARS - 1)}…` : flat
}

/** Removes every credential from a text headed for a reason or a log line (belt and braces). */
const scrub = (text: string, secrets: ReadonlyArray<string>): string =>
  secrets.reduce((acc, secret) => (secret.length >= 4 ? acc.split(secret).join("[redacted]") : acc), text)

const failure = (
  secrets: ReadonlyArray<string>,
  fields: {
    permanent: boolean
    reason: string
    code?: number | undefined
    retryAfterSeconds?: number | undefined
  }
): DeliveryError => new DeliveryError({ ...fields, reason: oneLine(scrub(fields.reason, secrets)) })

/**
 * The deadline over the whole call (queueing for a pooled connection, connecting, sending, reading
 * the answer). Timing out interrupts the call, which aborts its `AbortSignal`.
 */
const withDeadline =
  (label: string, timeoutSeconds: number) =>
  <A>(self: Effect.Effect<A, DeliveryError>): Effect.Effect<A, DeliveryError> =>
    Effect.timeoutFail(self, {
      duration: Duration.seconds(timeoutSeconds),
      onTimeout: () =>
        new DeliveryError({
          permanent: false,
          reason: `${label}: no answer within ${timeoutSeconds} s (time-out)`
        })
    })

/** `scheme://host[:port]/path` of a URL, without user info, query or fragment (safe to log). */
const describeUrl = (raw: string): string => {
  try {
    const url = new URL(raw)
    const path = url.pathname === "/" ? "" : url.pathname
    return `${url.protocol}//${url.host}${path}`
  } catch {
    return "(not a valid URL)"
  }
}

const httpBaseUrl = (name: string, raw: string): Effect.Effect<string> =>
  Effect.suspend(() => {
    const trimmed = raw.trim().replace(/\/+$/, "")
    try {
      const url = new URL(trimmed)
      if (url.protocol === "http:" || url.protocol === "https:") return Effect.succeed(trimmed)
    } catch {}
    // A configuration mistake: stop at start-up rather than fail every message transiently.
    return Effect.dieMessage(`${name} must be an http:// or https:// URL`)
  })

// --- SMTP ------------------------------------------------------------------------------------------

export interface SmtpProviderOptions {
  /** `smtp://user:pass@host:port` or `smtps://…`; nodemailer takes auth and TLS from it. */
  readonly url: Redacted.Redacted<string>
  /** The From of every mail. */
  readonly from: string
  readonly timeoutSeconds: number
  /** Pooled connections kept open at most (default 5). */
  readonly maxConnections?: number | undefined
}

/** One bare address: anything else (a list, a display name, a line break) could add recipients. */
const SINGLE_ADDRESS = /^[^\s@,;<>"()]+@[^\s@,;<>"()]+$/

/** The server's text of an SMTP reply, without the reply code at the start of each line. */
const smtpServerText = (response: string): string =>
  response
    .split(/\r?\n/)
    .map((line) => line.replace(/^\d{3}[ -]/, ""))
    .join(" ")

const smtpFailure = (error: unknown, secrets: ReadonlyArray<string>): DeliveryError => {
  const e = isRecord(error) ? error : {}
  const responseCode = typeof e.responseCode === "number" ? e.responseCode : undefined
  const response = typeof e.response === "string" ? e.response : undefined
  const code = typeof e.code === "string" ? e.code : undefined
  const originalCode = typeof e.originalCode === "string" ? e.originalCode : undefined
  const message = error instanceof Error ? error.message : String(error)
  if (responseCode !== undefined && responseCode >= 400 && responseCode < 600) {
    // RFC 5321: 4yz is transient, 5yz permanent, except 503 (bad sequence of commands), which is
    // about the session's state, not the message, so a new connection can succeed.
    const permanent = responseCode >= 500 && responseCode !== 503
    const text = smtpServerText(response ?? message)
    return failure(secrets, { permanent, code: responseCode, reason: `SMTP ${responseCode}: ${text}` })
  }
  // No reply from the server: a configuration problem (credentials missing, a malformed envelope)
  // cannot go away by itself; anything else (refused, reset, time-out, DNS) may.
  const permanent = code === "ENOAUTH" || code === "EAUTH" || code === "EENVELOPE" || code === "ECONFIG"
  const detail = originalCode ?? code
  return failure(secrets, {
    permanent,
    reason: `SMTP ${permanent ? "error" : "connection failed"}${detail ? ` (${detail})` : ""}: ${message}`
  })
}

/**
 * Email over SMTP with a nodemailer pool: a few long-lived connections shared by all sends, so a
 * burst of thousands of mails does not open a connection per mail. The transport is closed with
 * the scope.
 *
 * Time-outs: the deadline that counts is ours, over the whole call including the wait for a free
 * pooled connection. On time-out the call's `AbortSignal` fires; nodemailer (≥ 10) then drops the
 * mail from its queue, or closes the one connection that was delivering it, leaving the others
 * alone. nodemailer's own connection/greeting/socket time-outs are a second longer, as a backstop
 * (and so idle pooled sockets are eventually dropped), and never decide a send's outcome first.
 * Closing the pool (non-forced) at scope end is enough: by then the sends have finished or were
 * interrupted, which aborted them.
 */
export const smtpProvider = (
  options: SmtpProviderOptions
): Effect.Effect<ChannelProvider, never, Scope.Scope> =>
  Effect.gen(function* () {
    const url = Redacted.value(options.url).trim()
    const parsed = yield* Effect.try(() => new URL(url)).pipe(Effect.option)
    if (Option.isNone(parsed) || (parsed.value.protocol !== "smtp:" && parsed.value.protocol !== "smtps:")) {
      // The message must not echo the URL: it may hold the password.
      return yield* Effect.dieMessage("SMTP_URL must be an smtp:// or smtps:// URL")
    }
    const secrets = [parsed.value.password, safeDecode(parsed.value.password)].filter((s) => s !== "")
    const backstopMs = (options.timeoutSeconds + 1) * 1000
    const transporter = yield* Effect.acquireRelease(
      Effect.sync(() =>
        nodemailer.createTransport(
          {
            url,
            pool: true,
            maxConnections: options.maxConnections ?? DEFAULT_SMTP_CONNECTIONS,
            connectionTimeout: backstopMs,
            greetingTimeout: backstopMs,
            socketTimeout: backstopMs
          },
          { from: options.from }
        )
      ),
      (t) => Effect.sync(() => t.close())
    )
    const send = (message: OutgoingMessage): Effect.Effect<ProviderReceipt, DeliveryError> => {
      if (!SINGLE_ADDRESS.test(message.to)) {
        return Effect.fail(
          new DeliveryError({ permanent: true, reason: "SMTP: the recipient is not a single email address" })
        )
      }
      return Effect.tryPromise({
        try: (signal) =>
          transporter.sendMail({
            to: message.to,
            ...(message.subject === undefined ? {} : { subject: message.subject }),
            text: message.body,
            // Deterministic per notification: a retry after a lost reply carries the same
            // Message-ID, which lets receivers (and bounce handling) correlate or de-duplicate.
            messageId: `<${message.notificationId}@commerce-platform>`,
            headers: { "X-Notification-Id": message.notificationId },
            signal
          }),
        catch: (error) => smtpFailure(error, secrets)
      }).pipe(
        Effect.map((info): ProviderReceipt => ({ provider: "smtp", providerMessageId: info.messageId })),
        withDeadline("SMTP", options.timeoutSeconds)
      )
    }
    return { name: "smtp", send }
  })

const safeDecode = (text: string): string => {
  try {
    return decodeURIComponent(text)
  } catch {
    return text
  }
}

// --- HTTP providers (Twilio, FCM) ------------------------------------------------------------------

interface HttpReply {
  readonly status: number
  readonly headers: Headers
  readonly body: string
  /** When it arrived, by Effect's Clock (an HTTP-date Retry-After is relative to it). */
  readonly receivedAtMs: number
}

/** Reads at most `limit` bytes of a response body, then stops the download. */
const readCapped = async (response: Response, limit: number): Promise<string> => {
  if (response.body === null) return ""
  const reader = response.body.getReader()
  const chunks: Array<Uint8Array> = []
  let size = 0
  let done = false
  try {
    while (!done && size < limit) {
      const next = await reader.read()
      done = next.done
      if (next.value instanceof Uint8Array) {
        chunks.push(next.value)
        size += next.value.byteLength
      }
    }
  } finally {
    if (!done) await reader.cancel().catch(() => undefined)
  }
  return Buffer.concat(chunks).subarray(0, limit).toString("utf8")
}

/** One POST, answer body included, on the caller's signal (interrupting the effect aborts it). */
const post = (
  label: string,
  url: string,
  headers: Record<string, string>,
  body: string,
  secrets: ReadonlyArray<string>
): Effect.Effect<HttpReply, DeliveryError> =>
  Effect.tryPromise({
    try: async (signal) => {
      // Redirects are not followed: a provider API does not redirect, and a POST with credentials
      // should not be replayed to wherever a Location points.
      const response = await fetch(url, { method: "POST", headers, body, signal, redirect: "manual" })
      return {
        status: response.status,
        headers: response.headers,
        body: await readCapped(response, MAX_RESPONSE_BYTES)
      }
    },
    catch: (error) =>
      failure(secrets, { permanent: false, reason: `${label}: network error (${networkDetail(error)})` })
  }).pipe(
    Effect.flatMap((reply) =>
      Effect.map(Clock.currentTimeMillis, (receivedAtMs) => ({ ...reply, receivedAtMs }))
    )
  )

/** undici reports `fetch failed` and keeps the socket error (ECONNREFUSED, …) as the cause. */
const networkDetail = (error: unknown): string => {
  const cause = isRecord(error) ? error.cause : undefined
  if (isRecord(cause)) {
    if (typeof cause.code === "string") return cause.code
    if (typeof cause.message === "string") return cause.message
  }
  return error instanceof Error ? error.message : String(error)
}

/** `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3). */
export const parseRetryAfter = (value: string | null, nowMs: number): number | undefined => {
  if (value === null) return undefined
  const trimmed = value.trim()
  if (/^\d+$/.test(trimmed)) return Number(trimmed)
  const at = Date.parse(trimmed)
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - nowMs) / 1000))
}

/**
 * A non-2xx answer: 408, 429 and 5xx are transient (with `Retry-After` when given), a redirect or
 * any other 4xx permanent. `detail` is the provider's own explanation, from its error body.
 */
const httpFailure = (
  label: string,
  reply: HttpReply,
  detail: string,
  secrets: ReadonlyArray<string>
): DeliveryError => {
  const { status } = reply
  const transient = status === 408 || status === 429 || status >= 500
  if (transient) {
    return failure(secrets, {
      permanent: false,
      code: status,
      reason: `${label} ${status}${detail}`,
      retryAfterSeconds: parseRetryAfter(reply.headers.get("retry-after"), reply.receivedAtMs)
    })
  }
  if (status >= 300 && status < 400) {
    return failure(secrets, {
      permanent: true,
      code: status,
      reason: `${label} ${status}: unexpected redirect`
    })
  }
  return failure(secrets, { permanent: true, code: status, reason: `${label} ${status}${detail}` })
}

/** The first bytes of a body that is not the expected JSON, for a reason. */
const bodySnippet = (reply: HttpReply): string => {
  const text = oneLine(reply.body).slice(0, 120)
  return text === "" ? "" : `: ${text}`
}

const decodeJson = <A, I>(schema: Schema.Schema<A, I>) => Schema.decodeUnknownOption(Schema.parseJson(schema))

// --- Twilio (SMS) ----------------------------------------------------------------------------------

export interface TwilioSmsOptions {
  /** `https://api.twilio.com` or a look-alike. */
  readonly baseUrl: string
  readonly accountSid: string
  readonly authToken: Redacted.Redacted<string> | undefined
  /** E.164 sender, or a Messaging Service SID (`MG…`). */
  readonly from: string
  readonly timeoutSeconds: number
}

const TwilioMessage = Schema.Struct({ sid: Schema.String, status: Schema.optional(Schema.String) })
const TwilioError = Schema.Struct({
  code: Schema.optional(Schema.NullOr(Schema.Number)),
  message: Schema.String,
  more_info: Schema.optional(Schema.NullOr(Schema.String)),
  status: Schema.optional(Schema.Number)
})
const decodeTwilioMessage = decodeJson(TwilioMessage)
const decodeTwilioError = decodeJson(TwilioError)

const twilioDetail = (reply: HttpReply): string =>
  Option.match(decodeTwilioError(reply.body), {
    onNone: () => bodySnippet(reply),
    onSome: (e) => `${typeof e.code === "number" ? ` (${e.code})` : ""}: ${e.message}`
  })

/** SMS through `POST {base}/2010-04-01/Accounts/{sid}/Messages.json` (form body, Basic auth). */
export const twilioSmsProvider = (options: TwilioSmsOptions): Effect.Effect<ChannelProvider> =>
  Effect.gen(function* () {
    const base = yield* httpBaseUrl("SMS_PROVIDER_URL", options.baseUrl)
    const url = `${base}/2010-04-01/Accounts/${encodeURIComponent(options.accountSid)}/Messages.json`
    const token = options.authToken === undefined ? undefined : Redacted.value(options.authToken)
    const basic =
      token === undefined ? undefined : Buffer.from(`${options.accountSid}:${token}`).toString("base64")
    const secrets = [token, basic].filter((s): s is string => s !== undefined && s !== "")
    const headers: Record<string, string> = {
      "content-type": "application/x-www-form-urlencoded",
      accept: "application/json",
      ...(basic === undefined ? {} : { authorization: `Basic ${basic}` })
    }
    const send = (message: OutgoingMessage): Effect.Effect<ProviderReceipt, DeliveryError> => {
      const form = new URLSearchParams({ To: message.to, Body: message.body })
      if (options.from.startsWith("MG")) form.set("MessagingServiceSid", options.from)
      else if (options.from !== "") form.set("From", options.from)
      return post("Twilio", url, headers, form.toString(), secrets).pipe(
        Effect.flatMap((reply) => {
          if (reply.status < 200 || reply.status >= 300) {
            return Effect.fail(httpFailure("Twilio", reply, twilioDetail(reply), secrets))
          }
          return Option.match(decodeTwilioMessage(reply.body), {
            onSome: (m): Effect.Effect<ProviderReceipt> =>
              Effect.succeed({ provider: "twilio", providerMessageId: m.sid }),
            // Accepted (2xx) but unreadable: failing would make a retry send the SMS twice.
            onNone: () =>
              Effect.logWarning("Twilio accepted the message without a readable sid").pipe(
                Effect.annotateLogs({ notificationId: message.notificationId, status: reply.status }),
                Effect.as<ProviderReceipt>({ provider: "twilio", providerMessageId: null })
              )
          })
        }),
        withDeadline("Twilio", options.timeoutSeconds)
      )
    }
    return { name: "twilio", send }
  })

// --- FCM (push) ------------------------------------------------------------------------------------

export interface FcmPushOptions {
  /** `https://fcm.googleapis.com` or a look-alike. */
  readonly baseUrl: string
  readonly projectId: string
  /** OAuth2 access token, sent as `Authorization: Bearer …`. */
  readonly accessToken: Redacted.Redacted<string> | undefined
  readonly timeoutSeconds: number
}

const FcmMessage = Schema.Struct({ name: Schema.String })
const FcmError = Schema.Struct({
  error: Schema.Struct({
    code: Schema.optional(Schema.Number),
    message: Schema.optional(Schema.String),
    status: Schema.optional(Schema.String),
    details: Schema.optional(Schema.Array(Schema.Struct({ errorCode: Schema.optional(Schema.String) })))
  })
})
const decodeFcmMessage = decodeJson(FcmMessage)
const decodeFcmError = decodeJson(FcmError)

/** FCM's own error code (`UNREGISTERED`, …) is in `details`; the gRPC status is the fallback. */
const fcmDetail = (reply: HttpReply): string =>
  Option.match(decodeFcmError(reply.body), {
    onNone: () => bodySnippet(reply),
    onSome: ({ error }) => {
      const fcmCode = error.details?.find((d) => d.errorCode !== undefined)?.errorCode ?? error.status
      return `${fcmCode === undefined ? "" : ` ${fcmCode}`}${error.message === undefined ? "" : `: ${error.message}`}`
    }
  })

/** Push through `POST {base}/v1/projects/{id}/messages:send` (JSON, Bearer token). */
export const fcmPushProvider = (options: FcmPushOptions): Effect.Effect<ChannelProvider> =>
  Effect.gen(function* () {
    const base = yield* httpBaseUrl("PUSH_PROVIDER_URL", options.baseUrl)
    const url = `${base}/v1/projects/${encodeURIComponent(options.projectId)}/messages:send`
    const token = options.accessToken === undefined ? undefined : Redacted.value(options.accessToken)
    const secrets = token === undefined || token === "" ? [] : [token]
    const headers: Record<string, string> = {
      "content-type": "application/json; charset=utf-8",
      accept: "application/json",
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` })
    }
    const send = (message: OutgoingMessage): Effect.Effect<ProviderReceipt, DeliveryError> => {
      const title = message.title ?? message.subject
      const body = JSON.stringify({
        message: {
          token: message.to,
          notification: { ...(title === undefined ? {} : { title }), body: message.body },
          // FCM accepts string values only; ours are strings already.
          data: { ...message.data, notificationId: message.notificationId }
        }
      })
      return post("FCM", url, headers, body, secrets).pipe(
        Effect.flatMap((reply) => {
          if (reply.status < 200 || reply.status >= 300) {
            return Effect.fail(httpFailure("FCM", reply, fcmDetail(reply), secrets))
          }
          return Option.match(decodeFcmMessage(reply.body), {
            onSome: (m): Effect.Effect<ProviderReceipt> =>
              Effect.succeed({ provider: "fcm", providerMessageId: m.name }),
            // Accepted (2xx) but unreadable: failing would make a retry push twice.
            onNone: () =>
              Effect.logWarning("FCM accepted the message without a readable name").pipe(
                Effect.annotateLogs({ notificationId: message.notificationId, status: reply.status }),
                Effect.as<ProviderReceipt>({ provider: "fcm", providerMessageId: null })
              )
          })
        }),
        withDeadline("FCM", options.timeoutSeconds)
      )
    }
    return { name: "fcm", send }
  })

// --- Log -------------------------------------------------------------------------------------------

/** Writes the rendered message to the log instead of sending it (a channel with no provider). */
export const logProvider = (channel: Channel): ChannelProvider => ({
  name: "log",
  send: (message) =>
    Effect.logInfo(`${channel} notification written to the log (no provider configured)`, {
      ...(message.subject === undefined ? {} : { subject: message.subject }),
      ...(message.title === undefined ? {} : { title: message.title }),
      body: message.body,
      ...(message.data === undefined ? {} : { data: message.data })
    }).pipe(
      Effect.annotateLogs({ notificationId: message.notificationId, channel, to: message.to }),
      Effect.as<ProviderReceipt>({ provider: "log", providerMessageId: null })
    )
})

// --- Selection -------------------------------------------------------------------------------------

/** One provider per channel from the settings: the configured one, else the log. */
export const makeNotificationProviders = (
  settings: NotificationSettings,
  nodeEnv: NodeEnv = "development"
): Effect.Effect<Readonly<Record<Channel, ChannelProvider>>, never, Scope.Scope> =>
  Effect.gen(function* () {
    const timeoutSeconds = settings.sendTimeoutSeconds
    const email = yield* Option.match(settings.smtpUrl, {
      onNone: () => Effect.succeed(logProvider("email")),
      onSome: (url) => smtpProvider({ url, from: settings.emailFrom, timeoutSeconds })
    })
    const sms = yield* Option.match(settings.smsProviderUrl, {
      onNone: () => Effect.succeed(logProvider("sms")),
      onSome: (baseUrl) =>
        twilioSmsProvider({
          baseUrl,
          accountSid: settings.smsAccountSid,
          authToken: Option.getOrUndefined(settings.smsAuthToken),
          from: settings.smsFrom,
          timeoutSeconds
        })
    })
    const push = yield* Option.match(settings.pushProviderUrl, {
      onNone: () => Effect.succeed(logProvider("push")),
      onSome: (baseUrl) =>
        fcmPushProvider({
          baseUrl,
          projectId: settings.pushProjectId,
          accessToken: Option.getOrUndefined(settings.pushAccessToken),
          timeoutSeconds
        })
    })
    yield* Effect.logInfo("notification providers").pipe(
      Effect.annotateLogs({
        email: Option.match(settings.smtpUrl, {
          onNone: () => "log",
          onSome: (url) => `smtp ${describeUrl(Redacted.value(url))}`
        }),
        sms: Option.match(settings.smsProviderUrl, {
          onNone: () => "log",
          onSome: (u) => `twilio ${describeUrl(u)}`
        }),
        push: Option.match(settings.pushProviderUrl, {
          onNone: () => "log",
          onSome: (u) => `fcm ${describeUrl(u)}`
        }),
        sendTimeoutSeconds: timeoutSeconds
      })
    )
    if (Option.isSome(settings.smsProviderUrl) && Option.isNone(settings.smsAuthToken)) {
      yield* Effect.logWarning(
        "SMS_PROVIDER_URL is set without SMS_AUTH_TOKEN: requests go out unauthenticated"
      )
    }
    if (Option.isSome(settings.pushProviderUrl) && Option.isNone(settings.pushAccessToken)) {
      yield* Effect.logWarning(
        "PUSH_PROVIDER_URL is set without PUSH_ACCESS_TOKEN: requests go out unauthenticated"
      )
    }
    const logged = [email, sms, push].filter((p) => p.name === "log")
    if (nodeEnv === "production" && logged.length > 0) {
      // Password-reset links would end up in the logs.
      yield* Effect.logWarning("some notification channels have no provider: their messages are only logged")
    }
    return { email, sms, push }
  })

export const NotificationProvidersLive: Layer.Layer<NotificationProviders, never, AppConfig> = Layer.scoped(
  NotificationProviders,
  Effect.flatMap(AppConfig, (config) => makeNotificationProviders(config.notifications, config.nodeEnv))
)
