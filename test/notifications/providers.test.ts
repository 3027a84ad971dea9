/**
 * The channel providers against real local peers (an in-process SMTP server, HTTP fakes of Twilio
 * and FCM) over real sockets: what reaches the peer, and how each failure is classified
 * (transient/permanent, code, Retry-After), within the deadline, without leaking credentials.
 */
import { createServer, type Server, type Socket } from "node:net"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, HashMap, Layer, Logger, Option, Redacted } from "effect"
import { AppConfig, makeAppConfig, type NotificationSettings } from "../../src/config.js"
import {
  DeliveryError,
  NotificationProviders,
  type OutgoingMessage
} from "../../src/notifications/channels.js"
import {
  fcmPushProvider,
  NotificationProvidersLive,
  parseRetryAfter,
  smtpProvider,
  twilioSmsProvider
} from "../../src/notifications/providers.js"
import {
  type FakeProvider,
  FCM_TEST_PROJECT,
  FCM_TEST_TOKEN,
  fcmError,
  startFcmFake,
  startTwilioFake,
  TWILIO_TEST_SID,
  TWILIO_TEST_TOKEN,
  twilioError,
  unusedPort
} from "../support/providers.js"
import { decodeEncodedWords, parseMessage, type SmtpSink, startSmtpSink } from "../support/smtp.js"

// --- Peers and helpers -----------------------------------------------------------------------------

const SMTP_USER = "mailer"
const SMTP_PASS = "smtp-Secret-Pass-42"
const FROM = "Shop <no-reply@shop.example>"

let sink: SmtpSink
let authSink: SmtpSink
let twilio: FakeProvider
let fcm: FakeProvider

beforeAll(async () => {
  ;[sink, authSink, twilio, fcm] = await Promise.all([
    startSmtpSink(),
    startSmtpSink({ auth: { user: SMTP_USER, pass: SMTP_PASS } }),
    startTwilioFake(),
    startFcmFake()
  ])
})

afterAll(async () => {
  await Promise.all([sink.close(), authSink.close(), twilio.close(), fcm.close()])
})

beforeEach(() => {
  sink.reset()
  authSink.reset()
  twilio.reset()
  fcm.reset()
})

let counter = 0
const message = (overrides: Partial<OutgoingMessage> = {}): OutgoingMessage => ({
  notificationId: `ntf_test${String(++counter).padStart(4, "0")}`,
  channel: "email",
  to: "ana@example.com",
  subject: "Your order is confirmed",
  body: "Thank you for your order.",
  ...overrides
})

const smtpAt = (url: string, timeoutSeconds = 2) =>
  smtpProvider({ url: Redacted.make(url), from: FROM, timeoutSeconds })

const twilioWith = (
  overrides: { token?: string; from?: string; baseUrl?: string; timeoutSeconds?: number } = {}
) =>
  twilioSmsProvider({
    baseUrl: overrides.baseUrl ?? twilio.url,
    accountSid: TWILIO_TEST_SID,
    authToken: Redacted.make(overrides.token ?? TWILIO_TEST_TOKEN),
    from: overrides.from ?? "+15005550006",
    timeoutSeconds: overrides.timeoutSeconds ?? 2
  })

const fcmWith = (overrides: { token?: string; timeoutSeconds?: number } = {}) =>
  fcmPushProvider({
    baseUrl: fcm.url,
    projectId: FCM_TEST_PROJECT,
    accessToken: Redacted.make(overrides.token ?? FCM_TEST_TOKEN),
    timeoutSeconds: overrides.timeoutSeconds ?? 2
  })

const sms = (overrides: Partial<OutgoingMessage> = {}) =>
  message({
    channel: "sms",
    to: "+14155550123",
    subject: undefined,
    body: "Your order #42 has shipped.",
    ...overrides
  })

const push = (overrides: Partial<OutgoingMessage> = {}) =>
  message({
    channel: "push",
    to: "fcm-device-token-abc123",
    subject: undefined,
    title: "Order shipped",
    body: "Order #42 is on its way.",
    data: { orderId: "ord_42", kind: "order.shipped" },
    ...overrides
  })

/** Milliseconds an effect took, with its result. */
const timed = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const started = Date.now()
    const result = yield* self
    return { result, ms: Date.now() - started }
  })

