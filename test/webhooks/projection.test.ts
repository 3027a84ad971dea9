/**
 * The webhooks projection applies runs of `webhook_delivery.created` and of
 * `webhook_delivery.attempted` events as one statement each: a mixed batch (a delivery attempted
 * twice, a redelivery in between, an attempt whose delivery has no row, an older event after a newer
 * one, the same events applied again) leaves exactly the rows that applying its events one at a time
 * leaves.
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import type { DomainEvent } from "../../src/eventstore/EventType.js"
import type { Recorded } from "../../src/kernel/Decider.js"
import { liveTarget } from "../../src/kernel/Projection.js"
import {
  DeliveryAbandoned,
  DeliveryAttempted,
  DeliveryCreated,
  DeliveryRedeliveryRequested,
  WebhookCreated,
  WebhookDeleted,
  WebhookDisabled
} from "../../src/webhooks/events.js"
import { ATTEMPTS, DELIVERIES, ENDPOINTS, runsOf, WebhooksProjection } from "../../src/webhooks/projection.js"
import { rowsOf, TestPersistence } from "../support/database.js"

const T0 = Date.parse("2030-01-02T03:04:05.678Z")
const at = (seconds: number) => new Date(T0 + seconds * 1_000)

let position = 0
/** An event as the runner records it: stream `streamId` at `version`, recorded at `recordedAt`. */
const recorded = <E extends DomainEvent>(
  event: E,
  streamId: string,
  version: number,
  recordedAt: Date
): Recorded<E> => ({
  ...event,
  globalPosition: ++position,
  transactionId: String(1_000 + position),
  streamId,
  streamVersion: version,
  eventId: randomUUID(),
  schemaVersion: 1,
  metadata: {},
  recordedAt
})

const endpoint = (webhookId: string, seconds: number) =>
  recorded(
    WebhookCreated.make({
      webhookId,
      url: `https://example.test/${webhookId}`,
      events: ["order.created"],
      metadata: { team: "ops" },
      secret: "whsec_test",
      createdBy: { type: "user", id: "usr_1" }
    }),
    `webhook-${webhookId}`,
    1,
    at(seconds)
  )

const created = (deliveryId: string, webhookId: string, seconds: number) =>
  recorded(
    DeliveryCreated.make({ deliveryId, webhookId, eventId: `evt_${deliveryId}`, eventType: "order.created" }),
    `delivery-${deliveryId}`,
    1,
    at(seconds)
  )

interface Outcome {
  readonly succeeded: boolean
  readonly statusCode: number | null
  readonly error: string | null
  readonly errorClass: string | null
  readonly responseExcerpt: string | null
  /** Seconds after T0, or null when no other attempt follows. */
  readonly next: number | null
  readonly trigger?: "auto" | "manual"
}

const attempted = (
  deliveryId: string,
  webhookId: string,
  attempt: number,
  version: number,
  seconds: number,
  outcome: Outcome
) =>
  recorded(
    DeliveryAttempted.make({
      deliveryId,
      webhookId,
      attempt,
      trigger: outcome.trigger ?? "auto",
      attemptedAt: at(seconds - 0.25),
      succeeded: outcome.succeeded,
      statusCode: outcome.statusCode,
      durationMs: 120 + attempt,
      errorClass: outcome.errorClass,
      error: outcome.error,
      responseExcerpt: outcome.responseExcerpt,
      nextAttemptAt: outcome.next === null ? null : at(outcome.next)
    }),
    `delivery-${deliveryId}`,
    version,
    at(seconds)
  )

const ok: Outcome = {
  succeeded: true,
  statusCode: 200,
  error: null,
  errorClass: null,
  responseExcerpt: "ok",
  next: null
}
const retry = (next: number): Outcome => ({
  succeeded: false,
  statusCode: 500,
  error: "HTTP 500",
  errorClass: "http_status",
  responseExcerpt: "boom",
  next
})
const timeout: Outcome = {
  succeeded: false,
  statusCode: null,
  error: "timed out after 10s",
  errorClass: "timeout",
  responseExcerpt: null,
  next: null
}

/** Longer than the stored excerpt, cut by it inside a surrogate pair. */
const LONG_EXCERPT = `${"a".repeat(2047)}😀${"b".repeat(100)}`

