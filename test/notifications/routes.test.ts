/**
 * The notifications surface over real HTTP (spec §2.7, §3.2, §4.4, §6.5; design/API.md "Gaps in the
 * base surface, filled"; design/WEBHOOKS-NOTIFICATIONS.md "Notifications"): create with per-channel
 * validation, read, list, reschedule, cancel, resend, trigger settings, Liquid templates, auth and
 * Idempotency-Key. The main suite runs WITHOUT the sender, so every notification stays `pending` and
 * status assertions are deterministic; a second suite runs the processors to check that a cancelled
 * notification is never sent.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { describe, expect } from "vitest"
import * as Ids from "../../src/kernel/Ids.js"
import { adminToken, createCustomer } from "../support/customers.js"
import { apiKeyWith, call, expectError, registerShopper, uniqueEmail } from "../support/identity.js"
import { eventually, notificationsHttp, Peers } from "../support/notifications.js"

// biome-ignore lint/suspicious/noExplicitAny: test bodies are inspected field by field
type Body = any

const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
const NTF_ID = /^ntf_[0-9a-z]{26}$/
const TPL_ID = /^tpl_[0-9a-z]{26}$/

/** Spec §6.5, in its order. */
const TRIGGERS = [
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
const CRITICAL = new Set(["customer.password_reset", "order.confirmed"])

/** Built-ins reading only `displayId` (everything else is optional or `store.*`). */
const EMAIL_TEMPLATE = "tpl_builtin_order_delivered_email"
const SMS_TEMPLATE = "tpl_builtin_order_delivered_sms"
const PUSH_TEMPLATE = "tpl_builtin_order_delivered_push"
const DATA = { displayId: "1001" }
/** An FCM-like registration token (URL-safe characters, 32+ long). */
const DEVICE_TOKEN = `fcm-device:${"A1b2C3d4_-.".repeat(4)}`
const PHONE = "+14155550123"

const NOTIFICATION_KEYS = [
  "attempts",
  "body",
  "cancelledAt",
  "channel",
  "createdAt",
  "customerId",
  "data",
  "eventName",
  "failedAt",
  "failureReason",
  "id",
  "lastError",
  "metadata",
  "nextAttemptAt",
  "parentId",
  "provider",
  "providerMessageId",
  "rendered",
  "scheduledAt",
  "sentAt",
  "status",
  "subject",
  "templateId",
  "title",
  "to",
  "updatedAt"
]
const TEMPLATE_KEYS = [
  "body",
  "builtIn",
  "channel",
  "createdAt",
  "id",
  "name",
  "subject",
  "title",
  "trigger",
  "updatedAt",
  "variables"
]

let counter = 0
/** A dotted event name no other test uses, to isolate a test's rows in lists. */
const uniqueEventName = (label: string) => `test.${label}_${Date.now().toString(36)}_${counter++}`

const emailRequest = (fields: Record<string, unknown> = {}) => ({
  channel: "email",
  to: uniqueEmail("ntf"),
  templateId: EMAIL_TEMPLATE,
  data: DATA,
  ...fields
})

/** `POST /notification`, asserting 201. */
const createNotification = (token: string, json: Record<string, unknown> = emailRequest()) =>
  Effect.map(call("POST", "/notification", { token, json }), (r) => {
    expect(r.status, r.text).toBe(201)
    return r.body as Body
  })

/** `GET /notification/:id`, asserting 200. */
const getNotification = (token: string, id: string) =>
  Effect.map(call("GET", `/notification/${id}`, { token }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.body as Body
  })

/** `GET /notification?…` with the given query parameters. */
const listNotifications = (token: string, params: Record<string, string | number> = {}) => {
  const query = new URLSearchParams(
    Object.entries(params).map(([k, v]): [string, string] => [k, String(v)])
  ).toString()
  return call("GET", query === "" ? "/notification" : `/notification?${query}`, { token })
}

/** How many notifications exist in all. */
const totalCount = (token: string) =>
  Effect.map(listNotifications(token, { display: 1 }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.body.count as number
  })

const getSettings = (token: string) =>
  Effect.map(call("GET", "/notification/settings", { token }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.body as Body
  })

const changeSettings = (token: string, events: Record<string, unknown>) =>
  call("POST", "/notification/settings", { token, json: { events } })

/** `POST /notification/template`, asserting 201. */
const createTemplate = (token: string, json: Record<string, unknown>) =>
  Effect.map(call("POST", "/notification/template", { token, json }), (r) => {
    expect(r.status, r.text).toBe(201)
    return r.body as Body
  })

const smsTemplate = (token: string, body = "Code {{ code }}") =>
  createTemplate(token, { name: "SMS code", channel: "sms", body })

const pushTemplate = (token: string) =>
  createTemplate(token, { name: "Push hello", channel: "push", title: "Hello", body: "Hi {{ name }}" })

const inSeconds = (seconds: number) => new Date(Date.now() + seconds * 1000).toISOString()

/** The app without the sender: notifications stay pending. */
const NoSender = notificationsHttp({ processors: false })
const OPTIONS = { excludeTestServices: true, timeout: 120_000 } as const

layer(NoSender, OPTIONS)("notifications over HTTP (no sender: notifications stay pending)", (it) => {
  // --- POST /notification ------------------------------------------------------------------------

  describe("POST /notification", () => {
    it.effect("email: 201 with the full notification, pending, eventName manual, parentId null", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const to = uniqueEmail("create")
        const r = yield* call("POST", "/notification", {
          token,
          json: {
            channel: "email",
            to,
            templateId: EMAIL_TEMPLATE,
            subject: "Custom subject {{ displayId }}",
            data: DATA,
            metadata: { crm: "A-1" }
          }
        })
        expect(r.status, r.text).toBe(201)
        expect(Object.keys(r.body).sort()).toEqual(NOTIFICATION_KEYS)
        expect(r.body).toEqual({
          id: expect.stringMatching(NTF_ID),
          eventName: "manual",
          channel: "email",
          to,
          status: "pending",
          subject: "Custom subject {{ displayId }}",
          title: null,
          body: null,
          templateId: EMAIL_TEMPLATE,
          data: DATA,
          metadata: { crm: "A-1" },
          scheduledAt: null,
          parentId: null,
          customerId: null,
          attempts: 0,
          lastError: null,
          nextAttemptAt: null,
          failureReason: null,
          provider: null,
          providerMessageId: null,
          rendered: null,
          sentAt: null,
          failedAt: null,
          cancelledAt: null,
          createdAt: expect.stringMatching(ISO_MS),
          updatedAt: expect.stringMatching(ISO_MS)
        })
        expect(Math.abs(Date.parse(r.body.createdAt) - Date.now())).toBeLessThan(60_000)
        expect(yield* getNotification(token, r.body.id)).toEqual(r.body)
      })
    )

    it.effect("sms and push: 201; push takes title/body/data or a push template", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const sms = yield* createNotification(token, {
          channel: "sms",
          to: PHONE,
          templateId: SMS_TEMPLATE,
          data: DATA
        })
        expect(sms).toMatchObject({
          channel: "sms",
          to: PHONE,
          templateId: SMS_TEMPLATE,
          status: "pending"
        })
        const push = yield* createNotification(token, {
          channel: "push",
          to: DEVICE_TOKEN,
          title: "Hello {{ name }}",
          body: "Your order {{ displayId }}",
          data: { name: "Ann", displayId: "7" }
        })
        expect(push).toMatchObject({
          channel: "push",
          to: DEVICE_TOKEN,
          title: "Hello {{ name }}",
          body: "Your order {{ displayId }}",
          templateId: null,
          data: { name: "Ann", displayId: "7" },
          status: "pending"
        })
        const templated = yield* createNotification(token, {
          channel: "push",
          to: DEVICE_TOKEN,
          templateId: PUSH_TEMPLATE,
          data: DATA
        })
        expect(templated).toMatchObject({ templateId: PUSH_TEMPLATE, title: null, body: null })
      })
    )

    it.effect("eventName, scheduledAt and a known customerId are kept", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const customer = yield* createCustomer(token)
        const created = yield* createNotification(
          token,
          emailRequest({
            to: customer.email,
            eventName: "order.delivered",
            scheduledAt: "2031-05-06T07:08:09Z",
            customerId: customer.id
          })
        )
        expect(created).toMatchObject({
          eventName: "order.delivered",
          scheduledAt: "2031-05-06T07:08:09.000Z",
          customerId: customer.id,
          status: "pending"
        })
      })
    )

    it.effect("recipient per channel: email address, E.164 number, device token → else 400 on to", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const before = yield* totalCount(token)
        const bad: ReadonlyArray<[string, string, string, Record<string, unknown>]> = [
          ["email", "not-an-email", EMAIL_TEMPLATE, {}],
          ["email", "ann@", EMAIL_TEMPLATE, {}],
          ["email", PHONE, EMAIL_TEMPLATE, {}],
          ["sms", "0155 555", SMS_TEMPLATE, {}],
          ["sms", "4155550123", SMS_TEMPLATE, {}],
          ["sms", "+0155550123", SMS_TEMPLATE, {}],
          ["sms", "ann@example.com", SMS_TEMPLATE, {}],
          ["push", "short-token", "", { title: "T", body: "B" }],
          ["push", `${"a".repeat(31)}`, "", { title: "T", body: "B" }],
          ["push", `${"a".repeat(20)} ${"b".repeat(20)}`, "", { title: "T", body: "B" }],
          ["push", `${"a".repeat(20)}/${"b".repeat(20)}`, "", { title: "T", body: "B" }]
        ]
        for (const [channel, to, templateId, extra] of bad) {
          const json = { channel, to, data: DATA, ...(templateId === "" ? {} : { templateId }), ...extra }
          expectError(yield* call("POST", "/notification", { token, json }), 400, "parameter_invalid", "to")
        }
        // The edges that are fine.
        yield* createNotification(token, {
          channel: "push",
          to: "a".repeat(32),
          title: "T",
          body: "B"
        })
        yield* createNotification(token, {
          channel: "sms",
          to: PHONE,
          templateId: SMS_TEMPLATE,
          data: DATA
        })
        expect(yield* totalCount(token)).toBe(before + 2)
      })
    )

    it.effect("email/sms without templateId → 400 parameter_missing templateId", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        for (const [channel, to] of [
          ["email", uniqueEmail()],
          ["sms", PHONE]
        ] as const) {
          expectError(
            yield* call("POST", "/notification", { token, json: { channel, to, data: DATA } }),
            400,
            "parameter_missing",
            "templateId"
          )
        }
      })
    )

    it.effect("unknown templateId → 400 resource_missing; another channel's template → 400", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const unknown = yield* Ids.make("tpl")
        for (const templateId of [unknown, "tpl_nope", "tpl_builtin_order_teleported_email"]) {
          expectError(
            yield* call("POST", "/notification", { token, json: emailRequest({ templateId }) }),
            400,
            "resource_missing",
            "templateId"
          )
        }
        expectError(
          yield* call("POST", "/notification", { token, json: emailRequest({ templateId: SMS_TEMPLATE }) }),
          400,
          "parameter_invalid",
          "templateId"
        )
        const custom = yield* smsTemplate(token)
        expectError(
          yield* call("POST", "/notification", { token, json: emailRequest({ templateId: custom.id }) }),
          400,
          "parameter_invalid",
          "templateId"
        )
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: { channel: "push", to: DEVICE_TOKEN, templateId: EMAIL_TEMPLATE, data: DATA }
          }),
          400,
          "parameter_invalid",
          "templateId"
        )
      })
    )

    it.effect("push without a template needs title and body → 400 parameter_missing", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: { channel: "push", to: DEVICE_TOKEN, body: "B" }
          }),
          400,
          "parameter_missing",
          "title"
        )
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: { channel: "push", to: DEVICE_TOKEN, title: "T" }
          }),
          400,
          "parameter_missing",
          "body"
        )
        expectError(
          yield* call("POST", "/notification", { token, json: { channel: "push", to: DEVICE_TOKEN } }),
          400,
          "parameter_missing"
        )
      })
    )

    it.effect("channel fields: subject only on email, title/body only on push → 400 on the field", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: { channel: "sms", to: PHONE, templateId: SMS_TEMPLATE, data: DATA, subject: "S" }
          }),
          400,
          "parameter_invalid",
          "subject"
        )
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: { channel: "push", to: DEVICE_TOKEN, title: "T", body: "B", subject: "S" }
          }),
          400,
          "parameter_invalid",
          "subject"
        )
        expectError(
          yield* call("POST", "/notification", { token, json: emailRequest({ title: "T" }) }),
          400,
          "parameter_invalid",
          "title"
        )
        expectError(
          yield* call("POST", "/notification", { token, json: emailRequest({ body: "B" }) }),
          400,
          "parameter_invalid",
          "body"
        )
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: { channel: "sms", to: PHONE, templateId: SMS_TEMPLATE, data: DATA, body: "B" }
          }),
          400,
          "parameter_invalid",
          "body"
        )
      })
    )

    it.effect("a variable the template reads but data lacks → 400 template_variable_missing on data", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const missing = yield* call("POST", "/notification", { token, json: emailRequest({ data: {} }) })
        expectError(missing, 400, "template_variable_missing", "data")
        expect(missing.body.error.message).toContain("displayId")
        // Also for the push fields and for a subject given with the notification.
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: { channel: "push", to: DEVICE_TOKEN, title: "Hi {{ name }}", body: "B" }
          }),
          400,
          "template_variable_missing",
          "data"
        )
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: emailRequest({ subject: "About {{ orderRef }}" })
          }),
          400,
          "template_variable_missing",
          "data"
        )
        // Content that cannot render within the limits is refused as well, with its own code.
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: {
              channel: "push",
              to: DEVICE_TOKEN,
              title: "T",
              body: "{% for i in (1..100000000) %}{{ i }}{% endfor %}"
            }
          }),
          400,
          "template_render_failed",
          "data"
        )
        // Optional variables (behind `if`/`default`) may be absent; `store.*` is always there.
        yield* createNotification(token, {
          channel: "push",
          to: DEVICE_TOKEN,
          title: "{{ store.name }}",
          body: "Hi{% if name %} {{ name }}{% endif %} {{ nick | default: 'there' }}"
        })
      })
    )

    it.effect(
      "data over 32 KiB, metadata over its limits, invalid scheduledAt, bad types → 400; nothing persisted",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const before = yield* totalCount(token)
          expectError(
            yield* call("POST", "/notification", {
              token,
              json: emailRequest({ data: { ...DATA, blob: "x".repeat(33 * 1024) } })
            }),
            400,
            "parameter_invalid",
            "data"
          )
          for (const scheduledAt of ["2026-02-30", "2026-13-01", "tomorrow", 1_700_000_000_000]) {
            expectError(
              yield* call("POST", "/notification", { token, json: emailRequest({ scheduledAt }) }),
              400,
              "parameter_invalid",
              "scheduledAt"
            )
          }
          expectError(
            yield* call("POST", "/notification", { token, json: emailRequest({ channel: "fax" }) }),
            400,
            "parameter_invalid",
            "channel"
          )
          const tooMany = Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, i]))
          expectError(
            yield* call("POST", "/notification", { token, json: emailRequest({ metadata: tooMany }) }),
            400,
            "parameter_invalid",
            "metadata"
          )
          expectError(
            yield* call("POST", "/notification", { token, json: emailRequest({ data: [1, 2] }) }),
            400,
            "parameter_invalid",
            "data"
          )
          expectError(
            yield* call("POST", "/notification", { token, json: emailRequest({ eventName: "Not A Name" }) }),
            400,
            "parameter_invalid",
            "eventName"
          )
          const noTo = yield* call("POST", "/notification", {
            token,
            json: { channel: "email", templateId: EMAIL_TEMPLATE, data: DATA }
          })
          expect(noTo.status, noTo.text).toBe(400)
          expect(noTo.body.error.param).toBe("to")
          expect(yield* totalCount(token)).toBe(before)
        })
    )

    it.effect("unknown or malformed customerId → 400 resource_missing; nothing persisted", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const before = yield* totalCount(token)
        for (const customerId of [yield* Ids.make("cus"), "cus_nope", yield* Ids.make("usr")]) {
          expectError(
            yield* call("POST", "/notification", { token, json: emailRequest({ customerId }) }),
            400,
            "resource_missing",
            "customerId"
          )
        }
        expect(yield* totalCount(token)).toBe(before)
      })
    )
  })

  // --- GET /notification/:id ---------------------------------------------------------------------

  describe("GET /notification/:id", () => {
    it.effect("answers the notification; unknown, malformed and other-prefix ids are 404", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createNotification(token)
        expect(yield* getNotification(token, created.id)).toEqual(created)
        for (const id of [yield* Ids.make("ntf"), "ntf_nope", "nothing", yield* Ids.make("tpl"), "NTF"]) {
          expectError(yield* call("GET", `/notification/${id}`, { token }), 404, "resource_missing")
        }
      })
    )
  })

  // --- GET /notification -------------------------------------------------------------------------

  describe("GET /notification", () => {
    it.effect("{count, models} with exactly the list shape, newest first by default", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const eventName = uniqueEventName("shape")
        const first = yield* createNotification(token, emailRequest({ eventName }))
        const second = yield* createNotification(token, {
          channel: "sms",
          to: PHONE,
          templateId: SMS_TEMPLATE,
          data: DATA,
          eventName
        })
        const r = yield* listNotifications(token, { eventName })
        expect(r.status, r.text).toBe(200)
        expect(Object.keys(r.body).sort()).toEqual(["count", "models"])
        expect(r.body.count).toBe(2)
        for (const model of r.body.models) {
          expect(Object.keys(model).sort()).toEqual(["channel", "eventName", "id", "sentAt", "status", "to"])
        }
        expect(r.body.models).toEqual([
          { id: second.id, eventName, channel: "sms", to: PHONE, status: "pending", sentAt: null },
          { id: first.id, eventName, channel: "email", to: first.to, status: "pending", sentAt: null }
        ])
      })
    )

    it.effect("filters: channel, status, eventName, to (email case-insensitive)", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const eventName = uniqueEventName("filters")
        const email = yield* createNotification(token, emailRequest({ eventName }))
        const sms = yield* createNotification(token, {
          channel: "sms",
          to: PHONE,
          templateId: SMS_TEMPLATE,
          data: DATA,
          eventName
        })
        const push = yield* createNotification(token, {
          channel: "push",
          to: DEVICE_TOKEN,
          title: "T",
          body: "B",
          eventName
        })
        expect((yield* call("DELETE", `/notification/${push.id}`, { token })).status).toBe(200)
        const ids = (r: { body: { models: ReadonlyArray<{ id: string }> } }) => r.body.models.map((m) => m.id)

        for (const [channel, expected] of [
          ["email", [email.id]],
          ["sms", [sms.id]],
          ["push", [push.id]]
        ] as const) {
          const r = yield* listNotifications(token, { eventName, channel })
          expect(r.body.count, r.text).toBe(1)
          expect(ids(r)).toEqual(expected)
        }
        const pending = yield* listNotifications(token, { eventName, status: "pending" })
        expect(pending.body.count).toBe(2)
        expect(ids(pending).sort()).toEqual([email.id, sms.id].sort())
        const cancelled = yield* listNotifications(token, { eventName, status: "cancelled" })
        expect(ids(cancelled)).toEqual([push.id])
        expect((yield* listNotifications(token, { eventName, status: "sent" })).body.count).toBe(0)
        expect((yield* listNotifications(token, { eventName: uniqueEventName("none") })).body.count).toBe(0)

        // `to`: an email address in any case (and spacing), without or with the channel.
        for (const to of [email.to, email.to.toUpperCase(), `  ${email.to}  `]) {
          const r = yield* listNotifications(token, { to })
          expect(ids(r), `${to}: ${r.text}`).toEqual([email.id])
          expect(ids(yield* listNotifications(token, { to, channel: "email" }))).toEqual([email.id])
        }
        expect(ids(yield* listNotifications(token, { eventName, to: PHONE }))).toEqual([sms.id])
        expect(ids(yield* listNotifications(token, { eventName, to: DEVICE_TOKEN }))).toEqual([push.id])
        expect((yield* listNotifications(token, { to: uniqueEmail("nobody") })).body.count).toBe(0)
      })
    )

    it.effect("page/display, sort createdAt asc/desc", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const eventName = uniqueEventName("pages")
        const created: Array<string> = []
        for (let i = 0; i < 3; i++)
          created.push((yield* createNotification(token, emailRequest({ eventName }))).id)
        const [a, b, c] = created
        const ids = (r: { body: { models: ReadonlyArray<{ id: string }> } }) => r.body.models.map((m) => m.id)

        expect(ids(yield* listNotifications(token, { eventName, sort: "createdAt:asc" }))).toEqual([a, b, c])
        expect(ids(yield* listNotifications(token, { eventName, sort: "createdAt:desc" }))).toEqual([c, b, a])
        expect(ids(yield* listNotifications(token, { eventName }))).toEqual([c, b, a])

        const page1 = yield* listNotifications(token, { eventName, sort: "createdAt:asc", display: 2 })
        expect(page1.body.count).toBe(3)
        expect(ids(page1)).toEqual([a, b])
        const page2 = yield* listNotifications(token, {
          eventName,
          sort: "createdAt:asc",
          display: 2,
          page: 2
        })
        expect(page2.body.count).toBe(3)
        expect(ids(page2)).toEqual([c])
        const page3 = yield* listNotifications(token, { eventName, display: 2, page: 3 })
        expect(page3.body).toEqual({ count: 3, models: [] })
        expect(ids(yield* listNotifications(token, { eventName, display: 1, page: 2 }))).toEqual([b])
        // The default page size is 20; 100 is allowed.
        expect((yield* listNotifications(token, { display: 100 })).status).toBe(200)
        expect((yield* listNotifications(token)).body.models.length).toBeLessThanOrEqual(20)
      })
    )

    it.effect("invalid query parameters → 400 on the parameter", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const cases: ReadonlyArray<[Record<string, string | number>, string]> = [
          [{ display: 0 }, "display"],
          [{ display: 101 }, "display"],
          [{ display: "ten" }, "display"],
          [{ page: 0 }, "page"],
          [{ page: 1.5 }, "page"],
          [{ sort: "email:asc" }, "sort"],
          [{ sort: "createdAt:sideways" }, "sort"],
          [{ sort: "to" }, "sort"],
          [{ channel: "fax" }, "channel"],
          [{ status: "lost" }, "status"],
          [{ eventName: "Order Confirmed" }, "eventName"]
        ]
        for (const [params, param] of cases) {
          const r = yield* listNotifications(token, params)
          expectError(r, 400, "parameter_invalid", param)
        }
        // Every sort field the docs list is accepted, with or without a direction.
        for (const sort of ["createdAt", "sentAt:asc", "scheduledAt:desc"]) {
          const r = yield* listNotifications(token, { sort })
          expect(r.status, `${sort}: ${r.text}`).toBe(200)
        }
      })
    )
  })

  // --- PUT /notification/:id ---------------------------------------------------------------------

  describe("PUT /notification/:id", () => {
    it.effect("metadata is merged: a null key is removed, metadata: null clears it", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createNotification(token, emailRequest({ metadata: { a: 1, b: "two" } }))
        const merged = yield* call("PUT", `/notification/${created.id}`, {
          token,
          json: { metadata: { b: null, c: { nested: true } } }
        })
        expect(merged.status, merged.text).toBe(200)
        expect(Object.keys(merged.body).sort()).toEqual(NOTIFICATION_KEYS)
        expect(merged.body).toMatchObject({
          id: created.id,
          status: "pending",
          metadata: { a: 1, c: { nested: true } },
          scheduledAt: null
        })
        expect((yield* getNotification(token, created.id)).metadata).toEqual({ a: 1, c: { nested: true } })
        const cleared = yield* call("PUT", `/notification/${created.id}`, {
          token,
          json: { metadata: null }
        })
        expect(cleared.status, cleared.text).toBe(200)
        expect(cleared.body.metadata).toEqual({})
        // Everything else is unchanged.
        const { metadata: _m1, updatedAt: _u1, ...rest } = cleared.body
        const { metadata: _m2, updatedAt: _u2, ...original } = created
        expect(rest).toEqual(original)
      })
    )

    it.effect("scheduledAt can be set, changed and cleared (null: as soon as possible)", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createNotification(token)
        const later = yield* call("PUT", `/notification/${created.id}`, {
          token,
          json: { scheduledAt: "2032-01-02T03:04:05.678Z" }
        })
        expect(later.status, later.text).toBe(200)
        expect(later.body.scheduledAt).toBe("2032-01-02T03:04:05.678Z")
        const offset = yield* call("PUT", `/notification/${created.id}`, {
          token,
          json: { scheduledAt: "2032-06-01T12:00:00+02:00" }
        })
        expect(offset.body.scheduledAt).toBe("2032-06-01T10:00:00.000Z")
        const both = yield* call("PUT", `/notification/${created.id}`, {
          token,
          json: { scheduledAt: "2032-07-01", metadata: { k: "v" } }
        })
        expect(both.body).toMatchObject({ scheduledAt: "2032-07-01T00:00:00.000Z", metadata: { k: "v" } })
        const cleared = yield* call("PUT", `/notification/${created.id}`, {
          token,
          json: { scheduledAt: null }
        })
        expect(cleared.status, cleared.text).toBe(200)
        expect(cleared.body).toMatchObject({ scheduledAt: null, status: "pending", metadata: { k: "v" } })
        expect((yield* getNotification(token, created.id)).scheduledAt).toBeNull()
      })
    )

    it.effect("empty body → 400 parameter_missing; invalid values → 400; unknown → 404", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createNotification(token)
        expectError(
          yield* call("PUT", `/notification/${created.id}`, { token, json: {} }),
          400,
          "parameter_missing"
        )
        // Only metadata and scheduledAt can change: other fields alone are an empty change.
        expectError(
          yield* call("PUT", `/notification/${created.id}`, { token, json: { to: uniqueEmail() } }),
          400,
          "parameter_missing"
        )
        expectError(
          yield* call("PUT", `/notification/${created.id}`, { token, json: { scheduledAt: "2026-02-30" } }),
          400,
          "parameter_invalid",
          "scheduledAt"
        )
        expectError(
          yield* call("PUT", `/notification/${created.id}`, { token, json: { metadata: "text" } }),
          400,
          "parameter_invalid",
          "metadata"
        )
        expect(yield* getNotification(token, created.id)).toEqual(created)
        for (const id of [yield* Ids.make("ntf"), "ntf_nope"]) {
          expectError(
            yield* call("PUT", `/notification/${id}`, { token, json: { metadata: { a: 1 } } }),
            404,
            "resource_missing"
          )
        }
      })
    )

    it.effect("a cancelled notification → 409 notification_not_pending", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createNotification(token)
        expect((yield* call("DELETE", `/notification/${created.id}`, { token })).status).toBe(200)
        for (const json of [{ metadata: { a: 1 } }, { scheduledAt: "2032-01-01" }, { scheduledAt: null }]) {
          expectError(
            yield* call("PUT", `/notification/${created.id}`, { token, json }),
            409,
            "notification_not_pending"
          )
        }
        expect((yield* getNotification(token, created.id)).metadata).toEqual({})
      })
    )
  })

  // --- DELETE /notification/:id ------------------------------------------------------------------

  describe("DELETE /notification/:id", () => {
    it.effect("pending → 200 cancelled with cancelledAt; again → 409; unknown → 404", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createNotification(token, emailRequest({ scheduledAt: inSeconds(3600) }))
        const r = yield* call("DELETE", `/notification/${created.id}`, { token })
        expect(r.status, r.text).toBe(200)
        expect(Object.keys(r.body).sort()).toEqual(NOTIFICATION_KEYS)
        expect(r.body).toMatchObject({
          id: created.id,
          status: "cancelled",
          cancelledAt: expect.stringMatching(ISO_MS),
          sentAt: null,
          failedAt: null
        })
        expect(Date.parse(r.body.cancelledAt)).toBeGreaterThanOrEqual(Date.parse(created.createdAt))
        expect(yield* getNotification(token, created.id)).toEqual(r.body)
        expectError(
          yield* call("DELETE", `/notification/${created.id}`, { token }),
          409,
          "notification_not_pending"
        )
        for (const id of [yield* Ids.make("ntf"), "ntf_nope", "x"]) {
          expectError(yield* call("DELETE", `/notification/${id}`, { token }), 404, "resource_missing")
        }
      })
    )
  })

  // --- POST /notification/:id/resend -------------------------------------------------------------

  describe("POST /notification/:id/resend", () => {
    it.effect("201: a new pending one with parentId, same template and data; original unchanged", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const original = yield* createNotification(
          token,
          emailRequest({
            subject: "Again {{ displayId }}",
            data: { displayId: "42", firstName: "Ann" },
            metadata: { m: 1 },
            eventName: uniqueEventName("resend")
          })
        )
        const r = yield* call("POST", `/notification/${original.id}/resend`, { token, json: {} })
        expect(r.status, r.text).toBe(201)
        expect(Object.keys(r.body).sort()).toEqual(NOTIFICATION_KEYS)
        expect(r.body).toMatchObject({
          id: expect.stringMatching(NTF_ID),
          eventName: original.eventName,
          channel: "email",
          to: original.to,
          status: "pending",
          subject: "Again {{ displayId }}",
          templateId: EMAIL_TEMPLATE,
          data: { displayId: "42", firstName: "Ann" },
          parentId: original.id,
          scheduledAt: null,
          createdAt: expect.stringMatching(ISO_MS)
        })
        expect(r.body.id).not.toBe(original.id)
        expect(yield* getNotification(token, original.id)).toEqual(original)
        // Both are in the list.
        const listed = yield* listNotifications(token, { eventName: original.eventName })
        expect(listed.body.count).toBe(2)

        // A resend of the resend chains to it.
        const again = yield* call("POST", `/notification/${r.body.id}/resend`, { token, json: {} })
        expect(again.status, again.text).toBe(201)
        expect(again.body).toMatchObject({
          parentId: r.body.id,
          status: "pending",
          templateId: EMAIL_TEMPLATE
        })
      })
    )

    it.effect("a cancelled notification can be resent; a new `to` is used", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const original = yield* createNotification(token)
        expect((yield* call("DELETE", `/notification/${original.id}`, { token })).status).toBe(200)
        const r = yield* call("POST", `/notification/${original.id}/resend`, { token, json: {} })
        expect(r.status, r.text).toBe(201)
        expect(r.body).toMatchObject({ parentId: original.id, status: "pending", cancelledAt: null })
        expect((yield* getNotification(token, original.id)).status).toBe("cancelled")

        const to = uniqueEmail("elsewhere")
        const moved = yield* call("POST", `/notification/${original.id}/resend`, { token, json: { to } })
        expect(moved.status, moved.text).toBe(201)
        expect(moved.body).toMatchObject({ to, channel: "email", parentId: original.id })
        // The new recipient is checked like on creation.
        expectError(
          yield* call("POST", `/notification/${original.id}/resend`, { token, json: { to: "nope" } }),
          400,
          "parameter_invalid",
          "to"
        )
      })
    )

    it.effect("channel: a manual notification only on its own channel (400 channel)", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const original = yield* createNotification(token)
        const before = yield* totalCount(token)
        expectError(
          yield* call("POST", `/notification/${original.id}/resend`, { token, json: { channel: "sms" } }),
          400,
          "parameter_invalid",
          "channel"
        )
        expectError(
          yield* call("POST", `/notification/${original.id}/resend`, {
            token,
            json: { channel: "sms", to: PHONE }
          }),
          400,
          "parameter_invalid",
          "channel"
        )
        expectError(
          yield* call("POST", `/notification/${original.id}/resend`, { token, json: { channel: "fax" } }),
          400,
          "parameter_invalid",
          "channel"
        )
        expect(yield* totalCount(token)).toBe(before)
        // Its own channel, named, is fine.
        const same = yield* call("POST", `/notification/${original.id}/resend`, {
          token,
          json: { channel: "email" }
        })
        expect(same.status, same.text).toBe(201)
      })
    )

    it.effect("channel: a trigger's notification goes to the customer's phone, that channel's template", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const customer = yield* createCustomer(token, { phone: PHONE })
        const original = yield* createNotification(
          token,
          emailRequest({ to: customer.email, customerId: customer.id, eventName: "order.delivered" })
        )
        const r = yield* call("POST", `/notification/${original.id}/resend`, {
          token,
          json: { channel: "sms" }
        })
        expect(r.status, r.text).toBe(201)
        expect(r.body).toMatchObject({
          channel: "sms",
          to: PHONE,
          templateId: SMS_TEMPLATE,
          subject: null,
          parentId: original.id,
          customerId: customer.id,
          data: DATA
        })
        // No device token on record: `to` is needed.
        expectError(
          yield* call("POST", `/notification/${original.id}/resend`, {
            token,
            json: { channel: "push" }
          }),
          400,
          "parameter_missing",
          "to"
        )
      })
    )

    it.effect("a notification whose template was deleted since → 409 notification_not_resendable", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const template = yield* smsTemplate(token)
        const original = yield* createNotification(token, {
          channel: "sms",
          to: PHONE,
          templateId: template.id,
          data: { code: "1" }
        })
        // A pending notification keeps its template in use; once it is settled the template can go.
        expectError(
          yield* call("DELETE", `/notification/template/${template.id}`, { token }),
          409,
          "template_in_use"
        )
        expect((yield* call("DELETE", `/notification/${original.id}`, { token })).status).toBe(200)
        expect((yield* call("DELETE", `/notification/template/${template.id}`, { token })).status).toBe(204)
        const before = yield* totalCount(token)
        expectError(
          yield* call("POST", `/notification/${original.id}/resend`, { token, json: {} }),
          409,
          "notification_not_resendable"
        )
        expect(yield* totalCount(token)).toBe(before)
      })
    )

    it.effect("needs no body at all; a body that is not an object is a clear 400", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const original = yield* createNotification(token, {
          channel: "push",
          to: "fcm-token-0123456789abcdefghijklmnopqrstuv",
          title: "Hi",
          body: "There"
        })
        const resent = yield* call("POST", `/notification/${original.id}/resend`, { token })
        expect(resent.status, resent.text).toBe(201)
        expect(resent.body).toMatchObject({ parentId: original.id, channel: "push", status: "pending" })
        const update = yield* call("PUT", `/notification/${original.id}`, { token, json: [1] })
        expectError(update, 400, "parameter_invalid")
        expect(update.body.error.message).toBe("the request body must be a JSON object")
      })
    )

    it.effect("unknown or malformed id → 404", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        for (const id of [yield* Ids.make("ntf"), "ntf_nope"]) {
          expectError(
            yield* call("POST", `/notification/${id}/resend`, { token, json: {} }),
            404,
            "resource_missing"
          )
        }
      })
    )
  })

  // --- Settings ----------------------------------------------------------------------------------

  describe("/notification/settings", () => {
    it.effect("GET: every trigger of spec §6.5 with the default (email on); two are critical", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const settings = yield* getSettings(token)
        expect(Object.keys(settings)).toEqual(["events"])
        expect(Object.keys(settings.events).sort()).toEqual([...TRIGGERS].sort())
        for (const trigger of TRIGGERS) {
          expect(settings.events[trigger], trigger).toEqual({
            enabled: true,
            channels: ["email"],
            templateId: null,
            critical: CRITICAL.has(trigger)
          })
        }
      })
    )

    it.effect("POST merges: only the fields sent change, other triggers untouched; full settings back", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const before = yield* getSettings(token)
        const r = yield* changeSettings(token, { "order.shipped": { channels: ["email", "sms"] } })
        expect(r.status, r.text).toBe(200)
        expect(Object.keys(r.body.events).sort()).toEqual([...TRIGGERS].sort())
        expect(r.body.events["order.shipped"]).toEqual({
          enabled: true,
          channels: ["email", "sms"],
          templateId: null,
          critical: false
        })
        const off = yield* changeSettings(token, { "order.shipped": { enabled: false } })
        expect(off.status, off.text).toBe(200)
        expect(off.body.events["order.shipped"]).toEqual({
          enabled: false,
          channels: ["email", "sms"],
          templateId: null,
          critical: false
        })
        const both = yield* changeSettings(token, {
          "payment.failed": { channels: ["push"] },
          "order.confirmed": { channels: ["email", "push"] }
        })
        expect(both.status, both.text).toBe(200)
        expect(both.body.events["payment.failed"].channels).toEqual(["push"])
        expect(both.body.events["order.confirmed"]).toEqual({
          enabled: true,
          channels: ["email", "push"],
          templateId: null,
          critical: true
        })
        expect(both.body.events["order.shipped"].enabled).toBe(false)
        const after = yield* getSettings(token)
        expect(after).toEqual(both.body)
        for (const trigger of TRIGGERS) {
          if (["order.shipped", "payment.failed", "order.confirmed"].includes(trigger)) continue
          expect(after.events[trigger], trigger).toEqual(before.events[trigger])
        }
        // An empty change changes nothing and still answers the full settings.
        const none = yield* changeSettings(token, {})
        expect(none.status, none.text).toBe(200)
        expect(none.body).toEqual(after)
        // Back to the defaults for the tests that follow.
        const reset = yield* changeSettings(token, {
          "order.shipped": { enabled: true, channels: ["email"] },
          "payment.failed": { channels: ["email"] },
          "order.confirmed": { channels: ["email"] }
        })
        expect(reset.body).toEqual(before)
      })
    )

    it.effect("unknown trigger, duplicate channel, critical email off → 400; nothing applied", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const before = yield* getSettings(token)
        expectError(
          yield* changeSettings(token, { "order.teleported": { enabled: true } }),
          400,
          "parameter_invalid",
          "events.order.teleported"
        )
        expectError(
          yield* changeSettings(token, { "order.created": { enabled: true } }),
          400,
          "parameter_invalid",
          "events.order.created"
        )
        expectError(
          yield* changeSettings(token, { "order.shipped": { channels: ["sms", "sms"] } }),
          400,
          "parameter_invalid",
          "events.order.shipped.channels"
        )
        const wrongType = yield* changeSettings(token, { "order.shipped": { channels: ["fax"] } })
        expect(wrongType.status, wrongType.text).toBe(400)
        for (const trigger of ["customer.password_reset", "order.confirmed"]) {
          expectError(
            yield* changeSettings(token, { [trigger]: { enabled: false } }),
            400,
            "critical_notification",
            `events.${trigger}`
          )
          expectError(
            yield* changeSettings(token, { [trigger]: { channels: ["sms", "push"] } }),
            400,
            "critical_notification",
            `events.${trigger}`
          )
          expectError(
            yield* changeSettings(token, { [trigger]: { channels: [] } }),
            400,
            "critical_notification",
            `events.${trigger}`
          )
        }
        // A valid change next to an invalid one is not applied either.
        expectError(
          yield* changeSettings(token, {
            "order.delivered": { enabled: false },
            "customer.password_reset": { enabled: false }
          }),
          400,
          "critical_notification"
        )
        expect(yield* getSettings(token)).toEqual(before)
        // A non-critical trigger may be switched off entirely.
        const off = yield* changeSettings(token, { "order.delivered": { enabled: false, channels: [] } })
        expect(off.status, off.text).toBe(200)
        expect(off.body.events["order.delivered"]).toMatchObject({ enabled: false, channels: [] })
        const reset = yield* changeSettings(token, {
          "order.delivered": { enabled: true, channels: ["email"] }
        })
        expect(reset.body).toEqual(before)
      })
    )

    it.effect("templateId: a custom template of one of the trigger's channels; null resets", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const sms = yield* smsTemplate(token, "Shipped {{ displayId }}")
        const push = yield* pushTemplate(token)
        expectError(
          yield* changeSettings(token, { "order.shipped": { templateId: yield* Ids.make("tpl") } }),
          400,
          "resource_missing",
          "events.order.shipped.templateId"
        )
        // sms is not one of order.shipped's channels (email only by default).
        expectError(
          yield* changeSettings(token, { "order.shipped": { templateId: sms.id } }),
          400,
          "parameter_invalid",
          "events.order.shipped.templateId"
        )
        const set = yield* changeSettings(token, {
          "order.shipped": { channels: ["email", "sms"], templateId: sms.id }
        })
        expect(set.status, set.text).toBe(200)
        expect(set.body.events["order.shipped"]).toEqual({
          enabled: true,
          channels: ["email", "sms"],
          templateId: sms.id,
          critical: false
        })
        // The check is on the merged setting: dropping sms while its template is selected → 400.
        expectError(
          yield* changeSettings(token, { "order.shipped": { channels: ["email"] } }),
          400,
          "parameter_invalid",
          "events.order.shipped.templateId"
        )
        expectError(
          yield* changeSettings(token, { "order.shipped": { templateId: push.id } }),
          400,
          "parameter_invalid",
          "events.order.shipped.templateId"
        )
        expect((yield* getSettings(token)).events["order.shipped"].templateId).toBe(sms.id)
        // Another trigger's built-in would send the wrong copy (and read variables the event lacks).
        expectError(
          yield* changeSettings(token, {
            "order.shipped": { templateId: "tpl_builtin_order_confirmed_email" }
          }),
          400,
          "parameter_invalid",
          "events.order.shipped.templateId"
        )
        expect((yield* getSettings(token)).events["order.shipped"].templateId).toBe(sms.id)
        const reset = yield* changeSettings(token, {
          "order.shipped": { templateId: null, channels: ["email"] }
        })
        expect(reset.status, reset.text).toBe(200)
        expect(reset.body.events["order.shipped"]).toEqual({
          enabled: true,
          channels: ["email"],
          templateId: null,
          critical: false
        })
      })
    )
  })

  // --- Templates ---------------------------------------------------------------------------------

  describe("/notification/template", () => {
    it.effect(
      "GET lists {count, models}: the 31 built-ins (every trigger × channel, the webhook alert) and custom ones; ?channel filters",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const custom = yield* smsTemplate(token, "Listed {{ code }}")
          const r = yield* call("GET", "/notification/template", { token })
          expect(r.status, r.text).toBe(200)
          // The base list shape, like GET /notification and GET /user: every template, unpaged.
          expect(Object.keys(r.body).sort()).toEqual(["count", "models"])
          expect(Array.isArray(r.body.models)).toBe(true)
          expect(r.body.count).toBe(r.body.models.length)
          const builtIns = r.body.models.filter((t: Body) => t.builtIn)
          expect(builtIns).toHaveLength(31)
          expect(builtIns.find((b: Body) => b.id === "tpl_builtin_webhook_disabled_email")).toMatchObject({
            channel: "email",
            trigger: "webhook.disabled"
          })
          for (const trigger of TRIGGERS) {
            for (const channel of ["email", "sms", "push"]) {
              const id = `tpl_builtin_${trigger.replace(".", "_")}_${channel}`
              const t = builtIns.find((b: Body) => b.id === id)
              expect(t, id).toBeDefined()
              expect(Object.keys(t).sort()).toEqual(TEMPLATE_KEYS)
              expect(t).toMatchObject({ channel, trigger, builtIn: true, createdAt: null, updatedAt: null })
              expect(t.body.length).toBeGreaterThan(0)
              if (channel === "email") expect(typeof t.subject).toBe("string")
              else expect(t.subject).toBeNull()
              if (channel === "push") expect(typeof t.title).toBe("string")
              else expect(t.title).toBeNull()
            }
          }
          const listed = r.body.models.find((t: Body) => t.id === custom.id)
          expect(listed).toEqual(custom)

          const sms = yield* call("GET", "/notification/template?channel=sms", { token })
          expect(sms.status, sms.text).toBe(200)
          expect(sms.body.models.every((t: Body) => t.channel === "sms")).toBe(true)
          expect(sms.body.models.filter((t: Body) => t.builtIn)).toHaveLength(10)
          expect(sms.body.models.some((t: Body) => t.id === custom.id)).toBe(true)
          expect(sms.body.count).toBe(sms.body.models.length)
          const email = yield* call("GET", "/notification/template?channel=email", { token })
          expect(email.body.models.some((t: Body) => t.id === custom.id)).toBe(false)
          expectError(
            yield* call("GET", "/notification/template?channel=fax", { token }),
            400,
            "parameter_invalid",
            "channel"
          )
        })
    )

    it.effect("POST creates (201, tpl_…, variables computed); usable by a notification", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const r = yield* call("POST", "/notification/template", {
          token,
          json: {
            name: "  Welcome ",
            channel: "email",
            subject: "Hello {{ firstName }}",
            body: "Your code: {{ code | upcase }}{% if note %} ({{ note }}){% endif %} {{ store.name }}"
          }
        })
        expect(r.status, r.text).toBe(201)
        expect(Object.keys(r.body).sort()).toEqual(TEMPLATE_KEYS)
        expect(r.body).toEqual({
          id: expect.stringMatching(TPL_ID),
          name: "Welcome",
          channel: "email",
          subject: "Hello {{ firstName }}",
          title: null,
          body: "Your code: {{ code | upcase }}{% if note %} ({{ note }}){% endif %} {{ store.name }}",
          variables: ["code", "firstName", "note", "store"],
          builtIn: false,
          trigger: null,
          createdAt: expect.stringMatching(ISO_MS),
          updatedAt: expect.stringMatching(ISO_MS)
        })
        const got = yield* call("GET", `/notification/template/${r.body.id}`, { token })
        expect(got.status, got.text).toBe(200)
        expect(got.body).toEqual(r.body)

        const sent = yield* createNotification(
          token,
          emailRequest({ templateId: r.body.id, data: { firstName: "Ann", code: "abc" } })
        )
        expect(sent.templateId).toBe(r.body.id)
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: emailRequest({ templateId: r.body.id, data: { firstName: "Ann" } })
          }),
          400,
          "template_variable_missing",
          "data"
        )
        const push = yield* pushTemplate(token)
        expect(push).toMatchObject({ channel: "push", title: "Hello", subject: null, variables: ["name"] })
        const sms = yield* smsTemplate(token)
        expect(sms).toMatchObject({ channel: "sms", title: null, subject: null, variables: ["code"] })
      })
    )

    it.effect("POST: bad Liquid, missing/foreign parts, include → 400 template_invalid on the field", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const before = (yield* call("GET", "/notification/template", { token })).body.count
        const cases: ReadonlyArray<[Record<string, unknown>, string]> = [
          [{ channel: "email", subject: "S", body: "{% if x %}open" }, "body"],
          [{ channel: "email", subject: "{{ name ", body: "B" }, "subject"],
          [{ channel: "email", subject: "S", body: "{{ x | nosuchfilter }}" }, "body"],
          [{ channel: "email", subject: "S", body: "{% nosuchtag %}" }, "body"],
          [{ channel: "email", body: "B" }, "subject"],
          [{ channel: "email", subject: "   ", body: "B" }, "subject"],
          [{ channel: "email", subject: "S", body: "B", title: "T" }, "title"],
          [{ channel: "email", subject: "S", body: "" }, "body"],
          [{ channel: "sms", subject: "S", body: "B" }, "subject"],
          [{ channel: "push", body: "B" }, "title"],
          [{ channel: "push", title: "T", subject: "S", body: "B" }, "subject"],
          [{ channel: "email", subject: "S", body: "{% include 'secrets' %}" }, "body"],
          [{ channel: "sms", body: "{% render 'x' %}" }, "body"],
          [{ channel: "push", title: "{% layout 'x' %}", body: "B" }, "title"]
        ]
        for (const [fields, param] of cases) {
          const r = yield* call("POST", "/notification/template", {
            token,
            json: { name: "Bad", ...fields }
          })
          expectError(r, 400, "template_invalid", param)
        }
        // Schema-level problems: a missing name or body, an unknown channel.
        for (const json of [
          { channel: "sms", body: "B" },
          { name: "N", channel: "sms" },
          { name: "N", channel: "fax", body: "B" }
        ]) {
          const r = yield* call("POST", "/notification/template", { token, json })
          expect(r.status, r.text).toBe(400)
        }
        expect((yield* call("GET", "/notification/template", { token })).body.count).toBe(before)
      })
    )

    it.effect("GET /:id: built-in and custom; unknown → 404", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const builtIn = yield* call("GET", `/notification/template/${EMAIL_TEMPLATE}`, { token })
        expect(builtIn.status, builtIn.text).toBe(200)
        expect(builtIn.body).toMatchObject({
          id: EMAIL_TEMPLATE,
          channel: "email",
          builtIn: true,
          trigger: "order.delivered",
          subject: expect.stringContaining("{{ displayId }}")
        })
        expect(builtIn.body.variables).toContain("displayId")
        const custom = yield* smsTemplate(token)
        const got = yield* call("GET", `/notification/template/${custom.id}`, { token })
        expect(got.body).toEqual(custom)
        for (const id of [yield* Ids.make("tpl"), "tpl_nope", "tpl_builtin_order_teleported_sms", "x"]) {
          expectError(yield* call("GET", `/notification/template/${id}`, { token }), 404, "resource_missing")
        }
      })
    )

    it.effect("PUT updates a custom template (validated); subject: null on email → 400; built-in → 409", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createTemplate(token, {
          name: "Editable",
          channel: "email",
          subject: "Hi {{ firstName }}",
          body: "Body {{ a }}"
        })
        const r = yield* call("PUT", `/notification/template/${created.id}`, {
          token,
          json: { body: "New body {{ b }}" }
        })
        expect(r.status, r.text).toBe(200)
        expect(r.body).toMatchObject({
          id: created.id,
          name: "Editable",
          channel: "email",
          subject: "Hi {{ firstName }}",
          body: "New body {{ b }}",
          variables: ["b", "firstName"],
          builtIn: false,
          createdAt: created.createdAt
        })
        const renamed = yield* call("PUT", `/notification/template/${created.id}`, {
          token,
          json: { name: "Renamed", subject: "Yo" }
        })
        expect(renamed.body).toMatchObject({ name: "Renamed", subject: "Yo", variables: ["b"] })
        expect((yield* call("GET", `/notification/template/${created.id}`, { token })).body).toEqual(
          renamed.body
        )

        expectError(
          yield* call("PUT", `/notification/template/${created.id}`, { token, json: { subject: null } }),
          400,
          "template_invalid",
          "subject"
        )
        expectError(
          yield* call("PUT", `/notification/template/${created.id}`, {
            token,
            json: { body: "{% if %}" }
          }),
          400,
          "template_invalid",
          "body"
        )
        expectError(
          yield* call("PUT", `/notification/template/${created.id}`, { token, json: { title: "T" } }),
          400,
          "template_invalid",
          "title"
        )
        expect((yield* call("GET", `/notification/template/${created.id}`, { token })).body).toEqual(
          renamed.body
        )

        // A push template's title can change; null removes it, which push refuses.
        const push = yield* pushTemplate(token)
        const retitled = yield* call("PUT", `/notification/template/${push.id}`, {
          token,
          json: { title: "New {{ who }}" }
        })
        expect(retitled.body).toMatchObject({ title: "New {{ who }}", variables: ["name", "who"] })
        expectError(
          yield* call("PUT", `/notification/template/${push.id}`, { token, json: { title: null } }),
          400,
          "template_invalid",
          "title"
        )

        expectError(
          yield* call("PUT", `/notification/template/${EMAIL_TEMPLATE}`, { token, json: { body: "x" } }),
          409,
          "template_read_only"
        )
        for (const id of [yield* Ids.make("tpl"), "tpl_nope"]) {
          expectError(
            yield* call("PUT", `/notification/template/${id}`, { token, json: { body: "x" } }),
            404,
            "resource_missing"
          )
        }
      })
    )

    it.effect("DELETE: custom 204 then 404; built-in 409; selected in settings 409 template_in_use", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const doomed = yield* smsTemplate(token)
        const r = yield* call("DELETE", `/notification/template/${doomed.id}`, { token })
        expect(r.status, r.text).toBe(204)
        expect(r.text).toBe("")
        expectError(
          yield* call("GET", `/notification/template/${doomed.id}`, { token }),
          404,
          "resource_missing"
        )
        expectError(
          yield* call("DELETE", `/notification/template/${doomed.id}`, { token }),
          404,
          "resource_missing"
        )
        const listed = (yield* call("GET", "/notification/template", { token })).body.models.map(
          (t: Body) => t.id
        )
        expect(listed).not.toContain(doomed.id)
        // A deleted template can no longer be used.
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: { channel: "sms", to: PHONE, templateId: doomed.id, data: { code: "1" } }
          }),
          400,
          "resource_missing",
          "templateId"
        )

        expectError(
          yield* call("DELETE", `/notification/template/${SMS_TEMPLATE}`, { token }),
          409,
          "template_read_only"
        )
        expectError(
          yield* call("DELETE", `/notification/template/${yield* Ids.make("tpl")}`, { token }),
          404,
          "resource_missing"
        )

        const used = yield* smsTemplate(token)
        const set = yield* changeSettings(token, {
          "order.refunded": { channels: ["email", "sms"], templateId: used.id }
        })
        expect(set.status, set.text).toBe(200)
        const inUse = yield* call("DELETE", `/notification/template/${used.id}`, { token })
        expectError(inUse, 409, "template_in_use")
        expect(inUse.body.error.message).toContain("order.refunded")
        expect((yield* call("GET", `/notification/template/${used.id}`, { token })).status).toBe(200)
        const released = yield* changeSettings(token, {
          "order.refunded": { templateId: null, channels: ["email"] }
        })
        expect(released.status, released.text).toBe(200)
        expect((yield* call("DELETE", `/notification/template/${used.id}`, { token })).status).toBe(204)
      })
    )
  })

  // --- Auth --------------------------------------------------------------------------------------

  describe("auth", () => {
    it.effect("no token → 401; a shopper → 403; read:notifications reads but cannot write", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createNotification(token)
        const custom = yield* smsTemplate(token)
        const routes: ReadonlyArray<["GET" | "POST" | "PUT" | "DELETE", string, unknown, "read" | "write"]> =
          [
            ["GET", "/notification", undefined, "read"],
            ["GET", `/notification/${created.id}`, undefined, "read"],
            ["GET", "/notification/settings", undefined, "read"],
            ["GET", "/notification/template", undefined, "read"],
            ["GET", `/notification/template/${custom.id}`, undefined, "read"],
            ["POST", "/notification", emailRequest(), "write"],
            ["PUT", `/notification/${created.id}`, { metadata: { x: 1 } }, "write"],
            ["POST", `/notification/${created.id}/resend`, {}, "write"],
            ["POST", "/notification/settings", { events: {} }, "write"],
            ["POST", "/notification/template", { name: "N", channel: "sms", body: "B" }, "write"],
            ["PUT", `/notification/template/${custom.id}`, { body: "B2" }, "write"],
            ["DELETE", `/notification/template/${custom.id}`, undefined, "write"],
            ["DELETE", `/notification/${created.id}`, undefined, "write"]
          ]
        const shopper = yield* registerShopper()
        const reader = yield* apiKeyWith(["read:notifications"])
        const writerOfOther = yield* apiKeyWith(["read:customers", "write:customers"])
        const before = yield* totalCount(token)
        for (const [method, path, json, access] of routes) {
          const what = `${method} ${path}`
          const anonymous = yield* call(method, path, { json })
          expect(anonymous.status, `${what}: ${anonymous.text}`).toBe(401)
          expectError(anonymous, 401, "missing_credentials")
          const bad = yield* call(method, path, { json, token: "not-a-token" })
          expect(bad.status, `${what}: ${bad.text}`).toBe(401)
          expectError(
            yield* call(method, path, { json, token: shopper.accessToken }),
            403,
            "insufficient_scope"
          )
          expectError(
            yield* call(method, path, { json, token: writerOfOther.key }),
            403,
            "insufficient_scope"
          )
          const byReader = yield* call(method, path, { json, token: reader.key })
          if (access === "read") expect(byReader.status, `${what}: ${byReader.text}`).toBe(200)
          else expectError(byReader, 403, "insufficient_scope")
        }
        // Nothing was changed by the refused calls.
        expect(yield* totalCount(token)).toBe(before)
        expect(yield* getNotification(token, created.id)).toEqual(created)
        expect((yield* call("GET", `/notification/template/${custom.id}`, { token })).body).toEqual(custom)
        // An API key with write:notifications creates.
        const writer = yield* apiKeyWith(["read:notifications", "write:notifications"])
        yield* createNotification(writer.key)
      })
    )
  })

  // --- Idempotency -------------------------------------------------------------------------------

  describe("Idempotency-Key on POST /notification", () => {
    it.effect("the same key twice creates one notification; the replay says Idempotent-Replayed", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const json = emailRequest()
        const headers = { "idempotency-key": `ntf-${json.to}` }
        const first = yield* call("POST", "/notification", { token, json, headers })
        expect(first.status, first.text).toBe(201)
        expect(first.headers["idempotent-replayed"]).toBeUndefined()
        const replay = yield* call("POST", "/notification", { token, json, headers })
        expect(replay.status, replay.text).toBe(201)
        expect(replay.headers["idempotent-replayed"]).toBe("true")
        expect(replay.body).toEqual(first.body)
        const listed = yield* listNotifications(token, { to: json.to })
        expect(listed.body.count).toBe(1)
        expectError(
          yield* call("POST", "/notification", {
            token,
            json: { ...json, metadata: { other: 1 } },
            headers
          }),
          422,
          "idempotency_key_reused"
        )
        // Without the key, the same body is a second notification.
        yield* createNotification(token, json)
        expect((yield* listNotifications(token, { to: json.to })).body.count).toBe(2)
      })
    )
  })
})