/** A TCP server that accepts connections and never says a word (a hung SMTP peer). */
const startSilentServer = async (): Promise<{ port: number; close: () => Promise<void> }> => {
  const sockets = new Set<Socket>()
  const server: Server = createServer((socket) => {
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const address = server.address()
  const port = address !== null && typeof address !== "string" ? address.port : 0
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      })
  }
}

const expectNoSecrets = (text: string) => {
  for (const secret of [
    SMTP_PASS,
    TWILIO_TEST_TOKEN,
    FCM_TEST_TOKEN,
    "wrong-token-xyz-987",
    "wrong-Pass-123"
  ]) {
    expect(text).not.toContain(secret)
  }
  expect(text).not.toContain(Buffer.from(`${TWILIO_TEST_SID}:${TWILIO_TEST_TOKEN}`).toString("base64"))
}

// --- SMTP ------------------------------------------------------------------------------------------

describe("smtpProvider", () => {
  it.scopedLive("delivers to the sink: envelope, subject, body, X-Notification-Id and Message-ID", () =>
    Effect.gen(function* () {
      const provider = yield* smtpAt(sink.url)
      expect(provider.name).toBe("smtp")
      const msg = message({
        subject: "Commande confirmée ✓ — ご注文ありがとうございます",
        body: `Bonjour Zoë,\nvotre commande n° 42 est confirmée. À bientôt 😀\n${"é".repeat(100)}`
      })
      const receipt = yield* provider.send(msg)
      expect(receipt).toEqual({
        provider: "smtp",
        providerMessageId: `<${msg.notificationId}@commerce-platform>`
      })

      const [mail] = yield* Effect.promise(() => sink.waitFor(1))
      expect(mail?.from).toBe("no-reply@shop.example")
      expect(mail?.to).toEqual(["ana@example.com"])
      expect(mail?.subject).toBe(msg.subject)
      expect(mail?.text).toBe(msg.body)
      expect(mail?.headers["x-notification-id"]).toBe(msg.notificationId)
      expect(mail?.headers["message-id"]).toBe(`<${msg.notificationId}@commerce-platform>`)
      expect(mail?.headers.from).toBe("Shop <no-reply@shop.example>")
      expect(mail?.headers.to).toBe("ana@example.com")
    })
  )

  it.scopedLive("sends many mails over a few pooled connections", () =>
    Effect.gen(function* () {
      const provider = yield* smtpAt(sink.url)
      const ids = Array.from({ length: 30 }, () => message())
      yield* Effect.forEach(ids, (m) => provider.send(m), { concurrency: 10 })
      const mails = yield* Effect.promise(() => sink.waitFor(30))
      expect(new Set(mails.map((m) => m.headers["x-notification-id"]))).toEqual(
        new Set(ids.map((m) => m.notificationId))
      )
    })
  )

  it.scopedLive("authenticates with the user and password of the URL", () =>
    Effect.gen(function* () {
      const provider = yield* smtpAt(`smtp://${SMTP_USER}:${SMTP_PASS}@127.0.0.1:${authSink.port}`)
      yield* provider.send(message())
      expect(yield* Effect.promise(() => authSink.waitFor(1))).toHaveLength(1)
    })
  )

  it.scopedLive("a wrong SMTP password → permanent 535, password not in the reason", () =>
    Effect.gen(function* () {
      const provider = yield* smtpAt(`smtp://${SMTP_USER}:wrong-Pass-123@127.0.0.1:${authSink.port}`)
      const error = yield* Effect.flip(provider.send(message()))
      expect(error).toBeInstanceOf(DeliveryError)
      expect(error.permanent).toBe(true)
      expect(error.code).toBe(535)
      expectNoSecrets(error.reason)
      expect(authSink.messages).toHaveLength(0)
    })
  )

  it.scopedLive("451 at RCPT → transient with code 451", () =>
    Effect.gen(function* () {
      const provider = yield* smtpAt(sink.url)
      sink.rejectNext(451, "4.7.1 Greylisted, please try again later")
      const error = yield* Effect.flip(provider.send(message()))
      expect(error.permanent).toBe(false)
      expect(error.code).toBe(451)
      expect(error.reason).toBe("SMTP 451: 4.7.1 Greylisted, please try again later")
      // The next attempt on the same pool goes through.
      yield* provider.send(message())
      expect(yield* Effect.promise(() => sink.waitFor(1))).toHaveLength(1)
    })
  )

  it.scopedLive("550 at RCPT → permanent with code 550 and the server's text", () =>
    Effect.gen(function* () {
      const provider = yield* smtpAt(sink.url)
      sink.rejectNext(550, "5.1.1 <ana@example.com>: Recipient address rejected: User unknown")
      const error = yield* Effect.flip(provider.send(message()))
      expect(error.permanent).toBe(true)
      expect(error.code).toBe(550)
      expect(error.reason).toBe("SMTP 550: 5.1.1 <ana@example.com>: Recipient address rejected: User unknown")
    })
  )

  it.scopedLive("550 after DATA → permanent; 451 after DATA → transient", () =>
    Effect.gen(function* () {
      const provider = yield* smtpAt(sink.url)
      sink.rejectNext(550, "5.7.1 Message rejected as spam", 1, "data")
      const hard = yield* Effect.flip(provider.send(message()))
      expect(hard).toMatchObject({ permanent: true, code: 550 })
      expect(hard.reason).toContain("Message rejected as spam")

      sink.reject({ code: 451, message: "4.3.0 Mail server temporarily rejected message", at: "data" })
      const soft = yield* Effect.flip(provider.send(message()))
      expect(soft).toMatchObject({ permanent: false, code: 451 })
      expect(sink.messages).toHaveLength(0)
    })
  )

  it.scopedLive("connection refused → transient, no code", () =>
    Effect.gen(function* () {
      const port = yield* Effect.promise(() => unusedPort())
      const provider = yield* smtpAt(`smtp://${SMTP_USER}:${SMTP_PASS}@127.0.0.1:${port}`)
      const { result: error, ms } = yield* timed(Effect.flip(provider.send(message())))
      expect(error.permanent).toBe(false)
      expect(error.code).toBeUndefined()
      expect(error.reason).toContain("ECONNREFUSED")
      expectNoSecrets(error.reason)
      expect(ms).toBeLessThan(1500)
    })
  )

  it.scopedLive("a peer that never greets → transient time-out within the deadline", () =>
    Effect.gen(function* () {
      const silent = yield* Effect.acquireRelease(
        Effect.promise(() => startSilentServer()),
        (s) => Effect.promise(() => s.close())
      )
      const provider = yield* smtpAt(`smtp://127.0.0.1:${silent.port}`, 1)
      const { result: error, ms } = yield* timed(Effect.flip(provider.send(message())))
      expect(error.permanent).toBe(false)
      expect(error.reason).toBe("SMTP: no answer within 1 s (time-out)")
      expect(ms).toBeGreaterThanOrEqual(950)
      expect(ms).toBeLessThan(1800)
    })
  )

  it.scopedLive("an SMTP_URL that is not smtp:// or smtps:// stops start-up without echoing it", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(smtpAt(`http://${SMTP_USER}:${SMTP_PASS}@127.0.0.1:25`))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      if (Exit.isFailure(exit)) {
        expect(Cause.pretty(exit.cause)).toContain("SMTP_URL must be an smtp:// or smtps:// URL")
        expectNoSecrets(Cause.pretty(exit.cause))
      }
    })
  )

  it.scopedLive("a recipient that is not one bare address → permanent, nothing sent", () =>
    Effect.gen(function* () {
      const provider = yield* smtpAt(sink.url)
      const error = yield* Effect.flip(provider.send(message({ to: "ana@example.com, eve@example.com" })))
      expect(error.permanent).toBe(true)
      expect(sink.messages).toHaveLength(0)
    })
  )
})

