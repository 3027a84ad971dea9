/**
 * Renewals, trial ends, dunning and expiry as durable due work under a moved clock (issue #21 items 1,
 * 2 and 8): each item is due at exactly the time the subscription says (asserted to the second), and
 * running the due items then (as a worker, or a test clock's advance, does) charges the period once,
 * retries a failed renewal on the configured schedule, then cancels — or marks unpaid, by setting —
 * and a new payment method pays at once.
 */
import { layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { expect } from "vitest"
import { subscriptionStream } from "../../src/billing/decider.js"
import { invoiceIdOf } from "../../src/billing/index.js"
import { SubscriptionDecider } from "../../src/billing/objects.js"
import { addMonths } from "../../src/billing/periods.js"
import { makeAppConfig } from "../../src/config.js"
import { CommandRunner } from "../../src/kernel/CommandRunner.js"
import {
  chargesOf,
  getSubscription,
  invoicesOf,
  ok,
  pendingOf,
  recurringProduct,
  runDue,
  subscribe,
  subscribedShopper
} from "../support/billing.js"
import { makeShiftedClock } from "../support/clock.js"
import { registeredShopper } from "../support/customers.js"
import { apiKeyWith, call, identityHttp } from "../support/identity.js"

const DAY = 86_400_000

const setup = (shifted: ReturnType<typeof makeShiftedClock>) => {
  /** Moves the clock to just past `at` (1 s after), whatever it reads now. */
  const advanceTo = (at: Date | string) =>
    Effect.suspend(() => {
      const target = new Date(at).getTime() + 1000
      const now = shifted.clock.unsafeCurrentTimeMillis()
      return target > now ? shifted.advance(Duration.millis(target - now)) : Effect.void
    })
  const run = runDue(shifted.clock)
  // API keys do not expire, however far the clock moves.
  const staff = Effect.map(apiKeyWith(["admin"]), (k) => k.key)
  return { advanceTo, run, staff }
}

const shifted = makeShiftedClock()
const { advanceTo, run, staff } = setup(shifted)

layer(identityHttp({}, shifted.clock), { excludeTestServices: true, timeout: 180_000 })(
  "renewal schedules",
  (it) => {
    it.effect("a trial ends at trialEnd to the second: the first period is charged, active", () =>
      Effect.gen(function* () {
        const token = yield* staff
        const shopper = yield* registeredShopper()
        const product = yield* recurringProduct(token, {}, { amount: 1200 })
        const sub = ok(201)(
          yield* subscribe(token, {
            customerId: shopper.customerId,
            productId: product.id,
            paymentMethod: "pm_card_visa",
            trialPeriodDays: 7
          })
        )
        const trialEnd = new Date(sub.trialEnd)
        expect(yield* pendingOf(sub.id)).toEqual([
          // `subscription.trial_will_end`, three days before.
          { kind: "billing.trial_will_end", dueAt: new Date(trialEnd.getTime() - 3 * 86_400_000) },
          { kind: "billing.renew", dueAt: trialEnd }
        ])
        // A second before the trial's end: nothing.
        yield* advanceTo(new Date(trialEnd.getTime() - 2000))
        yield* run
        expect((yield* getSubscription(token, sub.id)).status).toBe("trialing")
        yield* advanceTo(trialEnd)
        yield* run
        const after = yield* getSubscription(token, sub.id)
        expect(after).toMatchObject({
          status: "active",
          currentPeriodStart: trialEnd.toISOString(),
          currentPeriodEnd: addMonths(trialEnd, 1).toISOString(),
          billingCycleAnchor: trialEnd.toISOString()
        })
        expect(after.latestInvoice).toMatchObject({
          id: invoiceIdOf(sub.id, trialEnd),
          status: "paid",
          total: 1200
        })
        expect(
          (yield* chargesOf(`renewal:${sub.id}:${trialEnd.toISOString()}`)).map((c) => c.amount)
        ).toEqual([1200])
        expect(yield* pendingOf(sub.id)).toEqual([{ kind: "billing.renew", dueAt: addMonths(trialEnd, 1) }])
      })
    )

    it.effect("a trial without a payment method is canceled at its end, nothing charged", () =>
      Effect.gen(function* () {
        const token = yield* staff
        const shopper = yield* registeredShopper()
        const product = yield* recurringProduct(token)
        const sub = ok(201)(
          yield* subscribe(token, {
            customerId: shopper.customerId,
            productId: product.id,
            trialPeriodDays: 3
          })
        )
        yield* advanceTo(sub.trialEnd)
        yield* run
        expect(yield* getSubscription(token, sub.id)).toMatchObject({
          status: "canceled",
          cancellationReason: "trial_ended",
          canceledAt: sub.trialEnd
        })
        expect(yield* invoicesOf(token, sub.id)).toEqual([])
      })
    )

    it.effect("renewals to the second, each period from the anchor (Jan 31 style clamping holds)", () =>
      Effect.gen(function* () {
        const token = yield* staff
        const { sub } = yield* subscribedShopper(token, {}, { amount: 700 })
        const anchor = new Date(sub.billingCycleAnchor)
        for (const n of [1, 2]) {
          const start = addMonths(anchor, n)
          expect(yield* pendingOf(sub.id)).toEqual([{ kind: "billing.renew", dueAt: start }])
          yield* advanceTo(start)
          yield* run
          const now = yield* getSubscription(token, sub.id)
          expect(now).toMatchObject({
            status: "active",
            currentPeriodStart: start.toISOString(),
            currentPeriodEnd: addMonths(anchor, n + 1).toISOString()
          })
          const invoice = ok(200)(yield* call("GET", `/v1/invoices/${invoiceIdOf(sub.id, start)}`, { token }))
          expect(invoice).toMatchObject({
            billingReason: "subscription_cycle",
            status: "paid",
            periodStart: start.toISOString(),
            periodEnd: addMonths(anchor, n + 1).toISOString(),
            total: 700
          })
          expect((yield* chargesOf(`renewal:${sub.id}:${start.toISOString()}`)).length).toBe(1)
        }
        expect((yield* invoicesOf(token, sub.id)).length).toBe(3)
      })
    )

    it.effect("a failed renewal: past_due, retries at +1d, +3d, +7d, +14d, then canceled", () =>
      Effect.gen(function* () {
        const token = yield* staff
        const { sub } = yield* subscribedShopper(token, { interval: "week" }, { amount: 500 })
        // The card on file starts declining (active: nothing is retried now).
        ok(200)(
          yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
            token,
            json: { paymentMethod: "pm_card_visa_chargeDeclined" }
          })
        )
        const start = new Date(sub.currentPeriodEnd)
        yield* advanceTo(start)
        yield* run
        const failed = yield* getSubscription(token, sub.id)
        expect(failed).toMatchObject({
          status: "past_due",
          currentPeriodStart: start.toISOString(),
          renewalAttempts: 1,
          nextRetryAt: new Date(start.getTime() + DAY).toISOString()
        })
        expect(failed.latestInvoice).toMatchObject({
          status: "open",
          attemptCount: 1,
          failureCode: "card_declined"
        })
        const schedule = [1, 3, 7, 14]
        for (const [i, days] of schedule.entries()) {
          const at = new Date(start.getTime() + days * DAY)
          expect(yield* pendingOf(sub.id)).toEqual([{ kind: "billing.retry", dueAt: at }])
          yield* advanceTo(new Date(at.getTime() - 2000))
          yield* run
          expect((yield* getSubscription(token, sub.id)).renewalAttempts).toBe(i + 1)
          yield* advanceTo(at)
          yield* run
          const now = yield* getSubscription(token, sub.id)
          if (i < schedule.length - 1) {
            expect(now).toMatchObject({
              status: "past_due",
              renewalAttempts: i + 2,
              nextRetryAt: new Date(start.getTime() + (schedule[i + 1] ?? 0) * DAY).toISOString()
            })
            // past_due: the next period is never renewed meanwhile.
            expect(now.currentPeriodStart).toBe(start.toISOString())
          } else {
            expect(now).toMatchObject({ status: "canceled", cancellationReason: "payment_failed" })
            expect(now.latestInvoice).toMatchObject({ status: "void", attemptCount: 5 })
          }
        }
        expect(yield* pendingOf(sub.id)).toEqual([])
        expect(yield* chargesOf(`renewal:${sub.id}:${start.toISOString()}`)).toEqual([])
      })
    )

    it.effect("a new payment method while past_due pays at once: active, the retries do nothing more", () =>
      Effect.gen(function* () {
        const token = yield* staff
        const { sub } = yield* subscribedShopper(token, { interval: "week" }, { amount: 800 })
        ok(200)(
          yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
            token,
            json: { paymentMethod: "pm_card_visa_chargeDeclinedInsufficientFunds" }
          })
        )
        const start = new Date(sub.currentPeriodEnd)
        yield* advanceTo(start)
        yield* run
        expect((yield* getSubscription(token, sub.id)).status).toBe("past_due")
        // A plan change waits until what is owed is paid.
        const other = yield* recurringProduct(token, { interval: "week" })
        const blocked = yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
          token,
          json: { productId: other.id }
        })
        expect(blocked.status, blocked.text).toBe(409)
        expect(blocked.body.error.code).toBe("subscription_past_due")
        const paid = ok(200)(
          yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
            token,
            json: { paymentMethod: "pm_card_mastercard" }
          })
        )
        expect(paid).toMatchObject({ status: "active", renewalAttempts: 0, nextRetryAt: null })
        expect(paid.latestInvoice).toMatchObject({ status: "paid", attemptCount: 1 })
        expect((yield* chargesOf(`renewal:${sub.id}:${start.toISOString()}`)).map((c) => c.amount)).toEqual([
          800
        ])
        // The retry that was due at +1 d finds nothing to do; the next renewal is scheduled.
        yield* advanceTo(new Date(start.getTime() + DAY))
        yield* run
        expect((yield* chargesOf(`renewal:${sub.id}:`)).length).toBe(2)
        expect(yield* pendingOf(sub.id)).toEqual([
          { kind: "billing.renew", dueAt: new Date(start.getTime() + 7 * DAY) }
        ])
      })
    )

    it.effect(
      "a payment method the processor no longer knows: the renewal is issued and fails into dunning",
      () =>
        Effect.gen(function* () {
          const token = yield* staff
          const { sub } = yield* subscribedShopper(token, { interval: "week" })
          // PATCH refuses a token the processor does not know; one it forgot after it was stored (a
          // card detached at Stripe) is stored as that would leave it: the subscription's own command.
          expect(
            (yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
              token,
              json: { paymentMethod: "pm_unheard_of" }
            })).status
          ).toBe(400)
          const runner = yield* CommandRunner
          yield* runner.execute(
            SubscriptionDecider,
            subscriptionStream(sub.id),
            { _tag: "Update", patch: { paymentMethod: "pm_unheard_of" } },
            { metadata: { actor: { type: "system", id: "test" } } }
          )
          yield* advanceTo(sub.currentPeriodEnd)
          yield* run
          const failed = yield* getSubscription(token, sub.id)
          expect(failed).toMatchObject({ status: "past_due", currentPeriodStart: sub.currentPeriodEnd })
          expect(failed.latestInvoice).toMatchObject({ status: "open", attemptCount: 1 })
          expect(["invalid_payment_method", "payment_method_missing"]).toContain(
            failed.latestInvoice.failureCode
          )
          const paid = ok(200)(
            yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
              token,
              json: { paymentMethod: "pm_card_visa" }
            })
          )
          expect(paid.status).toBe("active")
        })
    )

    it.effect("cancelAtPeriodEnd: canceled at the period end, no new period, nothing charged", () =>
      Effect.gen(function* () {
        const token = yield* staff
        // Set by the store (reason admin) and by the customer themself (requested_by_customer).
        for (const by of ["admin", "customer"] as const) {
          const { shopper, sub } = yield* subscribedShopper(token, {
            interval: "day",
            intervalCount: 2
          })
          ok(200)(
            yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
              token: by === "admin" ? token : shopper.accessToken,
              json: { cancelAtPeriodEnd: true }
            })
          )
          yield* advanceTo(sub.currentPeriodEnd)
          yield* run
          expect(yield* getSubscription(token, sub.id)).toMatchObject({
            status: "canceled",
            canceledAt: sub.currentPeriodEnd,
            currentPeriodStart: sub.currentPeriodStart,
            cancellationReason: by === "admin" ? "admin" : "requested_by_customer"
          })
          expect((yield* invoicesOf(token, sub.id)).length).toBe(1)
          expect((yield* chargesOf(`renewal:${sub.id}:`)).length).toBe(1)
        }
      })
    )

    it.effect("cancelAtPeriodEnd with usage: the final invoice bills records stamped past the end too", () =>
      Effect.gen(function* () {
        const token = yield* staff
        const meter = `calls_${Date.now().toString(36)}`
        const { sub } = yield* subscribedShopper(token, {
          interval: "day",
          usage: { meter, aggregation: "sum", unitAmount: 3, includedUnits: 0 }
        })
        ok(200)(
          yield* call("PATCH", `/v1/subscriptions/${sub.id}`, { token, json: { cancelAtPeriodEnd: true } })
        )
        const end = new Date(sub.currentPeriodEnd).getTime()
        yield* advanceTo(new Date(end - 3 * 60_000))
        const record = (identifier: string, at: number) =>
          call("POST", "/v1/usage", {
            token,
            json: {
              subscriptionId: sub.id,
              meter,
              identifier,
              value: 5,
              timestamp: new Date(at).toISOString()
            }
          })
        ok(201)(yield* record("before-end", end - 60_000))
        // Accepted (5 minutes ahead at most), in a period that will never come: the final invoice takes it.
        ok(201)(yield* record("after-end", end + 60_000))
        yield* advanceTo(sub.currentPeriodEnd)
        yield* run
        expect(yield* getSubscription(token, sub.id)).toMatchObject({ status: "canceled" })
        const final = (yield* invoicesOf(token, sub.id)).find(
          (i: { billingReason: string }) => i.billingReason === "subscription_cancel"
        )
        expect(final).toMatchObject({ status: "paid", total: 30 })
      })
    )

    it.effect(
      "a first payment made outside the subscription (its intent confirmed directly) is reconciled: active",
      () =>
        Effect.gen(function* () {
          const token = yield* staff
          const shopper = yield* registeredShopper()
          const product = yield* recurringProduct(token, {}, { amount: 2500 })
          const sub = ok(201)(
            yield* subscribe(token, {
              customerId: shopper.customerId,
              productId: product.id,
              paymentMethod: "pm_card_visa_chargeDeclined"
            })
          )
          expect(sub.status).toBe("incomplete")
          const confirmed = ok(200)(
            yield* call("POST", `/v1/payment-intents/${sub.latestInvoice.paymentIntentId}/confirm`, {
              token,
              json: { paymentMethod: "pm_card_visa" }
            })
          )
          expect(confirmed.status).toBe("succeeded")
          expect((yield* getSubscription(token, sub.id)).status).toBe("incomplete")
          yield* advanceTo(new Date(new Date(sub.currentPeriodStart).getTime() + 120_000))
          yield* run
          const active = yield* getSubscription(token, sub.id)
          expect(active).toMatchObject({ status: "active" })
          expect(active.latestInvoice).toMatchObject({ status: "paid", paymentId: confirmed.latestPaymentId })
          expect(yield* pendingOf(sub.id)).toEqual([
            { kind: "billing.renew", dueAt: new Date(sub.currentPeriodEnd) }
          ])
        })
    )

    it.effect("incomplete for 23 hours: incomplete_expired, its invoice void, its intent canceled", () =>
      Effect.gen(function* () {
        const token = yield* staff
        const shopper = yield* registeredShopper()
        const product = yield* recurringProduct(token)
        const sub = ok(201)(
          yield* subscribe(token, {
            customerId: shopper.customerId,
            productId: product.id,
            paymentMethod: "pm_card_visa_chargeDeclined"
          })
        )
        const expiresAt = new Date(new Date(sub.currentPeriodStart).getTime() + 23 * 3_600_000)
        expect(yield* pendingOf(sub.id)).toEqual([
          { kind: "billing.retry", dueAt: new Date(new Date(sub.currentPeriodStart).getTime() + 120_000) },
          { kind: "billing.expire_incomplete", dueAt: expiresAt }
        ])
        yield* advanceTo(expiresAt)
        yield* run
        const expired = yield* getSubscription(token, sub.id)
        expect(expired.status).toBe("incomplete_expired")
        expect(expired.latestInvoice.status).toBe("void")
        const intent = ok(200)(
          yield* call("GET", `/v1/payment-intents/${expired.latestInvoice.paymentIntentId}`, { token })
        )
        expect(intent.status).toBe("canceled")
        const patched = yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
          token,
          json: { paymentMethod: "pm_card_visa" }
        })
        expect(patched.status).toBe(409)
      })
    )
  }
)

