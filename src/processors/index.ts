/**
 * Background processing: supervisor, leases, checkpointed subscriptions, durable due work, the
 * process-manager runner and projection rebuilds.
 */
export * from "./DueWork.js"
export * from "./Lease.js"
export * from "./ProcessManagerRunner.js"
export * from "./Rebuild.js"
export * from "./Subscription.js"
export * from "./Supervisor.js"
