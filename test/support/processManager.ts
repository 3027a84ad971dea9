/**
 * Given/when/then for process managers (Emmett's `WorkflowSpecification` is the model): given the
 * inputs an instance already handled, when one more arrives, then these outputs — or nothing, because
 * it is a duplicate or a stale timeout. Pure: the kernel's `step`, no database.
 *
 *   spec(OrderReminder).given([placed]).when(paid).thenEmits([cancelReminder, receipt])
 */
import { expect } from "vitest"
import type { DomainEvent, EventType } from "../../src/eventstore/EventType.js"
import {
  type CommandMap,
  newInstance,
  type ProcessInput,
  type ProcessInstance,
  type ProcessManager,
  type ProcessOutput,
  type Step,
  step,
  TIMEOUT,
  type TimedOut
} from "../../src/kernel/ProcessManager.js"

let counter = 0

/** An input event of `type` with `data`; a fresh id and 2030-01-01T00:00Z unless given. */
export const inputOf = <T extends string, A, I>(
  type: EventType<T, A, I>,
  data: A,
  options: { readonly id?: string; readonly occurredAt?: Date } = {}
): ProcessInput<DomainEvent<T, A>> => ({
  type: type.type,
  data,
  id: options.id ?? `input-${++counter}`,
  occurredAt: options.occurredAt ?? new Date("2030-01-01T00:00:00Z")
})

/** The input a scheduled timeout turns into when it comes due. */
export const timedOut = <P>(timeout: { readonly id: string; readonly dueAt: Date; readonly payload: P }) =>
  ({ type: TIMEOUT, id: timeout.id, data: timeout.payload, occurredAt: timeout.dueAt }) satisfies TimedOut<P>

/** Folds inputs through `step` (decide + evolve + the once-only bookkeeping), as the runner does. */
export const instanceAfter = <E extends DomainEvent, S, M extends CommandMap, P>(
  pm: ProcessManager<E, S, M, P>,
  inputs: ReadonlyArray<ProcessInput<E> | TimedOut<P>>
): ProcessInstance<S> =>
  inputs.reduce((instance, input) => {
    const result = step(pm, instance, input)
    return result._tag === "Decided" ? result.instance : instance
  }, newInstance(pm))

export const spec = <E extends DomainEvent, S, M extends CommandMap, P>(pm: ProcessManager<E, S, M, P>) => ({
  given: (inputs: ReadonlyArray<ProcessInput<E> | TimedOut<P>>) => ({
    when: (input: ProcessInput<E> | TimedOut<P>) => {
      const before = instanceAfter(pm, inputs)
      const result: Step<S, M, P> = step(pm, before, input)
      const outputs = result._tag === "Decided" ? result.outputs : []
      return {
        /** Exactly these outputs, in order. */
        thenEmits: (expected: ReadonlyArray<ProcessOutput<M, P>>) => {
          expect(result._tag).toBe("Decided")
          expect(outputs).toEqual(expected)
          return result
        },
        /** Decided, but nothing to do. */
        thenEmitsNothing: () => {
          expect(result._tag).toBe("Decided")
          expect(outputs).toEqual([])
        },
        /** Not even decided: handled before (`Duplicate`) or a timeout no longer expected (`Stale`). */
        thenIgnores: (as: "Duplicate" | "Stale") => expect(result._tag).toBe(as),
        /** The state after the input (to check `evolve`). */
        state: (): S => (result._tag === "Decided" ? result.instance.state : before.state)
      }
    }
  })
})
