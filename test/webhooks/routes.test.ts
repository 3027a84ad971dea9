/**
 * The webhooks surface over real HTTP (spec §2.5, §4.3, §4.5, §6; design/API.md; design/WEBHOOKS-
 * NOTIFICATIONS.md): the `/webhook` registry (create with its secret shown once, list, get, update,
 * delete), secret rotation, test sends to a real local receiver, the delivery log, redelivery and
 * recovery, the `/v1/webhooks` shapes with keyset paging, the SSRF guard at registration, auth and
 * Idempotency-Key. The main suite runs WITHOUT the webhook processors (nothing is delivered on its
 * own, so the delivery log stays deterministic); a second suite runs them to redeliver a real
 * delivery; a third turns the SSRF guard on.
 */
import { createHmac } from "node:crypto"
import { describe, layer } from "@effect/vitest"
import { Effect, Layer, Logger, LogLevel } from "effect"
import { Webhook as StandardWebhook } from "standardwebhooks"
import { expect } from "vitest"
import { makeAppConfig } from "../../src/config.js"
import { Keyring } from "../../src/eventstore/Keyring.js"
import * as Ids from "../../src/kernel/Ids.js"
import { SAMPLE_DATA, WEBHOOK_EVENT_TYPES } from "../../src/webhooks/catalogue.js"
import { adminToken } from "../support/customers.js"
import { apiKeyWith, call, expectError, identityHttp, registerShopper } from "../support/identity.js"
import { eventually } from "../support/notifications.js"
import { Behaviour } from "../support/receiver.js"
import { publish, TestReceiver, webhooksHttp } from "../support/webhooks.js"

// biome-ignore lint/suspicious/noExplicitAny: test bodies are inspected field by field
type Body = any

const OPTIONS = { excludeTestServices: true, timeout: 120_000 } as const

const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
const WH_ID = /^wh_[0-9a-z]{26}$/
const DAY_MS = 24 * 3_600_000
/**
 * How long the processors suite waits for a delivery. Generous: on a shared PostgreSQL server the
 * gap-safe feed waits for every older transaction in the cluster, other suites' included.
 */
const SETTLE_MS = 30_000

const VIEW_KEYS = [
  "createdAt",
  "disabledReason",
  "events",
  "failingSince",
  "id",
  "metadata",
  "previousSecretExpiresAt",
  "status",
  "updatedAt",
  "url"
]
const SUMMARY_KEYS = ["createdAt", "events", "id", "status", "url"]
const V1_KEYS = ["createdAt", "events", "id", "metadata", "object", "status", "updatedAt", "url"]

let counter = 0
/** A URL no other test uses (on a public-looking host; the main suite never sends to it). */
const uniqueUrl = (label = "hook") =>
  `https://hooks.example.com/${label}/${Date.now().toString(36)}-${counter++}`

/** Checks a secret: `whsec_` + base64 of at least 32 bytes. */
const expectSecret = (secret: unknown) => {
  expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/)
  expect(Buffer.from(String(secret).slice("whsec_".length), "base64").length).toBeGreaterThanOrEqual(32)
}

/** `POST /webhook`, asserting 201. */
const createWebhook = (token: string, json: Record<string, unknown> = {}) =>
  Effect.map(
    call("POST", "/webhook", { token, json: { url: uniqueUrl(), events: ["order.created"], ...json } }),
    (r) => {
      expect(r.status, r.text).toBe(201)
      return r.body as Body
    }
  )

/** `GET /webhook/:id`, asserting 200. */
const getWebhook = (token: string, id: string) =>
  Effect.map(call("GET", `/webhook/${id}`, { token }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.body as Body
  })

const query = (params: Record<string, string | number>) => {
  const text = new URLSearchParams(
    Object.entries(params).map(([k, v]): [string, string] => [k, String(v)])
  ).toString()
  return text === "" ? "" : `?${text}`
}

/** Every webhook of `GET /webhook`, all pages. */
const listAll = (token: string) =>
  Effect.gen(function* () {
    const all: Array<Body> = []
    for (let page = 1; ; page++) {
      const r = yield* call("GET", `/webhook${query({ page, display: 100 })}`, { token })
      expect(r.status, r.text).toBe(200)
      all.push(...r.body.models)
      if (r.body.models.length < 100) return { count: r.body.count as number, models: all }
    }
  })

/** Every webhook of `GET /v1/webhooks`, all pages. */
const listAllV1 = (token: string) =>
  Effect.gen(function* () {
    const all: Array<Body> = []
    let after: string | undefined
    while (true) {
      const r = yield* call(
        "GET",
        `/v1/webhooks${query({ limit: 100, ...(after === undefined ? {} : { startingAfter: after }) })}`,
        { token }
      )
      expect(r.status, r.text).toBe(200)
      all.push(...r.body.data)
      if (!r.body.hasMore) return all
      after = r.body.data[r.body.data.length - 1].id
    }
  })

const hmacHex = (secret: string, timestamp: string, body: string) =>
  createHmac("sha256", secret).update(`${timestamp}.${body}`).digest("hex")

// --- Without the processors ---------------------------------------------------------------------------

