/** Small SQL fragments shared by projections and queries. */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"

/** Whether the current fiber runs inside a caller's transaction (statements then join it). */
export const inTransaction: Effect.Effect<boolean> = Effect.map(
  Effect.serviceOption(SqlClient.TransactionConnection),
  Option.isSome
)

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
