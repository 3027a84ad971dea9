/**
 * A sample aggregate used only by tests: a ledger account with personal data (owner), an inline
 * projection with batched upserts, public events and snapshots.
 */
import { SqlClient } from "@effect/sql"
import { Data, Effect, Schema } from "effect"
import { type EventMetadata, EventStore, newEvent } from "../../src/eventstore/EventStore.js"
import { defineEvent, type EventOf, Personal, revealOr } from "../../src/eventstore/EventType.js"
import { defineDecider, snapshotPolicy } from "../../src/kernel/Decider.js"
import { defineProjection } from "../../src/kernel/Projection.js"

export const AccountOpened = defineEvent("account.opened", {
  schema: Schema.Struct({
    accountId: Schema.String,
    owner: Personal(Schema.String),
    currency: Schema.String
  }),
  subject: (d) => d.accountId
})
export const AccountDeposited = defineEvent("account.deposited", {
  schema: Schema.Struct({ accountId: Schema.String, amount: Schema.Int.pipe(Schema.positive()) })
})
export const AccountWithdrawn = defineEvent("account.withdrawn", {
  schema: Schema.Struct({ accountId: Schema.String, amount: Schema.Int.pipe(Schema.positive()) })
})
export const AccountClosed = defineEvent("account.closed", {
  schema: Schema.Struct({ accountId: Schema.String })
})

export class AccountNotFound extends Data.TaggedError("AccountNotFound")<{ readonly accountId: string }> {}
export class AccountExists extends Data.TaggedError("AccountExists")<{ readonly accountId: string }> {}
export class InsufficientFunds extends Data.TaggedError("InsufficientFunds")<{ readonly balance: number }> {}
export class AccountIsClosed extends Data.TaggedError("AccountIsClosed")<{ readonly accountId: string }> {}

export type AccountEvent =
  | EventOf<typeof AccountOpened>
  | EventOf<typeof AccountDeposited>
  | EventOf<typeof AccountWithdrawn>
  | EventOf<typeof AccountClosed>
export type AccountError = AccountNotFound | AccountExists | InsufficientFunds | AccountIsClosed

export type AccountCommand =
  | { readonly _tag: "Open"; readonly accountId: string; readonly owner: string; readonly currency: string }
  | { readonly _tag: "Deposit"; readonly accountId: string; readonly amount: number }
  | { readonly _tag: "Withdraw"; readonly accountId: string; readonly amount: number }
  | { readonly _tag: "Close"; readonly accountId: string }

/**
 * Straight to the store, without the decider or its projection (for tests of the log itself): a new
 * euro account `id` of `owner`, and deposits to it.
 */
export const appendOpened = (id: string, owner: string, metadata: EventMetadata = {}) =>
  Effect.flatMap(EventStore, (store) =>
    store.append({
      streamId: id,
      streamType: "account",
      expectedVersion: "no_stream",
      events: [newEvent(AccountOpened, { accountId: id, owner, currency: "EUR" })],
      metadata
    })
  )
export const appendDeposits = (id: string, amounts: ReadonlyArray<number>) =>
  Effect.flatMap(EventStore, (store) =>
    store.append({
      streamId: id,
      streamType: "account",
      expectedVersion: "any",
      events: amounts.map((amount) => newEvent(AccountDeposited, { accountId: id, amount }))
    })
  )

/** The command that opens account `accountId` for `owner` (in US dollars unless told). */
export const openAccount = (
  accountId: string,
  owner: string,
  currency = "USD"
): Extract<AccountCommand, { readonly _tag: "Open" }> => ({ _tag: "Open", accountId, owner, currency })

export interface AccountState {
  readonly status: "none" | "open" | "closed"
  readonly accountId: string
  readonly owner: string | null
  readonly balance: number
}

export const AccountStateSchema = Schema.Struct({
  status: Schema.Literal("none", "open", "closed"),
  accountId: Schema.String,
  owner: Schema.NullOr(Schema.String),
  balance: Schema.Number
})

const initial: AccountState = { status: "none", accountId: "", owner: null, balance: 0 }

