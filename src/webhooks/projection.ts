/**
 * The webhooks read models: endpoints (no secrets), deliveries and their attempts (the delivery log).
 * Each event first moves its row's `version` forward, so applying an event twice changes nothing.
 * Deleting an endpoint deletes its log.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { textArray } from "../db/Sql.js"
import { defineProjection } from "../kernel/Projection.js"
import { deliveryEventTypes, webhookEventTypes } from "./events.js"

export const ENDPOINTS = "webhooks.endpoints"
export const DELIVERIES = "webhooks.deliveries"
export const ATTEMPTS = "webhooks.attempts"

/** Stored per attempt: enough to see what the receiver said (the read itself is capped at 16 KiB). */
export const EXCERPT_CHARS = 2048

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
        Effect.map(
          sql`UPDATE ${deliveries} SET ${sql.update({ ...changes, version, updated_at: at })}
                WHERE delivery_id = ${deliveryId} AND version < ${version} RETURNING 1 AS ok`,
          (rows) => rows.length > 0
        )
      for (const e of events) {
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
          case "webhook_delivery.created": {
            const d = e.data
            // A delivery dispatched after its endpoint was deleted has no log to join.
            yield* sql`INSERT INTO ${deliveries} (delivery_id, webhook_id, event_id, event_type, status,
                next_attempt_at, created_at, updated_at, version)
              SELECT ${d.deliveryId}, ${d.webhookId}, ${d.eventId}, ${d.eventType}, 'pending', ${at}, ${at}, ${at}, ${v}
               WHERE EXISTS (SELECT 1 FROM ${endpoints} WHERE webhook_id = ${d.webhookId})
              ON CONFLICT (delivery_id) DO NOTHING`
            break
          }
          case "webhook_delivery.attempted": {
            const d = e.data
            const status = d.succeeded ? "succeeded" : d.nextAttemptAt === null ? "failed" : "pending"
            const applied = yield* delivery(d.deliveryId, v, at, {
              status,
              attempts: d.attempt,
              last_status_code: d.statusCode,
              last_error: d.error,
              next_attempt_at: d.nextAttemptAt,
              ...(d.succeeded ? { succeeded_at: d.attemptedAt } : {})
            })
            if (!applied) break
            yield* sql`INSERT INTO ${attempts} (delivery_id, attempt, webhook_id, trigger, attempted_at, succeeded,
                status_code, duration_ms, error_class, error, response_excerpt, next_attempt_at)
              VALUES (${d.deliveryId}, ${d.attempt}, ${d.webhookId}, ${d.trigger}, ${d.attemptedAt}, ${d.succeeded},
                ${d.statusCode}, ${d.durationMs}, ${d.errorClass}, ${d.error},
                ${d.responseExcerpt === null ? null : d.responseExcerpt.slice(0, EXCERPT_CHARS)}, ${d.nextAttemptAt})
              ON CONFLICT (delivery_id, attempt) DO NOTHING`
            break
          }
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
