/**
 * The catalog context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: its events, projection, routes and handlers, port and services.
 */
import { Layer } from "effect"
import { CatalogRoutes } from "./Api.js"
import { CatalogLive } from "./Catalog.js"
import { productEventTypes } from "./events.js"
import { CatalogHttpLive } from "./Http.js"
import { CatalogPortLive } from "./port.js"
import { CatalogProjection } from "./projection.js"

export const catalogModule = {
  name: "catalog",
  eventTypes: productEventTypes,
  projections: [CatalogProjection],
  processors: [],
  routes: CatalogRoutes,
  http: CatalogHttpLive,
  infra: Layer.empty,
  port: CatalogPortLive,
  services: CatalogLive
} as const
