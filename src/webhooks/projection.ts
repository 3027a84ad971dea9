/**
 * The webhooks read models: endpoints (no secrets), deliveries and their attempts (the delivery log).
 * Each event first moves its row's `version` forward, so applying an event twice changes nothing.
 * Deleting an endpoint deletes its log.
 *
 * Deliveries come in bulk (a dispatch creates many, a worker records many attempts), so a run of
 * consecutive `webhook_delivery.created` events is one INSERT, and a run of consecutive
 * `webhook_delivery.attempted` events is one statement (guarded UPDATE of the deliveries, then the
 * attempts of the updates that applied). Every other event is applied on its own, in order.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { textArray } from "../db/Sql.js"
import type { Recorded } from "../kernel/Decider.js"
import { defineProjection } from "../kernel/Projection.js"
import { type DeliveryEvent, deliveryEventTypes, type WebhookEvent, webhookEventTypes } from "./events.js"

export const ENDPOINTS = "webhooks.endpoints"
export const DELIVERIES = "webhooks.deliveries"
export const ATTEMPTS = "webhooks.attempts"

/** Stored per attempt: enough to see what the receiver said (the read itself is capped at 16 KiB). */
export const EXCERPT_CHARS = 2048

type Event = Recorded<WebhookEvent | DeliveryEvent>
type Created = Extract<Event, { readonly type: "webhook_delivery.created" }>
type Attempted = Extract<Event, { readonly type: "webhook_delivery.attempted" }>
type Single = Exclude<Event, Created | Attempted>

export type Run =
  | { readonly kind: "created"; readonly events: ReadonlyArray<Created> }
  | { readonly kind: "attempted"; readonly events: ReadonlyArray<Attempted> }
  | { readonly kind: "single"; readonly event: Single }

/**
 * Splits a batch, in order, into runs of consecutive `created` and of consecutive `attempted` events
 * and single other events. A run never holds the same delivery twice (an UPDATE ... FROM would apply
 * only one of its source rows): a repeated delivery starts a new run.
 */
export const runsOf = (events: ReadonlyArray<Event>): ReadonlyArray<Run> => {
  const runs: Array<Run> = []
  let created: Array<Created> | undefined
  let attempted: Array<Attempted> | undefined
  const ids = new Set<string>()
  const close = () => {
    created = undefined
    attempted = undefined
    ids.clear()
  }
  for (const e of events) {
    if (e.type === "webhook_delivery.created") {
      if (created === undefined || ids.has(e.data.deliveryId)) {
        close()
        created = [e]
        runs.push({ kind: "created", events: created })
      } else created.push(e)
      ids.add(e.data.deliveryId)
    } else if (e.type === "webhook_delivery.attempted") {
      if (attempted === undefined || ids.has(e.data.deliveryId)) {
        close()
        attempted = [e]
        runs.push({ kind: "attempted", events: attempted })
      } else attempted.push(e)
      ids.add(e.data.deliveryId)
    } else {
      close()
      runs.push({ kind: "single", event: e })
    }
  }
  return runs
}

/**
 * The first EXCERPT_CHARS of a response, never cut inside a UTF-16 surrogate pair: a lone surrogate
 * is not valid JSON text for jsonb (the event's append would fail).
 */
export const excerptOf = (text: string) => {
  if (text.length <= EXCERPT_CHARS) return text
  const code = text.charCodeAt(EXCERPT_CHARS - 1)
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? EXCERPT_CHARS - 1 : EXCERPT_CHARS)
}

/** A `created` event as a JSON row (timestamps as ISO strings, cast back by the statement). */
const createdRow = (e: Created) => ({
  delivery_id: e.data.deliveryId,
  webhook_id: e.data.webhookId,
  event_id: e.data.eventId,
  event_type: e.data.eventType,
  recorded_at: e.recordedAt.toISOString(),
  version: e.streamVersion
})

/** An `attempted` event as a JSON row: every key present, `null` where the event has null. */
const attemptedRow = (e: Attempted) => {
  const d = e.data
  return {
    delivery_id: d.deliveryId,
    webhook_id: d.webhookId,
    attempt: d.attempt,
    trigger: d.trigger,
    attempted_at: d.attemptedAt.toISOString(),
    succeeded: d.succeeded,
    status_code: d.statusCode,
    duration_ms: d.durationMs,
    error_class: d.errorClass,
    error: d.error,
    response_excerpt: d.responseExcerpt === null ? null : excerptOf(d.responseExcerpt),
    next_attempt_at: d.nextAttemptAt === null ? null : d.nextAttemptAt.toISOString(),
    status: d.succeeded ? "succeeded" : d.nextAttemptAt === null ? "failed" : "pending",
    version: e.streamVersion,
    recorded_at: e.recordedAt.toISOString()
  }
}

