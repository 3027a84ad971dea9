/**
 * The billing context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it. Billing is built in parts (src/billing/contract.ts): usage (`usage/module.ts`) is the
 * only part on this branch; subscriptions/invoices and test clocks add theirs to these lists when
 * they are merged.
 */
import { usageModule } from "./usage/module.js"

export const billingModule = {
  name: "billing",
  eventTypes: [...usageModule.eventTypes],
  projections: [...usageModule.projections],
  processors: [...usageModule.processors],
  routes: usageModule.routes,
  http: usageModule.http,
  infra: usageModule.infra,
  port: usageModule.port,
  services: usageModule.services
} as const
