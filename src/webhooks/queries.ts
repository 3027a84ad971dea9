/** Read-model lookups of webhook endpoints and the delivery log. */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import type { DeliveryStatus } from "./decider.js"
import type { Attempt, WebhookStatus } from "./events.js"
import { ATTEMPTS, DELIVERIES, ENDPOINTS } from "./projection.js"

export interface WebhookRow {
  readonly id: string
  readonly url: string
  readonly events: ReadonlyArray<string>
  readonly status: WebhookStatus
  readonly metadata: Readonly<Record<string, unknown>>
  readonly failingSince: Date | null
  readonly disabledReason: string | null
  readonly disabledAt: Date | null
  readonly previousSecretExpiresAt: Date | null
  readonly createdByType: string
  readonly createdById: string
  readonly createdAt: Date
  readonly updatedAt: Date
  readonly version: number
}

/** The endpoint columns as `WebhookRow` names them. */
export const ENDPOINT_COLUMNS = `webhook_id AS id, url, events, status, metadata, failing_since AS "failingSince",
  disabled_reason AS "disabledReason", disabled_at AS "disabledAt",
  previous_secret_expires_at AS "previousSecretExpiresAt", created_by_type AS "createdByType",
  created_by_id AS "createdById", created_at AS "createdAt", updated_at AS "updatedAt", version`

export const findWebhook = (webhookId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<WebhookRow>`SELECT ${sql.literal(ENDPOINT_COLUMNS)} FROM ${sql(ENDPOINTS)} WHERE webhook_id = ${webhookId}`,
      (rows) => Option.fromNullable(rows[0])
    )
  )

/** `GET /webhook`: oldest first (the order they were registered), paged. */
export const listWebhooks = (query: { readonly page: number; readonly display: number }) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all(
      {
        count: Effect.map(
          sql<{ count: number }>`SELECT count(*)::int AS count FROM ${sql(ENDPOINTS)}`,
          (rows) => rows[0]?.count ?? 0
        ),
        models: sql<WebhookRow>`SELECT ${sql.literal(ENDPOINT_COLUMNS)} FROM ${sql(ENDPOINTS)}
          ORDER BY created_at, webhook_id LIMIT ${query.display} OFFSET ${(query.page - 1) * query.display}`
      },
      { concurrency: 1 }
    )
  )

/** Endpoints that take new deliveries (`active` or `failing`), with what they subscribe to. */
export const liveEndpoints = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql<{ readonly id: string; readonly events: ReadonlyArray<string>; readonly createdAt: Date }>`
    SELECT webhook_id AS id, events, created_at AS "createdAt" FROM ${sql(ENDPOINTS)}
     WHERE status IN ('active', 'failing')
    ORDER BY webhook_id`
)

/** An attempt of the delivery log: what its `webhook_delivery.attempted` event recorded. */
export type AttemptRow = Attempt

