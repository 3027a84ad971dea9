/**
 * Idempotent retries with the IETF `Idempotency-Key` header (design/API.md "Idempotency"), on every
 * POST, PUT, PATCH and DELETE of both surfaces.
 *
 * - Scope = (requester, key). Authentication has not run yet when this middleware does, so the
 *   requester is the SHA-256 of the `Authorization` header (`anonymous:<client ip>` without one; see
 *   `requesterKey`); the same credential sent in another form (a refreshed token) is another scope.
 * - The key is claimed atomically (one `INSERT … ON CONFLICT`) as `in_flight` under a 60 s lease the
 *   running request renews, so a crashed process's claim lapses instead of blocking the key.
 * - Same key + same request (method, path with query, canonical body) → the stored status, body and
 *   relevant headers again, with `Idempotent-Replayed: true` and the replay's own `Request-Id` (the
 *   stored body keeps the original request id). Same key + another request → 422
 *   `idempotency_key_reused`; same key while the first still runs → 409
 *   `idempotency_request_in_progress`.
 * - What is stored: the final response (after `apiMiddleware` normalized it) of a request that ran —
 *   2xx, 3xx and 4xx except rejections before any side effect: 400, 401, 403, 404, 405, 408, 413,
 *   415, 429 (and 499, a client that went away). For those the key is released, so a corrected
 *   retry with the same key executes. A 5xx also releases the key: a command is one transaction, so
 *   a 5xx left no state behind and the retry must run again.
 * - Rows live 24 h from the first request (timestamps from Effect's `Clock`, never `now()`); the
 *   `http.idempotency-purge` processor deletes expired ones, and an expired row is free for reuse
 *   even before it is purged.
 *
 * It runs inside `apiMiddleware` (so its pre-response handler sees the final, normalized response)
 * and after the rate limiter (a 429 never claims a key).
 */
import { createHash, randomBytes } from "node:crypto"
import { HttpApp, HttpIncomingMessage, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Duration, Effect, Fiber, Option } from "effect"
import { CurrentRequestId } from "../base/RequestId.js"
import { AppConfig } from "../config.js"
import { Keyring } from "../eventstore/Keyring.js"
import { processor } from "../processors/Supervisor.js"
import { MAX_BODY_BYTES } from "./middleware.js"
import { errorResponse, requesterKey } from "./RateLimit.js"

export const IDEMPOTENCY_KEY_HEADER = "idempotency-key"
export const IDEMPOTENT_REPLAYED_HEADER = "idempotent-replayed"
/** How long a key and its response are kept. */
export const IDEMPOTENCY_TTL: Duration.Duration = Duration.hours(24)
/** How long an in-flight claim survives without being renewed (a crashed process). */
export const IDEMPOTENCY_LEASE: Duration.Duration = Duration.seconds(60)

const UNSAFE_METHODS: ReadonlySet<string> = new Set(["POST", "PUT", "PATCH", "DELETE"])

/** Statuses that mean "refused before any side effect" (or no answer at all): never stored. */
const NOT_STORED: ReadonlySet<number> = new Set([400, 401, 403, 404, 405, 408, 413, 415, 429, 499])

/** Whether a response with this status is kept for replays (otherwise the key is released). */
export const isStoredStatus = (status: number): boolean =>
  status >= 200 && status < 500 && !NOT_STORED.has(status)

/** Response headers replayed with the stored body (besides `Content-Type`). */
const STORED_HEADERS = ["location", "etag", "last-modified", "link", "content-location", "content-language"]

/**
 * The key: 1–255 printable ASCII characters (space to `~`). The IETF draft's structured-field form
 * (`"…"`, with `\"` and `\\` escapes) is accepted too and means the same key as its bare content.
 */
