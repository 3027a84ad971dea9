/**
 * The order as clients see it (`/v1/orders` responses and the public events' snapshots alike,
 * research commerce-design §1.3): built from the aggregate's state, which the read model stores
 * whole, so a snapshot in an event is exactly what a `GET` showed at that version.
 */
import { Schema } from "effect"
import { fastEncodeSync } from "../base/FastEncode.js"
import { Metadata } from "../kernel/Metadata.js"
import {
  amountRefundable,
  amountRefunded,
  FULFILLMENT_STATUSES,
  fulfillmentStatusOf,
  makeOrderDecider,
  ORDER_STATUSES,
  type OrderState,
  PAYMENT_STATUSES,
  paymentStatusOf,
  statusOf
} from "./decider.js"
import { OrderRefundReason, ShippingAddress } from "./events.js"

export const OrderLineItem = Schema.Struct({
  object: Schema.Literal("line_item"),
  id: Schema.String,
  productId: Schema.String,
  /** Name, SKU and price as they were at checkout: never updated. */
  name: Schema.String,
  sku: Schema.NullOr(Schema.String),
  quantity: Schema.Int,
  unitAmount: Schema.Int,
  amountTotal: Schema.Int,
  fulfilledQuantity: Schema.Int,
  refundedQuantity: Schema.Int
}).annotations({ identifier: "OrderLineItem" })

const LineQuantityObject = Schema.Struct({ lineItemId: Schema.String, quantity: Schema.Int })

export const Fulfillment = Schema.Struct({
  object: Schema.Literal("fulfillment"),
  id: Schema.String,
  /** `shipped` when created with tracking, else `pending`; `delivered` once marked so. */
  status: Schema.Literal("pending", "shipped", "delivered"),
  items: Schema.Array(LineQuantityObject),
  trackingNumber: Schema.NullOr(Schema.String),
  trackingUrl: Schema.NullOr(Schema.String),
  carrier: Schema.NullOr(Schema.String),
  shippedAt: Schema.NullOr(Schema.Date),
  deliveredAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date
}).annotations({ identifier: "Fulfillment" })

export const OrderRefund = Schema.Struct({
  object: Schema.Literal("order_refund"),
  id: Schema.String,
  amount: Schema.Int,
  /** `pending` until the payment answered. A void (cancelling an authorization) refunds no money. */
  status: Schema.Literal("pending", "succeeded", "failed"),
  reason: Schema.NullOr(OrderRefundReason),
  items: Schema.Array(LineQuantityObject),
  restock: Schema.Boolean,
  void: Schema.Boolean,
  /** The payment's refund (`re_…`). */
  paymentRefundId: Schema.NullOr(Schema.String),
  failureReason: Schema.NullOr(Schema.String),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "OrderRefund" })

export const OrderObject = Schema.Struct({
  object: Schema.Literal("order"),
  id: Schema.String,
  /** The store's human order number: "1001", "1002", … without gaps. */
  displayId: Schema.String,
  status: Schema.Literal(...ORDER_STATUSES),
  paymentStatus: Schema.Literal(...PAYMENT_STATUSES),
  fulfillmentStatus: Schema.Literal(...FULFILLMENT_STATUSES),
  /** null once the customer was erased (the order stays, anonymized). */
  email: Schema.NullOr(Schema.String),
  customerId: Schema.NullOr(Schema.String),
  checkoutId: Schema.NullOr(Schema.String),
  currency: Schema.String,
  subtotal: Schema.Int,
  total: Schema.Int,
  /** Captured from the payment. */
  amountPaid: Schema.Int,
  amountRefunded: Schema.Int,
  /** amountPaid − amountRefunded − refunds still pending. */
  amountRefundable: Schema.Int,
  lineItems: Schema.Array(OrderLineItem),
  fulfillments: Schema.Array(Fulfillment),
  refunds: Schema.Array(OrderRefund),
  shippingAddress: Schema.NullOr(ShippingAddress),
  paymentIntentId: Schema.NullOr(Schema.String),
  paymentId: Schema.NullOr(Schema.String),
  metadata: Metadata,
  cancelledAt: Schema.NullOr(Schema.Date),
  cancellationReason: Schema.NullOr(Schema.String),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "Order" })
export type OrderObject = typeof OrderObject.Type

export const orderObject = (s: OrderState): OrderObject => ({
  object: "order",
  id: s.orderId,
  displayId: s.displayId,
  status: statusOf(s),
  paymentStatus: paymentStatusOf(s),
  fulfillmentStatus: fulfillmentStatusOf(s),
  email: s.email,
  customerId: s.customerId,
  checkoutId: s.checkoutId,
  currency: s.currency,
  subtotal: s.subtotal,
  total: s.total,
  amountPaid: s.amountPaid,
  amountRefunded: amountRefunded(s),
  amountRefundable: amountRefundable(s),
  lineItems: s.lineItems.map((l) => ({ object: "line_item", ...l })),
  fulfillments: s.fulfillments.map((f) => ({ object: "fulfillment", ...f })),
  refunds: s.refunds.map(({ key: _key, ...r }) => ({ object: "order_refund", ...r })),
  shippingAddress: s.shippingAddress,
  paymentIntentId: s.paymentIntentId,
  paymentId: s.paymentId,
  metadata: s.metadata,
  cancelledAt: s.cancelledAt,
  cancellationReason: s.cancellationReason,
  createdAt: s.createdAt,
  updatedAt: s.updatedAt
})

const encodeOrder = fastEncodeSync(OrderObject)

/** The JSON snapshot public events carry (dates as ISO strings). */
export const orderSnapshot = (s: OrderState): Readonly<Record<string, unknown>> => encodeOrder(orderObject(s))

/** The order aggregate, publishing the order object as its events' snapshots. */
export const OrderDecider = makeOrderDecider(orderSnapshot)
