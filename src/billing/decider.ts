/**
 * The subscription aggregate: the state machine of research §1.7, exactly, with the subscription's
 * invoices (those still open, and the latest). Pure: tested without a database
 * (test/billing/decider.test.ts). The use cases (Billing.ts, renewals.ts) compute what needs the
 * world — prices, usage quantities, payment outcomes, the time a customer lives on — and hand it in
 * as commands; every transition is decided (and refused) here.
 *
 * | state                          | command (trigger)                   | next                         |
 * |--------------------------------|-------------------------------------|------------------------------|
 * | —                              | Create with a trial                 | trialing                     |
 * | —                              | Create without (first invoice open) | incomplete                   |
 * | incomplete                     | RecordPayment paid (within 23 h)    | active                       |
 * | incomplete                     | Expire (23 h elapsed)               | incomplete_expired           |
 * | trialing                       | Renew at trial end, no pm           | canceled (trial_ended)       |
 * | trialing / active              | Renew at period end (flag set)      | canceled (final usage billed)|
 * | trialing / active              | Renew at period end                 | same, period advanced, invoice open |
 * | (cycle invoice open)           | RecordPayment paid                  | active                       |
 * | (cycle invoice open)           | RecordPayment failed                | past_due                     |
 * | past_due                       | RecordPayment failed, exhausted     | canceled / unpaid (setting)  |
 * | unpaid / past_due              | RecordPayment paid (new pm)         | active                       |
 * | active / trialing / past_due   | Update cancelAtPeriodEnd            | same state, flag set         |
 * | any but canceled/inc._expired  | Cancel                              | canceled                     |
 * | canceled                       | Cancel                              | no change (idempotent)       |
 * | canceled / incomplete_expired  | Update; incomplete_expired Cancel   | SubscriptionNotActive (409)  |
 * | past_due / unpaid              | Update productId                    | PlanChangeBlocked (409)      |
 */
import { Data, Effect, Schema } from "effect"
import { defineDecider, type Pending, type PublicEventDraft } from "../kernel/Decider.js"
import { Metadata } from "../kernel/Metadata.js"
import {
  type BillingEvent,
  BillingReason,
  billingEventTypes,
  CancellationReason,
  CancelRequestedBy,
  InvoiceCreated,
  InvoiceLine,
  InvoicePaid,
  InvoicePaymentFailed,
  InvoiceStatus,
  InvoiceVoided,
  PendingUpdate,
  PeriodAdvanced,
  PriceSnapshot,
  SubscriptionCanceled,
  SubscriptionCreated,
  SubscriptionExpired,
  SubscriptionMarkedUnpaid,
  SubscriptionStatus,
  SubscriptionUpdated,
  TrialWillEnd
} from "./events.js"

export const subscriptionStream = (subscriptionId: string) => `subscription-${subscriptionId}`

/** Stripe's window for a first payment: an incomplete subscription expires after 23 hours. */
export const INCOMPLETE_WINDOW_MS = 23 * 60 * 60 * 1000

/** Stripe's `trial_will_end`: three days before the trial ends (at once for a shorter trial). */
export const TRIAL_REMINDER_MS = 3 * 24 * 60 * 60 * 1000
export const trialReminderAt = (trialEnd: Date) => new Date(trialEnd.getTime() - TRIAL_REMINDER_MS)

// --- State ------------------------------------------------------------------------------------------

export const InvoiceStateSchema = Schema.Struct({
  invoiceId: Schema.String,
  subscriptionId: Schema.String,
  customerId: Schema.String,
  billingReason: BillingReason,
  currency: Schema.String,
  periodStart: Schema.Date,
  periodEnd: Schema.Date,
  lines: Schema.Array(InvoiceLine),
  subtotal: Schema.Int,
  total: Schema.Int,
  status: InvoiceStatus,
  paymentIntentId: Schema.NullOr(Schema.String),
  paymentId: Schema.NullOr(Schema.String),
  /** Payment attempts that failed so far. */
  attemptCount: Schema.Int,
  lastFailedPaymentId: Schema.NullOr(Schema.String),
  failureCode: Schema.NullOr(Schema.String),
  failureMessage: Schema.NullOr(Schema.String),
  nextPaymentAttempt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
})
export type InvoiceState = typeof InvoiceStateSchema.Type

