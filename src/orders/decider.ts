/**
 * The order aggregate (research commerce-design §1.3, §2.3–§2.4; COMMERCE decisions 3 and 4). Pure:
 * tested without a database (test/orders/decider.test.ts). Three axes are kept apart (research §6
 * row 9): `status` (the lifecycle), `paymentStatus` (the money) and `fulfillmentStatus` (the goods),
 * each derived from the recorded facts (units shipped and refunded per line, amounts captured and
 * refunded, the cancellation) rather than stored, so they can never disagree with each other.
 *
 * Quantities: per line, `fulfilledQuantity + refundedQuantity ≤ quantity`. A line refund (`items`)
 * refunds units that will not ship (they leave the order's stock hold; `restock` puts them back on
 * the shelf); goods that already shipped are refunded by amount. Amounts: refunds in flight count
 * against what is refundable from the moment they start, so `amountRefunded + pending ≤ amountPaid`
 * however many refunds race (each decides on the latest stream version).
 */
import { Data, Effect, Schema } from "effect"
import { isShredded, revealOr } from "../eventstore/EventType.js"
import { defineDecider, type Pending, type PublicEventDraft } from "../kernel/Decider.js"
import { Metadata } from "../kernel/Metadata.js"
import {
  FulfillmentCreated,
  FulfillmentDelivered,
  type LineQuantity,
  OrderCancelled,
  type OrderEvent,
  OrderPaymentCaptured,
  OrderPaymentRefunded,
  OrderPlaced,
  OrderRefundFailed,
  OrderRefundReason,
  OrderRefundStarted,
  OrderRefundSucceeded,
  orderEventTypes,
  PlacedPayment,
  ShippingAddress
} from "./events.js"

export const orderStream = (orderId: string) => `order-${orderId}`

// --- Statuses ---------------------------------------------------------------------------------------

export const ORDER_STATUSES = [
  "pending",
  "confirmed",
  "partially_fulfilled",
  "fulfilled",
  "cancelled",
  "refunded"
] as const
export type OrderStatus = (typeof ORDER_STATUSES)[number]

export const PAYMENT_STATUSES = [
  "authorized",
  "paid",
  "partially_refunded",
  "refunded",
  "voided",
  "no_payment_required"
] as const
export type OrderPaymentStatus = (typeof PAYMENT_STATUSES)[number]

export const FULFILLMENT_STATUSES = ["unfulfilled", "partially_fulfilled", "fulfilled", "delivered"] as const
export type FulfillmentStatus = (typeof FULFILLMENT_STATUSES)[number]

// --- State ------------------------------------------------------------------------------------------

const LineState = Schema.Struct({
  id: Schema.String,
  productId: Schema.String,
  name: Schema.String,
  sku: Schema.NullOr(Schema.String),
  quantity: Schema.Int,
  unitAmount: Schema.Int,
  amountTotal: Schema.Int,
  fulfilledQuantity: Schema.Int,
  refundedQuantity: Schema.Int
})
export type LineState = typeof LineState.Type

const FulfillmentState = Schema.Struct({
  id: Schema.String,
  status: Schema.Literal("pending", "shipped", "delivered"),
  items: Schema.Array(Schema.Struct({ lineItemId: Schema.String, quantity: Schema.Int })),
  trackingNumber: Schema.NullOr(Schema.String),
  trackingUrl: Schema.NullOr(Schema.String),
  carrier: Schema.NullOr(Schema.String),
  shippedAt: Schema.NullOr(Schema.Date),
  deliveredAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date
})
export type FulfillmentState = typeof FulfillmentState.Type

const RefundState = Schema.Struct({
  id: Schema.String,
  key: Schema.String,
  amount: Schema.Int,
  status: Schema.Literal("pending", "succeeded", "failed"),
  reason: Schema.NullOr(OrderRefundReason),
  items: Schema.Array(Schema.Struct({ lineItemId: Schema.String, quantity: Schema.Int })),
  restock: Schema.Boolean,
  void: Schema.Boolean,
  /** A cancellation's refund: the order is cancelled when it succeeds (`cancellationReason`). */
  cancels: Schema.optionalWith(Schema.Boolean, { default: () => false, exact: true }),
  cancellationReason: Schema.optionalWith(Schema.NullOr(Schema.String), { default: () => null, exact: true }),
  paymentRefundId: Schema.NullOr(Schema.String),
  failureReason: Schema.NullOr(Schema.String),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
})
export type RefundState = typeof RefundState.Type

