/**
 * The customers read model: one row per live customer and one per address, in clear text (and the
 * customer's addresses again as JSON on its row, for reads). Each
 * event first moves the row's `version` forward (and stops there when the row is already at or past
 * it, or gone), so applying an event twice changes nothing. Erased customers lose their rows; on a
 * replay their events decode with shredded fields and recreate nothing.
 *
 * Customer totals (COMMERCE decision 9) follow the orders' events, in the transaction of the change:
 * `orderCount` +1 per placed order, `totalSpent` + what is captured (at placement, or at a later
 * capture) − what is refunded. A guest order (no customer) changes nothing; an erased customer's row
 * is gone, so their later orders' events change nothing either.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { deferInTransaction, optionalColumn, textArray } from "../db/Sql.js"
import { isShredded, revealOr } from "../eventstore/EventType.js"
import { normalizeEmail } from "../kernel/Email.js"
import { defineProjection } from "../kernel/Projection.js"
import {
  OrderPaymentCaptured,
  OrderPaymentRefunded,
  OrderPlaced,
  OrderRefundSucceeded
} from "../orders/index.js"
import { customerEventTypes } from "./events.js"

export const CUSTOMERS = "customers.customers"
export const ADDRESSES = "customers.addresses"

export const CustomersProjection = defineProjection({
  name: "customers",
  tables: [CUSTOMERS, ADDRESSES],
  events: [
    ...customerEventTypes,
    OrderPlaced,
    OrderPaymentCaptured,
    OrderRefundSucceeded,
    OrderPaymentRefunded
  ],
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const customers = sql(target.table(CUSTOMERS))
      const addresses = sql(target.table(ADDRESSES))
      /** Moves the row to this event's version; false when there is nothing (more) to apply. */
      const advance = (customerId: string, version: number, at: Date) =>
        Effect.map(
          sql`UPDATE ${customers} SET version = ${version}, updated_at = ${at}
            WHERE customer_id = ${customerId} AND version < ${version} RETURNING 1 AS ok`,
          (rows) => rows.length > 0
        )
      /**
       * Copies the customer's addresses onto its row (the `addresses` column readers take as is),
       * after any change to them: in the order they were added, as the API shows them.
       */
      const copyAddresses = (customerId: string) =>
        sql`UPDATE ${customers} SET addresses = coalesce((
            SELECT json_agg(json_build_object('id', a.address_id, 'label', a.label, 'line1', a.line1,
                'city', a.city, 'state', a.state, 'postalCode', a.postal_code, 'country', a.country,
                'isDefault', a.is_default) ORDER BY a.created_at, a.address_id)
              FROM ${addresses} a WHERE a.customer_id = ${customerId}), '[]'::json)
          WHERE customer_id = ${customerId}`
      for (const e of events) {
        const at = e.recordedAt
        switch (e.type) {
          case "customer.created": {
            const d = e.data
            if (isShredded(d.email) || isShredded(d.firstName) || isShredded(d.lastName)) break
            // Its rows are not read; a unique-email refusal fails the transaction (at its COMMIT).
            yield* deferInTransaction(sql`INSERT INTO ${customers} (customer_id, user_id, email, email_normalized, first_name,
                last_name, phone, tags, metadata, active, test_clock_id, created_at, updated_at, version)
              VALUES (${d.customerId}, ${d.userId ?? null}, ${d.email}, ${normalizeEmail(d.email)}, ${d.firstName},
                ${d.lastName}, ${isShredded(d.phone) ? null : d.phone}, ${textArray(sql, d.tags)},
                ${JSON.stringify(isShredded(d.metadata) ? {} : d.metadata)}::jsonb, true, ${d.testClockId ?? null},
                ${at}, ${at}, ${e.streamVersion})
              ON CONFLICT (customer_id) DO NOTHING`)
            break
          }
          case "customer.updated": {
            const d = e.data
            if (!(yield* advance(d.customerId, e.streamVersion, at))) break
            // Absent or shredded → undefined (unchanged); a null phone is a real change.
            const email = revealOr(d.email, undefined)
            const phone = revealOr(d.phone, undefined)
            const metadata = revealOr(d.metadata, undefined)
            const changes: Record<string, string | null> = {
              ...(email === undefined ? {} : { email, email_normalized: normalizeEmail(email) }),
              ...optionalColumn("first_name", revealOr(d.firstName, undefined)),
              ...optionalColumn("last_name", revealOr(d.lastName, undefined)),
              ...optionalColumn("phone", phone),
              ...optionalColumn("metadata", metadata === undefined ? undefined : JSON.stringify(metadata))
            }
            if (Object.keys(changes).length > 0) {
              yield* sql`UPDATE ${customers} SET ${sql.update(changes)} WHERE customer_id = ${d.customerId}`
            }
            if (d.tags !== undefined) {
              yield* sql`UPDATE ${customers} SET tags = ${textArray(sql, d.tags)} WHERE customer_id = ${d.customerId}`
            }
            break
          }
          case "customer.address_added": {
            const d = e.data
            if (isShredded(d.line1) || isShredded(d.city) || isShredded(d.country)) break
            if (!(yield* advance(d.customerId, e.streamVersion, at))) break
            if (d.isDefault) {
              yield* sql`UPDATE ${addresses} SET is_default = false WHERE customer_id = ${d.customerId}`
            }
            const orNull = (v: string | null | { readonly _tag: "Shredded" }) => (isShredded(v) ? null : v)
            yield* sql`INSERT INTO ${addresses} (address_id, customer_id, label, line1, city, state, postal_code,
                country, is_default, created_at)
              VALUES (${d.addressId}, ${d.customerId}, ${orNull(d.label)}, ${d.line1}, ${d.city}, ${orNull(d.state)},
                ${orNull(d.postalCode)}, ${d.country}, ${d.isDefault}, ${at})
              ON CONFLICT (address_id) DO NOTHING`
            yield* copyAddresses(d.customerId)
            break
          }
          case "customer.address_removed": {
            const d = e.data
            if (!(yield* advance(d.customerId, e.streamVersion, at))) break
            yield* sql`DELETE FROM ${addresses} WHERE address_id = ${d.addressId}`
            yield* sql`UPDATE ${addresses} SET is_default = (address_id = ${d.defaultAddressId ?? ""})
              WHERE customer_id = ${d.customerId}`
            yield* copyAddresses(d.customerId)
            break
          }
          case "customer.tagged": {
            const d = e.data
            if (!(yield* advance(d.customerId, e.streamVersion, at))) break
            yield* sql`UPDATE ${customers} SET tags = tags || ARRAY(
                SELECT t FROM unnest(${textArray(sql, d.tags)}) WITH ORDINALITY AS n(t, i)
                 WHERE NOT t = ANY(tags) ORDER BY i)
              WHERE customer_id = ${d.customerId}`
            break
          }
          case "customer.deactivated":
          case "customer.reactivated": {
            const d = e.data
            if (!(yield* advance(d.customerId, e.streamVersion, at))) break
            yield* sql`UPDATE ${customers} SET active = ${e.type === "customer.reactivated"}
              WHERE customer_id = ${d.customerId}`
            break
          }
          case "order.placed": {
            const d = e.data
            if (d.customerId === null) break
            const captured = d.payment === "captured" ? d.amountCaptured : 0
            yield* sql`UPDATE ${customers} SET order_count = order_count + 1, total_spent = total_spent + ${captured}
              WHERE customer_id = ${d.customerId}`
            break
          }
          case "order.payment_captured":
            if (e.data.customerId === null) break
            yield* sql`UPDATE ${customers} SET total_spent = total_spent + ${e.data.amountCaptured}
              WHERE customer_id = ${e.data.customerId}`
            break
          case "order.refund_succeeded":
          case "order.payment_refunded":
            if (e.data.customerId === null || e.data.amount === 0) break
            yield* sql`UPDATE ${customers} SET total_spent = total_spent - ${e.data.amount}
              WHERE customer_id = ${e.data.customerId}`
            break
          case "customer.erased":
            yield* sql`DELETE FROM ${customers} WHERE customer_id = ${e.data.customerId}`
            yield* sql`DELETE FROM ${addresses} WHERE customer_id = ${e.data.customerId}`
            break
        }
      }
    })
})
