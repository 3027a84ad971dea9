/**
 * Billing's test clocks, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers them: events, projection, routes and handlers; on the port floor `BillingClock`
 * (contract) and what customers ask when one is created on a clock; the use cases on top.
 */
import { Layer } from "effect"
import { TestClocksRoutes } from "./Api.js"
import { testClockEventTypes } from "./events.js"
import { TestClocksHttpLive } from "./Http.js"
import { TestClocksProjection } from "./projection.js"
import { BillingClockLive, CustomerClocksLive, TestClocksLive } from "./TestClocks.js"

export const testClocksModule = {
  name: "billing-test-clocks",
  eventTypes: testClockEventTypes,
  projections: [TestClocksProjection],
  processors: [],
  routes: TestClocksRoutes,
  http: TestClocksHttpLive,
  infra: Layer.empty,
  /** Below every use case: subscriptions and usage ask `BillingClock`, customers ask `CustomerClocks`. */
  port: Layer.merge(BillingClockLive, CustomerClocksLive),
  services: TestClocksLive
} as const
