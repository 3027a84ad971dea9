/**
 * The billing context's public face: the contract its parts build against (src/billing/contract.ts)
 * and each part's public face. Usage is the only part on this branch; subscriptions/invoices and
 * test clocks join here when they are merged.
 */
export * from "./contract.js"
export * from "./usage/index.js"
