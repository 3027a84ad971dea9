/**
 * The process-manager runner against a real database: input events from a checkpointed subscription,
 * timeouts from due work, outputs through ports in the batch's transaction — each exactly once per
 * input, whether the batch is redelivered, the checkpoint reset or the process stopped mid-batch.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option, TestClock } from "effect"
import { expect } from "vitest"
import { EventStore } from "../../src/eventstore/EventStore.js"
import { outputId } from "../../src/kernel/ProcessManager.js"
import { DueWork, DueWorkLive } from "../../src/processors/DueWork.js"
import {
  type CommandHandlers,
  processManagerSubscription,
  processManagerTimeouts,
  processStreamId,
  runBatch,
  timeoutKind
} from "../../src/processors/ProcessManagerRunner.js"
import { TestPersistence } from "../support/database.js"
import {
  makeOrderReminder,
  REMINDER_DELAY_MS,
  type ToyCommands,
  ToyOrderPaid,
  ToyOrderPlaced
} from "../support/orderReminder.js"
import { inputOf } from "../support/processManager.js"
import { eventually, nudging, parked, withTestClock } from "./helpers.js"

const TestLayer = DueWorkLive.pipe(Layer.provideMerge(TestPersistence))

const fast = { pollInterval: { min: "5 millis", max: "50 millis" }, acquireInterval: "50 millis" } as const

const setup = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`CREATE TABLE IF NOT EXISTS toy_commands (
    pm text NOT NULL, kind text NOT NULL, id text NOT NULL, order_id text NOT NULL)`
)

/** The ports: record each command executed (no unique key: a second execution would show). */
const record = (kind: string, id: string, orderId: string, pm: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`INSERT INTO toy_commands (pm, kind, id, order_id) VALUES (${pm}, ${kind}, ${id}, ${orderId})`
  )

const handlers: CommandHandlers<ToyCommands, unknown, SqlClient.SqlClient> = {
  "reminders.send": (c, ctx) => record(c.kind, c.id, c.input.orderId, ctx.processManager),
  "receipts.send": (c, ctx) => record(c.kind, c.id, c.input.orderId, ctx.processManager)
}

/** The commands a process manager executed for orders `<prefix>…` (its subscription reads the whole feed). */
const commands = (pm: string, prefix = "") =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ kind: string; id: string; orderId: string }>`
      SELECT kind, id, order_id AS "orderId" FROM toy_commands
       WHERE pm = ${pm} AND starts_with(order_id, ${prefix}) ORDER BY order_id, kind`
  )

const commandCount = (pm: string, n: number, prefix = "") =>
  Effect.map(commands(pm, prefix), (rows) => rows.length >= n)

const placeAndPay = (orderId: string, options: { readonly pay?: boolean } = {}) =>
  Effect.flatMap(EventStore, (store) =>
    store.append({
      streamId: `toy_order-${orderId}`,
      streamType: "toy_order",
      expectedVersion: "no_stream",
      events: [
        { eventType: ToyOrderPlaced, data: { orderId, total: 4200 } },
        ...(options.pay === false ? [] : [{ eventType: ToyOrderPaid, data: { orderId } }])
      ]
    })
  )

const instanceEvents = (pm: string, orderId: string) =>
  Effect.flatMap(EventStore, (store) =>
    store
      .readStream(processStreamId(pm, `order-${orderId}`))
      .pipe(Effect.catchTag("StreamNotFound", () => Effect.succeed([])))
  )

const dueRow = (pm: string, key: string) =>
  Effect.flatMap(DueWork, (work) => work.get(timeoutKind(pm), key)).pipe(Effect.map(Option.getOrUndefined))

const subscriptionRow = (id: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ owner: string | null; lastPosition: number }>`
      SELECT owner, last_position AS "lastPosition" FROM event_store.subscriptions WHERE subscription_id = ${id}`
  ).pipe(Effect.map((rows) => rows[0]))

