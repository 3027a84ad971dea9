/**
 * Billing events: one stream per subscription (`subscription-<id>`) holds the subscription's life
 * and its invoices (creation, payment outcomes, voids), so every renewal, retry and cancellation is
 * decided against one state and serialized by its stream version — and, in the use cases, by the
 * subscription's row lock (`FOR UPDATE`), which usage writes respect too (src/billing/contract.ts).
 *
 * Nothing here is personal data: ids, amounts, periods, a processor's payment-method token.
 */
import { Schema } from "effect"
import { defineEvent, type EventOf } from "../eventstore/EventType.js"
import { Metadata } from "../kernel/Metadata.js"
import { INTERVALS } from "./periods.js"

export const SUBSCRIPTION_STATUSES = [
  "incomplete",
  "incomplete_expired",
  "trialing",
  "active",
  "past_due",
  "unpaid",
  "canceled"
] as const
export const SubscriptionStatus = Schema.Literal(...SUBSCRIPTION_STATUSES)
export type SubscriptionStatus = typeof SubscriptionStatus.Type

export const CANCELLATION_REASONS = [
  "requested_by_customer",
  "payment_failed",
  "admin",
  "trial_ended",
  /** The customer's test clock was deleted (Stripe deletes its customers): canceled with nothing billed. */
  "test_clock_deleted",
  /** The customer was erased (`DELETE /user/:id`): canceled with nothing billed, as Stripe does. */
  "customer_deleted"
] as const
export const CancellationReason = Schema.Literal(...CANCELLATION_REASONS)
export type CancellationReason = typeof CancellationReason.Type

export const INVOICE_STATUSES = ["open", "paid", "void"] as const
export const InvoiceStatus = Schema.Literal(...INVOICE_STATUSES)
export type InvoiceStatus = typeof InvoiceStatus.Type

/** Why an invoice was issued (Stripe's `billing_reason`). */
export const BillingReason = Schema.Literal(
  "subscription_create",
  "subscription_cycle",
  "subscription_cancel"
)
export type BillingReason = typeof BillingReason.Type

export const UsagePriceSnapshot = Schema.Struct({
  meter: Schema.String,
  aggregation: Schema.Literal("sum", "count", "max", "last", "unique_count"),
  unitAmount: Schema.Number,
  includedUnits: Schema.Number,
  uniqueKey: Schema.NullOr(Schema.String)
})
export type UsagePriceSnapshot = typeof UsagePriceSnapshot.Type

/** The recurring price as the subscription snapshots it (at creation and at each renewal). */
export const PriceSnapshot = Schema.Struct({
  amount: Schema.Int,
  currency: Schema.String,
  interval: Schema.Literal(...INTERVALS),
  intervalCount: Schema.Int,
  usage: Schema.NullOr(UsagePriceSnapshot)
})
export type PriceSnapshot = typeof PriceSnapshot.Type

export const PeriodData = Schema.Struct({ start: Schema.Date, end: Schema.Date })

export const SubscriptionLine = Schema.Struct({
  type: Schema.Literal("subscription"),
  quantity: Schema.Int,
  unitAmount: Schema.Int,
  amount: Schema.Int,
  period: PeriodData
})

export const UsageLine = Schema.Struct({
  type: Schema.Literal("usage"),
  meter: Schema.String,
  quantity: Schema.Number,
  includedUnits: Schema.Number,
  billableUnits: Schema.Number,
  unitAmount: Schema.Number,
  amount: Schema.Int,
  period: PeriodData
})

export const InvoiceLine = Schema.Union(SubscriptionLine, UsageLine)
export type InvoiceLine = typeof InvoiceLine.Type

/** A plan or quantity change waiting for the next renewal (no mid-cycle proration, research §6 row 7). */
export const PendingUpdate = Schema.Struct({
  productId: Schema.String,
  planName: Schema.String,
  quantity: Schema.Int,
  price: PriceSnapshot,
  effectiveAt: Schema.Date
})
export type PendingUpdate = typeof PendingUpdate.Type

const sub = { subscriptionId: Schema.String }

export const SubscriptionCreated = defineEvent("billing.subscription_created", {
  schema: Schema.Struct({
    ...sub,
    customerId: Schema.String,
    productId: Schema.String,
    planName: Schema.String,
    quantity: Schema.Int,
    price: PriceSnapshot,
    status: Schema.Literal("trialing", "incomplete", "active"),
    paymentMethod: Schema.NullOr(Schema.String),
    /** Periods are counted from here: the creation, or the trial's end. */
    anchor: Schema.Date,
    currentPeriodStart: Schema.Date,
    currentPeriodEnd: Schema.Date,
    trialStart: Schema.NullOr(Schema.Date),
    trialEnd: Schema.NullOr(Schema.Date),
    metadata: Metadata,
    testClockId: Schema.NullOr(Schema.String)
  })
})

