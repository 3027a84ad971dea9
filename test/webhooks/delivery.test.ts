/**
 * Webhook delivery end to end, over real sockets to a local receiver: the signed body and headers
 * (checked by hand and by the `standardwebhooks` package), rotation windows, fan-out rules, 410,
 * redirects, manual redelivery, and a hung endpoint that must not hold up a healthy one.
 */
import { createHmac } from "node:crypto"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { Webhook } from "standardwebhooks"
import { makeAppConfig } from "../../src/config.js"
import { EventStore } from "../../src/eventstore/EventStore.js"
import { webhookStream } from "../../src/webhooks/decider.js"
import { Webhooks } from "../../src/webhooks/Webhooks.js"
import { makeShiftedClock } from "../support/clock.js"
import { eventually, Peers } from "../support/notifications.js"
import { Behaviour, type ReceivedRequest } from "../support/receiver.js"
import { publish, STAFF, TestReceiver, webhooksHttp } from "../support/webhooks.js"

const shifted = makeShiftedClock()

const hmacHex = (secret: string, timestamp: string, body: string) =>
  createHmac("sha256", secret).update(`${timestamp}.${body}`).digest("hex")

const register = (path: string, events: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const receiver = yield* TestReceiver
    const webhooks = yield* Webhooks
    return yield* webhooks.create(STAFF, { url: receiver.url(path), events })
  })

const received = (path: string) =>
  Effect.map(TestReceiver, (r) => r.requests().filter((q) => q.path === path))

/** Waits until `path` got `n` requests, then returns them. */
const waitFor = (path: string, n: number, timeoutMs = 10_000) =>
  eventually(
    Effect.map(received(path), (all) => (all.length >= n ? all : undefined)),
    timeoutMs
  )

const deliveriesOf = (webhookId: string) =>
  Effect.flatMap(Webhooks, (w) => w.deliveries(webhookId, { page: 1, display: 100 }))

const header = (request: ReceivedRequest, name: string) => request.headers[name] ?? ""