export const SubscriptionStateSchema = Schema.Struct({
  exists: Schema.Boolean,
  subscriptionId: Schema.String,
  customerId: Schema.String,
  productId: Schema.String,
  planName: Schema.String,
  quantity: Schema.Int,
  price: PriceSnapshot,
  status: SubscriptionStatus,
  paymentMethod: Schema.NullOr(Schema.String),
  anchor: Schema.Date,
  /** Periods from the anchor: -1 during a trial (the trial is the period before period 0). */
  periodIndex: Schema.Int,
  currentPeriodStart: Schema.Date,
  currentPeriodEnd: Schema.Date,
  trialStart: Schema.NullOr(Schema.Date),
  trialEnd: Schema.NullOr(Schema.Date),
  cancelAtPeriodEnd: Schema.Boolean,
  cancelRequestedBy: CancelRequestedBy,
  pendingUpdate: Schema.NullOr(PendingUpdate),
  canceledAt: Schema.NullOr(Schema.Date),
  cancellationReason: Schema.NullOr(CancellationReason),
  prorate: Schema.NullOr(Schema.Struct({ paymentId: Schema.String, amount: Schema.Int })),
  usageClosedBefore: Schema.NullOr(Schema.Date),
  metadata: Metadata,
  testClockId: Schema.NullOr(Schema.String),
  /** The trial end whose `trial_will_end` went out (absent in states stored before it existed). */
  trialReminderFor: Schema.optionalWith(Schema.NullOr(Schema.Date), { default: () => null, exact: true }),
  /** Open invoices, and the latest one whatever its status. */
  invoices: Schema.Array(InvoiceStateSchema),
  latestInvoiceId: Schema.NullOr(Schema.String),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
})
export type SubscriptionState = typeof SubscriptionStateSchema.Type

const EPOCH = new Date(0)

export const initialSubscriptionState: SubscriptionState = {
  exists: false,
  subscriptionId: "",
  customerId: "",
  productId: "",
  planName: "",
  quantity: 1,
  price: { amount: 0, currency: "USD", interval: "month", intervalCount: 1, usage: null },
  status: "incomplete",
  paymentMethod: null,
  anchor: EPOCH,
  periodIndex: 0,
  currentPeriodStart: EPOCH,
  currentPeriodEnd: EPOCH,
  trialStart: null,
  trialEnd: null,
  cancelAtPeriodEnd: false,
  cancelRequestedBy: null,
  pendingUpdate: null,
  canceledAt: null,
  cancellationReason: null,
  prorate: null,
  usageClosedBefore: null,
  metadata: {},
  testClockId: null,
  trialReminderFor: null,
  invoices: [],
  latestInvoiceId: null,
  createdAt: EPOCH,
  updatedAt: EPOCH
}

export const latestInvoiceOf = (s: SubscriptionState): InvoiceState | undefined =>
  s.invoices.find((i) => i.invoiceId === s.latestInvoiceId)

export const openInvoicesOf = (s: SubscriptionState): ReadonlyArray<InvoiceState> =>
  s.invoices.filter((i) => i.status === "open")

export const isTerminal = (s: SubscriptionState) =>
  s.status === "canceled" || s.status === "incomplete_expired"

/** Renewals run only for these: past_due and unpaid never start a new period (research §4.5). */
export const isRenewable = (s: SubscriptionState) => s.status === "active" || s.status === "trialing"

// --- Evolve -----------------------------------------------------------------------------------------

export type InvoiceCreatedData = typeof InvoiceCreated.schema.Type

export const newInvoiceState = (d: InvoiceCreatedData, at: Date): InvoiceState => ({
  invoiceId: d.invoiceId,
  subscriptionId: d.subscriptionId,
  customerId: d.customerId,
  billingReason: d.billingReason,
  currency: d.currency,
  periodStart: d.periodStart,
  periodEnd: d.periodEnd,
  lines: d.lines,
  subtotal: d.subtotal,
  total: d.total,
  status: "open",
  paymentIntentId: d.paymentIntentId,
  paymentId: null,
  attemptCount: 0,
  lastFailedPaymentId: null,
  failureCode: null,
  failureMessage: null,
  nextPaymentAttempt: null,
  createdAt: at,
  updatedAt: at
})

