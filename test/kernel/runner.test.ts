import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { expect } from "vitest"
import { EventStore } from "../../src/eventstore/EventStore.js"
import { isShredded } from "../../src/eventstore/EventType.js"
import {
  CommandRunner,
  CommandRunnerLive,
  makeCommandRunner,
  publicEventId
} from "../../src/kernel/CommandRunner.js"
import { defineProjection, PROJECTION_LOCK_CLASS, ProjectionsLive } from "../../src/kernel/Projection.js"
import { TestPersistence, usingRealPostgres } from "../support/database.js"
import {
  ACCOUNTS_TABLE,
  AccountDecider,
  AccountDeposited,
  AccountsProjection,
  createAccountsTable,
  openAccount,
  SnapshottingAccountDecider
} from "../support/sample.js"
import { countStatements } from "../support/statements.js"

/** A projection that refuses one magic amount, to prove the append rolls back with it. */
const Tripwire = defineProjection({
  name: "tripwire",
  tables: ["read_models.tripwire"],
  events: [AccountDeposited],
  apply: (events) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      for (const e of events) {
        yield* sql`INSERT INTO read_models.tripwire (amount) VALUES (${e.data.amount})`
        if (e.data.amount === 666) yield* sql`SELECT 1/0`
      }
    })
})

const Setup = Layer.effectDiscard(
  Effect.gen(function* () {
    yield* createAccountsTable
    const sql = yield* SqlClient.SqlClient
    yield* sql`CREATE TABLE read_models.tripwire (amount bigint NOT NULL)`
  })
)

const TestLayer = CommandRunnerLive.pipe(
  Layer.provideMerge(ProjectionsLive([AccountsProjection, Tripwire])),
  Layer.provideMerge(Setup),
  Layer.provideMerge(TestPersistence)
)

interface AccountRow {
  readonly accountId: string
  readonly owner: string | null
  readonly balance: number
  readonly status: string
  readonly version: number
}
const readAccount = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<AccountRow>`SELECT account_id AS "accountId", owner, balance, status, version FROM ${sql(ACCOUNTS_TABLE)}
        WHERE account_id = ${id}`,
      (rows) => rows[0]
    )
  )

