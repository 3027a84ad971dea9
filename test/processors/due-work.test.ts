import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Clock, Deferred, Effect, Fiber, Layer, Option, Ref, Schema, TestClock } from "effect"
import { expect } from "vitest"
import { EventStore } from "../../src/eventstore/EventStore.js"
import { defineEvent } from "../../src/eventstore/EventType.js"
import {
  type DueItem,
  DueOutcome,
  DueWork,
  DueWorkLive,
  dueWorker,
  dueWorkPurgeProcessor
} from "../../src/processors/DueWork.js"
import { TestPersistence, usingRealPostgres } from "../support/database.js"
import { eventually, parked, withTestClock } from "./helpers.js"

const TestLayer = DueWorkLive.pipe(Layer.provideMerge(TestPersistence))

const Reminded = defineEvent("reminder.sent", { schema: Schema.Struct({ key: Schema.String }) })

const must = <A>(option: Option.Option<A>): A =>
  Option.getOrThrowWith(option, () => new Error("expected a value"))

const item = (kind: string, key: string) =>
  Effect.flatMap(DueWork, (w) => w.get(kind, key)).pipe(Effect.map(must))

const at = (ms: number) => new Date(ms)

const setup = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql`CREATE TABLE IF NOT EXISTS due_handled (kind text NOT NULL, key text NOT NULL, owner text NOT NULL)`
)

const handledRows = (kind: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ key: string; owner: string }>`SELECT key, owner FROM due_handled WHERE kind = ${kind}`
  )

const statusCount = (kind: string, status: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{
        n: number
      }>`SELECT count(*) AS n FROM processors.due_work WHERE kind = ${kind} AND status = ${status}`
  ).pipe(Effect.map((rows) => rows[0]?.n ?? 0))