/** One invoice's own fields after one of its events (the invoices read model folds the same). */
export const evolveInvoice = (
  i: InvoiceState,
  e: BillingEvent | Pending<BillingEvent>,
  at: Date
): InvoiceState => {
  switch (e.type) {
    case "billing.invoice_paid":
      return { ...i, status: "paid", paymentId: e.data.paymentId, nextPaymentAttempt: null, updatedAt: at }
    case "billing.invoice_payment_failed":
      return {
        ...i,
        attemptCount: i.attemptCount + 1,
        lastFailedPaymentId: e.data.paymentId,
        failureCode: e.data.failureCode,
        failureMessage: e.data.failureMessage,
        nextPaymentAttempt: e.data.nextPaymentAttempt,
        updatedAt: at
      }
    case "billing.invoice_voided":
      return { ...i, status: "void", nextPaymentAttempt: null, updatedAt: at }
    default:
      return i
  }
}

const withInvoice = (s: SubscriptionState, invoiceId: string, f: (i: InvoiceState) => InvoiceState) =>
  s.invoices
    .map((i) => (i.invoiceId === invoiceId ? f(i) : i))
    // Settled invoices other than the latest leave the state (the invoices read model keeps them).
    .filter((i) => i.status === "open" || i.invoiceId === s.latestInvoiceId)

export const evolve = (s: SubscriptionState, e: BillingEvent | Pending<BillingEvent>): SubscriptionState => {
  const at = "recordedAt" in e ? e.recordedAt : s.updatedAt
  switch (e.type) {
    case "billing.subscription_created": {
      const d = e.data
      return {
        ...initialSubscriptionState,
        exists: true,
        subscriptionId: d.subscriptionId,
        customerId: d.customerId,
        productId: d.productId,
        planName: d.planName,
        quantity: d.quantity,
        price: d.price,
        status: d.status,
        paymentMethod: d.paymentMethod,
        anchor: d.anchor,
        periodIndex: d.trialEnd === null ? 0 : -1,
        currentPeriodStart: d.currentPeriodStart,
        currentPeriodEnd: d.currentPeriodEnd,
        trialStart: d.trialStart,
        trialEnd: d.trialEnd,
        metadata: d.metadata,
        testClockId: d.testClockId,
        createdAt: at,
        updatedAt: at
      }
    }
    case "billing.invoice_created": {
      const invoice = newInvoiceState(e.data, at)
      const kept = s.invoices.filter((i) => i.status === "open")
      return { ...s, invoices: [...kept, invoice], latestInvoiceId: invoice.invoiceId, updatedAt: at }
    }
    case "billing.invoice_paid": {
      const invoice = s.invoices.find((i) => i.invoiceId === e.data.invoiceId)
      const recovers =
        invoice !== undefined &&
        invoice.billingReason !== "subscription_cancel" &&
        (s.status === "incomplete" ||
          s.status === "trialing" ||
          s.status === "past_due" ||
          s.status === "unpaid")
      return {
        ...s,
        status: recovers ? "active" : s.status,
        invoices: withInvoice(s, e.data.invoiceId, (i) => evolveInvoice(i, e, at)),
        updatedAt: at
      }
    }
    case "billing.invoice_payment_failed": {
      const invoice = s.invoices.find((i) => i.invoiceId === e.data.invoiceId)
      const status =
        invoice === undefined || invoice.billingReason !== "subscription_cycle"
          ? s.status
          : s.status === "active" || s.status === "trialing"
            ? "past_due"
            : s.status
      return {
        ...s,
        status,
        invoices: withInvoice(s, e.data.invoiceId, (i) => evolveInvoice(i, e, at)),
        updatedAt: at
      }
    }
    case "billing.invoice_voided":
      return {
        ...s,
        invoices: withInvoice(s, e.data.invoiceId, (i) => evolveInvoice(i, e, at)),
        updatedAt: at
      }
    case "billing.subscription_period_advanced": {
      const d = e.data
      return {
        ...s,
        productId: d.productId,
        planName: d.planName,
        quantity: d.quantity,
        price: d.price,
        anchor: d.anchor,
        periodIndex: d.periodIndex,
        currentPeriodStart: d.periodStart,
        currentPeriodEnd: d.periodEnd,
        pendingUpdate: null,
        usageClosedBefore: d.usageClosedBefore,
        updatedAt: at
      }
    }
    case "billing.subscription_updated": {
      const d = e.data
      return {
        ...s,
        paymentMethod: d.paymentMethod,
        cancelAtPeriodEnd: d.cancelAtPeriodEnd,
        cancelRequestedBy: d.cancelRequestedBy,
        pendingUpdate: d.pendingUpdate,
        metadata: d.metadata,
        updatedAt: at
      }
    }
    case "billing.subscription_marked_unpaid":
      return { ...s, status: "unpaid", updatedAt: at }
    case "billing.subscription_expired":
      return { ...s, status: "incomplete_expired", updatedAt: at }
    case "billing.subscription_trial_will_end":
      return { ...s, trialReminderFor: e.data.trialEnd, updatedAt: at }
    case "billing.subscription_canceled":
      return {
        ...s,
        status: "canceled",
        canceledAt: e.data.canceledAt,
        cancellationReason: e.data.reason,
        prorate: e.data.prorate,
        usageClosedBefore: e.data.usageClosedBefore,
        pendingUpdate: null,
        updatedAt: at
      }
  }
}

