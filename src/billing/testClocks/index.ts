/**
 * The test clocks part of billing, its public face: the clock events and what the rest of billing
 * (and the composition) may use. `BillingClock` itself is the contract's (../contract.ts).
 */
export * from "./events.js"
export { fixedClock } from "./TestClocks.js"
