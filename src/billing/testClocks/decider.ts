/**
 * The test clock aggregate (Stripe's test clocks): created `ready` at a frozen time; an advance moves
 * it to `advancing` (one at a time: another advance meanwhile is refused, unless the running one
 * stalled and is taken over) and back to `ready` at its target; deleted for good. Time only moves
 * forward. Pure: tested without a database (test/billing/testClocks/decider.test.ts).
 */
import { Data, Effect } from "effect"
import { defineDecider, type Recorded } from "../../kernel/Decider.js"
import {
  TestClockAdvanced,
  TestClockAdvancing,
  TestClockCreated,
  TestClockDeleted,
  type TestClockEvent,
  type TestClockStatus,
  testClockEventTypes
} from "./events.js"

export const testClockStream = (clockId: string) => `test_clock-${clockId}`

export class TestClockNotFound extends Data.TaggedError("TestClockNotFound")<{ readonly clockId: string }> {}
export class TestClockAlreadyExists extends Data.TaggedError("TestClockAlreadyExists")<{
  readonly clockId: string
}> {}
/** Another advance is running: 409 `test_clock_advancing`. */
export class TestClockBusy extends Data.TaggedError("TestClockBusy")<{ readonly clockId: string }> {}
/** An advance must move the clock forward: 400 on `frozenTime`. */
export class FrozenTimeNotLater extends Data.TaggedError("FrozenTimeNotLater")<{
  readonly clockId: string
  readonly frozenTime: Date
}> {}

export type TestClockError = TestClockNotFound | TestClockAlreadyExists | TestClockBusy | FrozenTimeNotLater

export interface TestClockState {
  readonly exists: boolean
  readonly deleted: boolean
  readonly clockId: string
  readonly name: string | null
  readonly frozenTime: Date
  readonly status: TestClockStatus
  /** The running advance's target. */
  readonly advancingTo: Date | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

export const initialTestClockState: TestClockState = {
  exists: false,
  deleted: false,
  clockId: "",
  name: null,
  frozenTime: new Date(0),
  status: "ready",
  advancingTo: null,
  createdAt: new Date(0),
  updatedAt: new Date(0)
}

export type TestClockCommand =
  | {
      readonly _tag: "Create"
      readonly clockId: string
      readonly name: string | null
      readonly frozenTime: Date
    }
  /** `takeOver`: the running advance stalled (no step for a while): this one replaces it. */
  | { readonly _tag: "StartAdvance"; readonly to: Date; readonly takeOver: boolean }
  | { readonly _tag: "FinishAdvance"; readonly frozenTime: Date }
  | { readonly _tag: "Delete"; readonly takeOver: boolean }

const evolve = (state: TestClockState, event: Recorded<TestClockEvent> | TestClockEvent): TestClockState => {
  const at = "recordedAt" in event ? event.recordedAt : state.updatedAt
  switch (event.type) {
    case "test_clock.created":
      return {
        ...initialTestClockState,
        exists: true,
        clockId: event.data.clockId,
        name: event.data.name,
        frozenTime: event.data.frozenTime,
        createdAt: at,
        updatedAt: at
      }
    case "test_clock.advancing":
      return { ...state, status: "advancing", advancingTo: event.data.to, updatedAt: at }
    case "test_clock.advanced":
      return {
        ...state,
        status: "ready",
        advancingTo: null,
        frozenTime: event.data.frozenTime,
        updatedAt: at
      }
    case "test_clock.deleted":
      return { ...state, deleted: true, status: "ready", advancingTo: null, updatedAt: at }
  }
}

type Decision = Effect.Effect<ReadonlyArray<TestClockEvent>, TestClockError>

const decide = (command: TestClockCommand, state: TestClockState): Decision => {
  if (command._tag === "Create") {
    if (state.exists) return Effect.fail(new TestClockAlreadyExists({ clockId: command.clockId }))
    const { _tag, ...data } = command
    return Effect.succeed([TestClockCreated.make(data)])
  }
  if (!state.exists || state.deleted) return Effect.fail(new TestClockNotFound({ clockId: state.clockId }))
  const clockId = state.clockId
  switch (command._tag) {
    case "StartAdvance":
      if (state.status === "advancing" && !command.takeOver)
        return Effect.fail(new TestClockBusy({ clockId }))
      if (command.to.getTime() <= state.frozenTime.getTime())
        return Effect.fail(new FrozenTimeNotLater({ clockId, frozenTime: state.frozenTime }))
      return Effect.succeed([TestClockAdvancing.make({ clockId, to: command.to })])
    case "FinishAdvance":
      // Only the running advance finishes (a second finish, or one after a take-over's, is a no-op).
      if (state.status !== "advancing") return Effect.succeed([])
      return Effect.succeed([
        TestClockAdvanced.make({
          clockId,
          // Never backwards: an advance that stopped early still leaves the clock where it got to.
          frozenTime: new Date(Math.max(command.frozenTime.getTime(), state.frozenTime.getTime()))
        })
      ])
    case "Delete":
      if (state.status === "advancing" && !command.takeOver)
        return Effect.fail(new TestClockBusy({ clockId }))
      return Effect.succeed([TestClockDeleted.make({ clockId })])
  }
}

export const TestClockDecider = defineDecider({
  streamType: "test_clock",
  events: testClockEventTypes,
  initialState: initialTestClockState,
  evolve,
  decide
})
