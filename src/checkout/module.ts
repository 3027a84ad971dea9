/**
 * The checkout context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: its events, projection, the expiry worker, routes and handlers, and its use cases
 * with the port the completion flow calls (both over the catalog, payments and orders ports).
 */
import { Effect, Layer } from "effect"
import { CheckoutRoutes } from "./Api.js"
import { Checkouts, CheckoutsLive } from "./Checkouts.js"
import { checkoutEventTypes } from "./events.js"
import { checkoutExpiry } from "./expiry.js"
import { CheckoutHttpLive } from "./Http.js"
import { CheckoutPort } from "./index.js"
import { CheckoutsProjection } from "./projection.js"

const CheckoutPortLive = Layer.effect(
  CheckoutPort,
  Effect.map(Checkouts, (checkouts) => CheckoutPort.of({ paymentChanged: checkouts.paymentChanged }))
)

export const checkoutModule = {
  name: "checkout",
  eventTypes: checkoutEventTypes,
  projections: [CheckoutsProjection],
  /** Expiry at `expiresAt`, and the settlement of late payments of expired checkouts. */
  processors: [checkoutExpiry()],
  routes: CheckoutRoutes,
  http: CheckoutHttpLive,
  infra: Layer.empty,
  port: Layer.empty,
  /** Over every context's port (catalog, payments, orders): on the use-case floor. */
  services: CheckoutPortLive.pipe(Layer.provideMerge(CheckoutsLive))
} as const
