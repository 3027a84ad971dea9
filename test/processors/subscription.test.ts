import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option, Ref, Schema, TestClock, TestServices } from "effect"
import { expect } from "vitest"
import { AppendSignal } from "../../src/eventstore/AppendSignal.js"
import { origin } from "../../src/eventstore/Checkpoint.js"
import { EventStore, type StoredEvent } from "../../src/eventstore/EventStore.js"
import { type AnyEventType, defineEvent } from "../../src/eventstore/EventType.js"
import { WrongExpectedVersion } from "../../src/eventstore/errors.js"
import { insertPublicEvents } from "../../src/eventstore/PublicEvents.js"
import { acquire, release } from "../../src/processors/Lease.js"
import { type BatchContext, subscriptionProcessor } from "../../src/processors/Subscription.js"
import { makeSupervisor } from "../../src/processors/Supervisor.js"
import { TestPersistence, usingRealPostgres } from "../support/database.js"
import { eventually, nudging, parked, withTestClock } from "./helpers.js"

const Probed = defineEvent("probe.happened", { schema: Schema.Struct({ n: Schema.Number }) })
const Other = defineEvent("probe.other_happened", { schema: Schema.Struct({ n: Schema.Number }) })
// One type per test that filters on it, so earlier tests' events stay out of its subscription.
const Zombied = defineEvent("probe.zombie_happened", { schema: Schema.Struct({ n: Schema.Number }) })
const Raced = defineEvent("probe.raced_happened", { schema: Schema.Struct({ n: Schema.Number }) })
const InFlight = defineEvent("probe.inflight_happened", { schema: Schema.Struct({ n: Schema.Number }) })

const setup = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`CREATE TABLE IF NOT EXISTS handled (
    subscription text NOT NULL, event_id text NOT NULL, stream_id text NOT NULL, position bigint NOT NULL,
    owner text NOT NULL, generation bigint NOT NULL)`
)

/** Appends one event per stream `<prefix>-<i>`, `concurrency` appends at a time. */
const appendMany = (
  prefix: string,
  count: number,
  options: { concurrency?: number; type?: AnyEventType } = {}
) =>
  Effect.flatMap(EventStore, (store) =>
    Effect.forEach(
      Array.from({ length: count }, (_, i) => i),
      (i) =>
        store.append({
          streamId: `${prefix}-${i}`,
          streamType: "probe",
          expectedVersion: "no_stream",
          events: [{ eventType: options.type ?? Probed, data: { n: i } }]
        }),
      { concurrency: options.concurrency ?? 1 }
    )
  )

/** A handler that records each event of streams `<prefix>-…` in `handled`, inside the batch transaction. */
const recordHandler =
  (prefix: string, calls?: Ref.Ref<ReadonlyArray<BatchContext>>) =>
  (
    events: ReadonlyArray<{ eventId: string; streamId: string; globalPosition: number }>,
    context: BatchContext
  ) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      if (calls) yield* Ref.update(calls, (all) => [...all, context])
      for (const e of events) {
        if (!e.streamId.startsWith(`${prefix}-`)) continue
        yield* sql`INSERT INTO handled VALUES (${context.subscriptionId}, ${e.eventId}, ${e.streamId},
          ${e.globalPosition}, ${context.owner}, ${context.generation})`
      }
    })

interface HandledRow {
  readonly eventId: string
  readonly streamId: string
  readonly position: number
  readonly owner: string
  readonly generation: number
}

const handled = (subscription: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (
      sql
    ) => sql<HandledRow>`SELECT event_id AS "eventId", stream_id AS "streamId", position, owner, generation
      FROM handled WHERE subscription = ${subscription} ORDER BY position`
  )

const handledCount = (subscription: string, n: number) =>
  Effect.map(handled(subscription), (r) => r.length >= n)

const subscriptionRow = (id: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ owner: string | null; generation: number; lastPosition: number; error: string | null }>`
      SELECT owner, generation, last_position AS "lastPosition", error FROM event_store.subscriptions
       WHERE subscription_id = ${id}`
  ).pipe(Effect.map((rows) => rows[0]))

const fast = { pollInterval: { min: "5 millis", max: "50 millis" }, acquireInterval: "50 millis" } as const

