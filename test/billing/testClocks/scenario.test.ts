/**
 * The end-to-end test clock scenario of issue #21 item 8: a customer on a test clock with a trialing,
 * metered subscription; advancing the clock runs the trial end, three renewals with usage, a failed
 * renewal and its recovery — each at its time, each invoiced and charged once.
 *
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { describe, expect } from "vitest"
import { chargesOf } from "../../support/billing.js"
import { createProduct } from "../../support/catalog.js"
import { call, IdentityHttp, type Reply, uniqueEmail } from "../../support/identity.js"
import { ok, staffToken } from "../../support/payments.js"

const DAY = 86_400_000
const T0 = new Date("2030-01-31T09:00:00.000Z")
const iso = (d: Date) => d.toISOString()
const plus = (d: Date, ms: number) => new Date(d.getTime() + ms)

/** The months of the plan, clamped from the anchor (Jan 31 → Feb 28 → Mar 31 …), as periods.ts computes them. */
const monthsFrom = (anchor: Date, n: number) => {
  const day = anchor.getUTCDate()
  const target = new Date(
    Date.UTC(anchor.getUTCFullYear(), anchor.getUTCMonth() + n, 1, anchor.getUTCHours())
  )
  const last = new Date(Date.UTC(target.getUTCFullYear(), target.getUTCMonth() + 1, 0)).getUTCDate()
  target.setUTCDate(Math.min(day, last))
  return target
}

const advance = (token: string, clockId: string, to: Date) =>
  Effect.map(
    call("POST", `/v1/test/clocks/${clockId}/advance`, { token, json: { frozenTime: iso(to) } }),
    (r: Reply) => {
      expect(r.status, r.text).toBe(200)
      expect(r.body).toMatchObject({ status: "ready", frozenTime: iso(to) })
      return r.body
    }
  )

