/**
 * Append, readStream, readAll, streamInfo and head: positions, versions, metadata, the Effect Clock,
 * filters and checkpoints — on a fresh database (PGlite, or PostgreSQL with DATABASE_URL).
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect, Option, Schema, TestClock, TestContext } from "effect"
import { expect } from "vitest"
import { UUID_PATTERN, uuidv7Millis } from "../../src/base/Uuid.js"
import * as Checkpoint from "../../src/eventstore/Checkpoint.js"
import {
  checkpointOf,
  type EventMetadata,
  EventStore,
  type StoredEvent
} from "../../src/eventstore/EventStore.js"
import { defineEvent, Personal } from "../../src/eventstore/EventType.js"
import { TestPersistence } from "../support/database.js"
import { countStatements } from "../support/statements.js"

const Opened = defineEvent("account.opened", {
  schema: Schema.Struct({ owner: Schema.String, currency: Schema.String })
})
const Deposited = defineEvent("account.deposited", {
  schema: Schema.Struct({ amount: Schema.Int.pipe(Schema.positive()) })
})
const Closed = defineEvent("account.closed", { schema: Schema.Struct({ reason: Schema.String }) })
const Noted = defineEvent("account.noted", {
  schema: Schema.Struct({
    note: Schema.String,
    extra: Schema.Record({ key: Schema.String, value: Schema.Unknown })
  })
})

const accountId = () => `account-${randomUUID()}`
const opened = (owner = "ann") => ({ eventType: Opened, data: { owner, currency: "EUR" } })
const deposited = (amount: number) => ({ eventType: Deposited, data: { amount } })

const Profiled = defineEvent("account.profiled", {
  schema: Schema.Struct({
    owner: Schema.String,
    email: Personal(Schema.String),
    phone: Personal(Schema.String),
    tier: Schema.String
  }),
  subject: (d) => d.owner
})

/** Reads the whole feed from `after` and returns every event plus the final checkpoint. */
const drain = (after: Checkpoint.Checkpoint = Checkpoint.origin, limit = 1000) =>
  Effect.gen(function* () {
    const store = yield* EventStore
    const events: StoredEvent[] = []
    let checkpoint = after
    for (;;) {
      const batch = yield* store.readAll({ after: checkpoint, limit })
      events.push(...batch.events)
      checkpoint = batch.checkpoint
      if (batch.events.length < limit) return { events, checkpoint }
    }
  })

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })("EventStore append and read", (it) => {
  it.effect("appends to a new stream and reads it back with versions and positions", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const id = accountId()
      const r = yield* store.append({
        streamId: id,
        streamType: "account",
        expectedVersion: "no_stream",
        events: [opened(), deposited(100), deposited(250)]
      })
      expect(r.streamId).toBe(id)
      expect(r.version).toBe(3)
      expect(r.lastPosition - r.firstPosition).toBe(2)
      expect(r.eventIds).toHaveLength(3)
      expect(new Set(r.eventIds).size).toBe(3)
      for (const eventId of r.eventIds) expect(eventId).toMatch(UUID_PATTERN)
      expect(r.transactionId).toMatch(/^\d+$/)

      const events = yield* store.readStream(id)
      expect(events.map((e) => e.streamVersion)).toEqual([1, 2, 3])
      expect(events.map((e) => e.globalPosition)).toEqual([
        r.firstPosition,
        r.firstPosition + 1,
        r.lastPosition
      ])
      expect(events.map((e) => e.eventId)).toEqual(r.eventIds)
      expect(events.map((e) => e.type)).toEqual(["account.opened", "account.deposited", "account.deposited"])
      expect(events.map((e) => e.data)).toEqual([
        { owner: "ann", currency: "EUR" },
        { amount: 100 },
        { amount: 250 }
      ])
      for (const e of events) {
        expect(e.streamId).toBe(id)
        expect(e.schemaVersion).toBe(1)
        expect(e.transactionId).toBe(r.transactionId)
        expect(e.metadata).toEqual({})
      }

      const info = yield* store.streamInfo(id)
      expect(Option.map(info, (i) => [i.streamType, i.version])).toEqual(Option.some(["account", 3]))
      expect(yield* store.streamInfo(accountId())).toEqual(Option.none())
    })
  )

  it.effect("continues a stream: versions are contiguous, positions grow, fromVersion reads the tail", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const id = accountId()
      const first = yield* store.append({
        streamId: id,
        streamType: "account",
        expectedVersion: "no_stream",
        events: [opened(), deposited(1)]
      })
      const second = yield* store.append({
        streamId: id,
        streamType: "account",
        expectedVersion: 2,
        events: [deposited(2), { eventType: Closed, data: { reason: "done" } }]
      })
      expect(second.version).toBe(4)
      expect(second.firstPosition).toBeGreaterThan(first.lastPosition)
      expect(second.transactionId).not.toBe(first.transactionId)

      const tail = yield* store.readStream(id, { fromVersion: 2 })
      expect(tail.map((e) => [e.streamVersion, e.type])).toEqual([
        [3, "account.deposited"],
        [4, "account.closed"]
      ])
      expect(yield* store.readStream(id, { fromVersion: 4 })).toEqual([])
      expect((yield* store.readStream(id)).map((e) => e.streamVersion)).toEqual([1, 2, 3, 4])
    })
  )

  it.effect("keeps a caller-supplied event id", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const id = accountId()
      const eventId = randomUUID()
      const r = yield* store.append({
        streamId: id,
        streamType: "account",
        expectedVersion: "no_stream",
        events: [{ ...opened(), id: eventId }]
      })
      expect(r.eventIds).toEqual([eventId])
      expect((yield* store.readStream(id))[0]?.eventId).toBe(eventId)
    })
  )

  it.effect("round-trips metadata (correlation, causation, actor, request, trace, extra keys)", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const id = accountId()
      const metadata: EventMetadata = {
        correlationId: randomUUID(),
        causationId: randomUUID(),
        actor: { type: "api_key", id: "key_123" },
        requestId: "req_abc",
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        tenant: "shop-1",
        nested: { a: [1, 2, { b: null }], unicode: "Grüße ✓" }
      }
      const mark = yield* drain()
      yield* store.append({
        streamId: id,
        streamType: "account",
        expectedVersion: "any",
        events: [opened(), deposited(5)],
        metadata
      })
      const events = yield* store.readStream(id)
      expect(events.map((e) => e.metadata)).toEqual([metadata, metadata])
      const feed = yield* drain(mark.checkpoint)
      expect(feed.events.map((e) => e.metadata)).toEqual([metadata, metadata])
    })
  )

  it.effect("stamps recordedAt and event ids with Effect's Clock (TestClock)", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const id = accountId()
      const t1 = Date.parse("2030-01-02T03:04:05.678Z")
      yield* TestClock.setTime(t1)
      const r1 = yield* store.append({
        streamId: id,
        streamType: "account",
        expectedVersion: "no_stream",
        events: [opened()]
      })
      expect(r1.recordedAt.getTime()).toBe(t1)
      expect(uuidv7Millis(r1.eventIds[0] ?? "")).toBe(t1)

      yield* TestClock.adjust("90 minutes")
      const t2 = t1 + 90 * 60_000
      const r2 = yield* store.append({
        streamId: id,
        streamType: "account",
        expectedVersion: 1,
        events: [deposited(7)]
      })
      expect(r2.recordedAt.getTime()).toBe(t2)

      const events = yield* store.readStream(id)
      expect(events.map((e) => e.recordedAt.getTime())).toEqual([t1, t2])
      const info = yield* store.streamInfo(id)
      expect(Option.map(info, (i) => [i.createdAt.getTime(), i.updatedAt.getTime()])).toEqual(
        Option.some([t1, t2])
      )
      const head = yield* store.head
      expect(head.position).toBe(r2.lastPosition)
      expect(Option.map(head.recordedAt, (d) => d.getTime())).toEqual(Option.some(t2))
    }).pipe(Effect.provide(TestContext.TestContext))
  )

  it.effect("readAll returns committed events in feed order and pages by checkpoint", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const mark = yield* drain()
      const ids = [accountId(), accountId(), accountId()]
      const appended: string[] = []
      for (let round = 0; round < 4; round++) {
        for (const id of ids) {
          const r = yield* store.append({
            streamId: id,
            streamType: "account",
            expectedVersion: "any",
            events: round === 0 ? [opened(id)] : [deposited(round), deposited(round + 10)]
          })
          appended.push(...r.eventIds)
        }
      }
      // One page.
      const all = yield* store.readAll({ after: mark.checkpoint, limit: 1000 })
      expect(all.events.map((e) => e.eventId)).toEqual(appended)
      const last = all.events[all.events.length - 1]
      expect(last && Checkpoint.format(all.checkpoint)).toBe(
        last &&
          Checkpoint.format({
            xid: last.transactionId,
            position: last.globalPosition
          })
      )
      // Many small pages give exactly the same sequence.
      const paged = yield* drain(mark.checkpoint, 4)
      expect(paged.events.map((e) => e.eventId)).toEqual(appended)
      expect(paged.checkpoint).toEqual(all.checkpoint)
      // A limit is honoured.
      expect((yield* store.readAll({ after: mark.checkpoint, limit: 3 })).events).toHaveLength(3)
      // Nothing after the end: the checkpoint stays where it was.
      const empty = yield* store.readAll({ after: all.checkpoint, limit: 10 })
      expect(empty.events).toEqual([])
      expect(empty.checkpoint).toEqual(all.checkpoint)
      // Feed order is (transaction id, position); per stream it agrees with version order.
      for (const id of ids) {
        const versions = all.events.filter((e) => e.streamId === id).map((e) => e.streamVersion)
        expect(versions).toEqual([1, 2, 3, 4, 5, 6, 7])
      }
      // Checkpoints of successive events compare strictly increasing.
      for (let i = 1; i < all.events.length; i++) {
        const prev = all.events[i - 1]
        const cur = all.events[i]
        if (!prev || !cur) continue
        expect(
          Checkpoint.compare(
            { xid: prev.transactionId, position: prev.globalPosition },
            { xid: cur.transactionId, position: cur.globalPosition }
          )
        ).toBe(-1)
      }
    })
  )

  it.effect("readAll filters by event types and by stream id", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const mark = yield* drain()
      const a = accountId()
      const b = accountId()
      yield* store.append({
        streamId: a,
        streamType: "account",
        expectedVersion: "no_stream",
        events: [opened("a"), deposited(1)]
      })
      yield* store.append({
        streamId: b,
        streamType: "account",
        expectedVersion: "no_stream",
        events: [opened("b"), deposited(2), { eventType: Closed, data: { reason: "x" } }]
      })
      yield* store.append({ streamId: a, streamType: "account", expectedVersion: 2, events: [deposited(3)] })

      const byType = yield* store.readAll({
        after: mark.checkpoint,
        limit: 100,
        eventTypes: ["account.deposited"]
      })
      expect(byType.events.map((e) => [e.streamId, e.data])).toEqual([
        [a, { amount: 1 }],
        [b, { amount: 2 }],
        [a, { amount: 3 }]
      ])
      const twoTypes = yield* store.readAll({
        after: mark.checkpoint,
        limit: 100,
        eventTypes: ["account.opened", "account.closed"]
      })
      expect(twoTypes.events.map((e) => e.type)).toEqual([
        "account.opened",
        "account.opened",
        "account.closed"
      ])
      const byStream = yield* store.readAll({ after: mark.checkpoint, limit: 100, streamId: a })
      expect(byStream.events.map((e) => e.streamVersion)).toEqual([1, 2, 3])
      expect(byStream.events.every((e) => e.streamId === a)).toBe(true)
      const both = yield* store.readAll({
        after: mark.checkpoint,
        limit: 100,
        streamId: b,
        eventTypes: ["account.deposited"]
      })
      expect(both.events.map((e) => e.data)).toEqual([{ amount: 2 }])
      // The checkpoint of a filtered read resumes after the last match, skipping nothing that matches.
      const first = yield* store.readAll({
        after: mark.checkpoint,
        limit: 1,
        eventTypes: ["account.deposited"]
      })
      const rest = yield* store.readAll({
        after: first.checkpoint,
        limit: 100,
        eventTypes: ["account.deposited"]
      })
      expect([...first.events, ...rest.events].map((e) => e.eventId)).toEqual(
        byType.events.map((e) => e.eventId)
      )
      // An empty type list means no type filter.
      const noFilter = yield* store.readAll({ after: mark.checkpoint, limit: 100, eventTypes: [] })
      expect(noFilter.events).toHaveLength(6)
      // Nothing matches: the checkpoint still moves past every event scanned (none is read again).
      const none = yield* store.readAll({ after: mark.checkpoint, limit: 100, eventTypes: ["nope.never"] })
      expect(none.events).toEqual([])
      const lastAppended = noFilter.events[noFilter.events.length - 1]
      expect(
        lastAppended && Checkpoint.compare(none.checkpoint, checkpointOf(lastAppended))
      ).toBeGreaterThanOrEqual(0)
      expect(
        yield* store.readAll({ after: none.checkpoint, limit: 100, eventTypes: ["account.deposited"] })
      ).toMatchObject({ events: [] })
    })
  )

  it.effect("checkpoints of real events survive format → parse and resume the feed", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const sql = yield* SqlClient.SqlClient
      const mark = yield* drain()
      const id = accountId()
      yield* store.append({
        streamId: id,
        streamType: "account",
        expectedVersion: "no_stream",
        events: [opened(), deposited(1), deposited(2)]
      })
      const firstTwo = yield* store.readAll({ after: mark.checkpoint, limit: 2 })
      const text = Checkpoint.format(firstTwo.checkpoint)
      expect(text).toMatch(/^\d{20}:\d{20}$/)
      expect(Schema.is(Checkpoint.CheckpointString)(text)).toBe(true)
      const parsed = yield* Checkpoint.parse(text)
      expect(parsed).toEqual(firstTwo.checkpoint)
      const rest = yield* store.readAll({ after: parsed, limit: 10 })
      expect(rest.events.map((e) => e.streamVersion)).toEqual([3])
      // The stored xid really is the transaction id column.
      const [row] = yield* sql<{ xid: string }>`SELECT transaction_id::text AS xid FROM event_store.events
        WHERE stream_id = ${id} AND stream_version = 3`
      expect(rest.events[0]?.transactionId).toBe(row?.xid)
    })
  )

  it.effect(
    "an append is one SQL statement (one round trip), personal data included (its keys ride on it)",
    () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const id = accountId()
        const plain = yield* countStatements(
          store.append({
            streamId: id,
            streamType: "account",
            expectedVersion: "no_stream",
            events: [opened(), deposited(1), deposited(2)]
          })
        )
        expect(plain.result.version).toBe(3)
        expect(plain.statements).toBe(1)
        const next = yield* countStatements(
          store.append({ streamId: id, streamType: "account", expectedVersion: 3, events: [deposited(3)] })
        )
        expect(next.statements).toBe(1)
        // Two events with two personal fields each, one subject: the append creates the subject's key
        // the first time, and checks the key it sealed with afterwards, in its own statement.
        const owner = `owner-${randomUUID()}`
        const profiled = {
          eventType: Profiled,
          data: { owner, email: "a@example.com", phone: "+1", tier: "gold" }
        }
        const firstTime = yield* countStatements(
          store.append({
            streamId: id,
            streamType: "account",
            expectedVersion: 4,
            events: [profiled, profiled]
          })
        )
        expect(firstTime.statements).toBe(1)
        const personal = yield* countStatements(
          store.append({
            streamId: id,
            streamType: "account",
            expectedVersion: 6,
            events: [profiled, profiled]
          })
        )
        expect(personal.statements).toBe(1)
        // readAll and readStream are one statement each.
        expect(
          (yield* countStatements(store.readAll({ after: Checkpoint.origin, limit: 10 }))).statements
        ).toBe(1)
        // readStream of events with personal data: their key, which this process just wrote with,
        // decrypts without a lookup once the append committed (another process looks it up once).
        expect((yield* countStatements(store.readStream(id))).statements).toBe(1)
      })
  )

  it.effect(
    "payloads round-trip exactly through readStream and readAll (quotes, escapes, unicode, numbers)",
    () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const id = accountId()
        const mark = yield* drain()
        const tricky = {
          note: 'quote " backslash \\ newline \n tab \t slash / <script> ünïcødé 😀 \u2028',
          extra: {
            "key with spaces": [1, -0.5, 1.7976931348623157e308, 5e-324, 9007199254740991, null, true, false],
            nested: { empty: {}, list: [], deeper: [[{ a: "b" }]] },
            "": "empty key",
            json: '{"not":"parsed"}'
          }
        }
        yield* store.append({
          streamId: id,
          streamType: "account",
          expectedVersion: "no_stream",
          events: [{ eventType: Noted, data: tricky }]
        })
        const [fromStream] = yield* store.readStream(id)
        expect(fromStream?.data).toEqual(tricky)
        const feed = yield* drain(mark.checkpoint)
        expect(feed.events.map((e) => e.data)).toEqual([tricky])
        expect(feed.events[0]?.recordedAt).toBeInstanceOf(Date)
      })
  )
})
