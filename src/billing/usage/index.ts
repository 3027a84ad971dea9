/**
 * The usage context's public face: the `UsageLedger` it implements for renewals (the contract's,
 * src/billing/contract.ts), its event, and the pure aggregation the contract's figures follow.
 * Nothing else of `billing/usage/` is imported from outside it.
 */
export { UsageRecorded, usageEventTypes } from "./events.js"
export { UsageLedgerLive } from "./module.js"