// --- With the sender running -----------------------------------------------------------------------

layer(notificationsHttp(), OPTIONS)("notifications over HTTP (sender running)", (it) => {
  it.effect("a cancelled notification is never sent; an uncancelled one is", () =>
    Effect.gen(function* () {
      const { smtp } = yield* Peers
      const token = yield* adminToken
      const cancelledTo = uniqueEmail("cancelled")
      const scheduled = yield* createNotification(
        token,
        emailRequest({ to: cancelledTo, scheduledAt: inSeconds(1) })
      )
      const cancelled = yield* call("DELETE", `/notification/${scheduled.id}`, { token })
      expect(cancelled.status, cancelled.text).toBe(200)
      expect(cancelled.body.status).toBe("cancelled")

      // The control: the sender is running and delivers a notification that was not cancelled.
      const controlTo = uniqueEmail("control")
      const control = yield* createNotification(token, emailRequest({ to: controlTo }))
      const sent = yield* eventually(
        Effect.map(getNotification(token, control.id), (n) => (n.status === "sent" ? n : undefined)),
        10_000
      )
      expect(sent.sentAt).toMatch(ISO_MS)
      const mail = smtp.messages.find((m) => m.to.includes(controlTo))
      expect(mail?.subject).toBe("Your order #1001 has been delivered")

      // Until well past the cancelled one's time (2 s after it was due).
      yield* Effect.sleep(Math.max(0, Date.parse(scheduled.scheduledAt) + 2_000 - Date.now()))
      expect(smtp.messages.some((m) => m.to.includes(cancelledTo))).toBe(false)
      const after = yield* getNotification(token, scheduled.id)
      expect(after).toMatchObject({ status: "cancelled", attempts: 0, sentAt: null })
      expectError(
        yield* call("DELETE", `/notification/${control.id}`, { token }),
        409,
        "notification_not_pending"
      )
      expectError(
        yield* call("PUT", `/notification/${control.id}`, { token, json: { metadata: { a: 1 } } }),
        409,
        "notification_not_pending"
      )
    })
  )
})
