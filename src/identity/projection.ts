/**
 * Identity read models: users (login lookups, /auth/me), sessions, API keys, OAuth clients and the
 * revocation list. Identity events are few and small, so each is applied with its own statement;
 * every statement is idempotent, so a replayed batch changes nothing.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { optionalColumn, textArray } from "../db/Sql.js"
import { isShredded, revealOr } from "../eventstore/EventType.js"
import type { Recorded } from "../kernel/Decider.js"
import { normalizeEmail } from "../kernel/Email.js"
import { defineProjection } from "../kernel/Projection.js"
import {
  type ApiKeyEvent,
  identityEventTypes,
  type OAuthClientEvent,
  type SessionEvent,
  type UserEvent
} from "./events.js"

export const USERS = "identity.users"
export const SESSIONS = "identity.sessions"
export const API_KEYS = "identity.api_keys"
export const OAUTH_CLIENTS = "identity.oauth_clients"
export const REVOCATIONS = "identity.revocations"

export type RevocationKind = "session" | "user" | "client" | "token"

export interface Revocation {
  readonly kind: RevocationKind
  readonly subjectId: string
  readonly revokedAt: Date
}

type IdentityEvent = UserEvent | SessionEvent | ApiKeyEvent | OAuthClientEvent

/**
 * What an event revokes among still-unexpired access tokens: the one rule behind both the
 * `identity.revocations` table and each process's in-memory list. (API keys are looked up on
 * every request, so their revocation needs no entry here.)
 */
export const revocationOf = (event: Recorded<IdentityEvent>): Revocation | undefined => {
  switch (event.type) {
    case "session.revoked":
      return { kind: "session", subjectId: event.data.sessionId, revokedAt: event.recordedAt }
    case "user.password_reset":
    case "user.deactivated":
    case "user.erased":
      // Sessions started before that instant die: the entry's time is that instant.
      return { kind: "user", subjectId: event.data.userId, revokedAt: event.data.sessionsValidAfter }
    case "oauth_client.token_revoked":
      return { kind: "token", subjectId: event.data.tokenId, revokedAt: event.recordedAt }
    case "oauth_client.deleted":
      return { kind: "client", subjectId: event.data.clientId, revokedAt: event.recordedAt }
    default:
      return undefined
  }
}

