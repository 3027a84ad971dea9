/**
 * Runs a process manager (`kernel/ProcessManager.ts`): a checkpointed subscription feeds it its input
 * events, a due-work worker feeds it its timeouts, and each output goes to the port registered for
 * its kind. For every input, in ONE transaction — the subscription batch's (with its checkpoint) or
 * the timeout's outcome (with its fenced completion):
 *
 *   load the instance's stream → decide → append `process.input_handled` (an id derived from the
 *   input) → run the command outputs through their ports → schedule / cancel the timeouts.
 *
 * So an output is executed exactly once per input: a crash before the commit rolls everything back
 * and the input is redelivered; an input seen again after the commit (a reset checkpoint, a timeout
 * claimed twice) is recognised as handled by its id; and the outputs' own ids, derived from the input,
 * make a command that slipped through a duplicate at its target.
 *
 * An instance is written by one subscription owner (its lease) and by the timeout worker; should both
 * write one instance at the same moment, the expected-version check fails one of them: a timeout's
 * outcome is recorded again in a new transaction (the worker retries conflicts), a batch is rolled
 * back and run again (the subscription retries conflicts a few times before it fails).
 */
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Either, ParseResult, Schema } from "effect"
import type { AppConfig } from "../config.js"
import { type EventMetadata, EventStore, type StoredEvent } from "../eventstore/EventStore.js"
import {
  type AnyEventType,
  type DomainEvent,
  decodeEventDataEither,
  defineEvent,
  EventTypes
} from "../eventstore/EventType.js"
import { type AppendError, EventDecodeError, InvalidEventPayload } from "../eventstore/errors.js"
import type { PublicEvent } from "../eventstore/PublicEvents.js"
import { derivedUuid } from "../kernel/Ids.js"
import {
  applyInput,
  type Command,
  type CommandKind,
  type CommandMap,
  isCancelTimeout,
  isScheduleTimeout,
  isTimedOut,
  newInstance,
  type ProcessInput,
  type ProcessInstance,
  type ProcessManager,
  type ProcessOutput,
  step,
  TIMEOUT,
  type TimedOut
} from "../kernel/ProcessManager.js"
import { type DueItem, DueOutcome, DueWork, type DueWorkerOptions, dueWorker } from "./DueWork.js"
import {
  type SubscriptionOptions,
  type SubscriptionProcessor,
  type SubscriptionServices,
  subscriptionProcessor
} from "./Subscription.js"
import type { Processor } from "./Supervisor.js"

/** What a port is told about the output it executes (for its event metadata and logs). */
export interface OutputContext {
  readonly processManager: string
  readonly instanceId: string
  readonly input: { readonly id: string; readonly type: string }
  /** Metadata for the events the port appends: the process manager as actor, the input as cause. */
  readonly metadata: EventMetadata
}

/** The ports, by command kind: each executes its command once per `command.id` (its idempotency key). */
export type CommandHandlers<M extends CommandMap, E, R> = {
  readonly [K in CommandKind<M>]: (
    command: Command<M, K>,
    context: OutputContext
  ) => Effect.Effect<void, E, R>
}

/** One handled input in an instance's stream: the input as decoded, and the outputs it caused. */
export const InputHandled = defineEvent("process.input_handled", {
  schema: Schema.Struct({
    processManager: Schema.String,
    instanceId: Schema.String,
    input: Schema.Struct({
      type: Schema.String,
      id: Schema.String,
      occurredAt: Schema.Number,
      /** The input event's schema version when it was recorded (its upcasters apply on load). */
      schemaVersion: Schema.Number,
      data: Schema.Unknown
    }),
    outputs: Schema.Array(Schema.Struct({ kind: Schema.String, id: Schema.String }))
  })
})

export const processStreamId = (name: string, instanceId: string) => `process-${name}-${instanceId}`
export const timeoutKind = (name: string) => `process.${name}.timeout`

/** What a timeout's due-work row keeps. */
const TimeoutRow = Schema.Struct({ instanceId: Schema.String, payload: Schema.Unknown })

/** An input and the instance it belongs to. */
export interface Routed<E extends DomainEvent, P> {
  readonly instanceId: string
  readonly input: ProcessInput<E> | TimedOut<P>
}

