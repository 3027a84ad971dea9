/**
 * The subscription and invoice objects as clients see them (`/v1/subscriptions`, `/v1/invoices`,
 * and the public events' snapshots alike): built from the aggregate's state, which the read models
 * store whole, so an event's snapshot is exactly what a `GET` showed at that version.
 */
import { Schema } from "effect"
import { fastEncodeSync } from "../base/FastEncode.js"
import { Metadata } from "../kernel/Metadata.js"
import {
  type InvoiceState,
  latestInvoiceOf,
  makeSubscriptionDecider,
  type SubscriptionState
} from "./decider.js"
import {
  BillingReason,
  CancellationReason,
  InvoiceLine,
  InvoiceStatus,
  PriceSnapshot,
  SubscriptionStatus
} from "./events.js"

export const InvoiceObject = Schema.Struct({
  object: Schema.Literal("invoice"),
  id: Schema.String,
  subscriptionId: Schema.String,
  customerId: Schema.String,
  billingReason: BillingReason,
  /** The licensed period billed in advance (a final invoice: the instant it was issued, twice). */
  periodStart: Schema.Date,
  periodEnd: Schema.Date,
  /** The licensed fee in advance; usage of the closed period in arrears. */
  lines: Schema.Array(InvoiceLine),
  subtotal: Schema.Int,
  total: Schema.Int,
  currency: Schema.String,
  status: InvoiceStatus,
  paymentIntentId: Schema.NullOr(Schema.String),
  paymentId: Schema.NullOr(Schema.String),
  /** Failed payment attempts so far. */
  attemptCount: Schema.Int,
  nextPaymentAttempt: Schema.NullOr(Schema.Date),
  failureCode: Schema.NullOr(Schema.String),
  failureMessage: Schema.NullOr(Schema.String),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "Invoice" })
export type InvoiceObject = typeof InvoiceObject.Type

const LatestInvoice = Schema.Struct({
  id: Schema.String,
  status: InvoiceStatus,
  total: Schema.Int,
  paymentIntentId: Schema.NullOr(Schema.String),
  paymentId: Schema.NullOr(Schema.String),
  attemptCount: Schema.Int,
  nextPaymentAttempt: Schema.NullOr(Schema.Date),
  failureCode: Schema.NullOr(Schema.String),
  failureMessage: Schema.NullOr(Schema.String)
}).annotations({ identifier: "SubscriptionLatestInvoice" })

const PendingUpdateObject = Schema.Struct({
  productId: Schema.String,
  quantity: Schema.Int,
  /** When it takes effect: the next renewal. */
  effectiveAt: Schema.Date
}).annotations({ identifier: "SubscriptionPendingUpdate" })

export const SubscriptionObject = Schema.Struct({
  object: Schema.Literal("subscription"),
  id: Schema.String,
  customerId: Schema.String,
  productId: Schema.String,
  /** The product's name when the current period started. */
  planName: Schema.String,
  quantity: Schema.Int,
  status: SubscriptionStatus,
  /** The recurring price snapshotted at creation and at each renewal. */
  price: PriceSnapshot,
  currentPeriodStart: Schema.Date,
  currentPeriodEnd: Schema.Date,
  /** Periods count from here (creation, or trial end). */
  billingCycleAnchor: Schema.Date,
  trialStart: Schema.NullOr(Schema.Date),
  trialEnd: Schema.NullOr(Schema.Date),
  cancelAtPeriodEnd: Schema.Boolean,
  canceledAt: Schema.NullOr(Schema.Date),
  endedAt: Schema.NullOr(Schema.Date),
  cancellationReason: Schema.NullOr(CancellationReason).annotations({
    description:
      "Why it was canceled: `requested_by_customer` (a shopper's DELETE or cancelAtPeriodEnd), `admin` (the " +
      "same by staff), `payment_failed` (dunning exhausted), `trial_ended` (no payment method at the trial's " +
      "end), `test_clock_deleted` (its customer's test clock was deleted), `customer_deleted` (its " +
      "customer was erased: canceled with nothing billed); null until canceled."
  }),
  pendingUpdate: Schema.NullOr(PendingUpdateObject),
  paymentMethod: Schema.NullOr(Schema.String),
  latestInvoice: Schema.NullOr(LatestInvoice),
  latestPaymentId: Schema.NullOr(Schema.String),
  /** The latest invoice's failed attempts (dunning); `nextRetryAt` the next automatic one. */
  renewalAttempts: Schema.Int,
  nextRetryAt: Schema.NullOr(Schema.Date),
  testClockId: Schema.NullOr(Schema.String),
  metadata: Metadata,
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "Subscription" })
export type SubscriptionObject = typeof SubscriptionObject.Type

