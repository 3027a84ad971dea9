/**
 * Fewer round trips per transaction on an external PostgreSQL (issue #17). `pg` sends one statement,
 * waits for its answer, then sends the next; a command's transaction paid a round trip for its
 * BEGIN and one for each write whose answer nobody reads (a read model's INSERT before COMMIT). Each
 * round trip costs node ~100–150 µs (a socket write, an event-loop wake-up, a fiber resumed) and the
 * server a message cycle.
 *
 * The PostgreSQL protocol lets a client send several statements before one `Sync`: the server runs
 * them in order and answers them together; after an error it skips the rest up to the `Sync`. So:
 *
 * - **BEGIN waits for the transaction's first statement** and travels in its round trip. The server
 *   takes the transaction's snapshot at its first statement either way; a transaction that sends
 *   nothing sends no BEGIN and no COMMIT (or ROLLBACK).
 * - **A write marked deferred** (`DEFERRED_MARK`, see `deferInTransaction` in Sql.ts) is answered at
 *   once with no rows and travels ahead of the transaction's next statement, or of its COMMIT. Its
 *   error, if any, is the error of that statement: the transaction fails as it would have, one
 *   statement later. Only for writes whose rows are not read and whose failure fails the command.
 *
 * Outside a transaction nothing is deferred. The marker is an SQL comment: a client without this
 * (embedded PGlite) runs the statement where it stands, with the same result.
 */
import pg from "pg"
import utils from "pg/lib/utils.js"

/** Prefix of a statement text that may travel with the transaction's next statement. */
export const DEFERRED_MARK = "/* deferred */ "

/** A statement sent ahead of another, in the same round trip. */
export interface Ahead {
  /** Its prepared-statement name, or undefined for an unnamed one. */
  readonly name: string | undefined
  readonly text: string
  readonly values: ReadonlyArray<unknown>
}

export const BEGIN: Ahead = { name: undefined, text: "BEGIN", values: [] }

/** What an answered-at-once statement (a deferred BEGIN or write) gives its caller. */
export const noRows = (command: string) => ({ command, rowCount: 0, rows: [], fields: [] })

type Base = (self: unknown, args: ReadonlyArray<unknown>) => unknown

/** A method of `pg.Query` that this module extends (checked at load: pg is pinned). */
const queryMethod = (name: string): Base => {
  const method: unknown = Reflect.get(pg.Query.prototype, name)
  if (typeof method !== "function") throw new Error(`pg.Query.prototype.${name} is missing: pg changed`)
  return (self, args) => Reflect.apply(method, self, args)
}

const basePrepare = queryMethod("prepare")
const baseRowDescription = queryMethod("handleRowDescription")
const baseDataRow = queryMethod("handleDataRow")
const baseCommandComplete = queryMethod("handleCommandComplete")
const baseError = queryMethod("handleError")
const baseReadyForQuery = queryMethod("handleReadyForQuery")

/** A connection's record of named statements (`parsedStatements`, `submittedNamedStatements`): name → text. */
const statementsRecord = (connection: pg.Connection, which: string): object | undefined => {
  const record: unknown = Reflect.get(connection, which)
  return typeof record === "object" && record !== null ? record : undefined
}

const recorded = (record: object | undefined, name: string) =>
  record !== undefined && Reflect.get(record, name) !== undefined

/**
 * One round trip: the `ahead` statements (Parse when not yet prepared on this connection, Bind,
 * Execute), then the main statement as `pg.Query` sends it (Parse, Bind, Describe, Execute), then
 * one Sync. The caller gets the main statement's rows, or the first error of any of them.
 */
export class PipelineQuery extends pg.Query {
  declare name: string | undefined
  declare queryMode: string | undefined
  /** Answers of the statements ahead still to come (their CommandComplete). */
  private remaining: number
  /** Named statements ahead whose Parse went out and whose ParseComplete has not come back. */
  private readonly parsing: Array<Ahead | undefined> = []
  private listening: ((...args: ReadonlyArray<unknown>) => void) | undefined
  private connection: pg.Connection | undefined
  /**
   * Whether the main statement's own Parse went out and its ParseComplete has not come back. pg's
   * client records the main statement as prepared at ANY ParseComplete while it is the active query
   * — the statements' ahead too — so an error between the two (a deferred write refused) would leave
   * a name the server never prepared recorded as prepared: the next use of it on this connection
   * failed ("prepared statement … does not exist").
   */
  private mainParsing = false

