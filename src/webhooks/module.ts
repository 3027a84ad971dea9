/**
 * The webhooks context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: its events, projection, processors, routes and handlers, and services.
 */
import { Layer } from "effect"
import { WebhooksRoutes } from "./Api.js"
import { webhookDeliveryWorker, webhookDispatcher, webhookHealthWorker } from "./delivery.js"
import { deliveryEventTypes, webhookEventTypes } from "./events.js"
import { WebhooksHttpLive } from "./Http.js"
import { WebhooksProjection } from "./projection.js"
import { WebhooksLive } from "./Webhooks.js"

export const webhooksModule = {
  name: "webhooks",
  eventTypes: [...webhookEventTypes, ...deliveryEventTypes],
  projections: [WebhooksProjection],
  /** Public events → deliveries; due attempts → endpoints; failing endpoints → disabled. */
  processors: [webhookDispatcher(), webhookDeliveryWorker(), webhookHealthWorker()],
  routes: WebhooksRoutes,
  http: WebhooksHttpLive,
  infra: Layer.empty,
  port: Layer.empty,
  services: WebhooksLive
} as const
