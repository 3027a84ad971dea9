/** Reads of the checkouts read model: one statement each. */
import type { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import type { CheckoutLine, CheckoutStatus, ShippingAddress } from "./events.js"
import { CHECKOUTS } from "./projection.js"

export interface CheckoutRow {
  readonly id: string
  readonly status: CheckoutStatus
  readonly paymentStatus: "unpaid" | "paid" | "no_payment_required"
  readonly customerId: string | null
  readonly email: string | null
  readonly shippingAddress: ShippingAddress | null
  readonly currency: string
  readonly lineItems: ReadonlyArray<CheckoutLine>
  readonly subtotal: number
  readonly total: number
  readonly captureMethod: "automatic" | "manual"
  readonly paymentIntentId: string | null
  readonly orderId: string | null
  readonly expiresAt: Date
  readonly metadata: Readonly<Record<string, unknown>>
  readonly createdAt: Date
  readonly updatedAt: Date
  readonly completedAt: Date | null
  readonly expiredAt: Date | null
}

const COLUMNS = `checkout_id AS id, status, payment_status AS "paymentStatus", customer_id AS "customerId", email,
  shipping_address AS "shippingAddress", currency, line_items AS "lineItems", subtotal::int AS subtotal,
  total::int AS total, capture_method AS "captureMethod", payment_intent_id AS "paymentIntentId",
  order_id AS "orderId", expires_at AS "expiresAt", metadata, created_at AS "createdAt",
  updated_at AS "updatedAt", completed_at AS "completedAt", expired_at AS "expiredAt"`

export const selectCheckout = (sql: SqlClient.SqlClient, checkoutId: string) =>
  Effect.map(
    sql<CheckoutRow>`SELECT ${sql.literal(COLUMNS)} FROM ${sql(CHECKOUTS)} WHERE checkout_id = ${checkoutId}`,
    (rows) => Option.fromNullable(rows[0])
  )

/**
 * Locks the checkout's row for the rest of the transaction: every path that can complete or expire
 * it (the confirm route, the process manager, the expiry, the expire route) queues here, so each
 * decides on the latest version instead of racing to append.
 */
export const lockCheckout = (sql: SqlClient.SqlClient, checkoutId: string) =>
  Effect.map(
    sql<{ readonly id: string }>`SELECT checkout_id AS id FROM ${sql(CHECKOUTS)}
      WHERE checkout_id = ${checkoutId} FOR UPDATE`,
    (rows) => rows.length > 0
  )

/** The checkout a payment intent belongs to, if any. */
export const checkoutOfIntent = (sql: SqlClient.SqlClient, paymentIntentId: string) =>
  Effect.map(
    sql<{ readonly id: string }>`SELECT checkout_id AS id FROM ${sql(CHECKOUTS)}
      WHERE payment_intent_id = ${paymentIntentId}`,
    (rows) => Option.fromNullable(rows[0]?.id)
  )
