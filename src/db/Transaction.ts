/**
 * The one transaction rule. Every entry point that writes (a command, a use case, an append, a
 * due-work outcome, a subscription batch) JOINS the caller's transaction when there is one: no
 * savepoint, no retry, nothing run before the caller commits. Only the code that OPENED the
 * transaction owns it: it retries the whole transaction when asked to, and once it committed it runs
 * the after-commit work the joined writers registered (waking local processors, writing snapshots).
 * A failed after-commit step is logged, never the caller's failure: the commit already happened.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Option } from "effect"
import { inTransaction } from "./Sql.js"

interface AfterCommitRegistry {
  /** Keyed: a later step of the same key replaces the earlier (one wake-up, the newest snapshot). */
  readonly add: (key: string, step: Effect.Effect<void>) => void
}

/** Present inside a transaction opened by `transaction`: where joined writers leave after-commit work. */
export class AfterCommit extends Context.Tag("db/AfterCommit")<AfterCommit, AfterCommitRegistry>() {}

const runLogged = (key: string, step: Effect.Effect<void>) =>
  Effect.catchAllCause(step, (cause) => Effect.logWarning(`after-commit step ${key} failed`, cause))

/**
 * Runs `step` once the surrounding transaction committed, or at once when there is none. Inside a
 * transaction that `transaction` did not open (a bare `sql.withTransaction`) the step is dropped:
 * every such step is an optimization (a wake-up, a snapshot) that the next poll or write makes up for.
 */
export const afterCommit = (key: string, step: Effect.Effect<void>): Effect.Effect<void> =>
  Effect.flatMap(inTransaction, (joined) =>
    joined
      ? Effect.flatMap(Effect.serviceOption(AfterCommit), (registry) =>
          Option.match(registry, {
            onNone: () => Effect.void,
            onSome: (r) => Effect.sync(() => r.add(key, step))
          })
        )
      : runLogged(key, step)
  )

/**
 * Runs `effect` in the caller's transaction, or opens one and owns it: after its commit it runs what
 * joined writers registered. One attempt: retrying is the owner's caller's choice (kernel's
 * `transact` retries commands that lost a race).
 */
export const transactionWith =
  (sql: SqlClient.SqlClient) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
    Effect.flatMap(inTransaction, (joined) =>
      joined
        ? effect
        : Effect.suspend(() => {
            const steps = new Map<string, Effect.Effect<void>>()
            const registry: AfterCommitRegistry = { add: (key, step) => void steps.set(key, step) }
            return Effect.flatMap(
              sql.withTransaction(Effect.provideService(effect, AfterCommit, registry)),
              (value) =>
                Effect.as(
                  Effect.forEach(steps, ([key, step]) => runLogged(key, step), { discard: true }),
                  value
                )
            )
          })
    )

/** `transactionWith` over the context's SqlClient. */
export const transaction = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | SqlError, R | SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => transactionWith(sql)(effect))
