/**
 * The billing read models: `billing.subscriptions` (one row per subscription: the aggregate's state
 * whole, folded with the decider's own `evolve`, and the columns lists filter on and usage reads —
 * src/billing/contract.ts) and `billing.invoices` (one row per invoice, folded with `evolveInvoice`).
 * Each event is applied only where the row is below its stream version, so applying it twice changes
 * nothing and a rebuild from position zero reproduces the rows exactly. Inline: a renewal's period
 * advance and `usage_closed_before` commit with its events, under the row lock it took.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { defineProjection } from "../kernel/Projection.js"
import {
  evolve,
  evolveInvoice,
  InvoiceStateSchema,
  initialSubscriptionState,
  newInvoiceState,
  type SubscriptionState,
  SubscriptionStateSchema
} from "./decider.js"
import { billingEventTypes } from "./events.js"

export const SUBSCRIPTIONS = "billing.subscriptions"
export const INVOICES = "billing.invoices"

const encodeState = Schema.encodeSync(SubscriptionStateSchema)
export const decodeState = Schema.decodeUnknownSync(SubscriptionStateSchema)
const encodeInvoice = Schema.encodeSync(InvoiceStateSchema)
export const decodeInvoice = Schema.decodeUnknownSync(InvoiceStateSchema)

const usageOf = (s: SubscriptionState) => (s.price.usage === null ? null : JSON.stringify(s.price.usage))

const columns = (s: SubscriptionState) => ({
  product_id: s.productId,
  status: s.status,
  currency: s.price.currency,
  current_period_start: s.currentPeriodStart,
  current_period_end: s.currentPeriodEnd,
  usage_closed_before: s.usageClosedBefore,
  state: JSON.stringify(encodeState(s)),
  updated_at: s.updatedAt
})

export const SubscriptionsProjection = defineProjection({
  name: "billing_subscriptions",
  tables: [SUBSCRIPTIONS, INVOICES],
  events: billingEventTypes,
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const subs = sql(target.table(SUBSCRIPTIONS))
      const invoices = sql(target.table(INVOICES))
      for (const e of events) {
        if (e.type === "billing.subscription_created") {
          const s = evolve(initialSubscriptionState, e)
          yield* sql`INSERT INTO ${subs} (id, customer_id, product_id, status, currency, current_period_start,
                current_period_end, usage, usage_closed_before, test_clock_id, state, created_at, updated_at, version)
              VALUES (${s.subscriptionId}, ${s.customerId}, ${s.productId}, ${s.status}, ${s.price.currency},
                ${s.currentPeriodStart}, ${s.currentPeriodEnd}, ${usageOf(s)}::jsonb, ${s.usageClosedBefore},
                ${s.testClockId}, ${JSON.stringify(encodeState(s))}::jsonb, ${s.createdAt}, ${s.updatedAt},
                ${e.streamVersion})
              ON CONFLICT (id) DO NOTHING`
          continue
        }
        const rows = yield* sql<{ readonly state: unknown }>`SELECT state FROM ${subs}
            WHERE id = ${e.data.subscriptionId} AND version < ${e.streamVersion}`
        const row = rows[0]
        if (row === undefined) continue
        const next = evolve(decodeState(row.state), e)
        yield* sql`UPDATE ${subs} SET ${sql.update(columns(next))}, usage = ${usageOf(next)}::jsonb,
              version = ${e.streamVersion}
            WHERE id = ${e.data.subscriptionId}`
        if (e.type === "billing.invoice_created") {
          const i = newInvoiceState(e.data, e.recordedAt)
          yield* sql`INSERT INTO ${invoices} (id, subscription_id, customer_id, period_start, period_end, status,
                total, state, created_at, updated_at, version)
              VALUES (${i.invoiceId}, ${i.subscriptionId}, ${i.customerId}, ${i.periodStart}, ${i.periodEnd},
                ${i.status}, ${i.total}, ${JSON.stringify(encodeInvoice(i))}::jsonb, ${i.createdAt},
                ${i.updatedAt}, ${e.streamVersion})
              ON CONFLICT (id) DO NOTHING`
          continue
        }
        if (
          e.type === "billing.invoice_paid" ||
          e.type === "billing.invoice_payment_failed" ||
          e.type === "billing.invoice_voided"
        ) {
          const found = yield* sql<{ readonly state: unknown }>`SELECT state FROM ${invoices}
              WHERE id = ${e.data.invoiceId} AND version < ${e.streamVersion}`
          const invoice = found[0]
          if (invoice === undefined) continue
          const i = evolveInvoice(decodeInvoice(invoice.state), e, e.recordedAt)
          yield* sql`UPDATE ${invoices} SET status = ${i.status}, state = ${JSON.stringify(encodeInvoice(i))}::jsonb,
                updated_at = ${i.updatedAt}, version = ${e.streamVersion}
              WHERE id = ${i.invoiceId}`
        }
      }
    })
})
