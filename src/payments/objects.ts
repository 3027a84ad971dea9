/**
 * The payments context's objects as clients see them (`/v1` responses and public event snapshots
 * alike, research commerce-design §1.4–§1.6), built from one record shape that both the aggregate's
 * state and the read model's rows have: a snapshot in an event is the object a `GET` shows.
 */
import { Schema } from "effect"
import { fastEncodeSync } from "../base/FastEncode.js"
import { Metadata } from "../kernel/Metadata.js"
import { CancellationReason, CaptureMethod, NextAction, PaymentMethod, RefundReason } from "./events.js"

export const INTENT_STATUSES = [
  "requires_payment_method",
  "requires_confirmation",
  "requires_action",
  "processing",
  "requires_capture",
  "succeeded",
  "canceled"
] as const
export const IntentStatus = Schema.Literal(...INTENT_STATUSES)
export type IntentStatus = typeof IntentStatus.Type

export const PAYMENT_STATUSES = [
  "pending",
  "authorized",
  "succeeded",
  "failed",
  "canceled",
  "partially_refunded",
  "refunded"
] as const
export const PaymentStatus = Schema.Literal(...PAYMENT_STATUSES)
export type PaymentStatus = typeof PaymentStatus.Type

export const RefundStatus = Schema.Literal("pending", "succeeded", "failed")
export type RefundStatus = typeof RefundStatus.Type

/** The error of an intent's last failed attempt (Stripe's `last_payment_error`). */
export const LastPaymentError = Schema.Struct({
  type: Schema.Literal("card_error"),
  code: Schema.String,
  declineCode: Schema.NullOr(Schema.String),
  message: Schema.String,
  paymentMethod: Schema.NullOr(PaymentMethod)
}).annotations({ identifier: "LastPaymentError" })
export type LastPaymentError = typeof LastPaymentError.Type

export const PaymentObject = Schema.Struct({
  object: Schema.Literal("payment"),
  id: Schema.String,
  paymentIntentId: Schema.String,
  customerId: Schema.NullOr(Schema.String),
  amount: Schema.Int,
  currency: Schema.String,
  status: PaymentStatus,
  captureMethod: CaptureMethod,
  amountCaptured: Schema.Int,
  amountRefunded: Schema.Int,
  /** The token and the card's brand, last four digits and expiry: never its number. */
  paymentMethod: PaymentMethod,
  failureCode: Schema.NullOr(Schema.String),
  declineCode: Schema.NullOr(Schema.String),
  failureMessage: Schema.NullOr(Schema.String),
  processor: Schema.String,
  processorReference: Schema.NullOr(Schema.String),
  description: Schema.NullOr(Schema.String),
  metadata: Metadata,
  /** False for payments through the test processor. */
  livemode: Schema.Boolean,
  authorizedAt: Schema.NullOr(Schema.Date),
  capturedAt: Schema.NullOr(Schema.Date),
  canceledAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "Payment" })
export type PaymentObject = typeof PaymentObject.Type

export const PaymentIntentObject = Schema.Struct({
  object: Schema.Literal("payment_intent"),
  id: Schema.String,
  amount: Schema.Int,
  currency: Schema.String,
  status: IntentStatus,
  captureMethod: CaptureMethod,
  customerId: Schema.NullOr(Schema.String),
  description: Schema.NullOr(Schema.String),
  metadata: Metadata,
  paymentMethod: Schema.NullOr(PaymentMethod),
  lastPaymentError: Schema.NullOr(LastPaymentError),
  nextAction: Schema.NullOr(NextAction),
  cancellationReason: Schema.NullOr(CancellationReason),
  /** The payment of the latest confirmation (Stripe's `latest_charge`). */
  latestPaymentId: Schema.NullOr(Schema.String),
  amountCapturable: Schema.Int,
  amountReceived: Schema.Int,
  livemode: Schema.Boolean,
  canceledAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "PaymentIntent" })
export type PaymentIntentObject = typeof PaymentIntentObject.Type

export const RefundObject = Schema.Struct({
  object: Schema.Literal("refund"),
  id: Schema.String,
  paymentId: Schema.String,
  paymentIntentId: Schema.String,
  amount: Schema.Int,
  currency: Schema.String,
  status: RefundStatus,
  reason: Schema.NullOr(RefundReason),
  failureReason: Schema.NullOr(Schema.String),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "Refund" })
export type RefundObject = typeof RefundObject.Type

/** What `payment.refunded` carries: the payment after the refund, and the refund. */
export const PaymentRefundedSnapshot = Schema.Struct({ ...PaymentObject.fields, refund: RefundObject })

/**
 * Stripe's `livemode`: the test processor's payments are not live, nor those made with a Stripe test
 * key (processor `stripe_test`, stripeProcessor.ts).
 */
export const isLive = (processor: string) => processor !== "test" && !processor.endsWith("_test")

export const encodePayment = fastEncodeSync(PaymentObject)
export const encodeRefunded = fastEncodeSync(PaymentRefundedSnapshot)
