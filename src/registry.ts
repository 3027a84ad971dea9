/**
 * The service's catalogue: every bounded context's module, and from them every event type, inline
 * projection and background processor. Adding a context is adding its `module.ts` here (and its
 * routes and layers in src/Api.ts and src/services.ts, one line each).
 */
import { billingModule } from "./billing/module.js"
import { catalogModule } from "./catalog/module.js"
import { checkoutModule } from "./checkout/module.js"
import { customersModule } from "./customers/module.js"
import { eventsModule } from "./events/module.js"
import type { AnyEventType } from "./eventstore/EventType.js"
import { flowsModule } from "./flows/module.js"
import { idempotencyPurgeProcessor } from "./http/Idempotency.js"
import { identityModule } from "./identity/module.js"
import type { Projection } from "./kernel/Projection.js"
import { notificationsModule } from "./notifications/module.js"
import { ordersModule } from "./orders/module.js"
import { paymentsModule } from "./payments/module.js"
import { dueWorkPurgeProcessor } from "./processors/DueWork.js"
import type { Processor } from "./processors/Supervisor.js"
import type { ProcessorServices } from "./services.js"
import { webhooksModule } from "./webhooks/module.js"

/** The bounded contexts, in registration order (events, projections, processors, routes). */
export const modules = [
  identityModule,
  customersModule,
  notificationsModule,
  webhooksModule,
  catalogModule,
  eventsModule,
  paymentsModule,
  ordersModule,
  checkoutModule,
  billingModule,
  flowsModule
] as const

export const eventTypes: ReadonlyArray<AnyEventType> = modules.flatMap(
  (m): ReadonlyArray<AnyEventType> => m.eventTypes
)

export const projections: ReadonlyArray<Projection> = modules.flatMap(
  (m): ReadonlyArray<Projection> => m.projections
)

/** Background processors run by `ROLE=worker|all`. */
export const processors: ReadonlyArray<Processor<ProcessorServices>> = [
  // HTTP: deletes idempotency keys past their 24 h.
  idempotencyPurgeProcessor(),
  // Due work: deletes finished items (webhook attempts, sends) a week after they finished.
  dueWorkPurgeProcessor(),
  ...modules.flatMap((m): ReadonlyArray<Processor<ProcessorServices>> => m.processors)
]