layer(TestLayer, { excludeTestServices: true, timeout: 60_000 })("DueWork", (it) => {
  it.effect("cancelMany cancels pending and claimed items in one statement; finished ones stay", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        // "a" falls due first, so it is the one claimed.
        yield* work.schedule({ kind: "cm1", key: "a", dueAt: at(500) })
        for (const key of ["b", "c", "d"]) yield* work.schedule({ kind: "cm1", key, dueAt: at(1_000) })
        yield* TestClock.adjust("2 seconds")
        const [claimed] = yield* work.claim({ kinds: ["cm1"], limit: 1, owner: "w", leaseTtl: "30 seconds" })
        expect(claimed?.key).toBe("a")
        const done = yield* work.schedule({ kind: "cm1", key: "e", dueAt: at(1_000) })
        yield* work.cancel(done.kind, done.key)
        const n = yield* work.cancelMany([
          { kind: "cm1", key: claimed?.key ?? "" },
          { kind: "cm1", key: "c" },
          { kind: "cm1", key: "e" },
          { kind: "cm1", key: "missing" },
          { kind: "other", key: "d" }
        ])
        expect(n).toBe(2)
        expect((yield* item("cm1", claimed?.key ?? "")).status).toBe("cancelled")
        expect((yield* item("cm1", "c")).status).toBe("cancelled")
        expect(yield* statusCount("cm1", "pending")).toBe(2)
        // The cancelled claim is fenced: its worker's outcome is ignored.
        expect(claimed === undefined ? true : yield* work.complete(claimed, DueOutcome.done())).toBe(false)
        expect(yield* work.cancelMany([])).toBe(0)
      })
    )
  )

  it.effect("a claim of several kinds takes the earliest due items across them, in due order", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        // Interleaved due times across three kinds; one not yet due, one of a kind not asked for.
        const plan: ReadonlyArray<readonly [string, string, number]> = [
          ["mk-a", "a1", 100],
          ["mk-b", "b1", 200],
          ["mk-c", "c1", 300],
          ["mk-a", "a2", 400],
          ["mk-b", "b2", 500],
          ["mk-other", "o1", 50],
          ["mk-c", "c2", 60_000]
        ]
        for (const [kind, key, ms] of plan) yield* work.schedule({ kind, key, dueAt: at(ms) })
        yield* TestClock.adjust("1 second")
        const claim = (limit: number) =>
          Effect.map(
            work.claim({ kinds: ["mk-a", "mk-b", "mk-c"], limit, owner: "w", leaseTtl: "30 seconds" }),
            (items) => items.map((i) => i.key)
          )
        expect(yield* claim(3)).toEqual(["a1", "b1", "c1"])
        // What one claim's scans locked beyond its pick is free again for the next.
        expect(yield* claim(3)).toEqual(["a2", "b2"])
        expect(yield* claim(3)).toEqual([])
        expect((yield* item("mk-c", "c2")).status).toBe("pending")
        expect((yield* item("mk-other", "o1")).status).toBe("pending")
      })
    )
  )

  it.effect("schedule is idempotent on (kind, key); done, failed and cancelled items need `replace`", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        const first = yield* work.schedule({ kind: "s", key: "k1", dueAt: at(5_000), payload: { v: 1 } })
        expect(first).toMatchObject({
          kind: "s",
          key: "k1",
          status: "pending",
          attempts: 0,
          payload: { v: 1 }
        })
        const moved = yield* work.schedule({ kind: "s", key: "k1", dueAt: at(9_000), payload: { v: 2 } })
        expect(moved).toMatchObject({ id: first.id, dueAt: at(9_000), payload: { v: 2 }, status: "pending" })
        expect(yield* item("s", "k1")).toEqual(moved)

        // Cancelled: left alone, then re-armed with `replace`.
        expect(yield* work.cancel("s", "k1")).toBe(true)
        expect(yield* work.cancel("s", "k1")).toBe(false)
        const ignored = yield* work.schedule({ kind: "s", key: "k1", dueAt: at(1_000) })
        expect(ignored).toMatchObject({ status: "cancelled", dueAt: at(9_000) })
        const rearmed = yield* work.schedule({ kind: "s", key: "k1", dueAt: at(1_000), replace: true })
        expect(rearmed).toMatchObject({ id: first.id, status: "pending", dueAt: at(1_000), payload: {} })

        // Claimed: left alone. Done: left alone unless `replace` (which resets the attempts).
        yield* TestClock.adjust("1 second")
        const [claimed] = yield* work.claim({ kinds: ["s"], limit: 10, owner: "w", leaseTtl: "30 seconds" })
        expect(claimed).toMatchObject({ key: "k1", status: "claimed", attempts: 1, claimedBy: "w" })
        expect((yield* work.schedule({ kind: "s", key: "k1", dueAt: at(7_000) })).status).toBe("claimed")
        expect(yield* work.complete(must(Option.fromNullable(claimed)), DueOutcome.done())).toBe(true)
        const done = yield* work.schedule({ kind: "s", key: "k1", dueAt: at(7_000) })
        expect(done).toMatchObject({ status: "done", attempts: 1, completedAt: at(1_000) })
        const again = yield* work.schedule({ kind: "s", key: "k1", dueAt: at(7_000), replace: true })
        expect(again).toMatchObject({ status: "pending", attempts: 0, completedAt: null, dueAt: at(7_000) })
      })
    )
  )

  it.effect("items due in the future are not claimed until the Clock reaches due_at", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        const now = yield* Clock.currentTimeMillis
        yield* work.schedule({
          kind: "future",
          key: "a",
          dueAt: at(now + 3_600_000),
          payload: { hello: "world" }
        })
        const claim = work.claim({ kinds: ["future"], limit: 10, owner: "w", leaseTtl: "30 seconds" })
        expect(yield* claim).toEqual([])
        yield* TestClock.adjust("59 minutes")
        expect(yield* claim).toEqual([])
        yield* TestClock.adjust("59 seconds")
        expect(yield* claim).toEqual([])
        yield* TestClock.adjust("1 second")
        const [got] = yield* claim
        expect(got).toMatchObject({
          key: "a",
          payload: { hello: "world" },
          attempts: 1,
          claimToken: 1,
          claimedBy: "w",
          leaseUntil: at(now + 3_600_000 + 30_000)
        })
        expect(yield* claim).toEqual([])
      })
    )
  )

  it.effect("a worker handles a future item only once the TestClock passes its due time", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        const seen = yield* Ref.make<ReadonlyArray<string>>([])
        const now = yield* Clock.currentTimeMillis
        yield* work.schedule({ kind: "timer", key: "t1", dueAt: at(now + 60_000) })
        const fiber = yield* Effect.fork(
          dueWorker({
            kinds: ["timer"],
            owner: "w",
            handle: (i) =>
              Effect.as(
                Ref.update(seen, (s) => [...s, i.key]),
                DueOutcome.done()
              )
          }).run
        )
        yield* parked()
        yield* TestClock.adjust("59 seconds")
        // The worker polled at 59 s (and parked again) without claiming.
        yield* parked()
        expect(yield* Ref.get(seen)).toEqual([])
        yield* TestClock.adjust("1 second")
        // The worker polls on the TestClock: keep nudging it until the item is handled.
        yield* eventually(
          Effect.zipRight(
            TestClock.adjust("100 millis"),
            Effect.map(Ref.get(seen), (s) => s.length > 0)
          )
        )
        yield* eventually(Effect.map(item("timer", "t1"), (i) => i.status === "done"))
        yield* Fiber.interrupt(fiber)
        expect(yield* Ref.get(seen)).toEqual(["t1"])
      })
    )
  )

  it.effect("a worker wakes up right after a local schedule instead of waiting for the poll interval", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        const seen = yield* Ref.make(0)
        const fiber = yield* Effect.fork(
          dueWorker({
            kinds: ["wake"],
            owner: "w",
            pollInterval: "1 hour",
            handle: () =>
              Effect.as(
                Ref.update(seen, (n) => n + 1),
                DueOutcome.done()
              )
          }).run
        )
        // The worker polled once and parked. The TestClock never moves in this test, so its poll
        // timer never fires: only the schedule's wake-up can start the claim that handles the item.
        yield* parked()
        const now = yield* Clock.currentTimeMillis
        yield* work.schedule({ kind: "wake", key: "now", dueAt: at(now) })
        yield* eventually(
          Effect.map(Ref.get(seen), (n) => n === 1),
          { timeout: "10 seconds" }
        )
        yield* Fiber.interrupt(fiber)
      })
    )
  )

  it.effect("concurrent workers claim every item exactly once", () =>
    Effect.gen(function* () {
      yield* setup
      const work = yield* DueWork
      const workers = usingRealPostgres ? 6 : 3
      const items = usingRealPostgres ? 300 : 60
      const counts = new Map<string, number>()
      const now = yield* Clock.currentTimeMillis
      yield* Effect.forEach(
        Array.from({ length: items }, (_, i) => i),
        (i) =>
          work.schedule({ kind: "bulk", key: `k${i}`, dueAt: at(now - 1000 + (i % 17)), payload: { i } }),
        { concurrency: 4 }
      )
      const fibers = yield* Effect.forEach(
        Array.from({ length: workers }, (_, i) => `worker-${i}`),
        (owner) =>
          Effect.fork(
            dueWorker({
              kinds: ["bulk"],
              owner,
              concurrency: 4,
              pollInterval: "20 millis",
              handle: (i: DueItem) =>
                Effect.gen(function* () {
                  counts.set(i.key, (counts.get(i.key) ?? 0) + 1)
                  yield* Effect.sleep(`${i.attempts % 3} millis`)
                  return DueOutcome.done({
                    inTransaction: Effect.flatMap(
                      SqlClient.SqlClient,
                      (sql) => sql`INSERT INTO due_handled VALUES ('bulk', ${i.key}, ${owner})`
                    )
                  })
                })
            }).run
          )
      )
      yield* eventually(
        Effect.map(statusCount("bulk", "done"), (n) => n === items),
        { timeout: "40 seconds" }
      )
      yield* Effect.forEach(fibers, Fiber.interrupt, { discard: true })
      expect(counts.size).toBe(items)
      expect([...counts.values()].every((n) => n === 1)).toBe(true)
      const rows = yield* handledRows("bulk")
      expect(rows.length).toBe(items)
      expect(new Set(rows.map((r) => r.key)).size).toBe(items)
      if (usingRealPostgres) expect(new Set(rows.map((r) => r.owner)).size).toBeGreaterThan(1)
    })
  )

  it.effect("a claim that is never completed (a crash) is reclaimed after its lease expires", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        const seen = yield* Ref.make<ReadonlyArray<DueItem>>([])
        yield* work.schedule({ kind: "crash", key: "c1", dueAt: at(0) })
        const [lost] = yield* work.claim({
          kinds: ["crash"],
          limit: 1,
          owner: "crashed",
          leaseTtl: "30 seconds"
        })
        expect(lost).toMatchObject({ attempts: 1, claimToken: 1, claimedBy: "crashed" })

        const fiber = yield* Effect.fork(
          dueWorker({
            kinds: ["crash"],
            owner: "survivor",
            leaseTtl: "30 seconds",
            handle: (i) =>
              Effect.as(
                Ref.update(seen, (s) => [...s, i]),
                DueOutcome.done()
              )
          }).run
        )
        yield* parked()
        yield* TestClock.adjust("30 seconds")
        yield* parked()
        // The worker polled at 30 s: lease_until = now is not yet expired.
        expect(yield* Ref.get(seen)).toEqual([])
        yield* eventually(
          Effect.zipRight(
            TestClock.adjust("100 millis"),
            Effect.map(Ref.get(seen), (s) => s.length > 0)
          )
        )
        yield* eventually(Effect.map(item("crash", "c1"), (i) => i.status === "done"))
        yield* Fiber.interrupt(fiber)
        const [handled] = yield* Ref.get(seen)
        expect(handled).toMatchObject({ attempts: 2, claimToken: 2, claimedBy: "survivor" })
        expect(yield* item("crash", "c1")).toMatchObject({
          status: "done",
          attempts: 2,
          claimedBy: "survivor"
        })
      })
    )
  )

  it.effect(
    "a stale worker's outcome (and its writes) is ignored once another worker took the claim over",
    () =>
      withTestClock(
        Effect.gen(function* () {
          yield* setup
          const work = yield* DueWork
          const mark = (owner: string) =>
            Effect.flatMap(
              SqlClient.SqlClient,
              (sql) => sql`INSERT INTO due_handled VALUES ('fence', 'f1', ${owner})`
            )
          yield* work.schedule({ kind: "fence", key: "f1", dueAt: at(0) })
          const ttl = "10 seconds"
          const [a] = yield* work.claim({ kinds: ["fence"], limit: 1, owner: "a", leaseTtl: ttl })
          yield* TestClock.adjust("11 seconds")
          const [b] = yield* work.claim({ kinds: ["fence"], limit: 1, owner: "b", leaseTtl: ttl })
          expect(b).toMatchObject({ claimedBy: "b", claimToken: 2, attempts: 2 })

          const stale = yield* work.complete(
            must(Option.fromNullable(a)),
            DueOutcome.done({ inTransaction: mark("a") })
          )
          expect(stale).toBe(false)
          expect(yield* work.extend(must(Option.fromNullable(a)), ttl)).toBe(false)
          expect(yield* work.release(must(Option.fromNullable(a)))).toBe(false)
          expect(yield* item("fence", "f1")).toMatchObject({ status: "claimed", claimedBy: "b" })
          expect(yield* handledRows("fence")).toEqual([])

          const retryAt = at(60_000)
          const fresh = yield* work.complete(
            must(Option.fromNullable(b)),
            DueOutcome.retry({ at: retryAt, error: "receiver said 503", inTransaction: mark("b") })
          )
          expect(fresh).toBe(true)
          expect(yield* item("fence", "f1")).toMatchObject({
            status: "pending",
            dueAt: retryAt,
            lastError: "receiver said 503",
            claimedBy: null,
            leaseUntil: null
          })
          expect((yield* handledRows("fence")).map((r) => r.owner)).toEqual(["b"])

          // A cancelled claim is fenced the same way.
          yield* TestClock.adjust("1 minute")
          const [c] = yield* work.claim({ kinds: ["fence"], limit: 1, owner: "c", leaseTtl: ttl })
          expect(c?.attempts).toBe(3)
          expect(yield* work.cancel("fence", "f1")).toBe(true)
          expect(yield* work.complete(must(Option.fromNullable(c)), DueOutcome.failed({ error: "x" }))).toBe(
            false
          )
          expect((yield* item("fence", "f1")).status).toBe("cancelled")
        })
      )
  )

  it.effect("outcome events commit together with the outcome, or neither does", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        const store = yield* EventStore
        const remind = (key: string) =>
          store
            .append({
              streamId: `reminder-${key}`,
              streamType: "reminder",
              expectedVersion: "no_stream",
              events: [{ eventType: Reminded, data: { key } }]
            })
            .pipe(Effect.asVoid)
        yield* work.schedule({ kind: "remind", key: "r1", dueAt: at(0) })
        yield* work.schedule({ kind: "remind", key: "r2", dueAt: at(0) })
        // r2's stream already exists, so its outcome's append fails and the outcome rolls back with it.
        yield* remind("r2")
        const handled = yield* Ref.make(0)
        const fiber = yield* Effect.fork(
          dueWorker({
            kinds: ["remind"],
            owner: "w",
            retryDelay: () => "5 minutes",
            handle: (i) =>
              Effect.as(
                Ref.update(handled, (n) => n + 1),
                DueOutcome.done({ inTransaction: remind(i.key) })
              )
          }).run
        )
        yield* eventually(Effect.map(Ref.get(handled), (n) => n === 2))
        yield* eventually(Effect.map(item("remind", "r2"), (i) => i.status === "pending"))
        yield* eventually(Effect.map(item("remind", "r1"), (i) => i.status === "done"))
        yield* Fiber.interrupt(fiber)
        expect((yield* store.readStream("reminder-r1")).map((e) => e.type)).toEqual(["reminder.sent"])
        expect((yield* store.readStream("reminder-r2")).length).toBe(1)
        const r2 = yield* item("remind", "r2")
        expect(r2.lastError).toContain("WrongExpectedVersion")
        expect(r2.dueAt).toEqual(at(300_000))
      })
    )
  )

  it.effect("unexpected handler failures are retried with back-off, then failed after maxAttempts", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        const attempts = yield* Ref.make(0)
        yield* work.schedule({ kind: "flaky", key: "x", dueAt: at(0) })
        const fiber = yield* Effect.fork(
          dueWorker({
            kinds: ["flaky"],
            owner: "w",
            maxAttempts: 3,
            retryDelay: (n) => `${n} minutes`,
            handle: () =>
              Effect.zipRight(
                Ref.update(attempts, (n) => n + 1),
                Effect.die(new Error("endpoint exploded"))
              )
          }).run
        )
        yield* eventually(Effect.map(item("flaky", "x"), (i) => i.status === "pending" && i.attempts === 1))
        expect(yield* item("flaky", "x")).toMatchObject({
          dueAt: at(60_000),
          lastError: "Error: endpoint exploded"
        })
        const nudge = (until: Effect.Effect<boolean, unknown, DueWork>) =>
          eventually(Effect.zipRight(TestClock.adjust("30 seconds"), until))
        yield* nudge(Effect.map(item("flaky", "x"), (i) => i.attempts === 2 && i.status === "pending"))
        expect((yield* item("flaky", "x")).dueAt.getTime()).toBeGreaterThanOrEqual(60_000 + 120_000)
        yield* nudge(Effect.map(item("flaky", "x"), (i) => i.status === "failed"))
        yield* Fiber.interrupt(fiber)
        expect(yield* item("flaky", "x")).toMatchObject({ status: "failed", attempts: 3 })
        expect(yield* Ref.get(attempts)).toBe(3)
      })
    )
  )

  it.effect("stopping a worker gives its in-flight claims back", () =>
    Effect.gen(function* () {
      const work = yield* DueWork
      const started = yield* Deferred.make<void>()
      const now = yield* Clock.currentTimeMillis
      yield* work.schedule({ kind: "stop", key: "s1", dueAt: at(now) })
      const fiber = yield* Effect.fork(
        dueWorker({
          kinds: ["stop"],
          owner: "w",
          handle: () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)
        }).run
      )
      yield* Deferred.await(started)
      expect((yield* item("stop", "s1")).status).toBe("claimed")
      yield* Fiber.interrupt(fiber)
      expect(yield* item("stop", "s1")).toMatchObject({
        status: "pending",
        claimedBy: null,
        leaseUntil: null
      })
      const stats = yield* work.stats(["stop"])
      expect(stats).toEqual([
        { kind: "stop", pending: 1, due: 1, claimed: 0, expiredClaims: 0, failed: 0, oldestDueAt: at(now) }
      ])
    })
  )

  it.effect("scheduleMany: the rules of schedule for many items in one statement", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        yield* work.schedule({ kind: "many", key: "pending", dueAt: at(5_000), payload: { v: 1 } })
        yield* work.schedule({ kind: "many", key: "claimed", dueAt: at(0) })
        yield* work.schedule({ kind: "many", key: "done", dueAt: at(0) })
        yield* work.schedule({ kind: "many", key: "rearm", dueAt: at(0) })
        const claimed = yield* work.claim({ kinds: ["many"], limit: 10, owner: "w", leaseTtl: "30 seconds" })
        for (const c of claimed) if (c.key !== "claimed") yield* work.complete(c, DueOutcome.done())
        const changed = yield* work.scheduleMany([
          { kind: "many", key: "new", dueAt: at(1_000), group: "g1", payload: { n: 1 } },
          { kind: "many", key: "pending", dueAt: at(2_000), payload: { v: 2 } },
          { kind: "many", key: "claimed", dueAt: at(3_000) },
          { kind: "many", key: "done", dueAt: at(4_000) },
          { kind: "many", key: "rearm", dueAt: at(6_000), replace: true },
          // The same (kind, key) twice: the last one wins.
          { kind: "many", key: "twice", dueAt: at(7_000) },
          { kind: "many", key: "twice", dueAt: at(8_000), payload: { last: true } }
        ])
        expect(changed).toBe(4)
        expect(yield* item("many", "new")).toMatchObject({
          status: "pending",
          dueAt: at(1_000),
          group: "g1",
          payload: { n: 1 },
          attempts: 0
        })
        expect(yield* item("many", "pending")).toMatchObject({ dueAt: at(2_000), payload: { v: 2 } })
        expect(yield* item("many", "claimed")).toMatchObject({ status: "claimed", dueAt: at(0) })
        expect(yield* item("many", "done")).toMatchObject({ status: "done", attempts: 1 })
        expect(yield* item("many", "rearm")).toMatchObject({
          status: "pending",
          attempts: 0,
          completedAt: null,
          dueAt: at(6_000)
        })
        expect(yield* item("many", "twice")).toMatchObject({ dueAt: at(8_000), payload: { last: true } })
        expect(yield* work.scheduleMany([])).toBe(0)
      })
    )
  )

  it.effect("completeMany records each outcome fenced by its claim, and only those still ours", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        for (const key of ["a", "b", "c", "d"]) yield* work.schedule({ kind: "cm", key, dueAt: at(0) })
        const claimed = yield* work.claim({ kinds: ["cm"], limit: 10, owner: "w", leaseTtl: "30 seconds" })
        const byKey = (key: string) => must(Option.fromNullable(claimed.find((c) => c.key === key)))
        // d was cancelled meanwhile: not ours any more.
        yield* work.cancel("cm", "d")
        const ours = yield* work.completeMany([
          { item: byKey("a"), outcome: DueOutcome.done() },
          { item: byKey("b"), outcome: DueOutcome.retry({ at: at(60_000), error: "try later" }) },
          { item: byKey("c"), outcome: DueOutcome.failed({ error: "gave up" }) },
          { item: byKey("d"), outcome: DueOutcome.done() }
        ])
        expect([...ours].sort()).toEqual([byKey("a").id, byKey("b").id, byKey("c").id].sort())
        expect(yield* item("cm", "a")).toMatchObject({ status: "done", completedAt: at(0), leaseUntil: null })
        expect(yield* item("cm", "b")).toMatchObject({
          status: "pending",
          dueAt: at(60_000),
          lastError: "try later",
          claimedBy: null,
          leaseUntil: null,
          completedAt: null
        })
        expect(yield* item("cm", "c")).toMatchObject({
          status: "failed",
          lastError: "gave up",
          completedAt: at(0)
        })
        expect(yield* item("cm", "d")).toMatchObject({ status: "cancelled" })
        // A second completion of the same claims changes nothing.
        expect(
          (yield* work.completeMany([{ item: byKey("a"), outcome: DueOutcome.failed({ error: "x" }) }])).size
        ).toBe(0)
        expect((yield* item("cm", "a")).status).toBe("done")
      })
    )
  )

  it.effect(
    "group commit: outcomes finished together are recorded in one transaction; a conflict falls back to one by one",
    () =>
      withTestClock(
        Effect.gen(function* () {
          const work = yield* DueWork
          const store = yield* EventStore
          const keys = Array.from({ length: 10 }, (_, i) => `g${i}`)
          for (const key of keys) yield* work.schedule({ kind: "group", key, dueAt: at(0) })
          // g3's stream already exists: its write conflicts, in the group and alone.
          yield* store.append({
            streamId: "reminder-g3",
            streamType: "reminder",
            expectedVersion: "no_stream",
            events: [{ eventType: Reminded, data: { key: "g3" } }]
          })
          const remind = (key: string) => ({
            streamId: `reminder-${key}`,
            streamType: "reminder",
            expectedVersion: "no_stream" as const,
            events: [{ eventType: Reminded, data: { key } }]
          })
          const groups = yield* Ref.make<Array<ReadonlyArray<string>>>([])
          const release = yield* Deferred.make<void>()
          const fiber = yield* Effect.fork(
            dueWorker({
              kinds: ["group"],
              owner: "w",
              concurrency: 10,
              retryDelay: () => "5 minutes",
              // Every handler finishes at the same moment.
              handle: (i) =>
                Effect.as(
                  Deferred.await(release),
                  DueOutcome.done({
                    inTransaction: Effect.asVoid(store.append(remind(i.key))),
                    batched: i.key
                  })
                ),
              recordBatched: (batch: ReadonlyArray<string>) =>
                Effect.zipRight(
                  Ref.update(groups, (g) => [...g, batch]),
                  Effect.asVoid(store.appendMany(batch.map(remind)))
                )
            }).run
          )
          yield* eventually(Effect.map(work.stats(["group"]), (s) => s[0]?.claimed === 10))
          yield* Deferred.succeed(release, undefined)
          yield* eventually(
            Effect.map(
              Effect.forEach(keys, (k) => item("group", k)),
              (items) => items.every((i) => i.status !== "claimed")
            )
          )
          yield* Fiber.interrupt(fiber)
          for (const key of keys) {
            const recorded = yield* item("group", key)
            if (key === "g3") {
              expect(recorded).toMatchObject({ status: "pending", dueAt: at(300_000) })
              expect(recorded.lastError).toContain("WrongExpectedVersion")
            } else {
              expect(recorded.status).toBe("done")
              expect((yield* store.readStream(`reminder-${key}`)).length).toBe(1)
            }
          }
          // Fewer transactions than outcomes: the ones that finished during a commit went together.
          const seen = yield* Ref.get(groups)
          expect(seen.length).toBeLessThan(keys.length)
          expect(seen.flat().sort()).toEqual([...keys].sort())
        })
      )
  )

  it.effect("finished items are purged once past the retention; pending, claimed and failed ones stay", () =>
    withTestClock(
      Effect.gen(function* () {
        const work = yield* DueWork
        for (const key of ["done1", "done2", "cancelled", "failed", "pending", "claimed"])
          yield* work.schedule({ kind: "purge", key, dueAt: at(0) })
        const claimed = yield* work.claim({ kinds: ["purge"], limit: 10, owner: "w", leaseTtl: "1 hour" })
        for (const c of claimed) {
          if (c.key.startsWith("done")) yield* work.complete(c, DueOutcome.done())
          if (c.key === "failed") yield* work.complete(c, DueOutcome.failed({ error: "no" }))
          if (c.key === "pending") yield* work.release(c)
        }
        yield* work.cancel("purge", "cancelled")
        const keys = Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.map(
            sql<{ key: string }>`SELECT key FROM processors.due_work WHERE kind = 'purge' ORDER BY key`,
            (rows) => rows.map((r) => r.key)
          )
        )
        // Not yet past the retention: nothing goes.
        expect(yield* work.purgeFinished(at(0), 100)).toBe(0)
        yield* TestClock.adjust("7 days")
        expect(yield* work.purgeFinished(at(0), 100)).toBe(0)
        yield* TestClock.adjust("1 second")
        const fiber = yield* Effect.fork(
          dueWorkPurgeProcessor({ retention: "7 days", interval: "1 hour", batchSize: 2 }).run
        )
        yield* eventually(Effect.map(keys, (k) => k.length === 3))
        yield* Fiber.interrupt(fiber)
        expect(yield* keys).toEqual(["claimed", "failed", "pending"])
      })
    )
  )
})