// --- Twilio ----------------------------------------------------------------------------------------

describe("twilioSmsProvider", () => {
  it.live("POSTs the Messages form with Basic auth and returns the sid", () =>
    Effect.gen(function* () {
      const provider = yield* twilioWith()
      expect(provider.name).toBe("twilio")
      const msg = sms({ body: "Votre commande n° 42 est expédiée 🚚" })
      const receipt = yield* provider.send(msg)
      expect(receipt.provider).toBe("twilio")
      expect(receipt.providerMessageId).toMatch(/^SM[0-9a-f]{32}$/)

      const [request] = twilio.requests
      expect(request?.method).toBe("POST")
      expect(request?.path).toBe(`/2010-04-01/Accounts/${TWILIO_TEST_SID}/Messages.json`)
      expect(request?.headers["content-type"]).toBe("application/x-www-form-urlencoded")
      expect(request?.headers.authorization).toBe(
        `Basic ${Buffer.from(`${TWILIO_TEST_SID}:${TWILIO_TEST_TOKEN}`).toString("base64")}`
      )
      expect(request?.body).toEqual({ To: "+14155550123", From: "+15005550006", Body: msg.body })
    })
  )

  it.live("a messaging service sender (MG…) goes as MessagingServiceSid", () =>
    Effect.gen(function* () {
      const provider = yield* twilioWith({ from: "MG00000000000000000000000000000001" })
      yield* provider.send(sms())
      expect(twilio.requests[0]?.body).toEqual({
        To: "+14155550123",
        MessagingServiceSid: "MG00000000000000000000000000000001",
        Body: "Your order #42 has shipped."
      })
    })
  )

  it.live("500 → transient with code 500", () =>
    Effect.gen(function* () {
      const provider = yield* twilioWith()
      twilio.answerNext({ status: 500, body: twilioError(500, 20500, "Internal Server Error") })
      const error = yield* Effect.flip(provider.send(sms()))
      expect(error).toMatchObject({ permanent: false, code: 500 })
      expect(error.reason).toBe("Twilio 500 (20500): Internal Server Error")
    })
  )

  it.live("400 → permanent with Twilio's code and message", () =>
    Effect.gen(function* () {
      const provider = yield* twilioWith()
      twilio.answerNext({
        status: 400,
        body: twilioError(400, 21211, "The 'To' number +1555 is not a valid phone number.")
      })
      const error = yield* Effect.flip(provider.send(sms({ to: "+1555" })))
      expect(error).toMatchObject({ permanent: true, code: 400 })
      expect(error.reason).toBe("Twilio 400 (21211): The 'To' number +1555 is not a valid phone number.")
    })
  )

  it.live("429 with Retry-After → transient with retryAfterSeconds", () =>
    Effect.gen(function* () {
      const provider = yield* twilioWith()
      twilio.answerNext({
        status: 429,
        headers: { "retry-after": "7" },
        body: twilioError(429, 20429, "Too Many Requests")
      })
      const error = yield* Effect.flip(provider.send(sms()))
      expect(error).toMatchObject({ permanent: false, code: 429, retryAfterSeconds: 7 })
    })
  )

  it.live("a wrong auth token → permanent 401, token not in the reason", () =>
    Effect.gen(function* () {
      const provider = yield* twilioWith({ token: "wrong-token-xyz-987" })
      const error = yield* Effect.flip(provider.send(sms()))
      expect(error).toMatchObject({ permanent: true, code: 401 })
      expect(error.reason).toBe("Twilio 401 (20003): Authenticate")
      expectNoSecrets(error.reason)
    })
  )

  it.live("a peer that hangs → transient time-out within the 1 s deadline", () =>
    Effect.gen(function* () {
      const provider = yield* twilioWith({ timeoutSeconds: 1 })
      twilio.hangNext()
      const { result: error, ms } = yield* timed(Effect.flip(provider.send(sms())))
      expect(error.permanent).toBe(false)
      expect(error.code).toBeUndefined()
      expect(error.reason).toBe("Twilio: no answer within 1 s (time-out)")
      expect(ms).toBeGreaterThanOrEqual(950)
      expect(ms).toBeLessThan(1800)
      expect(twilio.requests).toHaveLength(1)
    })
  )

  it.live("connection refused → transient network error", () =>
    Effect.gen(function* () {
      const port = yield* Effect.promise(() => unusedPort())
      const provider = yield* twilioWith({ baseUrl: `http://127.0.0.1:${port}` })
      const error = yield* Effect.flip(provider.send(sms()))
      expect(error.permanent).toBe(false)
      expect(error.reason).toBe("Twilio: network error (ECONNREFUSED)")
    })
  )
})

