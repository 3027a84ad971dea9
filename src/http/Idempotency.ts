/**
 * Idempotent retries with the IETF `Idempotency-Key` header (design/API.md "Idempotency"), on every
 * POST, PUT, PATCH and DELETE of both surfaces. Exactly once: a request with a key either committed
 * its writes TOGETHER WITH its stored response, or left nothing behind.
 *
 * - Scope = (requester, key). Authentication has not run yet when this middleware does, so the
 *   requester is the SHA-256 of the `Authorization` header (`anonymous:<client ip>` without one; see
 *   `requesterKey`); the same credential sent in another form (a refreshed token) is another scope.
 * - A request with a key runs in ONE transaction this middleware opens and owns (db/Transaction
 *   `openTransaction`): every use case's `transact`, command, append and due-work write in the
 *   handler joins it. In it, first the key's lock (a transaction-scoped advisory lock on the key's
 *   hash, taken without waiting), then the key's row is read again; then the handler runs. From the
 *   platform's pre-response handler — after `apiMiddleware` normalized the response, BEFORE a byte of
 *   it is sent — the response is written into the key's row and the transaction COMMITs (response
 *   and writes at once), or the transaction ROLLs BACK (a response that is not stored: nothing of the
 *   request is kept, even writes made before a 4xx). A client that goes away after the commit gets
 *   the stored response on its retry; one that goes away before it gets a request that never happened.
 * - A crashed process holds nothing: its lock goes with its connection, and its transaction either
 *   committed (the retry replays the response) or did not (the retry runs). No lease, no waiting.
 * - Same key + same request → the stored status, body and relevant headers again, with
 *   `Idempotent-Replayed: true` and the replay's own `Request-Id` (the stored body keeps the original
 *   request id). Same key + another request → 422 `idempotency_key_reused`. Same key while the first
 *   still runs → 409 `idempotency_request_in_progress`: answered from this process's table of running
 *   keys before any SQL (embedded PostgreSQL has one connection, which the running request holds), or
 *   from the lock held by another process (which cannot tell another request from the same one:
 *   409 there, the 422 once it completed).
 * - What is stored: the final response of a request that ran — 2xx, 3xx and 4xx except rejections
 *   before any side effect: 400, 401, 403, 404, 405, 408, 413, 415, 429 (and 499, a client that went
 *   away). For those, and for a 5xx, the transaction rolls back and the key stays free, so a
 *   (corrected) retry with the same key executes. Headers that a handler adds in a pre-response
 *   handler of its own (`Retry-After` of a 429) are not stored; no stored status carries one.
 * - A joined writer that loses a race (a concurrency conflict, `reportConflict`) makes the whole
 *   request run again in a new transaction — its response is never sent — through
 *   `CommandRunner.retrying`, queued on the contested stream like `transact`, 5 attempts in total;
 *   the last attempt's response is answered as it is (and not stored).
 * - The cost: such a request holds a connection (on embedded PostgreSQL, THE connection) for its
 *   whole run, slow work (password hashing) included. Requests without a key are untouched.
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
import { unreachableInCause } from "../db/Reachability.js"
import { openTransaction, type ReportedConflict } from "../db/Transaction.js"
import { Keyring } from "../eventstore/Keyring.js"
import { CommandRunner, isConcurrencyConflict } from "../kernel/CommandRunner.js"
import { processor } from "../processors/Supervisor.js"
import { UNAVAILABLE, UNAVAILABLE_RETRY_AFTER_SECONDS } from "./errors.js"
import { MAX_BODY_BYTES } from "./middleware.js"
import { errorResponse, requesterKey } from "./RateLimit.js"

export const IDEMPOTENCY_KEY_HEADER = "idempotency-key"
export const IDEMPOTENT_REPLAYED_HEADER = "idempotent-replayed"
/** How long a key and its response are kept. */
export const IDEMPOTENCY_TTL: Duration.Duration = Duration.hours(24)

/** The methods an `Idempotency-Key` applies to. */
export const UNSAFE_METHODS: ReadonlySet<string> = new Set(["POST", "PUT", "PATCH", "DELETE"])

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

export interface StoredResponse {
  readonly status: number
  readonly contentType: string | null
  readonly headers: Readonly<Record<string, string>>
  readonly body: Uint8Array
}