  constructor(
    private readonly ahead: ReadonlyArray<Ahead>,
    name: string | undefined,
    text: string,
    values: Array<unknown>
  ) {
    super(text, values)
    this.name = name
    // Extended protocol even without parameters (a COMMIT): a simple Query would end the pipeline.
    this.queryMode = "extended"
    this.remaining = ahead.length
  }

  prepare(connection: pg.Connection): void {
    const parsed = statementsRecord(connection, "parsedStatements")
    const submitted = statementsRecord(connection, "submittedNamedStatements")
    this.mainParsing =
      this.name !== undefined && !(recorded(parsed, this.name) || recorded(submitted, this.name))
    for (const statement of this.ahead) {
      const name = statement.name
      if (name === undefined || !(recorded(parsed, name) || recorded(submitted, name))) {
        connection.parse({ text: statement.text, name: name ?? "", types: [] }, true)
        // ParseComplete answers come back in this order; the main statement's are pg's own.
        this.parsing.push(name === undefined ? undefined : statement)
        if (name !== undefined && submitted !== undefined) Reflect.set(submitted, name, statement.text)
      }
      connection.bind(
        {
          portal: "",
          statement: name ?? "",
          values: statement.values.map((value) => utils.prepareValue(value))
        },
        true
      )
      connection.execute({ portal: "" }, true)
    }
    if (this.parsing.some((s) => s !== undefined) || (this.mainParsing && this.parsing.length > 0))
      this.listen(connection, parsed, submitted)
    else this.mainParsing = false
    basePrepare(this, [connection])
  }

  /** Records the named statements ahead as prepared once the server confirms each Parse. */
  private listen(connection: pg.Connection, parsed: object | undefined, submitted: object | undefined) {
    const onParsed = () => {
      if (this.parsing.length === 0) {
        this.mainParsing = false
        return
      }
      const statement = this.parsing.shift()
      if (statement?.name === undefined) return
      if (parsed !== undefined) Reflect.set(parsed, statement.name, statement.text)
      if (submitted !== undefined) Reflect.deleteProperty(submitted, statement.name)
    }
    this.connection = connection
    this.listening = onParsed
    connection.on("parseComplete", onParsed)
  }

  private unlisten(forget: boolean) {
    const connection = this.connection
    if (connection !== undefined && this.listening !== undefined)
      connection.off("parseComplete", this.listening)
    this.listening = undefined
    const mainSkipped = this.mainParsing
    this.mainParsing = false
    if (!forget || connection === undefined) return
    // The server skipped what followed an error: those Parses never happened.
    const submitted = statementsRecord(connection, "submittedNamedStatements")
    for (const statement of this.parsing)
      if (statement?.name !== undefined && submitted !== undefined)
        Reflect.deleteProperty(submitted, statement.name)
    this.parsing.length = 0
    const parsed = statementsRecord(connection, "parsedStatements")
    if (mainSkipped && this.name !== undefined && parsed !== undefined)
      Reflect.deleteProperty(parsed, this.name)
  }

  handleRowDescription(message: unknown): void {
    if (this.remaining === 0) baseRowDescription(this, [message])
  }

  handleDataRow(message: unknown): void {
    if (this.remaining === 0) baseDataRow(this, [message])
  }

  handleCommandComplete(message: unknown, connection: unknown): void {
    if (this.remaining > 0) this.remaining--
    else baseCommandComplete(this, [message, connection])
  }

  handleError(error: unknown, connection: unknown): void {
    this.unlisten(true)
    baseError(this, [error, connection])
  }

  handleReadyForQuery(connection: unknown): void {
    this.unlisten(false)
    baseReadyForQuery(this, [connection])
  }
}