layer(webhooksHttp({ processors: false }), OPTIONS)("webhooks over HTTP", (it) => {
  describe("POST /webhook", () => {
    it.effect("201: the webhook with its secret, shown only here (never by GET, list or PUT)", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const url = uniqueUrl()
        const created = yield* createWebhook(token, {
          url,
          events: ["order.created", "payment.failed", "order.created"],
          metadata: { team: "ops", tier: 2 }
        })
        expect(Object.keys(created).sort()).toEqual([...VIEW_KEYS, "secret"].sort())
        expect(created.id).toMatch(WH_ID)
        expect(created).toMatchObject({
          url,
          // Duplicates dropped, order kept.
          events: ["order.created", "payment.failed"],
          status: "active",
          metadata: { team: "ops", tier: 2 },
          failingSince: null,
          disabledReason: null,
          previousSecretExpiresAt: null
        })
        expect(created.createdAt).toMatch(ISO_MS)
        expect(created.updatedAt).toMatch(ISO_MS)
        expectSecret(created.secret)

        const got = yield* getWebhook(token, created.id)
        expect(Object.keys(got).sort()).toEqual(VIEW_KEYS)
        const { secret: _, ...withoutSecret } = created
        expect(got).toEqual(withoutSecret)
        const listed = (yield* listAll(token)).models.find((m: Body) => m.id === created.id)
        expect(listed).toEqual({
          id: created.id,
          url,
          events: created.events,
          status: "active",
          createdAt: created.createdAt
        })
        const updated = yield* call("PUT", `/webhook/${created.id}`, {
          token,
          json: { events: ["order.updated"] }
        })
        expect(updated.status, updated.text).toBe(200)
        expect(updated.body.secret).toBeUndefined()
        expect(updated.text).not.toContain(created.secret)
        const v1 = (yield* listAllV1(token)).find((m: Body) => m.id === created.id)
        expect(v1.secret).toBeUndefined()

        // Another webhook gets another secret.
        const other = yield* createWebhook(token)
        expect(other.secret).not.toBe(created.secret)
      })
    )

    it.effect("events: unknown types, an empty list or not a list of strings → 400 param events", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const post = (json: unknown) => call("POST", "/webhook", { token, json })
        const unknown = yield* post({ url: uniqueUrl(), events: ["order.created", "order.exploded"] })
        expectError(unknown, 400, "parameter_invalid", "events")
        expect(unknown.body.error.message).toContain('"order.exploded"')
        expect(unknown.body.error.message).toContain("order.created")
        expectError(yield* post({ url: uniqueUrl(), events: [] }), 400, "parameter_invalid", "events")
        for (const events of ["order.created", [1], [null], { 0: "order.created" }]) {
          const r = yield* post({ url: uniqueUrl(), events })
          expectError(r, 400, "parameter_invalid", "events")
          expect(r.body.error.message).toBe("events must be an array of event type strings")
        }
        expectError(yield* post({ url: uniqueUrl() }), 400, "parameter_missing", "events")
        // Every catalogue type is accepted.
        const all = yield* createWebhook(token, { events: [...WEBHOOK_EVENT_TYPES] })
        expect(all.events).toEqual([...WEBHOOK_EVENT_TYPES])
      })
    )

    it.effect("url: missing, not a string, not http(s) or not a URL → 400 param url", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const post = (json: unknown) => call("POST", "/webhook", { token, json })
        const events = ["order.created"]
        expectError(yield* post({ events }), 400, "parameter_missing", "url")
        const notString = yield* post({ url: 42, events })
        expectError(notString, 400, "parameter_invalid", "url")
        expect(notString.body.error.message).toBe("url must be a string")
        for (const url of [
          "ftp://x",
          "not a url",
          "",
          "javascript:alert(1)",
          `https://x.example/${"a".repeat(2048)}`
        ]) {
          expectError(yield* post({ url, events }), 400, "parameter_invalid", "url")
        }
      })
    )

    it.effect("metadata that is not an object, or a body that is not one → 400", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const metadata = yield* call("POST", "/webhook", {
          token,
          json: { url: uniqueUrl(), events: ["order.created"], metadata: "x" }
        })
        expectError(metadata, 400, "parameter_invalid", "metadata")
        expect(metadata.body.error.message).toBe("metadata must be a JSON object")
        expectError(yield* call("POST", "/webhook", { token, json: [] }), 400, "parameter_invalid")
        expectError(yield* call("POST", "/webhook", { token }), 400, "parameter_invalid")
      })
    )
  })

  describe("GET /webhook", () => {
    it.effect("the list form (id, url, events, status, createdAt), oldest first, paged", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const a = yield* createWebhook(token, { metadata: { secretish: "no" } })
        const b = yield* createWebhook(token)
        const { count, models } = yield* listAll(token)
        expect(count).toBe(models.length)
        for (const m of models) expect(Object.keys(m).sort()).toEqual(SUMMARY_KEYS)
        const ids = models.map((m: Body) => m.id)
        expect(ids.indexOf(a.id)).toBeGreaterThanOrEqual(0)
        expect(ids.indexOf(b.id)).toBe(ids.indexOf(a.id) + 1)

        // Paging: `display` per page, `page` from 1.
        const position = ids.indexOf(b.id) + 1
        const page = yield* call("GET", `/webhook${query({ page: position, display: 1 })}`, { token })
        expect(page.status, page.text).toBe(200)
        expect(page.body.count).toBe(count)
        expect(page.body.models.map((m: Body) => m.id)).toEqual([b.id])
        const beyond = yield* call("GET", `/webhook${query({ page: count + 1, display: 1 })}`, { token })
        expect(beyond.body).toEqual({ count, models: [] })
        const defaults = yield* call("GET", "/webhook", { token })
        expect(defaults.body.models.length).toBe(Math.min(20, count))
      })
    )

    it.effect("display 0 or 101, page 0 or not a number → 400", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        for (const [params, param] of [
          [{ display: 0 }, "display"],
          [{ display: 101 }, "display"],
          [{ display: "x" }, "display"],
          [{ page: 0 }, "page"],
          [{ page: 1.5 }, "page"]
        ] as const) {
          expectError(
            yield* call("GET", `/webhook${query(params)}`, { token }),
            400,
            "parameter_invalid",
            param
          )
        }
      })
    )
  })

  describe("GET /webhook/:id", () => {
    it.effect("the full view; an unknown or ill-formed id → 404", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createWebhook(token, { metadata: { a: 1 } })
        const got = yield* getWebhook(token, created.id)
        expect(got).toMatchObject({ id: created.id, url: created.url, metadata: { a: 1 }, status: "active" })
        for (const id of [
          yield* Ids.make("wh"),
          "nope",
          "wh_",
          (yield* Ids.make("ntf")).replace("ntf_", "wh_x")
        ]) {
          expectError(yield* call("GET", `/webhook/${id}`, { token }), 404, "resource_missing", "id")
        }
      })
    )
  })

  describe("PUT /webhook/:id", () => {
    it.effect("changes url and events; metadata is a patch (null removes a key, null clears)", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createWebhook(token, { metadata: { a: 1, b: 2 } })
        const put = (json: unknown) => call("PUT", `/webhook/${created.id}`, { token, json })

        const url = uniqueUrl("moved")
        const moved = yield* put({ url })
        expect(moved.status, moved.text).toBe(200)
        expect(Object.keys(moved.body).sort()).toEqual(VIEW_KEYS)
        expect(moved.body).toMatchObject({
          id: created.id,
          url,
          events: ["order.created"],
          metadata: { a: 1, b: 2 }
        })
        expect(Date.parse(moved.body.updatedAt)).toBeGreaterThanOrEqual(Date.parse(created.updatedAt))
        expect(moved.body.createdAt).toBe(created.createdAt)

        const events = yield* put({ events: ["payment.captured", "payment.refunded"] })
        expect(events.body.events).toEqual(["payment.captured", "payment.refunded"])
        expect(events.body.url).toBe(url)

        const patched = yield* put({ metadata: { b: null, c: "three" } })
        expect(patched.status, patched.text).toBe(200)
        expect(patched.body.metadata).toEqual({ a: 1, c: "three" })
        const cleared = yield* put({ metadata: null })
        expect(cleared.body.metadata).toEqual({})
        expect(yield* getWebhook(token, created.id)).toEqual(cleared.body)
        // The list shows the change too.
        const listed = (yield* listAll(token)).models.find((m: Body) => m.id === created.id)
        expect(listed).toMatchObject({ url, events: ["payment.captured", "payment.refunded"] })
      })
    )

    it.effect("status disabled, then active again; failing → 400", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createWebhook(token)
        const put = (json: unknown) => call("PUT", `/webhook/${created.id}`, { token, json })
        const disabled = yield* put({ status: "disabled" })
        expect(disabled.status, disabled.text).toBe(200)
        expect(disabled.body).toMatchObject({ status: "disabled", disabledReason: "manual" })
        expect((yield* listAll(token)).models.find((m: Body) => m.id === created.id).status).toBe("disabled")
        // Disabling again changes nothing.
        expect((yield* put({ status: "disabled" })).body.status).toBe("disabled")
        const enabled = yield* put({ status: "active" })
        expect(enabled.status, enabled.text).toBe(200)
        expect(enabled.body).toMatchObject({ status: "active", disabledReason: null, failingSince: null })

        const failing = yield* put({ status: "failing" })
        expectError(failing, 400, "parameter_invalid", "status")
        expect(failing.body.error.message).toContain("failing is set by deliveries")
        expectError(yield* put({ status: "paused" }), 400, "parameter_invalid", "status")
        expect((yield* getWebhook(token, created.id)).status).toBe("active")
      })
    )

    it.effect("nothing to change, bad fields or an unknown id → 4xx, and nothing changes", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createWebhook(token)
        const before = yield* getWebhook(token, created.id)
        const put = (json: unknown) => call("PUT", `/webhook/${created.id}`, { token, json })
        expectError(yield* put({}), 400, "parameter_missing")
        expectError(yield* put({ unrelated: 1 }), 400, "parameter_missing")
        expectError(yield* put({ url: "ftp://x" }), 400, "parameter_invalid", "url")
        expectError(yield* put({ url: 1 }), 400, "parameter_invalid", "url")
        expectError(yield* put({ events: [] }), 400, "parameter_invalid", "events")
        expectError(yield* put({ events: ["nope.nope"] }), 400, "parameter_invalid", "events")
        expectError(yield* put({ metadata: [1] }), 400, "parameter_invalid", "metadata")
        expectError(yield* put(null), 400, "parameter_invalid")
        expect(yield* getWebhook(token, created.id)).toEqual(before)
        expectError(
          yield* call("PUT", `/webhook/${yield* Ids.make("wh")}`, { token, json: { status: "active" } }),
          404,
          "resource_missing",
          "id"
        )
        expectError(
          yield* call("PUT", "/webhook/zzz", { token, json: { status: "active" } }),
          404,
          "resource_missing"
        )
      })
    )
  })

  describe("DELETE /webhook/:id", () => {
    it.effect("204 without a body; then it is gone everywhere (GET, lists, PUT, DELETE → 404)", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createWebhook(token)
        const deleted = yield* call("DELETE", `/webhook/${created.id}`, { token })
        expect(deleted.status, deleted.text).toBe(204)
        expect(deleted.text).toBe("")
        // Its key is destroyed: the secret in the log is shredded for good.
        expect(yield* Effect.flatMap(Keyring, (k) => k.isForgotten(created.id))).toBe(true)
        expectError(yield* call("GET", `/webhook/${created.id}`, { token }), 404, "resource_missing", "id")
        expectError(
          yield* call("GET", `/v1/webhooks/${created.id}`, { token }),
          404,
          "resource_missing",
          "id"
        )
        expect((yield* listAll(token)).models.map((m: Body) => m.id)).not.toContain(created.id)
        expect((yield* listAllV1(token)).map((m: Body) => m.id)).not.toContain(created.id)
        expectError(
          yield* call("PUT", `/webhook/${created.id}`, { token, json: { status: "active" } }),
          404,
          "resource_missing"
        )
        expectError(yield* call("DELETE", `/webhook/${created.id}`, { token }), 404, "resource_missing")
        expectError(
          yield* call("POST", `/webhook/${created.id}/rotate-secret`, { token }),
          404,
          "resource_missing"
        )
        expectError(
          yield* call("POST", `/webhook/${created.id}/test`, { token, json: { event: "order.created" } }),
          404,
          "resource_missing"
        )
        expectError(
          yield* call("GET", `/webhook/${created.id}/deliveries`, { token }),
          404,
          "resource_missing"
        )
        expectError(
          yield* call("DELETE", `/webhook/${yield* Ids.make("wh")}`, { token }),
          404,
          "resource_missing"
        )
        expectError(yield* call("DELETE", "/webhook/not-an-id", { token }), 404, "resource_missing")
      })
    )
  })

  describe("POST /webhook/:id/rotate-secret", () => {
    it.effect("a new secret; the previous one valid 24 h; again → 409 unless ?force=true", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createWebhook(token)
        const rotate = (suffix = "") =>
          call("POST", `/webhook/${created.id}/rotate-secret${suffix}`, { token })
        const before = Date.now()
        const first = yield* rotate()
        expect(first.status, first.text).toBe(200)
        expect(Object.keys(first.body).sort()).toEqual(["previousSecretExpiresAt", "secret"])
        expectSecret(first.body.secret)
        expect(first.body.secret).not.toBe(created.secret)
        expect(first.body.previousSecretExpiresAt).toMatch(ISO_MS)
        const expires = Date.parse(first.body.previousSecretExpiresAt)
        expect(expires).toBeGreaterThanOrEqual(before + DAY_MS - 1_000)
        expect(expires).toBeLessThanOrEqual(Date.now() + DAY_MS + 1_000)
        const view = yield* getWebhook(token, created.id)
        expect(view.previousSecretExpiresAt).toBe(first.body.previousSecretExpiresAt)
        expect(JSON.stringify(view)).not.toContain(first.body.secret)

        const again = yield* rotate()
        expectError(again, 409, "rotation_in_progress")
        expect(again.body.error.message).toContain(first.body.previousSecretExpiresAt)
        expect(again.body.error.message).toContain("force=true")
        expectError(yield* rotate("?force=maybe"), 400, "parameter_invalid", "force")
        expectError(yield* rotate("?force=false"), 409, "rotation_in_progress")

        const forced = yield* rotate("?force=true")
        expect(forced.status, forced.text).toBe(200)
        expectSecret(forced.body.secret)
        expect(forced.body.secret).not.toBe(first.body.secret)
        expect(Date.parse(forced.body.previousSecretExpiresAt)).toBeGreaterThanOrEqual(expires)

        expectError(
          yield* call("POST", `/webhook/${yield* Ids.make("wh")}/rotate-secret`, { token }),
          404,
          "resource_missing"
        )
      })
    )
  })

  describe("POST /webhook/:id/test", () => {
    it.effect(
      "to a receiver answering 200: delivered, with the spec 2.6 body and signed spec 6.2 headers",
      () =>
        Effect.gen(function* () {
          const receiver = yield* TestReceiver
          const token = yield* adminToken
          const path = `/test-ok-${counter++}`
          const created = yield* createWebhook(token, { url: receiver.url(path), events: ["order.created"] })
          const before = Date.now()
          // Any catalogue type may be tested, subscribed or not.
          const r = yield* call("POST", `/webhook/${created.id}/test`, {
            token,
            json: { event: "payment.failed" }
          })
          expect(r.status, r.text).toBe(200)
          expect(r.body).toMatchObject({ delivered: true, statusCode: 200 })
          expect(r.body.error).toBeUndefined()
          expect(r.body.errorClass).toBeUndefined()
          expect(Number.isInteger(r.body.durationMs) && r.body.durationMs >= 0).toBe(true)
          expect(r.body.deliveryId).toMatch(/^dlv_/)
          expect(r.body.eventId).toMatch(/^evt_/)

          const requests = receiver.requests().filter((q) => q.path === path)
          expect(requests.length).toBe(1)
          const [request] = requests
          if (request === undefined) return expect.fail("nothing received")
          expect(request.method).toBe("POST")
          const body = JSON.parse(request.body)
          expect(Object.keys(body).sort()).toEqual(["data", "id", "timestamp", "type"])
          expect(body).toEqual({
            id: r.body.eventId,
            type: "payment.failed",
            timestamp: body.timestamp,
            data: SAMPLE_DATA["payment.failed"]
          })
          expect(body.timestamp).toMatch(ISO_MS)
          expect(Date.parse(body.timestamp)).toBeGreaterThanOrEqual(before - 1_000)
          expect(request.headers["content-type"]).toBe("application/json")
          expect(request.headers["x-service-event"]).toBe("payment.failed")
          expect(request.headers["x-service-delivery"]).toBe(r.body.deliveryId)
          const timestamp = request.headers["x-service-timestamp"] ?? ""
          expect(timestamp).toMatch(/^\d+$/)
          expect(Math.abs(Number(timestamp) - Date.now() / 1000)).toBeLessThan(30)
          expect(request.headers["x-service-signature"]).toBe(
            hmacHex(created.secret, timestamp, request.body)
          )
          expect(request.headers["x-service-signature-previous"]).toBeUndefined()
          // An off-the-shelf Standard Webhooks verifier accepts it too.
          expect(new StandardWebhook(created.secret).verify(request.body, request.headers)).toEqual(body)

          // Never in the delivery log, never counted towards health.
          const log = yield* call("GET", `/webhook/${created.id}/deliveries`, { token })
          expect(log.body).toEqual({ count: 0, models: [] })
          expect((yield* getWebhook(token, created.id)).status).toBe("active")
        })
    )

    it.effect("to a receiver answering 500: a 200 with delivered false and the status", () =>
      Effect.gen(function* () {
        const receiver = yield* TestReceiver
        const token = yield* adminToken
        const path = `/test-500-${counter++}`
        receiver.on(path, Behaviour.status(500, { "content-type": "text/plain" }, "boom"))
        const created = yield* createWebhook(token, { url: receiver.url(path) })
        const r = yield* call("POST", `/webhook/${created.id}/test`, {
          token,
          json: { event: "order.created" }
        })
        expect(r.status, r.text).toBe(200)
        expect(r.body).toMatchObject({ delivered: false, statusCode: 500, errorClass: "http" })
        expect(typeof r.body.error).toBe("string")
        expect(receiver.requests().filter((q) => q.path === path).length).toBe(1)
        // A test never moves the endpoint towards failing.
        expect((yield* getWebhook(token, created.id)).status).toBe("active")
      })
    )

    it.effect("to nothing listening: delivered false, statusCode null, a connection error", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        // Port 9 (discard) on loopback: nothing listens there in the test environment.
        const created = yield* createWebhook(token, { url: "http://127.0.0.1:9/hook" })
        const r = yield* call("POST", `/webhook/${created.id}/test`, {
          token,
          json: { event: "order.created" }
        })
        expect(r.status, r.text).toBe(200)
        expect(r.body).toMatchObject({ delivered: false, statusCode: null, errorClass: "connect" })
      })
    )

    it.effect("an unknown or missing event type → 400 param event; an unknown webhook → 404", () =>
      Effect.gen(function* () {
        const receiver = yield* TestReceiver
        const token = yield* adminToken
        const path = `/test-bad-${counter++}`
        const created = yield* createWebhook(token, { url: receiver.url(path) })
        const test = (json: unknown) => call("POST", `/webhook/${created.id}/test`, { token, json })
        const unknown = yield* test({ event: "order.exploded" })
        expectError(unknown, 400, "parameter_invalid", "event")
        expect(unknown.body.error.message).toContain("order.created")
        expectError(yield* test({}), 400, "parameter_missing", "event")
        expectError(yield* test({ event: 7 }), 400, "parameter_invalid", "event")
        expect(receiver.requests().filter((q) => q.path === path).length).toBe(0)
        expectError(
          yield* call("POST", `/webhook/${yield* Ids.make("wh")}/test`, {
            token,
            json: { event: "order.created" }
          }),
          404,
          "resource_missing"
        )
      })
    )
  })

  describe("the delivery log, redelivery and recovery", () => {
    it.effect(
      "GET /webhook/:id/deliveries: empty for a fresh webhook; bad filters → 400; unknown → 404",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const created = yield* createWebhook(token)
          const log = (params: Record<string, string | number> = {}) =>
            call("GET", `/webhook/${created.id}/deliveries${query(params)}`, { token })
          const empty = yield* log()
          expect(empty.status, empty.text).toBe(200)
          expect(empty.body).toEqual({ count: 0, models: [] })
          for (const status of ["pending", "succeeded", "failed"]) {
            expect((yield* log({ status })).body).toEqual({ count: 0, models: [] })
          }
          expect((yield* log({ eventId: yield* Ids.make("evt"), page: 2, display: 5 })).body).toEqual({
            count: 0,
            models: []
          })
          expectError(yield* log({ status: "lost" }), 400, "parameter_invalid", "status")
          expectError(yield* log({ display: 0 }), 400, "parameter_invalid", "display")
          expectError(yield* log({ page: 0 }), 400, "parameter_invalid", "page")
          expectError(
            yield* call("GET", `/webhook/${yield* Ids.make("wh")}/deliveries`, { token }),
            404,
            "resource_missing"
          )
          expectError(yield* call("GET", "/webhook/nope/deliveries", { token }), 404, "resource_missing")
        })
    )

    it.effect("redeliver: an unknown delivery or webhook → 404; a disabled webhook → 409", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createWebhook(token)
        const redeliver = (webhookId: string, deliveryId: string) =>
          call("POST", `/webhook/${webhookId}/deliveries/${deliveryId}/redeliver`, { token })
        expectError(
          yield* redeliver(created.id, yield* Ids.make("dlv")),
          404,
          "resource_missing",
          "delivery_id"
        )
        expectError(yield* redeliver(created.id, "dlv_nope"), 404, "resource_missing", "delivery_id")
        expectError(
          yield* redeliver(yield* Ids.make("wh"), yield* Ids.make("dlv")),
          404,
          "resource_missing",
          "id"
        )
        const disabled = yield* call("PUT", `/webhook/${created.id}`, { token, json: { status: "disabled" } })
        expect(disabled.status, disabled.text).toBe(200)
        expectError(yield* redeliver(created.id, yield* Ids.make("dlv")), 409, "webhook_disabled")
      })
    )

    it.effect(
      "recover: since in the future or older than 14 days → 400; valid → 202 with nothing to do",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const created = yield* createWebhook(token)
          const recover = (json: unknown, id = created.id) =>
            call("POST", `/webhook/${id}/recover`, { token, json })
          const ago = (ms: number) => new Date(Date.now() - ms).toISOString()
          const future = yield* recover({ since: ago(-3_600_000) })
          expectError(future, 400, "parameter_invalid", "since")
          expect(future.body.error.message).toContain("future")
          const old = yield* recover({ since: ago(15 * DAY_MS) })
          expectError(old, 400, "parameter_invalid", "since")
          expect(old.body.error.message).toContain("14 days")
          expectError(yield* recover({ since: "yesterday" }), 400, "parameter_invalid", "since")
          expectError(yield* recover({ since: "2026-02-30" }), 400, "parameter_invalid", "since")
          expectError(yield* recover({}), 400, "parameter_missing", "since")
          expectError(yield* recover(null), 400, "parameter_invalid")

          const ok = yield* recover({ since: ago(3_600_000) })
          expect(ok.status, ok.text).toBe(202)
          expect(ok.body).toEqual({ recovered: 0, deliveryIds: [], hasMore: false })
          // 13 days back is inside the window.
          expect((yield* recover({ since: ago(13 * DAY_MS) })).status).toBe(202)

          expectError(yield* recover({ since: ago(60_000) }, yield* Ids.make("wh")), 404, "resource_missing")
          const disabled = yield* call("PUT", `/webhook/${created.id}`, {
            token,
            json: { status: "disabled" }
          })
          expect(disabled.status, disabled.text).toBe(200)
          expectError(yield* recover({ since: ago(60_000) }), 409, "webhook_disabled")
        })
    )
  })

  describe("/v1/webhooks", () => {
    it.effect("POST: 201, Stripe's webhook_endpoint with its secret; the same registry as /webhook", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const url = uniqueUrl("v1")
        const r = yield* call("POST", "/v1/webhooks", {
          token,
          json: { url, events: ["order.created", "order.fulfilled"], metadata: { via: "v1" } }
        })
        expect(r.status, r.text).toBe(201)
        expect(Object.keys(r.body).sort()).toEqual([...V1_KEYS, "secret"].sort())
        expect(r.body).toMatchObject({
          object: "webhook_endpoint",
          url,
          events: ["order.created", "order.fulfilled"],
          status: "active",
          metadata: { via: "v1" }
        })
        expect(r.body.id).toMatch(WH_ID)
        expect(r.body.createdAt).toMatch(ISO_MS)
        expect(r.body.updatedAt).toMatch(ISO_MS)
        expectSecret(r.body.secret)
        expect((yield* getWebhook(token, r.body.id)).url).toBe(url)

        const got = yield* call("GET", `/v1/webhooks/${r.body.id}`, { token })
        expect(got.status, got.text).toBe(200)
        const { secret: _, ...withoutSecret } = r.body
        expect(got.body).toEqual(withoutSecret)
        // And one made through /webhook shows up in /v1.
        const base = yield* createWebhook(token)
        const v1 = yield* call("GET", `/v1/webhooks/${base.id}`, { token })
        expect(v1.body).toMatchObject({ object: "webhook_endpoint", id: base.id, url: base.url })

        expectError(
          yield* call("POST", "/v1/webhooks", { token, json: { url, events: ["nope"] } }),
          400,
          "parameter_invalid",
          "events"
        )
        expectError(
          yield* call("POST", "/v1/webhooks", { token, json: { url: "ftp://x", events: ["order.created"] } }),
          400,
          "parameter_invalid",
          "url"
        )
        expectError(
          yield* call("POST", "/v1/webhooks", { token, json: { url } }),
          400,
          "parameter_missing",
          "events"
        )
        expectError(
          yield* call("GET", `/v1/webhooks/${yield* Ids.make("wh")}`, { token }),
          404,
          "resource_missing"
        )
        expectError(yield* call("GET", "/v1/webhooks/nope", { token }), 404, "resource_missing")
      })
    )

    it.effect("GET: the list object, newest first, keyset-paged by startingAfter / endingBefore", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const a = yield* createWebhook(token)
        const b = yield* createWebhook(token)
        const c = yield* createWebhook(token)
        const list = (params: Record<string, string | number>) =>
          Effect.map(call("GET", `/v1/webhooks${query(params)}`, { token }), (r) => {
            expect(r.status, r.text).toBe(200)
            return r.body as Body
          })

        const first = yield* list({ limit: 2 })
        expect(Object.keys(first).sort()).toEqual(["data", "hasMore", "object"])
        expect(first.object).toBe("list")
        expect(first.data.map((m: Body) => m.id)).toEqual([c.id, b.id])
        expect(first.hasMore).toBe(true)
        for (const m of first.data) expect(Object.keys(m).sort()).toEqual(V1_KEYS)
        expect(first.data[0]).toEqual({
          object: "webhook_endpoint",
          id: c.id,
          url: c.url,
          events: c.events,
          status: "active",
          metadata: {},
          createdAt: c.createdAt,
          updatedAt: c.updatedAt
        })

        const next = yield* list({ limit: 2, startingAfter: b.id })
        expect(next.data[0].id).toBe(a.id)
        expect(next.data.length).toBeLessThanOrEqual(2)
        const previous = yield* list({ limit: 2, endingBefore: a.id })
        expect(previous.data.map((m: Body) => m.id)).toEqual([c.id, b.id])
        expect(previous.hasMore).toBe(false)
        const last = yield* list({ limit: 100, endingBefore: b.id })
        expect(last).toEqual({ object: "list", data: [first.data[0]], hasMore: false })

        // Default limit 10; the whole registry, newest first, once each.
        expect((yield* list({})).data.length).toBeLessThanOrEqual(10)
        const all = yield* listAllV1(token)
        const ids = all.map((m: Body) => m.id)
        expect(new Set(ids).size).toBe(ids.length)
        expect([...ids].sort().reverse()).toEqual(ids)
        expect(ids.length).toBe((yield* listAll(token)).count)
      })
    )

    it.effect("GET: limit outside 1–100, a bad cursor or both cursors → 400", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const list = (params: Record<string, string | number>) =>
          call("GET", `/v1/webhooks${query(params)}`, { token })
        for (const limit of [0, 101, -1, "ten", 2.5]) {
          const r = yield* list({ limit })
          expectError(r, 400, "parameter_invalid", "limit")
        }
        expect((yield* list({ limit: 100 })).status).toBe(200)
        expect((yield* list({ limit: 1 })).status).toBe(200)
        expectError(yield* list({ startingAfter: "nope" }), 400, "parameter_invalid", "startingAfter")
        expectError(yield* list({ endingBefore: "cus_x" }), 400, "parameter_invalid", "endingBefore")
        expectError(
          yield* list({ startingAfter: yield* Ids.make("wh"), endingBefore: yield* Ids.make("wh") }),
          400,
          "parameter_invalid",
          "endingBefore"
        )
      })
    )

    it.effect("DELETE: 200 { id, object, deleted: true }; then 404 on both surfaces", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createWebhook(token)
        const r = yield* call("DELETE", `/v1/webhooks/${created.id}`, { token })
        expect(r.status, r.text).toBe(200)
        expect(r.body).toEqual({ id: created.id, object: "webhook_endpoint", deleted: true })
        expectError(yield* call("GET", `/v1/webhooks/${created.id}`, { token }), 404, "resource_missing")
        expectError(yield* call("GET", `/webhook/${created.id}`, { token }), 404, "resource_missing")
        expectError(yield* call("DELETE", `/v1/webhooks/${created.id}`, { token }), 404, "resource_missing")
        expectError(yield* call("DELETE", "/v1/webhooks/nope", { token }), 404, "resource_missing")
        expect((yield* listAllV1(token)).map((m: Body) => m.id)).not.toContain(created.id)
      })
    )
  })

  describe("auth", () => {
    it.effect("no token → 401; a shopper → 403; read:webhooks reads but cannot write", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = yield* createWebhook(token)
        const dlv = yield* Ids.make("dlv")
        const since = new Date(Date.now() - 60_000).toISOString()
        const routes: ReadonlyArray<["GET" | "POST" | "PUT" | "DELETE", string, unknown, "read" | "write"]> =
          [
            ["GET", "/webhook", undefined, "read"],
            ["GET", `/webhook/${created.id}`, undefined, "read"],
            ["GET", `/webhook/${created.id}/deliveries`, undefined, "read"],
            ["GET", "/v1/webhooks", undefined, "read"],
            ["GET", `/v1/webhooks/${created.id}`, undefined, "read"],
            ["POST", "/webhook", { url: uniqueUrl(), events: ["order.created"] }, "write"],
            ["PUT", `/webhook/${created.id}`, { metadata: { x: 1 } }, "write"],
            ["POST", `/webhook/${created.id}/rotate-secret`, undefined, "write"],
            ["POST", `/webhook/${created.id}/test`, { event: "order.created" }, "write"],
            ["POST", `/webhook/${created.id}/deliveries/${dlv}/redeliver`, undefined, "write"],
            ["POST", `/webhook/${created.id}/recover`, { since }, "write"],
            ["POST", "/v1/webhooks", { url: uniqueUrl(), events: ["order.created"] }, "write"],
            ["DELETE", `/v1/webhooks/${created.id}`, undefined, "write"],
            ["DELETE", `/webhook/${created.id}`, undefined, "write"]
          ]
        const shopper = yield* registerShopper()
        const reader = yield* apiKeyWith(["read:webhooks"])
        const other = yield* apiKeyWith(["read:notifications", "write:notifications"])
        const before = yield* listAll(token)
        for (const [method, path, json, access] of routes) {
          const what = `${method} ${path}`
          expectError(yield* call(method, path, { json }), 401, "missing_credentials")
          const bad = yield* call(method, path, { json, token: "not-a-token" })
          expect(bad.status, `${what}: ${bad.text}`).toBe(401)
          expectError(
            yield* call(method, path, { json, token: shopper.accessToken }),
            403,
            "insufficient_scope"
          )
          expectError(yield* call(method, path, { json, token: other.key }), 403, "insufficient_scope")
          const byReader = yield* call(method, path, { json, token: reader.key })
          if (access === "read") expect(byReader.status, `${what}: ${byReader.text}`).toBe(200)
          else expectError(byReader, 403, "insufficient_scope")
        }
        // Nothing was changed by the refused calls.
        expect(yield* listAll(token)).toEqual(before)
        // write:webhooks is enough to register (and the secret comes back).
        const writer = yield* apiKeyWith(["write:webhooks"])
        const made = yield* createWebhook(writer.key)
        expectSecret(made.secret)
        expectError(
          yield* call("GET", `/webhook/${made.id}`, { token: writer.key }),
          403,
          "insufficient_scope"
        )
      })
    )
  })

  describe("Idempotency-Key", () => {
    it.effect("POST /webhook twice with one key: one webhook, the same secret, Idempotent-Replayed", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const json = { url: uniqueUrl("idem"), events: ["order.created"] }
        const headers = { "idempotency-key": `wh-${json.url}` }
        const first = yield* call("POST", "/webhook", { token, json, headers })
        expect(first.status, first.text).toBe(201)
        expect(first.headers["idempotent-replayed"]).toBeUndefined()
        const replay = yield* call("POST", "/webhook", { token, json, headers })
        expect(replay.status, replay.text).toBe(201)
        expect(replay.headers["idempotent-replayed"]).toBe("true")
        expect(replay.body).toEqual(first.body)
        expect(replay.body.secret).toBe(first.body.secret)
        const withUrl = (yield* listAll(token)).models.filter((m: Body) => m.url === json.url)
        expect(withUrl.length).toBe(1)
        expectError(
          yield* call("POST", "/webhook", { token, json: { ...json, events: ["order.updated"] }, headers }),
          422,
          "idempotency_key_reused"
        )
        // The same on /v1.
        const v1Json = { url: uniqueUrl("idem-v1"), events: ["order.created"] }
        const v1Headers = { "idempotency-key": `wh-${v1Json.url}` }
        const v1First = yield* call("POST", "/v1/webhooks", { token, json: v1Json, headers: v1Headers })
        const v1Replay = yield* call("POST", "/v1/webhooks", { token, json: v1Json, headers: v1Headers })
        expect(v1First.status, v1First.text).toBe(201)
        expect(v1Replay.headers["idempotent-replayed"]).toBe("true")
        expect(v1Replay.body).toEqual(v1First.body)
      })
    )
  })
})

