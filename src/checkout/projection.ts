/**
 * The checkouts read model (migration 0019): one row per checkout. Each event moves the row's
 * `version` forward and stops when the row is already at or past it, so applying an event twice
 * changes nothing and a rebuild from the log reproduces every row. Shredded personal fields (an
 * erased customer) are stored as null, and `customer.erased` nulls them in the customer's rows.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { CustomerErased } from "../customers/index.js"
import { deferInTransaction } from "../db/Sql.js"
import { revealOr } from "../eventstore/EventType.js"
import { defineProjection } from "../kernel/Projection.js"
import { checkoutEventTypes } from "./events.js"

export const CHECKOUTS = "checkout.checkouts"

export const CheckoutsProjection = defineProjection({
  name: "checkouts",
  tables: [CHECKOUTS],
  events: [...checkoutEventTypes, CustomerErased],
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const table = sql(target.table(CHECKOUTS))
      for (const e of events) {
        const at = e.recordedAt
        const version = e.streamVersion
        switch (e.type) {
          // Erasure (spec §4.2 rule 1): the customer's checkouts keep ids, lines and totals, not who or where.
          case "customer.erased":
            yield* deferInTransaction(sql`UPDATE ${table} SET email = NULL, shipping_address = NULL, metadata = '{}'::jsonb
              WHERE customer_id = ${e.data.customerId}`)
            break
          case "checkout.created": {
            const d = e.data
            const address = revealOr(d.shippingAddress, null)
            yield* deferInTransaction(sql`INSERT INTO ${table} (checkout_id, status, payment_status, customer_id, email, shipping_address,
                currency, line_items, subtotal, total, capture_method, payment_intent_id, expires_at, metadata,
                created_at, updated_at, version)
              VALUES (${d.checkoutId}, 'open', ${d.total === 0 ? "no_payment_required" : "unpaid"}, ${d.customerId},
                ${revealOr(d.email, null)}, ${address === null ? null : JSON.stringify(address)}::jsonb, ${d.currency},
                ${JSON.stringify(d.lineItems)}::jsonb, ${d.subtotal}, ${d.total}, ${d.captureMethod},
                ${d.paymentIntentId}, ${d.expiresAt}, ${JSON.stringify(revealOr(d.metadata, {}))}::jsonb,
                ${at}, ${at}, ${version})
              ON CONFLICT (checkout_id) DO NOTHING`)
            break
          }
          case "checkout.processing":
          case "checkout.reopened":
            yield* deferInTransaction(sql`UPDATE ${table} SET status = ${e.type === "checkout.processing" ? "processing" : "open"},
                updated_at = ${at}, version = ${version}
              WHERE checkout_id = ${e.data.checkoutId} AND version < ${version}`)
            break
          case "checkout.completed":
            yield* deferInTransaction(sql`UPDATE ${table} SET status = 'complete', payment_status = ${e.data.paymentStatus},
                order_id = ${e.data.orderId}, completed_at = ${at}, updated_at = ${at}, version = ${version}
              WHERE checkout_id = ${e.data.checkoutId} AND version < ${version}`)
            break
          case "checkout.expired":
            yield* deferInTransaction(sql`UPDATE ${table} SET status = 'expired', expired_at = ${at}, updated_at = ${at},
                version = ${version}
              WHERE checkout_id = ${e.data.checkoutId} AND version < ${version}`)
            break
        }
      }
    })
})