/** What a key's row says about a request carrying it. */
export type KeyOutcome =
  /** No completed response (never used, expired, or unreadable): the request runs. */
  | { readonly _tag: "Absent" }
  | { readonly _tag: "Replay"; readonly response: StoredResponse }
  | { readonly _tag: "Mismatch"; readonly method: string; readonly path: string }

export interface IdempotencyTimings {
  readonly ttl?: Duration.DurationInput
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

/** What a stored body's ciphertext is bound to: its row. */
const sealContext = (target: Pick<IdempotencyTarget, "scopeHash" | "key">) =>
  `idempotency:${target.scopeHash}:${target.key}`

/**
 * Reads `target.key`'s row: the stored response of a completed request (or the request it belongs
 * to, when it is another one). Rows left `in_flight` by an earlier version of this middleware hold
 * no outcome and count as absent, like expired rows and responses sealed under a retired master key.
 */
export const lookupIdempotencyKey = (
  target: IdempotencyTarget
): Effect.Effect<KeyOutcome, SqlError, SqlClient.SqlClient | Keyring> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const keyring = yield* Keyring
    const now = yield* nowDate
    const rows = yield* sql<KeyRow>`
      SELECT fingerprint, method, path, state, status, content_type AS "contentType", headers, body,
             expires_at AS "expiresAt"
        FROM http.idempotency_keys
       WHERE scope_hash = ${target.scopeHash} AND key = ${target.key}`
    const row = rows[0]
    if (!row || row.expiresAt.getTime() <= now.getTime()) return { _tag: "Absent" } as const
    if (row.state !== "completed" || row.status === null) return { _tag: "Absent" } as const
    if (row.fingerprint !== target.fingerprint) {
      return { _tag: "Mismatch", method: row.method, path: row.path } as const
    }
    const body = keyring.openBytes(row.body ?? new Uint8Array(), sealContext(target))
    if (Option.isNone(body)) {
      // Stored under another master key (rotated): it cannot be replayed, so the request runs.
      yield* Effect.logWarning("a stored idempotent response could not be decrypted; the request runs again")
      return { _tag: "Absent" } as const
    }
    return {
      _tag: "Replay",
      response: {
        status: row.status,
        contentType: row.contentType,
        headers: stringRecord(row.headers),
        body: body.value
      }
    } as const
  })

/**
 * Writes the response of a request that ran into its key's row, its body encrypted (it may carry a
 * secret shown once, like a new API key). Called in the request's own transaction, by the holder of
 * the key's lock, after `lookupIdempotencyKey` found no live outcome: whatever row is there (expired,
 * unreadable, a legacy `in_flight` claim) is replaced.
 */
export const storeIdempotencyResponse = (
  target: IdempotencyTarget,
  response: StoredResponse,
  timings: IdempotencyTimings = {}
): Effect.Effect<void, SqlError, SqlClient.SqlClient | Keyring> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const keyring = yield* Keyring
    const now = yield* nowDate
    const expires = new Date(now.getTime() + Duration.toMillis(timings.ttl ?? IDEMPOTENCY_TTL))
    const body = keyring.sealBytes(response.body, sealContext(target))
    yield* sql`
      INSERT INTO http.idempotency_keys AS k
        (scope_hash, key, fingerprint, method, path, state, claim_token, lease_until, status, content_type,
         headers, body, created_at, completed_at, expires_at)
      VALUES (${target.scopeHash}, ${target.key}, ${target.fingerprint}, ${target.method}, ${target.path},
              'completed', ${randomBytes(16).toString("hex")}, NULL, ${response.status}, ${response.contentType},
              ${JSON.stringify(response.headers)}::jsonb, ${body}, ${now}, ${now}, ${expires})
      ON CONFLICT (scope_hash, key) DO UPDATE
        SET fingerprint = EXCLUDED.fingerprint, method = EXCLUDED.method, path = EXCLUDED.path,
            state = 'completed', claim_token = EXCLUDED.claim_token, lease_until = NULL,
            status = EXCLUDED.status, content_type = EXCLUDED.content_type, headers = EXCLUDED.headers,
            body = EXCLUDED.body, created_at = EXCLUDED.created_at, completed_at = EXCLUDED.completed_at,
            expires_at = EXCLUDED.expires_at`
  })

/**
 * The key's lock: a transaction-scoped advisory lock on 63 bits of the key's hash (the one-`bigint`
 * advisory key space, apart from the two-`int4` one projections use). Held until the request's
 * transaction ends; a process that dies loses it with its connection.
 */