/** The whole state, as the read model stores it (one jsonb per order: what every read decodes). */
export const OrderStateSchema = Schema.Struct({
  exists: Schema.Boolean,
  orderId: Schema.String,
  displayId: Schema.String,
  checkoutId: Schema.NullOr(Schema.String),
  customerId: Schema.NullOr(Schema.String),
  /** null once the customer was erased (the log holds it shredded). */
  email: Schema.NullOr(Schema.String),
  currency: Schema.String,
  lineItems: Schema.Array(LineState),
  subtotal: Schema.Int,
  total: Schema.Int,
  shippingAddress: Schema.NullOr(ShippingAddress),
  paymentIntentId: Schema.NullOr(Schema.String),
  paymentId: Schema.NullOr(Schema.String),
  payment: PlacedPayment,
  amountPaid: Schema.Int,
  fulfillments: Schema.Array(FulfillmentState),
  refunds: Schema.Array(RefundState),
  metadata: Metadata,
  cancelledAt: Schema.NullOr(Schema.Date),
  cancellationReason: Schema.NullOr(Schema.String),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
})
export type OrderState = typeof OrderStateSchema.Type

export const initialOrderState: OrderState = {
  exists: false,
  orderId: "",
  displayId: "",
  checkoutId: null,
  customerId: null,
  email: null,
  currency: "USD",
  lineItems: [],
  subtotal: 0,
  total: 0,
  shippingAddress: null,
  paymentIntentId: null,
  paymentId: null,
  payment: "not_required",
  amountPaid: 0,
  fulfillments: [],
  refunds: [],
  metadata: {},
  cancelledAt: null,
  cancellationReason: null,
  createdAt: new Date(0),
  updatedAt: new Date(0)
}

// --- Derived amounts and statuses -------------------------------------------------------------------

export const amountRefunded = (s: OrderState) =>
  s.refunds.reduce((sum, r) => (r.status === "succeeded" && !r.void ? sum + r.amount : sum), 0)

export const amountRefundPending = (s: OrderState) =>
  s.refunds.reduce((sum, r) => (r.status === "pending" && !r.void ? sum + r.amount : sum), 0)

/** What may still be refunded: captured, less refunded, less refunds in flight. */
export const amountRefundable = (s: OrderState) =>
  Math.max(0, s.amountPaid - amountRefunded(s) - amountRefundPending(s))

/** Units of a line that may still ship. */
export const remainingOf = (l: LineState) => l.quantity - l.fulfilledQuantity - l.refundedQuantity

const anyShipped = (s: OrderState) => s.lineItems.some((l) => l.fulfilledQuantity > 0)

/** A cancellation waiting for its refund: nothing ships, nothing else cancels meanwhile. */
export const cancellationPending = (s: OrderState) =>
  s.refunds.some((r) => r.cancels && r.status === "pending")

const voided = (s: OrderState) => s.refunds.some((r) => r.void && r.status === "succeeded")
const voidInFlight = (s: OrderState) => s.refunds.some((r) => r.void && r.status === "pending")

export const paymentStatusOf = (s: OrderState): OrderPaymentStatus => {
  if (s.payment === "not_required") return "no_payment_required"
  if (s.amountPaid === 0) return voided(s) ? "voided" : "authorized"
  const refunded = amountRefunded(s)
  if (refunded === 0) return "paid"
  return refunded >= s.amountPaid ? "refunded" : "partially_refunded"
}

/** Units of a line in refunds not yet answered: they cannot ship, but are not refunded yet either. */
const pendingRefundUnits = (s: OrderState, lineId: string) =>
  s.refunds.reduce(
    (n, r) =>
      r.status !== "pending"
        ? n
        : n + r.items.reduce((m, i) => (i.lineItemId === lineId ? m + i.quantity : m), 0),
    0
  )

export const fulfillmentStatusOf = (s: OrderState): FulfillmentStatus => {
  const shipped = s.lineItems.reduce((n, l) => n + l.fulfilledQuantity, 0)
  if (shipped === 0) return "unfulfilled"
  // A line refund still pending may be refused: until it succeeds its units count as not shipped.
  if (s.lineItems.some((l) => remainingOf(l) + pendingRefundUnits(s, l.id) > 0)) return "partially_fulfilled"
  return s.fulfillments.every((f) => f.status === "delivered") ? "delivered" : "fulfilled"
}

