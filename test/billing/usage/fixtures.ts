/**
 * Test fixtures of the usage tests. `subscriptionReadModelFixture` writes a row of the subscription
 * READ MODEL (`billing.subscriptions`) directly, to arrange periods and states that would otherwise
 * take a month of renewals.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { expect } from "vitest"
import type { UsagePrice } from "../../../src/billing/contract.js"
import * as Ids from "../../../src/kernel/Ids.js"
import { call } from "../../support/identity.js"

export const MINUTE = 60_000
export const HOUR = 60 * MINUTE
export const DAY = 24 * HOUR

export interface SubscriptionFixture {
  readonly id?: string
  readonly customerId?: string
  readonly status?: string
  readonly currency?: string
  readonly periodStart?: Date
  readonly periodEnd?: Date
  readonly usage?: UsagePrice | null
  readonly usageClosedBefore?: Date | null
  readonly testClockId?: string | null
}

let meters = 0
/** A meter name no other test uses. */
export const uniqueMeter = (label = "calls") =>
  `${label}_${process.pid}_${Date.now().toString(36)}_${meters++}`

export const sumPrice = (meter: string, overrides: Partial<UsagePrice> = {}): UsagePrice => ({
  meter,
  aggregation: "sum",
  unitAmount: 2,
  includedUnits: 10,
  uniqueKey: null,
  ...overrides
})

/**
 * FIXTURE OF THE READ MODEL: inserts a subscription row with the columns usage reads (the
 * contract's; `state` is a marker, not a subscription's folded state), so a test can set any period,
 * status or closed boundary directly (default: active, current period [now − 10 days,
 * now + 20 days), a sum meter). Answers the row. Usage against subscriptions created over HTTP, and
 * renewals reading it, are tested end to end in test/billing/testClocks/scenario.test.ts.
 */
export const subscriptionReadModelFixture = (fixture: SubscriptionFixture = {}) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const now = Date.now()
    const row = {
      id: fixture.id ?? (yield* Ids.make("sub")),
      customerId: fixture.customerId ?? (yield* Ids.make("cus")),
      status: fixture.status ?? "active",
      currency: fixture.currency ?? "USD",
      periodStart: fixture.periodStart ?? new Date(now - 10 * DAY),
      periodEnd: fixture.periodEnd ?? new Date(now + 20 * DAY),
      usage: fixture.usage === undefined ? sumPrice(uniqueMeter()) : fixture.usage,
      usageClosedBefore: fixture.usageClosedBefore ?? null,
      testClockId: fixture.testClockId ?? null
    }
    yield* sql`INSERT INTO billing.subscriptions (id, customer_id, product_id, status, currency,
        current_period_start, current_period_end, usage, usage_closed_before, test_clock_id,
        state, created_at, updated_at, version)
      VALUES (${row.id}, ${row.customerId}, ${"prod_fixture"}, ${row.status}, ${row.currency},
        ${row.periodStart}, ${row.periodEnd}, ${row.usage === null ? null : JSON.stringify(row.usage)}::jsonb,
        ${row.usageClosedBefore}, ${row.testClockId}, ${JSON.stringify({ fixture: true })}::jsonb,
        ${new Date(now)}, ${new Date(now)}, ${0})`
    return row
  })

/** Changes the fixture row as a renewal or cancellation would (status, period, closed usage). */
export const updateSubscriptionFixture = (
  id: string,
  change: { readonly status?: string; readonly usageClosedBefore?: Date }
) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    if (change.status !== undefined)
      yield* sql`UPDATE billing.subscriptions SET status = ${change.status} WHERE id = ${id}`
    if (change.usageClosedBefore !== undefined)
      yield* sql`UPDATE billing.subscriptions SET usage_closed_before = ${change.usageClosedBefore} WHERE id = ${id}`
  })

export const postUsage = (token: string, json: Record<string, unknown>) =>
  call("POST", "/v1/usage", { token, json })

/** `POST /v1/usage`, expecting 201; answers the record. */
export const recordUsage = (token: string, json: Record<string, unknown>) =>
  Effect.map(postUsage(token, json), (r) => {
    expect(r.status, r.text).toBe(201)
    return r.body
  })

export const getSummary = (token: string, params: Record<string, string>) =>
  call("GET", `/v1/usage?${new URLSearchParams(params).toString()}`, { token })

/** How many records and events the usage context holds for a meter (to assert "nothing written"). */
export const writtenFor = (meter: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const records = yield* sql<{
      readonly n: string
    }>`SELECT count(*)::text AS n FROM billing.usage_records WHERE meter = ${meter}`
    const hourly = yield* sql<{
      readonly n: string
    }>`SELECT count(*)::text AS n FROM billing.usage_hourly WHERE meter = ${meter}`
    return { records: Number(records[0]?.n ?? 0), hourly: Number(hourly[0]?.n ?? 0) }
  })
