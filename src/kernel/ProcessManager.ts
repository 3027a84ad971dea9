/**
 * A process manager (a flow between contexts) is a decider over the events it listens to: it
 * correlates each input to an instance (`checkout-<id>`), folds the instance's inputs into its state
 * (`evolve`) and decides what to do about a new input (`decide`). Its outputs are data, never effects:
 * commands addressed to other contexts' ports and timeouts (due work that comes back as an input).
 * Every output carries an id derived from the input that caused it, so a redelivered input — or a
 * restarted process — asks for the very same thing again and the target treats it as a duplicate.
 *
 * Pure: no database. The runner (`processors/ProcessManagerRunner.ts`) keeps each instance's handled
 * inputs in a stream of its own and executes the outputs in the same transaction as the checkpoint.
 * Modelled on Emmett's workflows (`emmett/src/workflows/workflow.ts`).
 */
import { type Either, Schema } from "effect"
import type { ParseError } from "effect/ParseResult"
import type { AnyEventType, DomainEvent, EventOf } from "../eventstore/EventType.js"
import { derivedUuid } from "./Ids.js"

/** An input as the process manager sees it: a decoded event with the id and time of its occurrence. */
export type ProcessInput<E extends DomainEvent = DomainEvent> = E & {
  /** The triggering message's id: the event id, the public `evt_` id, or the timeout's id. */
  readonly id: string
  readonly occurredAt: Date
}

/** The type of the input a scheduled timeout turns into when it comes due. */
export const TIMEOUT = "timeout"

/** A timeout come due: `id` is the timeout's id, `occurredAt` its due time, `data` its payload. */
export type TimedOut<P> = ProcessInput<DomainEvent<typeof TIMEOUT, P>>

export const isTimedOut = <E extends DomainEvent, P>(
  input: ProcessInput<E> | TimedOut<P>
): input is TimedOut<P> => input.type === TIMEOUT

/** What a process manager's commands carry, by kind: `{ "notifications.request": RequestInput }`. */
export type CommandMap = object

/** The command kinds of a map (`timeout` and `cancel-timeout` are reserved for timeouts). */
export type CommandKind<M extends CommandMap> = Exclude<keyof M & string, typeof TIMEOUT | "cancel-timeout">

/** A command for another context's port: executed once per id (its idempotency key). */
export interface Command<M extends CommandMap, K extends keyof M & string = CommandKind<M>> {
  readonly kind: K
  readonly id: string
  readonly input: M[K]
}

/** Any of the map's commands, as a discriminated union on `kind`. */
export type CommandOf<M extends CommandMap> = {
  readonly [K in CommandKind<M>]: Command<M, K>
}[CommandKind<M>]

/** Comes back to the same process manager (as a `TimedOut` input) at `dueAt`, unless cancelled first. */
export interface ScheduleTimeout<P> {
  readonly kind: typeof TIMEOUT
  readonly id: string
  readonly dueAt: Date
  readonly payload: P
}

export interface CancelTimeout {
  readonly kind: "cancel-timeout"
  readonly id: string
}

export type ProcessOutput<M extends CommandMap, P> = CommandOf<M> | ScheduleTimeout<P> | CancelTimeout

export const isScheduleTimeout = <M extends CommandMap, P>(
  output: ProcessOutput<M, P>
): output is ScheduleTimeout<P> => output.kind === TIMEOUT

export const isCancelTimeout = <M extends CommandMap, P>(
  output: ProcessOutput<M, P>
): output is CancelTimeout => output.kind === "cancel-timeout"

export interface ProcessManager<E extends DomainEvent, S, M extends CommandMap, P> {
  readonly name: string
  /** The event types it listens to (decoding and subscription filter). */
  readonly events: ReadonlyArray<AnyEventType>
  /** Narrows a decoded event to the inputs' union. */
  readonly isInput: (event: DomainEvent) => event is E
  /** Its timeouts' payload codec (stored with the due work); `undefined` when it schedules none. */
  readonly timeout: PayloadCodec<P> | undefined
  /**
   * `"stream"` (default): each instance's handled inputs are kept in a stream of their own, so state
   * survives between inputs, a handled input is recognised by its id and a cancelled timeout is known
   * to be stale. `"none"`: every input is decided on `initialState` (a stateless reaction); once-only
   * then rests on the outputs' derived ids alone. A stream keeps the inputs as decoded, so inputs of a
   * `"stream"` process manager must not carry personal data (it would escape crypto-shredding).
   */
  readonly persistence: "stream" | "none"
  /** The instance an input belongs to (e.g. `checkout-<id>`); `undefined` ignores the input. */
  readonly correlate: (input: ProcessInput<E>) => string | undefined
  readonly initialState: S
  readonly evolve: (state: S, input: ProcessInput<E> | TimedOut<P>) => S
  readonly decide: (input: ProcessInput<E> | TimedOut<P>, state: S) => ReadonlyArray<ProcessOutput<M, P>>
}

/** A timeout payload as JSON and back (the due-work row keeps it). */
export interface PayloadCodec<P> {
  readonly encode: (payload: P) => Either.Either<unknown, ParseError>
  readonly decode: (json: unknown) => Either.Either<P, ParseError>
}

/**
 * Defines a process manager emitting the commands of `M` (by kind):
 * `defineProcessManager<Commands>()({ name, events, timeout, correlate, initialState, evolve, decide })`.
 * The timeout payload type comes from the `timeout` schema (none: it schedules no timeouts).
 */
