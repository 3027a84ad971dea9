/**
 * The subscription state machine, pure (research §1.7, every row of the table): creation with and
 * without a trial, the first payment and its 23-hour window, renewals at the period end (trial end,
 * cancelAtPeriodEnd, a trial without a payment method), payment outcomes and dunning's end (cancel
 * or unpaid), PATCH and DELETE in each state, and what each change publishes.
 */
import { describe, expect, it } from "vitest"
import {
  INCOMPLETE_WINDOW_MS,
  type InvoiceDraft,
  type NextPeriod,
  type PaymentOutcome,
  type SubscriptionCommand,
  type SubscriptionState
} from "../../src/billing/decider.js"
import type { PriceSnapshot } from "../../src/billing/events.js"
import { SubscriptionDecider } from "../../src/billing/objects.js"
import { periodAt } from "../../src/billing/periods.js"
import { deciderSpec } from "../support/decider.js"

const spec = deciderSpec(SubscriptionDecider)
const ID = "sub_0000000000000000000000000a"
const PRICE: PriceSnapshot = {
  amount: 1000,
  currency: "USD",
  interval: "month",
  intervalCount: 1,
  usage: null
}
const T0 = new Date("2026-01-31T09:00:00.000Z")
const HOUR = 3_600_000

const draft = (
  invoiceId: string,
  billingReason: InvoiceDraft["billingReason"],
  start: Date,
  end: Date,
  total = 1000
): InvoiceDraft => ({
  subscriptionId: ID,
  invoiceId,
  customerId: "cus_1",
  billingReason,
  currency: "USD",
  periodStart: start,
  periodEnd: end,
  lines:
    total === 0
      ? []
      : [{ type: "subscription", quantity: 1, unitAmount: total, amount: total, period: { start, end } }],
  subtotal: total,
  total,
  paymentIntentId: total === 0 ? null : `pi_${invoiceId}`
})

const create = (
  trialDays: number | null,
  paymentMethod: string | null = "pm_card_visa"
): SubscriptionCommand => {
  const trialEnd = trialDays === null ? null : new Date(T0.getTime() + trialDays * 24 * HOUR)
  const first = periodAt(trialEnd ?? T0, PRICE, 0)
  return {
    _tag: "Create",
    created: {
      subscriptionId: ID,
      customerId: "cus_1",
      productId: "prod_1",
      planName: "Pro",
      quantity: 1,
      price: PRICE,
      status: trialEnd === null ? "incomplete" : "trialing",
      paymentMethod,
      anchor: trialEnd ?? T0,
      currentPeriodStart: trialEnd === null ? first.start : T0,
      currentPeriodEnd: trialEnd ?? first.end,
      trialStart: trialEnd === null ? null : T0,
      trialEnd,
      metadata: {},
      testClockId: null
    },
    firstInvoice: trialEnd === null ? draft("in_first", "subscription_create", first.start, first.end) : null
  }
}

const paid: PaymentOutcome = { _tag: "Paid", paymentId: "pay_ok" }
const failed = (
  paymentId: string,
  nextPaymentAttempt: Date | null,
  exhausted: "cancel" | "mark_unpaid" | null = null
): PaymentOutcome => ({
  _tag: "Failed",
  paymentId,
  failureCode: "card_declined",
  failureMessage: "Your card was declined.",
  nextPaymentAttempt,
  exhausted
})
const record = (invoiceId: string, outcome: PaymentOutcome, now = T0): SubscriptionCommand => ({
  _tag: "RecordPayment",
  invoiceId,
  outcome,
  now
})

const nextOf = (s: SubscriptionState): NextPeriod => {
  const index = s.periodIndex + 1
  const p = periodAt(s.anchor, s.price, index)
  return {
    productId: s.productId,
    planName: s.planName,
    quantity: s.quantity,
    price: s.price,
    anchor: s.anchor,
    periodIndex: index,
    periodStart: p.start,
    periodEnd: p.end
  }
}

