/**
 * The flows, as the composition root (src/registry.ts) registers them: processors only (no events of
 * their own, no read models, no routes).
 */
import { Layer } from "effect"
import { checkoutCompletion } from "./checkoutCompletion.js"

export const flowsModule = {
  name: "flows",
  eventTypes: [],
  projections: [],
  /** Payment intent → checkout → order, for payments that do not come through the checkout's route. */
  processors: [checkoutCompletion()],
  infra: Layer.empty,
  port: Layer.empty,
  services: Layer.empty
} as const