layer(TestLayer, { excludeTestServices: true, timeout: 60_000 })("process manager runner", (it) => {
  it.effect("an event triggers its command exactly once; a redelivered batch adds nothing", () =>
    Effect.gen(function* () {
      yield* setup
      const sql = yield* SqlClient.SqlClient
      const pm = makeOrderReminder("toy-once")
      const sub = processManagerSubscription(pm, handlers, { source: "events", owner: "node-a", ...fast })
      const appended = yield* placeAndPay("o1")
      yield* placeAndPay("o2", { pay: false })
      const fiber = yield* Effect.fork(sub.run)
      yield* eventually(commandCount("toy-once", 1))
      yield* eventually(Effect.map(sub.status, (s) => s.lagEvents === 0))
      yield* Fiber.interrupt(fiber)

      // o1: paid, so one receipt and its reminder cancelled; o2: a reminder pending for tomorrow.
      const [stored] = yield* Effect.flatMap(EventStore, (s) => s.readStream("toy_order-o1"))
      const paidId = appended.eventIds[1] ?? ""
      expect(yield* commands("toy-once")).toEqual([
        {
          kind: "receipts.send",
          id: outputId({ id: paidId, occurredAt: appended.recordedAt }, "receipt"),
          orderId: "o1"
        }
      ])
      const reminderO1 = outputId({ id: stored?.eventId ?? "", occurredAt: appended.recordedAt }, "reminder")
      expect(yield* dueRow("toy-once", reminderO1)).toMatchObject({ status: "cancelled" })
      const o2 = yield* instanceEvents("toy-once", "o2")
      expect(o2.map((e) => e.type)).toEqual(["process.input_handled"])
      const pending = yield* Effect.flatMap(DueWork, (w) => w.stats([timeoutKind("toy-once")]))
      expect(pending[0]).toMatchObject({ pending: 1 })
      const o1 = yield* instanceEvents("toy-once", "o1")
      expect(o1.map((e) => e.data)).toMatchObject([
        {
          processManager: "toy-once",
          instanceId: "order-o1",
          input: { type: "toy_order.placed", id: stored?.eventId, data: { orderId: "o1", total: 4200 } },
          outputs: [{ kind: "timeout", id: reminderO1 }]
        },
        {
          input: { type: "toy_order.paid", id: paidId },
          outputs: [
            { kind: "cancel-timeout", id: reminderO1 },
            {
              kind: "receipts.send",
              id: outputId({ id: paidId, occurredAt: appended.recordedAt }, "receipt")
            }
          ]
        }
      ])

      // The same batch delivered again, directly: every input is recognised as handled.
      const rows = yield* Effect.flatMap(EventStore, (s) =>
        s.readAll({ after: { xid: "0", position: 0 }, limit: 10_000 })
      )
      yield* sql.withTransaction(runBatch(pm, handlers, rows.events))
      expect((yield* commands("toy-once")).length).toBe(1)
      expect((yield* instanceEvents("toy-once", "o1")).length).toBe(2)

      // An operator resets the checkpoint: the whole feed is delivered again, nothing is repeated.
      yield* sql`UPDATE event_store.subscriptions SET last_xid = '0', last_position = 0
                  WHERE subscription_id = 'toy-once'`
      const again = yield* Effect.fork(sub.run)
      yield* eventually(Effect.map(sub.status, (s) => s.lagEvents === 0 && s.checkpoint.position > 0))
      yield* Fiber.interrupt(again)
      expect((yield* commands("toy-once")).length).toBe(1)
      expect((yield* instanceEvents("toy-once", "o1")).length).toBe(2)
      expect((yield* instanceEvents("toy-once", "o2")).length).toBe(1)
    })
  )

  it.effect("stopped mid-batch, after a port ran: nothing is kept, and the restart does it once", () =>
    Effect.gen(function* () {
      yield* setup
      const pm = makeOrderReminder("toy-crash")
      const inPort = yield* Deferred.make<void>()
      // The receipt port runs, then the process "dies" before the checkpoint commits.
      const dying: CommandHandlers<ToyCommands, unknown, SqlClient.SqlClient> = {
        ...handlers,
        "receipts.send": (c, ctx) =>
          Effect.zipRight(
            record(c.kind, c.id, c.input.orderId, ctx.processManager),
            Effect.zipRight(Deferred.succeed(inPort, undefined), Effect.never)
          )
      }
      yield* placeAndPay("crash-1")
      yield* placeAndPay("crash-2")
      const fiber = yield* Effect.fork(
        processManagerSubscription(pm, dying, { source: "events", owner: "node-a", ...fast }).run
      )
      yield* Deferred.await(inPort)
      yield* Fiber.interrupt(fiber)
      expect(yield* commands("toy-crash", "crash-")).toEqual([])
      expect(yield* instanceEvents("toy-crash", "crash-1")).toEqual([])
      expect(yield* subscriptionRow("toy-crash")).toMatchObject({ owner: null, lastPosition: 0 })

      const sub = processManagerSubscription(pm, handlers, { source: "events", owner: "node-b", ...fast })
      const restarted = yield* Effect.fork(sub.run)
      yield* eventually(commandCount("toy-crash", 2, "crash-"))
      yield* eventually(Effect.map(sub.status, (s) => s.lagEvents === 0))
      yield* Fiber.interrupt(restarted)
      const done = yield* commands("toy-crash", "crash-")
      expect(done.map((c) => `${c.kind}:${c.orderId}`)).toEqual([
        "receipts.send:crash-1",
        "receipts.send:crash-2"
      ])
      expect(new Set(done.map((c) => c.id)).size).toBe(2)
      expect((yield* instanceEvents("toy-crash", "crash-1")).length).toBe(2)
    })
  )

  it.effect("timeouts: fired once due, never once cancelled, ignored when stale", () =>
    withTestClock(
      Effect.gen(function* () {
        yield* setup
        const pm = makeOrderReminder("toy-timeouts")
        const work = yield* DueWork
        const sub = yield* Effect.fork(
          processManagerSubscription(pm, handlers, { source: "events", owner: "node-a", ...fast }).run
        )
        // Placed at the TestClock's time: A is never paid, B is paid before its reminder is due.
        const a = yield* placeAndPay("t-a", { pay: false })
        const b = yield* placeAndPay("t-b")
        const reminderOf = (appended: typeof a) =>
          outputId({ id: appended.eventIds[0] ?? "", occurredAt: appended.recordedAt }, "reminder")
        const reminderA = reminderOf(a)
        const reminderB = reminderOf(b)
        yield* nudging(Effect.map(dueRow("toy-timeouts", reminderA), (r) => r?.status === "pending"))
        yield* nudging(Effect.map(dueRow("toy-timeouts", reminderB), (r) => r?.status === "cancelled"))
        yield* Fiber.interrupt(sub)
        expect((yield* dueRow("toy-timeouts", reminderA))?.dueAt.getTime()).toBe(
          a.recordedAt.getTime() + REMINDER_DELAY_MS
        )

        // A minute before: the worker's round finds nothing due. (Polling loops are started after
        // the jump: a day of 50 ms polls replayed by the TestClock would only slow the test down.)
        yield* TestClock.adjust(REMINDER_DELAY_MS - 60_000)
        const timeouts = yield* Effect.fork(
          processManagerTimeouts(pm, handlers, { owner: "node-a", pollInterval: "100 millis" }).run
        )
        yield* parked()
        expect(yield* commands("toy-timeouts", "t-")).toEqual([
          expect.objectContaining({ kind: "receipts.send", orderId: "t-b" })
        ])
        // The clock passes it: one reminder for A, none for B (cancelled).
        yield* TestClock.adjust("1 minute")
        yield* nudging(Effect.map(dueRow("toy-timeouts", reminderA), (r) => r?.status === "done"))
        expect((yield* commands("toy-timeouts", "t-")).map((c) => `${c.kind}:${c.orderId}`)).toEqual([
          "reminders.send:t-a",
          "receipts.send:t-b"
        ])
        expect(yield* dueRow("toy-timeouts", reminderB)).toMatchObject({ status: "cancelled" })
        const a1 = yield* instanceEvents("toy-timeouts", "t-a")
        expect(a1.map((e) => e.data)).toMatchObject([
          { input: { type: "toy_order.placed" } },
          { input: { type: "timeout", id: reminderA, data: { orderId: "t-a" } } }
        ])

        // B's cancelled timeout comes due anyway (a cancel that lost a race with its claim): the
        // instance no longer expects it, so it is stale and sends nothing.
        const rearm = (key: string, appended: typeof a, orderId: string) =>
          work.schedule({
            kind: timeoutKind("toy-timeouts"),
            key,
            dueAt: new Date(appended.recordedAt.getTime() + REMINDER_DELAY_MS),
            payload: { instanceId: `order-${orderId}`, payload: { orderId } },
            replace: true
          })
        yield* rearm(reminderB, b, "t-b")
        yield* nudging(Effect.map(dueRow("toy-timeouts", reminderB), (r) => r?.status === "done"))
        // A's timeout delivered a second time: the instance has handled it already.
        yield* rearm(reminderA, a, "t-a")
        yield* nudging(Effect.map(dueRow("toy-timeouts", reminderA), (r) => r?.status === "done"))
        yield* Fiber.interrupt(timeouts)
        expect((yield* commands("toy-timeouts", "t-")).length).toBe(2)
        expect((yield* instanceEvents("toy-timeouts", "t-b")).length).toBe(2)
        expect((yield* instanceEvents("toy-timeouts", "t-a")).length).toBe(2)
      })
    )
  )

  it.effect("inputs of one instance in one batch see each other; other event types are skipped", () =>
    Effect.gen(function* () {
      yield* setup
      const sql = yield* SqlClient.SqlClient
      const pm = makeOrderReminder("toy-direct")
      const placed = inputOf(ToyOrderPlaced, { orderId: "d1", total: 10 }, { id: "placed-d1" })
      const paid = inputOf(ToyOrderPaid, { orderId: "d1" }, { id: "paid-d1" })
      yield* sql.withTransaction(
        runBatch(pm, handlers, [
          {
            id: "evt_other",
            type: "toy_other.happened",
            data: {},
            occurredAt: placed.occurredAt,
            sourceEventId: "00000000-0000-7000-8000-000000000001",
            streamId: "toy_other-1",
            position: 1,
            transactionId: "1",
            subjectId: null
          },
          ...[placed, paid].map((input) => ({
            id: input.id,
            type: input.type,
            data: input.data,
            occurredAt: input.occurredAt,
            sourceEventId: "00000000-0000-7000-8000-000000000002",
            streamId: "toy_order-d1",
            position: 2,
            transactionId: "1",
            subjectId: null
          }))
        ])
      )
      expect((yield* commands("toy-direct")).map((c) => c.kind)).toEqual(["receipts.send"])
      expect((yield* instanceEvents("toy-direct", "d1")).map((e) => e.streamVersion)).toEqual([1, 2])
    })
  )
})
