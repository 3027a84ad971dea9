/** Read-model lookups of the identity context. */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { normalizeEmail } from "../kernel/Email.js"
import type { Role } from "./permissions.js"
import { API_KEYS, OAUTH_CLIENTS, USERS } from "./projection.js"

export interface UserRow {
  readonly userId: string
  readonly email: string
  readonly firstName: string
  readonly lastName: string
  readonly role: Role
  readonly customerId: string | null
  readonly passwordHash: string
  readonly createdAt: Date
  readonly lastLoginAt: Date
  readonly sessionsValidAfter: Date | null
  /** Set while the linked customer record is deactivated: no login, no refresh. */
  readonly deactivatedAt: Date | null
}

const userColumns = (sql: SqlClient.SqlClient) => sql`user_id AS "userId", email, first_name AS "firstName",
  last_name AS "lastName", role, customer_id AS "customerId", password_hash AS "passwordHash",
  created_at AS "createdAt", last_login_at AS "lastLoginAt", sessions_valid_after AS "sessionsValidAfter",
  deactivated_at AS "deactivatedAt"`

export const findUserByEmail = (email: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<UserRow>`SELECT ${userColumns(sql)} FROM ${sql(USERS)} WHERE email_normalized = ${normalizeEmail(email)}`,
      (rows) => Option.fromNullable(rows[0])
    )
  )

export const findUserById = (userId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<UserRow>`SELECT ${userColumns(sql)} FROM ${sql(USERS)} WHERE user_id = ${userId}`,
      (rows) => Option.fromNullable(rows[0])
    )
  )

/** The users holding an email address (one at most), with the customer record each logs in as. */
export const userEmailHolders = (email: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ readonly customerId: string | null }>`
      SELECT customer_id AS "customerId" FROM ${sql(USERS)} WHERE email_normalized = ${normalizeEmail(email)}`
  )

/** The email of whoever an actor is: a user, or the user who made an API key; none for others. */
export const actorEmail = (actor: { readonly type: string; readonly id: string }) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const found =
      actor.type === "user"
        ? sql<{ readonly email: string }>`SELECT email FROM ${sql(USERS)} WHERE user_id = ${actor.id}`
        : actor.type === "api_key"
          ? sql<{ readonly email: string }>`SELECT u.email FROM ${sql(API_KEYS)} k
              JOIN ${sql(USERS)} u ON u.user_id = k.created_by_id
             WHERE k.key_id = ${actor.id} AND k.created_by_type = 'user'`
          : Effect.succeed([])
    return Effect.map(found, (rows) => Option.fromNullable(rows[0]?.email))
  })

export interface ApiKeyRow {
  readonly keyId: string
  readonly name: string
  readonly scopes: ReadonlyArray<string>
  readonly keyLast4: string
  readonly createdByType: string
  readonly createdById: string
  readonly createdAt: Date
  readonly revokedAt: Date | null
}

const apiKeyColumns = (
  sql: SqlClient.SqlClient
) => sql`key_id AS "keyId", name, scopes, key_last4 AS "keyLast4",
  created_by_type AS "createdByType", created_by_id AS "createdById", created_at AS "createdAt", revoked_at AS "revokedAt"`

export const findApiKeyByHash = (keyHash: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<ApiKeyRow>`SELECT ${apiKeyColumns(sql)} FROM ${sql(API_KEYS)} WHERE key_hash = ${keyHash}`,
      (rows) => Option.fromNullable(rows[0])
    )
  )

export interface Page {
  readonly page: number
  readonly display: number
}

export const listLiveApiKeys = ({ page, display }: Page) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all({
      count: Effect.map(
        sql<{ count: number }>`SELECT count(*)::int AS count FROM ${sql(API_KEYS)} WHERE revoked_at IS NULL`,
        (rows) => rows[0]?.count ?? 0
      ),
      models: sql<ApiKeyRow>`SELECT ${apiKeyColumns(sql)} FROM ${sql(API_KEYS)} WHERE revoked_at IS NULL
        ORDER BY created_at DESC, key_id DESC LIMIT ${display} OFFSET ${(page - 1) * display}`
    })
  )

export interface OAuthClientRow {
  readonly clientId: string
  readonly name: string
  readonly scopes: ReadonlyArray<string>
  readonly secretHash: string
  readonly createdAt: Date
}

const clientColumns = (sql: SqlClient.SqlClient) =>
  sql`client_id AS "clientId", name, scopes, secret_hash AS "secretHash", created_at AS "createdAt"`

export const findLiveClient = (clientId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<OAuthClientRow>`SELECT ${clientColumns(sql)} FROM ${sql(OAUTH_CLIENTS)}
        WHERE client_id = ${clientId} AND deleted_at IS NULL`,
      (rows) => Option.fromNullable(rows[0])
    )
  )

export const listLiveClients = ({ page, display }: Page) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all({
      count: Effect.map(
        sql<{
          count: number
        }>`SELECT count(*)::int AS count FROM ${sql(OAUTH_CLIENTS)} WHERE deleted_at IS NULL`,
        (rows) => rows[0]?.count ?? 0
      ),
      models: sql<OAuthClientRow>`SELECT ${clientColumns(sql)} FROM ${sql(OAUTH_CLIENTS)} WHERE deleted_at IS NULL
        ORDER BY created_at DESC, client_id DESC LIMIT ${display} OFFSET ${(page - 1) * display}`
    })
  )
