/**
 * The retry schedule and endpoint health (spec §6.4, §3.1), to the millisecond: the attempt worker's
 * handler and DueWork driven by hand under Effect's TestClock, against a real local receiver.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Clock, Effect, Option, TestClock } from "effect"
import { makeAppConfig } from "../../src/config.js"
import type { PublicEvent } from "../../src/eventstore/PublicEvents.js"
import { Notifications } from "../../src/notifications/Notifications.js"
import { type DueItem, DueWork } from "../../src/processors/DueWork.js"
import { DISABLE_AFTER_MS, MAX_ATTEMPTS, nextAttemptAt, RETRY_DELAYS_MS } from "../../src/webhooks/decider.js"
import {
  DELIVERY_KIND,
  DISABLE_CHECK_KIND,
  dispatchEvents,
  handleDelivery,
  handleDisableCheck
} from "../../src/webhooks/delivery.js"
import { Webhooks } from "../../src/webhooks/Webhooks.js"
import { withTestClock } from "../processors/helpers.js"
import { Behaviour } from "../support/receiver.js"
import { publish, STAFF, TestReceiver, webhooksHttp } from "../support/webhooks.js"

const MINUTE = 60_000
const HOUR = 60 * MINUTE
/** 2030-01-01T00:00:00Z: round numbers in the assertions. */
const T0 = Date.UTC(2030, 0, 1)

const claim = (kind: string) =>
  Effect.flatMap(DueWork, (work) =>
    work.claim({ kinds: [kind], limit: 10, owner: "test-worker", leaseTtl: "90 seconds" })
  )

/** One worker step: claim the one due item of `kind`, handle it, record the outcome. */
const step = <A, E, R>(kind: string, handle: (item: DueItem) => Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const claimed = yield* claim(kind)
    expect(claimed).toHaveLength(1)
    const item = claimed[0] as DueItem
    const outcome = yield* handle(item)
    return { item, outcome }
  })

/** Each test starts on an empty queue. */
const emptyQueue = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`UPDATE processors.due_work SET status = 'cancelled' WHERE status IN ('pending', 'claimed')`
)

const at = <A, E, R>(time: number, effect: Effect.Effect<A, E, R>) =>
  withTestClock(Effect.zipRight(Effect.zipRight(emptyQueue, TestClock.setTime(time)), effect))

/** Publishes an event and runs the dispatcher on it (as the subscription would). */
const publishAndDispatch = (type: string, data: Readonly<Record<string, unknown>>) =>
  Effect.gen(function* () {
    const event = yield* publish(type, data)
    const sql = yield* SqlClient.SqlClient
    const row: PublicEvent = {
      ...event,
      sourceEventId: "00000000-0000-0000-0000-000000000000",
      streamId: "test",
      position: 0,
      transactionId: "0",
      subjectId: null
    }
    yield* sql.withTransaction(dispatchEvents([row]))
    return event
  })

const attemptStep = step(DELIVERY_KIND, (item) =>
  Effect.gen(function* () {
    const outcome = yield* handleDelivery(item)
    expect(yield* Effect.flatMap(DueWork, (w) => w.complete(item, outcome))).toBe(true)
    return outcome
  }).pipe(Effect.orDie)
)

const endpoint = (id: string) => Effect.flatMap(Webhooks, (w) => w.get(id))
const deliveries = (id: string) => Effect.flatMap(Webhooks, (w) => w.deliveries(id, { page: 1, display: 10 }))

/** Each test its own event type, so endpoints of earlier tests get none of its deliveries. */
const newEndpoint = (path: string, type: string) =>
  Effect.gen(function* () {
    const receiver = yield* TestReceiver
    return yield* Effect.flatMap(Webhooks, (w) =>
      w.create(STAFF, { url: receiver.url(path), events: [type] })
    )
  })

/** Fails a delivery 7 times on the schedule; returns the attempt times. */
const failSevenTimes = (webhookId: string) =>
  Effect.gen(function* () {
    const times: Array<number> = []
    for (let n = 1; n <= MAX_ATTEMPTS; n++) {
      const now = yield* Clock.currentTimeMillis
      times.push(now)
      const { outcome } = yield* attemptStep
      const log = yield* deliveries(webhookId)
      const delivery = log.models[0]
      if (delivery === undefined) return expect.fail("no delivery")
      if (n < MAX_ATTEMPTS) {
        expect(outcome).toMatchObject({ _tag: "Retry" })
        const next = now + (RETRY_DELAYS_MS[n - 1] as number)
        expect(delivery).toMatchObject({ status: "pending", attemptCount: n })
        expect(delivery.nextAttemptAt?.getTime()).toBe(next)
        expect(delivery.attempts[n - 1]?.nextAttemptAt?.getTime()).toBe(next)
        // Not a millisecond early…
        yield* TestClock.setTime(next - 1)
        expect(yield* claim(DELIVERY_KIND)).toEqual([])
        // …and due exactly then.
        yield* TestClock.setTime(next)
      } else {
        expect(outcome).toMatchObject({ _tag: "Done" })
        expect(delivery).toMatchObject({ status: "failed", attemptCount: MAX_ATTEMPTS, nextAttemptAt: null })
      }
    }
    return times
  })

