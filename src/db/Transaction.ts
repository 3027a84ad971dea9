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
import { Context, Effect, Exit, FiberRef, Option, Scope } from "effect"

interface AfterCommitRegistry {
  /** Keyed: a later step of the same key replaces the earlier (one wake-up, the newest snapshot). */
  readonly add: (key: string, step: Effect.Effect<void>) => void
  /** A joined writer lost a race (a concurrency conflict): the owner must run the whole transaction again. */
  readonly conflict?: (error: ReportedConflict) => void
  /**
   * Writes may be deferred to the COMMIT (`deferInTransaction`): the owner fails with what its
   * COMMIT reports. Not for an owner that commits after the response was decided (the idempotency
   * middleware), where a write's error must reach the handler that can answer it.
   */
  readonly deferWrites?: boolean
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
  Effect.withFiberRuntime((fiber) => {
    const context = fiber.currentContext
    if (Option.isNone(Context.getOption(context, SqlClient.TransactionConnection)))
      return runLogged(key, step)
    const registry = Context.getOption(context, AfterCommit)
    if (Option.isSome(registry)) registry.value.add(key, step)
    return Effect.void
  })

/**
 * A lost race as a writer reports it (the event store's conflict errors, a read model's key taken):
 * what the owner's retry reads.
 */
export interface ReportedConflict {
  readonly _tag: "WrongExpectedVersion" | "StreamOrderingConflict" | "ReadModelKeyConflict"
  readonly streamId: string
}

/**
 * Tells the owner of the surrounding transaction that a joined writer lost a race (an append found
 * another writer's commit first): the transaction cannot succeed as it is and must run again from
 * the start. For owners that do not see the joined writer's failure themselves (the HTTP
 * idempotency middleware sees a response, not an error). Nothing outside a transaction.
 */
export const reportConflict = (error: ReportedConflict): Effect.Effect<void> =>
  Effect.flatMap(Effect.serviceOption(AfterCommit), (registry) =>
    Option.match(registry, {
      onNone: () => Effect.void,
      onSome: (r) => Effect.sync(() => r.conflict?.(error))
    })
  )

/**
 * Runs `effect` outside the caller's transaction, on connections of its own: for work forked to
 * outlive the request that started it (a forked fiber inherits the caller's context, transaction
 * connection included, which its owner may have ended and released by the time the work runs).
 */
export const detached = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.locallyWith(
    effect,
    FiberRef.currentContext,
    Context.omit(SqlClient.TransactionConnection, AfterCommit)
  )

/** A transaction whose owner ends it explicitly (`openTransaction`). */
export interface OwnedTransaction {
  /** Runs `effect` joined to the transaction (its statements, writers and after-commit work). */
  readonly join: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** The first concurrency conflict a joined writer reported (`reportConflict`), if any. */
  readonly conflict: () => Option.Option<ReportedConflict>
  /**
   * COMMIT, then the connection goes back to the pool and the after-commit work runs (outside the
   * transaction, logged on failure). Fails when the COMMIT did (the outcome is then unknown).
   */
  readonly commit: Effect.Effect<void, SqlError>
  /** ROLLBACK (a failure is logged: the connection is released either way). */
  readonly rollback: Effect.Effect<void>
  /** Whether COMMIT or ROLLBACK already ran. */
  readonly ended: () => boolean
}

/**
 * Opens a transaction on a reserved connection and hands its ending to the caller: for an owner that
 * must COMMIT in the middle of an effect it does not control (the HTTP idempotency middleware
 * commits from the platform's pre-response handler, before the response is sent). Joined work sees
 * it exactly as it sees a `transaction` (same rule: join, register after-commit work). The scope
 * rolls back a transaction still open when it closes and releases the connection.
 */
export const openTransaction: Effect.Effect<OwnedTransaction, SqlError, SqlClient.SqlClient | Scope.Scope> =
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const connectionScope = yield* Scope.make()
    const conn = yield* Scope.extend(sql.reserve, connectionScope).pipe(
      Effect.onError((cause) => Scope.close(connectionScope, Exit.failCause(cause)))
    )
    let ended = false
    const steps = new Map<string, Effect.Effect<void>>()
    let conflict: Option.Option<ReportedConflict> = Option.none()
    const registry: AfterCommitRegistry = {
      add: (key, step) => void steps.set(key, step),
      conflict: (error) => {
        if (Option.isNone(conflict)) conflict = Option.some(error)
      }
    }
    const release = Scope.close(connectionScope, Exit.void)
    const rollback = Effect.suspend(() => {
      if (ended) return Effect.void
      ended = true
      return conn.executeUnprepared("ROLLBACK", [], undefined).pipe(
        Effect.catchAllCause((cause) => Effect.logWarning("ROLLBACK failed", cause)),
        Effect.ensuring(release)
      )
    }).pipe(Effect.uninterruptible)
    yield* Effect.addFinalizer(() => rollback)
    yield* conn.executeUnprepared("BEGIN", [], undefined).pipe(
      Effect.onError(() =>
        Effect.suspend(() => {
          ended = true
          return release
        })
      )
    )
    const commit = Effect.suspend(() => {
      if (ended) return Effect.dieMessage("the transaction already ended")
      ended = true
      return conn.executeUnprepared("COMMIT", [], undefined).pipe(
        Effect.ensuring(release),
        Effect.zipRight(
          // After the commit nothing is joined any more: the steps run on their own.
          detached(Effect.forEach(steps, ([key, step]) => runLogged(key, step), { discard: true }))
        )
      )
    }).pipe(Effect.uninterruptible, Effect.asVoid)
    const join = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      effect.pipe(
        Effect.provideService(SqlClient.TransactionConnection, [conn, 0] as const),
        Effect.provideService(AfterCommit, registry)
      )
    return { join, conflict: () => conflict, commit, rollback, ended: () => ended }
  })