export const parseIdempotencyKey = (raw: string): Option.Option<string> => {
  const value = raw.trim()
  const quoted = /^"((?:[^"\\]|\\["\\])*)"$/.exec(value)
  const key = quoted?.[1] !== undefined ? quoted[1].replace(/\\(["\\])/g, "$1") : value
  return /^[\x20-\x7E]{1,255}$/.test(key) ? Option.some(key) : Option.none()
}

const sha256 = (value: string | Uint8Array) => createHash("sha256").update(value).digest("hex")

const canonical = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(canonical)
  if (typeof value === "object" && value !== null) {
    const record = value as Record<string, unknown>
    return Object.fromEntries(
      Object.keys(record)
        .sort()
        .map((k) => [k, canonical(record[k])])
    )
  }
  return value
}

/** A JSON body's fingerprint ignores key order and whitespace; any other body is taken verbatim. */
const bodyDigest = (text: string, contentType: string) => {
  if (/json/i.test(contentType) && text.trim() !== "") {
    try {
      return sha256(`json:${JSON.stringify(canonical(JSON.parse(text)))}`)
    } catch {
      // not JSON after all: compare the bytes
    }
  }
  return sha256(`raw:${text}`)
}

/** What a key is bound to. */
export interface IdempotencyTarget {
  /** SHA-256 of the requester (`requesterKey`). */
  readonly scopeHash: string
  readonly key: string
  /** SHA-256 of method, path and body. */
  readonly fingerprint: string
  readonly method: string
  /** Path and query string. */
  readonly path: string
}

export const idempotencyTarget = (input: {
  readonly requester: string
  readonly key: string
  readonly method: string
  readonly path: string
  readonly body: string
  readonly contentType?: string
}): IdempotencyTarget => ({
  scopeHash: sha256(input.requester),
  key: input.key,
  method: input.method,
  path: input.path,
  fingerprint: sha256(`${input.method}\n${input.path}\n${bodyDigest(input.body, input.contentType ?? "")}`)
})

/** A claimed key; the claim token fences completion and release. */
export interface IdempotencyClaim extends IdempotencyTarget {
  readonly token: string
}

export interface StoredResponse {
  readonly status: number
  readonly contentType: string | null
  readonly headers: Readonly<Record<string, string>>
  readonly body: Uint8Array
}

export type ClaimOutcome =
  | { readonly _tag: "Claimed"; readonly claim: IdempotencyClaim }
  | { readonly _tag: "Replay"; readonly response: StoredResponse }
  | { readonly _tag: "InProgress" }
  | { readonly _tag: "Mismatch"; readonly method: string; readonly path: string }

export interface IdempotencyTimings {
  readonly ttl?: Duration.DurationInput
  readonly lease?: Duration.DurationInput
}

interface KeyRow {
  readonly fingerprint: string
  readonly method: string
  readonly path: string
  readonly state: string
  readonly status: number | null
  readonly contentType: string | null
  readonly headers: unknown
  readonly body: Uint8Array | null
  readonly leaseUntil: Date | null
  readonly expiresAt: Date
}

const stringRecord = (value: unknown): Record<string, string> => {
  const out: Record<string, string> = {}
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) if (typeof v === "string") out[k] = v
  }
  return out
}

const nowDate = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

/**
 * Claims `target.key` for `target.scopeHash`: a new key, an expired one or an in-flight one whose
 * lease ran out becomes ours; otherwise the outcome says what the existing claim means for this
 * request.
 */
