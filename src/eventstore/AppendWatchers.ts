/**
 * In-process observers of this process's appends, told in the appending fiber right after the
 * append's statement succeeded: inside its transaction when it joined one (so what they register
 * with `afterCommit` runs once that commits, before the command answers), at once after a
 * standalone append. What they are for: the read caches (kernel/ReadCache.ts) drop an entry the
 * moment its stream changes, whichever use case, port or process manager appended — no writer has
 * to remember to tell them. Appends of other processes reach them through their own poll.
 */
import { Context, Effect, Layer, type Scope } from "effect"

/** What a watcher sees of an append: its stream and the types of the events it recorded. */
export interface WatchedAppend {
  readonly streamId: string
  readonly events: ReadonlyArray<{ readonly eventType: { readonly type: string } }>
}

export interface AppendWatch {
  /** Appends to streams whose id starts with this (`order-`). */
  readonly streamPrefix: string
  /** Only appends that record one of these event types (any append when absent). */
  readonly eventTypes?: ReadonlySet<string>
  /** The append to `streamId` succeeded. */
  readonly appended: (streamId: string) => Effect.Effect<void>
}

export interface AppendWatchersShape {
  /** Registers `watch` for the life of the scope. */
  readonly watch: (watch: AppendWatch) => Effect.Effect<void, never, Scope.Scope>
  /** The watchers' reactions to `appends` (the event store runs this after each successful append). */
  readonly appended: (appends: ReadonlyArray<WatchedAppend>) => Effect.Effect<void>
}

export class AppendWatchers extends Context.Tag("eventstore/AppendWatchers")<
  AppendWatchers,
  AppendWatchersShape
>() {}

const matches = (watch: AppendWatch, append: WatchedAppend) =>
  append.streamId.startsWith(watch.streamPrefix) &&
  (watch.eventTypes === undefined ||
    append.events.some((e) => watch.eventTypes?.has(e.eventType.type) === true))

export const makeAppendWatchers = Effect.sync((): AppendWatchersShape => {
  const watches = new Set<AppendWatch>()
  return {
    watch: (watch) =>
      Effect.acquireRelease(
        Effect.sync(() => void watches.add(watch)),
        () => Effect.sync(() => void watches.delete(watch))
      ),
    appended: (appends) => {
      // Every append passes here: no fiber step unless a watcher is concerned.
      if (watches.size === 0) return Effect.void
      const reactions: Array<Effect.Effect<void>> = []
      for (const watch of watches) {
        for (const append of appends)
          if (matches(watch, append)) reactions.push(watch.appended(append.streamId))
      }
      return reactions.length === 0 ? Effect.void : Effect.all(reactions, { discard: true })
    }
  }
})

export const AppendWatchersLive = Layer.effect(AppendWatchers, makeAppendWatchers)