describe("webhook delivery", () => {
  const overrides = {
    webhooks: { ...makeAppConfig().webhooks, alertEmail: Option.some("ops@example.com") }
  }
  layer(webhooksHttp({ clock: shifted.clock, overrides }), { excludeTestServices: true, timeout: 120_000 })(
    "live",
    (it) => {
      it.effect(
        "an order.created event reaches the endpoint: spec 2.6 body, spec 6.2 headers, valid signatures",
        () =>
          Effect.gen(function* () {
            const hook = yield* register("/orders", ["order.created"])
            const data = {
              id: "ord_1",
              displayId: "1001",
              status: "pending",
              email: "a@example.com",
              total: 4999,
              currency: "USD",
              createdAt: "2026-01-01T00:00:00.000Z"
            }
            const event = yield* publish("order.created", data)
            const [request] = yield* waitFor("/orders", 1)
            if (request === undefined) return expect.fail("nothing received")
            expect(request.method).toBe("POST")
            expect(JSON.parse(request.body)).toEqual({
              id: event.id,
              type: "order.created",
              timestamp: event.occurredAt.toISOString(),
              data
            })
            expect(header(request, "content-type")).toBe("application/json")
            expect(header(request, "x-service-event")).toBe("order.created")
            expect(header(request, "x-service-delivery")).toMatch(/^dlv_/)
            const timestamp = header(request, "x-service-timestamp")
            expect(Math.abs(Number(timestamp) - shifted.clock.unsafeCurrentTimeMillis() / 1000)).toBeLessThan(
              30
            )
            expect(header(request, "x-service-signature")).toBe(hmacHex(hook.secret, timestamp, request.body))
            expect(header(request, "x-service-signature-previous")).toBe("")
            // An off-the-shelf verifier accepts it (it checks the timestamp against the real clock).
            const verified = new Webhook(hook.secret).verify(request.body, {
              "webhook-id": header(request, "webhook-id"),
              "webhook-timestamp": header(request, "webhook-timestamp"),
              "webhook-signature": header(request, "webhook-signature")
            })
            expect(verified).toMatchObject({ id: event.id, type: "order.created" })
            expect(header(request, "webhook-id")).toBe(header(request, "x-service-delivery"))
            // …and rejects a tampered body.
            expect(() =>
              new Webhook(hook.secret).verify(request.body.replace("4999", "1"), {
                "webhook-id": header(request, "webhook-id"),
                "webhook-timestamp": header(request, "webhook-timestamp"),
                "webhook-signature": header(request, "webhook-signature")
              })
            ).toThrow()
            // The log shows one successful attempt.
            const log = yield* eventually(
              Effect.map(deliveriesOf(hook.id), (page) =>
                page.models[0]?.status === "succeeded" ? page : undefined
              )
            )
            expect(log.count).toBe(1)
            expect(log.models[0]).toMatchObject({
              id: header(request, "x-service-delivery"),
              eventId: event.id,
              eventType: "order.created",
              attemptCount: 1,
              lastStatusCode: 200,
              nextAttemptAt: null
            })
            // A success on an active endpoint changes nothing about its health.
            const history = yield* Effect.flatMap(EventStore, (store) =>
              store.readStream(webhookStream(hook.id))
            )
            expect(history.map((e) => e.type)).toEqual(["webhook.created"])
            expect(log.models[0]?.attempts).toEqual([
              expect.objectContaining({
                attempt: 1,
                trigger: "auto",
                succeeded: true,
                statusCode: 200,
                errorClass: null,
                nextAttemptAt: null
              })
            ])
          })
      )

      it.effect("only subscribed types, only live endpoints, only events after registration", () =>
        Effect.gen(function* () {
          const before = yield* publish("customer.created", { id: "cus_before" })
          yield* register("/customers", ["customer.created"])
          const disabled = yield* register("/disabled", ["customer.created"])
          yield* Effect.flatMap(Webhooks, (w) => w.update(STAFF, disabled.id, { status: "disabled" }))
          yield* publish("product.created", { id: "prod_1" })
          const after = yield* publish("customer.created", { id: "cus_after" })
          const got = yield* waitFor("/customers", 1)
          // Give a wrong delivery time to show up, then check nothing else came.
          yield* Effect.sleep("300 millis")
          expect((yield* received("/customers")).map((r) => JSON.parse(r.body).id)).toEqual([after.id])
          expect(got.map((r) => JSON.parse(r.body).id)).not.toContain(before.id)
          expect(yield* received("/disabled")).toEqual([])
        })
      )

      it.effect(
        "rotation: both signatures during the window, both secrets verify; after 24 h only the new",
        () =>
          Effect.gen(function* () {
            const hook = yield* register("/rotate", ["order.updated"])
            const webhooks = yield* Webhooks
            const rotated = yield* webhooks.rotateSecret(STAFF, hook.id, { force: false })
            expect(rotated.secret).not.toBe(hook.secret)
            yield* publish("order.updated", { id: "ord_r" })
            const [request] = yield* waitFor("/rotate", 1)
            if (request === undefined) return expect.fail("nothing received")
            const ts = header(request, "x-service-timestamp")
            expect(header(request, "x-service-signature")).toBe(hmacHex(rotated.secret, ts, request.body))
            expect(header(request, "x-service-signature-previous")).toBe(
              hmacHex(hook.secret, ts, request.body)
            )
            const standard = {
              "webhook-id": header(request, "webhook-id"),
              "webhook-timestamp": header(request, "webhook-timestamp"),
              "webhook-signature": header(request, "webhook-signature")
            }
            expect(standard["webhook-signature"].split(" ")).toHaveLength(2)
            // A receiver still on the old secret and one already on the new both accept it.
            expect(new Webhook(hook.secret).verify(request.body, standard)).toBeTruthy()
            expect(new Webhook(rotated.secret).verify(request.body, standard)).toBeTruthy()

            yield* shifted.advance("24 hours")
            yield* shifted.advance("1 second")
            yield* publish("order.updated", { id: "ord_r2" })
            const second = (yield* waitFor("/rotate", 2))[1]
            if (second === undefined) return expect.fail("nothing received")
            const ts2 = header(second, "x-service-timestamp")
            expect(header(second, "x-service-signature")).toBe(hmacHex(rotated.secret, ts2, second.body))
            expect(header(second, "x-service-signature-previous")).toBe("")
            expect(header(second, "webhook-signature").split(" ")).toHaveLength(1)
            expect(header(second, "webhook-signature")).toBe(
              `v1,${createHmac("sha256", Buffer.from(rotated.secret.slice(6), "base64"))
                .update(`${header(second, "webhook-id")}.${ts2}.${second.body}`)
                .digest("base64")}`
            )
          })
      )

      it.effect(
        "a hung endpoint holds only its own slots: a healthy endpoint's events still arrive at once",
        () =>
          Effect.gen(function* () {
            const receiver = yield* TestReceiver
            receiver.on("/hung", Behaviour.hang)
            yield* register("/hung", ["inventory.low_stock"])
            yield* register("/healthy", ["inventory.low_stock"])
            // Far more events than the worker's slots (64) and than one endpoint's cap (16).
            const started = Date.now()
            yield* Effect.forEach(
              Array.from({ length: 80 }, (_, i) => i),
              (i) => publish("inventory.low_stock", { productId: `prod_${i}`, available: 1 })
            )
            const healthy = yield* waitFor("/healthy", 80, 20_000)
            // All 80 arrived while the hung endpoint still held its first attempts (30 s deadline).
            expect(Math.max(...healthy.map((r) => r.receivedAt)) - started).toBeLessThan(25_000)
            const hung = yield* received("/hung")
            expect(hung.length).toBeGreaterThan(0)
            expect(hung.length).toBeLessThanOrEqual(16)
          })
      )

      it.effect("410 Gone disables the endpoint at once and emails the owner first", () =>
        Effect.gen(function* () {
          const receiver = yield* TestReceiver
          const { smtp } = yield* Peers
          receiver.on("/gone", Behaviour.status(410))
          const hook = yield* register("/gone", ["order.cancelled"])
          yield* publish("order.cancelled", { id: "ord_g" })
          yield* waitFor("/gone", 1)
          const webhooks = yield* Webhooks
          const after = yield* eventually(
            Effect.map(webhooks.get(hook.id), (w) => (w.status === "disabled" ? w : undefined))
          )
          expect(after.disabledReason).toBe("gone")
          const log = yield* deliveriesOf(hook.id)
          expect(log.models[0]).toMatchObject({ status: "failed", lastStatusCode: 410, nextAttemptAt: null })
          // Disabled: the next event is not even attempted.
          yield* publish("order.cancelled", { id: "ord_g2" })
          yield* Effect.sleep("300 millis")
          expect(yield* received("/gone")).toHaveLength(1)
          // The alert went to WEBHOOK_ALERT_EMAIL (set for this app) through the SMTP sink.
          const mail = yield* eventually(
            Effect.sync(() => smtp.messages.find((m) => m.subject.includes(receiver.url("/gone"))))
          )
          expect(mail.to).toContain("ops@example.com")
          expect(mail.text).toContain("410 Gone")
        })
      )
    }
  )
})