export const claimIdempotencyKey = (
  target: IdempotencyTarget,
  timings: IdempotencyTimings = {}
): Effect.Effect<ClaimOutcome, SqlError, SqlClient.SqlClient | Keyring> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const keyring = yield* Keyring
    const ttl = Duration.toMillis(timings.ttl ?? IDEMPOTENCY_TTL)
    const lease = Duration.toMillis(timings.lease ?? IDEMPOTENCY_LEASE)
    // A row can vanish (released) or lapse between the two statements: try again a few times.
    for (let attempt = 0; attempt < 5; attempt++) {
      const now = yield* nowDate
      const token = randomBytes(16).toString("hex")
      const claimed = yield* sql<{ token: string }>`
        INSERT INTO http.idempotency_keys AS k
          (scope_hash, key, fingerprint, method, path, state, claim_token, lease_until, created_at, expires_at)
        VALUES (${target.scopeHash}, ${target.key}, ${target.fingerprint}, ${target.method}, ${target.path},
                'in_flight', ${token}, ${new Date(now.getTime() + lease)}, ${now},
                ${new Date(now.getTime() + ttl)})
        ON CONFLICT (scope_hash, key) DO UPDATE
          SET fingerprint = EXCLUDED.fingerprint, method = EXCLUDED.method, path = EXCLUDED.path,
              state = 'in_flight', claim_token = EXCLUDED.claim_token, lease_until = EXCLUDED.lease_until,
              status = NULL, content_type = NULL, headers = NULL, body = NULL,
              created_at = EXCLUDED.created_at, completed_at = NULL, expires_at = EXCLUDED.expires_at
          WHERE k.expires_at <= ${now} OR (k.state = 'in_flight' AND k.lease_until <= ${now})
        RETURNING k.claim_token AS token`
      if (claimed[0]?.token === token) return { _tag: "Claimed", claim: { ...target, token } }
      const rows = yield* sql<KeyRow>`
        SELECT fingerprint, method, path, state, status, content_type AS "contentType", headers, body,
               lease_until AS "leaseUntil", expires_at AS "expiresAt"
          FROM http.idempotency_keys
         WHERE scope_hash = ${target.scopeHash} AND key = ${target.key}`
      const row = rows[0]
      if (!row) continue
      const at = now.getTime()
      if (row.expiresAt.getTime() <= at) continue
      if (row.state === "in_flight" && (row.leaseUntil?.getTime() ?? 0) <= at) continue
      if (row.fingerprint !== target.fingerprint) {
        return { _tag: "Mismatch", method: row.method, path: row.path }
      }
      if (row.state !== "completed" || row.status === null) return { _tag: "InProgress" }
      const body = keyring.openBytes(row.body ?? new Uint8Array(), sealContext(target))
      if (Option.isNone(body)) {
        // Stored under another master key (rotated): the response cannot be replayed, so the
        // key is given up and this request runs.
        yield* Effect.logWarning(
          "a stored idempotent response could not be decrypted; the request runs again"
        )
        yield* sql`DELETE FROM http.idempotency_keys WHERE scope_hash = ${target.scopeHash} AND key = ${target.key}
                     AND fingerprint = ${row.fingerprint} AND state = 'completed'`
        continue
      }
      return {
        _tag: "Replay",
        response: {
          status: row.status,
          contentType: row.contentType,
          headers: stringRecord(row.headers),
          body: body.value
        }
      }
    }
    return { _tag: "InProgress" }
  })

/** What a stored body's ciphertext is bound to: its row. */
const sealContext = (target: Pick<IdempotencyTarget, "scopeHash" | "key">) =>
  `idempotency:${target.scopeHash}:${target.key}`

/**
 * Stores the response of a claimed request, its body encrypted (it may carry a secret shown once,
 * like a new API key). False when the claim was no longer ours.
 */
export const completeIdempotencyKey = (
  claim: IdempotencyClaim,
  response: StoredResponse
): Effect.Effect<boolean, SqlError, SqlClient.SqlClient | Keyring> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const keyring = yield* Keyring
    const now = yield* nowDate
    const body = keyring.sealBytes(response.body, sealContext(claim))
    const rows = yield* sql`
      UPDATE http.idempotency_keys
         SET state = 'completed', status = ${response.status}, content_type = ${response.contentType},
             headers = ${JSON.stringify(response.headers)}::jsonb, body = ${body},
             lease_until = NULL, completed_at = ${now}
       WHERE scope_hash = ${claim.scopeHash} AND key = ${claim.key} AND claim_token = ${claim.token}
         AND state = 'in_flight'
      RETURNING 1 AS ok`
    return rows.length > 0
  })

