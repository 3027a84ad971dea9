/**
 * Helpers for billing (`/v1/subscriptions`, `/v1/invoices`) over HTTP: recurring products, shoppers
 * to subscribe, the due work run by hand (as a worker or a test clock would, under a given clock),
 * and the test processor's charges of a subscription.
 */
import { SqlClient } from "@effect/sql"
import { type Clock, Effect } from "effect"
import { expect } from "vitest"
import { BILLING_KINDS, BillingDueWork } from "../../src/billing/index.js"
import { PaymentProcessor } from "../../src/payments/processor.js"
import { type DueItem, DueWork } from "../../src/processors/DueWork.js"
import { createProduct } from "./catalog.js"
import { registeredShopper } from "./customers.js"
import { call, type Reply } from "./identity.js"

// biome-ignore lint/suspicious/noExplicitAny: reply bodies are inspected field by field
export type Json = any

export const ok =
  (status: number) =>
  (r: Reply): Json => {
    expect(r.status, r.text).toBe(status)
    return r.body
  }

/** A recurring product (monthly, 999 USD by default). */
export const recurringProduct = (
  token: string,
  recurring: Record<string, unknown> = {},
  price: Record<string, unknown> = {}
) =>
  createProduct(token, {
    price: {
      amount: 999,
      currency: "USD",
      type: "recurring",
      recurring: { interval: "month", ...recurring },
      ...price
    }
  })

export const subscribe = (token: string, json: Record<string, unknown>, headers?: Record<string, string>) =>
  call("POST", "/v1/subscriptions", { token, json, ...(headers === undefined ? {} : { headers }) })

export const getSubscription = (token: string, id: string) =>
  Effect.map(call("GET", `/v1/subscriptions/${id}`, { token }), ok(200))

export const invoicesOf = (token: string, subscriptionId: string) =>
  Effect.map(
    call("GET", `/v1/invoices?subscriptionId=${subscriptionId}&limit=100`, { token }),
    (r) => ok(200)(r).data as ReadonlyArray<Json>
  )

/**
 * Runs every billing item due under `clock` (as a worker would, one claim at a time), until none is
 * left; answers the items run.
 */
export const runDue = (clock: Clock.Clock) =>
  Effect.gen(function* () {
    const work = yield* DueWork
    const billing = yield* BillingDueWork
    const ran: Array<DueItem> = []
    for (let round = 0; round < 50; round++) {
      const items = yield* work.claim({
        kinds: BILLING_KINDS,
        limit: 20,
        owner: "test-runner",
        leaseTtl: "60 seconds"
      })
      if (items.length === 0) break
      for (const item of items) {
        yield* billing.process(item)
        ran.push(item)
      }
    }
    return ran
  }).pipe(Effect.withClock(clock))

/** Pending billing items of a subscription: kind and due time. */
export const pendingOf = (subscriptionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{
        readonly kind: string
        readonly dueAt: Date
      }>`SELECT kind, due_at AS "dueAt" FROM processors.due_work
      WHERE status = 'pending' AND payload->>'subscriptionId' = ${subscriptionId} ORDER BY due_at, kind`
  )

/** Charges the test processor made whose key starts with `prefix` (authorizations that went through). */
export const chargesOf = (prefix: string) =>
  Effect.flatMap(PaymentProcessor, (processor) =>
    processor.ledger._tag === "None"
      ? Effect.succeed([])
      : Effect.map(processor.ledger.value.calls(prefix), (calls) =>
          calls.filter((c) => c.operation === "authorize" && c.result._tag === "Authorized")
        )
  )

/** Every call of the test processor whose key starts with `prefix`. */
export const callsOf = (prefix: string) =>
  Effect.flatMap(PaymentProcessor, (processor) =>
    processor.ledger._tag === "None" ? Effect.succeed([]) : processor.ledger.value.calls(prefix)
  )

/**
 * A registered shopper subscribed (card `pm_card_visa`, paid at once: `active`) to a new recurring
 * product with `recurring` and `price`; answers the three.
 */
export const subscribedShopper = (
  token: string,
  recurring: Parameters<typeof recurringProduct>[1],
  price?: Parameters<typeof recurringProduct>[2]
) =>
  Effect.gen(function* () {
    const shopper = yield* registeredShopper()
    const product = yield* recurringProduct(token, recurring, price)
    const sub = ok(201)(
      yield* subscribe(token, {
        customerId: shopper.customerId,
        productId: product.id,
        paymentMethod: "pm_card_visa"
      })
    )
    return { shopper, product, sub }
  })
