/**
 * The orders context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: its events, projection, routes and handlers, port and use cases.
 */
import { OrdersRoutes } from "./Api.js"
import { OrderCacheLive } from "./cache.js"
import { orderEventTypes } from "./events.js"
import { OrdersFastRoutes, OrdersHttpLive } from "./Http.js"
import { OrdersLive } from "./Orders.js"
import { OrdersPortLive } from "./port.js"
import { OrdersProjection } from "./projection.js"
import { refundRecovery } from "./refunds.js"

export const ordersModule = {
  name: "orders",
  eventTypes: orderEventTypes,
  projections: [OrdersProjection],
  /** Refunds whose payments call was never recorded → asked again with the same key. */
  processors: [refundRecovery()],
  routes: OrdersRoutes,
  http: OrdersHttpLive,
  fastRoutes: OrdersFastRoutes,
  infra: OrderCacheLive,
  port: OrdersPortLive,
  services: OrdersLive
} as const