export type RunError<HE> = HE | AppendError | EventDecodeError | InvalidEventPayload | SqlError

interface Loaded<S> {
  readonly instance: ProcessInstance<S>
  readonly version: number
}

const parseMessage = (error: ParseResult.ParseError) => ParseResult.TreeFormatter.formatErrorSync(error)

/**
 * The pure core of the runner as effects: handles routed inputs one by one, in the caller's
 * transaction. Exposed for composition (a stateless reaction's batch) and tests.
 */
export const runInputs = <E extends DomainEvent, S, M extends CommandMap, P, HE, HR>(
  pm: ProcessManager<E, S, M, P>,
  handlers: CommandHandlers<M, HE, HR>,
  inputs: ReadonlyArray<Routed<E, P>>
): Effect.Effect<void, RunError<HE>, HR | EventStore | DueWork> =>
  Effect.gen(function* () {
    if (inputs.length === 0) return
    const store = yield* EventStore
    const work = yield* DueWork
    const types = new EventTypes(pm.events)
    const actor = { type: "system", id: pm.name } as const
    // Instances touched by this batch, as they stand after its earlier inputs (uncommitted).
    const instances = new Map<string, Loaded<S>>()

    const decodeRecorded = (stored: StoredEvent) =>
      Effect.gen(function* () {
        const recorded = yield* decodeEventDataEither(InputHandled, stored)
        const { input } = recorded
        const fail = (message: string) =>
          new EventDecodeError({
            eventId: stored.eventId,
            eventType: input.type,
            schemaVersion: input.schemaVersion,
            message
          })
        const occurredAt = new Date(input.occurredAt)
        if (input.type === TIMEOUT) {
          if (pm.timeout === undefined) return yield* fail(`${pm.name} schedules no timeouts`)
          const data = yield* Either.mapLeft(pm.timeout.decode(input.data), (e) => fail(parseMessage(e)))
          const timedOut: TimedOut<P> = { type: TIMEOUT, id: input.id, data, occurredAt }
          return { input: timedOut, outputs: recorded.outputs }
        }
        const eventType = types.get(input.type)
        if (eventType === undefined) return yield* fail(`${pm.name} does not listen to ${input.type}`)
        const data = yield* decodeEventDataEither(eventType, {
          eventId: stored.eventId,
          schemaVersion: input.schemaVersion,
          data: input.data
        })
        const event: DomainEvent = { type: eventType.type, data }
        if (!pm.isInput(event)) return yield* fail(`${pm.name} does not listen to ${input.type}`)
        const decoded: ProcessInput<E> = { ...event, id: input.id, occurredAt }
        return { input: decoded, outputs: recorded.outputs }
      })

    const load = (streamId: string) =>
      Effect.gen(function* () {
        const cached = instances.get(streamId)
        if (cached !== undefined) return cached
        const stored = yield* store
          .readStream(streamId)
          .pipe(Effect.catchTag("StreamNotFound", () => Effect.succeed<ReadonlyArray<StoredEvent>>([])))
        let instance = newInstance(pm)
        for (const event of stored) {
          const { input, outputs } = yield* decodeRecorded(event)
          instance = applyInput(pm, instance, input, outputs)
        }
        return { instance, version: stored[stored.length - 1]?.streamVersion ?? 0 }
      })

    /** The input's data as its schema encodes it, for the instance's stream. */
    const encodeInput = (input: ProcessInput<E> | TimedOut<P>) =>
      Effect.gen(function* () {
        const invalid = (error: ParseResult.ParseError) =>
          new InvalidEventPayload({ eventType: input.type, message: parseMessage(error) })
        if (isTimedOut(input)) {
          if (pm.timeout === undefined)
            return yield* new InvalidEventPayload({ eventType: TIMEOUT, message: "no timeout schema" })
          return { schemaVersion: 1, data: yield* Either.mapLeft(pm.timeout.encode(input.data), invalid) }
        }
        const eventType: AnyEventType | undefined = types.get(input.type)
        if (eventType === undefined)
          return yield* new InvalidEventPayload({ eventType: input.type, message: "not an input" })
        const data: unknown = yield* Schema.encode(eventType.schema)(input.data).pipe(
          Effect.mapError(invalid)
        )
        return { schemaVersion: eventType.version, data }
      })

    const dispatch = (output: ProcessOutput<M, P>, context: OutputContext) =>
      Effect.gen(function* () {
        if (isScheduleTimeout(output)) {
          if (pm.timeout === undefined)
            return yield* new InvalidEventPayload({ eventType: TIMEOUT, message: "no timeout schema" })
          const payload = yield* Either.mapLeft(
            pm.timeout.encode(output.payload),
            (e) => new InvalidEventPayload({ eventType: TIMEOUT, message: parseMessage(e) })
          )
          yield* work.schedule({
            kind: timeoutKind(pm.name),
            key: output.id,
            dueAt: output.dueAt,
            payload: { instanceId: context.instanceId, payload }
          })
        } else if (isCancelTimeout(output)) {
          yield* work.cancel(timeoutKind(pm.name), output.id)
        } else {
          yield* execute(handlers, output, context)
        }
      })

    for (const { instanceId, input } of inputs) {
      const streamId = processStreamId(pm.name, instanceId)
      const loaded: Loaded<S> =
        pm.persistence === "stream" ? yield* load(streamId) : { instance: newInstance(pm), version: 0 }
      const result = step(pm, loaded.instance, input)
      if (result._tag !== "Decided") {
        yield* Effect.logDebug(`${pm.name}/${instanceId}: ${input.type} ${input.id} is ${result._tag}`)
        continue
      }
      const metadata: EventMetadata = { actor, causationId: input.id }
      if (pm.persistence === "stream") {
        const encoded = yield* encodeInput(input)
        const appended = yield* store.append({
          streamId,
          streamType: `process.${pm.name}`,
          expectedVersion: loaded.version,
          metadata,
          events: [
            {
              eventType: InputHandled,
              id: derivedUuid(
                Math.max(0, input.occurredAt.getTime()).toString(16),
                `${streamId}:${input.id}`
              ),
              data: InputHandled.make({
                processManager: pm.name,
                instanceId,
                input: { type: input.type, id: input.id, occurredAt: input.occurredAt.getTime(), ...encoded },
                outputs: result.outputs.map((o) => ({ kind: o.kind, id: o.id }))
              }).data
            }
          ]
        })
        instances.set(streamId, { instance: result.instance, version: appended.version })
      }
      const context: OutputContext = {
        processManager: pm.name,
        instanceId,
        input: { id: input.id, type: input.type },
        metadata
      }
      for (const output of result.outputs) yield* dispatch(output, context)
    }
  }).pipe(Effect.withSpan("process_manager.run", { attributes: { "process_manager.name": pm.name } }))