// --- Commands and errors ----------------------------------------------------------------------------

export class SubscriptionNotFound extends Data.TaggedError("SubscriptionNotFound")<{
  readonly subscriptionId: string
}> {}

export class SubscriptionAlreadyExists extends Data.TaggedError("SubscriptionAlreadyExists")<{
  readonly subscriptionId: string
}> {}

/** PATCH or DELETE of a subscription that is over (canceled, incomplete_expired). */
export class SubscriptionNotActive extends Data.TaggedError("SubscriptionNotActive")<{
  readonly subscriptionId: string
  readonly status: SubscriptionStatus
  readonly message: string
}> {}

/** A plan change while money is owed (past_due, unpaid): pay first (research §6 row 10). */
export class PlanChangeBlocked extends Data.TaggedError("PlanChangeBlocked")<{
  readonly subscriptionId: string
  readonly status: SubscriptionStatus
}> {}

export type SubscriptionError =
  | SubscriptionNotFound
  | SubscriptionAlreadyExists
  | SubscriptionNotActive
  | PlanChangeBlocked

export type CreatedData = typeof SubscriptionCreated.schema.Type
export type InvoiceDraft = InvoiceCreatedData

export interface NextPeriod {
  readonly productId: string
  readonly planName: string
  readonly quantity: number
  readonly price: PriceSnapshot
  readonly anchor: Date
  readonly periodIndex: number
  readonly periodStart: Date
  readonly periodEnd: Date
}

export type PaymentOutcome =
  | { readonly _tag: "Paid"; readonly paymentId: string | null }
  | {
      readonly _tag: "Failed"
      readonly paymentId: string | null
      readonly failureCode: string
      readonly failureMessage: string
      readonly nextPaymentAttempt: Date | null
      /** Every retry failed: what the setting says happens now (null: not exhausted). */
      readonly exhausted: "cancel" | "mark_unpaid" | null
    }

export interface Patch {
  readonly paymentMethod?: string | undefined
  readonly cancelAtPeriodEnd?: boolean | undefined
  /** Who asks (the cancellation's reason when `cancelAtPeriodEnd` ends the subscription); the customer if absent. */
  readonly requestedBy?: "customer" | "admin" | undefined
  readonly metadata?: Metadata | undefined
  /** A plan and/or quantity change for the next renewal (the product's price, snapshotted now). */
  readonly plan?:
    | {
        readonly productId: string
        readonly planName: string
        readonly quantity: number
        readonly price: PriceSnapshot
      }
    | undefined
  readonly changesProduct?: boolean | undefined
}