export const IdentityProjection = defineProjection({
  name: "identity",
  tables: [USERS, SESSIONS, API_KEYS, OAUTH_CLIENTS, REVOCATIONS],
  events: identityEventTypes,
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const users = sql(target.table(USERS))
      const sessions = sql(target.table(SESSIONS))
      const apiKeys = sql(target.table(API_KEYS))
      const clients = sql(target.table(OAUTH_CLIENTS))
      const revocations = sql(target.table(REVOCATIONS))
      /** Sessions of the user started before `at` end at `at` (a reset, a deactivation, an erasure). */
      const revokeSessionsBefore = (userId: string, at: Date, reason: string) =>
        sql`UPDATE ${sessions} SET revoked_at = ${at}, revoke_reason = ${reason}
          WHERE user_id = ${userId} AND started_at < ${at} AND revoked_at IS NULL`
      for (const e of events) {
        const revocation = revocationOf(e)
        if (revocation) {
          yield* sql`INSERT INTO ${revocations} (kind, subject_id, revoked_at)
            VALUES (${revocation.kind}, ${revocation.subjectId}, ${revocation.revokedAt})
            ON CONFLICT (kind, subject_id) DO UPDATE SET revoked_at = GREATEST(${revocations}.revoked_at, EXCLUDED.revoked_at)`
        }
        switch (e.type) {
          case "user.registered": {
            const d = e.data
            // An erased user replays with shredded fields: no row.
            if (isShredded(d.email) || isShredded(d.passwordHash)) break
            const name = (v: typeof d.firstName) => (isShredded(v) ? "" : v)
            yield* sql`INSERT INTO ${users} (user_id, email, email_normalized, first_name, last_name, role,
                customer_id, password_hash, created_at, last_login_at)
              VALUES (${d.userId}, ${d.email}, ${normalizeEmail(d.email)}, ${name(d.firstName)}, ${name(d.lastName)},
                ${d.role}, ${d.customerId ?? null}, ${d.passwordHash}, ${e.recordedAt}, ${e.recordedAt})
              ON CONFLICT (user_id) DO NOTHING`
            break
          }
          case "user.logged_in":
            yield* sql`UPDATE ${users} SET last_login_at = GREATEST(last_login_at, ${e.recordedAt})
              WHERE user_id = ${e.data.userId}`
            break
          case "user.password_reset_requested":
            break
          case "user.password_reset": {
            const d = e.data
            if (!isShredded(d.passwordHash)) {
              yield* sql`UPDATE ${users} SET password_hash = ${d.passwordHash},
                  sessions_valid_after = GREATEST(coalesce(sessions_valid_after, ${d.sessionsValidAfter}), ${d.sessionsValidAfter})
                WHERE user_id = ${d.userId}`
            }
            yield* revokeSessionsBefore(d.userId, d.sessionsValidAfter, "password_reset")
            break
          }
          case "user.profile_changed": {
            const d = e.data
            const email = revealOr(d.email, undefined)
            const changes: Record<string, string> = {
              ...(email === undefined ? {} : { email, email_normalized: normalizeEmail(email) }),
              ...optionalColumn("first_name", revealOr(d.firstName, undefined)),
              ...optionalColumn("last_name", revealOr(d.lastName, undefined))
            }
            if (Object.keys(changes).length > 0) {
              yield* sql`UPDATE ${users} SET ${sql.update(changes)} WHERE user_id = ${d.userId}`
            }
            break
          }
          case "user.deactivated": {
            const d = e.data
            yield* sql`UPDATE ${users} SET deactivated_at = ${d.sessionsValidAfter},
                sessions_valid_after = GREATEST(coalesce(sessions_valid_after, ${d.sessionsValidAfter}), ${d.sessionsValidAfter})
              WHERE user_id = ${d.userId}`
            yield* revokeSessionsBefore(d.userId, d.sessionsValidAfter, "deactivated")
            break
          }
          case "user.reactivated":
            yield* sql`UPDATE ${users} SET deactivated_at = NULL WHERE user_id = ${e.data.userId}`
            break
          case "user.erased":
            yield* sql`DELETE FROM ${users} WHERE user_id = ${e.data.userId}`
            yield* revokeSessionsBefore(e.data.userId, e.data.sessionsValidAfter, "erased")
            break
          case "session.started":
            yield* sql`INSERT INTO ${sessions} (session_id, user_id, started_at, expires_at)
              VALUES (${e.data.sessionId}, ${e.data.userId}, ${e.data.startedAt}, ${e.data.expiresAt})
              ON CONFLICT (session_id) DO NOTHING`
            break
          case "token.refreshed":
            yield* sql`UPDATE ${sessions} SET refreshed_at = ${e.recordedAt}, expires_at = ${e.data.expiresAt}
              WHERE session_id = ${e.data.sessionId}`
            break
          case "session.revoked":
            yield* sql`UPDATE ${sessions} SET revoked_at = coalesce(revoked_at, ${e.recordedAt}),
                revoke_reason = coalesce(revoke_reason, ${e.data.reason})
              WHERE session_id = ${e.data.sessionId}`
            break
          case "apikey.created": {
            const d = e.data
            yield* sql`INSERT INTO ${apiKeys} (key_id, key_hash, key_last4, name, scopes, created_by_type,
                created_by_id, created_at)
              VALUES (${d.keyId}, ${d.keyHash}, ${d.keyLast4}, ${d.name}, ${textArray(sql, d.scopes)},
                ${d.createdBy.type}, ${d.createdBy.id}, ${e.recordedAt})
              ON CONFLICT (key_id) DO NOTHING`
            break
          }
          case "apikey.revoked":
            yield* sql`UPDATE ${apiKeys} SET revoked_at = coalesce(revoked_at, ${e.recordedAt})
              WHERE key_id = ${e.data.keyId}`
            break
          case "oauth_client.created": {
            const d = e.data
            yield* sql`INSERT INTO ${clients} (client_id, name, scopes, secret_hash, created_at)
              VALUES (${d.clientId}, ${d.name}, ${textArray(sql, d.scopes)}, ${d.secretHash}, ${e.recordedAt})
              ON CONFLICT (client_id) DO NOTHING`
            break
          }
          case "oauth_client.token_issued":
            break
          case "oauth_client.token_revoked":
            break
          case "oauth_client.deleted":
            yield* sql`UPDATE ${clients} SET deleted_at = coalesce(deleted_at, ${e.recordedAt})
              WHERE client_id = ${e.data.clientId}`
            break
        }
      }
    })
})
