/**
 * Advancing a test clock over real HTTP (issue #21 item 4): the clock's due work — kinds
 * `<kind>@<clockId>` — runs one item at a time in due-time order, each under an Effect Clock fixed at
 * its due time and with `BillingClock.nowFor(clock)` answering that time; items the handlers schedule
 * within the range run too; the frozen time is persisted; real-time items and other clocks' items
 * stay pending, and a real-time worker never claims a clocked kind. Then: a second advance, deleting
 * a clock (its pending work cancelled), concurrent advances, a failing handler, the runaway guard,
 * and the take-over of an advance whose process died.
 *
 * `BillingDueWork` is the subscriptions part's; here a small implementation of it (the layer below)
 * records what ran and when, and schedules a follow-up when an item asks — a test of the advance
 * loop, not of billing's handlers.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Context, Duration, Effect, Fiber, Layer, Option, Ref, Schema } from "effect"
import { expect } from "vitest"
import { BillingClock, BillingDueWork, clockedKind } from "../../../src/billing/contract.js"
import { TestClockDecider, testClockStream } from "../../../src/billing/testClocks/decider.js"
import {
  fixedClock,
  makeTestClocksWith,
  STALL_AFTER,
  TestClocks
} from "../../../src/billing/testClocks/TestClocks.js"
import { CommandRunner } from "../../../src/kernel/CommandRunner.js"
import * as Time from "../../../src/kernel/Time.js"
import { DueOutcome, DueWork, dueWorker } from "../../../src/processors/DueWork.js"
import { HttpAppLive } from "../../../src/server.js"
import { createCustomer, getCustomer } from "../../support/customers.js"
import { call, expectError, identityServices } from "../../support/identity.js"
import { ok, staffToken } from "../../support/payments.js"

const RENEW = "test.renew"
const NOTIFY = "test.notify"
const KINDS = [RENEW, NOTIFY] as const

const DAY = 86_400_000
const T0 = new Date("2030-01-01T00:00:00.000Z")
const at = (days: number) => new Date(T0.getTime() + days * DAY)

/** What an item asks of the test handler. */
const Payload = Schema.Struct({
  clockId: Schema.NullOr(Schema.String),
  /** Schedule `<kind>` (on the same clock) this long after the item's time. */
  followUp: Schema.optional(
    Schema.Struct({ kind: Schema.String, key: Schema.String, afterMs: Schema.Number })
  ),
  /** Take this long (real time): lets a second advance meet this one running. */
  slowMs: Schema.optional(Schema.Number),
  /** Fail with a defect the first time it runs. */
  failOnce: Schema.optional(Schema.Boolean),
  /** Ask to run again at the same time, forever (a runaway). */
  again: Schema.optional(Schema.Boolean)
})

interface Ran {
  readonly kind: string
  readonly key: string
  readonly dueAt: string
  /** Effect's Clock while the handler ran. */
  readonly clockNow: string
  /** `BillingClock.nowFor(clock)` while the handler ran. */
  readonly nowFor: string
}

/** Keys of the `failOnce` items that failed already. */
const failed = new Set<string>()

class RanLog extends Context.Tag("test/RanLog")<RanLog, Ref.Ref<ReadonlyArray<Ran>>>() {}

