/**
 * An aggregate is a decider: `decide(command, state)` → events (or a domain error),
 * `evolve(state, event)` → state. Pure: tested without a database, run by the CommandRunner.
 */
import { type Effect, Option, Schema } from "effect"
import { fastEncodeSync } from "../base/FastEncode.js"
import type { StoredEvent } from "../eventstore/EventStore.js"
import { type AnyEventType, type DomainEvent, type EventOf, EventTypes } from "../eventstore/EventType.js"

/** A domain event together with where and when it was recorded. */
export type Recorded<E extends DomainEvent = DomainEvent> = Omit<StoredEvent, "type" | "data"> & E

/**
 * A domain event as it is about to be recorded: id, stream version and time fixed, not yet its place
 * in the global feed. What public events are derived from, so they are written by the append itself.
 */
export type Pending<E extends DomainEvent = DomainEvent> = Omit<
  StoredEvent,
  "type" | "data" | "globalPosition" | "transactionId"
> &
  E

/** A public event (spec §6) derived from a domain event: its snapshot is the state as of the event. */
export interface PublicEventDraft {
  readonly type: string
  readonly data: unknown
  /** The data subject the snapshot is about, so erasure can redact it. */
  readonly subjectId?: string
}

export interface SnapshotPolicy<S> {
  /** Write a snapshot once this many events were folded since the last one. */
  readonly every: number
  /** Bump when the state shape changes: older snapshots are ignored, not decoded. */
  readonly version: number
  readonly encode: (state: S) => unknown
  /** None when the stored snapshot no longer decodes (then the stream is folded from the start). */
  readonly decode: (json: unknown) => Option.Option<S>
}

/** A snapshot policy whose state is stored as the schema's JSON encoding. */
export const snapshotPolicy = <S, I>(
  schema: Schema.Schema<S, I>,
  options: { readonly every: number; readonly version: number }
): SnapshotPolicy<S> => ({
  every: options.every,
  version: options.version,
  encode: fastEncodeSync(schema),
  decode: (json) => Schema.decodeUnknownOption(schema)(json).pipe(Option.orElse(() => Option.none()))
})

export interface Decider<C, E extends DomainEvent, S, Err> {
  readonly streamType: string
  readonly eventTypes: EventTypes
  readonly initialState: S
  readonly evolve: (state: S, event: E) => S
  readonly decide: (command: C, state: S) => Effect.Effect<ReadonlyArray<E>, Err>
  readonly snapshot: SnapshotPolicy<S> | undefined
  readonly publicEvents: ((event: Pending<E>, stateAfter: S) => ReadonlyArray<PublicEventDraft>) | undefined
  /** Narrows a decoded event to this aggregate's event union. */
  readonly isEvent: (event: DomainEvent) => event is E
}

// biome-ignore lint/suspicious/noExplicitAny: existential over command, event, state and error types
export type AnyDecider = Decider<any, any, any, any>

export const defineDecider = <const Types extends ReadonlyArray<AnyEventType>, C, S, Err = never>(options: {
  readonly streamType: string
  readonly events: Types
  readonly initialState: S
  readonly evolve: (state: S, event: EventOf<Types[number]>) => S
  readonly decide: (command: C, state: S) => Effect.Effect<ReadonlyArray<EventOf<Types[number]>>, Err>
  readonly snapshot?: SnapshotPolicy<S>
  readonly publicEvents?: (
    event: Pending<EventOf<Types[number]>>,
    stateAfter: S
  ) => ReadonlyArray<PublicEventDraft>
}): Decider<C, EventOf<Types[number]>, S, Err> => {
  const eventTypes = new EventTypes(options.events)
  return {
    streamType: options.streamType,
    eventTypes,
    initialState: options.initialState,
    evolve: options.evolve,
    decide: options.decide,
    snapshot: options.snapshot,
    publicEvents: options.publicEvents,
    isEvent: (event): event is EventOf<Types[number]> => eventTypes.has(event.type)
  }
}

/** Folds events into state: what the runner does on load, exposed for tests of deciders. */
export const fold = <C, E extends DomainEvent, S, Err>(
  decider: Decider<C, E, S, Err>,
  events: ReadonlyArray<E>,
  from: S = decider.initialState
): S => events.reduce(decider.evolve, from)
