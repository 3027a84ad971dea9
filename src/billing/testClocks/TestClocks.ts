/**
 * The test clock use cases behind `/v1/test/clocks` (Stripe's test clocks), and `BillingClock`
 * (contract.ts): the time a customer lives on.
 *
 * - A customer created with `testClockId` lives on the clock's frozen time: billing schedules their
 *   due work under `<kind>@<clockId>` (contract `clockedKind`), which no real-time worker claims, and
 *   asks `BillingClock.nowFor(clockId)` for "now".
 * - Advancing runs that work, one item at a time in due-time order, each under an Effect Clock fixed
 *   at its due time, with the clock's frozen time persisted at that time first (so `nowFor` answers
 *   it too), through `BillingDueWork.process` (the subscriptions part's handlers and the recording of
 *   their outcome): items due up to the target, including those the handlers schedule on the way.
 *   The clock is `advancing` meanwhile (one advance at a time; a stalled one — no step for
 *   `STALL_AFTER` of real time — can be taken over) and `ready` at the target at the end.
 * - Deleting a clock cancels its customers' subscriptions that are not over (at the clock's time,
 *   nothing billed: Stripe deletes a deleted clock's customers) and their pending due work, in the
 *   same transaction. The customers stay; with no clock they live on real time.
 * - Only with the test processor: with another, every route answers 404 and `testClockId` is refused.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Context, Duration, Effect, Exit, Layer, Option } from "effect"
import { AppConfig } from "../../config.js"
import { CustomerClocks, findCustomer } from "../../customers/index.js"
import { provideSqlClient } from "../../db/Sql.js"
import type { EventMetadata } from "../../eventstore/EventStore.js"
import type { AuthenticatedActor } from "../../http/Auth.js"
import { BadRequest, Conflict, NotFound, orDieUnlessHttp } from "../../http/errors.js"
import type { V1ListParams } from "../../http/Lists.js"
import { CommandRunner } from "../../kernel/CommandRunner.js"
import * as Ids from "../../kernel/Ids.js"
import * as Time from "../../kernel/Time.js"
import { commandMetadata } from "../../kernel/UseCase.js"
import { type DueItem, DueWork } from "../../processors/DueWork.js"
import { BillingClock, BillingDueWork, type BillingDueWorkShape, clockedKind } from "../contract.js"
import { MAX_ITEMS_PER_ADVANCE, type NewTestClockInput, type TestClockObject } from "./Api.js"
import { type TestClockCommand, TestClockDecider, type TestClockState, testClockStream } from "./decider.js"
import {
  frozenTimeOf,
  holdClock,
  listClocks,
  lockClock,
  selectClock,
  stepFrozenTime,
  type TestClockRow
} from "./queries.js"

/** An advance with no step for this long (real time) is taken to have died: another may take over. */
export const STALL_AFTER = Duration.minutes(2)

/** The lease of an item an advance claims (in the clock's time; no real-time worker claims these kinds). */
const ITEM_LEASE = Duration.minutes(5)

/** How often one item may ask to run again within one advance before the advance gives up on it. */
const MAX_RERUNS = 20

/** Items claimed per statement when a deleted clock's pending work is cancelled. */
const CANCEL_BATCH = 500

/** Later than any due time: a deleted clock's items are claimed (to be cancelled) whenever they fall due. */
const END_OF_TIME = new Date("9999-12-31T23:59:59.999Z")

/** An Effect Clock that stands still at `at` (sleeping still takes real time). */
export const fixedClock = (at: Date): Clock.Clock => {
  const live = Clock.make()
  const ms = at.getTime()
  return {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: () => ms,
    currentTimeMillis: Effect.succeed(ms),
    unsafeCurrentTimeNanos: () => BigInt(ms) * 1_000_000n,
    currentTimeNanos: Effect.succeed(BigInt(ms) * 1_000_000n),
    sleep: (duration) => live.sleep(duration)
  }
}

/** The due-work kinds of one clock's customers. */
export const kindsOf = (dueWork: BillingDueWorkShape, clockId: string) =>
  dueWork.kinds.map((kind) => clockedKind(kind, clockId))

const later = (a: Date, b: Date) => (a.getTime() >= b.getTime() ? a : b)

export const objectOfState = (state: TestClockState): TestClockObject => ({
  object: "test_clock",
  id: state.clockId,
  frozenTime: state.frozenTime,
  name: state.name,
  status: state.status,
  createdAt: state.createdAt
})

