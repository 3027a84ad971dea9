/**
 * "The database is unreachable" told apart from every other database failure: a refused, reset or
 * timed-out connection, a pool that cannot hand out a connection, a server shutting down (SQLSTATE
 * 57P01–57P03, class 08). Such a failure is the operator's to fix, not a bug: requests answer 503
 * `service_unavailable` with `Retry-After`, `/ready` says so, and start-up waits for the database
 * (bounded by DATABASE_CONNECT_TIMEOUT_SECONDS) instead of exiting at once.
 */
import { SqlError } from "@effect/sql/SqlError"
import { Cause, Clock, Duration, Effect, Layer, Option, Redacted, Schedule } from "effect"
import { AppConfig } from "../config.js"

/** Socket and DNS failures that say nothing about our statements, only about reaching the server. */
const NETWORK_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "EHOSTDOWN",
  "ENETUNREACH",
  "ENETDOWN",
  "EPIPE",
  "ENOTFOUND",
  "EAI_AGAIN"
])

/** admin_shutdown, crash_shutdown, cannot_connect_now; and class 08, connection exceptions. */
const isUnreachableSqlState = (code: string) => /^57P0[123]$/.test(code) || /^08[0-9A-Z]{3}$/.test(code)

/** What `pg` and `pg-pool` say (without a code) when a connection is lost or cannot be made in time. */
const CONNECTION_MESSAGES = [
  /^Connection terminated/,
  /^timeout exceeded when trying to connect/,
  /has encountered a connection error and is not queryable/,
  /^Connection timed out$/
]

/** What @effect/sql-pg says when the pool cannot hand out a connection, whatever the cause. */
const ACQUIRE_MESSAGES = [
  /^Failed to acquire connection/,
  /^PgClient: Failed to connect/,
  /^PgClient: Connection timed out/
]

const field = (value: object, name: string): unknown => Reflect.get(value, name)

/** The value itself, then its `cause`s and an AggregateError's `errors`, breadth-first and bounded. */
const chain = (error: unknown): ReadonlyArray<object> => {
  const seen: object[] = []
  const queue: unknown[] = [error]
  while (queue.length > 0 && seen.length < 16) {
    const next = queue.shift()
    if (typeof next !== "object" || next === null || seen.includes(next)) continue
    seen.push(next)
    queue.push(field(next, "cause"))
    const errors = field(next, "errors")
    if (Array.isArray(errors)) queue.push(...errors)
  }
  return seen
}

/** The first sign in `error`'s chain that the database cannot be reached, as a short reason. */
const unreachableSign = (error: unknown): Option.Option<string> => {
  for (const link of chain(error)) {
    const code = field(link, "code")
    if (typeof code === "string" && (NETWORK_CODES.has(code) || isUnreachableSqlState(code))) {
      return Option.some(code)
    }
    const message = field(link, "message")
    if (typeof message === "string") {
      if (CONNECTION_MESSAGES.some((re) => re.test(message))) return Option.some(message)
      // The pool's own wrapper counts only when nothing below it tells another story.
      if (link instanceof SqlError && ACQUIRE_MESSAGES.some((re) => re.test(message))) {
        const below = chain(field(link, "cause")).find((c) => typeof field(c, "code") === "string")
        if (below === undefined) return Option.some(message)
      }
    }
  }
  return Option.none()
}

/**
 * The sign under the first SqlError of `error`'s chain: a refused connection to anything else (an
 * SMTP server, a webhook receiver) is not the database's outage.
 */
const databaseSign = (error: unknown): Option.Option<string> => {
  const sql = chain(error).find((link) => link instanceof SqlError)
  return sql === undefined ? Option.none() : unreachableSign(sql)
}

/** Whether `error` (any failure or defect value) means the database cannot be reached right now. */
export const isDatabaseUnreachable = (error: unknown): boolean => Option.isSome(databaseSign(error))

/** A failure or defect in `cause` that means the database cannot be reached, if any. */
export const unreachableInCause = (cause: Cause.Cause<unknown>): Option.Option<unknown> => {
  for (const failure of Cause.failures(cause)) if (isDatabaseUnreachable(failure)) return Option.some(failure)
  for (const defect of Cause.defects(cause)) if (isDatabaseUnreachable(defect)) return Option.some(defect)
  return Option.none()
}

/** Why the database is unreachable, in a few words (`ECONNREFUSED`, `57P01`, `Connection terminated unexpectedly`). */
export const unreachableReason = (error: unknown): string =>
  Option.getOrElse(databaseSign(error), () => "unreachable")

/** `host:port` of a `postgres://` URL, never its credentials. */
export const databaseTarget = (url: Redacted.Redacted<string>): string => {
  try {
    const parsed = new URL(Redacted.value(url))
    return `${parsed.hostname || "localhost"}:${parsed.port || "5432"}`
  } catch {
    return "the configured database"
  }
}

const seconds = (d: Duration.Duration) => {
  const s = Duration.toMillis(d) / 1000
  return `${Number.isInteger(s) ? s : s.toFixed(1)}s`
}

/**
 * `layer` (the database and its migrations) built again while it fails because the server cannot
 * be reached — a database that starts after the service (compose, a restarting server) — with
 * exponential back-off from 0.5 s to 10 s, one warning line per attempt, for at most
 * DATABASE_CONNECT_TIMEOUT_SECONDS; then it fails with one line that says so. Any other failure
 * (wrong password, a bad migration) fails at once. The embedded database is in-process: no retry.
 */
export const retryWhileUnreachable = <ROut, E, RIn>(
  layer: Layer.Layer<ROut, E, RIn>
): Layer.Layer<ROut, E | SqlError, RIn | AppConfig> =>
  Layer.unwrapEffect(
    Effect.gen(function* () {
      const config = yield* AppConfig
      if (Option.isNone(config.databaseUrl)) return layer
      const target = databaseTarget(config.databaseUrl.value)
      const bound = Duration.seconds(config.databaseConnectTimeoutSeconds)
      const deadline = (yield* Clock.currentTimeMillis) + Duration.toMillis(bound)
      let last: unknown
      const schedule = Schedule.exponential("500 millis").pipe(
        Schedule.union(Schedule.spaced("10 seconds")),
        Schedule.whileInput((error: E) => isDatabaseUnreachable(error)),
        Schedule.tapInput((error: E) =>
          Effect.sync(() => {
            last = error
          })
        ),
        Schedule.whileOutputEffect(() => Effect.map(Clock.currentTimeMillis, (now) => now < deadline)),
        // Never sleeps past the bound: the last attempt is made at the deadline at the latest.
        Schedule.modifyDelayEffect((_, delay) =>
          Effect.gen(function* () {
            const left = Duration.millis(Math.max(0, deadline - (yield* Clock.currentTimeMillis)))
            const wait = Duration.min(delay, left)
            yield* Effect.logWarning(
              `database unreachable at ${target} (${unreachableReason(last)}); retrying in ${seconds(wait)}`
            )
            return wait
          })
        )
      )
      return Layer.retry(layer, schedule).pipe(
        Layer.catchAll((error) =>
          Layer.fail(
            isDatabaseUnreachable(error)
              ? new SqlError({
                  cause: error,
                  message: `database unreachable at ${target} (${unreachableReason(error)}); gave up after ${seconds(bound)} (DATABASE_CONNECT_TIMEOUT_SECONDS)`
                })
              : error
          )
        )
      )
    })
  )
