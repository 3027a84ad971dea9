/** Background processing: supervisor, leases, checkpointed subscriptions, durable due work. */
export * from "./DueWork.js"
export * from "./Lease.js"
export * from "./Subscription.js"
export * from "./Supervisor.js"