const unpaidClock = makeShiftedClock()
const unpaid = setup(unpaidClock)

layer(
  identityHttp(
    {
      billing: { ...makeAppConfig().billing, retrySchedule: [3600, 7200], onRetriesExhausted: "mark_unpaid" }
    },
    unpaidClock.clock
  ),
  { excludeTestServices: true, timeout: 120_000 }
)("dunning set to mark_unpaid", (it) => {
  it.effect("retries at +1h and +2h (BILLING_RETRY_SCHEDULE), then unpaid: no renewals until paid", () =>
    Effect.gen(function* () {
      const token = yield* unpaid.staff
      const { sub } = yield* subscribedShopper(token, { interval: "day" }, { amount: 300 })
      ok(200)(
        yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
          token,
          json: { paymentMethod: "pm_card_visa_chargeDeclined" }
        })
      )
      const start = new Date(sub.currentPeriodEnd)
      yield* unpaid.advanceTo(start)
      yield* unpaid.run
      expect((yield* getSubscription(token, sub.id)).nextRetryAt).toBe(
        new Date(start.getTime() + 3_600_000).toISOString()
      )
      yield* unpaid.advanceTo(new Date(start.getTime() + 3_600_000))
      yield* unpaid.run
      expect((yield* getSubscription(token, sub.id)).nextRetryAt).toBe(
        new Date(start.getTime() + 7_200_000).toISOString()
      )
      yield* unpaid.advanceTo(new Date(start.getTime() + 7_200_000))
      yield* unpaid.run
      const marked = yield* getSubscription(token, sub.id)
      expect(marked).toMatchObject({ status: "unpaid", nextRetryAt: null, renewalAttempts: 3 })
      // A day later: the period ended, but an unpaid subscription is never renewed.
      yield* unpaid.advanceTo(new Date(start.getTime() + 2 * DAY))
      yield* unpaid.run
      expect((yield* getSubscription(token, sub.id)).currentPeriodStart).toBe(start.toISOString())
      expect((yield* invoicesOf(token, sub.id)).length).toBe(2)
      // A new payment method pays the open invoice (active), and the overdue renewal follows: for the
      // period now runs in, the one missed while unpaid is not billed retroactively.
      const paid = ok(200)(
        yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
          token,
          json: { paymentMethod: "pm_card_visa" }
        })
      )
      expect(paid.status).toBe("active")
      yield* unpaid.run
      const renewed = yield* getSubscription(token, sub.id)
      expect(renewed).toMatchObject({
        status: "active",
        currentPeriodStart: new Date(start.getTime() + 2 * DAY).toISOString()
      })
      expect((yield* invoicesOf(token, sub.id)).length).toBe(3)
    })
  )
})