/**
 * `sql.withTransaction` without its span, for when tracing is off (the span would be the no-op span):
 * the same steps — a reserved connection, BEGIN, the effect (interruptible as the caller's) with the
 * connection as the transaction's, COMMIT on success (its failure is the transaction's) or ROLLBACK
 * (its failure a defect, as there), the connection released — in about half the fiber steps.
 * `registry` is provided in the same context, so joined writers find it.
 */
const untracedTransaction = <A, E, R>(
  sql: SqlClient.SqlClient,
  effect: Effect.Effect<A, E, R>,
  registry: AfterCommitRegistry
): Effect.Effect<A, E | SqlError, R> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(Scope.make(), (scope) =>
      Effect.flatMap(Scope.extend(sql.reserve, scope), (conn) =>
        Effect.withFiberRuntime<A, E | SqlError, R>((fiber) => {
          const context = fiber.currentContext.pipe(
            Context.add(SqlClient.TransactionConnection, [conn, 0] as const),
            Context.add(AfterCommit, registry)
          )
          return conn.executeUnprepared("BEGIN", [], undefined).pipe(
            Effect.zipRight(Effect.locally(restore(effect), FiberRef.currentContext, context)),
            Effect.exit,
            Effect.flatMap((exit) =>
              (Exit.isSuccess(exit)
                ? // A failed COMMIT fails the transaction: a write deferred to it (deferInTransaction)
                  // reports its error there, and the caller may handle it (a unique violation).
                  Effect.zipRight(conn.executeUnprepared("COMMIT", [], undefined), exit)
                : Effect.zipRight(Effect.orDie(conn.executeUnprepared("ROLLBACK", [], undefined)), exit)
              ).pipe(Effect.ensuring(Scope.close(scope, exit)))
            )
          )
        })
      )
    )
  )

/**
 * Runs `effect` in the caller's transaction, or opens one and owns it: after its commit it runs what
 * joined writers registered. One attempt: retrying is the owner's caller's choice (kernel's
 * `transact` retries commands that lost a race).
 */
export const transactionWith =
  (sql: SqlClient.SqlClient) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
    Effect.withFiberRuntime((fiber) => {
      if (Context.getOption(fiber.currentContext, SqlClient.TransactionConnection)._tag === "Some")
        return effect
      const steps = new Map<string, Effect.Effect<void>>()
      const registry: AfterCommitRegistry = {
        add: (key, step) => void steps.set(key, step),
        deferWrites: true
      }
      const owned = fiber.getFiberRef(FiberRef.currentTracerEnabled)
        ? sql.withTransaction(Effect.provideService(effect, AfterCommit, registry))
        : untracedTransaction(sql, effect, registry)
      return Effect.flatMap(owned, (value) =>
        steps.size === 0
          ? Effect.succeed(value)
          : Effect.as(
              Effect.forEach(steps, ([key, step]) => runLogged(key, step), { discard: true }),
              value
            )
      )
    })

/** `transactionWith` over the context's SqlClient. */
export const transaction = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | SqlError, R | SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => transactionWith(sql)(effect))
