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
 */
import pg from "pg"
import { SettlingClient } from "./InterruptedStatements.js"

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
 * A named statement, built from its text rather than from a `{ name, text, values }` config: pg
 * copies a config object property by property (2.4 µs a statement, and an object left in V8's slow
 * dictionary mode), a text it does not; a ready query is submitted as it is.
 */
class NamedQuery extends pg.Query {
  declare name: string
  constructor(name: string, text: string, values: Array<unknown>) {
    super(text, values)
    this.name = name
  }
}

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
    constructor(config?: string | pg.ClientConfig) {
      super(config)
      const query: (...args: ReadonlyArray<unknown>) => unknown = this.query.bind(this)
      // The call @effect/sql-pg makes: (text, values, callback). Any other shape passes through.
      const named = (...args: ReadonlyArray<unknown>): unknown => {
        const [text, values, callback] = args
        if (
          typeof text !== "string" ||
          !Array.isArray(values) ||
          values.length === 0 ||
          !isCallback(callback)
        ) {
          return query(...args)
        }
        const name = nameFor(text)
        if (name === undefined) return query(...args)
        return query(new NamedQuery(name, text, values), (error: Error | null, result: unknown) => {
          if (error !== null && STALE_STATEMENT.has(String(sqlState(error))) && names.get(text) === name) {
            names.delete(text)
          }
          callback(error, result)
        })
      }
      Object.defineProperty(this, "query", { value: named, writable: true, configurable: true })
    }
  }
}