const redelivery = (deliveryId: string, webhookId: string, version: number, seconds: number) =>
  recorded(
    DeliveryRedeliveryRequested.make({ deliveryId, webhookId, source: "redeliver" }),
    `delivery-${deliveryId}`,
    version,
    at(seconds)
  )

const dlv1Attempt1 = attempted("dlv_1", "wh_a", 1, 2, 20, retry(80))

/** An event of the webhooks projection, as `runsOf` and `apply` take it. */
type WebhooksRecorded = Parameters<typeof runsOf>[0][number]

const history: ReadonlyArray<WebhooksRecorded> = [
  endpoint("wh_a", 0),
  endpoint("wh_b", 1),
  endpoint("wh_doomed", 2),
  // A run of creations; wh_gone never existed, so dlv_orphan gets no row.
  created("dlv_1", "wh_a", 10),
  created("dlv_2", "wh_a", 10),
  created("dlv_3", "wh_b", 11),
  created("dlv_orphan", "wh_gone", 11),
  created("dlv_doomed", "wh_doomed", 12),
  created("dlv_4", "wh_b", 12),
  // A run of attempts: dlv_1 twice (a second run), dlv_orphan has no row to update.
  dlv1Attempt1,
  attempted("dlv_2", "wh_a", 1, 2, 20, ok),
  attempted("dlv_3", "wh_b", 1, 2, 21, timeout),
  attempted("dlv_orphan", "wh_gone", 1, 2, 21, retry(81)),
  attempted("dlv_doomed", "wh_doomed", 1, 2, 22, retry(82)),
  attempted("dlv_1", "wh_a", 2, 3, 80, { ...ok, responseExcerpt: LONG_EXCERPT }),
  // An older event after a newer one changes nothing.
  dlv1Attempt1,
  // dlv_2 already succeeded: a manual redelivery that fails keeps its succeeded_at.
  redelivery("dlv_2", "wh_a", 3, 90),
  attempted("dlv_2", "wh_a", 2, 4, 91, { ...retry(150), trigger: "manual" }),
  attempted("dlv_3", "wh_b", 2, 3, 91, { ...retry(200), statusCode: 503, responseExcerpt: "" }),
  recorded(
    DeliveryAbandoned.make({ deliveryId: "dlv_4", webhookId: "wh_b", reason: "endpoint disabled" }),
    "delivery-dlv_4",
    2,
    at(95)
  ),
  recorded(WebhookDisabled.make({ webhookId: "wh_b", reason: "manual" }), "webhook-wh_b", 2, at(95)),
  recorded(WebhookDeleted.make({ webhookId: "wh_doomed" }), "webhook-wh_doomed", 2, at(96)),
  // Dispatched to a deleted endpoint: no row, and its attempt no attempt row.
  created("dlv_late", "wh_doomed", 97),
  attempted("dlv_late", "wh_doomed", 1, 2, 98, ok),
  created("dlv_5", "wh_a", 99),
  attempted("dlv_5", "wh_a", 1, 2, 100, ok)
]

const tables = Effect.all({
  endpoints: rowsOf(ENDPOINTS, "webhook_id"),
  deliveries: rowsOf(DELIVERIES, "delivery_id"),
  attempts: rowsOf(ATTEMPTS, "delivery_id, attempt")
})

const truncate = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`TRUNCATE ${sql(ENDPOINTS)}, ${sql(DELIVERIES)}, ${sql(ATTEMPTS)}`
)

const applyBatch = (events: ReadonlyArray<Recorded>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(WebhooksProjection.apply(events, liveTarget))
  )

const applyOneByOne = (events: ReadonlyArray<Recorded>) =>
  Effect.forEach(events, (e) => applyBatch([e]), { discard: true })

/** The rows left by applying `events` in one batch, from empty tables. */
const afterBatch = (events: ReadonlyArray<Recorded>) =>
  Effect.zipRight(Effect.zipRight(truncate, applyBatch(events)), tables)

const afterOneByOne = (events: ReadonlyArray<Recorded>) =>
  Effect.zipRight(Effect.zipRight(truncate, applyOneByOne(events)), tables)

