/**
 * Bad input always ends in a typed error and never in a crash or a partial write; the events table
 * refuses UPDATE, DELETE and TRUNCATE.
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { layer } from "@effect/vitest"
import { Effect, Option, Schema } from "effect"
import { expect } from "vitest"
import {
  type AppendInput,
  EventStore,
  type ExpectedVersion,
  type NewEvent
} from "../../src/eventstore/EventStore.js"
import { defineEvent, Personal } from "../../src/eventstore/EventType.js"
import { TestPersistence } from "../support/database.js"

const Placed = defineEvent("order.placed", {
  schema: Schema.Struct({
    orderId: Schema.String,
    total: Schema.Int.pipe(Schema.nonNegative()),
    currency: Schema.Literal("EUR", "USD")
  })
})
const Noted = defineEvent("order.noted", {
  schema: Schema.Struct({ customerId: Schema.String, note: Personal(Schema.String) }),
  subject: (d) => d.customerId
})

const orderId = () => `order-${randomUUID()}`
const placed = (id: string, total = 100): NewEvent => ({
  eventType: Placed,
  data: { orderId: id, total, currency: "EUR" }
})
/** An append to order stream `streamId`. */
const orderAppend = (
  streamId: string,
  expectedVersion: ExpectedVersion,
  events: ReadonlyArray<NewEvent>
): AppendInput => ({ streamId, streamType: "order", expectedVersion, events })
/** Data that does not match the schema, as it could arrive from an untyped caller. */
const malformed = (data: unknown): NewEvent => ({ eventType: Placed, data })

const counts = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ events: number; streams: number; keys: number }>`SELECT
    (SELECT count(*)::int FROM event_store.events) AS events,
    (SELECT count(*)::int FROM event_store.streams) AS streams,
    (SELECT count(*)::int FROM event_store.subject_keys) AS keys`
  return row
})

/** An append the store must refuse: its error, once the store is seen unchanged (no event, stream or key). */
const refused = (input: AppendInput) =>
  Effect.gen(function* () {
    const store = yield* EventStore
    const before = yield* counts
    const error = yield* Effect.flip(store.append(input))
    expect(yield* counts).toEqual(before)
    return error
  })