const renew = (s: SubscriptionState, now = s.currentPeriodEnd): SubscriptionCommand => {
  const next = nextOf(s)
  return {
    _tag: "Renew",
    now,
    next,
    invoice: draft(`in_${next.periodIndex}`, "subscription_cycle", next.periodStart, next.periodEnd)
  }
}

const active = () => spec.run(SubscriptionDecider.initialState, create(null), record("in_first", paid))
const pastDue = () => {
  const s = active()
  const renewed = spec.run(s, renew(s))
  return spec.run(
    renewed,
    record("in_1", failed("pay_f1", new Date(renewed.currentPeriodStart.getTime() + 24 * HOUR)))
  )
}
const types = (events: ReadonlyArray<{ readonly type: string }>) => events.map((e) => e.type)
const published = (s: SubscriptionState, command: SubscriptionCommand) => {
  const decision = spec.givenState(s).when(command)
  let state = s
  const out: Array<string> = []
  for (const e of decision.events) {
    state = SubscriptionDecider.evolve(state, e)
    const pending = { ...e, id: "x", streamId: "s", streamVersion: 1, occurredAt: T0, metadata: {} }
    // biome-ignore lint/suspicious/noExplicitAny: a minimal pending event for the public-event mapping
    out.push(...(SubscriptionDecider.publicEvents?.(pending as any, state) ?? []).map((p) => p.type))
  }
  return out
}

