/**
 * Business time comes from Effect's Clock, never from SQL now(), so tests drive schedules with
 * TestClock and replays are deterministic.
 */
import { Clock, Duration, Effect, Schema } from "effect"

export const now: Effect.Effect<Date> = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

export const nowMillis: Effect.Effect<number> = Clock.currentTimeMillis

/** `now + duration`. */
export const fromNow = (duration: Duration.DurationInput): Effect.Effect<Date> =>
  Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms + Duration.toMillis(duration)))

/** Whether `dueAt` has been reached by the Clock. */
export const isDue = (dueAt: Date): Effect.Effect<boolean> =>
  Effect.map(Clock.currentTimeMillis, (ms) => dueAt.getTime() <= ms)

export const addDuration = (date: Date, duration: Duration.DurationInput): Date =>
  new Date(date.getTime() + Duration.toMillis(duration))

/** ISO 8601 UTC with milliseconds, the wire format of every timestamp. */
export const toIso = (date: Date): string => date.toISOString()

/** A timestamp on the wire: ISO 8601 string ↔ Date. */
export const Timestamp = Schema.Date