export const idempotencyLockKey = (target: Pick<IdempotencyTarget, "scopeHash" | "key">): string =>
  BigInt.asIntN(64, BigInt(`0x${sha256(`${target.scopeHash}\n${target.key}`).slice(0, 16)}`)).toString()

/** Takes the key's lock in the current transaction without waiting; false when another holds it. */
export const tryLockIdempotencyKey = (
  target: IdempotencyTarget
): Effect.Effect<boolean, SqlError, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{
        locked: boolean
      }>`SELECT pg_try_advisory_xact_lock(${idempotencyLockKey(target)}::bigint) AS locked`,
      (rows) => rows[0]?.locked === true
    )
  )

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

const inProgress = () =>
  errorResponse(409, {
    code: "idempotency_request_in_progress",
    message: "A request with this Idempotency-Key is still being processed; retry later"
  })

const reused = (method: string, path: string) =>
  errorResponse(422, {
    code: "idempotency_key_reused",
    message: `This Idempotency-Key was already used with a different request (${method} ${path.split("?")[0]}); use a new key for a new request`
  })

/** An answer given without running the request, or the response the request produced. */
type Attempt =
  | { readonly _tag: "Answer"; readonly response: HttpServerResponse.HttpServerResponse }
  /** The app ran; the platform sent its response itself. */
  | { readonly _tag: "Ran"; readonly response: HttpServerResponse.HttpServerResponse }

/**
 * Thrown (as a defect) through the platform's response path when an attempt lost a race: its response must not be
 * sent, the request runs again.
 */
class Abandoned {
  readonly _tag = "IdempotencyAttemptAbandoned"
}

/** How many times a request whose transaction lost a race runs in total (as `transact`). */
const MAX_ATTEMPTS = 5

export interface IdempotencyMiddlewareOptions extends IdempotencyTimings {}

/**
 * The HTTP middleware (see the module comment). Requests without the header, and safe methods, pass
 * straight through. Database failures are defects (a 500 from `apiMiddleware`).
 */