// --- With the processors: a real delivery to redeliver --------------------------------------------------

layer(webhooksHttp(), OPTIONS)("webhooks over HTTP (processors running)", (it) => {
  it.effect(
    "a failed delivery shows in the log with its attempt; redeliver → 202 and it is tried again",
    () =>
      Effect.gen(function* () {
        const receiver = yield* TestReceiver
        const token = yield* adminToken
        const path = "/flaky"
        // Fails the first time, succeeds after.
        receiver.on(path, (_, n) => (n === 1 ? Behaviour.status(503, {}, "down") : Behaviour.ok))
        const created = yield* createWebhook(token, { url: receiver.url(path), events: ["product.created"] })
        const event = yield* publish("product.created", { id: "prod_1", name: "Lamp" })
        const log = (params: Record<string, string | number> = {}) =>
          Effect.map(call("GET", `/webhook/${created.id}/deliveries${query(params)}`, { token }), (r) => {
            expect(r.status, r.text).toBe(200)
            return r.body as Body
          })
        const failedOnce = yield* eventually(
          Effect.map(log(), (body) => (body.models[0]?.attemptCount === 1 ? body : undefined)),
          SETTLE_MS
        )
        expect(failedOnce.count).toBe(1)
        const delivery = failedOnce.models[0]
        expect(delivery).toMatchObject({
          webhookId: created.id,
          eventId: event.id,
          eventType: "product.created",
          status: "pending",
          attemptCount: 1,
          lastStatusCode: 503,
          succeededAt: null
        })
        expect(delivery.nextAttemptAt).toMatch(ISO_MS)
        expect(delivery.attempts).toEqual([
          expect.objectContaining({
            attempt: 1,
            trigger: "auto",
            succeeded: false,
            statusCode: 503,
            errorClass: "http"
          })
        ])
        expect(delivery.attempts[0].responseExcerpt).toBe("down")
        expect((yield* log({ eventId: event.id })).count).toBe(1)
        expect((yield* log({ status: "succeeded" })).count).toBe(0)

        // A pending delivery: its scheduled retry is brought forward (an automatic attempt, now).
        const redeliver = call("POST", `/webhook/${created.id}/deliveries/${delivery.id}/redeliver`, {
          token
        })
        const forward = yield* redeliver
        expect(forward.status, forward.text).toBe(202)
        expect(Object.keys(forward.body).sort()).toEqual(Object.keys(delivery).sort())
        expect(forward.body).toMatchObject({ id: delivery.id, webhookId: created.id, eventId: event.id })
        const succeeded = yield* eventually(
          Effect.map(log(), (body) => (body.models[0]?.status === "succeeded" ? body.models[0] : undefined)),
          SETTLE_MS
        )
        expect(succeeded.id).toBe(delivery.id)
        expect(succeeded.succeededAt).toMatch(ISO_MS)
        expect(succeeded.attempts.map((a: Body) => [a.attempt, a.trigger, a.succeeded])).toEqual([
          [1, "auto", false],
          [2, "auto", true]
        ])
        expect((yield* log({ status: "succeeded" })).count).toBe(1)

        // A finished delivery: one more, manual attempt of the same delivery.
        const again = yield* redeliver
        expect(again.status, again.text).toBe(202)
        expect(again.body.id).toBe(delivery.id)
        const resent = yield* eventually(
          Effect.map(log(), (body) =>
            body.models[0]?.attempts.length === 3 && body.models[0].status === "succeeded"
              ? body.models[0]
              : undefined
          ),
          SETTLE_MS
        )
        expect(resent.attempts[2]).toMatchObject({
          attempt: 3,
          trigger: "manual",
          succeeded: true,
          statusCode: 200
        })
        expect(resent.status).toBe("succeeded")
        const requests = receiver.requests().filter((q) => q.path === path)
        expect(requests.map((q) => q.headers["x-service-delivery"])).toEqual([
          delivery.id,
          delivery.id,
          delivery.id
        ])
        expect(new Set(requests.map((q) => JSON.parse(q.body).id))).toEqual(new Set([event.id]))
      })
  )

  it.effect(
    "a delivery failed by 410 disables the endpoint; re-enabled, recover sends it again (manual)",
    () =>
      Effect.gen(function* () {
        const receiver = yield* TestReceiver
        const token = yield* adminToken
        const path = "/gone-then-back"
        receiver.on(path, (_, n) => (n === 1 ? Behaviour.status(410) : Behaviour.ok))
        const since = new Date(Date.now() - 1_000).toISOString()
        const created = yield* createWebhook(token, { url: receiver.url(path), events: ["customer.created"] })
        const event = yield* publish("customer.created", { id: "cus_1", email: "a@example.com" })
        const disabled = yield* eventually(
          Effect.map(getWebhook(token, created.id), (w) => (w.status === "disabled" ? w : undefined)),
          SETTLE_MS
        )
        expect(disabled.disabledReason).toBe("gone")
        const log = call("GET", `/webhook/${created.id}/deliveries?status=failed`, { token })
        const failed = (yield* log).body
        expect(failed.count).toBe(1)
        expect(failed.models[0]).toMatchObject({ eventId: event.id, status: "failed", lastStatusCode: 410 })
        const recover = call("POST", `/webhook/${created.id}/recover`, { token, json: { since } })
        expectError(yield* recover, 409, "webhook_disabled")

        const enabled = yield* call("PUT", `/webhook/${created.id}`, { token, json: { status: "active" } })
        expect(enabled.status, enabled.text).toBe(200)
        const recovered = yield* recover
        expect(recovered.status, recovered.text).toBe(202)
        expect(recovered.body).toEqual({ recovered: 1, deliveryIds: [failed.models[0].id], hasMore: false })
        const resent = yield* eventually(
          Effect.map(call("GET", `/webhook/${created.id}/deliveries`, { token }), (r) =>
            r.body.models[0]?.status === "succeeded" ? r.body.models[0] : undefined
          ),
          SETTLE_MS
        )
        expect(resent.attempts.map((a: Body) => [a.attempt, a.trigger, a.statusCode])).toEqual([
          [1, "auto", 410],
          [2, "manual", 200]
        ])
        expect((yield* getWebhook(token, created.id)).status).toBe("active")
        // Nothing failed is left to recover.
        expect((yield* recover).body).toEqual({ recovered: 0, deliveryIds: [], hasMore: false })
      })
  )
})

