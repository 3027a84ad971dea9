/**
 * The payments context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: its events, projection, the processor-call safety net, routes and handlers, the
 * configured processor and its use cases.
 */
import { Layer } from "effect"
import { PaymentsRoutes } from "./Api.js"
import { paymentEventTypes } from "./events.js"
import { PaymentsHttpLive } from "./Http.js"
import { PaymentsLive } from "./Payments.js"
import { PaymentsPortLive } from "./port.js"
import { PaymentProcessorLive } from "./processor.js"
import { PaymentsProjection } from "./projection.js"
import { processorCallRecovery } from "./recovery.js"
import { StripeEventsLive } from "./stripeEvents.js"

export const paymentsModule = {
  name: "payments",
  eventTypes: paymentEventTypes,
  projections: [PaymentsProjection],
  /** Processor calls whose outcome was never recorded → asked again with the same key. */
  processors: [processorCallRecovery()],
  routes: PaymentsRoutes,
  http: PaymentsHttpLive,
  infra: PaymentProcessorLive,
  port: PaymentsPortLive,
  services: Layer.merge(PaymentsLive, StripeEventsLive)
} as const
