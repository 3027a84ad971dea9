/**
 * The customers context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: its events, projection, routes and handlers, port and services.
 */
import { Layer } from "effect"
import { CustomersRoutes } from "./Api.js"
import { CustomersLive } from "./Customers.js"
import { customerEventTypes } from "./events.js"
import { CustomersFastRoutes, CustomersHttpLive } from "./Http.js"
import { CustomersPortLive } from "./port.js"
import { CustomersProjection } from "./projection.js"

export const customersModule = {
  name: "customers",
  eventTypes: customerEventTypes,
  projections: [CustomersProjection],
  processors: [],
  routes: CustomersRoutes,
  http: CustomersHttpLive,
  fastRoutes: CustomersFastRoutes,
  infra: Layer.empty,
  port: CustomersPortLive,
  services: CustomersLive
} as const