export const statusOf = (s: OrderState): OrderStatus => {
  if (s.cancelledAt !== null) return "cancelled"
  // All paid is back: after something shipped that is `refunded`; with nothing shipped the order is
  // cancelled (its `order.cancelled` follows in the same change).
  if (paymentStatusOf(s) === "refunded") return anyShipped(s) ? "refunded" : "cancelled"
  if (s.payment === "authorized" && s.amountPaid === 0) return "pending"
  switch (fulfillmentStatusOf(s)) {
    case "unfulfilled":
      return "confirmed"
    case "partially_fulfilled":
      return "partially_fulfilled"
    default:
      return "fulfilled"
  }
}

/** Cancelled, or refunded in full: nothing more will ship, so no stock stays held for it. */
export const shipsNothingMore = (s: OrderState) => {
  const status = statusOf(s)
  return status === "cancelled" || status === "refunded"
}

// --- Domain errors ----------------------------------------------------------------------------------

export class OrderNotFound extends Data.TaggedError("OrderNotFound")<{ readonly orderId: string }> {}

/** Fulfilment refused in this state (cancelled, refunded, unpaid, nothing left to ship). */
export class OrderNotFulfillable extends Data.TaggedError("OrderNotFulfillable")<{
  readonly status: OrderStatus
  readonly reason: string
}> {}

/** A line asked for more units than remain to ship (`index`: its place in the request's items). */
export class FulfillmentQuantityExceeded extends Data.TaggedError("FulfillmentQuantityExceeded")<{
  readonly index: number
  readonly lineItemId: string
  readonly requested: number
  readonly remaining: number
}> {}

/** An item names no line of the order (`index`: its place in the request's items). */
export class UnknownLineItem extends Data.TaggedError("UnknownLineItem")<{
  readonly index: number
  readonly reference: string
}> {}

export class FulfillmentNotFound extends Data.TaggedError("FulfillmentNotFound")<{
  readonly fulfillmentId: string
}> {}

export class OrderNotCancellable extends Data.TaggedError("OrderNotCancellable")<{
  readonly status: OrderStatus
  readonly reason: string
}> {}

export class OrderNotRefundable extends Data.TaggedError("OrderNotRefundable")<{
  readonly status: OrderStatus
  readonly reason: string
}> {}

/** More than remains refundable (`field`: `amount`, or `items[i].quantity`). */
export class RefundAmountTooLarge extends Data.TaggedError("RefundAmountTooLarge")<{
  readonly field: string
  readonly requested: number
  readonly refundable: number
}> {}

export type OrderError =
  | OrderNotFound
  | OrderNotFulfillable
  | FulfillmentQuantityExceeded
  | UnknownLineItem
  | FulfillmentNotFound
  | OrderNotCancellable
  | OrderNotRefundable
  | RefundAmountTooLarge

const ORDER_ERROR_TAGS: ReadonlySet<string> = new Set([
  "OrderNotFound",
  "OrderNotFulfillable",
  "FulfillmentQuantityExceeded",
  "UnknownLineItem",
  "FulfillmentNotFound",
  "OrderNotCancellable",
  "OrderNotRefundable",
  "RefundAmountTooLarge"
])

/** One of the decider's refusals (not an infrastructure failure). */
export const isOrderError = (e: unknown): e is OrderError =>
  typeof e === "object" && e !== null && "_tag" in e && ORDER_ERROR_TAGS.has(String(e._tag))

// --- Commands ---------------------------------------------------------------------------------------

export type PlaceData = typeof OrderPlaced.schema.Type

/** An item of a request: a line named by its id or by its product. */
export interface ItemRef {
  readonly lineItemId?: string | undefined
  readonly productId?: string | undefined
  readonly quantity: number
}

export type OrderCommand =
  | { readonly _tag: "Place"; readonly data: PlaceData }
  | {
      readonly _tag: "Fulfill"
      readonly fulfillmentId: string
      /** Absent: everything that remains. */
      readonly items: ReadonlyArray<ItemRef> | undefined
      readonly trackingNumber: string | null
      readonly trackingUrl: string | null
      readonly carrier: string | null
    }
  | { readonly _tag: "Deliver"; readonly fulfillmentId: string }
  | {
      readonly _tag: "Cancel"
      readonly reason: string | null
      /** The refund (or void) of what was paid, started with the cancellation. */
      readonly refundId: string
    }
  | {
      readonly _tag: "Refund"
      readonly refundId: string
      readonly amount: number | undefined
      readonly reason: OrderRefundReason | null
      readonly items: ReadonlyArray<ItemRef> | undefined
      readonly restock: boolean
    }
  | { readonly _tag: "CompleteRefund"; readonly refundId: string; readonly paymentRefundId: string | null }
  | { readonly _tag: "FailRefund"; readonly refundId: string; readonly failureReason: string }
  | {
      readonly _tag: "CapturePayment"
      readonly amountCaptured: number
      /** The refund that gives the money back if the order was cancelled before the capture landed. */
      readonly refundId: string
    }
  | {
      /** The authorization was canceled on the payment directly (not through the order). */
      readonly _tag: "RecordVoid"
      readonly refundId: string
    }
  | {
      /** A refund made on the payment directly, found by payments' report of it. */
      readonly _tag: "RecordPaymentRefund"
      readonly refundId: string
      readonly paymentRefundId: string
      readonly amount: number
      readonly reason: OrderRefundReason | null
    }