/** Calls the port of the command's kind (correlated: the handler's input type is the command's). */
const execute = <M extends CommandMap, K extends CommandKind<M>, HE, HR>(
  handlers: CommandHandlers<M, HE, HR>,
  command: Command<M, K>,
  context: OutputContext
): Effect.Effect<void, HE, HR> => handlers[command.kind](command, context)

/** Decodes feed rows into the process manager's inputs (other event types are skipped). */
export const inputsOf = <E extends DomainEvent, S, M extends CommandMap, P>(
  pm: ProcessManager<E, S, M, P>,
  rows: ReadonlyArray<StoredEvent | PublicEvent>
): Effect.Effect<ReadonlyArray<Routed<E, P>>, EventDecodeError> =>
  Effect.gen(function* () {
    const types = new EventTypes(pm.events)
    const routed: Array<Routed<E, P>> = []
    for (const row of rows) {
      const eventType = types.get(row.type)
      if (eventType === undefined) continue
      // Domain events are stored at their version (upcast here); public events are current snapshots.
      const stored =
        "eventId" in row
          ? { eventId: row.eventId, schemaVersion: row.schemaVersion, data: row.data }
          : { eventId: row.id, schemaVersion: eventType.version, data: row.data }
      const data = yield* decodeEventDataEither(eventType, stored)
      const event: DomainEvent = { type: eventType.type, data }
      if (!pm.isInput(event)) continue
      const input: ProcessInput<E> =
        "eventId" in row
          ? { ...event, id: row.eventId, occurredAt: row.recordedAt }
          : { ...event, id: row.id, occurredAt: row.occurredAt }
      const instanceId = pm.correlate(input)
      if (instanceId !== undefined) routed.push({ instanceId, input })
    }
    return routed
  })

