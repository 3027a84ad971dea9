/** Read-model lookups of the payments context: one statement each, rows already in the objects' shape. */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import type { BadRequest } from "../http/errors.js"
import { type OwnedListFilters, type V1ListParams, type V1Page, v1Page } from "../http/Lists.js"
import type { Metadata } from "../kernel/Metadata.js"
import type { CancellationReason, CaptureMethod, NextAction, PaymentMethod, RefundReason } from "./events.js"
import {
  type IntentStatus,
  isLive,
  type LastPaymentError,
  type PaymentIntentObject,
  type PaymentObject,
  type PaymentStatus,
  type RefundObject,
  type RefundStatus
} from "./objects.js"
import { INTENTS, PAYMENTS, REFUNDS } from "./projection.js"

export interface IntentRow {
  readonly id: string
  readonly amount: number
  readonly currency: string
  readonly status: IntentStatus
  readonly captureMethod: CaptureMethod
  readonly customerId: string | null
  readonly description: string | null
  readonly metadata: Metadata
  readonly paymentMethod: PaymentMethod | null
  readonly lastPaymentError: LastPaymentError | null
  readonly nextAction: NextAction | null
  readonly cancellationReason: CancellationReason | null
  readonly latestPaymentId: string | null
  readonly amountCapturable: number
  readonly amountReceived: number
  readonly processor: string
  readonly canceledAt: Date | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

export interface PaymentRow extends Omit<PaymentObject, "object" | "livemode"> {}

export interface RefundRow extends Omit<RefundObject, "object"> {
  readonly status: RefundStatus
  readonly reason: RefundReason | null
}

const INTENT_COLUMNS = `payment_intent_id AS id, amount, currency, status, capture_method AS "captureMethod",
  customer_id AS "customerId", description, metadata, payment_method AS "paymentMethod",
  last_payment_error AS "lastPaymentError", next_action AS "nextAction",
  cancellation_reason AS "cancellationReason", latest_payment_id AS "latestPaymentId",
  amount_capturable AS "amountCapturable", amount_received AS "amountReceived", processor,
  canceled_at AS "canceledAt", created_at AS "createdAt", updated_at AS "updatedAt"`

const PAYMENT_COLUMNS = `payment_id AS id, payment_intent_id AS "paymentIntentId", customer_id AS "customerId", amount,
  currency, status, capture_method AS "captureMethod", amount_captured AS "amountCaptured",
  amount_refunded AS "amountRefunded", payment_method AS "paymentMethod", failure_code AS "failureCode",
  decline_code AS "declineCode", failure_message AS "failureMessage", processor,
  processor_reference AS "processorReference", description, metadata, authorized_at AS "authorizedAt",
  captured_at AS "capturedAt", canceled_at AS "canceledAt", created_at AS "createdAt", updated_at AS "updatedAt"`

const REFUND_COLUMNS = `refund_id AS id, payment_id AS "paymentId", payment_intent_id AS "paymentIntentId", amount,
  currency, status, reason, failure_reason AS "failureReason", created_at AS "createdAt", updated_at AS "updatedAt"`

export const intentObject = (row: IntentRow): PaymentIntentObject => {
  const { processor, ...fields } = row
  return { object: "payment_intent", ...fields, livemode: isLive(processor) }
}

export const paymentObject = (row: PaymentRow): PaymentObject => ({
  object: "payment",
  ...row,
  livemode: isLive(row.processor)
})

export const refundObject = (row: RefundRow): RefundObject => ({ object: "refund", ...row })

export const selectIntent = (sql: SqlClient.SqlClient, paymentIntentId: string) =>
  Effect.map(
    sql<IntentRow>`SELECT ${sql.literal(INTENT_COLUMNS)} FROM ${sql(INTENTS)} WHERE payment_intent_id = ${paymentIntentId}`,
    (rows) => Option.map(Option.fromNullable(rows[0]), intentObject)
  )

export const selectPayment = (sql: SqlClient.SqlClient, paymentId: string) =>
  Effect.map(
    sql<PaymentRow>`SELECT ${sql.literal(PAYMENT_COLUMNS)} FROM ${sql(PAYMENTS)} WHERE payment_id = ${paymentId}`,
    (rows) => Option.map(Option.fromNullable(rows[0]), paymentObject)
  )

export const selectRefund = (sql: SqlClient.SqlClient, refundId: string) =>
  Effect.map(
    sql<RefundRow>`SELECT ${sql.literal(REFUND_COLUMNS)} FROM ${sql(REFUNDS)} WHERE refund_id = ${refundId}`,
    (rows) => Option.map(Option.fromNullable(rows[0]), refundObject)
  )

/** A payment by id through the public face (for other contexts: checkout, orders). */
export const findPayment = (paymentId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => selectPayment(sql, paymentId))

/** A payment intent by id through the public face. */
export const findPaymentIntent = (paymentIntentId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => selectIntent(sql, paymentIntentId))

export interface PaymentFilters extends OwnedListFilters {
  readonly customerId?: string | undefined
  readonly paymentIntentId?: string | undefined
  readonly status?: PaymentStatus | undefined
}

/** `GET /v1/payments`: newest first, keyset-paged, filtered. */
export const listPayments = (
  sql: SqlClient.SqlClient,
  filters: PaymentFilters,
  params: V1ListParams
): Effect.Effect<V1Page<PaymentObject>, BadRequest | SqlError> => {
  const conditions = [
    ...(filters.customerId === undefined ? [] : [sql`customer_id = ${filters.customerId}`]),
    ...(filters.paymentIntentId === undefined ? [] : [sql`payment_intent_id = ${filters.paymentIntentId}`]),
    ...(filters.status === undefined ? [] : [sql`status = ${filters.status}`])
  ]
  return v1Page(sql, {
    table: PAYMENTS,
    idColumn: "payment_id",
    idPrefix: "pay",
    columns: PAYMENT_COLUMNS,
    ...(conditions.length === 0 ? {} : { where: sql.and(conditions) }),
    owner: filters.owner,
    params,
    toItem: paymentObject
  })
}

/** The intent whose processor keys start with `prefix` (its id, or the `ik_…` of its creating request). */
export const intentIdByCallKeyPrefix = (sql: SqlClient.SqlClient, prefix: string) =>
  Effect.map(
    sql<{
      id: string
    }>`SELECT payment_intent_id AS id FROM ${sql(INTENTS)} WHERE call_key_prefix = ${prefix} LIMIT 1`,
    (rows) => Option.map(Option.fromNullable(rows[0]), (r) => r.id)
  )

/** The intent of one of our payments, by its id or by the processor's reference of it. */
export const intentIdOfPayment = (
  sql: SqlClient.SqlClient,
  by: { readonly paymentId: string } | { readonly processor: string; readonly reference: string }
) =>
  Effect.map(
    "paymentId" in by
      ? sql<{
          id: string
        }>`SELECT payment_intent_id AS id FROM ${sql(PAYMENTS)} WHERE payment_id = ${by.paymentId}`
      : sql<{ id: string }>`SELECT payment_intent_id AS id FROM ${sql(PAYMENTS)}
          WHERE processor = ${by.processor} AND processor_reference = ${by.reference} LIMIT 1`,
    (rows) => Option.map(Option.fromNullable(rows[0]), (r) => r.id)
  )
