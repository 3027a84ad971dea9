/**
 * The one transaction rule (db/Transaction, CommandRunner.transact): every command-running entry
 * point joins the caller's transaction; only the owner retries, wakes processors (after its commit)
 * and writes snapshots (after its commit, never inside the caller's transaction).
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Data, Effect, Layer, Option, Queue, Schema } from "effect"
import { expect } from "vitest"
import { afterCommit } from "../../src/db/Transaction.js"
import { AppendSignal } from "../../src/eventstore/AppendSignal.js"
import { EventStore, type EventStoreShape } from "../../src/eventstore/EventStore.js"
import { defineEvent } from "../../src/eventstore/EventType.js"
import { CommandRunner, CommandRunnerLive } from "../../src/kernel/CommandRunner.js"
import { defineDecider } from "../../src/kernel/Decider.js"
import { ProjectionsLive } from "../../src/kernel/Projection.js"
import { DueWork, DueWorkLive } from "../../src/processors/DueWork.js"
import { TestPersistence } from "../support/database.js"
import {
  AccountDecider,
  type AccountStateSchema,
  AccountsProjection,
  createAccountsTable,
  openAccount,
  SnapshottingAccountDecider
} from "../support/sample.js"

/** Two more aggregate types beside the sample account, so one use case spans three. */
const NoteWritten = defineEvent("note.written", { schema: Schema.Struct({ text: Schema.String }) })
class NoteRefused extends Data.TaggedError("NoteRefused")<{ readonly text: string }> {}
const NoteDecider = defineDecider({
  streamType: "note",
  events: [NoteWritten],
  initialState: 0,
  evolve: (count: number) => count + 1,
  decide: (command: { readonly text: string }) =>
    command.text === "refuse"
      ? Effect.fail(new NoteRefused({ text: command.text }))
      : Effect.succeed([NoteWritten.make({ text: command.text })])
})

const TallyCounted = defineEvent("tally.counted", { schema: Schema.Struct({ by: Schema.String }) })
/**
 * A tally whose decision, the first `races` times it is asked, lets a rival append to the same
 * stream first (in the same transaction, so this works on a single-session database too): the
 * command's own append then loses the race exactly as it would to another process.
 */
const racingTally = (store: EventStoreShape, races: number) => {
  const calls = { count: 0 }
  const decider = defineDecider({
    streamType: "tally",
    events: [TallyCounted],
    initialState: 0,
    evolve: (count: number) => count + 1,
    decide: (command: { readonly streamId: string }) =>
      Effect.suspend(() => {
        calls.count++
        const mine = [TallyCounted.make({ by: "me" })]
        if (calls.count > races) return Effect.succeed(mine)
        return store
          .append({
            streamId: command.streamId,
            streamType: "tally",
            expectedVersion: "any",
            events: [{ eventType: TallyCounted, data: { by: "rival" } }]
          })
          .pipe(Effect.orDie, Effect.as(mine))
      })
  })
  return { decider, calls }
}

const TestLayer = Layer.mergeAll(CommandRunnerLive, DueWorkLive).pipe(
  Layer.provideMerge(ProjectionsLive([AccountsProjection])),
  Layer.provideMerge(Layer.effectDiscard(createAccountsTable)),
  Layer.provideMerge(TestPersistence)
)

const streamLength = (streamId: string) =>
  Effect.flatMap(EventStore, (store) =>
    Effect.map(
      store.readStream(streamId).pipe(Effect.catchTag("StreamNotFound", () => Effect.succeed([]))),
      (events) => events.length
    )
  )

