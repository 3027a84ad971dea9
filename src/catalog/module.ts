/**
 * The catalog context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: its events, projection, routes and handlers, port and services.
 */
import { CatalogRoutes } from "./Api.js"
import { CatalogLive } from "./Catalog.js"
import { ProductCacheLive } from "./cache.js"
import { productEventTypes } from "./events.js"
import { CatalogFastRoutes, CatalogHttpLive } from "./Http.js"
import { CatalogPortLive } from "./port.js"
import { CatalogProjection } from "./projection.js"

export const catalogModule = {
  name: "catalog",
  eventTypes: productEventTypes,
  projections: [CatalogProjection],
  processors: [],
  routes: CatalogRoutes,
  http: CatalogHttpLive,
  fastRoutes: CatalogFastRoutes,
  infra: ProductCacheLive,
  port: CatalogPortLive,
  services: CatalogLive
} as const