describe("test clock scenario", () => {
  layer(IdentityHttp, { excludeTestServices: true, timeout: 300_000 })(
    "a subscription on a test clock",
    (it) => {
      it.effect("trial end, three renewals with usage, a failed renewal and its recovery, each once", () =>
        Effect.gen(function* () {
          const token = yield* staffToken
          const clock = ok(201)(
            yield* call("POST", "/v1/test/clocks", { token, json: { frozenTime: iso(T0), name: "scenario" } })
          )
          const customer = ok(201)(
            yield* call("POST", "/user", {
              token,
              json: {
                email: uniqueEmail("clocked"),
                firstName: "Ada",
                lastName: "Clock",
                testClockId: clock.id
              }
            })
          )
          // A monthly plan: 10.00 licensed in advance, API calls metered in arrears (100 included, 0.02 each).
          const product = yield* createProduct(token, {
            price: {
              amount: 1000,
              currency: "USD",
              type: "recurring",
              recurring: {
                interval: "month",
                usage: { meter: "api_calls", aggregation: "sum", unitAmount: 2, includedUnits: 100 }
              }
            }
          })

          // subscriptions: a 14-day trial, nothing charged yet.
          const sub = ok(201)(
            yield* call("POST", "/v1/subscriptions", {
              token,
              json: {
                customerId: customer.id,
                productId: product.id,
                paymentMethod: "pm_card_visa",
                trialPeriodDays: 14
              }
            })
          )
          expect(sub).toMatchObject({ status: "trialing", testClockId: clock.id })
          // A customer on real time, on the same plan: the clock's advances must not touch them.
          const plain = ok(201)(
            yield* call("POST", "/user", {
              token,
              json: { email: uniqueEmail("realtime"), firstName: "Real", lastName: "Time" }
            })
          )
          const plainSub = ok(201)(
            yield* call("POST", "/v1/subscriptions", {
              token,
              json: { customerId: plain.id, productId: product.id, paymentMethod: "pm_card_visa" }
            })
          )
          const trialEnd = plus(T0, 14 * DAY)
          const recordCalls = (value: number, at: Date, name: string) =>
            Effect.map(
              call("POST", "/v1/usage", {
                token,
                json: {
                  subscriptionId: sub.id,
                  meter: "api_calls",
                  value,
                  timestamp: iso(at),
                  identifier: `scenario-${sub.id}-${name}`
                }
              }),
              ok(201)
            )
          const getSub = Effect.map(call("GET", `/v1/subscriptions/${sub.id}`, { token }), ok(200))
          const invoices = Effect.map(
            call("GET", `/v1/invoices?subscriptionId=${sub.id}&limit=100`, { token }),
            ok(200)
          )

          // `subscription.trial_will_end` (webhooks) three days before the trial ends, once.
          const reminders = Effect.map(
            call("GET", "/v1/events?type=subscription.trial_will_end&limit=100", { token }),
            (r: Reply) =>
              ok(200)(r).data.filter((e: { data: { id: string } }) => e.data.id === sub.id) as ReadonlyArray<{
                readonly data: { readonly status: string; readonly trialEnd: string }
              }>
          )
          yield* advance(token, clock.id, plus(trialEnd, -3 * DAY - 3_600_000))
          expect(yield* reminders).toEqual([])
          yield* advance(token, clock.id, plus(trialEnd, -3 * DAY + 3_600_000))
          expect((yield* reminders).map((e) => e.data)).toEqual([
            expect.objectContaining({ status: "trialing", trialEnd: iso(trialEnd) })
          ])

          // The day before the trial ends: nothing else happened.
          yield* advance(token, clock.id, plus(trialEnd, -DAY))
          expect(yield* getSub).toMatchObject({ status: "trialing" })
          expect((yield* invoices).data).toEqual([])
          expect(yield* reminders).toHaveLength(1)

          // Trial end: active, the first period's fee invoiced and paid, anchored on the trial end.
          yield* advance(token, clock.id, plus(trialEnd, 3_600_000))
          expect(yield* getSub).toMatchObject({
            status: "active",
            currentPeriodStart: iso(trialEnd),
            currentPeriodEnd: iso(monthsFrom(trialEnd, 1))
          })
          expect((yield* invoices).data).toHaveLength(1)

          // Three renewals, each with the closed period's usage in arrears.
          for (let n = 1; n <= 3; n++) {
            const periodStart = monthsFrom(trialEnd, n - 1)
            const periodEnd = monthsFrom(trialEnd, n)
            // 100 × n + 50 calls on the period's second day, recorded when the clock is there (usage
            // is accepted up to 5 minutes ahead of the customer's time, which is the clock's).
            const calls = 100 * n + 50
            yield* advance(token, clock.id, plus(periodStart, 2 * DAY))
            yield* recordCalls(calls, plus(periodStart, DAY), `${n}`)
            yield* advance(token, clock.id, plus(periodEnd, 3_600_000))
            const renewed = yield* getSub
            expect(renewed).toMatchObject({
              status: "active",
              currentPeriodStart: iso(periodEnd),
              currentPeriodEnd: iso(monthsFrom(trialEnd, n + 1))
            })
            const invoice = (yield* invoices).data[0]
            expect(invoice).toMatchObject({
              status: "paid",
              periodStart: iso(periodEnd),
              total: 1000 + Math.max(0, calls - 100) * 2
            })
            expect(invoice.lines).toEqual(
              expect.arrayContaining([
                expect.objectContaining({ type: "subscription", amount: 1000 }),
                expect.objectContaining({
                  type: "usage",
                  meter: "api_calls",
                  quantity: calls,
                  includedUnits: 100,
                  billableUnits: calls - 100
                })
              ])
            )
          }
          expect((yield* invoices).data).toHaveLength(4)

          // A failed renewal: the card now declines → past_due, the invoice open.
          ok(200)(
            yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
              token,
              json: { paymentMethod: "pm_card_visa_chargeDeclined" }
            })
          )
          const fourthEnd = monthsFrom(trialEnd, 4)
          yield* advance(token, clock.id, plus(fourthEnd, 3_600_000))
          expect(yield* getSub).toMatchObject({ status: "past_due" })
          const failed = (yield* invoices).data[0]
          expect(failed).toMatchObject({ status: "open", attemptCount: 1 })

          // Recovery: a working card retries at once → paid, active again; the next dunning retry,
          // when the clock passes it, charges nothing more.
          ok(200)(
            yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
              token,
              json: { paymentMethod: "pm_card_visa" }
            })
          )
          expect(yield* getSub).toMatchObject({ status: "active" })
          yield* advance(token, clock.id, plus(fourthEnd, 4 * DAY))
          const all = (yield* invoices).data
          expect(all).toHaveLength(5)
          expect(all.map((i: { status: string }) => i.status)).toEqual([
            "paid",
            "paid",
            "paid",
            "paid",
            "paid"
          ])
          // One charge per invoice at the processor (the no-double-charge guarantee, under the clock).
          const charges = yield* chargesOf(`renewal:${sub.id}:`)
          expect(charges.map((c) => c.amount).sort((x, y) => x - y)).toEqual(
            all.map((i: { total: number }) => i.total).sort((x: number, y: number) => x - y)
          )

          // Real time and other customers were untouched: the real-time subscription is where it began.
          const plainNow = ok(200)(yield* call("GET", `/v1/subscriptions/${plainSub.id}`, { token }))
          expect(plainNow).toMatchObject({
            status: "active",
            currentPeriodStart: plainSub.currentPeriodStart,
            currentPeriodEnd: plainSub.currentPeriodEnd
          })
          expect(
            ok(200)(yield* call("GET", `/v1/invoices?subscriptionId=${plainSub.id}`, { token })).data
          ).toHaveLength(1)
          const clockNow = ok(200)(yield* call("GET", `/v1/test/clocks/${clock.id}`, { token })).frozenTime
          expect(clockNow).toBe(iso(plus(fourthEnd, 4 * DAY)))

          // Deleting the clock ends its customers' subscriptions at its time, nothing billed (the
          // period's usage so far neither): no subscription stays active with no renewal ever due.
          yield* recordCalls(500, plus(fourthEnd, 3 * DAY), "last")
          const chargedBefore = (yield* chargesOf(`renewal:${sub.id}:`)).length
          ok(200)(yield* call("DELETE", `/v1/test/clocks/${clock.id}`, { token }))
          expect(yield* getSub).toMatchObject({
            status: "canceled",
            cancellationReason: "test_clock_deleted",
            canceledAt: clockNow,
            endedAt: clockNow
          })
          expect((yield* invoices).data).toHaveLength(5)
          expect(yield* chargesOf(`renewal:${sub.id}:`)).toHaveLength(chargedBefore)
          // The real-time customer's subscription is not the clock's: still active.
          expect(ok(200)(yield* call("GET", `/v1/subscriptions/${plainSub.id}`, { token }))).toMatchObject({
            status: "active",
            cancellationReason: null
          })
          // The clock's customer now lives on real time: a new subscription is on no clock, and its
          // renewal is a real-time worker's item (one of the deleted clock's would never run).
          const after = ok(201)(
            yield* call("POST", "/v1/subscriptions", {
              token,
              json: { customerId: customer.id, productId: product.id, paymentMethod: "pm_card_visa" }
            })
          )
          expect(after).toMatchObject({ status: "active", testClockId: null })
          const sql = yield* SqlClient.SqlClient
          expect(
            yield* sql<{ readonly kind: string }>`SELECT kind FROM processors.due_work
              WHERE payload->>'subscriptionId' = ${after.id} AND status = 'pending'`
          ).toEqual([{ kind: "billing.renew" }])
        })
      )
    }
  )
})
