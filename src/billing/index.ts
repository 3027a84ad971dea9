/**
 * The billing context's public face: the contract its parts share (usage, test clocks), the
 * subscription and invoice objects, the due-work kinds, and the public event schemas. Nothing else
 * of `billing/` (outside its own parts) is imported from outside it.
 */

export { BILLING_KINDS, EXPIRE_KIND, invoiceIdOf, RENEW_KIND, RETRY_KIND, renewalKeyOf } from "./Billing.js"
export * from "./contract.js"
export * from "./events.js"
export type { InvoiceObject, SubscriptionObject } from "./objects.js"
export * from "./usage/index.js"
