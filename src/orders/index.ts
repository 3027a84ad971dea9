/**
 * The orders context's public face: the port checkout completion places orders through (in its own
 * transaction), the order object, and the public event schemas. Nothing else of `orders/` is
 * imported from outside it. The port is implemented in `port.ts`.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Context, type Effect, type Option } from "effect"
import type { EventMetadata } from "../eventstore/EventStore.js"
import type { CommandError } from "../kernel/CommandRunner.js"
import type { Metadata } from "../kernel/Metadata.js"
import type { PaymentRefundSummary } from "../payments/index.js"
import type { ShippingAddress } from "./events.js"
import type { OrderObject } from "./objects.js"

export * from "./events.js"
export { OrderObject } from "./objects.js"

export interface OrderLineInput {
  readonly productId: string
  /** Product name at checkout time (snapshot). */
  readonly name: string
  readonly sku: string | null
  /** An integer ≥ 1. */
  readonly quantity: number
  /** Minor units: the product's price when the checkout was created. */
  readonly unitAmount: number
  /** unitAmount × quantity. */
  readonly amountTotal: number
}

export interface PlaceOrderInput {
  /** Chosen by the caller, deterministic (derived from the checkout id): `ord_…`. */
  readonly orderId: string
  readonly checkoutId: string | null
  /** null: a guest order (it changes no customer). */
  readonly customerId: string | null
  readonly email: string
  /** Uppercase ISO 4217. */
  readonly currency: string
  readonly lineItems: ReadonlyArray<OrderLineInput>
  readonly subtotal: number
  readonly total: number
  readonly shippingAddress: ShippingAddress | null
  /** null when the total is 0 (no processor). */
  readonly paymentIntentId: string | null
  readonly paymentId: string | null
  /**
   * What the payment came to when the order is placed: authorized (manual capture → order
   * `pending`), captured (automatic capture → `confirmed`), or not_required (zero total → `confirmed`).
   */
  readonly payment: "authorized" | "captured" | "not_required"
  readonly amountCaptured: number
  readonly metadata: Metadata
}

export interface OrdersPortShape {
  /**
   * Places the order inside the CALLER's transaction (or its own if none). Idempotent on `orderId`:
   * placing the same order again changes nothing and answers the existing order. Assigns the next
   * `displayId` ("1001", "1002", … no gaps: a counter row updated in the transaction, not a PG
   * sequence). Converts nothing in the catalog: the caller (checkout completion) calls
   * CatalogPort.convertToOrder itself.
   */
  readonly place: (
    input: PlaceOrderInput,
    metadata: EventMetadata
  ) => Effect.Effect<OrderObject, CommandError<never>>
  /** The order as GET /v1/orders/:id shows it (staff view), if it exists. */
  readonly find: (orderId: string) => Effect.Effect<Option.Option<OrderObject>, SqlError>
  /**
   * A manual-capture order's payment was captured (by `POST /v1/payments/:id/capture`): the order
   * becomes `confirmed` (and `order.confirmed` is sent). Joins the caller's transaction; a no-op
   * for an order already paid, cancelled, or unknown.
   */
  readonly recordCapture: (
    orderId: string,
    amountCaptured: number,
    metadata: EventMetadata
  ) => Effect.Effect<void, CommandError<never>>
  /**
   * Refunds made on the order's payment directly (`POST /v1/payments/:id/refund`), as payments
   * reports them (`PaymentsPort.refundsOf`): each succeeded one the order did not ask for itself is
   * recorded on it (`order.payment_refunded`: amount refunded, payment status, customer totals), once.
   * `releaseHold`: that gave back all that was paid, which cancelled an order that shipped nothing
   * (or made a shipped one `refunded`): nothing more will ship, and the caller releases the order's
   * stock hold in the same transaction. Joins the caller's transaction.
   */
  readonly recordPaymentRefunds: (
    orderId: string,
    refunds: ReadonlyArray<PaymentRefundSummary>,
    metadata: EventMetadata
  ) => Effect.Effect<{ readonly releaseHold: boolean }, CommandError<never>>
  /**
   * The order's authorization was canceled on the payment directly (`POST
   * /v1/payment-intents/:id/cancel`): an order still waiting on it (`pending`) is cancelled
   * (`cancellationReason: "payment_canceled"`, `paymentStatus: "voided"`); `releaseHold` then asks
   * the caller to release its stock hold in the same transaction. Joins the caller's transaction.
   */
  readonly recordVoid: (
    orderId: string,
    metadata: EventMetadata
  ) => Effect.Effect<{ readonly releaseHold: boolean }, CommandError<never>>
}

export class OrdersPort extends Context.Tag("orders/OrdersPort")<OrdersPort, OrdersPortShape>() {}
