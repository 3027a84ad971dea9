/**
 * The payments read model: one row per payment intent, per payment and per refund (migration 0016).
 * A payment intent's stream holds its payments and refunds, so each event first moves the intent
 * row's `version` forward (and stops there when the row is already at or past it): applying an event
 * twice changes nothing, and a rebuild from the log reproduces every row. Outcome events carry the
 * totals they result in, so nothing here recomputes money.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { deferInTransaction } from "../db/Sql.js"
import { defineProjection } from "../kernel/Projection.js"
import { paymentEventTypes } from "./events.js"

export const INTENTS = "payments.payment_intents"
export const PAYMENTS = "payments.payments"
export const REFUNDS = "payments.refunds"

export const PaymentsProjection = defineProjection({
  name: "payments",
  tables: [INTENTS, PAYMENTS, REFUNDS],
  events: paymentEventTypes,
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const intents = sql(target.table(INTENTS))
      const payments = sql(target.table(PAYMENTS))
      const refunds = sql(target.table(REFUNDS))
      const json = (value: unknown) => (value === null ? null : JSON.stringify(value))
      // Each event is ONE statement: the intent row moves to the event's version (and the event's
      // changes of it) only when it is behind it, and the other rows change only when it did (a CTE).
      const ahead = (paymentIntentId: string, version: number) =>
        sql`payment_intent_id = ${paymentIntentId} AND version < ${version}`
      for (let index = 0; index < events.length; index++) {
        const e = events[index]
        if (e === undefined) continue
        const at = e.recordedAt
        const v = e.streamVersion
        const next = events[index + 1]
        if (
          e.type === "payment_intent.created" &&
          next?.type === "payment_intent.attempt_started" &&
          next.streamId === e.streamId &&
          next.streamVersion === v + 1 &&
          next.data.abandonedPaymentId === undefined
        ) {
          // Created and confirmed in one command: the two events' rows in ONE statement, exactly as
          // applying them one after the other would leave them (an intent row already there, at
          // version 1, takes the attempt's changes; one at version 2 or beyond, nothing).
          const d = e.data
          const s = next.data
          const nextAt = next.recordedAt
          yield* deferInTransaction(sql`WITH i AS (
              INSERT INTO ${intents} AS t (payment_intent_id, amount, currency, status, capture_method, customer_id,
                description, payment_method, metadata, processor, call_key_prefix, created_at, updated_at, version,
                latest_payment_id)
              VALUES (${d.paymentIntentId}, ${d.amount}, ${d.currency}, 'processing', ${d.captureMethod},
                ${d.customerId}, ${d.description}, ${json(s.paymentMethod)}::jsonb, ${JSON.stringify(d.metadata)}::jsonb,
                ${d.processor}, ${d.callKeyPrefix ?? d.paymentIntentId}, ${at}, ${nextAt}, ${v + 1}, ${s.paymentId})
              ON CONFLICT (payment_intent_id) DO UPDATE SET version = EXCLUDED.version, updated_at = EXCLUDED.updated_at,
                status = 'processing', payment_method = EXCLUDED.payment_method, last_payment_error = NULL,
                next_action = NULL, latest_payment_id = EXCLUDED.latest_payment_id
              WHERE t.version < EXCLUDED.version
              RETURNING payment_intent_id, customer_id, amount, currency, capture_method, processor, description, metadata)
            INSERT INTO ${payments} (payment_id, payment_intent_id, customer_id, amount, currency, status,
              capture_method, payment_method, processor, description, metadata, created_at, updated_at)
            SELECT ${s.paymentId}, payment_intent_id, customer_id, amount, currency, 'pending', capture_method,
              ${json(s.paymentMethod)}::jsonb, processor, description, metadata, ${nextAt}, ${nextAt} FROM i
            ON CONFLICT (payment_id) DO NOTHING`)
          index++
          continue
        }
        switch (e.type) {
          case "payment_intent.created": {
            const d = e.data
            yield* deferInTransaction(sql`INSERT INTO ${intents} (payment_intent_id, amount, currency, status, capture_method, customer_id,
                description, payment_method, metadata, processor, call_key_prefix, created_at, updated_at, version)
              VALUES (${d.paymentIntentId}, ${d.amount}, ${d.currency},
                ${d.paymentMethod === null ? "requires_payment_method" : "requires_confirmation"}, ${d.captureMethod},
                ${d.customerId}, ${d.description}, ${json(d.paymentMethod)}::jsonb, ${JSON.stringify(d.metadata)}::jsonb,
                ${d.processor}, ${d.callKeyPrefix ?? d.paymentIntentId}, ${at}, ${at}, ${v})
              ON CONFLICT (payment_intent_id) DO NOTHING`)
            break
          }
          case "payment_intent.attempt_started": {
            const d = e.data
            yield* deferInTransaction(sql`WITH i AS (
                UPDATE ${intents} SET version = ${v}, updated_at = ${at}, status = 'processing',
                  payment_method = ${json(d.paymentMethod)}::jsonb, last_payment_error = NULL, next_action = NULL,
                  latest_payment_id = ${d.paymentId}
                WHERE ${ahead(d.paymentIntentId, v)}
                RETURNING payment_intent_id, customer_id, amount, currency, capture_method, processor, description, metadata),
              abandoned AS (
                UPDATE ${payments} SET status = 'canceled', canceled_at = ${at}, updated_at = ${at}
                WHERE payment_id = ${d.abandonedPaymentId ?? null} AND EXISTS (SELECT 1 FROM i))
              INSERT INTO ${payments} (payment_id, payment_intent_id, customer_id, amount, currency, status,
                capture_method, payment_method, processor, description, metadata, created_at, updated_at)
              SELECT ${d.paymentId}, payment_intent_id, customer_id, amount, currency, 'pending', capture_method,
                ${json(d.paymentMethod)}::jsonb, processor, description, metadata, ${at}, ${at} FROM i
              ON CONFLICT (payment_id) DO NOTHING`)
            break
          }
          case "payment_intent.payment_authorized": {
            const d = e.data
            const captured = d.captured ? d.amount : 0
            yield* deferInTransaction(sql`WITH i AS (
                UPDATE ${intents} SET version = ${v}, updated_at = ${at},
                  status = ${d.captured ? "succeeded" : "requires_capture"}, next_action = NULL,
                  amount_capturable = ${d.captured ? 0 : d.amount}, amount_received = amount_received + ${captured}
                WHERE ${ahead(d.paymentIntentId, v)} RETURNING 1)
              UPDATE ${payments} SET status = ${d.captured ? "succeeded" : "authorized"},
                processor_reference = ${d.processorReference}, amount_captured = ${captured}, authorized_at = ${at},
                captured_at = ${d.captured ? at : null}, updated_at = ${at}
              WHERE payment_id = ${d.paymentId} AND EXISTS (SELECT 1 FROM i)`)
            break
          }
          case "payment_intent.action_required": {
            const d = e.data
            yield* deferInTransaction(sql`WITH i AS (
                UPDATE ${intents} SET version = ${v}, updated_at = ${at}, status = 'requires_action',
                  next_action = ${JSON.stringify(d.nextAction)}::jsonb
                WHERE ${ahead(d.paymentIntentId, v)} RETURNING 1)
              UPDATE ${payments} SET processor_reference = ${d.processorReference}, updated_at = ${at}
              WHERE payment_id = ${d.paymentId} AND EXISTS (SELECT 1 FROM i)`)
            break
          }
          case "payment_intent.authentication_started":
            yield* deferInTransaction(sql`UPDATE ${intents} SET version = ${v}, updated_at = ${at}, status = 'processing', next_action = NULL
              WHERE ${ahead(e.data.paymentIntentId, v)}`)
            break
          case "payment_intent.payment_failed": {
            const d = e.data
            yield* deferInTransaction(sql`WITH i AS (
                UPDATE ${intents} SET version = ${v}, updated_at = ${at}, status = 'requires_payment_method',
                  payment_method = NULL, next_action = NULL,
                  last_payment_error = jsonb_build_object('type', 'card_error', 'code', ${d.code}::text,
                    'declineCode', ${d.declineCode}::text, 'message', ${d.message}::text,
                    'paymentMethod', (SELECT p.payment_method FROM ${payments} p WHERE p.payment_id = ${d.paymentId}))
                WHERE ${ahead(d.paymentIntentId, v)} RETURNING 1)
              UPDATE ${payments} SET status = 'failed', failure_code = ${d.code}, decline_code = ${d.declineCode},
                failure_message = ${d.message}, updated_at = ${at}
              WHERE payment_id = ${d.paymentId} AND EXISTS (SELECT 1 FROM i)`)
            break
          }
          case "payment_intent.payment_captured": {
            const d = e.data
            yield* deferInTransaction(sql`WITH i AS (
                UPDATE ${intents} SET version = ${v}, updated_at = ${at}, status = 'succeeded', amount_capturable = 0,
                  amount_received = amount_received + ${d.amount}
                WHERE ${ahead(d.paymentIntentId, v)} RETURNING 1)
              UPDATE ${payments} SET status = 'succeeded', amount_captured = ${d.amount}, captured_at = ${at},
                updated_at = ${at}
              WHERE payment_id = ${d.paymentId} AND EXISTS (SELECT 1 FROM i)`)
            break
          }
          case "payment_intent.canceled": {
            const d = e.data
            yield* deferInTransaction(sql`WITH i AS (
                UPDATE ${intents} SET version = ${v}, updated_at = ${at}, status = 'canceled', next_action = NULL,
                  amount_capturable = 0, cancellation_reason = ${d.cancellationReason}, canceled_at = ${at}
                WHERE ${ahead(d.paymentIntentId, v)} RETURNING 1)
              UPDATE ${payments} SET status = 'canceled', canceled_at = ${at}, updated_at = ${at}
              WHERE payment_id = ${d.paymentId} AND EXISTS (SELECT 1 FROM i)`)
            break
          }
          case "payment_intent.refund_started": {
            const d = e.data
            yield* deferInTransaction(sql`WITH i AS (
                UPDATE ${intents} SET version = ${v}, updated_at = ${at}
                WHERE ${ahead(d.paymentIntentId, v)} RETURNING payment_intent_id, currency)
              INSERT INTO ${refunds} (refund_id, payment_id, payment_intent_id, amount, currency, status, reason,
                created_at, updated_at)
              SELECT ${d.refundId}, ${d.paymentId}, payment_intent_id, ${d.amount}, currency, 'pending', ${d.reason},
                ${at}, ${at} FROM i
              ON CONFLICT (refund_id) DO NOTHING`)
            break
          }
          case "payment_intent.refund_succeeded": {
            const d = e.data
            yield* deferInTransaction(sql`WITH i AS (
                UPDATE ${intents} SET version = ${v}, updated_at = ${at}
                WHERE ${ahead(d.paymentIntentId, v)} RETURNING 1),
              p AS (
                UPDATE ${payments} SET amount_refunded = ${d.amountRefunded},
                  status = CASE WHEN ${d.amountRefunded} >= amount_captured THEN 'refunded' ELSE 'partially_refunded' END,
                  updated_at = ${at}
                WHERE payment_id = ${d.paymentId} AND EXISTS (SELECT 1 FROM i) RETURNING 1)
              UPDATE ${refunds} SET status = 'succeeded', processor_reference = ${d.processorReference},
                updated_at = ${at}
              WHERE refund_id = ${d.refundId} AND EXISTS (SELECT 1 FROM i)`)
            break
          }
          case "payment_intent.refund_failed": {
            const d = e.data
            yield* deferInTransaction(sql`WITH i AS (
                UPDATE ${intents} SET version = ${v}, updated_at = ${at}
                WHERE ${ahead(d.paymentIntentId, v)} RETURNING 1)
              UPDATE ${refunds} SET status = 'failed', failure_reason = ${d.failureReason}, updated_at = ${at}
              WHERE refund_id = ${d.refundId} AND EXISTS (SELECT 1 FROM i)`)
            break
          }
          // Calls started (capture, void) or refused (operation_failed) change only the intent's version.
          default:
            yield* deferInTransaction(
              sql`UPDATE ${intents} SET version = ${v}, updated_at = ${at} WHERE ${ahead(e.data.paymentIntentId, v)}`
            )
            break
        }
      }
    })
})