describe("runsOf", () => {
  const kinds = (events: ReadonlyArray<WebhooksRecorded>) =>
    runsOf(events).map((run) => (run.kind === "single" ? run.event.type : `${run.kind}×${run.events.length}`))

  it("groups consecutive creations and attempts, splitting at a repeated delivery", () => {
    expect(kinds(history)).toEqual([
      "webhook.created",
      "webhook.created",
      "webhook.created",
      "created×6",
      "attempted×5",
      "attempted×1",
      "attempted×1",
      "webhook_delivery.redelivery_requested",
      "attempted×2",
      "webhook_delivery.abandoned",
      "webhook.disabled",
      "webhook.deleted",
      "created×1",
      "attempted×1",
      "created×1",
      "attempted×1"
    ])
  })
})

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })("WebhooksProjection batches", (it) => {
  it.effect("a batch leaves the rows its events leave one at a time", () =>
    Effect.gen(function* () {
      const single = yield* afterOneByOne(history)
      const batched = yield* afterBatch(history)
      expect(batched).toEqual(single)

      expect(single.endpoints.map((r) => r.webhook_id)).toEqual(["wh_a", "wh_b"])
      const deliveries = new Map(single.deliveries.map((r) => [r.delivery_id, r]))
      expect([...deliveries.keys()]).toEqual(["dlv_1", "dlv_2", "dlv_3", "dlv_4", "dlv_5"])
      expect(deliveries.get("dlv_1")).toMatchObject({
        status: "succeeded",
        attempts: 2,
        last_status_code: 200,
        last_error: null,
        next_attempt_at: null,
        succeeded_at: at(79.75),
        updated_at: at(80),
        created_at: at(10),
        version: 3
      })
      expect(deliveries.get("dlv_2")).toMatchObject({
        status: "pending",
        attempts: 2,
        last_status_code: 500,
        last_error: "HTTP 500",
        next_attempt_at: at(150),
        succeeded_at: at(19.75),
        updated_at: at(91),
        version: 4
      })
      expect(deliveries.get("dlv_3")).toMatchObject({
        status: "pending",
        attempts: 2,
        last_status_code: 503,
        next_attempt_at: at(200),
        succeeded_at: null,
        version: 3
      })
      expect(deliveries.get("dlv_4")).toMatchObject({
        status: "failed",
        attempts: 0,
        last_error: "endpoint disabled",
        next_attempt_at: null,
        version: 2
      })

      const attempts = single.attempts.map((r) => `${r.delivery_id}#${r.attempt}`)
      expect(attempts).toEqual(["dlv_1#1", "dlv_1#2", "dlv_2#1", "dlv_2#2", "dlv_3#1", "dlv_3#2", "dlv_5#1"])
      const long = single.attempts.find((r) => r.delivery_id === "dlv_1" && r.attempt === 2)
      // Cut before the pair rather than inside it (a lone surrogate is not valid jsonb text).
      expect(long?.response_excerpt).toBe("a".repeat(2047))
      expect(single.attempts.find((r) => r.delivery_id === "dlv_2" && r.attempt === 2)).toMatchObject({
        trigger: "manual",
        succeeded: false,
        status_code: 500,
        duration_ms: 122,
        error_class: "http_status",
        response_excerpt: "boom",
        attempted_at: at(90.75),
        next_attempt_at: at(150)
      })
      expect(single.attempts.find((r) => r.delivery_id === "dlv_3" && r.attempt === 1)).toMatchObject({
        status_code: null,
        error_class: "timeout",
        response_excerpt: null,
        next_attempt_at: null
      })
    })
  )

  it.effect("applying the same events again changes nothing", () =>
    Effect.gen(function* () {
      const once = yield* afterOneByOne(history)
      // Twice over, in one batch and in two.
      expect(yield* afterBatch([...history, ...history])).toEqual(once)
      yield* applyBatch(history)
      expect(yield* tables).toEqual(once)
      // One at a time over the batch's rows, and a batch over rows applied one at a time.
      yield* applyOneByOne(history)
      expect(yield* tables).toEqual(once)
      yield* truncate
      yield* applyOneByOne(history)
      yield* applyBatch(history)
      expect(yield* tables).toEqual(once)
    })
  )

  it.effect("every prefix and suffix split of the history matches", () =>
    Effect.gen(function* () {
      const expected = yield* afterOneByOne(history)
      for (let cut = 0; cut <= history.length; cut += 3) {
        yield* truncate
        yield* applyBatch(history.slice(0, cut))
        yield* applyBatch(history.slice(cut))
        expect(yield* tables).toEqual(expected)
      }
    })
  )
})