layer(TestLayer, { excludeTestServices: true, timeout: 120_000 })("one transaction rule", (it) => {
  it.effect("a use case writing three aggregate types that fails at the third leaves nothing", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const store = yield* EventStore
      const sql = yield* SqlClient.SqlClient
      const { decider: tally } = racingTally(store, 0)
      const useCase = (note: string) =>
        runner.transact(
          Effect.gen(function* () {
            yield* runner.execute(AccountDecider, "account-t1", openAccount("t1", "Ann"))
            yield* runner.execute(tally, "tally-t1", { streamId: "tally-t1" })
            yield* runner.execute(NoteDecider, "note-t1", { text: note })
          })
        )
      const failed = yield* Effect.flip(useCase("refuse"))
      expect(failed._tag).toBe("NoteRefused")
      expect(yield* streamLength("account-t1")).toBe(0)
      expect(yield* streamLength("tally-t1")).toBe(0)
      expect(yield* streamLength("note-t1")).toBe(0)
      expect(yield* sql`SELECT 1 FROM read_models.sample_accounts WHERE account_id = 't1'`).toHaveLength(0)
      expect(yield* sql`SELECT 1 FROM event_store.public_events WHERE stream_id = 'account-t1'`).toHaveLength(
        0
      )
      expect(yield* sql`SELECT 1 FROM event_store.streams WHERE stream_id LIKE '%-t1'`).toHaveLength(0)
      // The same use case with a valid third command commits all three.
      yield* useCase("fine")
      expect([
        yield* streamLength("account-t1"),
        yield* streamLength("tally-t1"),
        yield* streamLength("note-t1")
      ]).toEqual([1, 1, 1])
      expect(yield* sql`SELECT 1 FROM read_models.sample_accounts WHERE account_id = 't1'`).toHaveLength(1)
    })
  )

  it.effect(
    "a conflict inside a use case is retried once, by the transaction's owner, not by the command",
    () =>
      Effect.gen(function* () {
        const runner = yield* CommandRunner
        const store = yield* EventStore
        const { decider, calls } = racingTally(store, 1)
        let bodies = 0
        yield* runner.transact(
          Effect.gen(function* () {
            bodies++
            yield* runner.execute(AccountDecider, "account-t2", openAccount("t2", "Bo"))
            yield* runner.execute(decider, "tally-t2", { streamId: "tally-t2" })
          })
        )
        // One lost race: the whole use case ran twice, the command decided twice (not 5 × 5 times).
        expect(bodies).toBe(2)
        expect(calls.count).toBe(2)
        // The first attempt rolled back whole: its account open, and the rival's append with it.
        expect(yield* streamLength("account-t2")).toBe(1)
        const tally = yield* store.readStream("tally-t2")
        expect(tally.map((e) => e.data)).toEqual([{ by: "me" }])
      })
  )

  it.effect("a command on its own owns its transaction and retries a lost race itself, once", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const store = yield* EventStore
      const { decider, calls } = racingTally(store, 1)
      const result = yield* runner.execute(decider, "tally-t3", { streamId: "tally-t3" })
      expect(calls.count).toBe(2)
      expect(result.version).toBe(1)
    })
  )

  it.effect("a race lost every time gives up after the owner's attempts (5), not attempts × nesting", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const store = yield* EventStore
      const { decider, calls } = racingTally(store, 1_000)
      const error = yield* Effect.flip(
        runner.transact(runner.execute(decider, "tally-t4", { streamId: "tally-t4" }))
      )
      expect(error._tag).toBe("WrongExpectedVersion")
      expect(calls.count).toBe(5)
      expect(yield* streamLength("tally-t4")).toBe(0)
    })
  )

  it.effect("a failing snapshot write never aborts the caller's transaction", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const sql = yield* SqlClient.SqlClient
      // A snapshot PostgreSQL refuses (jsonb cannot hold \u0000): the INSERT fails, which inside
      // the caller's transaction would have aborted it.
      const unstorable = {
        ...SnapshottingAccountDecider,
        snapshot: {
          every: 1,
          version: 1,
          encode: () => ({ broken: "\u0000" }),
          decode: () => Option.none<typeof AccountStateSchema.Type>()
        }
      }
      yield* runner.transact(
        Effect.gen(function* () {
          yield* runner.execute(unstorable, "account-t5", openAccount("t5", "Cy"))
          yield* runner.execute(unstorable, "account-t5", { _tag: "Deposit", accountId: "t5", amount: 5 })
          yield* runner.execute(NoteDecider, "note-t5", { text: "after the snapshots" })
        })
      )
      expect(yield* streamLength("account-t5")).toBe(2)
      expect(yield* streamLength("note-t5")).toBe(1)
      expect(yield* sql`SELECT 1 FROM event_store.snapshots WHERE stream_id = 'account-t5'`).toHaveLength(0)
      // A storable snapshot is written after the commit, by the owner, with the newest state.
      const storable = { ...unstorable, snapshot: { ...unstorable.snapshot, encode: (s: unknown) => s } }
      yield* runner.transact(
        Effect.gen(function* () {
          yield* runner.execute(storable, "account-t5", { _tag: "Deposit", accountId: "t5", amount: 1 })
          yield* runner.execute(storable, "account-t5", { _tag: "Deposit", accountId: "t5", amount: 1 })
          const inside = yield* sql`SELECT 1 FROM event_store.snapshots WHERE stream_id = 'account-t5'`
          expect(inside).toHaveLength(0)
        })
      )
      const rows = yield* sql<{ version: number }>`SELECT version FROM event_store.snapshots
        WHERE stream_id = 'account-t5'`
      expect(rows.map((r) => Number(r.version))).toEqual([4])
    })
  )

  it.effect("local processors are woken after the owner's commit, never before", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const signal = yield* AppendSignal
      const work = yield* DueWork
      const events = yield* signal.listen
      const due = yield* work.listen
      yield* Queue.takeAll(events)
      yield* Queue.takeAll(due)
      const woken: Array<string> = []
      yield* runner.transact(
        Effect.gen(function* () {
          yield* runner.execute(NoteDecider, "note-t6", { text: "one" })
          yield* work.schedule({ kind: "test.wake", key: "t6", dueAt: new Date(0) })
          yield* afterCommit(
            "probe",
            Effect.sync(() => woken.push("after-commit"))
          )
          woken.push(`inside: events ${yield* Queue.size(events)}, due ${yield* Queue.size(due)}`)
        })
      )
      expect(woken).toEqual(["inside: events 0, due 0", "after-commit"])
      expect(yield* Queue.size(events)).toBe(1)
      expect(yield* Queue.size(due)).toBe(1)
      // A rolled-back transaction wakes nobody.
      yield* Queue.takeAll(events)
      yield* Effect.exit(
        runner.transact(
          Effect.zipRight(
            runner.execute(NoteDecider, "note-t6", { text: "two" }),
            runner.execute(NoteDecider, "note-t6", { text: "refuse" })
          )
        )
      )
      expect(yield* Queue.size(events)).toBe(0)
      expect(yield* streamLength("note-t6")).toBe(1)
    }).pipe(Effect.scoped)
  )
})
