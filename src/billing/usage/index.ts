/**
 * The usage part's public face (within billing): its event, and the `UsageLedger` layer (the
 * contract's, src/billing/contract.ts) renewals read usage through.
 */
export { UsageRecorded, usageEventTypes } from "./events.js"
export { UsageLedgerLive } from "./module.js"