/** The idempotency key of a refund's payment call: derived from the order and the refund. */
export const refundKey = (orderId: string, refundId: string) => `${orderId}:refund:${refundId}`

// --- Evolve -----------------------------------------------------------------------------------------

const addQuantities = (
  lines: ReadonlyArray<LineState>,
  items: ReadonlyArray<LineQuantity>,
  field: "fulfilledQuantity" | "refundedQuantity"
): ReadonlyArray<LineState> =>
  lines.map((l) => {
    const add = items.reduce((n, i) => (i.lineItemId === l.id ? n + i.quantity : n), 0)
    return add === 0 ? l : { ...l, [field]: l[field] + add }
  })

const updateRefund = (
  s: OrderState,
  refundId: string,
  change: (r: RefundState) => RefundState
): ReadonlyArray<RefundState> => s.refunds.map((r) => (r.id === refundId ? change(r) : r))

export const evolve = (s: OrderState, e: Pending<OrderEvent> | OrderEvent): OrderState => {
  // Events being decided have no `recordedAt` yet; the runner folds recorded ones.
  const at = "recordedAt" in e ? e.recordedAt : s.updatedAt
  switch (e.type) {
    case "order.placed": {
      const d = e.data
      return {
        ...initialOrderState,
        exists: true,
        orderId: d.orderId,
        displayId: d.displayId,
        checkoutId: d.checkoutId,
        customerId: d.customerId,
        email: isShredded(d.email) ? null : d.email,
        currency: d.currency,
        lineItems: d.lineItems.map((l) => ({
          id: l.lineItemId,
          productId: l.productId,
          name: l.name,
          sku: l.sku,
          quantity: l.quantity,
          unitAmount: l.unitAmount,
          amountTotal: l.amountTotal,
          fulfilledQuantity: 0,
          refundedQuantity: 0
        })),
        subtotal: d.subtotal,
        total: d.total,
        shippingAddress: isShredded(d.shippingAddress) ? null : d.shippingAddress,
        paymentIntentId: d.paymentIntentId,
        paymentId: d.paymentId,
        payment: d.payment,
        amountPaid: d.payment === "captured" ? d.amountCaptured : 0,
        metadata: revealOr(d.metadata, {}),
        createdAt: at,
        updatedAt: at
      }
    }
    case "order.fulfillment_created": {
      const d = e.data
      const tracked = d.trackingNumber !== null || d.trackingUrl !== null
      return {
        ...s,
        lineItems: addQuantities(s.lineItems, d.items, "fulfilledQuantity"),
        fulfillments: [
          ...s.fulfillments,
          {
            id: d.fulfillmentId,
            status: tracked ? "shipped" : "pending",
            items: d.items,
            trackingNumber: d.trackingNumber,
            trackingUrl: d.trackingUrl,
            carrier: d.carrier,
            shippedAt: tracked ? at : null,
            deliveredAt: null,
            createdAt: at
          }
        ],
        updatedAt: at
      }
    }
    case "order.fulfillment_delivered":
      return {
        ...s,
        fulfillments: s.fulfillments.map((f) =>
          f.id === e.data.fulfillmentId
            ? { ...f, status: "delivered", shippedAt: f.shippedAt ?? at, deliveredAt: at }
            : f
        ),
        updatedAt: at
      }
    case "order.cancelled":
      return { ...s, cancelledAt: at, cancellationReason: e.data.reason, updatedAt: at }
    case "order.refund_started": {
      const d = e.data
      return {
        ...s,
        lineItems: addQuantities(s.lineItems, d.items, "refundedQuantity"),
        refunds: [
          ...s.refunds,
          {
            id: d.refundId,
            key: d.key,
            amount: d.amount,
            status: "pending",
            reason: d.reason,
            items: d.items,
            restock: d.restock,
            void: d.void,
            cancels: d.cancels,
            cancellationReason: d.cancellationReason,
            paymentRefundId: null,
            failureReason: null,
            createdAt: at,
            updatedAt: at
          }
        ],
        updatedAt: at
      }
    }
    case "order.refund_succeeded":
      return {
        ...s,
        refunds: updateRefund(s, e.data.refundId, (r) => ({
          ...r,
          status: "succeeded",
          paymentRefundId: e.data.paymentRefundId,
          updatedAt: at
        })),
        updatedAt: at
      }
    case "order.refund_failed": {
      const failed = s.refunds.find((r) => r.id === e.data.refundId)
      return {
        ...s,
        // The units of a failed line refund may ship again.
        lineItems:
          failed === undefined
            ? s.lineItems
            : addQuantities(
                s.lineItems,
                failed.items.map((i) => ({ lineItemId: i.lineItemId, quantity: -i.quantity })),
                "refundedQuantity"
              ),
        refunds: updateRefund(s, e.data.refundId, (r) => ({
          ...r,
          status: "failed",
          failureReason: e.data.failureReason,
          updatedAt: at
        })),
        updatedAt: at
      }
    }
    case "order.payment_captured":
      return { ...s, amountPaid: e.data.amountCaptured, updatedAt: at }
    case "order.payment_refunded": {
      const d = e.data
      const refund: RefundState = {
        id: d.refundId,
        key: `payment:${d.paymentRefundId}`,
        amount: d.amount,
        status: "succeeded",
        reason: d.reason,
        items: [],
        restock: false,
        void: false,
        cancels: false,
        cancellationReason: null,
        paymentRefundId: d.paymentRefundId,
        failureReason: null,
        createdAt: at,
        updatedAt: at
      }
      return { ...s, refunds: [...s.refunds, refund], updatedAt: at }
    }
  }
}

