/**
 * The webhooks read models are a pure function of the log: after a varied history (deliveries that
 * succeeded, failed and were retried, a 410 that disabled an endpoint, a rotation, updates, a manual
 * redelivery, a deleted endpoint) a rebuild from position zero reproduces exactly the rows of
 * `webhooks.endpoints`, `.deliveries` and `.attempts`.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { rebuildProjection } from "../../src/processors/Rebuild.js"
import { WebhooksProjection } from "../../src/webhooks/projection.js"
import { Webhooks } from "../../src/webhooks/Webhooks.js"
import { rowsOf } from "../support/database.js"
import { eventually } from "../support/notifications.js"
import { Behaviour } from "../support/receiver.js"
import { publish, STAFF, TestReceiver, webhooksHttp } from "../support/webhooks.js"

const tables = Effect.all({
  endpoints: rowsOf("webhooks.endpoints", "webhook_id"),
  deliveries: rowsOf("webhooks.deliveries", "delivery_id"),
  attempts: rowsOf("webhooks.attempts", "delivery_id, attempt")
})

layer(webhooksHttp(), { excludeTestServices: true, timeout: 120_000 })(
  "webhooks projection rebuild",
  (it) => {
    it.effect("rebuilding from the log reproduces every webhooks row", () =>
      Effect.gen(function* () {
        const receiver = yield* TestReceiver
        const webhooks = yield* Webhooks
        receiver.on("/fails", Behaviour.status(500))
        receiver.on("/gone", Behaviour.status(410))
        const ok = yield* webhooks.create(STAFF, { url: receiver.url("/ok"), events: ["order.created"] })
        const fails = yield* webhooks.create(STAFF, {
          url: receiver.url("/fails"),
          events: ["order.created", "product.created"],
          metadata: { team: "ops" }
        })
        const gone = yield* webhooks.create(STAFF, { url: receiver.url("/gone"), events: ["order.created"] })
        const doomed = yield* webhooks.create(STAFF, {
          url: receiver.url("/doomed"),
          events: ["order.created"]
        })
        yield* webhooks.rotateSecret(STAFF, ok.id, { force: false })
        yield* webhooks.update(STAFF, fails.id, {
          metadata: { team: null, tier: "gold" },
          events: ["order.created"]
        })
        for (let i = 0; i < 3; i++) yield* publish("order.created", { id: `ord_rb_${i}` })
        yield* eventually(
          Effect.map(webhooks.get(gone.id), (w) => (w.status === "disabled" ? true : undefined))
        )
        yield* eventually(
          Effect.map(webhooks.deliveries(fails.id, { page: 1, display: 10 }), (page) =>
            page.models.length === 3 && page.models.every((d) => d.attemptCount === 1) ? true : undefined
          )
        )
        const okLog = yield* eventually(
          Effect.map(webhooks.deliveries(ok.id, { page: 1, display: 10 }), (page) =>
            page.models.length === 3 && page.models.every((d) => d.status === "succeeded") ? page : undefined
          )
        )
        const first = okLog.models[0]
        if (first === undefined) return expect.fail("no delivery")
        yield* webhooks.redeliver(STAFF, ok.id, first.id)
        yield* eventually(
          Effect.map(webhooks.deliveries(ok.id, { page: 1, display: 10 }), (page) =>
            page.models.some((d) => d.attemptCount === 2 && d.status === "succeeded") ? true : undefined
          )
        )
        yield* eventually(
          Effect.map(webhooks.deliveries(doomed.id, { page: 1, display: 10 }), (page) =>
            page.count === 3 ? true : undefined
          )
        )
        yield* webhooks.remove(STAFF, doomed.id)

        const before = yield* tables
        expect(before.endpoints).toHaveLength(3)
        expect(before.deliveries.length).toBe(9)
        yield* rebuildProjection(WebhooksProjection, { batchSize: 7 })
        const after = yield* tables
        expect(after).toEqual(before)
      })
    )
  }
)
