/**
 * Notification delivery (spec §2.7, §3.2; design/WEBHOOKS-NOTIFICATIONS.md "Notifications"): the
 * sender against real local peers — an SMTP sink, a Twilio-shaped SMS fake and an FCM-shaped push
 * fake — on a live server whose clock the tests move forward (`makeShiftedClock`), then the retry
 * schedule to the millisecond with `handleSend` and DueWork driven by hand under Effect's TestClock.
 */
import { randomBytes } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Clock, type Duration, Effect, Fiber, Option, TestClock } from "effect"
import { expect } from "vitest"
import { AppConfig, makeAppConfig } from "../../src/config.js"
import type { AuthenticatedActor } from "../../src/http/Auth.js"
import { Notifications } from "../../src/notifications/Notifications.js"
import { SEND_KIND } from "../../src/notifications/request.js"
import {
  handleSend,
  MAX_SEND_ATTEMPTS,
  RETRY_WINDOW_MS,
  retryDelayMs
} from "../../src/notifications/sender.js"
import { type DueItem, DueOutcome, DueWork, dueWorker } from "../../src/processors/DueWork.js"
import { withTestClock } from "../processors/helpers.js"
import { makeShiftedClock } from "../support/clock.js"
import { usingRealPostgres } from "../support/database.js"
import { uniqueEmail } from "../support/identity.js"
import { eventually, notificationsHttp, Peers, staffRequest } from "../support/notifications.js"
import {
  FCM_TEST_PROJECT,
  FCM_TEST_TOKEN,
  fcmError,
  TWILIO_TEST_SID,
  TWILIO_TEST_TOKEN,
  twilioError
} from "../support/providers.js"
import type { ReceivedMail, SmtpSink } from "../support/smtp.js"

// --- Shared helpers ----------------------------------------------------------------------------------

// biome-ignore lint/suspicious/noExplicitAny: reply bodies are inspected field by field
type Json = any

const MINUTE = 60_000
const HOUR = 60 * MINUTE

const mailsFor = (smtp: SmtpSink, id: string): Array<ReceivedMail> =>
  smtp.messages.filter((m) => m.headers["x-notification-id"] === id)

let phones = 0
/** A fresh E.164 number per call, so each test finds its own requests at the SMS fake. */
const uniquePhone = () => `+1415555${String(1000 + phones++)}`

/** A fresh FCM-style registration token (32+ URL-safe characters). */
const deviceToken = () => `fcm:${randomBytes(24).toString("hex")}`

/** A clock frozen at `ms` (sleeps are real): a worker "from another process" acting at that time. */
const frozenClock = (ms: number): Clock.Clock => {
  const live = Clock.make()
  return {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: () => ms,
    currentTimeMillis: Effect.succeed(ms),
    unsafeCurrentTimeNanos: () => BigInt(ms) * 1_000_000n,
    currentTimeNanos: Effect.succeed(BigInt(ms) * 1_000_000n),
    sleep: (duration) => live.sleep(duration)
  }
}

const dueRow = (id: string) =>
  Effect.flatMap(DueWork, (work) => work.get(SEND_KIND, id)).pipe(
    Effect.map((row) => Option.getOrThrowWith(row, () => new Error(`no due_work row for ${id}`)))
  )

// --- 1. The live server on a shifted clock -----------------------------------------------------------

const shifted = makeShiftedClock()
const nowMs = () => shifted.clock.unsafeCurrentTimeMillis()
const isoIn = (ms: number) => new Date(nowMs() + ms).toISOString()

const request = staffRequest

const createNotification = (json: Record<string, unknown>) =>
  Effect.map(request("POST", "/notification", json), (r): Json => {
    expect(r.status, r.text).toBe(201)
    return r.body
  })

const getNotification = (id: string) =>
  Effect.map(request("GET", `/notification/${id}`), (r): Json => {
    expect(r.status, r.text).toBe(200)
    return r.body
  })

/** Polls the notification until `predicate` holds. */
const until = (id: string, predicate: (n: Json) => boolean, timeoutMs = 10_000) =>
  eventually(
    Effect.map(getNotification(id), (n) => (predicate(n) ? n : undefined)),
    timeoutMs
  )

const createTemplate = (json: Record<string, unknown>) =>
  Effect.map(request("POST", "/notification/template", json), (r): Json => {
    expect(r.status, r.text).toBe(201)
    return r.body
  })

/** Moves the server's clock forward and wakes the sender (no waiting for its next poll). */
const advance = (duration: Duration.DurationInput) =>
  Effect.zipRight(
    shifted.advance(duration),
    Effect.flatMap(DueWork, (work) => work.wake)
  )

/** Gives the woken sender a moment to act (only to show that it did NOT act). */
const settle = Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 300)))

const EMAIL_TEMPLATE = {
  name: "Delivery test (email)",
  channel: "email",
  subject: "Welcome, {{ firstName }}!",
  body: "Hello {{ firstName }},\nyour code is {{ code }}.\n\n{{ store.name }}"
}
const SMS_TEMPLATE = {
  name: "Delivery test (sms)",
  channel: "sms",
  body: "{{ store.name }}: code {{ code }}"
}

