/** Read-model lookups of the customers context (`GET /user`, `GET /user/:id`, email ownership). */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { deferInTransaction, executeInTransaction } from "../db/Sql.js"
import type { Sort } from "../http/Lists.js"
import { USERS_TABLE } from "../identity/index.js"
import { normalizeEmail } from "../kernel/Email.js"
import type { NewAddress } from "./decider.js"
import { CUSTOMERS } from "./projection.js"

export const SORT_FIELDS = ["createdAt", "totalSpent", "orderCount", "email", "lastName"] as const
export type SortField = (typeof SORT_FIELDS)[number]

export type CustomerSort = Sort<SortField>

export interface CustomerListQuery {
  readonly page: number
  readonly display: number
  readonly sort: CustomerSort
  /** Case-insensitive substring of first name, last name or email ("ada lovelace" spans both names). */
  readonly q?: string | undefined
  readonly tag?: string | undefined
  /** Created strictly after this instant. */
  readonly since?: Date | undefined
  /** Only this customer (a shopper lists only their own record). */
  readonly customerId?: string | undefined
}

export interface CustomerSummaryRow {
  readonly id: string
  readonly email: string
  readonly firstName: string
  readonly lastName: string
  readonly orderCount: number
  readonly totalSpent: number
  readonly createdAt: Date
}

/** A customer's address as the read model holds it: the address given, its id and whether it is the default. */
export interface AddressRow extends NewAddress {
  readonly id: string
  readonly isDefault: boolean
}

export interface CustomerRow extends CustomerSummaryRow {
  readonly phone: string | null
  readonly metadata: Readonly<Record<string, unknown>>
  readonly tags: ReadonlyArray<string>
  readonly active: boolean
  /** A registered shopper can log in as this customer. */
  readonly hasAccount: boolean
  readonly updatedAt: Date
  readonly addresses: ReadonlyArray<AddressRow>
  /** The billing test clock the customer lives on, if any. */
  readonly testClockId: string | null
}

const SORT_COLUMNS: Record<SortField, string> = {
  createdAt: "created_at",
  totalSpent: "total_spent",
  orderCount: "order_count",
  email: "email_normalized",
  lastName: "lower(last_name)"
}

/**
 * Sort fields whose column is unique: no two rows tie, so the id tie-breaker would change nothing, and
 * without it the column's UNIQUE index alone serves the sort (migration 0006 adds no second one).
 */
const UNIQUE_SORT_FIELDS: ReadonlySet<SortField> = new Set(["email"])

/** `%`, `_` and `\` match themselves in a search, not as LIKE wildcards. */
const likeEscape = (text: string) => text.replace(/[\\%_]/g, (c) => `\\${c}`)

/**
 * The two statements of one `GET /user` page: the total matching the filters, and the page itself.
 * Separate from running them so `npm run bench:customers` can EXPLAIN exactly this SQL.
 */
export const listStatements = (sql: SqlClient.SqlClient, query: CustomerListQuery) => {
  const table = sql(CUSTOMERS)
  const where = sql.and([
    ...(query.customerId === undefined ? [] : [sql`customer_id = ${query.customerId}`]),
    ...(query.q === undefined ? [] : [sql`search_text LIKE '%' || lower(${likeEscape(query.q)}) || '%'`]),
    ...(query.tag === undefined ? [] : [sql`tags @> ARRAY[${query.tag}]::text[]`]),
    ...(query.since === undefined ? [] : [sql`created_at > ${query.since}`])
  ])
  // Column and direction come from closed lists above, never from the request text.
  const direction = query.sort.direction === "asc" ? "ASC" : "DESC"
  const column = `${SORT_COLUMNS[query.sort.field]} ${direction}`
  const order = sql.literal(
    UNIQUE_SORT_FIELDS.has(query.sort.field) ? column : `${column}, customer_id ${direction}`
  )
  return {
    count: sql<{ count: number }>`SELECT count(*)::int AS count FROM ${table} WHERE ${where}`,
    models: sql<CustomerSummaryRow>`SELECT customer_id AS id, email, first_name AS "firstName",
        last_name AS "lastName", order_count AS "orderCount", total_spent AS "totalSpent", created_at AS "createdAt"
      FROM ${table} WHERE ${where}
      ORDER BY ${order} LIMIT ${query.display} OFFSET ${(query.page - 1) * query.display}`
  }
}