const deciderOptions = {
  streamType: "account",
  events: [AccountOpened, AccountDeposited, AccountWithdrawn, AccountClosed],
  initialState: initial,
  evolve: (state: AccountState, event: AccountEvent): AccountState => {
    switch (event.type) {
      case "account.opened":
        return {
          status: "open",
          accountId: event.data.accountId,
          owner: revealOr(event.data.owner, null),
          balance: 0
        }
      case "account.deposited":
        return { ...state, balance: state.balance + event.data.amount }
      case "account.withdrawn":
        return { ...state, balance: state.balance - event.data.amount }
      case "account.closed":
        return { ...state, status: "closed" }
    }
  },
  decide: (
    command: AccountCommand,
    state: AccountState
  ): Effect.Effect<ReadonlyArray<AccountEvent>, AccountError> => {
    switch (command._tag) {
      case "Open":
        return state.status !== "none"
          ? Effect.fail(new AccountExists({ accountId: command.accountId }))
          : Effect.succeed([
              AccountOpened.make({
                accountId: command.accountId,
                owner: command.owner,
                currency: command.currency
              })
            ])
      case "Deposit":
        if (state.status === "none") return Effect.fail(new AccountNotFound({ accountId: command.accountId }))
        if (state.status === "closed")
          return Effect.fail(new AccountIsClosed({ accountId: command.accountId }))
        return Effect.succeed([
          AccountDeposited.make({ accountId: command.accountId, amount: command.amount })
        ])
      case "Withdraw":
        if (state.status === "none") return Effect.fail(new AccountNotFound({ accountId: command.accountId }))
        if (state.balance < command.amount)
          return Effect.fail(new InsufficientFunds({ balance: state.balance }))
        return Effect.succeed([
          AccountWithdrawn.make({ accountId: command.accountId, amount: command.amount })
        ])
      case "Close":
        if (state.status === "none") return Effect.fail(new AccountNotFound({ accountId: command.accountId }))
        return Effect.succeed(
          state.status === "closed" ? [] : [AccountClosed.make({ accountId: command.accountId })]
        )
    }
  }
}

export const AccountDecider = defineDecider({
  ...deciderOptions,
  publicEvents: (event, state) =>
    event.type === "account.opened" || event.type === "account.closed"
      ? [
          {
            type: event.type === "account.opened" ? "account.created" : "account.deleted",
            data: { id: state.accountId, owner: state.owner, balance: state.balance, status: state.status },
            subjectId: state.accountId
          }
        ]
      : []
})

export const SnapshottingAccountDecider = defineDecider({
  ...deciderOptions,
  snapshot: snapshotPolicy(AccountStateSchema, { every: 10, version: 1 })
})

export const ACCOUNTS_TABLE = "read_models.sample_accounts"

export const createAccountsTable = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql.unsafe(`CREATE SCHEMA IF NOT EXISTS read_models;
    CREATE TABLE IF NOT EXISTS ${ACCOUNTS_TABLE} (
      account_id text PRIMARY KEY, owner text, balance bigint NOT NULL, status text NOT NULL,
      version bigint NOT NULL, updated_at timestamptz NOT NULL);
    CREATE INDEX IF NOT EXISTS sample_accounts_balance_idx ON ${ACCOUNTS_TABLE} (balance);`)
)

interface AccountDelta {
  accountId: string
  owner: string | null | undefined
  opened: boolean
  closed: boolean
  delta: number
  firstVersion: number
  lastVersion: number
  updatedAt: Date
}

/**
 * Folds a batch per account, then one multi-row upsert. The version guard makes a replayed batch a
 * no-op: an account's rows only move forward.
 */
export const AccountsProjection = defineProjection({
  name: "sample_accounts",
  tables: [ACCOUNTS_TABLE],
  events: [AccountOpened, AccountDeposited, AccountWithdrawn, AccountClosed],
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const byAccount = new Map<string, AccountDelta>()
      for (const e of events) {
        const id = e.data.accountId
        let d = byAccount.get(id)
        if (!d) {
          d = {
            accountId: id,
            owner: undefined,
            opened: false,
            closed: false,
            delta: 0,
            firstVersion: e.streamVersion,
            lastVersion: e.streamVersion,
            updatedAt: e.recordedAt
          }
          byAccount.set(id, d)
        }
        d.lastVersion = e.streamVersion
        d.updatedAt = e.recordedAt
        if (e.type === "account.opened") {
          d.opened = true
          d.owner = revealOr(e.data.owner, null)
        } else if (e.type === "account.deposited") d.delta += e.data.amount
        else if (e.type === "account.withdrawn") d.delta -= e.data.amount
        else d.closed = true
      }
      const rows = [...byAccount.values()]
      const table = sql(target.table(ACCOUNTS_TABLE))
      yield* sql`
        INSERT INTO ${table} AS t (account_id, owner, balance, status, version, updated_at)
        SELECT r.account_id, r.owner, r.delta, CASE WHEN r.closed THEN 'closed' ELSE 'open' END, r.last_version, r.updated_at
          FROM jsonb_to_recordset(${JSON.stringify(
            rows.map((r) => ({
              account_id: r.accountId,
              owner: r.owner ?? null,
              delta: r.delta,
              closed: r.closed,
              first_version: r.firstVersion,
              last_version: r.lastVersion,
              updated_at: r.updatedAt.toISOString()
            }))
          )}::jsonb) AS r(account_id text, owner text, delta bigint, closed boolean, first_version bigint,
                           last_version bigint, updated_at timestamptz)
        ON CONFLICT (account_id) DO UPDATE SET
          balance = t.balance + EXCLUDED.balance,
          status = CASE WHEN EXCLUDED.status = 'closed' THEN 'closed' ELSE t.status END,
          owner = coalesce(EXCLUDED.owner, t.owner),
          version = EXCLUDED.version,
          updated_at = EXCLUDED.updated_at
        WHERE t.version < EXCLUDED.version`
    })
})
