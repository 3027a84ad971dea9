/**
 * The usage context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: its event, projection, routes and handlers, the `UsageLedger` (its port: what
 * renewals read) and its use cases.
 */
import { Layer } from "effect"
import { UsageLedger } from "../contract.js"
import { UsageRoutes } from "./Api.js"
import { usageEventTypes } from "./events.js"
import { UsageFastRoutes, UsageHttpLive } from "./Http.js"
import { UsageProjection } from "./projection.js"
import { makeUsageLedger, UsageLive } from "./Usage.js"

export const UsageLedgerLive = Layer.effect(UsageLedger, makeUsageLedger)

export const usageModule = {
  name: "usage",
  eventTypes: usageEventTypes,
  projections: [UsageProjection],
  processors: [],
  routes: UsageRoutes,
  http: UsageHttpLive,
  fastRoutes: UsageFastRoutes,
  infra: Layer.empty,
  port: UsageLedgerLive,
  services: UsageLive
} as const