// --- FCM -------------------------------------------------------------------------------------------

describe("fcmPushProvider", () => {
  it.live("POSTs messages:send with the Bearer token and string data, returns the name", () =>
    Effect.gen(function* () {
      const provider = yield* fcmWith()
      expect(provider.name).toBe("fcm")
      const msg = push()
      const receipt = yield* provider.send(msg)
      expect(receipt).toEqual({
        provider: "fcm",
        providerMessageId: `projects/${FCM_TEST_PROJECT}/messages/1`
      })

      const [request] = yield* Effect.promise(() => fcm.waitFor(1))
      expect(request?.path).toBe(`/v1/projects/${FCM_TEST_PROJECT}/messages:send`)
      expect(request?.headers.authorization).toBe(`Bearer ${FCM_TEST_TOKEN}`)
      expect(request?.headers["content-type"]).toMatch(/^application\/json/)
      expect(request?.body).toEqual({
        message: {
          token: "fcm-device-token-abc123",
          notification: { title: "Order shipped", body: "Order #42 is on its way." },
          data: { orderId: "ord_42", kind: "order.shipped", notificationId: msg.notificationId }
        }
      })
    })
  )

  it.live("404 UNREGISTERED → permanent with FCM's error code", () =>
    Effect.gen(function* () {
      const provider = yield* fcmWith()
      fcm.answerNext({
        status: 404,
        body: fcmError(404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED")
      })
      const error = yield* Effect.flip(provider.send(push()))
      expect(error).toMatchObject({ permanent: true, code: 404 })
      expect(error.reason).toBe("FCM 404 UNREGISTERED: Requested entity was not found.")
    })
  )

  it.live("503 → transient (Retry-After as an HTTP date)", () =>
    Effect.gen(function* () {
      const provider = yield* fcmWith()
      fcm.answerNext({
        status: 503,
        headers: { "retry-after": new Date(Date.now() + 30_000).toUTCString() },
        body: fcmError(503, "UNAVAILABLE", "The service is currently unavailable.", "UNAVAILABLE")
      })
      const error = yield* Effect.flip(provider.send(push()))
      expect(error).toMatchObject({ permanent: false, code: 503 })
      expect(error.reason).toBe("FCM 503 UNAVAILABLE: The service is currently unavailable.")
      expect(error.retryAfterSeconds).toBeGreaterThanOrEqual(28)
      expect(error.retryAfterSeconds).toBeLessThanOrEqual(31)
    })
  )

  it.live("a wrong token → permanent 401 UNAUTHENTICATED, token not in the reason", () =>
    Effect.gen(function* () {
      const provider = yield* fcmWith({ token: "wrong-token-xyz-987" })
      const error = yield* Effect.flip(provider.send(push()))
      expect(error).toMatchObject({ permanent: true, code: 401 })
      expect(error.reason).toMatch(/^FCM 401 UNAUTHENTICATED: /)
      expectNoSecrets(error.reason)
    })
  )

  it.live("a huge error body is read only up to the cap and the reason stays short", () =>
    Effect.gen(function* () {
      const provider = yield* fcmWith()
      fcm.answerNext({ status: 502, body: `<html>${"x".repeat(1_000_000)}</html>` })
      const error = yield* Effect.flip(provider.send(push()))
      expect(error).toMatchObject({ permanent: false, code: 502 })
      expect(error.reason.length).toBeLessThanOrEqual(300)
    })
  )

  it.live("a peer that hangs → transient time-out within the 1 s deadline", () =>
    Effect.gen(function* () {
      const provider = yield* fcmWith({ timeoutSeconds: 1 })
      fcm.hangNext()
      const { result: error, ms } = yield* timed(Effect.flip(provider.send(push())))
      expect(error).toMatchObject({ permanent: false, reason: "FCM: no answer within 1 s (time-out)" })
      expect(ms).toBeLessThan(1800)
    })
  )
})

describe("the SMTP sink's message reader", () => {
  it("decodes encoded words (also a character split across words) and quoted-printable bodies", () => {
    expect(decodeEncodedWords("=?UTF-8?Q?Caf=C3?= =?UTF-8?Q?=A9_cr=C3=A8me?= ok")).toBe("Café crème ok")
    expect(decodeEncodedWords("=?iso-8859-1?B?6Q==?=")).toBe("é")
    const parsed = parseMessage(
      "Subject: =?utf-8?B?w6k=?=\r\nX-Long: a\r\n b\r\nContent-Type: text/plain; charset=utf-8\r\n" +
        "Content-Transfer-Encoding: quoted-printable\r\n\r\nd=C3=A9j=C3=A0 vu, soft=\r\n break\r\n"
    )
    expect(parsed).toEqual({
      subject: "é",
      text: "déjà vu, soft break",
      headers: {
        subject: "=?utf-8?B?w6k=?=",
        "x-long": "a b",
        "content-type": "text/plain; charset=utf-8",
        "content-transfer-encoding": "quoted-printable"
      }
    })
  })
})

describe("parseRetryAfter", () => {
  it("reads delay-seconds and HTTP dates, ignores junk", () => {
    const now = Date.parse("2030-01-01T00:00:00Z")
    expect(parseRetryAfter("120", now)).toBe(120)
    expect(parseRetryAfter("Tue, 01 Jan 2030 00:01:00 GMT", now)).toBe(60)
    expect(parseRetryAfter("Mon, 31 Dec 2029 00:00:00 GMT", now)).toBe(0)
    expect(parseRetryAfter("soon", now)).toBeUndefined()
    expect(parseRetryAfter(null, now)).toBeUndefined()
  })
})

// --- Selection -------------------------------------------------------------------------------------

/** Runs `use` with the live providers for `settings`, capturing every log line as text. */
const withProviders = <A>(
  settings: Partial<NotificationSettings>,
  use: (providers: NotificationProviders["Type"]) => Effect.Effect<A, DeliveryError>
) =>
  Effect.gen(function* () {
    const lines: Array<string> = []
    const capture = Logger.make(({ message, annotations }) => {
      lines.push(JSON.stringify({ message, annotations: Object.fromEntries(HashMap.toEntries(annotations)) }))
    })
    const base = makeAppConfig()
    const config = Layer.succeed(
      AppConfig,
      makeAppConfig({ notifications: { ...base.notifications, ...settings } })
    )
    const result = yield* Effect.flatMap(NotificationProviders, use).pipe(
      Effect.provide(NotificationProvidersLive.pipe(Layer.provide(config))),
      Effect.provide(Logger.replace(Logger.defaultLogger, capture))
    )
    return { result, logs: lines.join("\n") }
  })

describe("NotificationProvidersLive", () => {
  it.live("uses the log provider for every channel when nothing is configured", () =>
    Effect.gen(function* () {
      const { result, logs } = yield* withProviders({}, (providers) =>
        Effect.gen(function* () {
          expect([providers.email.name, providers.sms.name, providers.push.name]).toEqual([
            "log",
            "log",
            "log"
          ])
          return yield* providers.email.send(message({ notificationId: "ntf_logged1" }))
        })
      )
      expect(result).toEqual({ provider: "log", providerMessageId: null })
      expect(logs).toContain('"email":"log"')
      expect(logs).toContain("ntf_logged1")
      expect(logs).toContain("Thank you for your order.")
      expect(logs).toContain('"to":"ana@example.com"')
      expect(logs).toContain('"channel":"email"')
    })
  )

  it.live("uses SMTP, Twilio and FCM when their URLs are set, and logs no secret", () =>
    Effect.gen(function* () {
      const { logs } = yield* withProviders(
        {
          smtpUrl: Option.some(Redacted.make(`smtp://${SMTP_USER}:${SMTP_PASS}@127.0.0.1:${authSink.port}`)),
          emailFrom: FROM,
          smsProviderUrl: Option.some(`${twilio.url}/`),
          smsAccountSid: TWILIO_TEST_SID,
          smsAuthToken: Option.some(Redacted.make(TWILIO_TEST_TOKEN)),
          smsFrom: "+15005550006",
          pushProviderUrl: Option.some(fcm.url),
          pushProjectId: FCM_TEST_PROJECT,
          pushAccessToken: Option.some(Redacted.make(FCM_TEST_TOKEN)),
          sendTimeoutSeconds: 2
        },
        (providers) =>
          Effect.gen(function* () {
            expect([providers.email.name, providers.sms.name, providers.push.name]).toEqual([
              "smtp",
              "twilio",
              "fcm"
            ])
            yield* providers.email.send(message())
            yield* providers.sms.send(sms())
            yield* providers.push.send(push())
          })
      )
      expect(authSink.messages).toHaveLength(1)
      expect(twilio.requests).toHaveLength(1)
      expect(fcm.requests).toHaveLength(1)
      expect(logs).toContain(`smtp smtp://127.0.0.1:${authSink.port}`)
      expectNoSecrets(logs)
      expect(logs).not.toContain(SMTP_USER)
    })
  )
})
