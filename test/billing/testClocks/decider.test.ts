/**
 * The test clock decider, pure: created `ready`; an advance only forward, one at a time (a stalled
 * one can be taken over), finishing `ready` at its target and never moving time backwards; deleted
 * for good (not while advancing, unless taken over).
 */
import { describe, expect, it } from "@effect/vitest"
import * as fc from "fast-check"
import { TestClockDecider } from "../../../src/billing/testClocks/decider.js"
import {
  TestClockAdvanced,
  TestClockAdvancing,
  TestClockCreated,
  TestClockDeleted
} from "../../../src/billing/testClocks/events.js"
import { fold } from "../../../src/kernel/Decider.js"
import { deciderSpec } from "../../support/decider.js"

const clock = deciderSpec(TestClockDecider)
const ID = "clock_01jd4x8m6ffq2b3n5r7t9v1w3y"
const T0 = new Date("2030-01-01T00:00:00Z")
const T1 = new Date("2030-02-01T00:00:00Z")
const T2 = new Date("2030-03-01T00:00:00Z")

const created = TestClockCreated.make({ clockId: ID, name: "Q1", frozenTime: T0 })
const advancing = (to: Date) => TestClockAdvancing.make({ clockId: ID, to })

describe("test clock decider", () => {
  it("creates a ready clock at its frozen time, once", () => {
    clock.when({ _tag: "Create", clockId: ID, name: "Q1", frozenTime: T0 }).thenEvents([created])
    const state = fold(TestClockDecider, [created])
    expect(state).toMatchObject({ exists: true, status: "ready", frozenTime: T0, name: "Q1" })
    clock
      .given([created])
      .when({ _tag: "Create", clockId: ID, name: null, frozenTime: T1 })
      .thenFails("TestClockAlreadyExists")
  })

  it("advances forward only: the same or an earlier time is refused", () => {
    clock
      .given([created])
      .when({ _tag: "StartAdvance", to: T1, takeOver: false })
      .thenEvents([advancing(T1)])
    clock.given([created]).when({ _tag: "StartAdvance", to: T0, takeOver: false }).thenFails({
      _tag: "FrozenTimeNotLater",
      frozenTime: T0
    })
    clock
      .given([created])
      .when({ _tag: "StartAdvance", to: new Date(T0.getTime() - 1), takeOver: false })
      .thenFails("FrozenTimeNotLater")
  })

  it("one advance at a time, unless the running one is taken over", () => {
    const running = [created, advancing(T1)]
    expect(fold(TestClockDecider, running)).toMatchObject({ status: "advancing", advancingTo: T1 })
    clock.given(running).when({ _tag: "StartAdvance", to: T2, takeOver: false }).thenFails("TestClockBusy")
    clock
      .given(running)
      .when({ _tag: "StartAdvance", to: T2, takeOver: true })
      .thenEvents([advancing(T2)])
    clock.given(running).when({ _tag: "Delete", takeOver: false }).thenFails("TestClockBusy")
    clock
      .given(running)
      .when({ _tag: "Delete", takeOver: true })
      .thenEvents([TestClockDeleted.make({ clockId: ID })])
  })

  it("finishes ready at the time reached, never backwards; a second finish is a no-op", () => {
    const running = [created, advancing(T2)]
    clock
      .given(running)
      .when({ _tag: "FinishAdvance", frozenTime: T2 })
      .thenEvents([TestClockAdvanced.make({ clockId: ID, frozenTime: T2 })])
    // A failed advance that got nowhere leaves the clock where it was.
    clock
      .given(running)
      .when({ _tag: "FinishAdvance", frozenTime: new Date(0) })
      .thenEvents([TestClockAdvanced.make({ clockId: ID, frozenTime: T0 })])
    const done = [...running, TestClockAdvanced.make({ clockId: ID, frozenTime: T2 })]
    expect(fold(TestClockDecider, done)).toMatchObject({ status: "ready", frozenTime: T2, advancingTo: null })
    clock.given(done).when({ _tag: "FinishAdvance", frozenTime: T2 }).thenNothing()
  })

  it("deleted for good: every command after it is TestClockNotFound", () => {
    const deleted = [created, TestClockDeleted.make({ clockId: ID })]
    clock
      .given(deleted)
      .when({ _tag: "StartAdvance", to: T1, takeOver: false })
      .thenFails("TestClockNotFound")
    clock.given(deleted).when({ _tag: "Delete", takeOver: false }).thenFails("TestClockNotFound")
    clock.given(deleted).when({ _tag: "FinishAdvance", frozenTime: T1 }).thenFails("TestClockNotFound")
    clock.when({ _tag: "Delete", takeOver: false }).thenFails("TestClockNotFound")
  })

  it("property: whatever the commands, the frozen time never goes backwards", () => {
    const command = fc.oneof(
      fc
        .record({ days: fc.integer({ min: -30, max: 60 }), takeOver: fc.boolean() })
        .map(({ days, takeOver }) => ({
          _tag: "StartAdvance" as const,
          to: new Date(T0.getTime() + days * 86_400_000),
          takeOver
        })),
      fc.integer({ min: -30, max: 60 }).map((days) => ({
        _tag: "FinishAdvance" as const,
        frozenTime: new Date(T0.getTime() + days * 86_400_000)
      }))
    )
    fc.assert(
      fc.property(fc.array(command, { maxLength: 30 }), (commands) => {
        let state = fold(TestClockDecider, [created])
        for (const c of commands) {
          const before = state.frozenTime.getTime()
          const decision = clock.givenState(state).when(c)
          if (decision.result._tag === "Right") state = decision.state
          expect(state.frozenTime.getTime()).toBeGreaterThanOrEqual(before)
        }
      }),
      { seed: 20_261_126, numRuns: 200 }
    )
  })
})
