/**
 * Payment events. One stream per payment intent holds the intent, the payments (charges) its
 * confirmations create and the refunds of those payments: every money movement of one intent is
 * decided against one state, so captures, cancels and refunds of it serialize on one stream version.
 *
 * Every processor call is bracketed by two events: `…_started` (the call is about to be made, with
 * the idempotency key it carries) and its outcome. Outcome events carry the totals they result in
 * (amount captured, refunded) so that evolving and projecting them never recomputes money.
 */
import { Schema } from "effect"
import { defineEvent, type EventOf, Secret } from "../eventstore/EventType.js"
import { Metadata } from "../kernel/Metadata.js"

export const CaptureMethod = Schema.Literal("automatic", "manual")
export type CaptureMethod = typeof CaptureMethod.Type

export const CancellationReason = Schema.Literal(
  "abandoned",
  "duplicate",
  "requested_by_customer",
  "fraudulent"
)
export type CancellationReason = typeof CancellationReason.Type

export const RefundReason = Schema.Literal("duplicate", "fraudulent", "requested_by_customer", "other")
export type RefundReason = typeof RefundReason.Type

/** What is kept of a card: never its number. */
export const CardDetails = Schema.Struct({
  brand: Schema.String,
  last4: Schema.String,
  expMonth: Schema.Int,
  expYear: Schema.Int
})
export type CardDetails = typeof CardDetails.Type

/** A payment method as stored: the processor's token and the card's details. */
export const PaymentMethod = Schema.Struct({ token: Schema.String, ...CardDetails.fields })
export type PaymentMethod = typeof PaymentMethod.Type

/**
 * What the customer must do before the payment can go on (3-D Secure): follow `url`
 * (`use_test_authentication`, `redirect_to_url`), or — `use_stripe_sdk`, the Stripe adapter — let
 * Stripe.js handle it (`stripe.handleNextAction({ clientSecret })`) with Stripe's client secret of
 * the processor's payment intent, which lets a browser complete that payment and nothing else.
 */
export const NextAction = Schema.Struct({
  type: Schema.Literal("use_test_authentication", "redirect_to_url", "use_stripe_sdk"),
  url: Schema.optional(Schema.String),
  clientSecret: Schema.optional(Schema.String)
})
export type NextAction = typeof NextAction.Type

const intent = { paymentIntentId: Schema.String }
const call = { paymentId: Schema.String, idempotencyKey: Schema.String }

export const PaymentIntentCreated = defineEvent("payment_intent.created", {
  schema: Schema.Struct({
    ...intent,
    amount: Schema.Int,
    currency: Schema.String,
    captureMethod: CaptureMethod,
    customerId: Schema.NullOr(Schema.String),
    description: Schema.NullOr(Schema.String),
    metadata: Metadata,
    paymentMethod: Schema.NullOr(PaymentMethod),
    /** SHA-256 of the client secret, which is shown once: what a browser's confirm is checked against. */
    clientSecretHash: Secret(Schema.String),
    /** The processor the intent's money moves through (`test`). */
    processor: Schema.String,
    /**
     * What the intent's processor keys start with, when not its id: an intent created by a request
     * with an `Idempotency-Key` takes a prefix derived from that key (and the requester), so a retry
     * of a request whose transaction rolled back — a new intent id — asks the processor with the
     * same keys as the first try, and is not charged twice.
     */
    callKeyPrefix: Schema.optional(Schema.String)
  })
})

/** A confirmation: a payment (`pending`) and the authorization call about to be made for it. */
export const PaymentAttemptStarted = defineEvent("payment_intent.attempt_started", {
  schema: Schema.Struct({
    ...intent,
    ...call,
    attempt: Schema.Int,
    paymentMethod: PaymentMethod,
    /** Capture with the authorization (`captureMethod: automatic`). */
    capture: Schema.Boolean,
    /**
     * The payment left waiting for the customer's authentication (`requires_action`) when a new
     * payment method was confirmed instead, as Stripe allows: it is canceled with this event.
     */
    abandonedPaymentId: Schema.optional(Schema.String)
  })
})

