/**
 * The orders HTTP contract on `/v1` (spec §4.5; COMMERCE decisions 3 and 4; research §1.3,
 * §2.3–§2.4): reads (`read:orders`, which shoppers hold for their own orders: another's is 404),
 * fulfilment, delivery, cancellation and refunds (`write:orders`, staff). Orders are created by
 * checkout completion (the orders port), never by a request of their own.
 *
 * Every rule a request can break on its own is stated in these schemas; what depends on the order's
 * state (quantities left to ship, amounts left to refund, the status) is the use case's.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { MAX_AMOUNT, MAX_QUANTITY } from "../catalog/index.js"
import { ApiBase } from "../http/ApiBase.js"
import { Authentication } from "../http/Auth.js"
import { byId, scoped } from "../http/Endpoints.js"
import { Conflict, NotFound } from "../http/errors.js"
import { Instant, IntField, idOf, OptionalFieldsBody, Text } from "../http/Fields.js"
import { V1List, v1ListParams } from "../http/Lists.js"
import { ORDER_STATUSES } from "./decider.js"
import { OrderRefundReason } from "./events.js"
import { OrderObject } from "./objects.js"

/** A line named by its id or by its product (one of the two). */
const ItemInput = Schema.Struct({
  lineItemId: Schema.optional(idOf("li", "lineItemId")),
  productId: Schema.optional(idOf("prod", "productId")),
  quantity: IntField("quantity", 1, MAX_QUANTITY)
}).pipe(
  Schema.filter((i) =>
    (i.lineItemId === undefined) === (i.productId === undefined)
      ? { path: ["lineItemId"], message: "give lineItemId or productId (one of them)" }
      : undefined
  )
)

const Items = Schema.Array(ItemInput).pipe(
  Schema.minItems(1, { message: () => "items must name at least one line (or be left out)" }),
  Schema.maxItems(100, { message: () => "items can name at most 100 lines" })
)

const TrackingUrl = Schema.String.pipe(
  Schema.pattern(/^https?:\/\/\S+$/, { message: () => "trackingUrl must be an http(s) URL" }),
  Schema.maxLength(2048, { message: () => "trackingUrl must be at most 2048 characters" })
)

export const FulfillRequest = Schema.Struct({
  items: Schema.optional(Items),
  trackingNumber: Schema.optional(Text("trackingNumber", 100)),
  trackingUrl: Schema.optional(TrackingUrl),
  carrier: Schema.optional(Text("carrier", 100))
})
export type FulfillRequest = typeof FulfillRequest.Type

export const FulfillmentPatch = Schema.Struct({
  status: Schema.Literal("delivered").annotations({ message: () => 'status must be "delivered"' })
})

export const CancelRequest = Schema.Struct({ reason: Schema.optional(Text("reason", 500)) })
export type CancelRequest = typeof CancelRequest.Type

export const RefundRequest = Schema.Struct({
  amount: Schema.optional(IntField("amount", 1, MAX_AMOUNT)),
  reason: Schema.optional(
    OrderRefundReason.annotations({
      message: () => ({
        message: "reason must be one of duplicate, fraudulent, requested_by_customer, other",
        override: true
      })
    })
  ),
  items: Schema.optional(Items),
  restock: Schema.optional(Schema.Boolean.annotations({ message: () => "restock must be true or false" }))
})
export type RefundRequest = typeof RefundRequest.Type

export const OrderListParams = Schema.Struct({
  ...v1ListParams("ord").fields,
  status: Schema.optional(
    Schema.Literal(...ORDER_STATUSES).annotations({
      message: () => ({ message: `status must be one of ${ORDER_STATUSES.join(", ")}`, override: true })
    })
  ),
  customerId: Schema.optional(idOf("cus", "customerId")),
  email: Schema.optional(
    Schema.String.pipe(Schema.maxLength(254, { message: () => "email must be at most 254 characters" }))
  ),
  createdAfter: Schema.optional(Instant("createdAfter")),
  createdBefore: Schema.optional(Instant("createdBefore"))
})
export type OrderListParams = typeof OrderListParams.Type

const FulfillmentPath = Schema.Struct({ id: Schema.String, fid: Schema.String })