export const invoiceObject = (i: InvoiceState): InvoiceObject => ({
  object: "invoice",
  id: i.invoiceId,
  subscriptionId: i.subscriptionId,
  customerId: i.customerId,
  billingReason: i.billingReason,
  periodStart: i.periodStart,
  periodEnd: i.periodEnd,
  lines: i.lines,
  subtotal: i.subtotal,
  total: i.total,
  currency: i.currency,
  status: i.status,
  paymentIntentId: i.paymentIntentId,
  paymentId: i.paymentId,
  attemptCount: i.attemptCount,
  nextPaymentAttempt: i.nextPaymentAttempt,
  failureCode: i.failureCode,
  failureMessage: i.failureMessage,
  createdAt: i.createdAt,
  updatedAt: i.updatedAt
})

export const subscriptionObject = (s: SubscriptionState): SubscriptionObject => {
  const latest = latestInvoiceOf(s)
  const collecting = latest !== undefined && latest.status === "open"
  return {
    object: "subscription",
    id: s.subscriptionId,
    customerId: s.customerId,
    productId: s.productId,
    planName: s.planName,
    quantity: s.quantity,
    status: s.status,
    price: s.price,
    currentPeriodStart: s.currentPeriodStart,
    currentPeriodEnd: s.currentPeriodEnd,
    billingCycleAnchor: s.anchor,
    trialStart: s.trialStart,
    trialEnd: s.trialEnd,
    cancelAtPeriodEnd: s.cancelAtPeriodEnd,
    canceledAt: s.canceledAt,
    endedAt: s.status === "canceled" ? s.canceledAt : null,
    cancellationReason: s.cancellationReason,
    pendingUpdate:
      s.pendingUpdate === null
        ? null
        : {
            productId: s.pendingUpdate.productId,
            quantity: s.pendingUpdate.quantity,
            effectiveAt: s.pendingUpdate.effectiveAt
          },
    paymentMethod: s.paymentMethod,
    latestInvoice:
      latest === undefined
        ? null
        : {
            id: latest.invoiceId,
            status: latest.status,
            total: latest.total,
            paymentIntentId: latest.paymentIntentId,
            paymentId: latest.paymentId,
            attemptCount: latest.attemptCount,
            nextPaymentAttempt: latest.nextPaymentAttempt,
            failureCode: latest.failureCode,
            failureMessage: latest.failureMessage
          },
    latestPaymentId: latest?.paymentId ?? latest?.lastFailedPaymentId ?? null,
    renewalAttempts: collecting ? latest.attemptCount : 0,
    nextRetryAt: collecting ? latest.nextPaymentAttempt : null,
    testClockId: s.testClockId,
    metadata: s.metadata,
    createdAt: s.createdAt,
    updatedAt: s.updatedAt
  }
}

const encodeSubscription = fastEncodeSync(SubscriptionObject)
const encodeInvoice = fastEncodeSync(InvoiceObject)

export const subscriptionSnapshot = (s: SubscriptionState): Readonly<Record<string, unknown>> =>
  encodeSubscription(subscriptionObject(s))

export const invoiceSnapshot = (i: InvoiceState): Readonly<Record<string, unknown>> =>
  encodeInvoice(invoiceObject(i))

/** The subscription aggregate, publishing these objects as its events' snapshots. */
export const SubscriptionDecider = makeSubscriptionDecider({
  subscription: subscriptionSnapshot,
  invoice: invoiceSnapshot
})
