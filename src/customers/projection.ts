/**
 * The customers read model: one row per live customer, in clear text. Erased customers replay with
 * shredded fields and get no row.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { textArray } from "../db/Sql.js"
import { isShredded } from "../eventstore/EventType.js"
import { normalizeEmail } from "../kernel/Email.js"
import { defineProjection } from "../kernel/Projection.js"
import { customerEventTypes } from "./events.js"

export const CUSTOMERS = "customers.customers"

export const CustomersProjection = defineProjection({
  name: "customers",
  tables: [CUSTOMERS],
  events: customerEventTypes,
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const customers = sql(target.table(CUSTOMERS))
      for (const e of events) {
        const d = e.data
        if (isShredded(d.email) || isShredded(d.firstName) || isShredded(d.lastName)) continue
        yield* sql`INSERT INTO ${customers} (customer_id, user_id, email, email_normalized, first_name, last_name,
            phone, tags, metadata, active, created_at, updated_at, version)
          VALUES (${d.customerId}, ${d.userId ?? null}, ${d.email}, ${normalizeEmail(d.email)}, ${d.firstName},
            ${d.lastName}, ${isShredded(d.phone) ? null : d.phone}, ${textArray(sql, d.tags)},
            ${JSON.stringify(isShredded(d.metadata) ? {} : d.metadata)}::jsonb, true, ${e.recordedAt}, ${e.recordedAt},
            ${e.streamVersion})
          ON CONFLICT (customer_id) DO NOTHING`
      }
    })
})
