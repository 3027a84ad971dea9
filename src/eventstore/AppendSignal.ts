/**
 * In-process wake-up: after a local append commits, local processors are woken at once instead of
 * waiting for their next poll. Appends in other processes are picked up by polling. No NOTIFY inside
 * append transactions (it serializes all commits cluster-wide).
 */
import { Context, Effect, Layer, Queue } from "effect"
import { afterCommit } from "../db/Transaction.js"

export interface AppendSignalShape {
  /** Wake every waiting listener (cheap; coalesces). */
  readonly notify: Effect.Effect<void>
  /** `notify` once the surrounding transaction committed (at once outside one): never before. */
  readonly notifyAfterCommit: Effect.Effect<void>
  /** A listener: `take` resolves after the next notify (or at once if one happened since). */
  readonly listen: Effect.Effect<Queue.Dequeue<void>, never, import("effect/Scope").Scope>
}

export class AppendSignal extends Context.Tag("AppendSignal")<AppendSignal, AppendSignalShape>() {}

let signals = 0

export const makeAppendSignal = Effect.sync(() => {
  // Its own after-commit key: two signals (the event store's, due work's) are two wake-ups.
  const key = `append-signal-${++signals}`
  const listeners = new Set<Queue.Queue<void>>()
  const notify = Effect.suspend(() =>
    Effect.forEach(listeners, (q) => Queue.offer(q, undefined), { discard: true })
  )
  const signal: AppendSignalShape = {
    notify,
    notifyAfterCommit: afterCommit(key, notify),
    listen: Effect.acquireRelease(
      Effect.tap(Queue.sliding<void>(1), (q) => Effect.sync(() => listeners.add(q))),
      (q) =>
        Effect.zipRight(
          Effect.sync(() => listeners.delete(q)),
          Queue.shutdown(q)
        )
    )
  }
  return signal
})

export const AppendSignalLive = Layer.effect(AppendSignal, makeAppendSignal)
