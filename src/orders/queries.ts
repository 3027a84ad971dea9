/** Read-model lookups of the orders context: one statement each. */
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import type { BadRequest } from "../http/errors.js"
import { type OwnedListFilters, type V1ListParams, type V1Page, v1Page } from "../http/Lists.js"
import type { OrderStatus } from "./decider.js"
import { type OrderObject, orderObject } from "./objects.js"
import { decodeState, ORDERS } from "./projection.js"

interface StateRow {
  readonly state: unknown
}

const toObject = (row: StateRow): OrderObject => orderObject(decodeState(row.state))

/** One order by id: a primary-key lookup. */
export const selectOrder = (sql: SqlClient.SqlClient, orderId: string) =>
  Effect.map(sql<StateRow>`SELECT state FROM ${sql(ORDERS)} WHERE order_id = ${orderId}`, (rows) =>
    Option.map(Option.fromNullable(rows[0]), toObject)
  )

/** The order of a checkout, if it has one. */
export const selectOrderOfCheckout = (sql: SqlClient.SqlClient, checkoutId: string) =>
  Effect.map(sql<StateRow>`SELECT state FROM ${sql(ORDERS)} WHERE checkout_id = ${checkoutId}`, (rows) =>
    Option.map(Option.fromNullable(rows[0]), toObject)
  )

export interface OrderFilters extends OwnedListFilters {
  readonly status?: OrderStatus | undefined
  readonly customerId?: string | undefined
  readonly email?: string | undefined
  readonly createdAfter?: Date | undefined
  readonly createdBefore?: Date | undefined
}

/** `GET /v1/orders`: newest first, keyset-paged, filtered. */
export const listOrders = (
  sql: SqlClient.SqlClient,
  filters: OrderFilters,
  params: V1ListParams
): Effect.Effect<V1Page<OrderObject>, BadRequest | SqlError> => {
  const conditions = [
    ...(filters.status === undefined ? [] : [sql`status = ${filters.status}`]),
    ...(filters.customerId === undefined ? [] : [sql`customer_id = ${filters.customerId}`]),
    ...(filters.email === undefined ? [] : [sql`email = ${filters.email.toLowerCase()}`]),
    ...(filters.createdAfter === undefined ? [] : [sql`created_at > ${filters.createdAfter}`]),
    ...(filters.createdBefore === undefined ? [] : [sql`created_at < ${filters.createdBefore}`])
  ]
  return v1Page(sql, {
    table: ORDERS,
    idColumn: "order_id",
    idPrefix: "ord",
    columns: "state",
    ...(conditions.length === 0 ? {} : { where: sql.and(conditions) }),
    owner: filters.owner,
    params,
    toItem: toObject
  })
}
