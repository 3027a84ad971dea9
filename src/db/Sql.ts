/** Small SQL fragments shared by projections and queries. */
import { SqlClient, Statement } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, FiberRef, Option } from "effect"
import { DEFERRED_MARK } from "./PipelinedStatements.js"
import { AfterCommit } from "./Transaction.js"

/** Whether the current fiber runs inside a caller's transaction (statements then join it). */
export const inTransaction: Effect.Effect<boolean> = Effect.map(
  Effect.serviceOption(SqlClient.TransactionConnection),
  Option.isSome
)

/**
 * `f(whether the current fiber runs inside a caller's transaction)`: `inTransaction` in one fiber
 * step instead of three, for the command path.
 */
export const withTransactionState = <A, E, R>(
  f: (joined: boolean) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) =>
    f(Option.isSome(Context.getOption(fiber.currentContext, SqlClient.TransactionConnection)))
  )

/**
 * `Effect.provideService(effect, SqlClient, sql)`, except when the fiber's services already hold
 * this very client — a use case or the command runner giving its statements the client they would
 * find anyway. Providing it again copied the fiber's whole service map and compared it, entry by
 * entry, on the way in and on the way out (a purchase did so a dozen times).
 */
export const provideSqlClient =
  (sql: SqlClient.SqlClient) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, Exclude<R, SqlClient.SqlClient>> =>
    Effect.withFiberRuntime((fiber) => {
      const current = Context.getOption(fiber.currentContext, SqlClient.SqlClient)
      return Option.isSome(current) && current.value === sql
        ? // Checked just above: the one service this drops from R is in the fiber's context.
          (effect as Effect.Effect<A, E, Exclude<R, SqlClient.SqlClient>>)
        : Effect.provideService(effect, SqlClient.SqlClient, sql)
    })

/** A `text[]` value from a JS array, passed as one JSON parameter. */
export const textArray = (sql: SqlClient.SqlClient, values: ReadonlyArray<string>) =>
  sql`ARRAY(SELECT jsonb_array_elements_text(${JSON.stringify(values)}::jsonb))`

/** Whether a failed statement violated a unique constraint (PostgreSQL error 23505). */
export const isUniqueViolation = (error: unknown): boolean => {
  let current: unknown = error
  for (let depth = 0; depth < 4 && typeof current === "object" && current !== null; depth++) {
    if ("code" in current && current.code === "23505") return true
    current = "cause" in current ? current.cause : undefined
  }
  return false
}

/** `{ [column]: value }` for `sql.update`, or `{}` when the value is undefined (a field left unchanged). */
export const optionalColumn = <A>(column: string, value: A | undefined): Record<string, A> =>
  value === undefined ? {} : { [column]: value }

/**
 * Runs `statement` on the current transaction's connection directly, skipping the client's
 * per-statement machinery (a `sql.execute` span, a scope, the connection lookup: ~60 fiber steps, the
 * bulk of a statement's node CPU) when nothing could observe the difference: inside a transaction,
 * with tracing off (the span would be the no-op span), no statement transformer and no row transform
 * on the statement (our client has none: db/Database.ts). Otherwise it runs as the client runs it.
 * Same SQL, parameters, rows and errors either way.
 */
export const executeInTransaction = <A extends object>(
  statement: Statement.Statement<A>
): Effect.Effect<ReadonlyArray<A>, SqlError> => onTransactionConnection(statement, false)

/**
 * `executeInTransaction` for a write whose rows nobody reads: on a PostgreSQL server it travels
 * ahead of the transaction's next statement or COMMIT, in that round trip (PipelinedStatements.ts),
 * and answers no rows at once. Its error, if any, becomes the error of that later statement or of
 * the COMMIT (`transaction` fails with it): only for writes whose failure fails the whole
 * transaction anyway, never one whose error the caller handles at the statement. Elsewhere (outside
 * a transaction, in one whose owner does not take deferred writes, tracing on, embedded PGlite) it
 * runs where it stands.
 */
export const deferInTransaction = (statement: Statement.Statement<object>): Effect.Effect<void, SqlError> =>
  Effect.asVoid(onTransactionConnection(statement, true))

const onTransactionConnection = <A extends object>(
  statement: Statement.Statement<A>,
  defer: boolean
): Effect.Effect<ReadonlyArray<A>, SqlError> =>
  Effect.withFiberRuntime((fiber) => {
    const connection = Context.getOption(fiber.currentContext, SqlClient.TransactionConnection)
    if (
      Option.isNone(connection) ||
      fiber.getFiberRef(FiberRef.currentTracerEnabled) ||
      Option.isSome(fiber.getFiberRef(Statement.currentTransformer)) ||
      !("transformRows" in statement && statement.transformRows === undefined)
    ) {
      return statement
    }
    const [text, params] = statement.compile()
    const deferred =
      defer &&
      Context.getOption(fiber.currentContext, AfterCommit).pipe(Option.exists((r) => r.deferWrites === true))
    return connection.value[0].execute(deferred ? DEFERRED_MARK + text : text, params, undefined)
  })