export const WebhooksProjection = defineProjection({
  name: "webhooks",
  tables: [ENDPOINTS, DELIVERIES, ATTEMPTS],
  events: [...webhookEventTypes, ...deliveryEventTypes],
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const endpoints = sql(target.table(ENDPOINTS))
      const deliveries = sql(target.table(DELIVERIES))
      const attempts = sql(target.table(ATTEMPTS))
      const endpoint = (webhookId: string, version: number, at: Date, changes: Record<string, unknown>) =>
        sql`UPDATE ${endpoints} SET ${sql.update({ ...changes, version, updated_at: at })}
              WHERE webhook_id = ${webhookId} AND version < ${version}`
      const delivery = (deliveryId: string, version: number, at: Date, changes: Record<string, unknown>) =>
        sql`UPDATE ${deliveries} SET ${sql.update({ ...changes, version, updated_at: at })}
              WHERE delivery_id = ${deliveryId} AND version < ${version}`
      // A delivery dispatched after its endpoint was deleted has no log to join.
      const insertDeliveries = (run: ReadonlyArray<Created>) =>
        sql`INSERT INTO ${deliveries} (delivery_id, webhook_id, event_id, event_type, status,
              next_attempt_at, created_at, updated_at, version)
            SELECT i.delivery_id, i.webhook_id, i.event_id, i.event_type, 'pending', i.recorded_at,
                   i.recorded_at, i.recorded_at, i.version
              FROM jsonb_to_recordset(${JSON.stringify(run.map(createdRow))}::jsonb)
                   AS i(delivery_id text, webhook_id text, event_id text, event_type text,
                        recorded_at timestamptz, version integer)
             WHERE EXISTS (SELECT 1 FROM ${endpoints} AS e WHERE e.webhook_id = i.webhook_id)
            ON CONFLICT (delivery_id) DO NOTHING`
      // Each attempt row only where its delivery update applied (the row was behind the event).
      const recordAttempts = (run: ReadonlyArray<Attempted>) =>
        sql`WITH input AS (
              SELECT * FROM jsonb_to_recordset(${JSON.stringify(run.map(attemptedRow))}::jsonb)
                AS i(delivery_id text, webhook_id text, attempt integer, trigger text,
                     attempted_at timestamptz, succeeded boolean, status_code integer, duration_ms integer,
                     error_class text, error text, response_excerpt text, next_attempt_at timestamptz,
                     status text, version integer, recorded_at timestamptz)
            ), updated AS (
              UPDATE ${deliveries} AS d
                 SET status = i.status, attempts = i.attempt, last_status_code = i.status_code,
                     last_error = i.error, next_attempt_at = i.next_attempt_at,
                     succeeded_at = CASE WHEN i.succeeded THEN i.attempted_at ELSE d.succeeded_at END,
                     version = i.version, updated_at = i.recorded_at
                FROM input AS i
               WHERE d.delivery_id = i.delivery_id AND d.version < i.version
              RETURNING d.delivery_id
            )
            INSERT INTO ${attempts} (delivery_id, attempt, webhook_id, trigger, attempted_at, succeeded,
              status_code, duration_ms, error_class, error, response_excerpt, next_attempt_at)
            SELECT i.delivery_id, i.attempt, i.webhook_id, i.trigger, i.attempted_at, i.succeeded,
                   i.status_code, i.duration_ms, i.error_class, i.error, i.response_excerpt, i.next_attempt_at
              FROM updated JOIN input AS i ON i.delivery_id = updated.delivery_id
            ON CONFLICT (delivery_id, attempt) DO NOTHING`
      for (const run of runsOf(events)) {
        if (run.kind === "created") {
          yield* insertDeliveries(run.events)
          continue
        }
        if (run.kind === "attempted") {
          yield* recordAttempts(run.events)
          continue
        }
        const e = run.event
        const at = e.recordedAt
        const v = e.streamVersion
        switch (e.type) {
          case "webhook.created": {
            const d = e.data
            yield* sql`INSERT INTO ${endpoints} (webhook_id, url, events, metadata, status, created_by_type,
                created_by_id, created_at, updated_at, version)
              VALUES (${d.webhookId}, ${d.url}, ${textArray(sql, d.events)}, ${JSON.stringify(d.metadata)}::jsonb,
                'active', ${d.createdBy.type}, ${d.createdBy.id}, ${at}, ${at}, ${v})
              ON CONFLICT (webhook_id) DO NOTHING`
            break
          }
          case "webhook.updated": {
            const d = e.data
            const changes: Record<string, unknown> = {}
            if (d.url !== undefined) changes.url = d.url
            if (d.metadata !== undefined) changes.metadata = JSON.stringify(d.metadata)
            yield* endpoint(d.webhookId, v, at, changes)
            // Only if the update above applied this event (the row is now at its version).
            if (d.events !== undefined)
              yield* sql`UPDATE ${endpoints} SET events = ${textArray(sql, d.events)}
                WHERE webhook_id = ${d.webhookId} AND version = ${v}`
            break
          }
          case "webhook.secret_rotated":
            yield* endpoint(e.data.webhookId, v, at, {
              previous_secret_expires_at: e.data.previousSecretExpiresAt
            })
            break
          case "webhook.failing":
            yield* endpoint(e.data.webhookId, v, at, {
              status: "failing",
              failing_since: e.data.failingSince
            })
            break
          case "webhook.recovered":
          case "webhook.enabled":
            yield* endpoint(e.data.webhookId, v, at, {
              status: "active",
              failing_since: null,
              disabled_reason: null,
              disabled_at: null
            })
            break
          case "webhook.disabled":
            yield* endpoint(e.data.webhookId, v, at, {
              status: "disabled",
              disabled_reason: e.data.reason,
              disabled_at: at
            })
            break
          case "webhook.deleted":
            yield* sql`DELETE FROM ${endpoints} WHERE webhook_id = ${e.data.webhookId}`
            yield* sql`DELETE FROM ${deliveries} WHERE webhook_id = ${e.data.webhookId}`
            yield* sql`DELETE FROM ${attempts} WHERE webhook_id = ${e.data.webhookId}`
            break
          case "webhook_delivery.redelivery_requested":
            yield* delivery(e.data.deliveryId, v, at, { status: "pending", next_attempt_at: at })
            break
          case "webhook_delivery.abandoned":
            yield* delivery(e.data.deliveryId, v, at, {
              status: "failed",
              last_error: e.data.reason,
              next_attempt_at: null
            })
            break
        }
      }
    })
})
