/**
 * The service's catalogue: every event type, inline projection and background processor, by
 * bounded context. Each context's issue adds its own entries here; nothing else needs to change.
 */
import type { AnyEventType } from "./eventstore/EventType.js"
import { idempotencyPurgeProcessor } from "./http/Idempotency.js"
import type { Projection } from "./kernel/Projection.js"
import type { Processor } from "./processors/Supervisor.js"
import type { ProcessorServices } from "./services.js"

export const eventTypes: ReadonlyArray<AnyEventType> = []

export const projections: ReadonlyArray<Projection> = []

/** Background processors run by `ROLE=worker|all`. */
export const processors: ReadonlyArray<Processor<ProcessorServices>> = [
  // HTTP: deletes idempotency keys past their 24 h.
  idempotencyPurgeProcessor()
]