export type SubscriptionCommand =
  | { readonly _tag: "Create"; readonly created: CreatedData; readonly firstInvoice: InvoiceDraft | null }
  | {
      readonly _tag: "Renew"
      readonly now: Date
      /** Null when the renewal ends the subscription (cancelAtPeriodEnd, or a trial without a payment method). */
      readonly next: NextPeriod | null
      readonly invoice: InvoiceDraft | null
    }
  | {
      readonly _tag: "RecordPayment"
      readonly invoiceId: string
      readonly outcome: PaymentOutcome
      readonly now: Date
    }
  | { readonly _tag: "Expire"; readonly now: Date }
  /** Due `TRIAL_REMINDER_MS` before the trial ends: `trial_will_end`, once per trial end. */
  | { readonly _tag: "RemindTrialEnd"; readonly now: Date }
  | { readonly _tag: "Update"; readonly patch: Patch }
  | {
      readonly _tag: "Cancel"
      readonly now: Date
      readonly reason: "requested_by_customer" | "admin" | "test_clock_deleted" | "customer_deleted"
      readonly finalInvoice: InvoiceDraft | null
      readonly prorate: { readonly paymentId: string; readonly amount: number } | null
    }

/** What a renewal at the period end comes to, before the world is asked (usage, prices). */
export type RenewalKind = "not_due" | "cancel_at_period_end" | "trial_ended_without_payment_method" | "renew"

export const renewalKindOf = (s: SubscriptionState, now: Date): RenewalKind => {
  if (!s.exists || !isRenewable(s) || now.getTime() < s.currentPeriodEnd.getTime()) return "not_due"
  if (s.cancelAtPeriodEnd) return "cancel_at_period_end"
  if (s.status === "trialing" && s.paymentMethod === null) return "trial_ended_without_payment_method"
  return "renew"
}

const voidOpen = (s: SubscriptionState) =>
  openInvoicesOf(s).map((i) =>
    InvoiceVoided.make({ subscriptionId: s.subscriptionId, invoiceId: i.invoiceId })
  )

/** An invoice with nothing to pay is paid as it is issued. */
const issue = (invoice: InvoiceDraft) =>
  invoice.total === 0
    ? [
        InvoiceCreated.make(invoice),
        InvoicePaid.make({
          subscriptionId: invoice.subscriptionId,
          invoiceId: invoice.invoiceId,
          paymentId: null
        })
      ]
    : [InvoiceCreated.make(invoice)]

const notActive = (s: SubscriptionState, message: string) =>
  Effect.fail(new SubscriptionNotActive({ subscriptionId: s.subscriptionId, status: s.status, message }))

