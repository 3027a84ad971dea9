/**
 * Test clock events: one stream per clock (`test_clock-<id>`). A clock is created at a frozen time,
 * advanced (`advancing` when an advance starts, `advanced` when everything due up to its target
 * ran), and deleted. No personal data.
 */
import { Schema } from "effect"
import { defineEvent, type EventOf } from "../../eventstore/EventType.js"

export const TEST_CLOCK_STATUSES = ["ready", "advancing"] as const
export const TestClockStatus = Schema.Literal(...TEST_CLOCK_STATUSES)
export type TestClockStatus = typeof TestClockStatus.Type

export const TestClockCreated = defineEvent("test_clock.created", {
  schema: Schema.Struct({
    clockId: Schema.String,
    name: Schema.NullOr(Schema.String),
    frozenTime: Schema.Date
  })
})

/** An advance to `to` started: the clock is `advancing` until `test_clock.advanced`. */
export const TestClockAdvancing = defineEvent("test_clock.advancing", {
  schema: Schema.Struct({ clockId: Schema.String, to: Schema.Date })
})

/** An advance ended: the clock is `ready` at `frozenTime` (its target, or where a failed advance stopped). */
export const TestClockAdvanced = defineEvent("test_clock.advanced", {
  schema: Schema.Struct({ clockId: Schema.String, frozenTime: Schema.Date })
})

/** Deleted: its pending due work was cancelled in the same transaction. */
export const TestClockDeleted = defineEvent("test_clock.deleted", {
  schema: Schema.Struct({ clockId: Schema.String })
})

export const testClockEventTypes = [
  TestClockCreated,
  TestClockAdvancing,
  TestClockAdvanced,
  TestClockDeleted
] as const

export type TestClockEvent = EventOf<(typeof testClockEventTypes)[number]>
