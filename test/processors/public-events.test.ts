import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { expect } from "vitest"
import * as Checkpoint from "../../src/eventstore/Checkpoint.js"
import { origin } from "../../src/eventstore/Checkpoint.js"
import {
  insertPublicEvents,
  type PublicEventRow,
  readPublicEvents
} from "../../src/eventstore/PublicEvents.js"
import { TestPersistence, usingRealPostgres } from "../support/database.js"
import { eventually } from "./helpers.js"

const row = (n: number, overrides: Partial<PublicEventRow> = {}): PublicEventRow => ({
  id: `evt_${n}`,
  type: "order.created",
  data: { n },
  occurredAt: new Date(Date.UTC(2026, 0, 1, 0, 0, n)),
  sourceEventId: `00000000-0000-7000-8000-${String(n).padStart(12, "0")}`,
  streamId: `order-${n}`,
  ...overrides
})

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })("PublicEvents", (it) => {
  it.effect("inserts many rows in one statement, in order, and reads them back after a checkpoint", () =>
    Effect.gen(function* () {
      yield* insertPublicEvents([])
      yield* insertPublicEvents([
        row(1, { subjectId: "cus_1" }),
        row(2, { type: "customer.updated", data: [1, "two", { three: 3 }] }),
        row(3, { data: null })
      ])
      // A writing transaction still running anywhere on the server hides newer commits for a moment.
      yield* eventually(
        Effect.map(readPublicEvents({ after: origin, limit: 10 }), (r) => r.events.length === 3)
      )
      const first = yield* readPublicEvents({ after: origin, limit: 2 })
      expect(first.events.map((e) => e.id)).toEqual(["evt_1", "evt_2"])
      const [e1, e2] = first.events
      expect(e1).toMatchObject({
        type: "order.created",
        data: { n: 1 },
        occurredAt: new Date(Date.UTC(2026, 0, 1, 0, 0, 1)),
        sourceEventId: "00000000-0000-7000-8000-000000000001",
        streamId: "order-1",
        subjectId: "cus_1"
      })
      expect(e2?.data).toEqual([1, "two", { three: 3 }])
      expect(e2?.subjectId).toBeNull()
      expect(e2?.position).toBeGreaterThan(e1?.position ?? Number.MAX_SAFE_INTEGER)
      expect(first.checkpoint).toEqual({ xid: e2?.transactionId, position: e2?.position })

      const rest = yield* readPublicEvents({ after: first.checkpoint, limit: 10 })
      expect(rest.events.map((e) => [e.id, e.data])).toEqual([["evt_3", null]])
      const none = yield* readPublicEvents({ after: rest.checkpoint, limit: 10 })
      expect(none.events).toEqual([])
      expect(none.checkpoint).toEqual(rest.checkpoint)

      const typed = yield* readPublicEvents({ after: origin, limit: 10, types: ["customer.updated"] })
      expect(typed.events).toEqual([e2])
      // A filtered read that got fewer than its limit moves past everything it scanned (evt_3 too).
      expect(Checkpoint.compare(typed.checkpoint, rest.checkpoint)).toBeGreaterThanOrEqual(0)
      const nothing = yield* readPublicEvents({ after: origin, limit: 10, types: ["nope.never"] })
      expect(nothing.events).toEqual([])
      expect(Checkpoint.compare(nothing.checkpoint, rest.checkpoint)).toBeGreaterThanOrEqual(0)
      // A full batch ends at its last match: the next read resumes there.
      const one = yield* readPublicEvents({ after: origin, limit: 1, types: ["order.created"] })
      expect(one.events.map((e) => e.id)).toEqual(["evt_1"])
      expect(one.checkpoint).toEqual({ xid: e1?.transactionId, position: e1?.position })
      const next = yield* readPublicEvents({ after: one.checkpoint, limit: 10, types: ["order.created"] })
      expect(next.events.map((e) => e.id)).toEqual(["evt_3"])
    })
  )

  it.effect("a duplicate id fails the whole insert", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const exit = yield* Effect.exit(insertPublicEvents([row(10), row(1)]))
      expect(exit._tag).toBe("Failure")
      const rows = yield* sql`SELECT 1 FROM event_store.public_events WHERE id = 'evt_10'`
      expect(rows.length).toBe(0)
    })
  )

  it.effect.skipIf(!usingRealPostgres)("does not skip a row whose transaction commits late", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const start = (yield* readPublicEvents({ after: origin, limit: 1000 })).checkpoint
      const inserted = yield* Deferred.make<void>()
      const commit = yield* Deferred.make<void>()
      const slow = yield* Effect.fork(
        sql.withTransaction(
          Effect.zipRight(
            insertPublicEvents([row(20)]),
            Effect.zipRight(Deferred.succeed(inserted, undefined), Deferred.await(commit))
          )
        )
      )
      yield* Deferred.await(inserted)
      yield* insertPublicEvents([row(21)])
      // evt_21 is committed, but evt_20's transaction is older and still open: nothing is visible yet.
      expect((yield* readPublicEvents({ after: start, limit: 10 })).events).toEqual([])
      yield* Deferred.succeed(commit, undefined)
      yield* Fiber.join(slow)
      yield* eventually(
        Effect.map(readPublicEvents({ after: start, limit: 10 }), (r) => r.events.length === 2)
      )
      const all = yield* readPublicEvents({ after: start, limit: 10 })
      expect(all.events.map((e) => e.id)).toEqual(["evt_20", "evt_21"])
    })
  )
})
