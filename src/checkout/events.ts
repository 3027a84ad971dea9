/**
 * Checkout events: one stream per checkout (`checkout-<id>`). The buyer's email, shipping address
 * and metadata are personal data, encrypted under the customer's key (a guest checkout: its own id),
 * so erasing the customer shreds them in the log too. Ids, amounts and statuses stay readable.
 */
import { Schema } from "effect"
import { defineEvent, type EventOf, Personal } from "../eventstore/EventType.js"
import { Metadata } from "../kernel/Metadata.js"
import { ShippingAddress } from "../orders/index.js"
import { CaptureMethod } from "../payments/index.js"

export const CHECKOUT_STATUSES = ["open", "processing", "complete", "expired"] as const
export const CheckoutStatus = Schema.Literal(...CHECKOUT_STATUSES)
export type CheckoutStatus = typeof CheckoutStatus.Type

/** Where the order ships to: the orders context's schema (the fields of a customer's address). */
export { ShippingAddress }

/** A line as checkout snapshots it at creation: the product's name, SKU and price then. */
export const CheckoutLine = Schema.Struct({
  productId: Schema.String,
  name: Schema.String,
  sku: Schema.NullOr(Schema.String),
  quantity: Schema.Int,
  unitAmount: Schema.Int,
  amountTotal: Schema.Int,
  /** The product's `price.version` the snapshot was taken at. */
  priceVersion: Schema.Int
})
export type CheckoutLine = typeof CheckoutLine.Type

export const CheckoutCreated = defineEvent("checkout.created", {
  schema: Schema.Struct({
    checkoutId: Schema.String,
    customerId: Schema.NullOr(Schema.String),
    email: Personal(Schema.String),
    shippingAddress: Personal(Schema.NullOr(ShippingAddress)),
    currency: Schema.String,
    lineItems: Schema.Array(CheckoutLine),
    subtotal: Schema.Int,
    total: Schema.Int,
    captureMethod: CaptureMethod,
    /** Null when the total is 0 (nothing to pay: no intent, no processor). */
    paymentIntentId: Schema.NullOr(Schema.String),
    expiresAt: Schema.Date,
    metadata: Personal(Metadata)
  }),
  subject: (d) => d.customerId ?? d.checkoutId
})

/** Its payment waits for the customer (3-D Secure). */
export const CheckoutProcessing = defineEvent("checkout.processing", {
  schema: Schema.Struct({ checkoutId: Schema.String, paymentIntentId: Schema.String })
})

/** The pending payment failed (3-D Secure failed, or a decline): open again, retryable until it expires. */
export const CheckoutReopened = defineEvent("checkout.reopened", {
  schema: Schema.Struct({ checkoutId: Schema.String, paymentIntentId: Schema.String })
})

/** Paid (authorized or captured) or free: its order is placed in the same transaction. */
export const CheckoutCompleted = defineEvent("checkout.completed", {
  schema: Schema.Struct({
    checkoutId: Schema.String,
    orderId: Schema.String,
    paymentIntentId: Schema.NullOr(Schema.String),
    paymentStatus: Schema.Literal("paid", "no_payment_required")
  })
})

/** Expired (due time, or `POST /v1/checkouts/:id/expire`): its stock is released in the same transaction. */
export const CheckoutExpired = defineEvent("checkout.expired", {
  schema: Schema.Struct({ checkoutId: Schema.String, paymentIntentId: Schema.NullOr(Schema.String) })
})

export const checkoutEventTypes = [
  CheckoutCreated,
  CheckoutProcessing,
  CheckoutReopened,
  CheckoutCompleted,
  CheckoutExpired
] as const

export type CheckoutEvent = EventOf<(typeof checkoutEventTypes)[number]>
