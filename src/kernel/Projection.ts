/**
 * Read-model projections. An inline projection updates its tables in the same transaction as the
 * append (read-your-writes); the rebuild script replays it from position zero into fresh tables.
 * A projection writes only through `target.table(name)`, so a rebuild can point it at `<table>_next`.
 */
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Either, Layer } from "effect"
import type { StoredEvent } from "../eventstore/EventStore.js"
import {
  type AnyEventType,
  type DomainEvent,
  decodeEventDataEither,
  type EventOf,
  EventTypes
} from "../eventstore/EventType.js"
import { EventDecodeError } from "../eventstore/errors.js"
import type { Recorded } from "./Decider.js"

export interface ProjectionTarget {
  /** The physical table to write for a live (schema-qualified) table name. */
  readonly table: (liveTable: string) => string
}

export const liveTarget: ProjectionTarget = { table: (t) => t }

export interface Projection {
  readonly name: string
  /** Schema-qualified tables this projection owns (rebuilt and swapped together). */
  readonly tables: ReadonlyArray<string>
  readonly eventTypes: EventTypes
  /** Applies a batch of events (all of `eventTypes`, in feed order). Must be idempotent per event. */
  readonly apply: (
    events: ReadonlyArray<Recorded>,
    target: ProjectionTarget
  ) => Effect.Effect<void, SqlError, SqlClient.SqlClient>
}

const PROJECTION_NAME = /^[a-z][a-z0-9_]{0,62}$/
const TABLE_NAME = /^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$/

export const defineProjection = <const Types extends ReadonlyArray<AnyEventType>>(options: {
  readonly name: string
  readonly tables: ReadonlyArray<string>
  readonly events: Types
  readonly apply: (
    events: ReadonlyArray<Recorded<EventOf<Types[number]>>>,
    target: ProjectionTarget
  ) => Effect.Effect<void, SqlError, SqlClient.SqlClient>
}): Projection => {
  if (!PROJECTION_NAME.test(options.name))
    throw new Error(`projection name "${options.name}" must be snake_case`)
  for (const t of options.tables) {
    if (!TABLE_NAME.test(t))
      throw new Error(`projection table "${t}" must be a schema-qualified snake_case name`)
  }
  const eventTypes = new EventTypes(options.events)
  const isOwn = (e: Recorded): e is Recorded<EventOf<Types[number]>> => eventTypes.has(e.type)
  return {
    name: options.name,
    tables: options.tables,
    eventTypes,
    apply: (events, target) => {
      const own = events.filter(isOwn)
      return own.length === 0 ? Effect.void : options.apply(own, target)
    }
  }
}

/** Every inline projection of the service, consulted by the command runner on each append. */
export class Projections extends Context.Tag("Projections")<Projections, ReadonlyArray<Projection>>() {}

export const ProjectionsLive = (projections: ReadonlyArray<Projection>) => {
  const names = new Set<string>()
  for (const p of projections) {
    if (names.has(p.name)) throw new Error(`projection ${p.name} is registered twice`)
    names.add(p.name)
  }
  return Layer.succeed(Projections, projections)
}

const decodeOne = (
  types: EventTypes,
  stored: StoredEvent
): Either.Either<Recorded<DomainEvent>, EventDecodeError> => {
  const eventType = types.get(stored.type)
  if (!eventType) {
    return Either.left(
      new EventDecodeError({
        eventId: stored.eventId,
        eventType: stored.type,
        schemaVersion: stored.schemaVersion,
        message: `unknown event type ${stored.type}`
      })
    )
  }
  return Either.map(decodeEventDataEither(eventType, stored), (data) => ({
    ...stored,
    type: stored.type,
    data
  }))
}

/** Decodes a batch synchronously (no fiber per event): the hot loop of loads and rebuilds. */
export const decodeStoredBatch = (
  types: EventTypes,
  batch: ReadonlyArray<StoredEvent>
): Effect.Effect<ReadonlyArray<Recorded<DomainEvent>>, EventDecodeError> =>
  Effect.suspend(() => {
    const out: Array<Recorded<DomainEvent>> = new Array(batch.length)
    for (let i = 0; i < batch.length; i++) {
      const stored = batch[i]
      if (!stored) continue
      const decoded = decodeOne(types, stored)
      if (Either.isLeft(decoded)) return Effect.fail(decoded.left)
      out[i] = decoded.right
    }
    return Effect.succeed(out)
  })

/**
 * Transaction-scoped advisory lock key space for projections: command transactions take it shared
 * before writing a projection's tables; the rebuild swap takes it exclusively.
 */
export const PROJECTION_LOCK_CLASS = 7_701