export const decide = (
  c: SubscriptionCommand,
  s: SubscriptionState
): Effect.Effect<ReadonlyArray<BillingEvent>, SubscriptionError> => {
  if (c._tag === "Create") {
    if (s.exists) return Effect.fail(new SubscriptionAlreadyExists({ subscriptionId: s.subscriptionId }))
    return Effect.succeed([
      SubscriptionCreated.make(c.created),
      ...(c.firstInvoice === null ? [] : issue(c.firstInvoice))
    ])
  }
  if (!s.exists) return Effect.fail(new SubscriptionNotFound({ subscriptionId: "" }))
  const id = s.subscriptionId
  switch (c._tag) {
    case "Renew": {
      const kind = renewalKindOf(s, c.now)
      switch (kind) {
        case "not_due":
          return Effect.succeed([])
        case "cancel_at_period_end":
        case "trial_ended_without_payment_method":
          return Effect.succeed([
            ...voidOpen(s),
            ...(c.invoice === null ? [] : issue(c.invoice)),
            SubscriptionCanceled.make({
              subscriptionId: id,
              reason:
                kind === "trial_ended_without_payment_method"
                  ? "trial_ended"
                  : s.cancelRequestedBy === "admin"
                    ? "admin"
                    : "requested_by_customer",
              canceledAt: s.currentPeriodEnd,
              usageClosedBefore: s.currentPeriodEnd,
              prorate: null
            })
          ])
        case "renew": {
          const next = c.next
          if (next === null || c.invoice === null) return Effect.succeed([])
          return Effect.succeed([
            PeriodAdvanced.make({
              subscriptionId: id,
              productId: next.productId,
              planName: next.planName,
              quantity: next.quantity,
              price: next.price,
              anchor: next.anchor,
              periodIndex: next.periodIndex,
              periodStart: next.periodStart,
              periodEnd: next.periodEnd,
              usageClosedBefore: s.currentPeriodEnd
            }),
            ...issue(c.invoice)
          ])
        }
      }
      return Effect.succeed([])
    }
    case "RecordPayment": {
      const invoice = s.invoices.find((i) => i.invoiceId === c.invoiceId)
      if (invoice === undefined || invoice.status !== "open") return Effect.succeed([])
      const outcome = c.outcome
      if (outcome._tag === "Paid")
        return Effect.succeed([
          InvoicePaid.make({ subscriptionId: id, invoiceId: invoice.invoiceId, paymentId: outcome.paymentId })
        ])
      if (outcome.paymentId !== null && invoice.lastFailedPaymentId === outcome.paymentId)
        return Effect.succeed([])
      const failed = InvoicePaymentFailed.make({
        subscriptionId: id,
        invoiceId: invoice.invoiceId,
        paymentId: outcome.paymentId,
        failureCode: outcome.failureCode,
        failureMessage: outcome.failureMessage,
        nextPaymentAttempt: outcome.exhausted === null ? outcome.nextPaymentAttempt : null
      })
      // Dunning ends only for a renewal's invoice of a subscription still collecting it.
      const dunning =
        invoice.billingReason === "subscription_cycle" && (s.status === "past_due" || isRenewable(s))
      if (!dunning || outcome.exhausted === null) return Effect.succeed([failed])
      if (outcome.exhausted === "mark_unpaid")
        return Effect.succeed(
          s.status === "unpaid" ? [failed] : [failed, SubscriptionMarkedUnpaid.make({ subscriptionId: id })]
        )
      return Effect.succeed([
        failed,
        ...voidOpen(s),
        SubscriptionCanceled.make({
          subscriptionId: id,
          reason: "payment_failed",
          canceledAt: c.now,
          usageClosedBefore: c.now,
          prorate: null
        })
      ])
    }
    case "RemindTrialEnd": {
      const trialEnd = s.trialEnd
      if (s.status !== "trialing" || trialEnd === null) return Effect.succeed([])
      if (s.trialReminderFor !== null && s.trialReminderFor.getTime() === trialEnd.getTime())
        return Effect.succeed([])
      if (c.now.getTime() < trialReminderAt(trialEnd).getTime()) return Effect.succeed([])
      return Effect.succeed([TrialWillEnd.make({ subscriptionId: id, trialEnd })])
    }
    case "Expire": {
      if (s.status !== "incomplete") return Effect.succeed([])
      if (c.now.getTime() < s.currentPeriodStart.getTime() + INCOMPLETE_WINDOW_MS) return Effect.succeed([])
      return Effect.succeed([...voidOpen(s), SubscriptionExpired.make({ subscriptionId: id })])
    }
    case "Update": {
      const p = c.patch
      if (isTerminal(s)) return notActive(s, `This subscription is ${s.status}: it can no longer be changed.`)
      if (p.changesProduct === true && (s.status === "past_due" || s.status === "unpaid"))
        return Effect.fail(new PlanChangeBlocked({ subscriptionId: id, status: s.status }))
      if (
        p.cancelAtPeriodEnd === true &&
        !s.cancelAtPeriodEnd &&
        !(s.status === "active" || s.status === "trialing" || s.status === "past_due")
      )
        return notActive(
          s,
          `This subscription is ${s.status}: only an active, trialing or past_due one can be set to cancel at period end (cancel it now with DELETE).`
        )
      const plan = p.plan
      const pendingUpdate =
        plan === undefined
          ? s.pendingUpdate
          : plan.productId === s.productId && plan.quantity === s.quantity
            ? null
            : { ...plan, effectiveAt: s.currentPeriodEnd }
      const cancelAtPeriodEnd = p.cancelAtPeriodEnd ?? s.cancelAtPeriodEnd
      const next = {
        paymentMethod: p.paymentMethod ?? s.paymentMethod,
        cancelAtPeriodEnd,
        // Whoever first asked; cleared with the flag.
        cancelRequestedBy: !cancelAtPeriodEnd
          ? null
          : s.cancelAtPeriodEnd
            ? s.cancelRequestedBy
            : (p.requestedBy ?? "customer"),
        pendingUpdate,
        metadata: p.metadata ?? s.metadata
      }
      const same =
        next.paymentMethod === s.paymentMethod &&
        next.cancelAtPeriodEnd === s.cancelAtPeriodEnd &&
        next.pendingUpdate === s.pendingUpdate &&
        next.metadata === s.metadata
      return Effect.succeed(same ? [] : [SubscriptionUpdated.make({ subscriptionId: id, ...next })])
    }
    case "Cancel": {
      if (s.status === "canceled") return Effect.succeed([])
      if (s.status === "incomplete_expired")
        return notActive(s, "This subscription expired before its first payment: there is nothing to cancel.")
      return Effect.succeed([
        ...voidOpen(s),
        ...(c.finalInvoice === null ? [] : issue(c.finalInvoice)),
        SubscriptionCanceled.make({
          subscriptionId: id,
          reason: c.reason,
          canceledAt: c.now,
          usageClosedBefore: c.now,
          prorate: c.prorate
        })
      ])
    }
  }
}