/** Frees a claimed key (nothing to keep): the next request with it runs. */
export const releaseIdempotencyKey = (
  claim: IdempotencyClaim
): Effect.Effect<void, SqlError, SqlClient.SqlClient> =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`
      DELETE FROM http.idempotency_keys
       WHERE scope_hash = ${claim.scopeHash} AND key = ${claim.key} AND claim_token = ${claim.token}
         AND state = 'in_flight'`
  ).pipe(Effect.asVoid)

/** Extends an in-flight claim's lease. False when it is no longer ours (or no longer in flight). */
export const renewIdempotencyKey = (
  claim: IdempotencyClaim,
  lease: Duration.DurationInput = IDEMPOTENCY_LEASE
): Effect.Effect<boolean, SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const now = yield* nowDate
    const rows = yield* sql`
      UPDATE http.idempotency_keys SET lease_until = ${new Date(now.getTime() + Duration.toMillis(lease))}
       WHERE scope_hash = ${claim.scopeHash} AND key = ${claim.key} AND claim_token = ${claim.token}
         AND state = 'in_flight'
      RETURNING 1 AS ok`
    return rows.length > 0
  })

/** Deletes up to `batchSize` expired keys; returns how many went. */
export const purgeExpiredIdempotencyKeys = (
  batchSize = 1000
): Effect.Effect<number, SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const now = yield* nowDate
    const rows = yield* sql`
      DELETE FROM http.idempotency_keys
       WHERE (scope_hash, key) IN (
         SELECT scope_hash, key FROM http.idempotency_keys
          WHERE expires_at <= ${now} ORDER BY expires_at LIMIT ${batchSize})
      RETURNING 1 AS ok`
    return rows.length
  })

/** Background processor: purges expired keys every `interval` (default 10 minutes). */
export const idempotencyPurgeProcessor = (
  options: { readonly interval?: Duration.DurationInput; readonly batchSize?: number } = {}
) => {
  const batchSize = options.batchSize ?? 1000
  const interval = options.interval ?? Duration.minutes(10)
  return processor(
    "http.idempotency-purge",
    Effect.gen(function* () {
      while (true) {
        let total = 0
        let deleted = batchSize
        while (deleted >= batchSize) {
          deleted = yield* purgeExpiredIdempotencyKeys(batchSize)
          total += deleted
        }
        if (total > 0) yield* Effect.logDebug(`purged ${total} expired idempotency keys`)
        yield* Effect.sleep(interval)
      }
    })
  )
}

const storable = (response: HttpServerResponse.HttpServerResponse): Option.Option<StoredResponse> => {
  const body = response.body
  const headers: Record<string, string> = {}
  for (const name of STORED_HEADERS) {
    const value = response.headers[name]
    if (value !== undefined) headers[name] = value
  }
  switch (body._tag) {
    case "Empty":
      return Option.some({ status: response.status, contentType: null, headers, body: new Uint8Array() })
    case "Uint8Array":
      return Option.some({
        status: response.status,
        contentType: body.contentType || (response.headers["content-type"] ?? null),
        headers,
        body: body.body
      })
    default:
      // Streams and form data cannot be kept; such endpoints are not idempotent-replayable.
      return Option.none()
  }
}

const replay = (stored: StoredResponse) =>
  Effect.map(CurrentRequestId, (requestId) => {
    const headers = {
      ...stored.headers,
      [IDEMPOTENT_REPLAYED_HEADER]: "true",
      ...(requestId ? { "request-id": requestId } : {})
    }
    return stored.body.length === 0 && stored.contentType === null
      ? HttpServerResponse.empty({ status: stored.status, headers })
      : HttpServerResponse.uint8Array(stored.body, {
          status: stored.status,
          headers,
          ...(stored.contentType ? { contentType: stored.contentType } : {})
        })
  })

export interface IdempotencyMiddlewareOptions extends IdempotencyTimings {}

/**
 * The HTTP middleware (see the module comment). Requests without the header, and safe methods, pass
 * straight through. Database failures are defects (a 500 from `apiMiddleware`).
 */
