/** Read-model lookups of billing: one statement each. */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Either, type Fiber, FiberRef, Option } from "effect"
import type { BadRequest } from "../http/errors.js"
import { type OwnedListFilters, type V1ListParams, type V1Page, v1Page } from "../http/Lists.js"
import type { LoadedAggregate } from "../kernel/CommandRunner.js"
import type { SubscriptionState } from "./decider.js"
import type { InvoiceStatus, SubscriptionStatus } from "./events.js"
import { type InvoiceObject, invoiceObject } from "./objects.js"
import { decodeInvoice, decodeState, decodeStateEither, INVOICES, SUBSCRIPTIONS } from "./projection.js"

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
 * Rows a batch already locked in this very transaction (`withSubscriptionsLocked`), by id: whether
 * each was found, and (when asked for) its state as the read model holds it. Tied to the
 * transaction's connection, so a lookup from any other transaction (or none) never takes it for its
 * own lock.
 */
interface HeldLocks {
  readonly connection: unknown
  readonly found: ReadonlyMap<string, boolean>
  /** Read-model rows not taken yet (`heldSubscription` takes each once). */
  readonly states: Map<string, { readonly state: unknown; readonly version: number }>
}

const heldLocks = FiberRef.unsafeMake<HeldLocks | null>(null)

const transactionConnectionOf = (context: Context.Context<never>): unknown =>
  Option.getOrUndefined(Option.map(Context.getOption(context, SqlClient.TransactionConnection), ([c]) => c))

/** The held locks of the caller's own transaction, if its batch took them. */
const heldByCaller = (fiber: Fiber.RuntimeFiber<unknown, unknown>): HeldLocks | undefined => {
  const held = fiber.getFiberRef(heldLocks)
  return held !== null && held.connection === transactionConnectionOf(fiber.currentContext) ? held : undefined
}

/**
 * Locks the subscription's row for the rest of the caller's transaction (`FOR UPDATE`: usage writes,
 * which take `FOR KEY SHARE`, wait; so do other renewals, retries and cancellations of it). Answers
 * whether the row exists. A row its batch already locked in this transaction costs no statement.
 */
export const lockSubscription = (sql: SqlClient.SqlClient, subscriptionId: string) =>
  Effect.withFiberRuntime<boolean, SqlError>((fiber) => {
    const found = heldByCaller(fiber)?.found.get(subscriptionId)
    if (found !== undefined) return Effect.succeed(found)
    return Effect.map(
      sql<{
        readonly id: string
      }>`SELECT id FROM ${sql(SUBSCRIPTIONS)} WHERE id = ${subscriptionId} FOR UPDATE`,
      (rows) => rows.length > 0
    )
  })

/**
 * The subscription's state and version as its batch's lock read them from the read model (written
 * with every append, in its transaction: the stream's own fold, at its version), once: a second call
 * in the same transaction, a row that does not decode, or no batch, answer undefined, and the caller
 * reads the stream. Should the row ever be behind its stream, the append refuses the command.
 */
export const heldSubscription = (subscriptionId: string) =>
  Effect.withFiberRuntime<LoadedAggregate<SubscriptionState> | undefined>((fiber) => {
    const states = heldByCaller(fiber)?.states
    const row = states?.get(subscriptionId)
    if (states === undefined || row === undefined) return Effect.succeed(undefined)
    states.delete(subscriptionId)
    return Effect.succeed(
      Either.match(decodeStateEither(row.state), {
        onLeft: () => undefined,
        onRight: (state) => ({ state, version: row.version })
      })
    )
  })

/**
 * Locks the rows of `subscriptionIds` in id order by one statement, then runs `effect` (in the same
 * transaction), in which `lockSubscription` of those ids answers from the lock already held (and,
 * with `states`, `heldSubscription` from the rows read with it). A batch of renewals takes its rows
 * as one, so two batches never wait on each other crosswise, whatever order its renewals' own
 * statements then run in.
 */
export const withSubscriptionsLocked = <A, E, R>(
  sql: SqlClient.SqlClient,
  subscriptionIds: ReadonlyArray<string>,
  effect: Effect.Effect<A, E, R>,
  options?: { readonly states?: boolean }
): Effect.Effect<A, E | SqlError, R> => {
  const ids = [...new Set(subscriptionIds)].sort()
  if (ids.length === 0) return effect
  const withStates = options?.states === true
  return Effect.withFiberRuntime((fiber) => {
    const connection = transactionConnectionOf(fiber.currentContext)
    // Outside a transaction a lock would end with its statement: nothing to hold.
    if (connection === undefined) return effect
    return Effect.flatMap(
      withStates
        ? sql<{ readonly id: string; readonly state: unknown; readonly version: number }>`
            SELECT id, state, version FROM ${sql(SUBSCRIPTIONS)}
              WHERE id IN ${sql.in(ids)} ORDER BY id FOR UPDATE`
        : sql<{ readonly id: string; readonly state?: unknown; readonly version?: number }>`
            SELECT id FROM ${sql(SUBSCRIPTIONS)} WHERE id IN ${sql.in(ids)} ORDER BY id FOR UPDATE`,
      (rows) => {
        const found = new Map<string, boolean>(ids.map((id) => [id, false]))
        const states = new Map<string, { readonly state: unknown; readonly version: number }>()
        for (const row of rows) {
          found.set(row.id, true)
          if (row.version !== undefined)
            states.set(row.id, { state: row.state, version: Number(row.version) })
        }
        return Effect.locally(effect, heldLocks, { connection, found, states })
      }
    )
  })
}

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
