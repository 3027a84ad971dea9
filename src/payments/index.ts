/**
 * The payments context's public face: what other contexts (checkout, orders, billing) may use —
 * its read lookups, its objects and its public event schemas. It knows nothing of them: they hold
 * its ids and read its objects. Nothing else of `payments/` is imported from outside it.
 */
export * from "./events.js"
export type { PaymentIntentObject, PaymentObject, RefundObject } from "./objects.js"
export { findPayment, findPaymentIntent } from "./queries.js"
