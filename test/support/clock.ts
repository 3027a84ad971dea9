/**
 * Time a live server runs on: the real clock shifted by an offset that tests move forward, so
 * "24 hours later" or "after the bucket refilled" needs no waiting and no TestClock inside a server.
 */
import { Clock, Duration, Effect } from "effect"

/** `startOffsetMs` may be negative: a clock running in the past (e.g. to mint an expired token). */
export const makeShiftedClock = (startOffsetMs = 0) => {
  const live = Clock.make()
  let offsetMs = startOffsetMs
  const clock: Clock.Clock = {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: () => live.unsafeCurrentTimeMillis() + offsetMs,
    currentTimeMillis: Effect.sync(() => live.unsafeCurrentTimeMillis() + offsetMs),
    unsafeCurrentTimeNanos: () => live.unsafeCurrentTimeNanos() + BigInt(offsetMs) * 1_000_000n,
    currentTimeNanos: Effect.sync(() => live.unsafeCurrentTimeNanos() + BigInt(offsetMs) * 1_000_000n),
    sleep: (duration) => live.sleep(duration)
  }
  const advance = (duration: Duration.DurationInput) =>
    Effect.sync(() => {
      offsetMs += Duration.toMillis(duration)
    })
  return { clock, advance }
}