export const idempotencyMiddleware = (options: IdempotencyMiddlewareOptions = {}) => {
  /**
   * Keys running in this process (`scope\nkey` → the request's fingerprint), until their transaction
   * ended: a duplicate never waits on the database.
   */
  const running = new Map<string, { readonly fingerprint: string }>()
  const keyed = <E, R>(
    app: HttpApp.Default<E, R>,
    request: HttpServerRequest.HttpServerRequest,
    header: string
  ) =>
    Effect.gen(function* () {
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
      const runner = yield* CommandRunner
      const target = idempotencyTarget({
        requester: requesterKey(request, config.trustProxyHops),
        key: key.value,
        method: request.method,
        path: request.url,
        body: body.right,
        contentType: request.headers["content-type"] ?? ""
      })
      // 1. The same key running here: answered before touching the database (embedded PostgreSQL
      //    has one connection, which the running request's transaction holds).
      const slot = `${target.scopeHash}\n${target.key}`
      const current = running.get(slot)
      if (current !== undefined) {
        return yield* current.fingerprint === target.fingerprint
          ? inProgress()
          : reused(target.method, target.path)
      }
      const mine = { fingerprint: target.fingerprint }
      running.set(slot, mine)
      // Once the transaction ended the database answers for the key: the platform may still be
      // sending the response (or waiting forever on a socket the client closed).
      const done = () => {
        if (running.get(slot) === mine) running.delete(slot)
      }

      const answer = (outcome: KeyOutcome) =>
        outcome._tag === "Replay"
          ? Effect.map(replay(outcome.response), (response) => Option.some(response))
          : outcome._tag === "Mismatch"
            ? Effect.map(reused(outcome.method, outcome.path), Option.some)
            : Effect.succeed(Option.none<HttpServerResponse.HttpServerResponse>())

      let attempts = 0
      /** One run of the request in its own transaction, which this middleware owns and ends. */
      const attempt = Effect.scoped(
        Effect.gen(function* () {
          attempts++
          const tx = yield* openTransaction
          // What `settle` needs, provided here: the platform runs pre-response handlers as `R = never`.
          const services = yield* Effect.context<SqlClient.SqlClient | Keyring>()
          // 3. The key's lock, then its row again: a request that committed meanwhile is visible now.
          const locked = yield* tx.join(tryLockIdempotencyKey(target))
          if (!locked) return { _tag: "Answer", response: yield* inProgress() } satisfies Attempt
          const known = yield* answer(yield* tx.join(lookupIdempotencyKey(target)))
          if (Option.isSome(known)) return { _tag: "Answer", response: known.value } satisfies Attempt
          const last = attempts >= MAX_ATTEMPTS
          let abandoned = false
          // Runs after apiMiddleware's normalizer, before the platform sends the response: the response
          // is stored and committed with the request's writes, or everything is rolled back, first.
          const settle = (response: HttpServerResponse.HttpServerResponse) =>
            Effect.gen(function* () {
              if (abandoned) return yield* Effect.die(new Abandoned())
              if (tx.ended()) return response
              if (Option.isSome(tx.conflict()) && !last) {
                abandoned = true
                yield* tx.rollback
                return yield* Effect.die(new Abandoned())
              }
              const stored = storable(response)
              if (Option.isNone(stored) || !isStoredStatus(response.status) || Option.isSome(tx.conflict())) {
                yield* tx.rollback
                done()
                return response
              }
              let unreachable = false
              const committed = yield* tx.join(storeIdempotencyResponse(target, stored.value, options)).pipe(
                Effect.zipRight(tx.commit),
                Effect.as(true),
                Effect.catchAllCause((cause) => {
                  unreachable = Option.isSome(unreachableInCause(cause))
                  return Effect.as(
                    unreachable
                      ? Effect.logWarning("idempotency: could not commit the request: database unreachable")
                      : Effect.logError("idempotency: could not commit the request", cause),
                    false
                  )
                })
              )
              // Not known to be committed otherwise: the retry finds the stored response or runs.
              if (!committed) yield* tx.rollback
              done()
              if (committed) return response
              if (unreachable) {
                return yield* errorResponse(503, UNAVAILABLE, {
                  "retry-after": String(UNAVAILABLE_RETRY_AFTER_SECONDS)
                })
              }
              return yield* errorResponse(500, {
                code: "internal_error",
                message: "An internal error occurred. It has been logged; retry later."
              })
            })
          // The handler runs in a daemon fiber, which a client that goes away does not interrupt (the
          // platform interrupts the request's fiber and the fibers it forked): a request with a key
          // runs to its end and its outcome is there for the retry, and no statement is cancelled
          // half-way (a cancel needs a second connection, which embedded PostgreSQL does not have).
          // The request's fiber waits for it uninterruptibly: the connection is the handler's until
          // `settle` ended the transaction.
          const handling = yield* Effect.forkDaemon(
            tx.join(
              HttpApp.withPreResponseHandler(app, (_request, response) =>
                Effect.provide(settle(response), services)
              )
            )
          )
          const ran = yield* Effect.uninterruptible(Fiber.join(handling)).pipe(
            Effect.map((response): Attempt => ({ _tag: "Ran", response })),
            Effect.catchAllCause((cause) =>
              // Lost a race: fail with the conflict so `retrying` runs the request again.
              Option.match(abandoned ? tx.conflict() : Option.none(), {
                onNone: () => Effect.failCause<E | ReportedConflict>(cause),
                onSome: (conflict) => Effect.fail<E | ReportedConflict>(conflict)
              })
            )
          )
          return ran
        })
      )

      const outcome = yield* Effect.gen(function* () {
        // 2. A completed key answers without a transaction.
        const known = yield* answer(yield* Effect.orDie(lookupIdempotencyKey(target)))
        if (Option.isSome(known)) return { _tag: "Answer", response: known.value } satisfies Attempt
        return yield* runner.retrying(attempt, { attempts: MAX_ATTEMPTS }).pipe(
          Effect.catchIf(
            (error): error is SqlError | ReportedConflict =>
              isConcurrencyConflict(error) ||
              (typeof error === "object" && error !== null && "_tag" in error && error._tag === "SqlError"),
            (error) => Effect.die(error)
          )
        )
      }).pipe(Effect.ensuring(Effect.sync(done)))
      // A "Ran" response was sent by the platform already; returning it does not send it again.
      return outcome.response
    })

  return <E, R>(
    app: HttpApp.Default<E, R>
  ): HttpApp.Default<E, R | SqlClient.SqlClient | AppConfig | Keyring | CommandRunner> =>
    // Every request passes here: those without a key go on at the cost of one service lookup.
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      const header = UNSAFE_METHODS.has(request.method) ? request.headers[IDEMPOTENCY_KEY_HEADER] : undefined
      return header === undefined ? app : keyed(app, request, header)
    })
}