// --- Decide -----------------------------------------------------------------------------------------

/**
 * Items resolved to lines and summed per line, in the order of first mention. A product named by
 * `productId` may have several lines: its units fill them in order, each up to what it has left
 * (what is beyond all of them lands on the first, for the caller's check to refuse).
 */
const resolveItems = (
  s: OrderState,
  items: ReadonlyArray<ItemRef>
): Effect.Effect<ReadonlyArray<LineQuantity & { readonly index: number }>, UnknownLineItem> => {
  const byLine = new Map<string, { lineItemId: string; quantity: number; index: number }>()
  const add = (lineId: string, quantity: number, index: number) => {
    const seen = byLine.get(lineId)
    byLine.set(lineId, {
      lineItemId: lineId,
      quantity: (seen?.quantity ?? 0) + quantity,
      index: seen?.index ?? index
    })
  }
  for (const [index, item] of items.entries()) {
    const lines =
      item.lineItemId !== undefined
        ? s.lineItems.filter((l) => l.id === item.lineItemId)
        : s.lineItems.filter((l) => l.productId === item.productId)
    const first = lines[0]
    if (first === undefined)
      return Effect.fail(new UnknownLineItem({ index, reference: item.lineItemId ?? item.productId ?? "" }))
    let left = item.quantity
    for (const line of lines.length > 1 ? lines : []) {
      const free = Math.max(0, remainingOf(line) - (byLine.get(line.id)?.quantity ?? 0))
      const take = Math.min(left, free)
      if (take > 0) add(line.id, take, index)
      left -= take
    }
    if (left > 0) add(first.id, left, index)
  }
  return Effect.succeed([...byLine.values()])
}

const notFound = (s: OrderState) => new OrderNotFound({ orderId: s.orderId })

const decideFulfill = (s: OrderState, c: Extract<OrderCommand, { _tag: "Fulfill" }>) =>
  Effect.gen(function* () {
    const status = statusOf(s)
    const refuse = (reason: string) => Effect.fail(new OrderNotFulfillable({ status, reason }))
    if (status === "cancelled") return yield* refuse("the order is cancelled")
    if (status === "refunded") return yield* refuse("the order is refunded")
    if (status === "pending") return yield* refuse("the payment is only authorized: capture it first")
    if (paymentStatusOf(s) === "refunded") return yield* refuse("the order is refunded")
    if (cancellationPending(s)) return yield* refuse("its cancellation is under way (the refund is pending)")
    const items =
      c.items === undefined
        ? s.lineItems.flatMap((l, index) =>
            remainingOf(l) > 0 ? [{ lineItemId: l.id, quantity: remainingOf(l), index }] : []
          )
        : yield* resolveItems(s, c.items)
    for (const item of items) {
      const line = s.lineItems.find((l) => l.id === item.lineItemId)
      const remaining = line === undefined ? 0 : remainingOf(line)
      if (item.quantity > remaining)
        return yield* new FulfillmentQuantityExceeded({
          index: item.index,
          lineItemId: item.lineItemId,
          requested: item.quantity,
          remaining
        })
    }
    if (items.length === 0) return yield* refuse("nothing remains to fulfil")
    return [
      FulfillmentCreated.make({
        orderId: s.orderId,
        fulfillmentId: c.fulfillmentId,
        items: items.map((i) => ({ lineItemId: i.lineItemId, quantity: i.quantity })),
        trackingNumber: c.trackingNumber,
        trackingUrl: c.trackingUrl,
        carrier: c.carrier
      })
    ]
  })