export const objectOfRow = (row: TestClockRow): TestClockObject => ({
  object: "test_clock",
  id: row.id,
  frozenTime: row.frozenTime,
  name: row.name,
  status: row.status,
  createdAt: row.createdAt
})

const notFound = NotFound.of({ message: "No such test clock", param: "id" })

const advancing = Conflict.of({
  code: "test_clock_advancing",
  message: "This test clock is advancing: wait until it is ready (GET shows its status)."
})

/** Routes answer as if they did not exist (as the other test helpers do) without the test processor. */
const notOffered = (method: string, path: string) =>
  NotFound.of({
    message: `Unrecognized request URL (${method}: ${path}): test clocks exist only with PAYMENT_PROCESSOR=test`
  })

export interface TestClocksOptions {
  /** The runaway guard: due items one advance runs at most (default `MAX_ITEMS_PER_ADVANCE`). */
  readonly maxItemsPerAdvance?: number
}

export const makeTestClocksWith = (options: TestClocksOptions = {}) =>
  Effect.gen(function* () {
    const maxItems = options.maxItemsPerAdvance ?? MAX_ITEMS_PER_ADVANCE
    const runner = yield* CommandRunner
    const sql = yield* SqlClient.SqlClient
    const work = yield* DueWork
    const config = yield* AppConfig
    const offered = config.payments.processor === "test"

    const offeredOr = (method: string, path: string) =>
      offered ? Effect.void : Effect.fail(notOffered(method, path))

    const validId = (id: string) => (Ids.isValid("clock", id) ? Effect.succeed(id) : Effect.fail(notFound))

    const execute = (clockId: string, command: TestClockCommand, metadata: EventMetadata) =>
      runner.execute(TestClockDecider, testClockStream(clockId), command, {
        metadata,
        newStream: command._tag === "Create"
      })

    /** The clock's row, locked; 404 when there is none (never created, or deleted). */
    const locked = (clockId: string) =>
      Effect.flatMap(lockClock(sql, clockId), (row) =>
        Option.match(row, { onNone: () => Effect.fail(notFound), onSome: Effect.succeed })
      )

    /** An advance under way whose last step is older than `STALL_AFTER` (its process died). */
    const stalled = (row: TestClockRow) =>
      Effect.map(
        Time.now,
        (now) =>
          row.status === "advancing" &&
          (row.heartbeatAt === null ||
            now.getTime() - row.heartbeatAt.getTime() > Duration.toMillis(STALL_AFTER))
      )

    const create = (actor: AuthenticatedActor, input: NewTestClockInput) =>
      Effect.gen(function* () {
        yield* offeredOr("POST", "/v1/test/clocks")
        const clockId = yield* Ids.make("clock")
        const metadata = yield* commandMetadata(actor)
        const result = yield* runner.transact(
          execute(
            clockId,
            { _tag: "Create", clockId, name: input.name ?? null, frozenTime: input.frozenTime },
            metadata
          )
        )
        return objectOfState(result.state)
      }).pipe(orDieUnlessHttp)

    const get = (id: string) =>
      Effect.gen(function* () {
        yield* offeredOr("GET", `/v1/test/clocks/${id}`)
        const clockId = yield* validId(id)
        const row = yield* selectClock(sql, clockId)
        if (Option.isNone(row)) return yield* Effect.fail(notFound)
        return objectOfRow(row.value)
      }).pipe(orDieUnlessHttp)

    const list = (params: V1ListParams) =>
      Effect.gen(function* () {
        yield* offeredOr("GET", "/v1/test/clocks")
        return yield* listClocks(sql, params, objectOfRow)
      }).pipe(orDieUnlessHttp)

    /**
     * Cancels every pending (or abandoned) item of the clock's kinds, in the caller's transaction:
     * claimed as if at the end of time (so whatever their due time), then cancelled, a batch per statement.
     */
    const cancelWork = (kinds: ReadonlyArray<string>, clockId: string) =>
      Effect.gen(function* () {
        let cancelled = 0
        while (true) {
          const items = yield* work
            .claim({
              kinds,
              limit: CANCEL_BATCH,
              owner: `test-clock-delete:${clockId}`,
              leaseTtl: ITEM_LEASE
            })
            .pipe(Effect.withClock(fixedClock(END_OF_TIME)))
          cancelled += yield* work.cancelMany(items)
          if (items.length < CANCEL_BATCH) return cancelled
        }
      })

    const remove = (actor: AuthenticatedActor, id: string) =>
      Effect.gen(function* () {
        yield* offeredOr("DELETE", `/v1/test/clocks/${id}`)
        const clockId = yield* validId(id)
        const dueWork = yield* BillingDueWork
        const metadata = yield* commandMetadata(actor)
        yield* runner
          .transact(
            Effect.gen(function* () {
              const row = yield* locked(clockId)
              const takeOver = yield* stalled(row)
              // While the clock still answers its time: the subscriptions end at it. Not while an
              // advance runs (the Delete below refuses it): its items hold those subscriptions' locks.
              const busy = row.status === "advancing" && !takeOver
              const subscriptions = busy ? 0 : yield* dueWork.clockDeleted(clockId, metadata)
              yield* execute(clockId, { _tag: "Delete", takeOver }, metadata)
              const cancelled = yield* cancelWork(kindsOf(dueWork, clockId), clockId)
              if (cancelled > 0 || subscriptions > 0)
                yield* Effect.logInfo(
                  `test clock ${clockId} deleted: ${subscriptions} subscriptions canceled, ${cancelled} due items cancelled`
                )
            })
          )
          .pipe(
            Effect.catchTags({
              TestClockNotFound: () => Effect.fail(notFound),
              TestClockBusy: () => Effect.fail(advancing)
            })
          )
        return { id: clockId, object: "test_clock" as const, deleted: true as const }
      }).pipe(orDieUnlessHttp)

    /** How an advance's loop ended. */
    type Stop = "Done" | "Limit" | "TakenOver"
    const stopped = (stop: Stop, reached: Date) => ({ stop, reached })

    /**
     * Runs the clock's due items up to `target`, one at a time in due-time order (the advance started
     * at `version` holds the clock). Answers how it stopped and how far the clock got.
     */
    const runDue = (
      dueWork: BillingDueWorkShape,
      clockId: string,
      version: number,
      from: Date,
      target: Date
    ) =>
      Effect.gen(function* () {
        const kinds = kindsOf(dueWork, clockId)
        const owner = `test-clock:${clockId}`
        let reached = from
        let count = 0
        // Runs of one item that asked to run again: a handler that keeps failing stops the advance
        // (a 500) instead of re-running the same item, a second later each time, up to the limit.
        const reruns = new Map<string, number>()
        while (true) {
          // Under the target's time: exactly the items due up to it are claimable (the earliest first).
          const [item] = yield* work
            .claim({ kinds, limit: 1, owner, leaseTtl: ITEM_LEASE })
            .pipe(Effect.withClock(fixedClock(target)))
          if (item === undefined) return stopped("Done", reached)
          if (count >= maxItems) {
            yield* work.release(item)
            return stopped("Limit", reached)
          }
          count++
          // An item left behind by an advance that died may be due before where the clock is now.
          const at = later(item.dueAt, reached)
          if (!(yield* stepFrozenTime(sql, clockId, version, at, yield* Time.now))) {
            yield* work.release(item)
            return stopped("TakenOver", reached)
          }
          const outcome = yield* runItem(dueWork, item, at)
          reached = at
          if (outcome === "Retry") {
            const n = (reruns.get(item.id) ?? 0) + 1
            if (n > MAX_RERUNS)
              return yield* Effect.dieMessage(
                `due item ${item.kind} ${item.key} asked to run again ${n} times in one advance: ${item.lastError ?? "no error recorded"}`
              )
            reruns.set(item.id, n)
          }
        }
      })

    /** One item through billing's handler, as at `at`; a failure gives the claim back first. */
    const runItem = (dueWork: BillingDueWorkShape, item: DueItem, at: Date) =>
      dueWork.process(item).pipe(
        Effect.withClock(fixedClock(at)),
        Effect.onError(() => Effect.ignore(work.release(item))),
        Effect.withSpan("test_clock.run_item", { attributes: { "due.kind": item.kind, "due.id": item.id } })
      )

    /**
     * Records the advance started at `version` finished at `frozenTime` — only while it is still the
     * clock's (none: another advance took it over, which finishes it itself).
     */
    const finish = (clockId: string, version: number, frozenTime: Date, metadata: EventMetadata) =>
      runner.transact(
        Effect.gen(function* () {
          const row = yield* lockClock(sql, clockId)
          if (Option.isNone(row) || row.value.version !== version) return Option.none()
          return Option.some(yield* execute(clockId, { _tag: "FinishAdvance", frozenTime }, metadata))
        })
      )

    const advance = (actor: AuthenticatedActor, id: string, target: Date) =>
      Effect.gen(function* () {
        yield* offeredOr("POST", `/v1/test/clocks/${id}/advance`)
        const clockId = yield* validId(id)
        const dueWork = yield* BillingDueWork
        const metadata = yield* commandMetadata(actor)
        const started = yield* runner
          .transact(
            Effect.gen(function* () {
              const row = yield* locked(clockId)
              const result = yield* execute(
                clockId,
                { _tag: "StartAdvance", to: target, takeOver: yield* stalled(row) },
                metadata
              )
              // While advancing, the read model's frozen time moves item by item from here.
              return { version: result.version, from: later(row.frozenTime, result.state.frozenTime) }
            })
          )
          .pipe(
            Effect.catchTags({
              TestClockNotFound: () => Effect.fail(notFound),
              TestClockBusy: () => Effect.fail(advancing),
              FrozenTimeNotLater: (e) =>
                Effect.fail(
                  BadRequest.of({
                    code: "parameter_invalid",
                    message: `frozenTime must be later than the clock's current time (${e.frozenTime.toISOString()})`,
                    param: "frozenTime"
                  })
                )
            })
          )
        // Once started, the advance runs to its end even if the client goes away: the clock is
        // `advancing` until it is recorded ready.
        return yield* Effect.uninterruptible(
          Effect.gen(function* () {
            const ran = yield* Effect.exit(runDue(dueWork, clockId, started.version, started.from, target))
            if (Exit.isFailure(ran)) {
              // A handler failed: the clock stops where it got (the item is pending again), and the
              // failure is answered (a 500: nothing the request did wrong).
              const reached = yield* Effect.map(
                frozenTimeOf(sql, clockId),
                Option.getOrElse(() => started.from)
              )
              yield* Effect.ignoreLogged(finish(clockId, started.version, reached, metadata))
              return yield* Effect.failCause(ran.cause)
            }
            const { stop, reached } = ran.value
            switch (stop) {
              case "TakenOver":
                return yield* Effect.fail(advancing)
              case "Limit":
                yield* finish(clockId, started.version, reached, metadata)
                return yield* Effect.fail(
                  Conflict.of({
                    code: "test_clock_advance_limit",
                    message:
                      `More than ${maxItems} due items in one advance: the clock stopped at ` +
                      `${reached.toISOString()}. Advance it again to go on.`
                  })
                )
              case "Done": {
                const result = yield* finish(clockId, started.version, target, metadata)
                if (Option.isNone(result)) return yield* Effect.fail(advancing)
                return objectOfState(result.value.state)
              }
            }
          })
        )
      }).pipe(
        Effect.catchTags({
          TestClockNotFound: () => Effect.fail(notFound),
          TestClockBusy: () => Effect.fail(advancing)
        }),
        orDieUnlessHttp
      )

    return { create, get, list, remove, advance }
  })