/** An invoice and (when it has something to pay) its payment intent, created in the same transaction. */
export const InvoiceCreated = defineEvent("billing.invoice_created", {
  schema: Schema.Struct({
    ...sub,
    invoiceId: Schema.String,
    customerId: Schema.String,
    billingReason: BillingReason,
    currency: Schema.String,
    periodStart: Schema.Date,
    periodEnd: Schema.Date,
    lines: Schema.Array(InvoiceLine),
    subtotal: Schema.Int,
    total: Schema.Int,
    paymentIntentId: Schema.NullOr(Schema.String)
  })
})

export const InvoicePaid = defineEvent("billing.invoice_paid", {
  schema: Schema.Struct({ ...sub, invoiceId: Schema.String, paymentId: Schema.NullOr(Schema.String) })
})

export const InvoicePaymentFailed = defineEvent("billing.invoice_payment_failed", {
  schema: Schema.Struct({
    ...sub,
    invoiceId: Schema.String,
    paymentId: Schema.NullOr(Schema.String),
    failureCode: Schema.String,
    failureMessage: Schema.String,
    /** The next automatic try (dunning), null when none is scheduled. */
    nextPaymentAttempt: Schema.NullOr(Schema.Date)
  })
})

export const InvoiceVoided = defineEvent("billing.invoice_voided", {
  schema: Schema.Struct({ ...sub, invoiceId: Schema.String })
})

/** A renewal: the next period starts, with the plan (and quantity) it is billed at. */
export const PeriodAdvanced = defineEvent("billing.subscription_period_advanced", {
  schema: Schema.Struct({
    ...sub,
    productId: Schema.String,
    planName: Schema.String,
    quantity: Schema.Int,
    price: PriceSnapshot,
    anchor: Schema.Date,
    periodIndex: Schema.Int,
    periodStart: Schema.Date,
    periodEnd: Schema.Date,
    /** Usage before this (the closed period's end) is invoiced now. */
    usageClosedBefore: Schema.Date
  })
})

/** A PATCH: the fields as they now stand. */
/** Who set `cancelAtPeriodEnd` (the cancellation's reason when the period ends): the customer or the store. */
export const CancelRequestedBy = Schema.optionalWith(Schema.NullOr(Schema.Literal("customer", "admin")), {
  // Absent in events and states written before it existed: read as the customer's request, as then.
  default: () => null,
  exact: true
})

export const SubscriptionUpdated = defineEvent("billing.subscription_updated", {
  schema: Schema.Struct({
    ...sub,
    paymentMethod: Schema.NullOr(Schema.String),
    cancelAtPeriodEnd: Schema.Boolean,
    cancelRequestedBy: CancelRequestedBy,
    pendingUpdate: Schema.NullOr(PendingUpdate),
    metadata: Metadata
  })
})

export const SubscriptionMarkedUnpaid = defineEvent("billing.subscription_marked_unpaid", {
  schema: Schema.Struct(sub)
})

export const SubscriptionExpired = defineEvent("billing.subscription_expired", {
  schema: Schema.Struct(sub)
})

export const SubscriptionCanceled = defineEvent("billing.subscription_canceled", {
  schema: Schema.Struct({
    ...sub,
    reason: CancellationReason,
    canceledAt: Schema.Date,
    usageClosedBefore: Schema.Date,
    /** `DELETE ?prorate=true`: the unused part of the licensed fee refunded from this payment. */
    prorate: Schema.NullOr(Schema.Struct({ paymentId: Schema.String, amount: Schema.Int }))
  })
})

/**
 * Three days before a trial ends (Stripe's `customer.subscription.trial_will_end`): the webhook
 * `subscription.trial_will_end` goes out, once per trial end.
 */
export const TrialWillEnd = defineEvent("billing.subscription_trial_will_end", {
  schema: Schema.Struct({ ...sub, trialEnd: Schema.Date })
})

export const billingEventTypes = [
  SubscriptionCreated,
  InvoiceCreated,
  InvoicePaid,
  InvoicePaymentFailed,
  InvoiceVoided,
  PeriodAdvanced,
  SubscriptionUpdated,
  SubscriptionMarkedUnpaid,
  SubscriptionExpired,
  SubscriptionCanceled,
  TrialWillEnd
] as const

export type BillingEvent = EventOf<(typeof billingEventTypes)[number]>