const decideRefund = (s: OrderState, c: Extract<OrderCommand, { _tag: "Refund" }>) =>
  Effect.gen(function* () {
    const status = statusOf(s)
    if (s.refunds.some((r) => r.id === c.refundId)) return []
    const refuse = (reason: string) => Effect.fail(new OrderNotRefundable({ status, reason }))
    if (s.payment === "not_required") return yield* refuse("the order had nothing to pay")
    if (s.amountPaid === 0)
      return yield* refuse("the payment is only authorized: cancel the order to void it")
    const refundable = amountRefundable(s)
    if (refundable === 0) return yield* refuse("nothing remains refundable")
    const items = c.items === undefined ? [] : yield* resolveItems(s, c.items)
    let itemsAmount = 0
    for (const item of items) {
      const line = s.lineItems.find((l) => l.id === item.lineItemId)
      const remaining = line === undefined ? 0 : remainingOf(line)
      if (item.quantity > remaining)
        return yield* new RefundAmountTooLarge({
          field: `items[${item.index}].quantity`,
          requested: item.quantity,
          refundable: remaining
        })
      itemsAmount += (line?.unitAmount ?? 0) * item.quantity
    }
    const amount = c.amount ?? (items.length > 0 ? itemsAmount : refundable)
    if (amount > refundable)
      return yield* new RefundAmountTooLarge({
        field: c.amount === undefined ? "items" : "amount",
        requested: amount,
        refundable
      })
    const started = OrderRefundStarted.make({
      orderId: s.orderId,
      refundId: c.refundId,
      key: refundKey(s.orderId, c.refundId),
      amount,
      reason: c.reason,
      items: items.map((i) => ({ lineItemId: i.lineItemId, quantity: i.quantity })),
      restock: c.restock,
      void: false,
      cancels: false,
      cancellationReason: null
    })
    // A full refund of an order that shipped nothing cancels it once the money is back
    // (CompleteRefund): a refund the processor refuses cancels nothing.
    return [started]
  })

const decideCancel = (s: OrderState, c: Extract<OrderCommand, { _tag: "Cancel" }>) => {
  const status = statusOf(s)
  if (s.cancelledAt !== null)
    return Effect.fail(new OrderNotCancellable({ status, reason: "already cancelled" }))
  // Asked again while the first cancellation's refund is under way: that one decides.
  if (cancellationPending(s)) return Effect.succeed([])
  // Another refund is under way: whether the money comes back is not known yet, and cancelling now
  // could leave the order cancelled with it kept. Cancel once it is answered.
  if (amountRefundPending(s) > 0)
    return Effect.fail(
      new OrderNotCancellable({ status, reason: "a refund is under way: cancel once it is answered" })
    )
  if (anyShipped(s))
    return Effect.fail(new OrderNotCancellable({ status, reason: "part of it shipped: refund it instead" }))
  if (status === "refunded")
    return Effect.fail(new OrderNotCancellable({ status, reason: "the order is refunded" }))
  const cancelled = OrderCancelled.make({ orderId: s.orderId, reason: c.reason })
  const refundable = amountRefundable(s)
  const refund = (amount: number, isVoid: boolean) =>
    OrderRefundStarted.make({
      orderId: s.orderId,
      refundId: c.refundId,
      key: refundKey(s.orderId, c.refundId),
      amount,
      reason: "requested_by_customer",
      items: [],
      restock: false,
      void: isVoid,
      cancels: !isVoid,
      cancellationReason: isVoid ? null : c.reason
    })
  if (s.payment === "authorized" && s.amountPaid === 0 && !voidInFlight(s) && !voided(s))
    return Effect.succeed([cancelled, refund(s.total, true)])
  // Captured money goes back first: the order is cancelled when the refund succeeds (CompleteRefund),
  // and stays as it was if the payment refuses it — never cancelled with the money kept.
  if (refundable > 0) return Effect.succeed([refund(refundable, false)])
  return Effect.succeed([cancelled])
}

