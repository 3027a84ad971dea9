/**
 * The events feed's use cases: a page of public events and one event, as `/v1` shows them (the
 * webhook body's fields, secrets left out). Read-only: nothing here writes.
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { provideSqlClient } from "../db/Sql.js"
import { BadRequest, NotFound } from "../http/errors.js"
import type { V1Page } from "../http/Lists.js"
import * as Ids from "../kernel/Ids.js"
import { feedPage, type PublicEventRecord, publicEventById, type TypeFilter } from "./queries.js"
import { redactSecrets } from "./redaction.js"

/** A public event on `/v1` (Stripe's event object, camelCase). */
export interface EventView {
  readonly object: "event"
  readonly id: string
  readonly type: string
  readonly createdAt: Date
  readonly timestamp: Date
  readonly data: unknown
}

export const eventView = (record: PublicEventRecord): EventView => ({
  object: "event",
  id: record.id,
  type: record.type,
  createdAt: record.occurredAt,
  timestamp: record.occurredAt,
  data: redactSecrets(record.data)
})

/** `order.*` → every type under `order.`; anything else (checked by the route's schema) is exact. */
export const typeFilter = (type: string): TypeFilter =>
  type.endsWith(".*") ? { _tag: "Prefix", prefix: type.slice(0, -1) } : { _tag: "Exact", type }

/** What a list asks for: `/v1` page parameters and the filters (as decoded by the route's schema). */
export interface EventListInput {
  readonly limit: number
  readonly startingAfter?: string | undefined
  readonly endingBefore?: string | undefined
  /** An exact type or `prefix.*`. */
  readonly type?: string | undefined
  readonly createdAfter?: Date | undefined
  readonly createdBefore?: Date | undefined
}

const notFound = NotFound.of({ message: "No such event", param: "id" })

const invalid = (param: string, message: string) =>
  BadRequest.of({ code: "parameter_invalid", message, param })

export const makeEventFeed = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient

  const list = (params: EventListInput): Effect.Effect<V1Page<EventView>, BadRequest> =>
    Effect.gen(function* () {
      if (params.startingAfter !== undefined && params.endingBefore !== undefined)
        return yield* invalid("endingBefore", "pass startingAfter or endingBefore, not both")
      const { createdAfter, createdBefore } = params
      if (createdAfter !== undefined && createdBefore !== undefined && createdBefore <= createdAfter)
        return yield* invalid("createdBefore", "createdBefore must be later than createdAfter")
      const page = yield* feedPage({
        type: params.type === undefined ? undefined : typeFilter(params.type),
        createdAfter,
        createdBefore,
        limit: params.limit,
        startingAfter: params.startingAfter,
        endingBefore: params.endingBefore
      }).pipe(
        provideSqlClient(sql),
        Effect.catchTags({
          SqlError: Effect.die,
          KeysetCursorNotFound: (e) =>
            Effect.fail(
              BadRequest.of({ code: "resource_missing", message: `No such event: ${e.id}`, param: e.param })
            )
        })
      )
      return { object: "list" as const, data: page.data.map(eventView), hasMore: page.hasMore }
    })

  /** A malformed id, one of another resource and one of no event are all 404. */
  const get = (id: string): Effect.Effect<EventView, NotFound> =>
    Ids.isValid("evt", id)
      ? publicEventById(id).pipe(
          provideSqlClient(sql),
          Effect.orDie,
          Effect.flatMap(
            Option.match({ onNone: () => Effect.fail(notFound), onSome: (r) => Effect.succeed(eventView(r)) })
          )
        )
      : Effect.fail(notFound)

  return { list, get }
})

export type EventFeedShape = Effect.Effect.Success<typeof makeEventFeed>

export class EventFeed extends Context.Tag("events/EventFeed")<EventFeed, EventFeedShape>() {}

export const EventFeedLive = Layer.effect(EventFeed, makeEventFeed)