/** The test's `BillingDueWork`: records each item, schedules follow-ups, records the outcome. */
const RecordingDueWork = Layer.effect(
  BillingDueWork,
  Effect.gen(function* () {
    const work = yield* DueWork
    const clock = yield* BillingClock
    const log = yield* RanLog
    return BillingDueWork.of({
      kinds: KINDS,
      process: (item) =>
        Effect.gen(function* () {
          const payload = Schema.decodeUnknownSync(Payload)(item.payload)
          const clockNow = yield* Time.now
          const nowFor = yield* clock.nowFor(payload.clockId)
          yield* Ref.update(log, (ran) => [
            ...ran,
            {
              kind: item.kind,
              key: item.key,
              dueAt: item.dueAt.toISOString(),
              clockNow: clockNow.toISOString(),
              nowFor: nowFor.toISOString()
            }
          ])
          if (payload.slowMs !== undefined) yield* Effect.sleep(Duration.millis(payload.slowMs))
          if (payload.failOnce === true && !failed.has(item.key)) {
            failed.add(item.key)
            return yield* Effect.dieMessage(`item ${item.key} fails`)
          }
          if (payload.followUp !== undefined)
            yield* work.schedule({
              kind: clockedKind(payload.followUp.kind, payload.clockId),
              key: payload.followUp.key,
              dueAt: new Date(clockNow.getTime() + payload.followUp.afterMs),
              payload: { clockId: payload.clockId }
            })
          const outcome =
            payload.again === true ? DueOutcome.retry({ at: clockNow, error: "again" }) : DueOutcome.done()
          yield* work.complete(item, outcome)
          return outcome._tag
        }),
      // These clocks' customers hold no subscriptions (test/billing/testClocks/scenario.test.ts has them).
      clockDeleted: () => Effect.succeed(0)
    })
  })
).pipe(Layer.provideMerge(Layer.effect(RanLog, Ref.make<ReadonlyArray<Ran>>([]))))

/** The app with the recording due work, and a TestClocks service with a small runaway guard. */
const SMALL_LIMIT = 5
const ClocksHttp = HttpAppLive.pipe(
  Layer.provideMerge(Layer.effect(TestClocks, makeTestClocksWith({ maxItemsPerAdvance: SMALL_LIMIT }))),
  Layer.provideMerge(RecordingDueWork),
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(identityServices())
)

const createClock = (token: string, frozenTime: Date, name?: string) =>
  Effect.map(
    call("POST", "/v1/test/clocks", {
      token,
      json: { frozenTime: frozenTime.toISOString(), ...(name === undefined ? {} : { name }) }
    }),
    ok(201)
  )

const advance = (token: string, clockId: string, to: Date) =>
  call("POST", `/v1/test/clocks/${clockId}/advance`, { token, json: { frozenTime: to.toISOString() } })

const getClock = (token: string, clockId: string) =>
  Effect.map(call("GET", `/v1/test/clocks/${clockId}`, { token }), ok(200))

/** Schedules an item of `kind` for a customer on `clockId` (null: real time), as billing would. */
const schedule = (
  kind: string,
  clockId: string | null,
  key: string,
  dueAt: Date,
  extra: Partial<typeof Payload.Type> = {}
) =>
  Effect.flatMap(DueWork, (work) =>
    work.schedule({ kind: clockedKind(kind, clockId), key, dueAt, payload: { clockId, ...extra } })
  )

const statusOf = (kind: string, clockId: string | null, key: string) =>
  Effect.flatMap(DueWork, (work) =>
    Effect.map(work.get(clockedKind(kind, clockId), key), (item) =>
      Option.match(item, { onNone: () => "missing", onSome: (i) => i.status })
    )
  )

/** What ran of the items whose key starts with `prefix`. */
const ranOf = (prefix: string) =>
  Effect.flatMap(RanLog, (log) =>
    Effect.map(Ref.get(log), (ran) => ran.filter((r) => r.key.startsWith(prefix)))
  )

const iso = (d: Date) => d.toISOString()

