/**
 * Optimistic concurrency: exact version, `no_stream`, `any`; `WrongExpectedVersion` carries the actual
 * version; racing appends with the same expected version — exactly one wins, nothing partial is written.
 * On PGlite (one connection) the racers queue; on PostgreSQL they really overlap and block on the
 * stream row.
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect, Either, Option, Schema } from "effect"
import { expect } from "vitest"
import { EventStore, type ExpectedVersion } from "../../src/eventstore/EventStore.js"
import { defineEvent } from "../../src/eventstore/EventType.js"
import { TestPersistence } from "../support/database.js"

const Added = defineEvent("cart.item_added", {
  schema: Schema.Struct({ sku: Schema.String, qty: Schema.Int })
})

const cartId = () => `cart-${randomUUID()}`
const added = (sku: string, qty = 1) => ({ eventType: Added, data: { sku, qty } })

const countEvents = (streamId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ n: number }>`SELECT count(*)::int AS n FROM event_store.events WHERE stream_id = ${streamId}`,
      (rows) => rows[0]?.n ?? -1
    )
  )

const versionOf = (streamId: string) =>
  Effect.flatMap(EventStore, (store) =>
    Effect.map(store.streamInfo(streamId), (info) => Option.map(info, (i) => i.version))
  )

const append = (streamId: string, expectedVersion: ExpectedVersion, skus: ReadonlyArray<string>) =>
  Effect.flatMap(EventStore, (store) =>
    store.append({ streamId, streamType: "cart", expectedVersion, events: skus.map((s) => added(s)) })
  )

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })("EventStore concurrency", (it) => {
  it.effect(
    "exact expected version: appends when it matches, otherwise WrongExpectedVersion with the actual",
    () =>
      Effect.gen(function* () {
        const id = cartId()
        yield* append(id, "no_stream", ["a", "b"])
        expect((yield* append(id, 2, ["c"])).version).toBe(3)

        for (const stale of [0, 1, 2, 4, 99]) {
          const error = yield* Effect.flip(append(id, stale, ["lost"]))
          expect(error).toMatchObject({
            _tag: "WrongExpectedVersion",
            streamId: id,
            expected: stale,
            actual: 3
          })
          if (error._tag === "WrongExpectedVersion") expect(error.message).toContain("actual 3")
        }
        expect(yield* versionOf(id)).toEqual(Option.some(3))
        expect(yield* countEvents(id)).toBe(3)
      })
  )

  it.effect("an exact version on a stream that does not exist fails with actual 0", () =>
    Effect.gen(function* () {
      const id = cartId()
      const error = yield* Effect.flip(append(id, 3, ["a"]))
      expect(error).toMatchObject({ _tag: "WrongExpectedVersion", expected: 3, actual: 0 })
      expect(yield* versionOf(id)).toEqual(Option.none())
      // Expected version 0 means "no events yet", like no_stream.
      expect((yield* append(id, 0, ["a"])).version).toBe(1)
    })
  )

  it.effect("no_stream creates a stream once; on an existing stream it reports the actual version", () =>
    Effect.gen(function* () {
      const id = cartId()
      expect((yield* append(id, "no_stream", ["a", "b", "c"])).version).toBe(3)
      const error = yield* Effect.flip(append(id, "no_stream", ["x"]))
      expect(error).toMatchObject({ _tag: "WrongExpectedVersion", expected: "no_stream", actual: 3 })
      const zero = yield* Effect.flip(append(id, 0, ["x"]))
      expect(zero).toMatchObject({ _tag: "WrongExpectedVersion", expected: 0, actual: 3 })
      expect(yield* countEvents(id)).toBe(3)
    })
  )

  it.effect("any appends to a new or an existing stream without a version check", () =>
    Effect.gen(function* () {
      const id = cartId()
      expect((yield* append(id, "any", ["a"])).version).toBe(1)
      expect((yield* append(id, "any", ["b", "c"])).version).toBe(3)
      expect((yield* append(id, "any", ["d"])).version).toBe(4)
      const store = yield* EventStore
      expect(
        (yield* store.readStream(id)).map((e) => [e.streamVersion, (e.data as { sku: string }).sku])
      ).toEqual([
        [1, "a"],
        [2, "b"],
        [3, "c"],
        [4, "d"]
      ])
    })
  )

  it.effect("racing appends with the same exact version: one wins, the rest fail, nothing partial", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const id = cartId()
      yield* append(id, "no_stream", ["seed"])
      const racers = 12
      const results = yield* Effect.all(
        Array.from({ length: racers }, (_, i) =>
          Effect.either(append(id, 1, [`r${i}-1`, `r${i}-2`, `r${i}-3`]))
        ),
        { concurrency: "unbounded" }
      )
      const wins = results.filter(Either.isRight).map((r) => r.right)
      const losses = results.filter(Either.isLeft).map((r) => r.left)
      expect(wins).toHaveLength(1)
      expect(losses).toHaveLength(racers - 1)
      for (const loss of losses)
        expect(loss).toMatchObject({ _tag: "WrongExpectedVersion", expected: 1, actual: 4 })
      const winner = wins[0]
      expect(winner?.version).toBe(4)
      const events = yield* store.readStream(id)
      expect(events.map((e) => e.streamVersion)).toEqual([1, 2, 3, 4])
      expect(events.slice(1).map((e) => e.eventId)).toEqual(winner?.eventIds)
      expect(yield* countEvents(id)).toBe(4)
    })
  )

  it.effect("racing no_stream creations: one stream, one winner", () =>
    Effect.gen(function* () {
      const id = cartId()
      const results = yield* Effect.all(
        Array.from({ length: 10 }, (_, i) => Effect.either(append(id, "no_stream", [`r${i}-1`, `r${i}-2`]))),
        { concurrency: "unbounded" }
      )
      expect(results.filter(Either.isRight)).toHaveLength(1)
      for (const loss of results.filter(Either.isLeft).map((r) => r.left))
        expect(loss).toMatchObject({ _tag: "WrongExpectedVersion", expected: "no_stream", actual: 2 })
      expect(yield* countEvents(id)).toBe(2)
    })
  )

  it.effect("racing transactions that read, append and hold the lock: one commits, the rest roll back", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const store = yield* EventStore
      const id = cartId()
      yield* append(id, "no_stream", ["seed"])
      // Each contender appends with expected version 1 in its own transaction and keeps it open a
      // little: on PostgreSQL the others block on the stream row and, once the winner commits, find
      // version 3; on PGlite they queue for the one connection and find it at once.
      const contender = (i: number) =>
        sql.withTransaction(
          Effect.gen(function* () {
            const r = yield* store.append({
              streamId: id,
              streamType: "cart",
              expectedVersion: 1,
              events: [added(`t${i}`), added(`t${i}`, 2)]
            })
            yield* Effect.sleep("20 millis")
            return r
          })
        )
      const results = yield* Effect.all(
        Array.from({ length: 8 }, (_, i) => Effect.either(contender(i))),
        { concurrency: "unbounded" }
      )
      const wins = results.filter(Either.isRight).map((r) => r.right)
      expect(wins).toHaveLength(1)
      for (const loss of results.filter(Either.isLeft).map((r) => r.left))
        expect(loss).toMatchObject({ _tag: "WrongExpectedVersion", expected: 1, actual: 3 })
      expect((yield* store.readStream(id)).map((e) => e.eventId).slice(1)).toEqual(wins[0]?.eventIds)
      expect(yield* countEvents(id)).toBe(3)
    })
  )

  it.effect("racing any appends all land, with contiguous versions and no duplicates", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const id = cartId()
      const n = 16
      const results = yield* Effect.all(
        Array.from({ length: n }, (_, i) => append(id, "any", [`a${i}`])),
        { concurrency: "unbounded" }
      )
      expect(results.map((r) => r.version).sort((a, b) => a - b)).toEqual(
        Array.from({ length: n }, (_, i) => i + 1)
      )
      const events = yield* store.readStream(id)
      expect(events.map((e) => e.streamVersion)).toEqual(Array.from({ length: n }, (_, i) => i + 1))
      expect(new Set(events.map((e) => (e.data as { sku: string }).sku)).size).toBe(n)
    })
  )

  it.effect("an append inside a caller's transaction rolls back with it", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const id = cartId()
      yield* append(id, "no_stream", ["a"])
      const outcome = yield* Effect.either(
        sql.withTransaction(Effect.zipRight(append(id, 1, ["b", "c"]), Effect.fail("abort" as const)))
      )
      expect(outcome).toEqual(Either.left("abort"))
      expect(yield* versionOf(id)).toEqual(Option.some(1))
      expect(yield* countEvents(id)).toBe(1)
      // …and commits with it.
      const r = yield* sql.withTransaction(append(id, 1, ["b", "c"]))
      expect(r.version).toBe(3)
      expect(yield* countEvents(id)).toBe(3)
    })
  )
})
