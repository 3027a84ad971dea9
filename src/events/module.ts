/**
 * The events context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: no events, projections or processors of its own (it reads the public events the
 * other contexts' commands write), its routes and handlers, and its read service.
 */
import { Layer } from "effect"
import { EventsRoutes } from "./Api.js"
import { EventFeedLive } from "./EventFeed.js"
import { EventsHttpLive } from "./Http.js"

export const eventsModule = {
  name: "events",
  eventTypes: [],
  projections: [],
  processors: [],
  routes: EventsRoutes,
  http: EventsHttpLive,
  infra: Layer.empty,
  port: Layer.empty,
  services: EventFeedLive
} as const
