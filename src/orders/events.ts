/**
 * Order events: one stream per order (`order-<id>`) holds the placement (an immutable snapshot of
 * the checkout's lines and prices), its fulfilments, its cancellation and its refunds, so every
 * quantity and amount of one order is decided against one state and serialized by its stream
 * version.
 *
 * Personal data (the email and the shipping address) is encrypted under the customer's key (the
 * order's own id for a guest order): erasing the customer shreds it in the log, while ids, amounts,
 * line items and statuses stay readable (spec §4.2 rule 1).
 *
 * Money movements are bracketed like the payments context's processor calls: `…_started` (the
 * order's intent, recorded before the payment call, with the key the call carries) then the outcome.
 */
import { Schema } from "effect"
import { defineEvent, type EventOf, Personal } from "../eventstore/EventType.js"
import { Metadata } from "../kernel/Metadata.js"

/** A shipping address as the checkout took it (the fields of a customer's address). */
export const ShippingAddress = Schema.Struct({
  label: Schema.NullOr(Schema.String),
  line1: Schema.String,
  city: Schema.String,
  state: Schema.NullOr(Schema.String),
  postalCode: Schema.NullOr(Schema.String),
  country: Schema.String
}).annotations({ identifier: "ShippingAddress" })
export type ShippingAddress = typeof ShippingAddress.Type

/** One line as placed: the product's name, SKU and price at checkout time, never updated. */
export const PlacedLine = Schema.Struct({
  lineItemId: Schema.String,
  productId: Schema.String,
  name: Schema.String,
  sku: Schema.NullOr(Schema.String),
  quantity: Schema.Int,
  unitAmount: Schema.Int,
  amountTotal: Schema.Int
})
export type PlacedLine = typeof PlacedLine.Type

/** What the payment came to when the order was placed. */
export const PlacedPayment = Schema.Literal("authorized", "captured", "not_required")
export type PlacedPayment = typeof PlacedPayment.Type

export const OrderRefundReason = Schema.Literal("duplicate", "fraudulent", "requested_by_customer", "other")
export type OrderRefundReason = typeof OrderRefundReason.Type

/** Units of one line item. */
export const LineQuantity = Schema.Struct({ lineItemId: Schema.String, quantity: Schema.Int })
export type LineQuantity = typeof LineQuantity.Type

const order = { orderId: Schema.String }

export const OrderPlaced = defineEvent("order.placed", {
  schema: Schema.Struct({
    ...order,
    displayId: Schema.String,
    checkoutId: Schema.NullOr(Schema.String),
    customerId: Schema.NullOr(Schema.String),
    email: Personal(Schema.String),
    currency: Schema.String,
    lineItems: Schema.Array(PlacedLine),
    subtotal: Schema.Int,
    total: Schema.Int,
    shippingAddress: Personal(Schema.NullOr(ShippingAddress)),
    paymentIntentId: Schema.NullOr(Schema.String),
    paymentId: Schema.NullOr(Schema.String),
    payment: PlacedPayment,
    amountCaptured: Schema.Int,
    // Personal as the checkout's it is copied from (notes, gift messages): absent in events written
    // before it was sealed, which decode as they are.
    metadata: Personal(Metadata)
  }),
  // The customer's key: erasing the customer shreds their orders' personal fields too.
  subject: (d) => d.customerId ?? d.orderId
})

/** A fulfilment (a parcel): the units of each line it ships, and its tracking. */
export const FulfillmentCreated = defineEvent("order.fulfillment_created", {
  schema: Schema.Struct({
    ...order,
    fulfillmentId: Schema.String,
    items: Schema.Array(LineQuantity),
    trackingNumber: Schema.NullOr(Schema.String),
    trackingUrl: Schema.NullOr(Schema.String),
    carrier: Schema.NullOr(Schema.String)
  })
})

export const FulfillmentDelivered = defineEvent("order.fulfillment_delivered", {
  schema: Schema.Struct({ ...order, fulfillmentId: Schema.String })
})

/**
 * Cancelled before anything shipped: the stock hold is released in the same transaction; what was
 * paid goes back through the refund (or void) started with it.
 */
export const OrderCancelled = defineEvent("order.cancelled", {
  schema: Schema.Struct({ ...order, reason: Schema.NullOr(Schema.String) })
})

/**
 * A refund the order asked for, recorded before the payment is asked (with `key`, the idempotency
 * key of that call): its amount counts against what is refundable from now on, so concurrent
 * refunds never exceed what was captured. `void` when the payment was only authorized (the
 * authorization is cancelled instead).
 */
export const OrderRefundStarted = defineEvent("order.refund_started", {
  schema: Schema.Struct({
    ...order,
    refundId: Schema.String,
    key: Schema.String,
    amount: Schema.Int,
    reason: Schema.NullOr(OrderRefundReason),
    items: Schema.Array(LineQuantity),
    restock: Schema.Boolean,
    void: Schema.Boolean,
    /**
     * A cancellation's refund: the order is cancelled (with `cancellationReason`) when it succeeds,
     * and stays as it was if the payment refuses it. Absent in events written before (their order
     * was cancelled with the refund's start).
     */
    cancels: Schema.optionalWith(Schema.Boolean, { default: () => false, exact: true }),
    cancellationReason: Schema.optionalWith(Schema.NullOr(Schema.String), {
      default: () => null,
      exact: true
    })
  })
})

export const OrderRefundSucceeded = defineEvent("order.refund_succeeded", {
  schema: Schema.Struct({
    ...order,
    refundId: Schema.String,
    /** The payment's refund (`re_…`), when the payment made one (null for a void). */
    paymentRefundId: Schema.NullOr(Schema.String),
    /** Money given back (0 for a void), and whose: what customer totals follow. */
    amount: Schema.Int,
    customerId: Schema.NullOr(Schema.String)
  })
})

/** The payment refused: the amount is refundable again. */
export const OrderRefundFailed = defineEvent("order.refund_failed", {
  schema: Schema.Struct({ ...order, refundId: Schema.String, failureReason: Schema.String })
})

/**
 * A refund made on the order's payment directly (`POST /v1/payments/:id/refund`, not through the
 * order), recorded on the order when payments reported it: money given back by amount, no units.
 * `refundId` is the order's (derived from the payment's refund, so recording it twice is a no-op).
 */
export const OrderPaymentRefunded = defineEvent("order.payment_refunded", {
  schema: Schema.Struct({
    ...order,
    refundId: Schema.String,
    paymentRefundId: Schema.String,
    amount: Schema.Int,
    reason: Schema.NullOr(OrderRefundReason),
    customerId: Schema.NullOr(Schema.String)
  })
})

/** A manual-capture order's payment was captured later: the order is paid (confirmed). */
export const OrderPaymentCaptured = defineEvent("order.payment_captured", {
  schema: Schema.Struct({ ...order, amountCaptured: Schema.Int, customerId: Schema.NullOr(Schema.String) })
})

export const orderEventTypes = [
  OrderPlaced,
  FulfillmentCreated,
  FulfillmentDelivered,
  OrderCancelled,
  OrderRefundStarted,
  OrderRefundSucceeded,
  OrderRefundFailed,
  OrderPaymentCaptured,
  OrderPaymentRefunded
] as const

export type OrderEvent = EventOf<(typeof orderEventTypes)[number]>