let emailTemplateId: string | undefined
const emailTemplate = Effect.suspend(() =>
  emailTemplateId !== undefined
    ? Effect.succeed(emailTemplateId)
    : Effect.map(createTemplate(EMAIL_TEMPLATE), (t) => {
        emailTemplateId = t.id as string
        return t.id as string
      })
)
let smsTemplateId: string | undefined
const smsTemplate = Effect.suspend(() =>
  smsTemplateId !== undefined
    ? Effect.succeed(smsTemplateId)
    : Effect.map(createTemplate(SMS_TEMPLATE), (t) => {
        smsTemplateId = t.id as string
        return t.id as string
      })
)

const emailTo = (to: string, extra: Record<string, unknown> = {}) =>
  Effect.flatMap(emailTemplate, (templateId) =>
    createNotification({
      channel: "email",
      to,
      templateId,
      data: { firstName: "Ada", code: "X-42" },
      ...extra
    })
  )

layer(notificationsHttp({ clock: shifted.clock }), { excludeTestServices: true, timeout: 120_000 })(
  "delivery through the providers (live server, shifted clock)",
  (it) => {
    // --- Happy paths -----------------------------------------------------------------------------

    it.effect(
      "email end to end: envelope, From, subject, text and X-Notification-Id at the sink; sent with the SMTP message id",
      () =>
        Effect.gen(function* () {
          const { smtp } = yield* Peers
          const to = uniqueEmail("mail")
          const created = yield* emailTo(to)
          expect(created).toMatchObject({
            status: "pending",
            channel: "email",
            to,
            eventName: "manual",
            attempts: 0,
            sentAt: null,
            templateId: emailTemplateId
          })
          const sent = yield* until(created.id, (n) => n.status === "sent")
          const mails = mailsFor(smtp, created.id)
          expect(mails).toHaveLength(1)
          const mail = mails[0] as ReceivedMail
          expect(mail.to).toEqual([to])
          expect(mail.from).toBe("store@example.com")
          expect(mail.headers.from).toBe("Test Store <store@example.com>")
          expect(mail.headers.to).toBe(to)
          expect(mail.subject).toBe("Welcome, Ada!")
          expect(mail.text).toBe("Hello Ada,\nyour code is X-42.\n\nTest Store")
          expect(mail.headers["x-notification-id"]).toBe(created.id)
          expect(mail.headers["message-id"]).toBe(`<${created.id}@commerce-platform>`)

          expect(sent).toMatchObject({
            status: "sent",
            // The subject it was sent with (rendered from the template), not null.
            subject: "Welcome, Ada!",
            attempts: 1,
            provider: "smtp",
            providerMessageId: `<${created.id}@commerce-platform>`,
            lastError: null,
            nextAttemptAt: null,
            failureReason: null,
            failedAt: null
          })
          expect(Date.parse(sent.sentAt)).toBeGreaterThanOrEqual(Date.parse(created.createdAt))
          expect(Date.parse(sent.sentAt)).toBeLessThanOrEqual(nowMs())
          // The queue agrees: one claim, done.
          expect(yield* dueRow(created.id)).toMatchObject({ status: "done", attempts: 1 })
        })
    )

    it.effect("SMS through the Twilio fake: form POST with Basic auth, To/From/Body; sent with the sid", () =>
      Effect.gen(function* () {
        const { sms } = yield* Peers
        const to = uniquePhone()
        const templateId = yield* smsTemplate
        const created = yield* createNotification({ channel: "sms", to, templateId, data: { code: "7731" } })
        const sent = yield* until(created.id, (n) => n.status === "sent")
        const requests = sms.requests.filter((r) => (r.body as Json)?.To === to)
        expect(requests).toHaveLength(1)
        const req = requests[0]
        expect(req?.method).toBe("POST")
        expect(req?.path).toBe(`/2010-04-01/Accounts/${TWILIO_TEST_SID}/Messages.json`)
        expect(req?.headers["content-type"]).toMatch(/^application\/x-www-form-urlencoded/)
        expect(req?.headers.authorization).toBe(
          `Basic ${Buffer.from(`${TWILIO_TEST_SID}:${TWILIO_TEST_TOKEN}`).toString("base64")}`
        )
        expect(req?.body).toEqual({ To: to, From: "+15005550006", Body: "Test Store: code 7731" })
        expect(sent).toMatchObject({
          status: "sent",
          attempts: 1,
          provider: "twilio",
          providerMessageId: expect.stringMatching(/^SM[0-9a-f]{32}$/)
        })
        expect(sent.sentAt).not.toBeNull()
      })
    )

    it.effect("push through the FCM fake: Bearer, JSON with token, title, body and string-valued data", () =>
      Effect.gen(function* () {
        const { push } = yield* Peers
        const token = deviceToken()
        const created = yield* createNotification({
          channel: "push",
          to: token,
          title: "Order {{ displayId }} shipped",
          body: "It is on its way, {{ firstName }}.",
          data: {
            displayId: "1042",
            firstName: "Ada",
            count: 3,
            paid: true,
            items: [{ sku: "A1" }],
            none: null
          }
        })
        const sent = yield* until(created.id, (n) => n.status === "sent")
        const requests = push.requests.filter((r) => (r.body as Json)?.message?.token === token)
        expect(requests).toHaveLength(1)
        const req = requests[0]
        expect(req?.method).toBe("POST")
        expect(req?.path).toBe(`/v1/projects/${FCM_TEST_PROJECT}/messages:send`)
        expect(req?.headers.authorization).toBe(`Bearer ${FCM_TEST_TOKEN}`)
        expect(req?.headers["content-type"]).toMatch(/^application\/json/)
        expect(req?.body).toEqual({
          message: {
            token,
            notification: { title: "Order 1042 shipped", body: "It is on its way, Ada." },
            data: {
              displayId: "1042",
              firstName: "Ada",
              count: "3",
              paid: "true",
              items: '[{"sku":"A1"}]',
              notificationId: created.id
            }
          }
        })
        expect(sent).toMatchObject({
          status: "sent",
          attempts: 1,
          provider: "fcm",
          providerMessageId: expect.stringMatching(new RegExp(`^projects/${FCM_TEST_PROJECT}/messages/\\d+$`))
        })
      })
    )

    // --- Transient failures --------------------------------------------------------------------------

    it.effect(
      "SMTP 451 once: lastError, attempts 1, nextAttemptAt = now + retryDelayMs(id, 1); sent on attempt 2",
      () =>
        Effect.gen(function* () {
          const { smtp } = yield* Peers
          smtp.rejectNext(451, "4.7.1 Greylisted, please try again later", 1, "rcpt")
          const created = yield* emailTo(uniqueEmail("greylisted"))
          const retrying = yield* until(created.id, (n) => n.attempts === 1)
          const observedAt = nowMs()
          const delay = retryDelayMs(created.id, 1)
          expect(retrying).toMatchObject({
            status: "pending",
            attempts: 1,
            sentAt: null,
            failureReason: null
          })
          expect(retrying.lastError).toContain("451")
          expect(retrying.lastError).toContain("Greylisted")
          // The handler's "now" lies between the creation and our observation.
          const next = Date.parse(retrying.nextAttemptAt)
          expect(next).toBeGreaterThanOrEqual(Date.parse(created.createdAt) + delay)
          expect(next).toBeLessThanOrEqual(observedAt + delay)
          expect((yield* dueRow(created.id)).dueAt.getTime()).toBe(next)
          expect(mailsFor(smtp, created.id)).toHaveLength(0)

          yield* advance(delay + 1_000)
          const sent = yield* until(created.id, (n) => n.status === "sent")
          expect(sent).toMatchObject({ status: "sent", attempts: 2, provider: "smtp", nextAttemptAt: null })
          expect(mailsFor(smtp, created.id)).toHaveLength(1)
        })
    )

    it.effect("Twilio 500 once: retried after the back-off and sent on attempt 2", () =>
      Effect.gen(function* () {
        const { sms } = yield* Peers
        sms.answerNext({ status: 500, body: twilioError(500, 20500, "Internal Server Error") })
        const to = uniquePhone()
        const templateId = yield* smsTemplate
        const created = yield* createNotification({ channel: "sms", to, templateId, data: { code: "1" } })
        const retrying = yield* until(created.id, (n) => n.attempts === 1)
        const observedAt = nowMs()
        const delay = retryDelayMs(created.id, 1)
        expect(retrying.status).toBe("pending")
        expect(retrying.lastError).toBe("Twilio 500 (20500): Internal Server Error")
        const next = Date.parse(retrying.nextAttemptAt)
        expect(next).toBeGreaterThanOrEqual(Date.parse(created.createdAt) + delay)
        expect(next).toBeLessThanOrEqual(observedAt + delay)

        yield* advance(delay + 1_000)
        const sent = yield* until(created.id, (n) => n.status === "sent")
        expect(sent).toMatchObject({ attempts: 2, provider: "twilio" })
        expect(sms.requests.filter((r) => (r.body as Json)?.To === to)).toHaveLength(2)
      })
    )

    it.effect("Twilio 429 with Retry-After: 120 — the next attempt is not before it, then sent", () =>
      Effect.gen(function* () {
        const { sms } = yield* Peers
        sms.answerNext({
          status: 429,
          body: twilioError(429, 20429, "Too Many Requests"),
          headers: { "retry-after": "120" }
        })
        const to = uniquePhone()
        const templateId = yield* smsTemplate
        const created = yield* createNotification({ channel: "sms", to, templateId, data: { code: "2" } })
        const retrying = yield* until(created.id, (n) => n.attempts === 1)
        const observedAt = nowMs()
        expect(retrying.lastError).toBe("Twilio 429 (20429): Too Many Requests")
        const next = Date.parse(retrying.nextAttemptAt)
        // 120 s, far above the 8–10 s back-off of a first failure.
        expect(next).toBeGreaterThanOrEqual(Date.parse(created.createdAt) + 120_000)
        expect(next).toBeLessThanOrEqual(observedAt + 120_000)
        const requestsTo = () => sms.requests.filter((r) => (r.body as Json)?.To === to)

        // Past the back-off but before Retry-After: not tried again.
        yield* advance(60_000)
        yield* settle
        expect(requestsTo()).toHaveLength(1)
        expect((yield* getNotification(created.id)).status).toBe("pending")

        yield* advance(61_000)
        const sent = yield* until(created.id, (n) => n.status === "sent")
        expect(sent.attempts).toBe(2)
        expect(requestsTo()).toHaveLength(2)
      })
    )

    // --- Permanent failures --------------------------------------------------------------------------

    it.effect("SMTP 550: failed at once with the code and the server's text; nothing retried", () =>
      Effect.gen(function* () {
        const { smtp } = yield* Peers
        smtp.rejectNext(
          550,
          "5.1.1 <nobody@example.com>: Recipient address rejected: User unknown",
          1,
          "rcpt"
        )
        const created = yield* emailTo(uniqueEmail("unknown"))
        const failed = yield* until(created.id, (n) => n.status === "failed")
        expect(failed).toMatchObject({ attempts: 1, sentAt: null, nextAttemptAt: null, provider: null })
        expect(failed.failureReason).toContain("550")
        expect(failed.failureReason).toContain("Recipient address rejected: User unknown")
        expect(failed.failedAt).not.toBeNull()
        expect(yield* dueRow(created.id)).toMatchObject({ status: "failed", attempts: 1 })
        // Even much later, nothing is tried again.
        yield* advance(HOUR)
        yield* settle
        expect(mailsFor(smtp, created.id)).toHaveLength(0)
        expect(yield* dueRow(created.id)).toMatchObject({ status: "failed", attempts: 1 })
      })
    )

    it.effect("Twilio 400 with its error body: failed with Twilio's message, one request", () =>
      Effect.gen(function* () {
        const { sms } = yield* Peers
        sms.answerNext({
          status: 400,
          body: twilioError(400, 21211, "The 'To' number +15550000000 is not a valid phone number.")
        })
        const to = uniquePhone()
        const templateId = yield* smsTemplate
        const created = yield* createNotification({ channel: "sms", to, templateId, data: { code: "3" } })
        const failed = yield* until(created.id, (n) => n.status === "failed")
        expect(failed.attempts).toBe(1)
        expect(failed.failureReason).toBe(
          "Twilio 400 (21211): The 'To' number +15550000000 is not a valid phone number."
        )
        expect(yield* dueRow(created.id)).toMatchObject({ status: "failed", attempts: 1 })
        expect(sms.requests.filter((r) => (r.body as Json)?.To === to)).toHaveLength(1)
      })
    )

    it.effect("FCM 404 UNREGISTERED: failed at once, the token is dead", () =>
      Effect.gen(function* () {
        const { push } = yield* Peers
        push.answerNext({
          status: 404,
          body: fcmError(404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED")
        })
        const token = deviceToken()
        const created = yield* createNotification({ channel: "push", to: token, title: "Hi", body: "There" })
        const failed = yield* until(created.id, (n) => n.status === "failed")
        expect(failed.attempts).toBe(1)
        expect(failed.failureReason).toContain("404")
        expect(failed.failureReason).toContain("UNREGISTERED")
        expect(push.requests.filter((r) => (r.body as Json)?.message?.token === token)).toHaveLength(1)
      })
    )

    // --- Scheduling ----------------------------------------------------------------------------------

    it.effect("scheduledAt 1 h ahead: pending with nothing sent until the clock passes it, then sent", () =>
      Effect.gen(function* () {
        const { smtp } = yield* Peers
        const scheduledAt = isoIn(HOUR)
        const created = yield* emailTo(uniqueEmail("later"), { scheduledAt })
        expect(created).toMatchObject({ status: "pending", scheduledAt })
        expect((yield* dueRow(created.id)).dueAt.toISOString()).toBe(scheduledAt)

        yield* advance(HOUR - MINUTE)
        yield* settle
        expect(mailsFor(smtp, created.id)).toHaveLength(0)
        expect(yield* getNotification(created.id)).toMatchObject({ status: "pending", attempts: 0 })

        yield* advance(MINUTE + 1_000)
        const sent = yield* until(created.id, (n) => n.status === "sent")
        expect(Date.parse(sent.sentAt)).toBeGreaterThanOrEqual(Date.parse(scheduledAt))
        expect(mailsFor(smtp, created.id)).toHaveLength(1)
      })
    )

    it.effect("PUT moving scheduledAt earlier is honoured", () =>
      Effect.gen(function* () {
        const { smtp } = yield* Peers
        const created = yield* emailTo(uniqueEmail("earlier"), { scheduledAt: isoIn(2 * HOUR) })
        const earlier = isoIn(30 * MINUTE)
        const moved = yield* request("PUT", `/notification/${created.id}`, { scheduledAt: earlier })
        expect(moved.status, moved.text).toBe(200)
        expect(moved.body.scheduledAt).toBe(earlier)
        expect((yield* dueRow(created.id)).dueAt.toISOString()).toBe(earlier)

        yield* advance(30 * MINUTE + 1_000)
        const sent = yield* until(created.id, (n) => n.status === "sent")
        // Well before the original time.
        expect(Date.parse(sent.sentAt)).toBeLessThan(Date.parse(created.scheduledAt))
        expect(mailsFor(smtp, created.id)).toHaveLength(1)
      })
    )

    it.effect("PUT moving scheduledAt later is honoured: nothing at the old time, sent at the new one", () =>
      Effect.gen(function* () {
        const { smtp } = yield* Peers
        const created = yield* emailTo(uniqueEmail("postponed"), { scheduledAt: isoIn(10 * MINUTE) })
        const later = isoIn(3 * HOUR)
        const moved = yield* request("PUT", `/notification/${created.id}`, { scheduledAt: later })
        expect(moved.status, moved.text).toBe(200)
        expect(moved.body.scheduledAt).toBe(later)

        yield* advance(11 * MINUTE)
        yield* settle
        expect(mailsFor(smtp, created.id)).toHaveLength(0)
        expect((yield* getNotification(created.id)).status).toBe("pending")

        yield* advance(3 * HOUR - 10 * MINUTE)
        const sent = yield* until(created.id, (n) => n.status === "sent")
        expect(Date.parse(sent.sentAt)).toBeGreaterThanOrEqual(Date.parse(later))
        expect(mailsFor(smtp, created.id)).toHaveLength(1)
      })
    )

    it.effect("scheduledAt in the past sends at once", () =>
      Effect.gen(function* () {
        const { smtp } = yield* Peers
        const created = yield* emailTo(uniqueEmail("past"), { scheduledAt: isoIn(-HOUR) })
        // No clock move: due already.
        const sent = yield* until(created.id, (n) => n.status === "sent")
        expect(sent.attempts).toBe(1)
        expect(mailsFor(smtp, created.id)).toHaveLength(1)
      })
    )

    // --- Templates at send time ----------------------------------------------------------------------

    it.effect("a template edited after creation to read a new variable: failed naming it, nothing sent", () =>
      Effect.gen(function* () {
        const { smtp } = yield* Peers
        const template = yield* createTemplate({
          name: "Edited later",
          channel: "email",
          subject: "Hi {{ firstName }}",
          body: "Hello {{ firstName }}."
        })
        const created = yield* createNotification({
          channel: "email",
          to: uniqueEmail("edited"),
          templateId: template.id,
          data: { firstName: "Ada" },
          scheduledAt: isoIn(HOUR)
        })
        const edited = yield* request("PUT", `/notification/template/${template.id}`, {
          body: "Hello {{ firstName }}, your voucher is {{ voucherCode }}."
        })
        expect(edited.status, edited.text).toBe(200)

        yield* advance(HOUR + 1_000)
        const failed = yield* until(created.id, (n) => n.status === "failed")
        expect(failed.failureReason).toContain("voucherCode")
        expect(failed.failureReason).toContain(template.id)
        // Nothing was handed to a provider.
        expect(failed.attempts).toBe(0)
        expect(failed.provider).toBeNull()
        expect(mailsFor(smtp, created.id)).toHaveLength(0)
        expect(yield* dueRow(created.id)).toMatchObject({ status: "failed" })
      })
    )

    // --- Claims ------------------------------------------------------------------------------------

    it.effect("a claim whose worker died is re-claimed after its lease expired and sent once", () =>
      Effect.gen(function* () {
        const { smtp } = yield* Peers
        const work = yield* DueWork
        const config = yield* AppConfig
        const created = yield* emailTo(uniqueEmail("orphan"), { scheduledAt: isoIn(HOUR) })
        // Another process claims it when due, with a 60 s lease, and dies without a word.
        const deadAt = nowMs() + HOUR + 1_000
        const claimed = yield* work
          .claim({ kinds: [SEND_KIND], limit: 10, owner: "dead-worker", leaseTtl: "60 seconds" })
          .pipe(Effect.withClock(frozenClock(deadAt)))
        expect(claimed.map((i) => i.key)).toEqual([created.id])
        const dead = claimed[0] as DueItem

        // Due, but claimed: while the lease runs, nobody sends it.
        yield* advance(HOUR + 30_000)
        yield* settle
        expect(mailsFor(smtp, created.id)).toHaveLength(0)
        expect(yield* dueRow(created.id)).toMatchObject({ status: "claimed", claimedBy: "dead-worker" })

        // Lease over: the sender takes it over and sends it, once.
        yield* advance(32_000)
        const sent = yield* until(created.id, (n) => n.status === "sent")
        expect(sent.attempts).toBe(1)
        expect(mailsFor(smtp, created.id)).toHaveLength(1)
        expect(yield* dueRow(created.id)).toMatchObject({
          status: "done",
          attempts: 2,
          claimToken: dead.claimToken + 1,
          claimedBy: config.instanceId
        })
        // The dead worker's outcome, should it ever arrive, is fenced off.
        expect(yield* work.complete(dead, DueOutcome.failed({ error: "zombie" }))).toBe(false)
        expect((yield* getNotification(created.id)).status).toBe("sent")
      })
    )

    it.effect(
      "at-least-once window: a worker that died after the provider accepted but before recording → sent twice, same ids",
      () =>
        Effect.gen(function* () {
          const { smtp } = yield* Peers
          const work = yield* DueWork
          const created = yield* emailTo(uniqueEmail("twice"), { scheduledAt: isoIn(HOUR) })
          const deadAt = nowMs() + HOUR + 1_000
          const [dead] = yield* work
            .claim({ kinds: [SEND_KIND], limit: 10, owner: "dead-worker", leaseTtl: "60 seconds" })
            .pipe(Effect.withClock(frozenClock(deadAt)))
          expect(dead?.key).toBe(created.id)
          // It sends (the SMTP server accepts) and dies before recording the outcome.
          const outcome = yield* handleSend(dead as DueItem).pipe(Effect.withClock(frozenClock(deadAt)))
          expect(outcome._tag).toBe("Done")
          expect(mailsFor(smtp, created.id)).toHaveLength(1)
          expect((yield* getNotification(created.id)).status).toBe("pending")

          yield* advance(HOUR + 62_000)
          const sent = yield* until(created.id, (n) => n.status === "sent")
          const mails = mailsFor(smtp, created.id)
          expect(mails).toHaveLength(2)
          // The repeat carries the same X-Notification-Id and Message-ID: receivers can drop it.
          expect(new Set(mails.map((m) => m.headers["message-id"]))).toEqual(
            new Set([`<${created.id}@commerce-platform>`])
          )
          expect(sent.attempts).toBe(1)
        })
    )

    it.effect.skipIf(!usingRealPostgres)(
      "two sender workers over one database, 50 queued notifications: each email arrives exactly once",
      () =>
        Effect.gen(function* () {
          const { smtp } = yield* Peers
          const sql = yield* SqlClient.SqlClient
          const config = yield* AppConfig
          // A second worker, as another process would run it: its own owner id, the same handler.
          const second = yield* Effect.fork(
            dueWorker({
              name: "notification-sender-2",
              kinds: [SEND_KIND],
              owner: "second-sender",
              concurrency: 8,
              leaseTtl: "60 seconds",
              handle: handleSend
            }).run.pipe(Effect.withClock(shifted.clock))
          )
          // Queued for later, so both workers find all 50 due at once.
          const scheduledAt = isoIn(10 * MINUTE)
          const ids = yield* Effect.forEach(
            Array.from({ length: 50 }, (_, i) => i),
            (i) => Effect.map(emailTo(uniqueEmail(`burst${i}`), { scheduledAt }), (n) => n.id as string),
            { concurrency: 5 }
          )
          yield* advance(10 * MINUTE + 1_000)
          yield* eventually(
            Effect.sync(() => (ids.every((id) => mailsFor(smtp, id).length > 0) ? true : undefined)),
            30_000
          )
          yield* eventually(
            Effect.map(
              sql<{ n: number }>`SELECT count(*)::int AS n FROM processors.due_work
                WHERE kind = ${SEND_KIND} AND key = ANY(${ids}) AND status = 'done'`,
              (rows) => (rows[0]?.n === ids.length ? true : undefined)
            ),
            10_000
          )
          yield* Fiber.interrupt(second)
          for (const id of ids) expect(mailsFor(smtp, id), id).toHaveLength(1)
          const rows = yield* sql<{ claimedBy: string; attempts: number }>`
            SELECT claimed_by AS "claimedBy", attempts FROM processors.due_work
             WHERE kind = ${SEND_KIND} AND key = ANY(${ids})`
          // Each was claimed exactly once, by one of the two workers.
          expect(rows).toHaveLength(50)
          for (const row of rows) {
            expect(row.attempts).toBe(1)
            expect([config.instanceId, "second-sender"]).toContain(row.claimedBy)
          }
          const statuses = yield* Effect.forEach(ids, (id) =>
            Effect.map(getNotification(id), (n) => n.status)
          )
          expect(new Set(statuses)).toEqual(new Set(["sent"]))
        })
    )
  }
)

// --- 2. The retry schedule, exactly: handleSend and DueWork by hand under TestClock ----------------------

const ACTOR: AuthenticatedActor = {
  type: "user",
  id: "usr_delivery_test",
  role: "admin",
  scopes: new Set(["admin"])
}

/** 2030-01-01T00:00:00Z: round numbers in the assertions. */
const T0 = Date.UTC(2030, 0, 1)

/** Claims what is due now for a test worker (never the live sender: there is none in this layer). */
const claimDue = Effect.flatMap(DueWork, (work) =>
  work.claim({ kinds: [SEND_KIND], limit: 10, owner: "test-worker", leaseTtl: "60 seconds" })
)

/** One worker step: claim the one due send, handle it, record the outcome. */
const sendStep = (expectedId: string) =>
  Effect.gen(function* () {
    const work = yield* DueWork
    const claimed = yield* claimDue
    expect(claimed.map((i) => i.key)).toEqual([expectedId])
    const item = claimed[0] as DueItem
    const outcome = yield* handleSend(item)
    expect(yield* work.complete(item, outcome)).toBe(true)
    return outcome
  })

const view = (id: string) => Effect.flatMap(Notifications, (n) => n.get(id))

/** Each test starts on an empty queue (what an earlier, failed test left must not be claimed here). */
const emptyQueue = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`UPDATE processors.due_work SET status = 'cancelled'
    WHERE kind = ${SEND_KIND} AND status IN ('pending', 'claimed')`
)