/** The processor authorized the payment (and captured it, when `captured`). */
export const PaymentAuthorized = defineEvent("payment_intent.payment_authorized", {
  schema: Schema.Struct({
    ...intent,
    ...call,
    processorReference: Schema.String,
    captured: Schema.Boolean,
    amount: Schema.Int
  })
})

/** The processor wants the customer to authenticate (3-D Secure) first. */
export const PaymentActionRequired = defineEvent("payment_intent.action_required", {
  schema: Schema.Struct({ ...intent, ...call, processorReference: Schema.String, nextAction: NextAction })
})

/** The customer's authentication result, about to be passed on to the processor. */
export const AuthenticationStarted = defineEvent("payment_intent.authentication_started", {
  schema: Schema.Struct({ ...intent, ...call, outcome: Schema.Literal("approve", "fail") })
})

/** A declined attempt: the intent wants another payment method (Stripe: not a terminal failure). */
export const PaymentFailed = defineEvent("payment_intent.payment_failed", {
  schema: Schema.Struct({
    ...intent,
    ...call,
    code: Schema.String,
    declineCode: Schema.NullOr(Schema.String),
    message: Schema.String
  })
})

export const CaptureStarted = defineEvent("payment_intent.capture_started", {
  schema: Schema.Struct({ ...intent, ...call, amount: Schema.Int })
})

export const PaymentCaptured = defineEvent("payment_intent.payment_captured", {
  schema: Schema.Struct({ ...intent, ...call, amount: Schema.Int })
})

/** Canceling an authorized payment: the authorization is about to be voided. */
export const VoidStarted = defineEvent("payment_intent.void_started", {
  schema: Schema.Struct({ ...intent, ...call, cancellationReason: Schema.NullOr(CancellationReason) })
})

/** Canceled; `paymentId` is the payment canceled with it (voided or never completed), if any. */
export const PaymentIntentCanceled = defineEvent("payment_intent.canceled", {
  schema: Schema.Struct({
    ...intent,
    paymentId: Schema.NullOr(Schema.String),
    idempotencyKey: Schema.NullOr(Schema.String),
    cancellationReason: Schema.NullOr(CancellationReason)
  })
})

/** A capture or void the processor refused: the payment stays as it was. */
export const OperationFailed = defineEvent("payment_intent.operation_failed", {
  schema: Schema.Struct({ ...intent, ...call, code: Schema.String, message: Schema.String })
})

/** A refund of part or all of a captured payment, its amount reserved until the processor answers. */
export const RefundStarted = defineEvent("payment_intent.refund_started", {
  schema: Schema.Struct({
    ...intent,
    ...call,
    refundId: Schema.String,
    amount: Schema.Int,
    reason: Schema.NullOr(RefundReason)
  })
})

export const RefundSucceeded = defineEvent("payment_intent.refund_succeeded", {
  schema: Schema.Struct({
    ...intent,
    ...call,
    refundId: Schema.String,
    processorReference: Schema.String,
    /** The payment's refunded total after this refund. */
    amountRefunded: Schema.Int
  })
})

/** The processor refused the refund: its amount is refundable again. */
export const RefundFailed = defineEvent("payment_intent.refund_failed", {
  schema: Schema.Struct({ ...intent, ...call, refundId: Schema.String, failureReason: Schema.String })
})

export const paymentEventTypes = [
  PaymentIntentCreated,
  PaymentAttemptStarted,
  PaymentAuthorized,
  PaymentActionRequired,
  AuthenticationStarted,
  PaymentFailed,
  CaptureStarted,
  PaymentCaptured,
  VoidStarted,
  PaymentIntentCanceled,
  OperationFailed,
  RefundStarted,
  RefundSucceeded,
  RefundFailed
] as const

export type PaymentEvent = EventOf<(typeof paymentEventTypes)[number]>
