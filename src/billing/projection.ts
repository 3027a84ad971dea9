/**
 * The billing read models: `billing.subscriptions` (one row per subscription: the aggregate's state
 * whole, folded with the decider's own `evolve`, and the columns lists filter on and usage reads —
 * src/billing/contract.ts) and `billing.invoices` (one row per invoice, folded with `evolveInvoice`).
 * Each event is applied only where the row is below its stream version, so applying it twice changes
 * nothing and a rebuild from position zero reproduces the rows exactly. Inline: a renewal's period
 * advance and `usage_closed_before` commit with its events, under the row lock it took. The rows'
 * writes are deferred (db/Sql.ts): nothing reads their answers, and in a command's transaction they
 * travel with its next statement or COMMIT.
 */
import { SqlClient } from "@effect/sql"
import { Effect, FiberRef } from "effect"
import { fastDecodeUnknownEither, fastDecodeUnknownSync, fastEncodeSync } from "../base/FastEncode.js"
import { deferInTransaction } from "../db/Sql.js"
import type { LoadedAggregate } from "../kernel/CommandRunner.js"
import { defineProjection } from "../kernel/Projection.js"
import {
  evolve,
  evolveInvoice,
  type InvoiceState,
  InvoiceStateSchema,
  initialSubscriptionState,
  newInvoiceState,
  type SubscriptionState,
  SubscriptionStateSchema
} from "./decider.js"
import { billingEventTypes } from "./events.js"

export const SUBSCRIPTIONS = "billing.subscriptions"
export const INVOICES = "billing.invoices"

const encodeState = fastEncodeSync(SubscriptionStateSchema)
export const decodeState = fastDecodeUnknownSync(SubscriptionStateSchema)
export const decodeStateEither = fastDecodeUnknownEither(SubscriptionStateSchema)
const encodeInvoice = fastEncodeSync(InvoiceStateSchema)
export const decodeInvoice = fastDecodeUnknownSync(InvoiceStateSchema)

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

/**
 * The subscription a billing command appends to, as it stood before the command's events: the state
 * it decided on, at the version its append expected. Set around the command (`Billing.execute`); the
 * inline projection folds from it instead of reading the row back and decoding its state (and takes
 * an invoice's state from it too). It is the stream's own fold, so it is right even if the row were
 * behind; without it (a rebuild, another writer) the rows are read.
 */
export const subscriptionBeforeAppend = FiberRef.unsafeMake<LoadedAggregate<SubscriptionState> | undefined>(
  undefined
)

/** A row as the batch leaves it: its folded state, the stream version it is at, and whether it is new. */
interface Folded<S> {
  state: S
  version: number
  /**
   * Created in this batch (folded from its first event): written with an upsert that only moves a
   * row forward, so a batch applied again changes nothing.
   */
  readonly created: boolean
  dirty: boolean
}

