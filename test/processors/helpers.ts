/** Helpers shared by the processor tests. */
import { Chunk, Clock, Duration, Effect, TestClock, TestContext, TestServices } from "effect"

/** Runs `effect` under a fresh TestClock (layers built with `excludeTestServices` run live). */
export const withTestClock = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.provide(effect, TestContext.TestContext)

/**
 * Re-runs `check` (on the live clock, even under TestClock) until it returns true; dies after
 * `timeout`. For waiting on background fibers, never for measuring speed.
 */
export const eventually = <E, R>(
  check: Effect.Effect<boolean, E, R>,
  options: { readonly timeout?: Duration.DurationInput; readonly message?: string } = {}
): Effect.Effect<void, E, R> =>
  Effect.gen(function* () {
    const deadline = Date.now() + Duration.toMillis(options.timeout ?? "20 seconds")
    while (!(yield* check)) {
      if (Date.now() > deadline)
        return yield* Effect.dieMessage(options.message ?? "condition not reached in time")
      yield* TestServices.provideLive(Effect.sleep("10 millis"))
    }
  })

/**
 * Waits until some fiber sleeps on the TestClock until at least `ahead` past its current time
 * (default: any time ahead): a poller that finished its round and parked. From then on, only a
 * clock move or a wake-up can start its next round — unlike a live pause, which proves nothing on
 * a slow machine. (A clock move runs and removes the sleeps it reaches, so only a sleep begun
 * after the last move counts.)
 */
export const parked = (ahead: Duration.DurationInput = 1) =>
  eventually(
    Effect.gen(function* () {
      const at = yield* Clock.currentTimeMillis
      const sleeps = yield* TestClock.sleeps()
      return Chunk.some(sleeps, (wakeAt) => wakeAt >= at + Math.max(1, Duration.toMillis(ahead)))
    }),
    { message: "no fiber parked on the TestClock" }
  )

/**
 * `eventually` under the TestClock, advancing it a little on each try so that loops polling on the
 * clock make progress (a commit can stay invisible to the gap-safe reader while an older
 * transaction anywhere on the server is still running).
 */
export const nudging = <E, R>(
  check: Effect.Effect<boolean, E, R>,
  step: Duration.DurationInput = "10 millis"
) => eventually(Effect.zipRight(TestClock.adjust(step), check))
