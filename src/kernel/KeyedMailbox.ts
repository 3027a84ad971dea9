/**
 * Serializes work per key in this process (one "mailbox" per aggregate stream), so commands for a
 * hot aggregate queue up instead of racing and burning optimistic-concurrency retries. Entries are
 * reference-counted and disappear when idle, so memory stays bounded by the keys in flight.
 */
import { Effect } from "effect"

export interface KeyedMailbox {
  readonly run: <A, E, R>(key: string, effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** Keys with work queued or running (for tests and metrics). */
  readonly size: () => number
}

export const makeKeyedMailbox = (): KeyedMailbox => {
  const entries = new Map<string, { readonly semaphore: Effect.Semaphore; users: number }>()
  return {
    run: (key, effect) =>
      Effect.acquireUseRelease(
        Effect.sync(() => {
          let entry = entries.get(key)
          if (!entry) {
            entry = { semaphore: Effect.unsafeMakeSemaphore(1), users: 0 }
            entries.set(key, entry)
          }
          entry.users++
          return entry
        }),
        (entry) => entry.semaphore.withPermits(1)(effect),
        (entry) =>
          Effect.sync(() => {
            entry.users--
            if (entry.users === 0) entries.delete(key)
          })
      ),
    size: () => entries.size
  }
}
