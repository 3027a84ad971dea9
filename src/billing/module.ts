/**
 * The billing context (subscriptions and invoices), as the composition root (src/registry.ts,
 * src/Api.ts, src/services.ts) registers it: its events, projection, the renewal worker, routes and
 * handlers, and its use cases with `BillingDueWork` (what a test clock's advance runs). Its clock
 * (`BillingClock`) and usage (`UsageLedger`) come from the composition root.
 */
import { Layer } from "effect"
import { BillingRoutes } from "./Api.js"
import { BillingLive } from "./Billing.js"
import { billingEventTypes } from "./events.js"
import { BillingHttpLive } from "./Http.js"
import { SubscriptionsProjection } from "./projection.js"
import { BillingDueWorkLive, billingRenewals } from "./renewals.js"

export const billingModule = {
  name: "billing",
  eventTypes: billingEventTypes,
  projections: [SubscriptionsProjection],
  /** Renewals and trial ends at the period end, dunning retries, expiry of unpaid creations. */
  processors: [billingRenewals()],
  routes: BillingRoutes,
  http: BillingHttpLive,
  infra: Layer.empty,
  port: Layer.empty,
  /** Over the catalog and payments ports, the billing clock and the usage ledger: the use-case floor. */
  services: BillingDueWorkLive.pipe(Layer.provideMerge(BillingLive))
} as const