/** `effect` under a TestClock set to `at`, on an empty queue. */
const at = <A, E, R>(time: number, effect: Effect.Effect<A, E, R>) =>
  withTestClock(Effect.zipRight(Effect.zipRight(emptyQueue, TestClock.setTime(time)), effect))

const newEmail = (input: { readonly scheduledAt?: Date } = {}) =>
  Effect.gen(function* () {
    const notifications = yield* Notifications
    const template = yield* notifications.createTemplate(ACTOR, {
      name: "Back-off test",
      channel: "email",
      subject: "Hi {{ firstName }}",
      body: "Hello {{ firstName }}."
    })
    return yield* notifications.create(ACTOR, {
      channel: "email",
      to: uniqueEmail("backoff"),
      templateId: template.id,
      data: { firstName: "Ada" },
      ...(input.scheduledAt === undefined ? {} : { scheduledAt: input.scheduledAt })
    })
  })

const newSms = Effect.gen(function* () {
  const notifications = yield* Notifications
  const template = yield* notifications.createTemplate(ACTOR, {
    name: "Back-off test (sms)",
    channel: "sms",
    body: "Code {{ code }}"
  })
  return yield* notifications.create(ACTOR, {
    channel: "sms",
    to: uniquePhone(),
    templateId: template.id,
    data: { code: "9" }
  })
})

