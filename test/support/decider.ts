/**
 * Given/when/then for pure deciders (Emmett's `DeciderSpecification`, design/FLOWS.md "Tests"):
 *
 *   const customer = deciderSpec(CustomerDecider)
 *   customer.given([created]).when({ _tag: "Tag", tags: ["vip"] }).thenEvents([CustomerTagged.make(…)])
 *   customer.givenState(erased).when(create).thenFails("CustomerAlreadyExists")
 *   customer.when(create).thenState(expected)
 *
 * Synchronous: a decider is pure, so its Effect runs with `Effect.runSyncExit`; a defect is thrown.
 */
import { Cause, Effect, Either, Exit, Option } from "effect"
import { expect } from "vitest"
import type { DomainEvent } from "../../src/eventstore/EventType.js"
import { type Decider, fold } from "../../src/kernel/Decider.js"

/** The `_tag`s of a decider's errors. */
type TagOf<Err> = Err extends { readonly _tag: infer T extends string } ? T : never

/** What a failure must be: its `_tag`, an object it matches (`toMatchObject`), or a predicate. */
export type ExpectedError<Err> =
  | TagOf<Err>
  | ({ readonly _tag: TagOf<Err> } & Readonly<Record<string, unknown>>)
  | ((error: Err) => boolean)

const label = (error: unknown) =>
  typeof error === "object" && error !== null && "_tag" in error ? String(error._tag) : String(error)

/** One command decided against a state: its outcome, read and asserted. */
export class Decision<C, E extends DomainEvent, S, Err> {
  /** The events, or the domain error. */
  readonly result: Either.Either<ReadonlyArray<E>, Err>

  constructor(
    private readonly decider: Decider<C, E, S, Err>,
    /** The state the command was decided against. */
    readonly before: S,
    readonly command: C
  ) {
    const exit = Effect.runSyncExit(decider.decide(command, before))
    if (Exit.isSuccess(exit)) this.result = Either.right(exit.value)
    else {
      const failure = Cause.failureOption(exit.cause)
      if (Option.isNone(failure)) throw Cause.squash(exit.cause)
      this.result = Either.left(failure.value)
    }
  }

  /** The decided events; fails the test when the command failed. */
  get events(): ReadonlyArray<E> {
    if (Either.isLeft(this.result)) return expect.fail(`the command failed with ${label(this.result.left)}`)
    return this.result.right
  }

  /** The state after the decided events; fails the test when the command failed. */
  get state(): S {
    return fold(this.decider, this.events, this.before)
  }

  /** The domain error; fails the test when the command succeeded. */
  get error(): Err {
    if (Either.isRight(this.result)) return expect.fail("the command succeeded, a failure was expected")
    return this.result.left
  }

  /** Then exactly these events (`toEqual`); not `then`, which would make a decision a thenable. */
  thenEvents(expected: ReadonlyArray<E>): this {
    expect(this.events).toEqual(expected)
    return this
  }

  /** Then no event: the command changes nothing (an idempotent repeat, a late outcome). */
  thenNothing(): this {
    return this.thenEvents([])
  }

  /** Then this state after the events (`toEqual`). */
  thenState(expected: S): this {
    expect(this.state).toEqual(expected)
    return this
  }

  /** Then a domain error: any, or the expected one. Returns the error for further checks. */
  thenFails(expected?: ExpectedError<Err>): Err {
    const error = this.error
    if (typeof expected === "string") expect(label(error)).toBe(expected)
    else if (typeof expected === "function") expect(expected(error), label(error)).toBe(true)
    else if (expected !== undefined) expect(error).toMatchObject(expected)
    return error
  }
}

export interface DeciderSpec<C, E extends DomainEvent, S, Err> {
  /** Given these events (folded from the initial state). */
  readonly given: (events: ReadonlyArray<E>) => { readonly when: (command: C) => Decision<C, E, S, Err> }
  /** Given this state (one built by earlier steps). */
  readonly givenState: (state: S) => { readonly when: (command: C) => Decision<C, E, S, Err> }
  /** Given nothing: the initial state. */
  readonly when: (command: C) => Decision<C, E, S, Err>
  /** The state after each command in turn; a failing command fails the test. */
  readonly run: (state: S, ...commands: ReadonlyArray<C>) => S
}

export const deciderSpec = <C, E extends DomainEvent, S, Err>(
  decider: Decider<C, E, S, Err>
): DeciderSpec<C, E, S, Err> => {
  const givenState = (state: S) => ({ when: (command: C) => new Decision(decider, state, command) })
  return {
    given: (events) => givenState(fold(decider, events)),
    givenState,
    when: (command) => new Decision(decider, decider.initialState, command),
    run: (state, ...commands) => commands.reduce((s, command) => givenState(s).when(command).state, state)
  }
}
