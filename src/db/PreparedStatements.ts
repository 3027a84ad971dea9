/**
 * Named (prepared) statements for an external PostgreSQL server (issue #17). `@effect/sql-pg` sends
 * every statement unnamed, so the server parses and plans it again on each call: for the hot reads
 * and a command's statements that is a third or more of their PostgreSQL time. This `pg.Client`
 * gives each parameterized SELECT / INSERT / UPDATE / DELETE / WITH text a name of its own, so
 * every connection parses and plans it once and then only binds and executes it.
 *
 * - Texts are few (they are templates; values travel as parameters); the first `limit` distinct
 *   texts of the process get names, any beyond run unnamed as before, so a text built with varying
 *   shapes cannot grow the server's memory without bound.
 * - A statement whose plan is invalidated (a projection rebuild swapping its tables, an index made)
 *   is re-analysed by the server from its text: the next call simply plans again.
 * - When the server refuses a named statement (`cached plan must not change result type` after a
 *   column change, or a pooler that dropped it), that call fails and the text gets a fresh name, so
 *   the next call parses it again.
 * - Not for embedded PGlite: its one session is shared by every process attached to the data
 *   directory, whose names would collide. `DATABASE_PREPARED_STATEMENTS=false` turns it off (for a
 *   PgBouncer in transaction mode without `max_prepared_statements`).
 *
 * The same client sends a transaction's BEGIN and its deferred writes ahead of its next statement,
 * in one round trip (PipelinedStatements.ts says how and why).
 */
import type pg from "pg"
import { SettlingClient } from "./InterruptedStatements.js"
import { type Ahead, BEGIN, DEFERRED_MARK, noRows, PipelineQuery } from "./PipelinedStatements.js"

// A query may open with parentheses (`(SELECT …) UNION ALL (SELECT …)`).
const PREPARABLE = /^[\s(]*(?:select|insert|update|delete|with)\b/i

/** SQLSTATEs after which a named statement must be parsed again under another name. */
const STALE_STATEMENT = new Set([
  "0A000", // feature_not_supported: cached plan must not change result type
  "26000" // invalid_sql_statement_name: prepared statement does not exist
])

type Callback = (error: Error | null, result: unknown) => void

const isCallback = (value: unknown): value is Callback => typeof value === "function"

const sqlState = (error: unknown): unknown =>
  typeof error === "object" && error !== null && "code" in error ? error.code : undefined

/**
 * A `pg.Client` class whose parameterized statements are named (see the module comment); it settles
 * interrupted statements like every connection of ours (InterruptedStatements.ts).
 */
export const preparingClient = (limit: number): typeof pg.Client => {
  const names = new Map<string, string>()
  let issued = 0
  const nameFor = (text: string): string | undefined => {
    const known = names.get(text)
    if (known !== undefined) return known
    if (names.size >= limit || !PREPARABLE.test(text)) return undefined
    const name = `cp_${(++issued).toString(36)}`
    names.set(text, name)
    return name
  }
  return class PreparingClient extends SettlingClient {
    /** A transaction is open on this connection (its BEGIN came, its COMMIT or ROLLBACK not yet). */
    private open = false
    /** Statements that travel ahead of the transaction's next one: its BEGIN, deferred writes. */
    private ahead: Array<Ahead> = []
    /** A flushed statement of the open transaction failed (flushAhead): its COMMIT must fail. */
    private failed: Error | undefined = undefined

    constructor(config?: string | pg.ClientConfig) {
      super(config)
      const query: (...args: ReadonlyArray<unknown>) => unknown = this.query.bind(this)
      /**
       * Sends `text` with what waits ahead of it, in one round trip; named when its text is
       * preparable. A `PipelineQuery` is built from its text rather than from a `{ name, text,
       * values }` config: pg copies a config property by property (2.4 µs a statement, and an
       * object left in V8's slow dictionary mode), a ready query it submits as it is.
       */
      const send = (
        ahead: ReadonlyArray<Ahead>,
        text: string,
        values: Array<unknown>,
        callback: Callback
      ) => {
        const name = values.length === 0 ? undefined : nameFor(text)
        if (ahead.length === 0 && name === undefined) return query(text, values, callback)
        return query(new PipelineQuery(ahead, name, text, values), (error: Error | null, result: unknown) => {
          if (error !== null && STALE_STATEMENT.has(String(sqlState(error)))) {
            // Which of them went stale the error does not say: all parse again under new names.
            for (const statement of [...ahead, { name, text }])
              if (statement.name !== undefined && names.get(statement.text) === statement.name)
                names.delete(statement.text)
          }
          callback(error, result)
        })
      }
      // The call @effect/sql-pg makes: (text, values, callback). Any other shape passes through.
      const named = (...args: ReadonlyArray<unknown>): unknown => {
        const [text, values, callback] = args
        if (typeof text !== "string" || !Array.isArray(values) || !isCallback(callback)) {
          this.flushAhead(query)
          return query(...args)
        }
        const bare = values.length === 0
        if (bare && text === "BEGIN" && !this.open) {
          this.open = true
          this.ahead = [BEGIN]
          callback(null, noRows("BEGIN"))
          return undefined
        }
        if (bare && (text === "COMMIT" || text === "ROLLBACK") && this.open) {
          const ahead = this.ahead
          const failed = this.failed
          this.open = false
          this.ahead = []
          this.failed = undefined
          if (failed !== undefined && text === "COMMIT") {
            query("ROLLBACK", [], () => callback(failed, undefined))
            return undefined
          }
          // Nothing reached the server: there is nothing to end.
          if (ahead[0] === BEGIN && (text === "ROLLBACK" || ahead.length === 1)) {
            callback(null, noRows(text))
            return undefined
          }
          // Deferred writes are dropped by a ROLLBACK (the server never saw them).
          if (text === "ROLLBACK" || ahead.length === 0) return query(text, values, callback)
          return send(ahead, text, values, (error, result) => {
            if (error === null) return callback(null, result)
            // A write ahead failed: the COMMIT never ran and the transaction is still open, aborted.
            query("ROLLBACK", [], () => callback(error, undefined))
          })
        }
        if (text.startsWith(DEFERRED_MARK)) {
          const statement = text.slice(DEFERRED_MARK.length)
          if (!this.open) return send([], statement, values, callback)
          this.ahead.push({ name: nameFor(statement), text: statement, values })
          callback(null, noRows("DEFERRED"))
          return undefined
        }
        const ahead = this.ahead
        if (ahead.length > 0) this.ahead = []
        return send(ahead, text, values, callback)
      }
      Object.defineProperty(this, "query", { value: named, writable: true, configurable: true })
    }

    /**
     * Before a call of another shape (a submittable), what waits ahead goes out on its own, so the
     * server still sees every statement in order; should it fail, so does the transaction's COMMIT.
     */
    private flushAhead(query: (...args: ReadonlyArray<unknown>) => unknown) {
      const ahead = this.ahead
      const last = ahead[ahead.length - 1]
      if (last === undefined) return
      this.ahead = []
      query(
        new PipelineQuery(ahead.slice(0, -1), last.name, last.text, [...last.values]),
        (error: Error | null) => {
          if (error !== null && this.open) this.failed = error
        }
      )
    }

    protected override onRelease(): void {
      this.open = false
      this.ahead = []
      this.failed = undefined
    }
  }
}
