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
  "inventory.restocked",
  // Extensions beyond spec §6.1 (src/billing): subscriptions and their invoices.
  "subscription.created",
  "subscription.updated",
  "subscription.cancelled",
  "subscription.trial_will_end",
  "invoice.paid",
  "invoice.payment_failed"
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
/** The `/v1` product object, as `product.*` events carry it (src/catalog). */
const product = (status: string, deletedAt: string | null = null) => ({
  object: "product",
  id: "prod_sample",
  name: "Sample product",
  description: null,
  sku: "SAMPLE-1",
  status,
  price: { amount: 1999, currency: "USD", type: "one_time", recurring: null, version: 1 },
  inventory: {
    tracked: true,
    stockedQuantity: 50,
    reservedQuantity: 2,
    availableQuantity: 48,
    lowStockThreshold: 5,
    allowBackorder: false
  },
  images: [],
  metadata: {},
  deletedAt,
  createdAt: AT,
  updatedAt: AT
})
const customer = {
  id: "cus_sample",
  email: "shopper@example.com",
  firstName: "Sam",
  lastName: "Shopper",
  createdAt: AT
}
/** Research §2.2's payload of `inventory.*` events (src/catalog). */
const inventory = (stocked: number, reserved: number, previousState: string, state: string) => ({
  productId: "prod_sample",
  sku: "SAMPLE-1",
  stockedQuantity: stocked,
  reservedQuantity: reserved,
  availableQuantity: stocked - reserved,
  lowStockThreshold: 5,
  previousState,
  state
})

/** The `/v1` subscription object, as `subscription.*` events carry it (src/billing). */
const subscription = (status: string, canceledAt: string | null = null) => ({
  object: "subscription",
  id: "sub_sample",
  customerId: "cus_sample",
  productId: "prod_sample",
  planName: "Sample plan",
  quantity: 1,
  status,
  price: { amount: 999, currency: "USD", interval: "month", intervalCount: 1, usage: null },
  currentPeriodStart: AT,
  currentPeriodEnd: "2026-02-15T10:30:00.000Z",
  cancelAtPeriodEnd: false,
  canceledAt,
  createdAt: AT
})
/** The `/v1` invoice object, as `invoice.*` events carry it (src/billing). */
const invoice = (status: string, attemptCount: number) => ({
  object: "invoice",
  id: "in_sample",
  subscriptionId: "sub_sample",
  customerId: "cus_sample",
  billingReason: "subscription_cycle",
  periodStart: AT,
  periodEnd: "2026-02-15T10:30:00.000Z",
  lines: [
    {
      type: "subscription",
      quantity: 1,
      unitAmount: 999,
      amount: 999,
      period: { start: AT, end: "2026-02-15T10:30:00.000Z" }
    }
  ],
  subtotal: 999,
  total: 999,
  currency: "USD",
  status,
  attemptCount,
  createdAt: AT
})

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
  "product.created": product("active"),
  "product.updated": product("active"),
  "product.deleted": product("archived", AT),
  "customer.created": customer,
  "customer.updated": customer,
  "inventory.low_stock": inventory(10, 7, "in_stock", "low_stock"),
  "inventory.out_of_stock": inventory(10, 10, "low_stock", "out_of_stock"),
  "inventory.restocked": inventory(60, 10, "out_of_stock", "in_stock"),
  "subscription.created": subscription("active"),
  "subscription.updated": subscription("past_due"),
  "subscription.cancelled": subscription("canceled", AT),
  "subscription.trial_will_end": {
    ...subscription("trialing"),
    trialStart: "2026-01-05T10:30:00.000Z",
    trialEnd: "2026-01-18T10:30:00.000Z"
  },
  "invoice.paid": invoice("paid", 0),
  "invoice.payment_failed": invoice("open", 1)
}
