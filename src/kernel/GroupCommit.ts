/**
 * Group commit: callers hand in one item each and one writer takes everything waiting (up to `max`)
 * into ONE `write` — one transaction for all of them — then answers each caller with its own result.
 * A lone item is written at once, as a group of one; under load, the items that arrive while a write
 * runs go together in the next. For hot single writes that would otherwise queue on the same rows one
 * commit at a time (usage records of one subscription, on its rollup rows).
 *
 * - A caller is answered only once its group's write finished: committed, read-your-writes.
 * - One writer: groups are written one after the other, never two at once contending for the rows
 *   they share.
 * - When a group's write fails (an error or a defect), its items are written again one by one, so an
 *   item that fails fails alone and the others are written as if they had come alone.
 * - Inside a caller's transaction nothing is grouped: the item is written in that transaction, as
 *   every write joins its caller's (db/Transaction.ts). Waiting on a group's transaction while
 *   holding a connection could starve the pool (embedded PostgreSQL has one).
 * - The writer stopping mid-write (the service shutting down) interrupts the callers it was writing
 *   for; callers still waiting are interrupted with their own requests.
 */
import { Chunk, Deferred, Effect, Exit, Queue, type Scope } from "effect"
import { withTransactionState } from "../db/Sql.js"

export interface GroupCommit<I, O, E> {
  /** Writes `item` with whatever else is waiting; its own result. */
  readonly submit: (item: I) => Effect.Effect<O, E>
}

export interface GroupCommitOptions<I, O, E, R> {
  /** Items per write at most. */
  readonly max: number
  /** Writes a group; one result per item, in order. */
  readonly write: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E, R>
}

interface Waiting<I, O, E> {
  readonly item: I
  readonly done: Deferred.Deferred<O, E>
}

const resultAt = <O>(results: ReadonlyArray<O>, index: number): Exit.Exit<O> => {
  const result = results[index]
  return result === undefined
    ? Exit.die(new Error(`a group write answered ${results.length} results for more items`))
    : Exit.succeed(result)
}

/** A group commit whose writer runs until the scope closes. */
export const makeGroupCommit = <I, O, E, R>(
  options: GroupCommitOptions<I, O, E, R>
): Effect.Effect<GroupCommit<I, O, E>, never, R | Scope.Scope> =>
  Effect.gen(function* () {
    const waiting = yield* Queue.unbounded<Waiting<I, O, E>>()
    const answer = (group: ReadonlyArray<Waiting<I, O, E>>, exit: Exit.Exit<ReadonlyArray<O>, E>) =>
      Effect.forEach(
        group,
        (w, i) =>
          Deferred.done(
            w.done,
            Exit.flatMap(exit, (results) => resultAt(results, i))
          ),
        {
          discard: true
        }
      )
    // A failed group of several is written again as groups of one.
    const writeGroup = (group: ReadonlyArray<Waiting<I, O, E>>): Effect.Effect<void, never, R> =>
      Effect.flatMap(Effect.exit(options.write(group.map((w) => w.item))), (exit) =>
        Exit.isFailure(exit) && group.length > 1 && !Exit.isInterrupted(exit)
          ? Effect.forEach(group, (w) => writeGroup([w]), { discard: true })
          : answer(group, exit)
      ).pipe(
        Effect.onInterrupt(() => Effect.forEach(group, (w) => Deferred.interrupt(w.done), { discard: true }))
      )
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.flatMap(Queue.takeBetween(waiting, 1, options.max), (group) =>
          writeGroup(Chunk.toReadonlyArray(group))
        )
      )
    )
    const queued = (item: I) =>
      Effect.flatMap(Deferred.make<O, E>(), (done) =>
        Effect.zipRight(Queue.offer(waiting, { item, done }), Deferred.await(done))
      )
    const context = yield* Effect.context<R>()
    const joined = (item: I) =>
      Effect.flatMap(Effect.provide(options.write([item]), context), (results) => resultAt(results, 0))
    return {
      submit: (item) => withTransactionState((inCaller) => (inCaller ? joined(item) : queued(item)))
    }
  })