const expectEachOnce = (
  rows: ReadonlyArray<HandledRow>,
  appended: ReadonlyArray<{ eventIds: ReadonlyArray<string> }>
) => {
  const ids = rows.map((r) => r.eventId)
  expect(new Set(ids).size).toBe(ids.length)
  expect([...ids].sort()).toEqual(appended.flatMap((a) => a.eventIds).sort())
}

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })("subscriptionProcessor", (it) => {
  it.effect(
    "processes each event once, in global order, and resumes from its checkpoint after a restart",
    () =>
      Effect.gen(function* () {
        yield* setup
        const p = subscriptionProcessor({
          name: "resume",
          source: "events",
          owner: "node-a",
          batchSize: 3,
          ...fast,
          handle: recordHandler("resume")
        })
        const first = yield* appendMany("resume", 7)
        const fiber = yield* Effect.fork(p.run)
        yield* eventually(handledCount("resume", 7))
        yield* Fiber.interrupt(fiber)
        const afterStop = yield* subscriptionRow("resume")
        expect(afterStop?.owner).toBeNull()

        const second = yield* appendMany("resume-more", 4)
        const rows0 = yield* handled("resume")
        expect(rows0.length).toBe(7)
        const fiber2 = yield* Effect.fork(p.run)
        // Streams "resume-more-…" also start with "resume-": 11 in all, each once, in order.
        yield* eventually(handledCount("resume", 11))
        yield* Fiber.interrupt(fiber2)
        const rows = yield* handled("resume")
        expectEachOnce(rows, [...first, ...second])
        expect(rows.map((r) => r.position)).toEqual([...rows.map((r) => r.position)].sort((a, b) => a - b))
        expect(rows.slice(0, 7).every((r) => r.generation === 1)).toBe(true)
        expect(rows.slice(7).every((r) => r.generation === 2)).toBe(true)

        const status = yield* p.status
        expect(status.lagEvents).toBe(0)
        expect(status.lagSeconds).toBe(0)
        expect(status.owner).toBeNull()
        expect(status.status).toBe("running")
        const head = yield* Effect.flatMap(EventStore, (s) => s.head)
        expect(status.checkpoint.position).toBe(head.position)
      })
  )

  it.effect("a batch that loses a race on a stream runs again in place: no failure, each event once", () =>
    Effect.gen(function* () {
      yield* setup
      const attempts = yield* Ref.make(0)
      const record = recordHandler("raced")
      const p = subscriptionProcessor({
        name: "raced",
        source: "events",
        eventTypes: [Raced.type],
        owner: "node-a",
        batchSize: 10,
        ...fast,
        // Writes its rows, then loses a race twice (as a command whose stream another request
        // wrote meanwhile): those runs roll back; the third commits.
        handle: (events, context) =>
          Effect.gen(function* () {
            yield* record(events, context)
            const n = yield* Ref.updateAndGet(attempts, (k) => k + 1)
            if (n <= 2)
              return yield* new WrongExpectedVersion({ streamId: "raced-0", expected: 0, actual: 1 })
          })
      })
      const appended = yield* appendMany("raced", 3, { type: Raced })
      const fiber = yield* Effect.fork(p.run)
      yield* eventually(handledCount("raced", 3))
      // The processor never failed: its fiber still runs, and no error is recorded.
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      yield* Fiber.interrupt(fiber)
      expect(yield* Ref.get(attempts)).toBe(3)
      expectEachOnce(yield* handled("raced"), appended)
      expect((yield* subscriptionRow("raced"))?.error).toBeNull()
    })
  )

  it.effect("wakes up right after a local append instead of waiting for the poll interval", () =>
    withTestClock(
      Effect.gen(function* () {
        yield* setup
        const p = subscriptionProcessor({
          name: "wake",
          source: "events",
          eventTypes: [Other.type],
          owner: "node-a",
          pollInterval: { min: "1 hour", max: "1 hour" },
          handle: recordHandler("wake")
        })
        const fiber = yield* Effect.fork(p.run)
        yield* eventually(Effect.map(subscriptionRow("wake"), (r) => r?.owner === "node-a"))
        // The first (empty) read is done and the processor is parked in its one-hour wait (the lease
        // heartbeat sleeps only 5 s). The TestClock never moves here: only the append can wake it.
        yield* parked("1 hour")
        const appended = yield* appendMany("wake", 1, { type: Other })
        yield* eventually(handledCount("wake", 1), { timeout: "10 seconds" })
        yield* Fiber.interrupt(fiber)
        expectEachOnce(yield* handled("wake"), appended)
      })
    )
  )

  it.effect(
    "two instances compete for one lease: one processes, each event exactly once, the other takes over",
    () =>
      Effect.gen(function* () {
        yield* setup
        const calls = yield* Ref.make<ReadonlyArray<BatchContext>>([])
        const instance = (owner: string) =>
          subscriptionProcessor({
            name: "compete",
            source: "events",
            owner,
            batchSize: 5,
            ...fast,
            handle: recordHandler("compete", calls)
          })
        const a = yield* Effect.fork(instance("node-a").run)
        const b = yield* Effect.fork(instance("node-b").run)
        const appended = yield* appendMany("compete", usingRealPostgres ? 80 : 30, { concurrency: 4 })
        yield* eventually(handledCount("compete", appended.length))
        const rows = yield* handled("compete")
        expectEachOnce(rows, appended)
        const owners = new Set((yield* Ref.get(calls)).map((c) => c.owner))
        expect(owners.size).toBe(1)
        const active = [...owners][0]
        expect((yield* subscriptionRow("compete"))?.owner).toBe(active)

        // Stop the active instance: the standby takes the lease and continues from the checkpoint.
        yield* Fiber.interrupt(active === "node-a" ? a : b)
        const more = yield* appendMany("compete-more", 10, { concurrency: 4 })
        yield* eventually(handledCount("compete", appended.length + more.length))
        const all = yield* handled("compete")
        expectEachOnce(all, [...appended, ...more])
        const standby = active === "node-a" ? "node-b" : "node-a"
        expect(all.slice(appended.length).every((r) => r.owner === standby)).toBe(true)
        yield* Fiber.interrupt(active === "node-a" ? b : a)
      })
  )

  it.effect("a zombie whose lease was taken over rolls its batch back; the new owner processes it once", () =>
    withTestClock(
      Effect.gen(function* () {
        yield* setup
        const sql = yield* SqlClient.SqlClient
        const calls = yield* Ref.make<ReadonlyArray<BatchContext>>([])
        const zombie = subscriptionProcessor({
          name: "zombie",
          source: "events",
          eventTypes: [Zombied.type],
          owner: "zombie",
          leaseTtl: "10 seconds",
          acquireInterval: "1 second",
          // No heartbeat while the test nudges the clock: the zombie must not notice the takeover early.
          heartbeat: "1 hour",
          handle: recordHandler("zombie", calls)
        })
        const fiber = yield* Effect.fork(zombie.run)
        yield* eventually(Effect.map(subscriptionRow("zombie"), (r) => r?.owner === "zombie"))

        // The zombie pauses (no heartbeat under the TestClock); its lease runs out and a thief takes it.
        yield* sql`UPDATE event_store.subscriptions SET lease_until = ${new Date(-1)} WHERE subscription_id = 'zombie'`
        const thief = yield* acquire("zombie", { owner: "thief", ttl: "10 seconds" })
        expect(Option.map(thief, (t) => t.generation)).toEqual(Option.some(2))

        // The zombie wakes for this append and runs its batch with generation 1: the fenced
        // checkpoint update touches no row, so its handler's insert rolls back.
        const appended = yield* appendMany("zombie", 1, { type: Zombied })
        yield* nudging(Effect.map(Ref.get(calls), (c) => c.length >= 1))
        expect((yield* Ref.get(calls))[0]?.generation).toBe(1)
        expect(yield* handled("zombie")).toEqual([])
        expect((yield* subscriptionRow("zombie"))?.lastPosition).toBe(0)

        // Once the thief lets go, the (former) zombie retakes the lease and processes the event once.
        if (Option.isSome(thief)) yield* release(thief.value)
        yield* TestClock.adjust("1 second")
        yield* nudging(handledCount("zombie", 1))
        yield* Fiber.interrupt(fiber)
        const rows = yield* handled("zombie")
        expectEachOnce(rows, appended)
        expect(rows[0]?.generation).toBe(3)
        expect((yield* subscriptionRow("zombie"))?.lastPosition).toBe(appended[0]?.lastPosition)
      })
    )
  )

  it.effect.skipIf(!usingRealPostgres)(
    "a lease stolen while a batch is in flight rolls that batch back",
    () =>
      Effect.gen(function* () {
        yield* setup
        const sql = yield* SqlClient.SqlClient
        const inHandler = yield* Deferred.make<void>()
        const proceed = yield* Deferred.make<void>()
        const calls = yield* Ref.make<ReadonlyArray<BatchContext>>([])
        const record = recordHandler("inflight", calls)
        const p = subscriptionProcessor({
          name: "inflight",
          source: "events",
          owner: "slow",
          eventTypes: [InFlight.type],
          ...fast,
          handle: (events: ReadonlyArray<StoredEvent>, context) =>
            Effect.gen(function* () {
              yield* record(events, context)
              if (context.generation === 1) {
                yield* Deferred.succeed(inHandler, undefined)
                yield* Deferred.await(proceed)
              }
            })
        })
        const fiber = yield* Effect.fork(p.run)
        const appended = yield* appendMany("inflight", 2, { type: InFlight })
        yield* Deferred.await(inHandler)
        // Mid-batch: the lease expires and another node takes it (other connections, real time).
        yield* sql`UPDATE event_store.subscriptions SET lease_until = ${new Date(0)} WHERE subscription_id = 'inflight'`
        const thief = yield* acquire("inflight", { owner: "thief", ttl: "1 minute" })
        expect(Option.isSome(thief)).toBe(true)
        yield* Deferred.succeed(proceed, undefined)
        yield* eventually(Effect.map(Ref.get(calls), (c) => c.length >= 1))
        // The slow node goes back to standby; give the lease back and it reprocesses from the checkpoint.
        expect(yield* handled("inflight")).toEqual([])
        expect((yield* subscriptionRow("inflight"))?.lastPosition).toBe(0)
        if (Option.isSome(thief)) yield* release(thief.value)
        yield* eventually(handledCount("inflight", 2))
        yield* Fiber.interrupt(fiber)
        const rows = yield* handled("inflight")
        expectEachOnce(rows, appended)
        expect(rows.every((r) => r.generation === 3)).toBe(true)
      })
  )

  it.effect("stopping a processor mid-batch rolls the batch back and releases the lease", () =>
    Effect.gen(function* () {
      yield* setup
      const Stopped = defineEvent("probe.stop_happened", { schema: Schema.Struct({ n: Schema.Number }) })
      const inHandler = yield* Deferred.make<void>()
      const record = recordHandler("stop")
      const p = subscriptionProcessor({
        name: "stop",
        source: "events",
        eventTypes: [Stopped.type],
        owner: "node-a",
        ...fast,
        handle: (events: ReadonlyArray<StoredEvent>, context) =>
          Effect.gen(function* () {
            yield* record(events, context)
            yield* Deferred.succeed(inHandler, undefined)
            return yield* Effect.never
          })
      })
      const fiber = yield* Effect.fork(p.run)
      yield* appendMany("stop", 2, { type: Stopped })
      yield* Deferred.await(inHandler)
      yield* Fiber.interrupt(fiber)
      expect(yield* handled("stop")).toEqual([])
      expect(yield* subscriptionRow("stop")).toMatchObject({ owner: null, lastPosition: 0 })
    })
  )

  it.effect(
    "a failing handler rolls back; the supervisor restarts it and it retries from the checkpoint",
    () =>
      Effect.gen(function* () {
        yield* setup
        const sup = yield* makeSupervisor({ initialBackoff: "20 millis" })
        const failures = yield* Ref.make(0)
        const record = recordHandler("flaky")
        const p = subscriptionProcessor({
          name: "flaky",
          source: "events",
          owner: "node-a",
          ...fast,
          handle: (events: ReadonlyArray<StoredEvent>, context) =>
            Effect.gen(function* () {
              yield* record(events, context)
              const n = yield* Ref.getAndUpdate(failures, (x) => x + 1)
              if (n < 2 && events.some((e) => e.streamId.startsWith("flaky-"))) {
                return yield* Effect.fail(new Error(`handler failure ${n + 1}`))
              }
            })
        })
        const appended = yield* appendMany("flaky", 3)
        yield* Effect.scoped(
          Effect.gen(function* () {
            yield* sup.start([p])
            yield* eventually(handledCount("flaky", 3))
          })
        )
        expectEachOnce(yield* handled("flaky"), appended)
        const status = Option.getOrThrow(yield* sup.statusOf("flaky"))
        expect(status.restarts).toBe(2)
        expect(status.lastError).toBe("Error: handler failure 2")
        expect(status.state).toBe("stopped")
        expect((yield* subscriptionRow("flaky"))?.error).toBeNull()
      })
  )

  it.effect("status reports checkpoint, lag in events and seconds (by the Clock), and lease", () =>
    withTestClock(
      Effect.gen(function* () {
        yield* setup
        const Lagged = defineEvent("probe.lagged", { schema: Schema.Struct({ n: Schema.Number }) })
        const p = subscriptionProcessor({
          name: "lagging",
          source: "events",
          eventTypes: [Lagged.type],
          owner: "node-a",
          handle: recordHandler("lagging")
        })
        const fresh = yield* p.status
        expect(fresh).toMatchObject({
          status: "new",
          lagEvents: 0,
          lagSeconds: 0,
          owner: null,
          checkpoint: origin
        })
        yield* TestClock.adjust("1 hour")
        yield* appendMany("lagging", 3, { type: Lagged })
        yield* appendMany("lagging-noise", 2)
        yield* TestClock.adjust("90 seconds")
        const behind = yield* p.status
        expect(behind.lagEvents).toBe(3)
        expect(behind.lagSeconds).toBe(90)

        const fiber = yield* Effect.fork(p.run)
        yield* eventually(Effect.map(subscriptionRow("lagging"), (r) => r?.owner === "node-a"))
        yield* nudging(handledCount("lagging", 3))
        yield* eventually(Effect.map(p.status, (s) => s.lagEvents === 0))
        const caughtUp = yield* p.status
        expect(caughtUp).toMatchObject({ lagEvents: 0, lagSeconds: 0, owner: "node-a", generation: 1 })
        expect(caughtUp.leaseUntil?.getTime()).toBeGreaterThanOrEqual(3_690_000 + 15_000)
        expect(caughtUp.lastEventAt?.getTime()).toBe(3_600_000)
        yield* Fiber.interrupt(fiber)
      })
    )
  )

  it.effect(
    "a filtered subscription moves past the events it skips: written down with its next batch, or after 5 s",
    () =>
      withTestClock(
        Effect.gen(function* () {
          yield* setup
          const Rare = defineEvent("probe.rare_happened", { schema: Schema.Struct({ n: Schema.Number }) })
          const p = subscriptionProcessor({
            name: "skipping",
            source: "events",
            eventTypes: [Rare.type],
            owner: "node-a",
            ...fast,
            handle: recordHandler("skipping")
          })
          const fiber = yield* Effect.fork(p.run)
          yield* eventually(Effect.map(subscriptionRow("skipping"), (r) => r?.owner === "node-a"))
          const noise = yield* appendMany("skipping-noise", 3)
          const lastNoise = noise[noise.length - 1]?.lastPosition ?? Number.MAX_SAFE_INTEGER
          // Polls that only skip write nothing (the clock has not moved)…
          yield* TestServices.provideLive(Effect.sleep("300 millis"))
          expect((yield* subscriptionRow("skipping"))?.lastPosition).toBe(0)
          // …until 5 s later: the row moves past the skipped events, and none was handled.
          yield* nudging(
            Effect.map(subscriptionRow("skipping"), (r) => (r?.lastPosition ?? 0) >= lastNoise),
            "1 second"
          )
          expect(yield* handled("skipping")).toEqual([])
          // A matching event is handled once, and its batch writes the checkpoint at once.
          const [rare] = yield* appendMany("skipping", 1, { type: Rare })
          yield* nudging(handledCount("skipping", 1))
          expect((yield* handled("skipping")).map((r) => r.eventId)).toEqual(rare?.eventIds)
          expect((yield* subscriptionRow("skipping"))?.lastPosition).toBeGreaterThanOrEqual(
            rare?.lastPosition ?? Number.MAX_SAFE_INTEGER
          )
          yield* Fiber.interrupt(fiber)
        })
      )
  )

  it.effect("a public_events subscription reads public events, filtered by type", () =>
    Effect.gen(function* () {
      yield* setup
      const sql = yield* SqlClient.SqlClient
      const signal = yield* AppendSignal
      const seen = yield* Ref.make<ReadonlyArray<string>>([])
      const p = subscriptionProcessor({
        name: "public",
        source: "public_events",
        eventTypes: ["order.created"],
        owner: "node-a",
        ...fast,
        handle: (events) => Ref.update(seen, (all) => [...all, ...events.map((e) => `${e.id}:${e.type}`)])
      })
      const at = new Date("2026-01-01T00:00:00Z")
      const row = (id: string, type: string) => ({
        id,
        type,
        data: { id },
        occurredAt: at,
        sourceEventId: "00000000-0000-7000-8000-000000000001",
        streamId: "order-1"
      })
      yield* sql.withTransaction(
        insertPublicEvents([
          row("evt_a", "order.created"),
          row("evt_b", "order.paid"),
          row("evt_c", "order.created")
        ])
      )
      yield* signal.notify
      const fiber = yield* Effect.fork(p.run)
      yield* eventually(Effect.map(Ref.get(seen), (s) => s.length >= 2))
      yield* insertPublicEvents([row("evt_d", "order.created")])
      yield* signal.notify
      yield* eventually(Effect.map(Ref.get(seen), (s) => s.length >= 3))
      // `seen` is written inside the batch transaction: wait for the commit before stopping.
      yield* eventually(Effect.map(p.status, (s) => s.lagEvents === 0))
      yield* Fiber.interrupt(fiber)
      expect(yield* Ref.get(seen)).toEqual([
        "evt_a:order.created",
        "evt_c:order.created",
        "evt_d:order.created"
      ])
      const status = yield* p.status
      expect(status).toMatchObject({ source: "public_events", lagEvents: 0 })
    })
  )
})
