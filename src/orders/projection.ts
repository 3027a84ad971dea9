/**
 * The orders read model: one row per order holding the aggregate's state whole (`state`, folded
 * with the decider's own `evolve`, so the row is exactly what the stream says) and the columns the
 * list filters on. Each event is applied only when the row is below its stream version, so applying
 * it twice changes nothing and a rebuild from position zero reproduces the rows exactly.
 *
 * `customer.erased` anonymizes the customer's orders (spec §4.2 rule 1): email, address and metadata go, ids,
 * amounts, lines and statuses stay. A rebuild reaches the same rows another way: the erased
 * customer's `order.placed` events decode with those fields shredded.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { fastEncodeSync } from "../base/FastEncode.js"
import { CustomerErased } from "../customers/index.js"
import { deferInTransaction } from "../db/Sql.js"
import { defineProjection } from "../kernel/Projection.js"
import {
  evolve,
  fulfillmentStatusOf,
  initialOrderState,
  type OrderState,
  OrderStateSchema,
  paymentStatusOf,
  statusOf
} from "./decider.js"
import { orderEventTypes } from "./events.js"

export const ORDERS = "orders.orders"

const encodeState = fastEncodeSync(OrderStateSchema)
export const decodeState = Schema.decodeUnknownSync(OrderStateSchema)

const columns = (s: OrderState) => ({
  status: statusOf(s),
  payment_status: paymentStatusOf(s),
  fulfillment_status: fulfillmentStatusOf(s),
  amount_paid: s.amountPaid,
  amount_refunded: s.refunds.reduce((n, r) => (r.status === "succeeded" && !r.void ? n + r.amount : n), 0),
  state: JSON.stringify(encodeState(s)),
  updated_at: s.updatedAt
})

export const OrdersProjection = defineProjection({
  name: "orders",
  tables: [ORDERS],
  events: [...orderEventTypes, CustomerErased],
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const orders = sql(target.table(ORDERS))
      for (const e of events) {
        if (e.type === "customer.erased") {
          yield* deferInTransaction(sql`UPDATE ${orders} SET email = NULL,
              state = state || '{"email": null, "shippingAddress": null, "metadata": {}}'::jsonb
            WHERE customer_id = ${e.data.customerId}`)
          continue
        }
        if (e.type === "order.placed") {
          const s = evolve(initialOrderState, e)
          yield* deferInTransaction(sql`INSERT INTO ${orders} (order_id, display_id, checkout_id, customer_id, email, status,
              payment_status, fulfillment_status, currency, total, amount_paid, amount_refunded, state,
              created_at, updated_at, version)
            VALUES (${s.orderId}, ${s.displayId}, ${s.checkoutId}, ${s.customerId}, ${s.email?.toLowerCase() ?? null},
              ${statusOf(s)}, ${paymentStatusOf(s)}, ${fulfillmentStatusOf(s)}, ${s.currency}, ${s.total},
              ${s.amountPaid}, 0, ${JSON.stringify(encodeState(s))}::jsonb, ${s.createdAt}, ${s.updatedAt},
              ${e.streamVersion})
            ON CONFLICT (order_id) DO NOTHING`)
          continue
        }
        const rows = yield* sql<{ readonly state: unknown }>`SELECT state FROM ${orders}
          WHERE order_id = ${e.data.orderId} AND version < ${e.streamVersion}`
        const row = rows[0]
        if (row === undefined) continue
        const next = evolve(decodeState(row.state), e)
        yield* deferInTransaction(sql`UPDATE ${orders} SET ${sql.update(columns(next))}, version = ${e.streamVersion}
          WHERE order_id = ${e.data.orderId}`)
      }
    })
})