export const defineProcessManager =
  <M extends CommandMap>() =>
  <const Types extends ReadonlyArray<AnyEventType>, S, P = never, PI = never>(options: {
    readonly name: string
    readonly events: Types
    readonly timeout?: Schema.Schema<P, PI>
    readonly persistence?: "stream" | "none"
    readonly correlate: (input: ProcessInput<EventOf<Types[number]>>) => string | undefined
    readonly initialState: S
    readonly evolve?: (state: S, input: ProcessInput<EventOf<Types[number]>> | TimedOut<P>) => S
    readonly decide: (
      input: ProcessInput<EventOf<Types[number]>> | TimedOut<P>,
      state: S
    ) => ReadonlyArray<ProcessOutput<M, P>>
  }): ProcessManager<EventOf<Types[number]>, S, M, P> => {
    const persistence = options.persistence ?? "stream"
    const names = new Set(options.events.map((t) => t.type))
    if (names.has(TIMEOUT)) throw new Error(`process manager ${options.name}: "${TIMEOUT}" is reserved`)
    if (persistence === "stream") {
      const personal = options.events.filter((t) => t.personalKeys.length > 0).map((t) => t.type)
      if (personal.length > 0)
        throw new Error(
          `process manager ${options.name} keeps its inputs in a stream, but ${personal.join(", ")} carry ` +
            "personal data: declare narrower input schemas (ids, amounts, statuses) or use persistence: none"
        )
    }
    return {
      name: options.name,
      events: options.events,
      isInput: (event): event is EventOf<Types[number]> => names.has(event.type),
      timeout:
        options.timeout === undefined
          ? undefined
          : {
              encode: Schema.encodeEither(options.timeout),
              decode: Schema.decodeUnknownEither(options.timeout)
            },
      persistence,
      correlate: options.correlate,
      initialState: options.initialState,
      evolve: options.evolve ?? ((state) => state),
      decide: options.decide
    }
  }

/**
 * A deterministic UUID for an output of `input`: the same input and `key` always give the same id,
 * time-ordered by the input's occurrence. Use it (or `Ids.derive` over `input.id`) for every output id.
 */
export const outputId = (input: Pick<ProcessInput, "id" | "occurredAt">, key: string): string =>
  derivedUuid(Math.max(0, input.occurredAt.getTime()).toString(16), `${input.id}:${key}`)

/** An instance: its state plus what the runner needs to stay once-only. */
export interface ProcessInstance<S> {
  readonly state: S
  /** Ids of the inputs already handled: one seen again is a duplicate. */
  readonly handled: ReadonlySet<string>
  /** Timeouts scheduled and neither fired nor cancelled: any other timeout is stale. */
  readonly timeouts: ReadonlySet<string>
}

export const newInstance = <S>(pm: { readonly initialState: S }): ProcessInstance<S> => ({
  state: pm.initialState,
  handled: new Set(),
  timeouts: new Set()
})

/** What an instance recorded about an output: enough to know its live timeouts again. */
export interface OutputRef {
  readonly kind: string
  readonly id: string
}

/** Folds an input whose outputs are already known (what loading an instance's stream does). */
export const applyInput = <E extends DomainEvent, S, M extends CommandMap, P>(
  pm: ProcessManager<E, S, M, P>,
  instance: ProcessInstance<S>,
  input: ProcessInput<E> | TimedOut<P>,
  outputs: ReadonlyArray<OutputRef>
): ProcessInstance<S> => {
  const timeouts = new Set(instance.timeouts)
  if (input.type === TIMEOUT) timeouts.delete(input.id)
  for (const output of outputs) {
    if (output.kind === TIMEOUT) timeouts.add(output.id)
    else if (output.kind === "cancel-timeout") timeouts.delete(output.id)
  }
  return {
    state: pm.evolve(instance.state, input),
    handled: new Set(instance.handled).add(input.id),
    timeouts
  }
}

export type Step<S, M extends CommandMap, P> =
  | {
      readonly _tag: "Decided"
      readonly outputs: ReadonlyArray<ProcessOutput<M, P>>
      readonly instance: ProcessInstance<S>
    }
  /** Handled before (a redelivery): nothing to do. */
  | { readonly _tag: "Duplicate" }
  /** A timeout that was cancelled, or already fired: nothing to do. */
  | { readonly _tag: "Stale" }

/**
 * Decides one input on an instance: the outputs and the instance after it. A stateless process
 * manager (`persistence: "none"`) decides every input on a fresh instance, so it never sees
 * duplicates or stale timeouts here: its outputs' ids make them no-ops downstream.
 */
export const step = <E extends DomainEvent, S, M extends CommandMap, P>(
  pm: ProcessManager<E, S, M, P>,
  instance: ProcessInstance<S>,
  input: ProcessInput<E> | TimedOut<P>
): Step<S, M, P> => {
  if (instance.handled.has(input.id)) return { _tag: "Duplicate" }
  if (pm.persistence === "stream" && input.type === TIMEOUT && !instance.timeouts.has(input.id))
    return { _tag: "Stale" }
  const outputs = pm.decide(input, instance.state)
  return { _tag: "Decided", outputs, instance: applyInput(pm, instance, input, outputs) }
}
