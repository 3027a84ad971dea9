/**
 * The webhook event catalogue (spec §6.1): the public event types an endpoint may subscribe to, each
 * with a sample snapshot that `POST /webhook/:id/test` sends. The samples follow the resource shapes
 * the commerce surface publishes (spec §2.6 for `order.created`); amounts are integers in minor units.
 */

export const WEBHOOK_EVENT_TYPES = [
  "order.created",
  "order.updated",
  "order.cancelled",
  "order.fulfilled",
  "order.partially_fulfilled",
  "payment.authorized",
  "payment.captured",
  "payment.failed",
  "payment.refunded",
  "product.created",
  "product.updated",
  "product.deleted",
  "customer.created",
  "customer.updated",
  "inventory.low_stock",
  "inventory.out_of_stock",
  "inventory.restocked"
] as const
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number]

const KNOWN: ReadonlySet<string> = new Set(WEBHOOK_EVENT_TYPES)
export const isWebhookEventType = (type: string): type is WebhookEventType => KNOWN.has(type)

const AT = "2026-01-15T10:30:00.000Z"
const order = (status: string) => ({
  id: "ord_sample",
  displayId: "1001",
  status,
  email: "shopper@example.com",
  total: 4999,
  currency: "USD",
  createdAt: AT
})
const payment = (status: string) => ({
  id: "pay_sample",
  orderId: "ord_sample",
  status,
  amount: 4999,
  currency: "USD",
  createdAt: AT
})
const product = { id: "prod_sample", name: "Sample product", price: 1999, currency: "USD", createdAt: AT }
const customer = {
  id: "cus_sample",
  email: "shopper@example.com",
  firstName: "Sam",
  lastName: "Shopper",
  createdAt: AT
}
const inventory = (available: number) => ({ productId: "prod_sample", sku: "SAMPLE-1", available })

/** What a test delivery of each type carries as `data`. */
export const SAMPLE_DATA: Readonly<Record<WebhookEventType, Readonly<Record<string, unknown>>>> = {
  "order.created": order("pending"),
  "order.updated": order("confirmed"),
  "order.cancelled": order("cancelled"),
  "order.fulfilled": order("fulfilled"),
  "order.partially_fulfilled": order("partially_fulfilled"),
  "payment.authorized": payment("authorized"),
  "payment.captured": payment("captured"),
  "payment.failed": { ...payment("failed"), failureCode: "card_declined" },
  "payment.refunded": { ...payment("refunded"), amountRefunded: 4999 },
  "product.created": product,
  "product.updated": product,
  "product.deleted": { id: "prod_sample", deleted: true },
  "customer.created": customer,
  "customer.updated": customer,
  "inventory.low_stock": inventory(3),
  "inventory.out_of_stock": inventory(0),
  "inventory.restocked": inventory(50)
}