layer(notificationsHttp({ processors: false }), { excludeTestServices: true, timeout: 120_000 })(
  "the retry schedule (TestClock)",
  (it) => {
    it.effect("retryDelayMs: deterministic per id, increasing with each attempt, 8 tries fit in 30 min", () =>
      Effect.sync(() => {
        // A fixed range of ids (reproducible), which includes ids whose jitter rounds to exactly 80 %.
        const base = [10, 30, 60, 120, 240, 480, 720]
        const problems: Array<string> = []
        for (let i = 0; i < 10_000; i++) {
          const id = `ntf_${i}`
          const delays = Array.from({ length: MAX_SEND_ATTEMPTS - 1 }, (_, n) => retryDelayMs(id, n + 1))
          const again = delays.map((_, n) => retryDelayMs(id, n + 1))
          if (again.some((d, n) => d !== delays[n])) problems.push(`${id}: not deterministic`)
          if (delays.some((d, n) => n > 0 && d <= (delays[n - 1] as number)))
            problems.push(`${id}: not increasing ${delays}`)
          if (delays.reduce((a, b) => a + b, 0) > RETRY_WINDOW_MS) problems.push(`${id}: over 30 min`)
          // Jitter only shortens: within 80–100 % of the base delays (80 % itself after rounding).
          if (delays.some((d, n) => d < (base[n] as number) * 800 || d > (base[n] as number) * 1000))
            problems.push(`${id}: outside 80–100 % of the base ${delays}`)
        }
        expect(problems).toEqual([])
        expect(RETRY_WINDOW_MS).toBe(30 * MINUTE)
        expect(MAX_SEND_ATTEMPTS).toBe(8)
      })
    )

    it.effect(
      "a sink that always answers 451: exactly 8 attempts at the back-off times, all within 30 min, then failed",
      () =>
        at(
          T0,
          Effect.gen(function* () {
            const { smtp } = yield* Peers
            const stop = smtp.reject({ code: 451, message: "4.3.2 System not accepting network messages" })
            const created = yield* newEmail()
            const id = created.id
            const attemptTimes: Array<number> = []
            for (let attempt = 1; attempt <= MAX_SEND_ATTEMPTS; attempt++) {
              const now = yield* Clock.currentTimeMillis
              attemptTimes.push(now)
              const outcome = yield* sendStep(id)
              const after = yield* view(id)
              if (attempt < MAX_SEND_ATTEMPTS) {
                expect(outcome._tag).toBe("Retry")
                expect(after).toMatchObject({ status: "pending", attempts: attempt })
                expect(after.lastError).toContain("SMTP 451")
                const next = (after.nextAttemptAt as Date).getTime()
                expect(next).toBe(now + retryDelayMs(id, attempt))
                expect((yield* dueRow(id)).dueAt.getTime()).toBe(next)
                // Not a millisecond early…
                yield* TestClock.setTime(next - 1)
                expect(yield* claimDue).toEqual([])
                // …and due exactly then.
                yield* TestClock.setTime(next)
              } else {
                expect(outcome._tag).toBe("Failed")
                expect(after).toMatchObject({
                  status: "failed",
                  attempts: MAX_SEND_ATTEMPTS,
                  nextAttemptAt: null
                })
                expect(after.failureReason).toMatch(/^gave up after 8 attempts: SMTP 451/)
              }
            }
            stop()
            expect(attemptTimes[0]).toBe(T0)
            const delays = attemptTimes.slice(1).map((t, i) => t - (attemptTimes[i] as number))
            expect(delays).toEqual(delays.map((_, i) => retryDelayMs(id, i + 1)))
            for (let i = 1; i < delays.length; i++) expect(delays[i]).toBeGreaterThan(delays[i - 1] as number)
            expect((attemptTimes[MAX_SEND_ATTEMPTS - 1] as number) - T0).toBeLessThanOrEqual(RETRY_WINDOW_MS)
            // Nothing more to do, ever; nothing reached the mailbox.
            expect(yield* dueRow(id)).toMatchObject({ status: "failed", attempts: MAX_SEND_ATTEMPTS })
            yield* TestClock.adjust("1 day")
            expect(yield* claimDue).toEqual([])
            expect(mailsFor(smtp, id)).toHaveLength(0)
          })
        )
    )

    it.effect("429 with Retry-After: 120 → next attempt exactly 120 s later (longer than the back-off)", () =>
      at(
        T0 + HOUR,
        Effect.gen(function* () {
          const { sms } = yield* Peers
          const created = yield* newSms
          sms.answerNext({
            status: 429,
            body: twilioError(429, 20429, "Too Many Requests"),
            headers: { "retry-after": "120" }
          })
          const now = yield* Clock.currentTimeMillis
          yield* sendStep(created.id)
          const after = yield* view(created.id)
          expect(after).toMatchObject({ status: "pending", attempts: 1 })
          expect((after.nextAttemptAt as Date).getTime()).toBe(now + 120_000)
          yield* TestClock.setTime(now + 119_999)
          expect(yield* claimDue).toEqual([])
          yield* TestClock.setTime(now + 120_000)
          yield* sendStep(created.id)
          expect(yield* view(created.id)).toMatchObject({ status: "sent", attempts: 2, provider: "twilio" })
        })
      )
    )

    it.effect("a Retry-After beyond the 30 min window is not cut short: the send gives up instead", () =>
      at(
        T0 + 2 * HOUR,
        Effect.gen(function* () {
          const { sms } = yield* Peers
          const created = yield* newSms
          sms.answerNext({
            status: 503,
            body: twilioError(503, 20503, "Service Unavailable"),
            headers: { "retry-after": "3600" }
          })
          yield* sendStep(created.id)
          const after = yield* view(created.id)
          // Retrying before the provider said it would listen again only earns another refusal.
          expect(after.status).toBe("failed")
          expect(after.attempts).toBe(1)
          expect(after.failureReason).toContain("Twilio 503")
          expect(after.failureReason).toContain("Retry-After")
        })
      )
    )

    it.effect(
      "sent as soon as possible (PUT scheduledAt: null) long after creation: a transient failure is still retried",
      () =>
        at(
          T0 + 3 * HOUR,
          Effect.gen(function* () {
            const { smtp } = yield* Peers
            const notifications = yield* Notifications
            const created = yield* newEmail({ scheduledAt: new Date(T0 + 27 * HOUR) })
            // Two hours later the shop decides to send it now.
            yield* TestClock.adjust("2 hours")
            yield* notifications.update(ACTOR, created.id, { scheduledAt: null })
            smtp.rejectNext(451, "4.7.1 Greylisted", 1, "rcpt")
            const now = yield* Clock.currentTimeMillis
            yield* sendStep(created.id)
            const after = yield* view(created.id)
            expect(after).toMatchObject({ status: "pending", attempts: 1 })
            expect((after.nextAttemptAt as Date).getTime()).toBe(now + retryDelayMs(created.id, 1))
            yield* TestClock.setTime(now + retryDelayMs(created.id, 1))
            yield* sendStep(created.id)
            expect(yield* view(created.id)).toMatchObject({ status: "sent", attempts: 2 })
          })
        )
    )

    it.effect(
      "first tried late (no worker for 45 min): the 8 tries still get their 30 min from the first one",
      () =>
        at(
          T0 + 30 * HOUR,
          Effect.gen(function* () {
            const { smtp } = yield* Peers
            const created = yield* newEmail()
            yield* TestClock.adjust("45 minutes")
            const stop = smtp.reject({ code: 421, message: "4.4.5 Too busy", at: "rcpt" })
            const first = yield* Clock.currentTimeMillis
            let attempts = 0
            while (true) {
              yield* sendStep(created.id)
              attempts++
              const after = yield* view(created.id)
              if (after.status !== "pending") {
                expect(after.status).toBe("failed")
                break
              }
              yield* TestClock.setTime((after.nextAttemptAt as Date).getTime())
            }
            stop()
            expect(attempts).toBe(MAX_SEND_ATTEMPTS)
            expect((yield* Clock.currentTimeMillis) - first).toBeLessThanOrEqual(RETRY_WINDOW_MS)
            expect((yield* view(created.id)).failureReason).toMatch(/^gave up after 8 attempts: SMTP 421/)
          })
        )
    )
  }
)

