import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect, Fiber, Layer, Ref } from "effect"
import { expect } from "vitest"
import { CommandRunner, CommandRunnerLive } from "../../src/kernel/CommandRunner.js"
import { ProjectionsLive } from "../../src/kernel/Projection.js"
import { type RebuildProgress, rebuildProjection } from "../../src/processors/Rebuild.js"
import { TestPersistence, usingRealPostgres } from "../support/database.js"
import {
  ACCOUNTS_TABLE,
  AccountDecider,
  AccountsProjection,
  createAccountsTable,
  openAccount
} from "../support/sample.js"

const TestLayer = CommandRunnerLive.pipe(
  Layer.provideMerge(ProjectionsLive([AccountsProjection])),
  Layer.provideMerge(Layer.effectDiscard(createAccountsTable)),
  Layer.provideMerge(TestPersistence)
)

const snapshotTable = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql`SELECT account_id, owner, balance, status, version FROM ${sql(ACCOUNTS_TABLE)} ORDER BY account_id`
)

const seed = (prefix: string, accounts: number, depositsEach: number, closeSome = true) =>
  Effect.flatMap(CommandRunner, (runner) =>
    Effect.forEach(
      Array.from({ length: accounts }, (_, i) => `${prefix}${i}`),
      (id) =>
        Effect.gen(function* () {
          yield* runner.execute(AccountDecider, `account-${id}`, openAccount(id, `Owner ${id}`))
          for (let d = 1; d <= depositsEach; d++) {
            yield* runner.execute(AccountDecider, `account-${id}`, {
              _tag: "Deposit",
              accountId: id,
              amount: d
            })
          }
          if (closeSome && id.endsWith("3"))
            yield* runner.execute(AccountDecider, `account-${id}`, { _tag: "Close", accountId: id })
        }),
      { concurrency: 4, discard: true }
    )
  )

layer(TestLayer, { excludeTestServices: true, timeout: 180_000 })("projection rebuild", (it) => {
  it.effect("rebuilding from position zero reproduces the inline result and reports progress", () =>
    Effect.gen(function* () {
      yield* seed("a", 30, 5)
      const before = yield* snapshotTable
      expect(before.length).toBe(30)
      const progress = yield* Ref.make<RebuildProgress[]>([])
      const report = yield* rebuildProjection(AccountsProjection, {
        batchSize: 37,
        progressIntervalMs: 0,
        onProgress: (p) => Ref.update(progress, (all) => [...all, p])
      })
      expect(report.events).toBe(30 * 6 + 3)
      expect(yield* snapshotTable).toEqual(before)
      const reports = yield* Ref.get(progress)
      expect(reports.length).toBeGreaterThan(1)
      expect(reports[reports.length - 1]?.eventsDone).toBe(report.events)
      expect(reports[reports.length - 1]?.eventsTotal).toBe(report.events)
      // The swapped-in table is live: later commands keep projecting into it.
      const runner = yield* CommandRunner
      yield* runner.execute(AccountDecider, "account-a0", { _tag: "Deposit", accountId: "a0", amount: 1000 })
      const sql = yield* SqlClient.SqlClient
      const [row] = yield* sql<{
        balance: number
      }>`SELECT balance FROM ${sql(ACCOUNTS_TABLE)} WHERE account_id = 'a0'`
      expect(row?.balance).toBe(1015)
      // No leftovers.
      const leftovers =
        yield* sql`SELECT 1 FROM pg_tables WHERE schemaname = 'read_models' AND tablename LIKE 'sample_accounts_%'`
      expect(leftovers.length).toBe(0)
    })
  )

  it.effect("a damaged read model is repaired by a rebuild", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const before = yield* snapshotTable
      yield* sql`UPDATE ${sql(ACCOUNTS_TABLE)} SET balance = -1`
      yield* sql`DELETE FROM ${sql(ACCOUNTS_TABLE)} WHERE account_id = 'a1'`
      yield* rebuildProjection(AccountsProjection)
      expect(yield* snapshotTable).toEqual(before)
    })
  )

  it.effect("two rebuilds of one projection at once run one after the other, both correct", () =>
    Effect.gen(function* () {
      const before = yield* snapshotTable
      const reports = yield* Effect.all(
        [
          rebuildProjection(AccountsProjection, { batchSize: 20 }),
          rebuildProjection(AccountsProjection, { batchSize: 20 })
        ],
        { concurrency: "unbounded" }
      )
      expect(reports.map((r) => r.events)).toEqual([reports[0]?.events, reports[0]?.events])
      expect(yield* snapshotTable).toEqual(before)
    })
  )

  it.effect("an unknown table is a typed error, not a crash", () =>
    Effect.gen(function* () {
      const broken = { ...AccountsProjection, tables: ["read_models.does_not_exist"] }
      const error = yield* Effect.flip(rebuildProjection(broken))
      expect(error._tag).toBe("RebuildError")
    })
  )

  it.effect.skipIf(!usingRealPostgres)("rebuild while commands keep writing loses nothing", () =>
    Effect.gen(function* () {
      const runner = yield* CommandRunner
      yield* seed("c", 20, 3, false)
      const writer = yield* Effect.fork(
        Effect.forEach(
          Array.from({ length: 300 }, (_, i) => i),
          (i) =>
            runner.execute(AccountDecider, `account-c${i % 20}`, {
              _tag: "Deposit",
              accountId: `c${i % 20}`,
              amount: 1
            }),
          { concurrency: 4, discard: true }
        )
      )
      yield* rebuildProjection(AccountsProjection, { batchSize: 10 })
      yield* rebuildProjection(AccountsProjection, { batchSize: 50 })
      yield* Fiber.join(writer)
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ accountId: string; balance: number }>`
        SELECT account_id AS "accountId", balance FROM ${sql(ACCOUNTS_TABLE)} WHERE account_id LIKE 'c%'`
      for (const row of rows) {
        const loaded = yield* runner.load(AccountDecider, `account-${row.accountId}`)
        expect(row.balance).toBe(loaded.state.balance)
      }
      expect(rows.reduce((s, r) => s + r.balance, 0)).toBe(20 * 6 + 300)
    })
  )
})