export const idempotencyMiddleware = (options: IdempotencyMiddlewareOptions = {}) => {
  const lease = Duration.decode(options.lease ?? IDEMPOTENCY_LEASE)
  const heartbeatEvery = Duration.millis(Math.max(10, Duration.toMillis(lease) / 3))
  return <E, R>(
    app: HttpApp.Default<E, R>
  ): HttpApp.Default<E, R | SqlClient.SqlClient | AppConfig | Keyring> =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (!UNSAFE_METHODS.has(request.method)) return yield* app
      const header = request.headers[IDEMPOTENCY_KEY_HEADER]
      if (header === undefined) return yield* app
      const key = parseIdempotencyKey(header)
      if (Option.isNone(key)) {
        return yield* errorResponse(400, {
          code: "parameter_invalid",
          message: "Idempotency-Key must be 1 to 255 printable ASCII characters",
          param: "Idempotency-Key"
        })
      }
      // apiMiddleware already read and checked the body; the platform cached the text.
      const body = yield* Effect.either(
        request.text.pipe(HttpIncomingMessage.withMaxBodySize(Option.some(MAX_BODY_BYTES)))
      )
      if (body._tag === "Left") return yield* app
      const config = yield* AppConfig
      const sql = yield* SqlClient.SqlClient
      const keyring = yield* Keyring
      const target = idempotencyTarget({
        requester: requesterKey(request, config.trustProxyHops),
        key: key.value,
        method: request.method,
        path: request.url,
        body: body.right,
        contentType: request.headers["content-type"] ?? ""
      })
      const outcome = yield* Effect.orDie(claimIdempotencyKey(target, options))
      switch (outcome._tag) {
        case "Replay":
          return yield* replay(outcome.response)
        case "InProgress":
          return yield* errorResponse(409, {
            code: "idempotency_request_in_progress",
            message: "A request with this Idempotency-Key is still being processed; retry later"
          })
        case "Mismatch":
          return yield* errorResponse(422, {
            code: "idempotency_key_reused",
            message: `This Idempotency-Key was already used with a different request (${outcome.method} ${outcome.path.split("?")[0]}); use a new key for a new request`
          })
      }
      const claim = outcome.claim
      let settled = false
      const logFailure = (what: string) =>
        Effect.catchAllCause((cause) => Effect.logError(`idempotency: could not ${what}`, cause))
      // Runs after apiMiddleware's normalizer and before the platform sends the response.
      const settle = (response: HttpServerResponse.HttpServerResponse) =>
        Effect.suspend(() => {
          if (settled) return Effect.void
          settled = true
          const stored = storable(response)
          return Option.isSome(stored) && isStoredStatus(response.status)
            ? completeIdempotencyKey(claim, stored.value).pipe(
                Effect.tap((ok) =>
                  ok ? Effect.void : Effect.logWarning("idempotency: the claim was lost before completion")
                ),
                logFailure("store the response")
              )
            : releaseIdempotencyKey(claim).pipe(logFailure("release the key"))
        }).pipe(Effect.provideService(SqlClient.SqlClient, sql), Effect.provideService(Keyring, keyring))
      // The platform runs middleware uninterruptibly: the heartbeat must be interruptible itself.
      const heartbeat = yield* Effect.fork(
        Effect.sleep(heartbeatEvery).pipe(
          Effect.zipRight(renewIdempotencyKey(claim, lease)),
          logFailure("renew the lease"),
          Effect.forever,
          Effect.interruptible
        )
      )
      return yield* HttpApp.withPreResponseHandler(app, (_request, response) =>
        Effect.as(settle(response), response)
      ).pipe(
        Effect.ensuring(Fiber.interrupt(heartbeat)),
        // No response reached the pre-response handler (interrupted, or failed before one existed).
        Effect.ensuring(
          Effect.suspend(() =>
            settled ? Effect.void : releaseIdempotencyKey(claim).pipe(logFailure("release the key"))
          )
        )
      )
    })
}