/** Handles one batch of feed rows in the caller's transaction, then wakes local due-work workers. */
export const runBatch = <E extends DomainEvent, S, M extends CommandMap, P, HE, HR>(
  pm: ProcessManager<E, S, M, P>,
  handlers: CommandHandlers<M, HE, HR>,
  rows: ReadonlyArray<StoredEvent | PublicEvent>
) =>
  Effect.flatMap(inputsOf(pm, rows), (inputs) => runInputs(pm, handlers, inputs)).pipe(
    // Inside the batch transaction: workers polling meanwhile see the work once it commits.
    Effect.zipRight(Effect.flatMap(DueWork, (work) => work.wake))
  )

export type ProcessSubscriptionOptions = Omit<
  SubscriptionOptions<"events", never, never>,
  "name" | "source" | "eventTypes" | "handle"
> & {
  /** Where its input events come from: domain events (`events`) or the public feed. */
  readonly source: "events" | "public_events"
}

/** The process manager's input subscription (named after it): input events → outputs, once each. */
export const processManagerSubscription = <E extends DomainEvent, S, M extends CommandMap, P, HE, HR>(
  pm: ProcessManager<E, S, M, P>,
  handlers: CommandHandlers<M, HE, HR>,
  options: ProcessSubscriptionOptions
): SubscriptionProcessor<HR | SubscriptionServices | EventStore | DueWork> => {
  const spec = { ...options, name: pm.name, eventTypes: pm.events.map((t) => t.type) }
  return options.source === "events"
    ? subscriptionProcessor({
        ...spec,
        source: "events",
        handle: (rows) => runBatch(pm, handlers, rows)
      })
    : subscriptionProcessor({
        ...spec,
        source: "public_events",
        handle: (rows) => runBatch(pm, handlers, rows)
      })
}

export type ProcessTimeoutOptions = Omit<
  DueWorkerOptions<never, never, never, never, never>,
  "kinds" | "handle" | "prepare" | "recordBatched"
>

/**
 * The process manager's timeout worker: a due timeout is decided like any input, and its outputs
 * commit with the claim's fenced completion — a timeout cancelled (or taken over) meanwhile records
 * nothing; one the instance no longer expects is stale and ignored.
 */
export const processManagerTimeouts = <E extends DomainEvent, S, M extends CommandMap, P, HE, HR>(
  pm: ProcessManager<E, S, M, P>,
  handlers: CommandHandlers<M, HE, HR>,
  options: ProcessTimeoutOptions = {}
): Processor<HR | EventStore | DueWork | AppConfig | SqlClient.SqlClient> => {
  const fired = (item: DueItem) =>
    Effect.gen(function* () {
      const fail = (message: string) =>
        new EventDecodeError({ eventId: item.id, eventType: TIMEOUT, schemaVersion: 1, message })
      const row = yield* Either.mapLeft(Schema.decodeUnknownEither(TimeoutRow)(item.payload), (e) =>
        fail(parseMessage(e))
      )
      if (pm.timeout === undefined) return yield* fail(`${pm.name} schedules no timeouts`)
      const data = yield* Either.mapLeft(pm.timeout.decode(row.payload), (e) => fail(parseMessage(e)))
      const input: TimedOut<P> = { type: TIMEOUT, id: item.key, data, occurredAt: item.dueAt }
      yield* runInputs(pm, handlers, [{ instanceId: row.instanceId, input }])
    })
  return dueWorker({
    name: `${pm.name}:timeouts`,
    ...options,
    kinds: [timeoutKind(pm.name)],
    handle: (item) => Effect.succeed(DueOutcome.done({ inTransaction: fired(item) }))
  })
}

/** Both processors of a process manager, for the registry. */
export const processManagerProcessors = <E extends DomainEvent, S, M extends CommandMap, P, HE, HR>(
  pm: ProcessManager<E, S, M, P>,
  handlers: CommandHandlers<M, HE, HR>,
  options: { readonly subscription: ProcessSubscriptionOptions; readonly timeouts?: ProcessTimeoutOptions }
) => [
  processManagerSubscription(pm, handlers, options.subscription),
  ...(pm.timeout === undefined ? [] : [processManagerTimeouts(pm, handlers, options.timeouts)])
]