export interface DeliveryRow {
  readonly id: string
  readonly webhookId: string
  readonly eventId: string
  readonly eventType: string
  readonly status: DeliveryStatus
  readonly attemptCount: number
  readonly lastStatusCode: number | null
  readonly lastError: string | null
  readonly nextAttemptAt: Date | null
  readonly succeededAt: Date | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

export interface DeliveryView extends DeliveryRow {
  readonly attempts: ReadonlyArray<AttemptRow>
}

const DELIVERY_COLUMNS = `delivery_id AS id, webhook_id AS "webhookId", event_id AS "eventId",
  event_type AS "eventType", status, attempts AS "attemptCount", last_status_code AS "lastStatusCode",
  last_error AS "lastError", next_attempt_at AS "nextAttemptAt", succeeded_at AS "succeededAt",
  created_at AS "createdAt", updated_at AS "updatedAt"`

const withAttempts = (rows: ReadonlyArray<DeliveryRow>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.gen(function* () {
      if (rows.length === 0) return []
      const attempts = yield* sql<AttemptRow & { readonly deliveryId: string }>`
        SELECT delivery_id AS "deliveryId", attempt, trigger, attempted_at AS "attemptedAt", succeeded,
               status_code AS "statusCode", duration_ms AS "durationMs", error_class AS "errorClass", error,
               response_excerpt AS "responseExcerpt", next_attempt_at AS "nextAttemptAt"
          FROM ${sql(ATTEMPTS)} WHERE delivery_id IN ${sql.in(rows.map((r) => r.id))}
         ORDER BY delivery_id, attempt`
      const byDelivery = new Map<string, Array<AttemptRow>>()
      for (const { deliveryId, ...attempt } of attempts) {
        const list = byDelivery.get(deliveryId) ?? []
        list.push(attempt)
        byDelivery.set(deliveryId, list)
      }
      return rows.map((row): DeliveryView => ({ ...row, attempts: byDelivery.get(row.id) ?? [] }))
    })
  )

/**
 * Reads in one snapshot: a delivery row and its attempts are written by one transaction, so a
 * reader must not see one without the other (READ COMMITTED would, between two statements).
 */
const consistently = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(
      Effect.zipRight(sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`, effect)
    )
  )

/** The delivery log of one endpoint, newest first, with every attempt. */
export const listDeliveries = (query: {
  readonly webhookId: string
  readonly page: number
  readonly display: number
  readonly status?: DeliveryStatus | undefined
  readonly eventId?: string | undefined
}) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.gen(function* () {
      const table = sql(DELIVERIES)
      const where = sql.and([
        sql`webhook_id = ${query.webhookId}`,
        ...(query.status === undefined ? [] : [sql`status = ${query.status}`]),
        ...(query.eventId === undefined ? [] : [sql`event_id = ${query.eventId}`])
      ])
      const count = yield* Effect.map(
        sql<{ count: number }>`SELECT count(*)::int AS count FROM ${table} WHERE ${where}`,
        (rows) => rows[0]?.count ?? 0
      )
      const rows =
        yield* sql<DeliveryRow>`SELECT ${sql.literal(DELIVERY_COLUMNS)} FROM ${table} WHERE ${where}
        ORDER BY created_at DESC, delivery_id DESC LIMIT ${query.display}
        OFFSET ${(query.page - 1) * query.display}`
      return { count, models: yield* withAttempts(rows) }
    }).pipe(consistently)
  )

export const findDelivery = (deliveryId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.gen(function* () {
      const rows = yield* sql<DeliveryRow>`SELECT ${sql.literal(DELIVERY_COLUMNS)} FROM ${sql(DELIVERIES)}
        WHERE delivery_id = ${deliveryId}`
      const views = yield* withAttempts(rows)
      return Option.fromNullable(views[0])
    }).pipe(consistently)
  )

/** Failed deliveries of an endpoint created at or after `since` (what `recover` sends again). */
export const failedDeliveriesSince = (webhookId: string, since: Date, limit: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ readonly id: string }>`SELECT delivery_id AS id FROM ${sql(DELIVERIES)}
        WHERE webhook_id = ${webhookId} AND status = 'failed' AND created_at >= ${since}
        ORDER BY created_at, delivery_id LIMIT ${limit}`,
      (rows) => rows.map((r) => r.id)
    )
  )

/** The public event a delivery carries (its snapshot as of the event). */
/** A public event as a delivery sends it. */
export interface DeliverableEvent {
  readonly id: string
  readonly type: string
  readonly data: unknown
  readonly occurredAt: Date
}

export const publicEventById = (eventId: string) =>
  Effect.map(publicEventsByIds([eventId]), (found) => Option.fromNullable(found.get(eventId)))

/** Public events by id, in one query (the events of a claimed batch of deliveries). */
export const publicEventsByIds = (eventIds: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    eventIds.length === 0
      ? Effect.succeed(new Map<string, DeliverableEvent>())
      : Effect.map(
          sql<DeliverableEvent>`
            SELECT id, type, data, occurred_at AS "occurredAt" FROM event_store.public_events
             WHERE id = ANY(${[...eventIds]})`,
          (rows) => new Map(rows.map((r) => [r.id, r]))
        )
  )