describe("webhook schedule and health", () => {
  const overrides = {
    webhooks: { ...makeAppConfig().webhooks, alertEmail: Option.some("ops@example.com") }
  }
  layer(webhooksHttp({ processors: false, overrides }), { excludeTestServices: true, timeout: 120_000 })(
    "TestClock",
    (it) => {
      it.effect("the schedule in numbers: 0, +1 m, +5 m, +30 m, +2 h, +8 h, +24 h; 7 attempts", () =>
        Effect.sync(() => {
          expect(MAX_ATTEMPTS).toBe(7)
          expect(RETRY_DELAYS_MS).toEqual([MINUTE, 5 * MINUTE, 30 * MINUTE, 2 * HOUR, 8 * HOUR, 24 * HOUR])
          const t = new Date(T0)
          expect(nextAttemptAt(1, t)?.getTime()).toBe(T0 + MINUTE)
          expect(nextAttemptAt(6, t)?.getTime()).toBe(T0 + 24 * HOUR)
          expect(nextAttemptAt(7, t)).toBeUndefined()
          // Retry-After within [delay, 2 × delay].
          expect(nextAttemptAt(1, t, 30)?.getTime()).toBe(T0 + MINUTE)
          expect(nextAttemptAt(1, t, 90)?.getTime()).toBe(T0 + 90_000)
          expect(nextAttemptAt(1, t, 3600)?.getTime()).toBe(T0 + 2 * MINUTE)
          expect(DISABLE_AFTER_MS).toBe(72 * HOUR)
        })
      )

      it.effect(
        "always 500: attempts at exactly the scheduled times, then failing with failingSince; disabled 72 h later, owner emailed first",
        () =>
          at(
            T0,
            Effect.gen(function* () {
              const receiver = yield* TestReceiver
              receiver.on("/down", Behaviour.status(500, {}, "upstream broke"))
              const hook = yield* newEndpoint("/down", "order.created")
              yield* publishAndDispatch("order.created", { id: "ord_s1" })
              const times = yield* failSevenTimes(hook.id)
              // Attempt times: T0 and then each delay after the previous failure.
              const offsets = times.map((t) => t - T0)
              expect(offsets).toEqual([
                0,
                MINUTE,
                6 * MINUTE,
                36 * MINUTE,
                2 * HOUR + 36 * MINUTE,
                10 * HOUR + 36 * MINUTE,
                34 * HOUR + 36 * MINUTE
              ])
              expect(receiver.requests().filter((r) => r.path === "/down")).toHaveLength(7)
              // Every attempt was re-signed with its own timestamp.
              expect(
                receiver
                  .requests()
                  .filter((r) => r.path === "/down")
                  .map((r) => Number(r.headers["x-service-timestamp"]) * 1000)
              ).toEqual(times)
              const log = yield* deliveries(hook.id)
              expect(log.models[0]?.attempts.map((a) => [a.attempt, a.statusCode, a.errorClass])).toEqual(
                [1, 2, 3, 4, 5, 6, 7].map((n) => [n, 500, "http"])
              )
              expect(log.models[0]?.attempts[0]?.responseExcerpt).toBe("upstream broke")
              // Failing since the 7th failure; the disable clock is armed for 72 h after it.
              const failingSince = times[6] as number
              const failing = yield* endpoint(hook.id)
              expect(failing).toMatchObject({ status: "failing" })
              expect(failing.failingSince?.getTime()).toBe(failingSince)
              yield* TestClock.setTime(failingSince + DISABLE_AFTER_MS - 1)
              expect(yield* claim(DISABLE_CHECK_KIND)).toEqual([])
              expect(yield* claim(DELIVERY_KIND)).toEqual([])
              yield* TestClock.setTime(failingSince + DISABLE_AFTER_MS)
              yield* step(DISABLE_CHECK_KIND, (i) =>
                Effect.flatMap(Effect.orDie(handleDisableCheck(i)), (outcome) =>
                  Effect.flatMap(DueWork, (w) => w.complete(i, outcome))
                )
              )
              const disabled = yield* endpoint(hook.id)
              expect(disabled).toMatchObject({ status: "disabled", disabledReason: "failing" })
              // The owner's alert was queued with (before) the disable.
              const alerts = yield* Effect.flatMap(Notifications, (n) =>
                n.list({ page: 1, display: 10, eventName: "webhook.disabled" })
              )
              expect(alerts.models).toEqual([
                expect.objectContaining({ channel: "email", to: "ops@example.com", status: "pending" })
              ])
            })
          )
      )

      it.effect("a success while failing returns the endpoint to active and stops the disable clock", () =>
        at(
          T0 + 10 * 24 * HOUR,
          Effect.gen(function* () {
            const receiver = yield* TestReceiver
            let healthy = false
            receiver.on("/flaky", () => (healthy ? Behaviour.ok : Behaviour.status(503)))
            const hook = yield* newEndpoint("/flaky", "order.updated")
            yield* publishAndDispatch("order.updated", { id: "ord_s2" })
            yield* failSevenTimes(hook.id)
            expect((yield* endpoint(hook.id)).status).toBe("failing")
            healthy = true
            yield* publishAndDispatch("order.updated", { id: "ord_s3" })
            yield* attemptStep
            const back = yield* endpoint(hook.id)
            expect(back).toMatchObject({ status: "active", failingSince: null })
            yield* TestClock.adjust("73 hours")
            expect(yield* claim(DISABLE_CHECK_KIND)).toEqual([])
            expect((yield* endpoint(hook.id)).status).toBe("active")
          })
        )
      )

      it.effect("429 with Retry-After is honoured within [delay, 2 × delay]", () =>
        at(
          T0 + 20 * 24 * HOUR,
          Effect.gen(function* () {
            const receiver = yield* TestReceiver
            receiver.on("/busy", (_, n) =>
              n === 1
                ? Behaviour.status(429, { "retry-after": "90" })
                : n === 2
                  ? Behaviour.status(503, { "retry-after": "86400" })
                  : Behaviour.ok
            )
            const hook = yield* newEndpoint("/busy", "order.cancelled")
            yield* publishAndDispatch("order.cancelled", { id: "ord_s4" })
            const start = yield* Clock.currentTimeMillis
            yield* attemptStep
            const first = (yield* deliveries(hook.id)).models[0]
            // 90 s: longer than the 1 min step, within 2 min.
            expect(first?.nextAttemptAt?.getTime()).toBe(start + 90_000)
            yield* TestClock.setTime(start + 90_000)
            yield* attemptStep
            const second = (yield* deliveries(hook.id)).models[0]
            // A day asked for; the 5 min step allows at most 10 min.
            expect(second?.nextAttemptAt?.getTime()).toBe(start + 90_000 + 10 * MINUTE)
            yield* TestClock.setTime(start + 90_000 + 10 * MINUTE)
            yield* attemptStep
            expect((yield* deliveries(hook.id)).models[0]).toMatchObject({
              status: "succeeded",
              attemptCount: 3
            })
          })
        )
      )

      it.effect(
        "redeliver: one manual attempt with the same delivery id, never retried; success counts",
        () =>
          at(
            T0 + 30 * 24 * HOUR,
            Effect.gen(function* () {
              const receiver = yield* TestReceiver
              let up = false
              receiver.on("/manual", () => (up ? Behaviour.ok : Behaviour.status(500)))
              const hook = yield* newEndpoint("/manual", "order.fulfilled")
              yield* publishAndDispatch("order.fulfilled", { id: "ord_s5" })
              yield* failSevenTimes(hook.id)
              const failed = (yield* deliveries(hook.id)).models[0]
              if (failed === undefined) return expect.fail("no delivery")
              const webhooks = yield* Webhooks
              // Still down: one manual attempt, then nothing more is scheduled.
              yield* webhooks.redeliver(STAFF, hook.id, failed.id)
              yield* attemptStep
              const after = (yield* deliveries(hook.id)).models[0]
              expect(after).toMatchObject({ status: "failed", attemptCount: 8, nextAttemptAt: null })
              expect(after?.attempts[7]).toMatchObject({ attempt: 8, trigger: "manual", succeeded: false })
              yield* TestClock.adjust("2 days")
              expect(yield* claim(DELIVERY_KIND)).toEqual([])
              // Fixed: recover re-sends it, the endpoint is active again.
              up = true
              const recovered = yield* webhooks.recover(STAFF, hook.id, {
                since: new Date(T0 + 29 * 24 * HOUR)
              })
              expect(recovered).toMatchObject({ recovered: 1, deliveryIds: [failed.id] })
              yield* attemptStep
              expect((yield* deliveries(hook.id)).models[0]).toMatchObject({
                status: "succeeded",
                attemptCount: 9
              })
              expect((yield* endpoint(hook.id)).status).toBe("active")
              const ids = new Set(
                receiver
                  .requests()
                  .filter((r) => r.path === "/manual")
                  .map((r) => r.headers["x-service-delivery"])
              )
              expect([...ids]).toEqual([failed.id])
            })
          )
      )
    }
  )
})