// --- Public events ----------------------------------------------------------------------------------

export interface Snapshots {
  readonly subscription: (s: SubscriptionState) => Readonly<Record<string, unknown>>
  readonly invoice: (i: InvoiceState) => Readonly<Record<string, unknown>>
}

/**
 * What each change publishes: the webhook types `subscription.created`, `subscription.updated`,
 * `subscription.cancelled`, `subscription.trial_will_end` (three days before a trial ends),
 * `invoice.paid`, `invoice.payment_failed` (extensions beyond spec §6.1),
 * and the notification triggers of spec §6.5 `subscription.created` (when it starts: trialing, or
 * active once its first payment succeeded), `subscription.renewed` and `subscription.cancelled`.
 * (`payment.failed` is published by the payments context for the invoice's declined payment.)
 */
export const billingPublicEvents =
  (snapshots: Snapshots) =>
  (e: Pending<BillingEvent>, s: SubscriptionState): ReadonlyArray<PublicEventDraft> => {
    const subjectId = s.customerId
    const data = snapshots.subscription(s)
    const publish = (type: string, extra: Readonly<Record<string, unknown>> = {}): PublicEventDraft => ({
      type,
      data: { ...data, ...extra },
      subjectId
    })
    const updated = publish("subscription.updated")
    const invoiceEvent = (type: string, invoiceId: string): ReadonlyArray<PublicEventDraft> => {
      const invoice = s.invoices.find((i) => i.invoiceId === invoiceId)
      return invoice === undefined ? [] : [{ type, data: snapshots.invoice(invoice), subjectId }]
    }
    switch (e.type) {
      case "billing.subscription_created":
        return e.data.status === "trialing" ? [publish("subscription.created")] : []
      case "billing.invoice_created":
      case "billing.invoice_voided":
        return []
      case "billing.invoice_paid": {
        const invoice = s.invoices.find((i) => i.invoiceId === e.data.invoiceId)
        const paid = invoiceEvent("invoice.paid", e.data.invoiceId)
        if (invoice?.billingReason === "subscription_create")
          return [...paid, publish("subscription.created"), updated]
        if (invoice?.billingReason === "subscription_cycle")
          return [...paid, updated, publish("subscription.renewed", { invoiceId: invoice.invoiceId })]
        return paid
      }
      case "billing.invoice_payment_failed":
        return [...invoiceEvent("invoice.payment_failed", e.data.invoiceId), updated]
      case "billing.subscription_period_advanced":
      case "billing.subscription_updated":
      case "billing.subscription_marked_unpaid":
      case "billing.subscription_expired":
        return [updated]
      case "billing.subscription_canceled":
        return [publish("subscription.cancelled"), updated]
      case "billing.subscription_trial_will_end":
        return [publish("subscription.trial_will_end")]
    }
  }

export const makeSubscriptionDecider = (snapshots: Snapshots) =>
  defineDecider({
    streamType: "subscription",
    events: billingEventTypes,
    initialState: initialSubscriptionState,
    evolve,
    decide,
    publicEvents: billingPublicEvents(snapshots)
  })