export const SubscriptionsProjection = defineProjection({
  name: "billing_subscriptions",
  tables: [SUBSCRIPTIONS, INVOICES],
  events: billingEventTypes,
  // Folded per row: each subscription and invoice of the batch is read once (if it was not created
  // in it), evolved through all its events in memory, and written once — a renewal's events cost
  // one read and one write per row, not one of each per event.
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const subsTable = sql(target.table(SUBSCRIPTIONS))
      const invoicesTable = sql(target.table(INVOICES))
      const subs = new Map<string, Folded<SubscriptionState> | null>()
      const invoices = new Map<string, Folded<InvoiceState> | null>()

      /** A row of `table` by id, read once per batch (null: no row); later calls answer the fold. */
      const loader =
        <S>(folds: Map<string, Folded<S> | null>, table: typeof subsTable, decode: (state: unknown) => S) =>
        (id: string) =>
          Effect.gen(function* () {
            if (folds.has(id)) return folds.get(id) ?? null
            const rows = yield* sql<{
              readonly state: unknown
              readonly version: number
            }>`SELECT state, version
                FROM ${table} WHERE id = ${id}`
            const row = rows[0]
            const folded =
              row === undefined
                ? null
                : { state: decode(row.state), version: row.version, created: false, dirty: false }
            folds.set(id, folded)
            return folded
          })
      const readSubscription = loader(subs, subsTable, decodeState)
      const loadInvoice = loader(invoices, invoicesTable, decodeInvoice)
      const known = yield* FiberRef.get(subscriptionBeforeAppend)
      /** The subscription's fold before an event at `streamVersion`: the known state, or its row. */
      const loadSubscription = (id: string, streamVersion: number) => {
        if (
          !subs.has(id) &&
          known !== undefined &&
          known.state.subscriptionId === id &&
          known.version === streamVersion - 1
        ) {
          const folded = { state: known.state, version: known.version, created: false, dirty: false }
          subs.set(id, folded)
          return Effect.succeed(folded)
        }
        return readSubscription(id)
      }

      for (const e of events) {
        const id = e.data.subscriptionId
        if (e.type === "billing.subscription_created") {
          if (subs.get(id)?.created === true) continue
          subs.set(id, {
            state: evolve(initialSubscriptionState, e),
            version: e.streamVersion,
            created: true,
            dirty: true
          })
          continue
        }
        const sub = yield* loadSubscription(id, e.streamVersion)
        // Applied only where the row is below the event's stream version: a replay changes nothing.
        if (sub === null || sub.version >= e.streamVersion) continue
        // The subscription's state holds its open invoices (and the latest), folded as their rows are:
        // when it stands right before this event, an invoice event starts from its copy there.
        const before = sub.version === e.streamVersion - 1 ? sub.state : undefined
        sub.state = evolve(sub.state, e)
        sub.version = e.streamVersion
        sub.dirty = true
        if (e.type === "billing.invoice_created") {
          if (invoices.get(e.data.invoiceId)?.created !== true)
            invoices.set(e.data.invoiceId, {
              state: newInvoiceState(e.data, e.recordedAt),
              version: e.streamVersion,
              created: true,
              dirty: true
            })
          continue
        }
        if (
          e.type === "billing.invoice_paid" ||
          e.type === "billing.invoice_payment_failed" ||
          e.type === "billing.invoice_voided"
        ) {
          const invoiceId = e.data.invoiceId
          const held = invoices.has(invoiceId)
            ? undefined
            : before?.invoices.find((i) => i.invoiceId === invoiceId)
          if (held !== undefined)
            invoices.set(invoiceId, {
              state: held,
              version: e.streamVersion - 1,
              created: false,
              dirty: false
            })
          const invoice = yield* loadInvoice(invoiceId)
          if (invoice === null || invoice.version >= e.streamVersion) continue
          invoice.state = evolveInvoice(invoice.state, e, e.recordedAt)
          invoice.version = e.streamVersion
          invoice.dirty = true
        }
      }

      for (const sub of subs.values()) {
        if (sub === null || !sub.dirty) continue
        const s = sub.state
        if (sub.created)
          yield* deferInTransaction(sql`INSERT INTO ${subsTable} AS t (id, customer_id, product_id, status, currency,
                current_period_start, current_period_end, usage, usage_closed_before, test_clock_id, state,
                created_at, updated_at, version)
              VALUES (${s.subscriptionId}, ${s.customerId}, ${s.productId}, ${s.status}, ${s.price.currency},
                ${s.currentPeriodStart}, ${s.currentPeriodEnd}, ${usageOf(s)}::jsonb, ${s.usageClosedBefore},
                ${s.testClockId}, ${JSON.stringify(encodeState(s))}::jsonb, ${s.createdAt}, ${s.updatedAt},
                ${sub.version})
              ON CONFLICT (id) DO UPDATE SET ${sql.update(columns(s))}, usage = EXCLUDED.usage,
                version = EXCLUDED.version
              WHERE t.version < EXCLUDED.version`)
        else
          yield* deferInTransaction(sql`UPDATE ${subsTable} SET ${sql.update(columns(s))}, usage = ${usageOf(s)}::jsonb,
                version = ${sub.version}
              WHERE id = ${s.subscriptionId} AND version < ${sub.version}`)
      }
      for (const invoice of invoices.values()) {
        if (invoice === null || !invoice.dirty) continue
        const i = invoice.state
        if (invoice.created)
          yield* deferInTransaction(sql`INSERT INTO ${invoicesTable} AS t (id, subscription_id, customer_id, period_start, period_end,
                status, total, state, created_at, updated_at, version)
              VALUES (${i.invoiceId}, ${i.subscriptionId}, ${i.customerId}, ${i.periodStart}, ${i.periodEnd},
                ${i.status}, ${i.total}, ${JSON.stringify(encodeInvoice(i))}::jsonb, ${i.createdAt},
                ${i.updatedAt}, ${invoice.version})
              ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, state = EXCLUDED.state,
                updated_at = EXCLUDED.updated_at, version = EXCLUDED.version
              WHERE t.version < EXCLUDED.version`)
        else
          yield* deferInTransaction(sql`UPDATE ${invoicesTable} SET status = ${i.status},
                state = ${JSON.stringify(encodeInvoice(i))}::jsonb, updated_at = ${i.updatedAt},
                version = ${invoice.version}
              WHERE id = ${i.invoiceId} AND version < ${invoice.version}`)
      }
    })
})