layer(TestLayer, { excludeTestServices: true, timeout: 120_000 })("command runner", (it) => {
  it.effect("runs commands: append + inline projection + public events in one transaction", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const opened = yield* runner.execute(AccountDecider, "account-r1", openAccount("r1", "Ann Lee"), {
        metadata: { correlationId: "corr-1", actor: { type: "system", id: "test" } }
      })
      expect(opened.version).toBe(1)
      expect(opened.events[0]?.type).toBe("account.opened")
      expect(opened.events[0]?.metadata.correlationId).toBe("corr-1")
      yield* runner.execute(AccountDecider, "account-r1", { _tag: "Deposit", accountId: "r1", amount: 700 })
      const w = yield* runner.execute(AccountDecider, "account-r1", {
        _tag: "Withdraw",
        accountId: "r1",
        amount: 200
      })
      expect(w.state.balance).toBe(500)
      // The events the runner reports are exactly the stored ones (positions, ids, xid, versions).
      const stored = yield* (yield* EventStore).readStream("account-r1")
      expect(
        [...opened.events, ...w.events].map((e) => [
          e.globalPosition,
          e.eventId,
          e.transactionId,
          e.streamVersion
        ])
      ).toEqual(
        [stored[0], stored[2]].map((e) => [e?.globalPosition, e?.eventId, e?.transactionId, e?.streamVersion])
      )
      // Read-your-writes: the read model is already there.
      expect(yield* readAccount("r1")).toEqual({
        accountId: "r1",
        owner: "Ann Lee",
        balance: 500,
        status: "open",
        version: 3
      })
      const sql = yield* SqlClient.SqlClient
      const pub = yield* sql<{ id: string; type: string; data: unknown; subjectId: string }>`
        SELECT id, type, data, subject_id AS "subjectId" FROM event_store.public_events WHERE stream_id = 'account-r1'`
      expect(pub.length).toBe(1)
      expect(pub[0]?.type).toBe("account.created")
      expect(pub[0]?.id).toMatch(/^evt_/)
      expect(pub[0]?.data).toEqual({ id: "r1", owner: "Ann Lee", balance: 0, status: "open" })
    })
  )

  it.effect("a domain error writes nothing", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const store = yield* EventStore
      yield* runner.execute(AccountDecider, "account-r2", openAccount("r2", "Bo"))
      const error = yield* Effect.flip(
        runner.execute(AccountDecider, "account-r2", { _tag: "Withdraw", accountId: "r2", amount: 1 })
      )
      expect(error._tag).toBe("InsufficientFunds")
      expect((yield* store.readStream("account-r2")).length).toBe(1)
      const missing = yield* Effect.flip(
        runner.execute(AccountDecider, "account-nope", { _tag: "Deposit", accountId: "nope", amount: 1 })
      )
      expect(missing._tag).toBe("AccountNotFound")
      expect((yield* store.streamInfo("account-nope"))._tag).toBe("None")
    })
  )

  it.effect("a failing inline projection rolls back the append (no partial state)", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const store = yield* EventStore
      const sql = yield* SqlClient.SqlClient
      yield* runner.execute(AccountDecider, "account-r3", openAccount("r3", "Cy"))
      const exit = yield* Effect.exit(
        runner.execute(AccountDecider, "account-r3", { _tag: "Deposit", accountId: "r3", amount: 666 })
      )
      expect(exit._tag).toBe("Failure")
      expect((yield* store.readStream("account-r3")).length).toBe(1)
      expect((yield* readAccount("r3"))?.balance).toBe(0)
      expect((yield* sql`SELECT * FROM read_models.tripwire WHERE amount = 666`).length).toBe(0)
    })
  )

  it.effect("commands on one stream are serialized in-process: 25 concurrent deposits all land", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      yield* runner.execute(AccountDecider, "account-r4", openAccount("r4", "Di"))
      yield* Effect.forEach(
        Array.from({ length: 25 }, (_, i) => i + 1),
        (amount) =>
          runner.execute(AccountDecider, "account-r4", { _tag: "Deposit", accountId: "r4", amount }),
        { concurrency: "unbounded" }
      )
      const loaded = yield* runner.load(AccountDecider, "account-r4")
      expect(loaded).toEqual({ state: expect.objectContaining({ balance: 325 }), version: 26 })
      expect((yield* readAccount("r4"))?.balance).toBe(325)
    })
  )

  it.effect.skipIf(!usingRealPostgres)(
    "two runners (as two processes) racing on one stream: optimistic concurrency + retries, nothing lost",
    () =>
      Effect.gen(function* () {
        const a = yield* makeCommandRunner
        const b = yield* makeCommandRunner
        yield* a.execute(AccountDecider, "account-r5", openAccount("r5", "Ed"))
        const results = yield* Effect.forEach(
          Array.from({ length: 30 }, (_, i) => i),
          (i) =>
            Effect.either(
              (i % 2 === 0 ? a : b).execute(
                AccountDecider,
                "account-r5",
                { _tag: "Deposit", accountId: "r5", amount: 10 },
                { maxAttempts: 50 }
              )
            ),
          { concurrency: "unbounded" }
        )
        const ok = results.filter((r) => r._tag === "Right").length
        const loaded = yield* a.load(AccountDecider, "account-r5")
        expect(loaded.version).toBe(1 + ok)
        expect(loaded.state.balance).toBe(10 * ok)
        expect((yield* readAccount("r5"))?.balance).toBe(10 * ok)
        expect(ok).toBe(30)
      })
  )

  it.effect("personal fields are encrypted per subject and shredded by forgetSubject", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const store = yield* EventStore
      const sql = yield* SqlClient.SqlClient
      yield* runner.execute(AccountDecider, "account-r6", openAccount("r6", "Fay Secret"))
      const raw = yield* sql<{
        data: string
      }>`SELECT data::text AS data FROM event_store.events WHERE stream_id = 'account-r6'`
      expect(raw[0]?.data).not.toContain("Fay Secret")
      expect(yield* store.forgetSubject("r6")).toBe(true)
      const [event] = yield* store.readStream("account-r6")
      expect(isShredded((event?.data as { owner: unknown } | undefined)?.owner)).toBe(true)
      // Replays still work: the aggregate loads, the owner is simply gone.
      const loaded = yield* runner.load(AccountDecider, "account-r6")
      expect(loaded.state).toEqual({ status: "open", accountId: "r6", owner: null, balance: 0 })
      const pub = yield* sql<{
        data: unknown
      }>`SELECT data FROM event_store.public_events WHERE stream_id = 'account-r6'`
      expect(pub[0]?.data).toEqual({ id: "r6", shredded: true })
    })
  )

  it.effect("snapshots long streams; loading with and without the snapshot agrees", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const sql = yield* SqlClient.SqlClient
      yield* runner.execute(SnapshottingAccountDecider, "account-r7", openAccount("r7", "Gus"))
      for (let i = 1; i <= 24; i++) {
        yield* runner.execute(SnapshottingAccountDecider, "account-r7", {
          _tag: "Deposit",
          accountId: "r7",
          amount: i
        })
      }
      const snaps = yield* sql<{
        version: number
      }>`SELECT version FROM event_store.snapshots WHERE stream_id = 'account-r7'`
      expect(snaps[0]?.version).toBe(20)
      const withSnapshot = yield* runner.load(SnapshottingAccountDecider, "account-r7")
      const withoutSnapshot = yield* runner.load(AccountDecider, "account-r7")
      expect(withSnapshot).toEqual(withoutSnapshot)
      expect(withSnapshot.state.balance).toBe(300)
      // A snapshot that no longer decodes is only a cache miss.
      yield* sql`UPDATE event_store.snapshots SET state = '{"broken":true}' WHERE stream_id = 'account-r7'`
      expect(yield* runner.load(SnapshottingAccountDecider, "account-r7")).toEqual(withoutSnapshot)
    })
  )

  it.effect("executeMany: many streams in one transaction, projected and published like execute", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const store = yield* EventStore
      const sql = yield* SqlClient.SqlClient
      yield* runner.execute(AccountDecider, "account-m1", openAccount("m1", "Mia"))
      const results = yield* runner.executeMany(
        AccountDecider,
        [
          { streamId: "account-m1", command: { _tag: "Deposit", accountId: "m1", amount: 40 } },
          {
            streamId: "account-m2",
            command: openAccount("m2", "Noor", "EUR")
          },
          {
            streamId: "account-m3",
            command: openAccount("m3", "Oli", "EUR")
          }
        ],
        { metadata: { correlationId: "corr-many" } }
      )
      expect(results.map((r) => [r.version, r.events.map((e) => e.type)])).toEqual([
        [2, ["account.deposited"]],
        [1, ["account.opened"]],
        [1, ["account.opened"]]
      ])
      // One transaction; the reported events are the stored ones.
      expect(new Set(results.map((r) => r.events[0]?.transactionId)).size).toBe(1)
      const m1 = yield* store.readStream("account-m1")
      expect(m1[1]?.eventId).toBe(results[0]?.events[0]?.eventId)
      expect(m1[1]?.globalPosition).toBe(results[0]?.events[0]?.globalPosition)
      expect(m1[1]?.metadata.correlationId).toBe("corr-many")
      expect(results[0]?.state.balance).toBe(40)
      // Projected, and public events written, as `execute` would.
      expect(yield* readAccount("m1")).toMatchObject({ balance: 40, version: 2 })
      expect(yield* readAccount("m2")).toMatchObject({ owner: "Noor", version: 1 })
      const pub = yield* sql<{ streamId: string }>`
        SELECT stream_id AS "streamId" FROM event_store.public_events
         WHERE stream_id IN ('account-m2', 'account-m3') ORDER BY stream_id`
      expect(pub.map((p) => p.streamId)).toEqual(["account-m2", "account-m3"])

      // loadMany: several streams in one read, absent ones as initial state, `from` brings a cached
      // aggregate up to date.
      const loaded = yield* runner.loadMany(AccountDecider, [
        { streamId: "account-m1" },
        { streamId: "account-nope" }
      ])
      expect(loaded.get("account-m1")).toEqual(yield* runner.load(AccountDecider, "account-m1"))
      expect(loaded.get("account-nope")).toEqual({ state: AccountDecider.initialState, version: 0 })
      const cached = loaded.get("account-m1")
      if (cached === undefined) return expect.fail("not loaded")
      yield* runner.execute(AccountDecider, "account-m1", { _tag: "Deposit", accountId: "m1", amount: 2 })
      const updated = yield* runner.loadMany(AccountDecider, [{ streamId: "account-m1", from: cached }])
      expect(updated.get("account-m1")).toMatchObject({ version: 3, state: { balance: 42 } })
    })
  )

  it.effect("executeMany is all or nothing: a domain error or a stale version writes nothing", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const store = yield* EventStore
      yield* runner.execute(AccountDecider, "account-m4", openAccount("m4", "Pia"))
      const refused = yield* Effect.flip(
        runner.executeMany(AccountDecider, [
          { streamId: "account-m5", command: openAccount("m5", "Q") },
          { streamId: "account-m4", command: { _tag: "Withdraw", accountId: "m4", amount: 1 } }
        ])
      )
      expect(refused._tag).toBe("InsufficientFunds")
      expect((yield* store.streamInfo("account-m5"))._tag).toBe("None")

      // A caller-supplied `loaded` that is stale: the multi-stream append refuses all of it.
      const stale = yield* runner.load(AccountDecider, "account-m4")
      yield* runner.execute(AccountDecider, "account-m4", { _tag: "Deposit", accountId: "m4", amount: 5 })
      const conflict = yield* Effect.flip(
        runner.executeMany(AccountDecider, [
          { streamId: "account-m6", command: openAccount("m6", "R") },
          {
            streamId: "account-m4",
            command: { _tag: "Deposit", accountId: "m4", amount: 1 },
            loaded: stale
          }
        ])
      )
      expect(conflict._tag).toBe("WrongExpectedVersion")
      expect((yield* store.streamInfo("account-m6"))._tag).toBe("None")
      expect(yield* readAccount("m4")).toMatchObject({ balance: 5, version: 2 })
    })
  )

  it.effect(
    "a command's projection lock and public events ride on the append's statement: append + read-model writes only",
    () =>
      Effect.gen(function* () {
        const runner = yield* CommandRunner
        const sql = yield* SqlClient.SqlClient
        // A new subject with personal data: the append (its key, the lock, the public event), the projection's INSERT.
        const { result: opened, statements } = yield* countStatements(
          sql.withTransaction(
            runner.execute(AccountDecider, "account-p1", openAccount("p1", "Ida"), { newStream: true })
          )
        )
        expect(statements).toBe(2)
        expect(yield* readAccount("p1")).toMatchObject({ owner: "Ida", version: 1 })
        // The public event is the one the runner reported, derived from the recorded event.
        const event = opened.events[0]
        const pub = yield* sql<{ id: string; sourceEventId: string; occurredAt: Date; data: unknown }>`
          SELECT id, source_event_id::text AS "sourceEventId", occurred_at AS "occurredAt", data
            FROM event_store.public_events WHERE stream_id = 'account-p1'`
        expect(pub).toHaveLength(1)
        expect(pub[0]?.id).toBe(publicEventId(event?.eventId ?? "", 0))
        expect(pub[0]?.sourceEventId).toBe(event?.eventId)
        expect(pub[0]?.occurredAt.getTime()).toBe(event?.recordedAt.getTime())
        expect(pub[0]?.data).toEqual({ id: "p1", owner: "Ida", balance: 0, status: "open" })
        expect(opened.state).toMatchObject({ accountId: "p1", owner: "Ida", status: "open" })
        // Two projections (accounts, tripwire) locked by one append: the load, the append, their writes.
        const deposit = yield* sql.withTransaction(
          runner.execute(AccountDecider, "account-p1", { _tag: "Deposit", accountId: "p1", amount: 5 })
        )
        expect(deposit.state).toMatchObject({ balance: 5 })
        expect(yield* readAccount("p1")).toMatchObject({ balance: 5, version: 2 })
      })
  )

  it.effect("the append's statement holds the projections' shared locks until the transaction ends", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      const sql = yield* SqlClient.SqlClient
      const held = yield* sql.withTransaction(
        Effect.zipRight(
          runner.execute(AccountDecider, "account-p2", openAccount("p2", "Jo"), { newStream: true }),
          sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_locks
            WHERE locktype = 'advisory' AND mode = 'ShareLock' AND pid = pg_backend_pid()
              AND classid = ${PROJECTION_LOCK_CLASS}
              AND objid = hashtext(${AccountsProjection.name})::oid`
        )
      )
      expect(held[0]?.n).toBe(1)
    })
  )

  it.effect(
    "a refused append writes no public event; newStream on an existing stream is refused, not overwritten",
    () =>
      Effect.gen(function* () {
        const runner = yield* CommandRunner
        const sql = yield* SqlClient.SqlClient
        yield* runner.execute(AccountDecider, "account-p3", openAccount("p3", "Kim"))
        const error = yield* Effect.flip(
          runner.execute(AccountDecider, "account-p3", openAccount("p3", "Lea"), {
            newStream: true,
            maxAttempts: 1
          })
        )
        expect(error._tag).toBe("WrongExpectedVersion")
        const pub = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM event_store.public_events WHERE stream_id = 'account-p3'`
        expect(pub[0]?.n).toBe(1)
        expect(yield* readAccount("p3")).toMatchObject({ owner: "Kim", version: 1 })
      })
  )
})