layer(ClocksHttp, { excludeTestServices: true, timeout: 120_000 })("advancing a test clock", (it) => {
  it.effect("runs the clock's due items in time order, each as at its own time, and nothing else", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const a = yield* createClock(token, T0, "A")
      const b = yield* createClock(token, T0, "B")
      const customer = yield* createCustomer(token, { testClockId: a.id })
      expect((yield* getCustomer(token, customer.id)).testClockId).toBe(a.id)
      const billingClock = yield* BillingClock
      expect(yield* billingClock.clockOf(customer.id)).toBe(a.id)
      expect(iso(yield* billingClock.nowFor(a.id))).toBe(iso(T0))

      const p = `${a.id}:`
      yield* schedule(RENEW, a.id, `${p}r1`, at(3), {
        followUp: { kind: NOTIFY, key: `${p}n1`, afterMs: DAY }
      })
      yield* schedule(RENEW, a.id, `${p}r2`, at(1))
      yield* schedule(NOTIFY, a.id, `${p}n0`, at(2))
      // A follow-up scheduled past the target waits for the next advance.
      yield* schedule(RENEW, a.id, `${p}r3`, at(9), {
        followUp: { kind: NOTIFY, key: `${p}n2`, afterMs: 2 * DAY }
      })
      yield* schedule(RENEW, a.id, `${p}late`, at(40))
      // Another clock's item, and a real-time item already due: neither is this advance's.
      yield* schedule(RENEW, b.id, `${p}other-clock`, at(1))
      const realDue = new Date((yield* Time.now).getTime() - 3_600_000)
      yield* schedule(RENEW, null, `${p}real-time`, realDue)

      const advanced = ok(200)(yield* advance(token, a.id, at(10)))
      expect(advanced).toEqual({
        object: "test_clock",
        id: a.id,
        frozenTime: iso(at(10)),
        name: "A",
        status: "ready",
        createdAt: a.createdAt
      })

      const ran = yield* ranOf(p)
      expect(ran.map((r) => [r.key.slice(p.length), r.dueAt])).toEqual([
        ["r2", iso(at(1))],
        ["n0", iso(at(2))],
        ["r1", iso(at(3))],
        // Scheduled by r1 (its time + 1 day), inside the range: it ran too.
        ["n1", iso(at(4))],
        ["r3", iso(at(9))]
      ])
      // Each under a Clock fixed at its due time, and `nowFor` answering the same.
      for (const r of ran) {
        expect(r.clockNow).toBe(r.dueAt)
        expect(r.nowFor).toBe(r.dueAt)
      }
      expect(ran.map((r) => r.kind)).toEqual([
        `${RENEW}@${a.id}`,
        `${NOTIFY}@${a.id}`,
        `${RENEW}@${a.id}`,
        `${NOTIFY}@${a.id}`,
        `${RENEW}@${a.id}`
      ])
      for (const key of ["r1", "r2", "r3"]) expect(yield* statusOf(RENEW, a.id, `${p}${key}`)).toBe("done")
      for (const key of ["n0", "n1"]) expect(yield* statusOf(NOTIFY, a.id, `${p}${key}`)).toBe("done")
      expect(yield* statusOf(NOTIFY, a.id, `${p}n2`)).toBe("pending")
      expect(yield* statusOf(RENEW, a.id, `${p}late`)).toBe("pending")
      expect(yield* statusOf(RENEW, b.id, `${p}other-clock`)).toBe("pending")
      expect(yield* statusOf(RENEW, null, `${p}real-time`)).toBe("pending")

      // The frozen time is persisted; the other clock has not moved.
      expect((yield* getClock(token, a.id)).frozenTime).toBe(iso(at(10)))
      expect((yield* getClock(token, b.id)).frozenTime).toBe(iso(T0))
      expect(iso(yield* billingClock.nowFor(a.id))).toBe(iso(at(10)))
      expect(iso(yield* billingClock.nowFor(b.id))).toBe(iso(T0))

      // The next advance goes on from there: the follow-up, then the late item.
      ok(200)(yield* advance(token, a.id, at(45)))
      expect((yield* ranOf(p)).slice(5).map((r) => [r.key.slice(p.length), r.dueAt])).toEqual([
        ["n2", iso(at(11))],
        ["late", iso(at(40))]
      ])
      expect(yield* statusOf(RENEW, b.id, `${p}other-clock`)).toBe("pending")

      // Never backwards, nor to the same time.
      expectError(yield* advance(token, a.id, at(45)), 400, "parameter_invalid", "frozenTime")
      expectError(yield* advance(token, a.id, at(1)), 400, "parameter_invalid", "frozenTime")
      expect((yield* getClock(token, a.id)).frozenTime).toBe(iso(at(45)))
    })
  )

  it.scoped("a real-time worker runs real-time items and never claims a clocked kind", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const clock = yield* createClock(token, T0)
      const p = `${clock.id}:`
      const past = new Date((yield* Time.now).getTime() - DAY)
      // Due long ago in real time, and in the clock's time as well.
      yield* schedule(RENEW, clock.id, `${p}clocked`, new Date(0))
      yield* schedule(RENEW, null, `${p}real`, past)
      const dueWork = yield* BillingDueWork
      const log = yield* RanLog
      // A worker as the subscriptions part runs one: billing's base kinds, real time.
      const worker = dueWorker({
        name: "test-real-time",
        kinds: dueWork.kinds,
        handle: (item) =>
          Effect.as(
            Ref.update(log, (ran) => [
              ...ran,
              { kind: item.kind, key: item.key, dueAt: iso(item.dueAt), clockNow: "", nowFor: "" }
            ]),
            DueOutcome.done()
          )
      })
      const fiber = yield* Effect.forkScoped(worker.run)
      let status = "pending"
      for (let i = 0; i < 200 && status !== "done"; i++) {
        yield* Effect.sleep(Duration.millis(25))
        status = yield* statusOf(RENEW, null, `${p}real`)
      }
      expect(status).toBe("done")
      // A few more polls' worth of time: still never claimed.
      yield* Effect.sleep(Duration.millis(200))
      yield* Fiber.interrupt(fiber)
      expect(yield* statusOf(RENEW, clock.id, `${p}clocked`)).toBe("pending")
      expect((yield* ranOf(p)).map((r) => r.key)).toEqual([`${p}real`])
    })
  )

  it.effect("deleting a clock cancels its customers' pending work, not another clock's", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const a = yield* createClock(token, T0)
      const b = yield* createClock(token, T0)
      const p = `${a.id}:`
      yield* schedule(RENEW, a.id, `${p}soon`, at(1))
      yield* schedule(NOTIFY, a.id, `${p}years`, at(3650))
      yield* schedule(RENEW, b.id, `${p}b`, at(1))
      const deleted = yield* call("DELETE", `/v1/test/clocks/${a.id}`, { token })
      expect(ok(200)(deleted)).toEqual({ id: a.id, object: "test_clock", deleted: true })
      expect(yield* statusOf(RENEW, a.id, `${p}soon`)).toBe("cancelled")
      expect(yield* statusOf(NOTIFY, a.id, `${p}years`)).toBe("cancelled")
      expect(yield* statusOf(RENEW, b.id, `${p}b`)).toBe("pending")
      expectError(yield* call("GET", `/v1/test/clocks/${a.id}`, { token }), 404, "resource_missing")
      expectError(yield* advance(token, a.id, at(2)), 404, "resource_missing")
      expectError(yield* call("DELETE", `/v1/test/clocks/${a.id}`, { token }), 404, "resource_missing")
      // A deleted clock takes no new customer.
      const refused = yield* call("POST", "/user", {
        token,
        json: { email: `late.${Date.now()}@example.com`, firstName: "A", lastName: "B", testClockId: a.id }
      })
      expectError(refused, 400, "resource_missing", "testClockId")
      expect(ok(200)(yield* advance(token, b.id, at(2))).frozenTime).toBe(iso(at(2)))
      expect(yield* statusOf(RENEW, b.id, `${p}b`)).toBe("done")
    })
  )

  it.effect("two advances of one clock at once: one runs, the other is 409 test_clock_advancing", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const clock = yield* createClock(token, T0)
      const p = `${clock.id}:`
      yield* schedule(RENEW, clock.id, `${p}slow`, at(1), { slowMs: 500 })
      const first = yield* Effect.fork(advance(token, clock.id, at(5)))
      // Wait until the first is running its (slow) item.
      for (let i = 0; i < 200 && (yield* ranOf(p)).length === 0; i++) yield* Effect.sleep(Duration.millis(10))
      expect((yield* getClock(token, clock.id)).status).toBe("advancing")
      expectError(yield* advance(token, clock.id, at(6)), 409, "test_clock_advancing")
      expectError(
        yield* call("DELETE", `/v1/test/clocks/${clock.id}`, { token }),
        409,
        "test_clock_advancing"
      )
      const done = ok(200)(yield* Fiber.join(first))
      expect(done).toMatchObject({ status: "ready", frozenTime: iso(at(5)) })
      expect((yield* ranOf(p)).length).toBe(1)
    })
  )

  it.effect(
    "a failing handler: the advance fails, the clock is ready where it got, the item is run again next",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const clock = yield* createClock(token, T0)
        const p = `${clock.id}:`
        yield* schedule(RENEW, clock.id, `${p}ok`, at(1))
        yield* schedule(RENEW, clock.id, `${p}fails`, at(2), { failOnce: true })
        yield* schedule(RENEW, clock.id, `${p}after`, at(3))
        const failedReply = yield* advance(token, clock.id, at(5))
        expect(failedReply.status, failedReply.text).toBe(500)
        expect(yield* getClock(token, clock.id)).toMatchObject({ status: "ready", frozenTime: iso(at(2)) })
        expect(yield* statusOf(RENEW, clock.id, `${p}fails`)).toBe("pending")
        expect(yield* statusOf(RENEW, clock.id, `${p}after`)).toBe("pending")
        ok(200)(yield* advance(token, clock.id, at(5)))
        expect((yield* ranOf(p)).map((r) => [r.key.slice(p.length), r.clockNow])).toEqual([
          ["ok", iso(at(1))],
          ["fails", iso(at(2))],
          ["fails", iso(at(2))],
          ["after", iso(at(3))]
        ])
        expect(yield* statusOf(RENEW, clock.id, `${p}after`)).toBe("done")
      })
  )

  it.effect(
    "a runaway (an item due again and again) stops at the guard with 409 test_clock_advance_limit",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const clock = yield* createClock(token, T0)
        const p = `${clock.id}:`
        yield* schedule(RENEW, clock.id, `${p}again`, at(1), { again: true })
        expectError(yield* advance(token, clock.id, at(5)), 409, "test_clock_advance_limit")
        expect((yield* ranOf(p)).length).toBe(SMALL_LIMIT)
        expect(yield* getClock(token, clock.id)).toMatchObject({ status: "ready", frozenTime: iso(at(1)) })
        expect(yield* statusOf(RENEW, clock.id, `${p}again`)).toBe("pending")
      })
  )

  it.effect("an advance whose process died is taken over once it has been silent for a while", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const clock = yield* createClock(token, T0)
      const p = `${clock.id}:`
      yield* schedule(RENEW, clock.id, `${p}held`, at(1))
      // An advance to day 3 started and claimed its first item, then its process died.
      const runner = yield* CommandRunner
      yield* runner.transact(
        runner.execute(TestClockDecider, testClockStream(clock.id), {
          _tag: "StartAdvance",
          to: at(3),
          takeOver: false
        })
      )
      const work = yield* DueWork
      const claimed = yield* work
        .claim({ kinds: [clockedKind(RENEW, clock.id)], limit: 1, owner: "died", leaseTtl: "5 minutes" })
        .pipe(Effect.withClock(fixedClock(at(3))))
      expect(claimed.map((c) => c.key)).toEqual([`${p}held`])
      // Still fresh: another advance is refused.
      expectError(yield* advance(token, clock.id, at(5)), 409, "test_clock_advancing")
      // Silent for longer than STALL_AFTER: the next advance takes over, and runs the abandoned item.
      const sql = yield* SqlClient.SqlClient
      const silentSince = new Date((yield* Time.now).getTime() - Duration.toMillis(STALL_AFTER) - 1000)
      yield* sql`UPDATE billing.test_clocks SET heartbeat_at = ${silentSince} WHERE clock_id = ${clock.id}`
      expect(ok(200)(yield* advance(token, clock.id, at(5)))).toMatchObject({
        status: "ready",
        frozenTime: iso(at(5))
      })
      expect((yield* ranOf(p)).map((r) => [r.key.slice(p.length), r.clockNow])).toEqual([
        ["held", iso(at(1))]
      ])
      expect(yield* statusOf(RENEW, clock.id, `${p}held`)).toBe("done")
    })
  )
})