/**
 * A refund of `amount` that succeeded, and — when with it all that was paid is back and nothing
 * shipped — the order's cancellation (research §2.4).
 */
const withCancellationIfRefunded = (
  s: OrderState,
  amount: number,
  refunded: OrderEvent
): ReadonlyArray<OrderEvent> => {
  const refundedInFull = s.amountPaid > 0 && amountRefunded(s) + amount >= s.amountPaid && !anyShipped(s)
  // The money first, then the cancellation: `order.cancelled` carries the order as it ends (refunded),
  // and in between the order already reads `cancelled` (statusOf), never `refunded`.
  return refundedInFull && s.cancelledAt === null
    ? [refunded, OrderCancelled.make({ orderId: s.orderId, reason: "refunded" })]
    : [refunded]
}

export const decide = (
  c: OrderCommand,
  s: OrderState
): Effect.Effect<ReadonlyArray<OrderEvent>, OrderError> => {
  if (c._tag === "Place") return Effect.succeed(s.exists ? [] : [OrderPlaced.make(c.data)])
  if (!s.exists) return Effect.fail(notFound(s))
  switch (c._tag) {
    case "Fulfill":
      return decideFulfill(s, c)
    case "Deliver": {
      const f = s.fulfillments.find((x) => x.id === c.fulfillmentId)
      if (f === undefined) return Effect.fail(new FulfillmentNotFound({ fulfillmentId: c.fulfillmentId }))
      if (f.status === "delivered") return Effect.succeed([])
      return Effect.succeed([
        FulfillmentDelivered.make({ orderId: s.orderId, fulfillmentId: c.fulfillmentId })
      ])
    }
    case "Cancel":
      return decideCancel(s, c)
    case "Refund":
      return decideRefund(s, c)
    case "CompleteRefund": {
      const r = s.refunds.find((x) => x.id === c.refundId)
      if (r === undefined || r.status !== "pending") return Effect.succeed([])
      const succeeded = OrderRefundSucceeded.make({
        orderId: s.orderId,
        refundId: c.refundId,
        paymentRefundId: c.paymentRefundId,
        amount: r.void ? 0 : r.amount,
        customerId: s.customerId
      })
      if (r.cancels && s.cancelledAt === null)
        return Effect.succeed([
          succeeded,
          OrderCancelled.make({ orderId: s.orderId, reason: r.cancellationReason })
        ])
      return Effect.succeed(r.void ? [succeeded] : withCancellationIfRefunded(s, r.amount, succeeded))
    }
    case "RecordVoid": {
      // Only an order still waiting on its authorization; a cancel's own void records itself.
      if (s.payment !== "authorized" || s.amountPaid > 0 || voided(s) || voidInFlight(s))
        return Effect.succeed([])
      const started = OrderRefundStarted.make({
        orderId: s.orderId,
        refundId: c.refundId,
        key: refundKey(s.orderId, c.refundId),
        amount: s.total,
        reason: null,
        items: [],
        restock: false,
        void: true,
        cancels: false,
        cancellationReason: null
      })
      // Cancelled already (its own void lost the race to this one): the void is recorded all the same.
      return Effect.succeed([
        ...(s.cancelledAt === null
          ? [OrderCancelled.make({ orderId: s.orderId, reason: "payment_canceled" })]
          : []),
        started,
        OrderRefundSucceeded.make({
          orderId: s.orderId,
          refundId: c.refundId,
          paymentRefundId: null,
          amount: 0,
          customerId: s.customerId
        })
      ])
    }
    case "RecordPaymentRefund": {
      const known = s.refunds.some((r) => r.id === c.refundId || r.paymentRefundId === c.paymentRefundId)
      if (known || c.amount <= 0) return Effect.succeed([])
      const refunded = OrderPaymentRefunded.make({
        orderId: s.orderId,
        refundId: c.refundId,
        paymentRefundId: c.paymentRefundId,
        amount: c.amount,
        reason: c.reason,
        customerId: s.customerId
      })
      return Effect.succeed(withCancellationIfRefunded(s, c.amount, refunded))
    }
    case "FailRefund": {
      const r = s.refunds.find((x) => x.id === c.refundId)
      if (r === undefined || r.status !== "pending") return Effect.succeed([])
      return Effect.succeed([
        OrderRefundFailed.make({ orderId: s.orderId, refundId: c.refundId, failureReason: c.failureReason })
      ])
    }
    case "CapturePayment": {
      if (s.payment !== "authorized" || s.amountPaid > 0 || voided(s) || c.amountCaptured <= 0)
        return Effect.succeed([])
      const captured = OrderPaymentCaptured.make({
        orderId: s.orderId,
        amountCaptured: c.amountCaptured,
        customerId: s.customerId
      })
      if (s.cancelledAt === null) return Effect.succeed([captured])
      // Cancelled while the capture was under way: its void cannot succeed (the payment is
      // captured), so the money is recorded and given back by a refund of all of it.
      return Effect.succeed([
        captured,
        OrderRefundStarted.make({
          orderId: s.orderId,
          refundId: c.refundId,
          key: refundKey(s.orderId, c.refundId),
          amount: c.amountCaptured,
          reason: "requested_by_customer",
          items: [],
          restock: false,
          void: false,
          cancels: false,
          cancellationReason: null
        })
      ])
    }
  }
}