const sqlState = (error: SqlError): unknown => (error.cause as { code?: unknown } | undefined)?.code

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })("EventStore bad input", (it) => {
  it.effect("readStream of an unknown stream fails with StreamNotFound", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const id = orderId()
      const error = yield* Effect.flip(store.readStream(id))
      expect(error).toMatchObject({ _tag: "StreamNotFound", streamId: id })
      expect(error.message).toContain(id)
      // An existing stream read past its end is empty, not missing.
      yield* store.append(orderAppend(id, "no_stream", [placed(id)]))
      expect(yield* store.readStream(id, { fromVersion: 5 })).toEqual([])
    })
  )

  it.effect("an invalid stream id fails with InvalidStreamId and writes nothing", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const before = yield* counts
      for (const streamId of [
        "",
        "order 1",
        "order-\n1",
        "ordér-1",
        "x".repeat(201),
        "tab\there",
        "nul\u0000",
        'quote"d',
        "back\\slash"
      ]) {
        const error = yield* Effect.flip(store.append(orderAppend(streamId, "any", [placed("o")])))
        expect(error).toMatchObject({ _tag: "InvalidStreamId", streamId })
      }
      // The longest valid id is fine.
      const longest = "x".repeat(200)
      expect((yield* store.append(orderAppend(longest, "any", [placed("o")]))).version).toBe(1)
      const after = yield* counts
      expect(after).toEqual({
        ...before,
        events: (before?.events ?? 0) + 1,
        streams: (before?.streams ?? 0) + 1
      })
    })
  )

  it.effect("a payload that does not match its schema fails with InvalidEventPayload; nothing changes", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const id = orderId()
      yield* store.append(orderAppend(id, "no_stream", [placed(id)]))
      const before = yield* counts
      const bad: ReadonlyArray<unknown> = [
        { orderId: id, total: -1, currency: "EUR" },
        { orderId: id, total: 1.5, currency: "EUR" },
        { orderId: id, total: "100", currency: "EUR" },
        { orderId: id, total: 1, currency: "GBP" },
        { orderId: id, currency: "EUR" },
        null,
        "order"
      ]
      for (const data of bad) {
        for (const expectedVersion of [1, "any"] as const) {
          const error = yield* Effect.flip(store.append(orderAppend(id, expectedVersion, [malformed(data)])))
          expect(error).toMatchObject({ _tag: "InvalidEventPayload", eventType: "order.placed" })
          expect(error.message.length).toBeGreaterThan(0)
        }
      }
      expect(yield* counts).toEqual(before)
      const info = yield* store.streamInfo(id)
      expect(Option.map(info, (i) => i.version)).toEqual(Option.some(1))
    })
  )

  it.effect("a multi-event append with one malformed event writes none of them", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const id = orderId()
      const error = yield* refused(
        orderAppend(id, "no_stream", [
          placed(id, 1),
          placed(id, 2),
          malformed({ orderId: id, total: -3, currency: "EUR" }),
          placed(id, 4)
        ])
      )
      expect(error._tag).toBe("InvalidEventPayload")
      expect((yield* Effect.flip(store.readStream(id)))._tag).toBe("StreamNotFound")
    })
  )

  it.effect("a malformed event after personal data writes neither events nor a subject key", () =>
    Effect.gen(function* () {
      const id = orderId()
      const error = yield* refused(
        orderAppend(id, "no_stream", [
          { eventType: Noted, data: { customerId: `customer-${randomUUID()}`, note: "call after 6pm" } },
          malformed({ orderId: id })
        ])
      )
      expect(error._tag).toBe("InvalidEventPayload")
    })
  )

  it.effect("a duplicate event id fails with DuplicateEvent and writes nothing", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const a = orderId()
      const eventId = randomUUID()
      yield* store.append(orderAppend(a, "no_stream", [{ ...placed(a), id: eventId }]))
      const before = yield* counts

      // Same id again on the same stream (as a retried command would do).
      const again = yield* Effect.flip(store.append(orderAppend(a, 1, [{ ...placed(a), id: eventId }])))
      expect(again).toMatchObject({ _tag: "DuplicateEvent", streamId: a })
      // Same id on a new stream: the stream is not created either.
      const b = orderId()
      const other = yield* Effect.flip(
        store.append(orderAppend(b, "no_stream", [placed(b), { ...placed(b), id: eventId }]))
      )
      expect(other).toMatchObject({ _tag: "DuplicateEvent", streamId: b })
      // Twice within one batch.
      const twice = randomUUID()
      const inBatch = yield* Effect.flip(
        store.append(
          orderAppend(a, "any", [
            { ...placed(a), id: twice },
            { ...placed(a), id: twice }
          ])
        )
      )
      expect(inBatch._tag).toBe("DuplicateEvent")

      expect(yield* counts).toEqual(before)
      expect((yield* Effect.flip(store.readStream(b)))._tag).toBe("StreamNotFound")
      const info = yield* store.streamInfo(a)
      expect(Option.map(info, (i) => i.version)).toEqual(Option.some(1))
      // The stream is still appendable after the failures.
      expect((yield* store.append(orderAppend(a, 1, [placed(a)]))).version).toBe(2)
    })
  )

  it.effect("an event id that is not a UUID fails with InvalidEventPayload and writes nothing", () =>
    Effect.gen(function* () {
      const id = orderId()
      const error = yield* refused(
        orderAppend(id, "no_stream", [placed(id), { ...placed(id), id: "not-a-uuid" }])
      )
      expect(error).toMatchObject({ _tag: "InvalidEventPayload", eventType: "order.placed" })
    })
  )

  it.effect(
    "an empty append or a malformed expected version fails with InvalidAppend and writes nothing",
    () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const before = yield* counts
        const id = orderId()
        const empty = yield* Effect.flip(store.append(orderAppend(id, "any", [])))
        expect(empty._tag).toBe("InvalidAppend")
        for (const expectedVersion of [-1, -3, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
          const error = yield* Effect.flip(store.append(orderAppend(id, expectedVersion, [placed(id)])))
          expect(error._tag).toBe("InvalidAppend")
        }
        expect(yield* counts).toEqual(before)
      })
  )

  it.effect("events are immutable: UPDATE, DELETE and TRUNCATE are refused by the trigger", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const store = yield* EventStore
      const id = orderId()
      const r = yield* store.append(orderAppend(id, "no_stream", [placed(id, 7)]))
      const statements = [
        sql`UPDATE event_store.events SET data = '{"total": 0}'::jsonb WHERE stream_id = ${id}`,
        sql`UPDATE event_store.events SET event_type = 'order.cancelled'`,
        sql`DELETE FROM event_store.events WHERE stream_id = ${id}`,
        sql`DELETE FROM event_store.events`,
        sql`TRUNCATE event_store.events`,
        sql`TRUNCATE event_store.events, event_store.streams`
      ]
      for (const statement of statements) {
        const error = yield* Effect.flip(statement)
        expect(error._tag).toBe("SqlError")
        expect(sqlState(error)).toBe("42501")
        expect(String((error.cause as Error).message)).toMatch(
          /append-only \((UPDATE|DELETE|TRUNCATE) refused\)/
        )
      }
      // Also inside a transaction: the whole transaction fails.
      const inTx = yield* Effect.flip(
        sql.withTransaction(sql`DELETE FROM event_store.events WHERE global_position = ${r.firstPosition}`)
      )
      expect(inTx._tag).toBe("SqlError")
      const [row] = yield* sql<{
        data: unknown
        n: number
      }>`SELECT data, (SELECT count(*)::int FROM event_store.events) AS n
        FROM event_store.events WHERE stream_id = ${id}`
      expect(row?.data).toEqual({ orderId: id, total: 7, currency: "EUR" })
      expect(row?.n).toBeGreaterThan(0)
    })
  )
})