export class OrdersApi extends HttpApiGroup.make("orders")
  .add(
    HttpApiEndpoint.get("list", "/v1/orders")
      .setUrlParams(OrderListParams)
      .addSuccess(V1List(OrderObject, "OrderList"))
      .pipe(scoped("read:orders"))
      .annotate(OpenApi.Summary, "List orders, newest first")
      .annotate(
        OpenApi.Description,
        "Filters: `status`, `customerId`, `email` (case-insensitive, exact), `createdAfter` / `createdBefore` " +
          "(ISO 8601, exclusive). `limit` 1–100 (default 10); `startingAfter` / `endingBefore` (order ids), " +
          "not both. A shopper lists only their own orders, whatever the filters."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/orders/:id")
      .addSuccess(OrderObject)
      .pipe(scoped("read:orders"), byId)
      .annotate(OpenApi.Summary, "An order (shoppers: their own only)")
  )
  .add(
    HttpApiEndpoint.post("fulfill", "/v1/orders/:id/fulfill")
      .setPayload(OptionalFieldsBody(FulfillRequest))
      .addSuccess(OrderObject)
      .addError(Conflict)
      .pipe(scoped("write:orders"), byId)
      .annotate(OpenApi.Summary, "Ship some or all of what remains (one fulfilment)")
      .annotate(
        OpenApi.Description,
        "`items` `[{lineItemId | productId, quantity}]`; left out = everything that remains. More than " +
          "remains of a line → 400 `fulfillment_quantity_exceeded` (`param` `items[i].quantity`); a line " +
          "the order does not have → 400 `parameter_invalid`. The stock leaves (the order's hold is " +
          "consumed). With `trackingNumber` or `trackingUrl` the fulfilment is `shipped` and the " +
          "`order.shipped` notification goes out. A cancelled, refunded or unpaid (`pending`) order, or " +
          "one with nothing left to ship → 409 `order_not_fulfillable`. Publishes " +
          "`order.partially_fulfilled` or `order.fulfilled`, and `order.updated`."
      )
  )
  .add(
    HttpApiEndpoint.patch("updateFulfillment", "/v1/orders/:id/fulfillments/:fid")
      .setPath(FulfillmentPath)
      .setPayload(FulfillmentPatch)
      .addSuccess(OrderObject)
      .addError(NotFound)
      .pipe(scoped("write:orders"))
      .annotate(OpenApi.Summary, "Mark a fulfilment delivered")
      .annotate(
        OpenApi.Description,
        '`{status: "delivered"}` (again: no change). Sends the `order.delivered` notification.'
      )
  )
  .add(
    HttpApiEndpoint.post("cancel", "/v1/orders/:id/cancel")
      .setPayload(OptionalFieldsBody(CancelRequest))
      .addSuccess(OrderObject)
      .addError(Conflict)
      .pipe(scoped("write:orders"), byId)
      .annotate(OpenApi.Summary, "Cancel an order nothing of which shipped")
      .annotate(
        OpenApi.Description,
        "Releases the stock it holds and gives the money back: an authorization is voided, a captured " +
          "payment refunded (the refund shows in `refunds`). Something shipped, or cancelled already → " +
          "409 `order_not_cancellable`. Publishes `order.cancelled`; sends the `order.cancelled` notification."
      )
  )
  .add(
    HttpApiEndpoint.post("refund", "/v1/orders/:id/refund")
      .setPayload(OptionalFieldsBody(RefundRequest))
      .addSuccess(OrderObject)
      .addError(Conflict)
      .pipe(scoped("write:orders"), byId)
      .annotate(OpenApi.Summary, "Refund all or part of what was paid")
      .annotate(
        OpenApi.Description,
        "`amount` (default: the items' value, or everything refundable) up to `amountRefundable` (else 400 " +
          "`amount_too_large`); concurrent refunds never exceed what was captured. `items` refunds units " +
          "that will not ship (they leave the order's hold; `restock: true` puts them back in stock). A " +
          "partial refund leaves `status` alone (`paymentStatus: partially_refunded`); a full one makes " +
          "it `refunded`, or `cancelled` when nothing shipped. Nothing refundable, or a payment only " +
          "authorized (cancel instead) → 409 `order_not_refundable`. Sends `order.refunded`."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Orders (v1)")
  .annotate(
    OpenApi.Description,
    "Orders, placed by checkout completion: `status` (pending, confirmed, partially_fulfilled, fulfilled, " +
      "cancelled, refunded), `paymentStatus` and `fulfillmentStatus` kept apart; line items are immutable " +
      "price snapshots; `displayId` is the store's gap-free order number from 1001."
  ) {}

/** This context's routes on the service's API (`ApiBase`): what its handlers are built against. */
export const OrdersRoutes = ApiBase.add(OrdersApi)