describe("subscription decider (research §1.7)", () => {
  it("— → trialing with a trial; subscription.created published", () => {
    const d = spec.when(create(14))
    expect(types(d.events)).toEqual(["billing.subscription_created"])
    expect(d.state).toMatchObject({ status: "trialing", periodIndex: -1, invoices: [] })
    expect(published(SubscriptionDecider.initialState, create(14))).toEqual(["subscription.created"])
  })

  it("trial_will_end: three days before the trial ends (not before), once per trial end, only while trialing", () => {
    const trialing = spec.run(SubscriptionDecider.initialState, create(14))
    const trialEnd = trialing.trialEnd ?? T0
    const remind = (now: Date): SubscriptionCommand => ({ _tag: "RemindTrialEnd", now })
    const threeDaysBefore = new Date(trialEnd.getTime() - 72 * HOUR)
    expect(spec.givenState(trialing).when(remind(new Date(threeDaysBefore.getTime() - 1))).events).toEqual([])
    const d = spec.givenState(trialing).when(remind(threeDaysBefore))
    expect(types(d.events)).toEqual(["billing.subscription_trial_will_end"])
    expect(d.state.trialReminderFor).toEqual(trialEnd)
    expect(published(trialing, remind(threeDaysBefore))).toEqual(["subscription.trial_will_end"])
    // Run again (a due item re-run after a crash): nothing more.
    expect(spec.givenState(d.state).when(remind(trialEnd)).events).toEqual([])
    // No longer trialing: nothing.
    expect(spec.givenState(active()).when(remind(trialEnd)).events).toEqual([])
  })

  it("— → incomplete with the first invoice open; paid → active and subscription.created", () => {
    const d = spec.when(create(null))
    expect(types(d.events)).toEqual(["billing.subscription_created", "billing.invoice_created"])
    expect(d.state.status).toBe("incomplete")
    expect(published(SubscriptionDecider.initialState, create(null))).toEqual([])
    expect(active().status).toBe("active")
    expect(published(d.state, record("in_first", paid))).toEqual([
      "invoice.paid",
      "subscription.created",
      "subscription.updated"
    ])
  })

  it("first charge fails → incomplete (attempt counted); within 23 h a payment makes it active", () => {
    const s = spec.run(
      SubscriptionDecider.initialState,
      create(null),
      record("in_first", failed("pay_1", null))
    )
    expect(s.status).toBe("incomplete")
    expect(s.invoices[0]).toMatchObject({ status: "open", attemptCount: 1, failureCode: "card_declined" })
    expect(spec.run(s, record("in_first", paid)).status).toBe("active")
  })

  it("incomplete → incomplete_expired after 23 h (not before); the invoice is voided", () => {
    const s = spec.run(SubscriptionDecider.initialState, create(null))
    spec
      .givenState(s)
      .when({ _tag: "Expire", now: new Date(T0.getTime() + INCOMPLETE_WINDOW_MS - 1) })
      .thenNothing()
    const d = spec.givenState(s).when({ _tag: "Expire", now: new Date(T0.getTime() + INCOMPLETE_WINDOW_MS) })
    expect(types(d.events)).toEqual(["billing.invoice_voided", "billing.subscription_expired"])
    expect(d.state.status).toBe("incomplete_expired")
    expect(d.state.invoices[0]?.status).toBe("void")
    spec
      .givenState(active())
      .when({ _tag: "Expire", now: new Date(T0.getTime() + 48 * HOUR) })
      .thenNothing()
  })

  it("trialing at trial end: charge succeeds → active (new period 0 from the anchor), subscription.renewed", () => {
    const s = spec.run(SubscriptionDecider.initialState, create(7))
    const renewed = spec.givenState(s).when(renew(s))
    expect(types(renewed.events)).toEqual(["billing.subscription_period_advanced", "billing.invoice_created"])
    const trialEnd = new Date(T0.getTime() + 7 * 24 * HOUR)
    expect(renewed.state).toMatchObject({
      status: "trialing",
      periodIndex: 0,
      currentPeriodStart: trialEnd,
      currentPeriodEnd: periodAt(trialEnd, PRICE, 0).end,
      usageClosedBefore: trialEnd
    })
    const after = spec.givenState(renewed.state).when(record("in_0", paid))
    expect(after.state.status).toBe("active")
    expect(published(renewed.state, record("in_0", paid))).toEqual([
      "invoice.paid",
      "subscription.updated",
      "subscription.renewed"
    ])
  })

  it("trialing at trial end without a payment method → canceled (trial_ended)", () => {
    const s = spec.run(SubscriptionDecider.initialState, create(7, null))
    const d = spec.givenState(s).when({ _tag: "Renew", now: s.currentPeriodEnd, next: null, invoice: null })
    expect(types(d.events)).toEqual(["billing.subscription_canceled"])
    expect(d.state).toMatchObject({
      status: "canceled",
      cancellationReason: "trial_ended",
      canceledAt: s.currentPeriodEnd
    })
  })

  it("trialing at trial end, charge fails → past_due", () => {
    const s = spec.run(SubscriptionDecider.initialState, create(7))
    const renewed = spec.run(s, renew(s))
    expect(spec.run(renewed, record("in_0", failed("pay_x", T0))).status).toBe("past_due")
  })

  it("active at period end: renewed (period advanced from the anchor), before it nothing", () => {
    const s = active()
    spec
      .givenState(s)
      .when(renew(s, new Date(s.currentPeriodEnd.getTime() - 1)))
      .thenNothing()
    const r = spec.givenState(s).when(renew(s))
    expect(r.state).toMatchObject({
      periodIndex: 1,
      currentPeriodStart: new Date("2026-02-28T09:00:00.000Z"),
      currentPeriodEnd: new Date("2026-03-31T09:00:00.000Z"),
      status: "active"
    })
    // A re-run of the same renewal (the period already advanced) does nothing.
    spec.givenState(r.state).when(renew(s)).thenNothing()
  })

  it("active at period end, charge fails → past_due with the period advanced; payment.failed is payments'", () => {
    const s = pastDue()
    expect(s).toMatchObject({ status: "past_due", periodIndex: 1 })
    expect(s.invoices.find((i) => i.invoiceId === "in_1")).toMatchObject({ attemptCount: 1, status: "open" })
    // past_due never renews the next period.
    spec
      .givenState(s)
      .when(renew(s, new Date(s.currentPeriodEnd.getTime() + 1)))
      .thenNothing()
  })

  it("past_due: a retry that succeeds → active (subscription.renewed)", () => {
    const s = pastDue()
    expect(spec.run(s, record("in_1", paid)).status).toBe("active")
    expect(published(s, record("in_1", paid))).toContain("subscription.renewed")
  })

  it("past_due: the same failed payment recorded twice counts once", () => {
    const s = pastDue()
    spec
      .givenState(s)
      .when(record("in_1", failed("pay_f1", null)))
      .thenNothing()
  })

  it("past_due: retries exhausted → canceled (payment_failed) or unpaid, by setting", () => {
    const s = pastDue()
    const canceled = spec.givenState(s).when(record("in_1", failed("pay_f2", null, "cancel")))
    expect(canceled.state).toMatchObject({ status: "canceled", cancellationReason: "payment_failed" })
    expect(canceled.state.invoices.find((i) => i.invoiceId === "in_1")?.status).toBe("void")
    expect(published(s, record("in_1", failed("pay_f2", null, "cancel")))).toContain("subscription.cancelled")
    const unpaid = spec.run(s, record("in_1", failed("pay_f2", null, "mark_unpaid")))
    expect(unpaid.status).toBe("unpaid")
    // unpaid: no renewal; a new payment method's retry that succeeds → active.
    spec
      .givenState(unpaid)
      .when(renew(unpaid, new Date(unpaid.currentPeriodEnd.getTime() + 1)))
      .thenNothing()
    expect(spec.run(unpaid, record("in_1", paid)).status).toBe("active")
  })

  it("active / trialing / past_due: PATCH cancelAtPeriodEnd sets the flag, same state", () => {
    for (const s of [active(), spec.run(SubscriptionDecider.initialState, create(7)), pastDue()]) {
      const d = spec.givenState(s).when({ _tag: "Update", patch: { cancelAtPeriodEnd: true } })
      expect(d.state).toMatchObject({ status: s.status, cancelAtPeriodEnd: true })
    }
    const incomplete = spec.run(SubscriptionDecider.initialState, create(null))
    spec
      .givenState(incomplete)
      .when({ _tag: "Update", patch: { cancelAtPeriodEnd: true } })
      .thenFails("SubscriptionNotActive")
  })

  it("cancelAtPeriodEnd's reason: whoever set the flag first (customer by default); cleared with it", () => {
    const renewAtEnd = (s: SubscriptionState) =>
      spec.run(s, { _tag: "Renew", now: s.currentPeriodEnd, next: null, invoice: null }).cancellationReason
    const byAdmin = spec.run(active(), {
      _tag: "Update",
      patch: { cancelAtPeriodEnd: true, requestedBy: "admin" }
    })
    expect(byAdmin.cancelRequestedBy).toBe("admin")
    expect(renewAtEnd(byAdmin)).toBe("admin")
    // The customer asking again changes nothing; another change keeps who asked.
    const again = spec.run(byAdmin, {
      _tag: "Update",
      patch: { cancelAtPeriodEnd: true, requestedBy: "customer", metadata: { a: "b" } }
    })
    expect(renewAtEnd(again)).toBe("admin")
    const takenBack = spec.run(again, { _tag: "Update", patch: { cancelAtPeriodEnd: false } })
    expect(takenBack.cancelRequestedBy).toBeNull()
    const byCustomer = spec.run(takenBack, { _tag: "Update", patch: { cancelAtPeriodEnd: true } })
    expect(renewAtEnd(byCustomer)).toBe("requested_by_customer")
  })

  it("active with the flag set, at period end → canceled; the final usage invoice issued with it", () => {
    const s = spec.run(active(), { _tag: "Update", patch: { cancelAtPeriodEnd: true } })
    const usage = draft("in_final", "subscription_cancel", s.currentPeriodEnd, s.currentPeriodEnd, 250)
    const d = spec.givenState(s).when({ _tag: "Renew", now: s.currentPeriodEnd, next: null, invoice: usage })
    expect(types(d.events)).toEqual(["billing.invoice_created", "billing.subscription_canceled"])
    expect(d.state).toMatchObject({
      status: "canceled",
      cancellationReason: "requested_by_customer",
      canceledAt: s.currentPeriodEnd,
      usageClosedBefore: s.currentPeriodEnd,
      periodIndex: 0
    })
  })

  it("DELETE: active / trialing / past_due / unpaid / incomplete → canceled now", () => {
    const unpaid = spec.run(pastDue(), record("in_1", failed("pay_f2", null, "mark_unpaid")))
    const states = [
      active(),
      spec.run(SubscriptionDecider.initialState, create(7)),
      pastDue(),
      unpaid,
      spec.run(SubscriptionDecider.initialState, create(null))
    ]
    const now = new Date(T0.getTime() + HOUR)
    for (const s of states) {
      const d = spec
        .givenState(s)
        .when({ _tag: "Cancel", now, reason: "admin", finalInvoice: null, prorate: null })
      expect(d.state).toMatchObject({ status: "canceled", canceledAt: now, cancellationReason: "admin" })
      // Open invoices are voided: dunning stops.
      expect(d.state.invoices.filter((i) => i.status === "open")).toEqual([])
    }
  })

  it("canceled / incomplete_expired: PATCH → SubscriptionNotActive; DELETE of canceled → nothing", () => {
    const now = new Date(T0.getTime() + HOUR)
    const canceled = spec.run(active(), {
      _tag: "Cancel",
      now,
      reason: "admin",
      finalInvoice: null,
      prorate: null
    })
    const expired = spec.run(SubscriptionDecider.initialState, create(null), {
      _tag: "Expire",
      now: new Date(T0.getTime() + INCOMPLETE_WINDOW_MS)
    })
    for (const s of [canceled, expired])
      spec
        .givenState(s)
        .when({ _tag: "Update", patch: { metadata: { a: 1 } } })
        .thenFails("SubscriptionNotActive")
    spec
      .givenState(canceled)
      .when({ _tag: "Cancel", now, reason: "admin", finalInvoice: null, prorate: null })
      .thenNothing()
    spec
      .givenState(expired)
      .when({ _tag: "Cancel", now, reason: "admin", finalInvoice: null, prorate: null })
      .thenFails("SubscriptionNotActive")
  })

  it("plan changes: pending until the renewal; blocked while past_due or unpaid", () => {
    const s = active()
    const plan = { productId: "prod_2", planName: "Max", quantity: 3, price: { ...PRICE, amount: 3000 } }
    const d = spec.givenState(s).when({ _tag: "Update", patch: { plan, changesProduct: true } })
    expect(d.state).toMatchObject({
      productId: "prod_1",
      quantity: 1,
      pendingUpdate: { ...plan, effectiveAt: s.currentPeriodEnd }
    })
    spec
      .givenState(pastDue())
      .when({ _tag: "Update", patch: { plan, changesProduct: true } })
      .thenFails("PlanChangeBlocked")
    // A renewal applies it (the use case builds the next period from the pending plan).
    const pending = d.state
    const next: NextPeriod = {
      ...nextOf(pending),
      productId: "prod_2",
      planName: "Max",
      quantity: 3,
      price: plan.price
    }
    const renewed = spec.run(pending, {
      _tag: "Renew",
      now: pending.currentPeriodEnd,
      next,
      invoice: draft("in_1", "subscription_cycle", next.periodStart, next.periodEnd, 9000)
    })
    expect(renewed).toMatchObject({ productId: "prod_2", quantity: 3, pendingUpdate: null })
  })

  it("an invoice with nothing to pay is paid as it is issued", () => {
    const s = active()
    const next = nextOf(s)
    const d = spec.givenState(s).when({
      _tag: "Renew",
      now: s.currentPeriodEnd,
      next,
      invoice: draft("in_zero", "subscription_cycle", next.periodStart, next.periodEnd, 0)
    })
    expect(types(d.events)).toEqual([
      "billing.subscription_period_advanced",
      "billing.invoice_created",
      "billing.invoice_paid"
    ])
    expect(d.state.status).toBe("active")
  })
})
