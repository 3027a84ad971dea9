/**
 * The revocation list every API process checks access tokens against, in memory. It is loaded from
 * `identity.revocations` at start, updated at once by this process's own revocations, and polled
 * every second for other processes' (re-reading a minute of overlap, so a slow commit is not
 * missed). Only revocations younger than the longest token lifetime are kept: older ones concern
 * tokens that have expired anyway.
 *
 * Revoked API keys travel the same way (the same poll reads `identity.api_keys` revoked since the
 * last one; this process's own revocations apply at once), for the credential verifier's key cache:
 * a cached key is refused as soon as its revocation is known here. An API key revoked before a
 * process cached it is refused by the lookup that would fill the cache.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Context, Duration, Effect, Layer, Schedule } from "effect"
import type { Recorded } from "../kernel/Decider.js"
import { timestampOf } from "../kernel/Ids.js"
import type { ApiKeyEvent, OAuthClientEvent, SessionEvent, UserEvent } from "./events.js"
import { API_KEYS, REVOCATIONS, type Revocation, type RevocationKind, revocationOf } from "./projection.js"
import { type AccessClaims, MAX_TOKEN_TTL_SECONDS } from "./tokens.js"

export interface RevocationsShape {
  /** Whether a verified access token has been revoked (synchronous: no I/O on the request path). */
  readonly isRevoked: (claims: AccessClaims) => boolean
  /** Applies what events this process just committed revoke (the projection's own rule). */
  readonly recordEvents: (
    events: ReadonlyArray<Recorded<UserEvent | SessionEvent | ApiKeyEvent | OAuthClientEvent>>
  ) => Effect.Effect<void>
  /** Whether an API key (by id) has been revoked since this process started polling. */
  readonly isApiKeyRevoked: (keyId: string) => boolean
  /**
   * When (epoch ms, Clock) the last poll that succeeded started; undefined before the first. A
   * cache relying on this list for other processes' revocations must not outlive a stalled poll.
   */
  readonly lastPolledAt: () => number | undefined
  /** Reads what other processes committed since the last poll. */
  readonly poll: Effect.Effect<void, SqlError>
}

export class Revocations extends Context.Tag("identity/Revocations")<Revocations, RevocationsShape>() {}

export const POLL_INTERVAL = Duration.seconds(1)
const OVERLAP_MS = 60_000
const RETAIN_MS = (MAX_TOKEN_TTL_SECONDS + 300) * 1000

interface Row {
  readonly kind: RevocationKind | "api_key"
  readonly subjectId: string
  readonly revokedAt: Date
}

export const makeRevocations = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // kind → subject → revokedAt (ms)
  const lists: Record<RevocationKind, Map<string, number>> = {
    session: new Map(),
    user: new Map(),
    client: new Map(),
    token: new Map()
  }
  // API key id → revokedAt (ms)
  const apiKeys = new Map<string, number>()
  let lastPollMs: number | undefined

  const add = (r: Revocation | { kind: "api_key"; subjectId: string; revokedAt: Date }) => {
    const list = r.kind === "api_key" ? apiKeys : lists[r.kind]
    const at = r.revokedAt.getTime()
    if ((list.get(r.subjectId) ?? Number.NEGATIVE_INFINITY) < at) list.set(r.subjectId, at)
  }

  const prune = (nowMs: number) => {
    for (const list of [...Object.values(lists), apiKeys]) {
      for (const [subject, at] of list) if (at < nowMs - RETAIN_MS) list.delete(subject)
    }
  }

  const poll = Effect.gen(function* () {
    const nowMs = yield* Clock.currentTimeMillis
    const since = lastPollMs === undefined ? nowMs - RETAIN_MS : lastPollMs - OVERLAP_MS
    const after = new Date(since)
    const rows = yield* sql<Row>`SELECT kind, subject_id AS "subjectId", revoked_at AS "revokedAt"
        FROM ${sql(REVOCATIONS)} WHERE revoked_at > ${after}
      UNION ALL SELECT 'api_key', key_id, revoked_at FROM ${sql(API_KEYS)} WHERE revoked_at > ${after}`
    for (const row of rows) add(row)
    prune(nowMs)
    lastPollMs = nowMs
  })

  const shape: RevocationsShape = {
    isRevoked: (claims) => {
      if (lists.token.has(claims.jti) || lists.client.has(claims.sub)) return true
      if (claims.sid === undefined) return false
      if (lists.session.has(claims.sid)) return true
      const validAfter = lists.user.get(claims.sub)
      if (validAfter === undefined) return false
      const startedAt = timestampOf("ses", claims.sid)
      return startedAt === undefined || startedAt < validAfter
    },
    recordEvents: (events) =>
      Effect.sync(() => {
        for (const event of events) {
          if (event.type === "apikey.revoked") {
            add({ kind: "api_key", subjectId: event.data.keyId, revokedAt: event.recordedAt })
            continue
          }
          const revocation = revocationOf(event)
          if (revocation) add(revocation)
        }
      }),
    isApiKeyRevoked: (keyId) => apiKeys.has(keyId),
    lastPolledAt: () => lastPollMs,
    poll
  }
  yield* poll
  yield* poll.pipe(
    Effect.catchAllCause((cause) => Effect.logWarning("revocation list poll failed", cause)),
    Effect.repeat(Schedule.spaced(POLL_INTERVAL)),
    Effect.forkScoped
  )
  return shape
})

export const RevocationsLive = Layer.scoped(Revocations, makeRevocations)