export const makeTestClocks = makeTestClocksWith()

export type TestClocksShape = Effect.Effect.Success<typeof makeTestClocks>

export class TestClocks extends Context.Tag("billing/TestClocks")<TestClocks, TestClocksShape>() {}

export const TestClocksLive = Layer.effect(TestClocks, makeTestClocks)

/** `BillingClock` (contract): a test clock's frozen time, or the Clock's now. */
export const BillingClockLive = Layer.effect(
  BillingClock,
  Effect.map(SqlClient.SqlClient, (sql) =>
    BillingClock.of({
      nowFor: (testClockId) =>
        testClockId === null
          ? Time.now
          : Effect.flatMap(
              frozenTimeOf(sql, testClockId),
              Option.match({ onNone: () => Time.now, onSome: Effect.succeed })
            ),
      // A deleted clock's customers live on real time (its row is gone): what they start now is on
      // no clock, or its due work would be of a clocked kind that nothing runs any more.
      clockOf: (customerId) =>
        Effect.flatMap(provideSqlClient(sql)(findCustomer(customerId)), (customer) => {
          const testClockId = Option.isSome(customer) ? customer.value.testClockId : null
          return testClockId === null
            ? Effect.succeed(null)
            : Effect.map(frozenTimeOf(sql, testClockId), (time) => (Option.isSome(time) ? testClockId : null))
        })
    })
  )
)

/** What customers ask when one is created on a clock (`POST /user {testClockId}`). */
export const CustomerClocksLive = Layer.effect(
  CustomerClocks,
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    return CustomerClocks.of({
      offered: config.payments.processor === "test",
      hold: (testClockId) =>
        Ids.isValid("clock", testClockId) ? holdClock(sql, testClockId) : Effect.succeed(false)
    })
  })
)
