/** Read-model lookups of billing: one statement each. */
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import type { BadRequest } from "../http/errors.js"
import { type OwnedListFilters, type V1ListParams, type V1Page, v1Page } from "../http/Lists.js"
import type { SubscriptionState } from "./decider.js"
import type { InvoiceStatus, SubscriptionStatus } from "./events.js"
import { type InvoiceObject, invoiceObject } from "./objects.js"
import { decodeInvoice, decodeState, INVOICES, SUBSCRIPTIONS } from "./projection.js"

interface StateRow {
  readonly state: unknown
}

/** One subscription's state by id: a primary-key lookup. */
export const selectSubscription = (
  sql: SqlClient.SqlClient,
  subscriptionId: string
): Effect.Effect<Option.Option<SubscriptionState>, SqlError> =>
  Effect.map(sql<StateRow>`SELECT state FROM ${sql(SUBSCRIPTIONS)} WHERE id = ${subscriptionId}`, (rows) =>
    Option.map(Option.fromNullable(rows[0]), (r) => decodeState(r.state))
  )

/**
 * Locks the subscription's row for the rest of the caller's transaction (`FOR UPDATE`: usage writes,
 * which take `FOR KEY SHARE`, wait; so do other renewals, retries and cancellations of it). Answers
 * whether the row exists.
 */
export const lockSubscription = (sql: SqlClient.SqlClient, subscriptionId: string) =>
  Effect.map(
    sql<{
      readonly id: string
    }>`SELECT id FROM ${sql(SUBSCRIPTIONS)} WHERE id = ${subscriptionId} FOR UPDATE`,
    (rows) => rows.length > 0
  )

/**
 * Locks the rows of `subscriptionIds` (sorted, distinct) in id order, by one statement: a batch of
 * renewals takes its rows as one, so two batches never wait on each other crosswise, whatever order
 * its renewals' own statements then run in.
 */
export const lockSubscriptions = (sql: SqlClient.SqlClient, subscriptionIds: ReadonlyArray<string>) =>
  subscriptionIds.length === 0
    ? Effect.void
    : Effect.asVoid(
        sql`SELECT id FROM ${sql(SUBSCRIPTIONS)} WHERE id IN ${sql.in(subscriptionIds)} ORDER BY id FOR UPDATE`
      )

/** A customer's subscriptions that are not over (canceled, incomplete_expired). */
export const liveSubscriptionsOf = (sql: SqlClient.SqlClient, customerId: string) =>
  Effect.map(
    sql<{ readonly id: string }>`SELECT id FROM ${sql(SUBSCRIPTIONS)}
      WHERE customer_id = ${customerId} AND status NOT IN ('canceled', 'incomplete_expired') ORDER BY id`,
    (rows) => rows.map((r) => r.id)
  )

/** The subscriptions of a test clock's customers that are not over (canceled, incomplete_expired). */
export const liveSubscriptionsOnClock = (sql: SqlClient.SqlClient, testClockId: string) =>
  Effect.map(
    sql<{ readonly id: string }>`SELECT id FROM ${sql(SUBSCRIPTIONS)}
      WHERE test_clock_id = ${testClockId} AND status NOT IN ('canceled', 'incomplete_expired') ORDER BY id`,
    (rows) => rows.map((r) => r.id)
  )

export interface SubscriptionFilters extends OwnedListFilters {
  readonly customerId?: string | undefined
  readonly status?: SubscriptionStatus | undefined
  readonly productId?: string | undefined
}

/** `GET /v1/subscriptions`: newest first, keyset-paged, filtered. */
export const listSubscriptions = <A>(
  sql: SqlClient.SqlClient,
  filters: SubscriptionFilters,
  params: V1ListParams,
  toItem: (s: SubscriptionState) => A
): Effect.Effect<V1Page<A>, BadRequest | SqlError> => {
  const conditions = [
    ...(filters.customerId === undefined ? [] : [sql`customer_id = ${filters.customerId}`]),
    ...(filters.status === undefined ? [] : [sql`status = ${filters.status}`]),
    ...(filters.productId === undefined ? [] : [sql`product_id = ${filters.productId}`])
  ]
  return v1Page(sql, {
    table: SUBSCRIPTIONS,
    idColumn: "id",
    idPrefix: "sub",
    columns: "state",
    ...(conditions.length === 0 ? {} : { where: sql.and(conditions) }),
    owner: filters.owner,
    params,
    toItem: (row: StateRow) => toItem(decodeState(row.state))
  })
}

/** One invoice by id. */
export const selectInvoice = (sql: SqlClient.SqlClient, invoiceId: string) =>
  Effect.map(sql<StateRow>`SELECT state FROM ${sql(INVOICES)} WHERE id = ${invoiceId}`, (rows) =>
    Option.map(Option.fromNullable(rows[0]), (r) => invoiceObject(decodeInvoice(r.state)))
  )

export interface InvoiceFilters extends OwnedListFilters {
  readonly subscriptionId?: string | undefined
  readonly customerId?: string | undefined
  readonly status?: InvoiceStatus | undefined
}

/** `GET /v1/invoices`: newest first, keyset-paged, filtered. */
export const listInvoices = (
  sql: SqlClient.SqlClient,
  filters: InvoiceFilters,
  params: V1ListParams
): Effect.Effect<V1Page<InvoiceObject>, BadRequest | SqlError> => {
  const conditions = [
    ...(filters.subscriptionId === undefined ? [] : [sql`subscription_id = ${filters.subscriptionId}`]),
    ...(filters.customerId === undefined ? [] : [sql`customer_id = ${filters.customerId}`]),
    ...(filters.status === undefined ? [] : [sql`status = ${filters.status}`])
  ]
  return v1Page(sql, {
    table: INVOICES,
    idColumn: "id",
    idPrefix: "in",
    columns: "state",
    ...(conditions.length === 0 ? {} : { where: sql.and(conditions) }),
    owner: filters.owner,
    params,
    toItem: (row: StateRow) => invoiceObject(decodeInvoice(row.state))
  })
}