// --- 4. No email provider configured: the log provider -------------------------------------------------

layer(
  notificationsHttp({
    overrides: { notifications: { ...makeAppConfig().notifications, storeName: "Test Store" } }
  }),
  { excludeTestServices: true, timeout: 120_000 }
)("the log provider (no SMTP_URL)", (it) => {
  it.effect("a sent email's subject is filled, the same as rendered.subject; a given subject wins", () =>
    Effect.gen(function* () {
      const template = yield* createTemplate({ ...EMAIL_TEMPLATE, name: "Delivery test (log)" })
      const data = { firstName: "Ada", code: "X-42" }
      const created = yield* createNotification({
        channel: "email",
        to: uniqueEmail("log"),
        templateId: template.id,
        data
      })
      expect(created.subject).toBeNull()
      const sent = yield* until(created.id, (n) => n.status === "sent")
      expect(sent).toMatchObject({ provider: "log", subject: "Welcome, Ada!" })
      expect(sent.rendered.subject).toBe(sent.subject)

      const overridden = yield* createNotification({
        channel: "email",
        to: uniqueEmail("log"),
        templateId: template.id,
        data,
        subject: "Your code, {{ firstName }}"
      })
      const sentOverridden = yield* until(overridden.id, (n) => n.status === "sent")
      expect(sentOverridden).toMatchObject({ subject: "Your code, Ada" })
      expect(sentOverridden.rendered.subject).toBe("Your code, Ada")
    })
  )
})
