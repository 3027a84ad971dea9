/**
 * The billing context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: its three parts (src/billing/contract.ts) — subscriptions and invoices (this folder),
 * usage (`usage/`) and test clocks (`testClocks/`) — with their events, projections, the renewal
 * worker, routes and handlers. On the port floor: the usage ledger renewals read and the clock a
 * customer lives on; on top: subscriptions' use cases with `BillingDueWork`, which a test clock's
 * advance runs, and the usage and test clock use cases.
 */
import { Layer } from "effect"
import { BillingRoutes } from "./Api.js"
import { BillingLive } from "./Billing.js"
import { customerErasures } from "./erasures.js"
import { billingEventTypes } from "./events.js"
import { BillingHttpLive } from "./Http.js"
import { SubscriptionsProjection } from "./projection.js"
import { BillingDueWorkLive, billingRenewals } from "./renewals.js"
import { testClocksModule } from "./testClocks/module.js"
import { usageModule } from "./usage/module.js"

const subscriptionsServices = BillingDueWorkLive.pipe(Layer.provideMerge(BillingLive))

export const billingModule = {
  name: "billing",
  eventTypes: [...billingEventTypes, ...usageModule.eventTypes, ...testClocksModule.eventTypes],
  projections: [SubscriptionsProjection, ...usageModule.projections, ...testClocksModule.projections],
  /**
   * Renewals and trial ends at the period end, dunning retries, expiry of unpaid creations; an erased
   * customer's subscriptions canceled.
   */
  processors: [
    billingRenewals(),
    customerErasures(),
    ...usageModule.processors,
    ...testClocksModule.processors
  ],
  routes: BillingRoutes.addHttpApi(usageModule.routes).addHttpApi(testClocksModule.routes),
  http: Layer.mergeAll(BillingHttpLive, usageModule.http, testClocksModule.http),
  fastRoutes: usageModule.fastRoutes,
  infra: Layer.mergeAll(usageModule.infra, testClocksModule.infra),
  port: Layer.mergeAll(usageModule.port, testClocksModule.port),
  services: Layer.mergeAll(usageModule.services, testClocksModule.services).pipe(
    Layer.provideMerge(subscriptionsServices)
  )
} as const
