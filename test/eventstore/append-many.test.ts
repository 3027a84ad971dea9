/**
 * appendMany and readStreams: several streams in one statement round trip, all or nothing — versions,
 * positions, mixed expected versions, conflicts that write nothing, duplicate streams and event ids,
 * personal data, caller transactions, ordering conflicts; one-query reads of several streams.
 * On a fresh database (PGlite, or PostgreSQL with DATABASE_URL).
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option, Schema } from "effect"
import { expect } from "vitest"
import { UUID_PATTERN } from "../../src/base/Uuid.js"
import { type AppendInput, EventStore, type ExpectedVersion } from "../../src/eventstore/EventStore.js"
import { defineEvent, Personal } from "../../src/eventstore/EventType.js"
import { isEnvelope } from "../../src/eventstore/Keyring.js"
import { TestPersistence, usingRealPostgres } from "../support/database.js"
import { countStatements } from "../support/statements.js"

const Attempted = defineEvent("delivery.attempted", {
  schema: Schema.Struct({ attempt: Schema.Int, status: Schema.Int })
})
const Contacted = defineEvent("delivery.contacted", {
  schema: Schema.Struct({ recipient: Schema.String, email: Personal(Schema.String), note: Schema.String }),
  subject: (d) => d.recipient
})

const deliveryId = () => `delivery-${randomUUID()}`
const attempted = (attempt: number, status = 200) => ({ eventType: Attempted, data: { attempt, status } })

const input = (
  streamId: string,
  expectedVersion: ExpectedVersion,
  events: AppendInput["events"] = [attempted(1)]
): AppendInput => ({ streamId, streamType: "delivery", expectedVersion, events })

const versionOf = (streamId: string) =>
  Effect.flatMap(EventStore, (store) =>
    Effect.map(store.streamInfo(streamId), (info) => Option.map(info, (i) => i.version))
  )

const countEvents = (streamIds: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{
        n: number
      }>`SELECT count(*)::int AS n FROM event_store.events WHERE stream_id = ANY(${streamIds})`,
      (rows) => rows[0]?.n ?? -1
    )
  )

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })(
  "EventStore appendMany and readStreams",
  (it) => {
    it.effect("appends to several new streams in one statement: versions, positions, one transaction", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const [a, b, c] = [deliveryId(), deliveryId(), deliveryId()]
        const { result, statements } = yield* countStatements(
          store.appendMany([
            input(a, "no_stream"),
            input(b, "no_stream", [attempted(1), attempted(2, 500), attempted(3)]),
            input(c, 0, [attempted(1, 404)])
          ])
        )
        expect(statements).toBe(1)
        expect(result.map((r) => [r.streamId, r.version])).toEqual([
          [a, 1],
          [b, 3],
          [c, 1]
        ])
        // Positions ascend in input order, stream by stream and event by event.
        const positions = result.flatMap((r) => r.positions)
        expect(positions).toHaveLength(5)
        for (let i = 1; i < positions.length; i++)
          expect(positions[i] ?? 0).toBeGreaterThan(positions[i - 1] ?? 0)
        for (const r of result) {
          expect(r.firstPosition).toBe(r.positions[0])
          expect(r.lastPosition).toBe(r.positions[r.positions.length - 1])
          expect(r.eventIds).toHaveLength(r.positions.length)
          for (const eventId of r.eventIds) expect(eventId).toMatch(UUID_PATTERN)
          expect(r.transactionId).toMatch(/^\d+$/)
          expect(r.transactionId).toBe(result[0]?.transactionId)
          expect(r.recordedAt).toBe(result[0]?.recordedAt)
        }

        const streamB = yield* store.readStream(b)
        expect(streamB.map((e) => e.streamVersion)).toEqual([1, 2, 3])
        expect(streamB.map((e) => e.globalPosition)).toEqual(result[1]?.positions)
        expect(streamB.map((e) => e.eventId)).toEqual(result[1]?.eventIds)
        expect(streamB.map((e) => e.data)).toEqual([
          { attempt: 1, status: 200 },
          { attempt: 2, status: 500 },
          { attempt: 3, status: 200 }
        ])
        for (const e of streamB) {
          expect(e.transactionId).toBe(result[1]?.transactionId)
          expect(e.recordedAt.getTime()).toBe(result[1]?.recordedAt.getTime())
        }

        const read = yield* countStatements(
          store.readStreams([{ streamId: c }, { streamId: a }, { streamId: b }])
        )
        expect(read.statements).toBe(1)
        expect([...read.result.keys()]).toEqual([c, a, b])
        expect(read.result.get(a)?.map((e) => [e.streamId, e.streamVersion, e.eventId])).toEqual([
          [a, 1, result[0]?.eventIds[0]]
        ])
        expect(read.result.get(b)).toEqual(streamB)
        expect(read.result.get(c)?.map((e) => e.data)).toEqual([{ attempt: 1, status: 404 }])
        expect(Option.map(yield* store.streamInfo(c), (i) => [i.streamType, i.version])).toEqual(
          Option.some(["delivery", 1])
        )
      })
    )

    it.effect("mixes expected versions: exact on existing streams, no_stream and any on new ones", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const [existing, other, fresh, anyNew] = [deliveryId(), deliveryId(), deliveryId(), deliveryId()]
        yield* store.append(input(existing, "no_stream", [attempted(1), attempted(2)]))
        yield* store.append(input(other, "no_stream", [attempted(1)]))
        const result = yield* store.appendMany([
          input(existing, 2, [attempted(3)]),
          input(fresh, "no_stream", [attempted(1), attempted(2)]),
          input(other, "any", [attempted(2), attempted(3)]),
          input(anyNew, "any")
        ])
        expect(result.map((r) => [r.streamId, r.version, r.positions.length])).toEqual([
          [existing, 3, 1],
          [fresh, 2, 2],
          [other, 3, 2],
          [anyNew, 1, 1]
        ])
        expect((yield* store.readStream(existing)).map((e) => e.streamVersion)).toEqual([1, 2, 3])
        expect((yield* store.readStream(other)).map((e) => e.data)).toEqual([
          { attempt: 1, status: 200 },
          { attempt: 2, status: 200 },
          { attempt: 3, status: 200 }
        ])
        expect(yield* versionOf(fresh)).toEqual(Option.some(2))
        // A second round continues every stream.
        const next = yield* store.appendMany(result.map((r) => input(r.streamId, r.version)))
        expect(next.map((r) => r.version)).toEqual([4, 3, 4, 2])
        expect(next[0]?.firstPosition).toBeGreaterThan(result[3]?.lastPosition ?? Number.POSITIVE_INFINITY)
      })
    )

    it.effect("empty input appends nothing and sends no SQL", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const { result, statements } = yield* countStatements(store.appendMany([]))
        expect(result).toEqual([])
        expect(statements).toBe(0)
      })
    )

    it.effect("a wrong expected version on one stream fails the whole call: nothing of it is appended", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const [existing, a, b] = [deliveryId(), deliveryId(), deliveryId()]
        yield* store.append(input(existing, "no_stream", [attempted(1), attempted(2)]))

        const stale = yield* Effect.flip(
          store.appendMany([
            input(a, "no_stream"),
            input(existing, 5),
            input(b, "any", [attempted(1), attempted(2)])
          ])
        )
        expect(stale).toMatchObject({
          _tag: "WrongExpectedVersion",
          streamId: existing,
          expected: 5,
          actual: 2
        })
        if (stale._tag === "WrongExpectedVersion") expect(stale.message).toContain("actual 2")

        const exists = yield* Effect.flip(store.appendMany([input(a, "any"), input(existing, "no_stream")]))
        expect(exists).toMatchObject({
          _tag: "WrongExpectedVersion",
          streamId: existing,
          expected: "no_stream",
          actual: 2
        })
        const zero = yield* Effect.flip(store.appendMany([input(existing, 0), input(b, "any")]))
        expect(zero).toMatchObject({
          _tag: "WrongExpectedVersion",
          streamId: existing,
          expected: 0,
          actual: 2
        })
        const missing = yield* Effect.flip(store.appendMany([input(existing, 2), input(a, 3)]))
        expect(missing).toMatchObject({ _tag: "WrongExpectedVersion", streamId: a, expected: 3, actual: 0 })

        // Nothing of any failed call was written: no new stream, no event, the existing stream unchanged.
        expect(yield* versionOf(a)).toEqual(Option.none())
        expect(yield* versionOf(b)).toEqual(Option.none())
        expect(yield* versionOf(existing)).toEqual(Option.some(2))
        expect(yield* countEvents([existing, a, b])).toBe(2)
        expect([...(yield* store.readStreams([{ streamId: a }, { streamId: b }])).keys()]).toEqual([])

        // With several conflicts the first in stream id order is reported, whatever the input order.
        const [first, second] = [`${existing}-a`, `${existing}-b`]
        yield* store.appendMany([input(first, "no_stream"), input(second, "no_stream")])
        const both = yield* Effect.flip(store.appendMany([input(second, 7), input(first, 9)]))
        expect(both).toMatchObject({ _tag: "WrongExpectedVersion", streamId: first, expected: 9, actual: 1 })

        // The streams are still appendable afterwards.
        const ok = yield* store.appendMany([input(existing, 2), input(a, "no_stream")])
        expect(ok.map((r) => r.version)).toEqual([3, 1])
      })
    )

    it.effect(
      "invalid input fails before any SQL: a stream twice, no events, a bad expected version or id",
      () =>
        Effect.gen(function* () {
          const store = yield* EventStore
          const [a, b] = [deliveryId(), deliveryId()]
          const twice = yield* countStatements(
            Effect.flip(store.appendMany([input(a, "no_stream"), input(b, "any"), input(a, 1)]))
          )
          expect(twice.result).toMatchObject({ _tag: "InvalidAppend", streamId: a })
          expect(twice.statements).toBe(0)
          expect(yield* Effect.flip(store.appendMany([input(a, "any"), input(b, "any", [])]))).toMatchObject({
            _tag: "InvalidAppend",
            streamId: b
          })
          expect(yield* Effect.flip(store.appendMany([input(a, "any"), input(b, -1)]))).toMatchObject({
            _tag: "InvalidAppend",
            streamId: b
          })
          expect(
            yield* Effect.flip(store.appendMany([input(a, "any"), input("has space", "any")]))
          ).toMatchObject({ _tag: "InvalidStreamId", streamId: "has space" })
          expect(yield* countEvents([a, b])).toBe(0)
          expect(yield* versionOf(a)).toEqual(Option.none())
        })
    )

    it.effect("a reused event id fails with DuplicateEvent naming its stream; nothing is appended", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const [a, b, c] = [deliveryId(), deliveryId(), deliveryId()]
        const eventId = randomUUID()
        yield* store.append(input(a, "no_stream", [{ ...attempted(1), id: eventId }]))

        const error = yield* Effect.flip(
          store.appendMany([
            input(b, "no_stream"),
            input(c, "no_stream", [attempted(1), { ...attempted(2), id: eventId }])
          ])
        )
        expect(error).toMatchObject({ _tag: "DuplicateEvent", streamId: c })
        // One id on two streams of the same call.
        const shared = randomUUID()
        const inCall = yield* Effect.flip(
          store.appendMany([
            input(b, "no_stream", [{ ...attempted(1), id: shared }]),
            input(c, "no_stream", [{ ...attempted(1), id: shared }])
          ])
        )
        expect(inCall._tag).toBe("DuplicateEvent")

        expect(yield* versionOf(b)).toEqual(Option.none())
        expect(yield* versionOf(c)).toEqual(Option.none())
        expect(yield* versionOf(a)).toEqual(Option.some(1))
        expect(yield* countEvents([a, b, c])).toBe(1)
      })
    )

    it.effect("personal fields are sealed at rest and decrypted by readStreams and readStream", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const sql = yield* SqlClient.SqlClient
        const [a, b] = [deliveryId(), deliveryId()]
        const [ann, bob] = [`recipient-${randomUUID()}`, `recipient-${randomUUID()}`]
        const contacted = (recipient: string, email: string) => ({
          eventType: Contacted,
          data: { recipient, email, note: "sent" }
        })
        yield* store.appendMany([
          input(a, "no_stream", [contacted(ann, "ann@example.com"), attempted(1)]),
          input(b, "no_stream", [contacted(bob, "bob@example.com")])
        ])

        const raw = yield* sql<{ text: string; data: Record<string, unknown> }>`
        SELECT data::text AS text, data FROM event_store.events
         WHERE stream_id IN (${a}, ${b}) AND event_type = 'delivery.contacted' ORDER BY global_position`
        expect(raw).toHaveLength(2)
        expect(raw[0]?.text).not.toContain("ann@example.com")
        expect(raw[1]?.text).not.toContain("bob@example.com")
        expect(isEnvelope(raw[0]?.data.email)).toBe(true)
        expect(raw[0]?.data.note).toBe("sent")

        const read = yield* countStatements(store.readStreams([{ streamId: a }, { streamId: b }]))
        // One query for the events + one key lookup for the whole batch.
        expect(read.statements).toBe(2)
        expect(read.result.get(a)?.map((e) => e.data)).toEqual([
          { recipient: ann, email: "ann@example.com", note: "sent" },
          { attempt: 1, status: 200 }
        ])
        expect(read.result.get(b)?.map((e) => e.data)).toEqual([
          { recipient: bob, email: "bob@example.com", note: "sent" }
        ])
        expect((yield* store.readStream(b)).map((e) => e.data)).toEqual(
          read.result.get(b)?.map((e) => e.data)
        )
      })
    )

    it.effect("readStreams: per-stream fromVersion, missing streams absent, empty input without SQL", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const [a, b, c, missing] = [deliveryId(), deliveryId(), deliveryId(), deliveryId()]
        yield* store.appendMany([
          input(a, "no_stream", [attempted(1), attempted(2), attempted(3)]),
          input(b, "no_stream", [attempted(1), attempted(2)]),
          input(c, "no_stream")
        ])
        const read = yield* store.readStreams([
          { streamId: a, fromVersion: 1 },
          { streamId: missing },
          { streamId: b },
          { streamId: c, fromVersion: 1 }
        ])
        expect([...read.keys()]).toEqual([a, b, c])
        expect(read.get(a)?.map((e) => e.streamVersion)).toEqual([2, 3])
        expect(read.get(b)?.map((e) => e.streamVersion)).toEqual([1, 2])
        // An existing stream with nothing after its fromVersion is present and empty, like readStream.
        expect(read.get(c)).toEqual([])
        expect(yield* store.readStream(c, { fromVersion: 1 })).toEqual([])
        expect(read.has(missing)).toBe(false)
        // The events are exactly what readStream returns.
        expect(read.get(a)).toEqual(yield* store.readStream(a, { fromVersion: 1 }))

        // Only missing streams: an empty map.
        expect((yield* store.readStreams([{ streamId: missing }])).size).toBe(0)
        // A stream asked for twice is read once, from the lower fromVersion.
        const twice = yield* store.readStreams([
          { streamId: a, fromVersion: 2 },
          { streamId: a, fromVersion: 1 }
        ])
        expect([...twice.keys()]).toEqual([a])
        expect(twice.get(a)?.map((e) => e.streamVersion)).toEqual([2, 3])

        const empty = yield* countStatements(store.readStreams([]))
        expect(empty.result.size).toBe(0)
        expect(empty.statements).toBe(0)
      })
    )

    it.effect(
      "inside a caller's transaction it joins it: commits with it, and a conflict rolls it all back",
      () =>
        Effect.gen(function* () {
          const store = yield* EventStore
          const sql = yield* SqlClient.SqlClient
          const [existing, a, b] = [deliveryId(), deliveryId(), deliveryId()]
          yield* store.append(input(existing, "no_stream"))

          const committed = yield* sql.withTransaction(
            Effect.gen(function* () {
              const single = yield* store.append(input(a, "no_stream"))
              const many = yield* store.appendMany([input(existing, 1), input(b, "no_stream")])
              return { single, many }
            })
          )
          expect(committed.many.map((r) => r.transactionId)).toEqual([
            committed.single.transactionId,
            committed.single.transactionId
          ])
          expect(committed.many.map((r) => r.version)).toEqual([2, 1])

          const [c, d] = [deliveryId(), deliveryId()]
          const error = yield* Effect.flip(
            sql.withTransaction(
              Effect.gen(function* () {
                yield* store.append(input(c, "no_stream"))
                yield* store.appendMany([input(d, "no_stream"), input(existing, 1)])
              })
            )
          )
          expect(error).toMatchObject({
            _tag: "WrongExpectedVersion",
            streamId: existing,
            expected: 1,
            actual: 2
          })
          // The whole transaction rolled back: the single append before the conflict too.
          expect(yield* versionOf(c)).toEqual(Option.none())
          expect(yield* versionOf(d)).toEqual(Option.none())
          expect(yield* versionOf(existing)).toEqual(Option.some(2))
          expect(yield* countEvents([existing, a, b, c, d])).toBe(4)
        })
    )

    it.effect("racing calls on overlapping streams in different orders all land, without deadlocks", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const streams = Array.from({ length: 12 }, () => deliveryId())
        const racers = 6
        const shuffled = (offset: number) =>
          streams.map((_, i) => streams[(i * 5 + offset) % streams.length] ?? "")
        const results = yield* Effect.all(
          Array.from({ length: racers }, (_, r) =>
            store.appendMany(shuffled(r).map((id) => input(id, "any", [attempted(r)])))
          ),
          { concurrency: "unbounded" }
        )
        expect(results).toHaveLength(racers)
        const read = yield* store.readStreams(streams.map((streamId) => ({ streamId })))
        for (const id of streams) {
          const events = read.get(id) ?? []
          expect(events.map((e) => e.streamVersion)).toEqual(Array.from({ length: racers }, (_, i) => i + 1))
          expect(new Set(events.map((e) => (e.data as { attempt: number }).attempt)).size).toBe(racers)
        }
      })
    )

    it.effect.skipIf(!usingRealPostgres)(
      "an ordering conflict fails a call inside a transaction, and a standalone call retries it (PostgreSQL)",
      () =>
        Effect.gen(function* () {
          const store = yield* EventStore
          const sql = yield* SqlClient.SqlClient
          // `a` sorts before `b`: the call below locks `a` first.
          const base = deliveryId()
          const [a, b] = [`${base}-1`, `${base}-2`]
          yield* store.appendMany([input(a, "no_stream"), input(b, "no_stream")])

          // Inside a transaction: an older transaction appends after a newer one committed.
          const started = yield* Deferred.make<void>()
          const proceed = yield* Deferred.make<void>()
          const older = yield* Effect.fork(
            Effect.flip(
              sql.withTransaction(
                Effect.gen(function* () {
                  yield* sql`SELECT pg_current_xact_id()`
                  yield* Deferred.succeed(started, undefined)
                  yield* Deferred.await(proceed)
                  return yield* store.appendMany([input(a, "any"), input(b, "any")])
                })
              )
            )
          )
          yield* Deferred.await(started)
          yield* store.append(input(b, "any"))
          yield* Deferred.succeed(proceed, undefined)
          expect(yield* Fiber.join(older)).toMatchObject({ _tag: "StreamOrderingConflict", streamId: b })
          expect(yield* versionOf(a)).toEqual(Option.some(1))
          expect(yield* versionOf(b)).toEqual(Option.some(2))

          // Standalone: the call takes its xid, waits for a lock on `a` held by an older transaction,
          // meanwhile a newer transaction appends to `b` — the guard refuses, the call retries, and lands.
          const holding = yield* Deferred.make<void>()
          const release = yield* Deferred.make<void>()
          const holder = yield* Effect.fork(
            sql.withTransaction(
              Effect.gen(function* () {
                yield* store.append(input(a, 1))
                yield* Deferred.succeed(holding, undefined)
                yield* Deferred.await(release)
              })
            )
          )
          yield* Deferred.await(holding)
          const call = yield* Effect.fork(
            countStatements(store.appendMany([input(a, "any"), input(b, "any")]))
          )
          // Wait until the call is blocked on the lock.
          for (;;) {
            const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock'`
            if ((row?.n ?? 0) > 0) break
            yield* Effect.sleep("10 millis")
          }
          const newer = yield* store.append(input(b, "any"))
          yield* Deferred.succeed(release, undefined)
          yield* Fiber.join(holder)
          const { result, statements } = yield* Fiber.join(call)
          expect(statements).toBe(2)
          expect(result.map((r) => r.version)).toEqual([3, 4])
          expect(BigInt(result[0]?.transactionId ?? "0")).toBeGreaterThan(BigInt(newer.transactionId))
        })
    )
  }
)
