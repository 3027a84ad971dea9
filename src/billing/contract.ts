/**
 * What the three parts of billing agree on, so each can be built and tested on its own:
 * subscriptions and invoices (`src/billing/*.ts`), usage (`src/billing/usage/`) and test clocks
 * (`src/billing/testClocks/`).
 *
 * The subscription read model `billing.subscriptions` (migration 0021, written by the
 * subscriptions projection) has at least these columns, which usage reads:
 *   id text PRIMARY KEY, customer_id text NOT NULL, product_id text NOT NULL, status text NOT NULL,
 *   currency text NOT NULL, current_period_start timestamptz NOT NULL,
 *   current_period_end timestamptz NOT NULL,
 *   usage jsonb NULL               -- the price's metered part: UsagePrice below, null if licensed only
 *   usage_closed_before timestamptz NULL -- usage timestamped before this is invoiced: `period_closed`
 *   test_clock_id text NULL        -- the customer's test clock, if any
 *
 * Locking rule (exact invoices, no usage lost around a period close): a usage write locks the
 * subscription row `FOR KEY SHARE`, checks `usage_closed_before` and writes in that transaction; a
 * renewal (or a cancellation that bills usage) locks the row `FOR UPDATE`, reads the closed period's
 * quantity through `UsageLedger` and advances `usage_closed_before` in its transaction.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Layer, Schema } from "effect"
import { AGGREGATIONS } from "../catalog/index.js"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { now } from "../kernel/Time.js"
import type { DueItem } from "../processors/DueWork.js"

/** The aggregations a usage price may have: the catalog's (`price.recurring.usage.aggregation`). */
export { AGGREGATIONS }
export type UsageAggregation = (typeof AGGREGATIONS)[number]

/** A recurring price's metered part (catalog's `price.recurring.usage`), as the subscription snapshots it. */
export const UsagePriceSchema = Schema.Struct({
  meter: Schema.String,
  aggregation: Schema.Literal(...AGGREGATIONS),
  /** Minor units per billable unit. */
  unitAmount: Schema.Number,
  includedUnits: Schema.Number,
  /** The `properties` key `unique_count` counts distinct values of (null for the other aggregations). */
  uniqueKey: Schema.optional(Schema.NullOr(Schema.String))
})
export type UsagePrice = typeof UsagePriceSchema.Type

export interface PeriodQuantity {
  /** The aggregate over [periodStart, periodEnd) — the same figure `GET /v1/usage` shows. */
  readonly quantity: number
  readonly eventCount: number
}

/** Usage as billing reads it: implemented by `src/billing/usage/`. */
export interface UsageLedgerShape {
  /**
   * The period's aggregate, inside the caller's transaction (which holds the subscription row
   * `FOR UPDATE`, so no usage write of that subscription commits meanwhile).
   */
  readonly periodQuantity: (input: {
    readonly subscriptionId: string
    readonly usage: UsagePrice
    readonly periodStart: Date
    readonly periodEnd: Date
  }) => Effect.Effect<PeriodQuantity, SqlError>
}

export class UsageLedger extends Context.Tag("billing/UsageLedger")<UsageLedger, UsageLedgerShape>() {}

/**
 * The time a customer lives on: a test clock's frozen time for customers created with
 * `testClockId`, Effect's Clock otherwise. Implemented by `src/billing/testClocks/`.
 */
export interface BillingClockShape {
  /** A test clock's frozen time, or the Clock's now when `testClockId` is null. */
  readonly nowFor: (testClockId: string | null) => Effect.Effect<Date, SqlError>
  /** The test clock a customer was created on (`POST /user {testClockId}`), if any. */
  readonly clockOf: (customerId: string) => Effect.Effect<string | null, SqlError>
}

export class BillingClock extends Context.Tag("billing/BillingClock")<BillingClock, BillingClockShape>() {}

/**
 * Real time for everyone: what billing runs on until test clocks are wired (and the behaviour for
 * every customer not on a test clock). `src/billing/testClocks/` provides the full implementation.
 */
export const RealTimeBillingClock = Layer.succeed(
  BillingClock,
  BillingClock.of({ nowFor: () => now, clockOf: () => Effect.succeed(null) })
)

/**
 * Billing's due work as a test clock's advance runs it: the base kinds billing schedules
 * (`billing.renew`, …) and, for one claimed item of such a kind (or of `<kind>@<testClockId>`), the
 * handler plus the recording of its outcome (`DueWork.complete`), as `dueWorker` would do it.
 * Implemented by the subscriptions part.
 */
export interface BillingDueWorkShape {
  readonly kinds: ReadonlyArray<string>
  readonly process: (item: DueItem) => Effect.Effect<"Done" | "Retry" | "Failed", SqlError>
  /**
   * The test clock is being deleted (in the caller's transaction, before the clock goes): its
   * customers' subscriptions that are not over are canceled at its time, nothing billed. Answers how many.
   */
  readonly clockDeleted: (testClockId: string, metadata: EventMetadata) => Effect.Effect<number, SqlError>
}

export class BillingDueWork extends Context.Tag("billing/BillingDueWork")<
  BillingDueWork,
  BillingDueWorkShape
>() {}

/**
 * Due work of a customer on a test clock is scheduled under the kind `<kind>@<testClockId>`: no
 * real-time worker claims it; advancing the clock runs it (each item under a Clock set to its due
 * time) through the handler registered for `<kind>`.
 */
export const clockedKind = (kind: string, testClockId: string | null): string =>
  testClockId === null ? kind : `${kind}@${testClockId}`