// --- With the SSRF guard on ---------------------------------------------------------------------------

const guarded = identityHttp({ webhooks: { ...makeAppConfig().webhooks, allowPrivate: false } }).pipe(
  // Quiet unless TEST_LOG_LEVEL=debug, like TestConfig.
  Layer.provideMerge(
    Logger.minimumLogLevel(process.env.TEST_LOG_LEVEL === "debug" ? LogLevel.Debug : LogLevel.Warning)
  )
)

layer(guarded, OPTIONS)("webhooks over HTTP (SSRF guard on)", (it) => {
  const PRIVATE = [
    "http://127.0.0.1/",
    "http://localhost/",
    "http://localhost./hook",
    "http://169.254.169.254/latest/meta-data",
    "http://[::1]/",
    "http://2130706433/",
    "http://10.0.0.1/",
    "http://192.168.1.1:8080/",
    "http://[::ffff:127.0.0.1]/"
  ]

  it.effect("loopback, private, link-local and metadata addresses → 400 param url, on every route", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const publicHook = yield* createWebhook(token, { url: "https://93.184.215.14/hook" })
      expect(publicHook.url).toBe("https://93.184.215.14/hook")
      for (const url of PRIVATE) {
        const json = { url, events: ["order.created"] }
        const r = yield* call("POST", "/webhook", { token, json })
        expectError(r, 400, "parameter_invalid", "url")
        // The refusal names the setting a newcomer with a local receiver needs.
        expect(r.body.error.message, url).toContain("WEBHOOK_ALLOW_PRIVATE=true")
        expectError(yield* call("POST", "/v1/webhooks", { token, json }), 400, "parameter_invalid", "url")
        expectError(
          yield* call("PUT", `/webhook/${publicHook.id}`, { token, json: { url } }),
          400,
          "parameter_invalid",
          "url"
        )
      }
      expect((yield* getWebhook(token, publicHook.id)).url).toBe("https://93.184.215.14/hook")
      expect((yield* listAll(token)).count).toBe(1)
    })
  )
})