// --- Public events ----------------------------------------------------------------------------------

/** The state as the object clients see (built in objects.ts; injected to keep this file pure). */
export type Snapshot = (s: OrderState) => Readonly<Record<string, unknown>>

/**
 * What each change publishes: the webhook types of spec §6.1 (`order.created`, `order.updated`,
 * `order.cancelled`, `order.fulfilled`, `order.partially_fulfilled`) and the notification triggers
 * of §6.5 (`order.confirmed`, `order.shipped`, `order.delivered`, `order.cancelled`,
 * `order.refunded`), each the order as of the change, with the trigger's extra variables.
 */
export const orderPublicEvents =
  (snapshot: Snapshot) =>
  (e: Pending<OrderEvent>, s: OrderState): ReadonlyArray<PublicEventDraft> => {
    const subjectId = s.customerId ?? s.orderId
    const data = snapshot(s)
    const publish = (type: string, extra: Readonly<Record<string, unknown>> = {}): PublicEventDraft => ({
      type,
      data: { ...data, ...extra },
      subjectId
    })
    const updated = publish("order.updated")
    switch (e.type) {
      case "order.placed":
        return s.payment === "authorized"
          ? [publish("order.created")]
          : [publish("order.created"), publish("order.confirmed")]
      case "order.payment_captured":
        // Captured after its cancellation (the money goes back): nothing to confirm.
        return s.cancelledAt === null ? [updated, publish("order.confirmed")] : [updated]
      case "order.fulfillment_created": {
        const d = e.data
        const kind =
          fulfillmentStatusOf(s) === "partially_fulfilled" ? "order.partially_fulfilled" : "order.fulfilled"
        const tracking = {
          fulfillmentId: d.fulfillmentId,
          trackingNumber: d.trackingNumber,
          trackingUrl: d.trackingUrl,
          carrier: d.carrier
        }
        const shipped = d.trackingNumber !== null || d.trackingUrl !== null
        return [publish(kind), updated, ...(shipped ? [publish("order.shipped", tracking)] : [])]
      }
      case "order.fulfillment_delivered":
        return [updated, publish("order.delivered", { fulfillmentId: e.data.fulfillmentId })]
      case "order.cancelled":
        return [publish("order.cancelled"), updated]
      case "order.refund_started":
      case "order.refund_failed":
        return [updated]
      case "order.refund_succeeded":
      case "order.payment_refunded": {
        const refund = s.refunds.find((r) => r.id === e.data.refundId)
        if (refund === undefined || refund.void) return [updated]
        // Refunding the units left to ship completed a partly shipped order: it is fulfilled as if
        // the last parcel had gone (once the refund succeeded: a refused one changes nothing).
        const before: OrderState = {
          ...s,
          refunds: s.refunds.map((r) => (r.id === refund.id ? { ...r, status: "pending" } : r))
        }
        const completed =
          refund.items.length > 0 &&
          fulfillmentStatusOf(before) === "partially_fulfilled" &&
          fulfillmentStatusOf(s) !== "partially_fulfilled"
        const refunded = publish("order.refunded", { refundId: refund.id, refundedAmount: refund.amount })
        return completed ? [publish("order.fulfilled"), updated, refunded] : [updated, refunded]
      }
    }
  }

export const makeOrderDecider = (snapshot: Snapshot) =>
  defineDecider({
    streamType: "order",
    events: orderEventTypes,
    initialState: initialOrderState,
    evolve,
    decide,
    publicEvents: orderPublicEvents(snapshot)
  })