export const listCustomers = (query: CustomerListQuery) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const statements = listStatements(sql, query)
    return Effect.all(
      {
        count: Effect.map(statements.count, (rows) => rows[0]?.count ?? 0),
        models: statements.models
      },
      { concurrency: 1 }
    )
  })

/** A customer's row with its addresses, on `sql` (hot paths pass their client: no context lookup). */
export const selectCustomer = (sql: SqlClient.SqlClient, customerId: string) =>
  Effect.map(
    sql<CustomerRow>`SELECT c.customer_id AS id, c.email, c.first_name AS "firstName", c.last_name AS "lastName",
        c.phone, c.metadata, c.tags, c.active, c.user_id IS NOT NULL AS "hasAccount", c.order_count AS "orderCount",
        c.total_spent AS "totalSpent", c.created_at AS "createdAt", c.updated_at AS "updatedAt", c.addresses,
        c.test_clock_id AS "testClockId"
      FROM ${sql(CUSTOMERS)} c WHERE c.customer_id = ${customerId}`,
    (rows) => Option.fromNullable(rows[0])
  )

export const findCustomer = (customerId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => selectCustomer(sql, customerId))

/**
 * The customer records holding an address, with the login each has (one address, one person: with
 * identity's `userEmailHolders`, a duplicate is refused with 409 before the unique indexes would).
 */
export const customerEmailHolders = (email: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ readonly customerId: string | null }>`
      SELECT customer_id AS "customerId" FROM ${sql(CUSTOMERS)} WHERE email_normalized = ${normalizeEmail(email)}`
  )

/**
 * Who holds an address, customer records and logins together, in ONE statement (a command's
 * round trips are its cost): each holder with the customer id it stands for (a login's linked
 * record; null for an admin login). The union of `customerEmailHolders` and identity's `userEmailHolders`.
 */
/** Advisory-lock space of email claims (projections use 7701, SKUs 7702). */
export const EMAIL_LOCK_CLASS = 7_703

/**
 * Queues this transaction behind any other claiming `email` until it ends: the email check that
 * follows (a statement after the wait, so a fresh snapshot) then sees a racing claim's committed row
 * and refuses it cleanly, where the unique index would abort the whole transaction.
 */
export const lockEmailClaim = (sql: SqlClient.SqlClient, email: string) =>
  executeInTransaction(
    sql`SELECT pg_advisory_xact_lock(${EMAIL_LOCK_CLASS}, hashtext(${normalizeEmail(email)}))`
  )

/**
 * Fails with SQLSTATE 23505 (the unique index's own refusal) when another record or login holds
 * `email`; its rows are never read, so in the use case's own transaction it travels with the next
 * statement (`deferInTransaction`), its refusal that statement's error. For a new record only: an
 * update's own address is held by itself (`selectEmailHolders`).
 */
export const refuseTakenEmail = (sql: SqlClient.SqlClient, email: string) =>
  deferInTransaction(sql`SELECT customers.refuse_taken_email(${normalizeEmail(email)})`)

export const selectEmailHolders = (sql: SqlClient.SqlClient, email: string) => {
  const normalized = normalizeEmail(email)
  return executeInTransaction(sql<{ readonly customerId: string | null }>`
      SELECT customer_id AS "customerId" FROM ${sql(CUSTOMERS)} WHERE email_normalized = ${normalized}
      UNION ALL
      SELECT customer_id FROM ${sql(USERS_TABLE)} WHERE email_normalized = ${normalized}`)
}
