/**
 * The service's catalogue: every event type, inline projection and background processor, by
 * bounded context. Each context's issue adds its own entries here; nothing else needs to change.
 */
import { customerEventTypes } from "./customers/events.js"
import { CustomersProjection } from "./customers/projection.js"
import type { AnyEventType } from "./eventstore/EventType.js"
import { idempotencyPurgeProcessor } from "./http/Idempotency.js"
import { identityEventTypes } from "./identity/events.js"
import { IdentityProjection } from "./identity/projection.js"
import type { Projection } from "./kernel/Projection.js"
import { automaticNotifications } from "./notifications/automatic.js"
import { notificationEventTypes, settingsEventTypes, templateEventTypes } from "./notifications/events.js"
import { NotificationsProjection } from "./notifications/projection.js"
import { notificationSender } from "./notifications/sender.js"
import { dueWorkPurgeProcessor } from "./processors/DueWork.js"
import type { Processor } from "./processors/Supervisor.js"
import type { ProcessorServices } from "./services.js"
import { webhookDeliveryWorker, webhookDispatcher, webhookHealthWorker } from "./webhooks/delivery.js"
import { deliveryEventTypes, webhookEventTypes } from "./webhooks/events.js"
import { WebhooksProjection } from "./webhooks/projection.js"

export const eventTypes: ReadonlyArray<AnyEventType> = [
  ...identityEventTypes,
  ...customerEventTypes,
  ...notificationEventTypes,
  ...templateEventTypes,
  ...settingsEventTypes,
  ...webhookEventTypes,
  ...deliveryEventTypes
]

export const projections: ReadonlyArray<Projection> = [
  IdentityProjection,
  CustomersProjection,
  NotificationsProjection,
  WebhooksProjection
]

/** Background processors run by `ROLE=worker|all`. */
export const processors: ReadonlyArray<Processor<ProcessorServices>> = [
  // HTTP: deletes idempotency keys past their 24 h.
  idempotencyPurgeProcessor(),
  // Due work: deletes finished items (webhook attempts, sends) a week after they finished.
  dueWorkPurgeProcessor(),
  // Notifications: trigger events → notifications; due notifications → providers.
  automaticNotifications(),
  notificationSender(),
  // Webhooks: public events → deliveries; due attempts → endpoints; failing endpoints → disabled.
  webhookDispatcher(),
  webhookDeliveryWorker(),
  webhookHealthWorker()
]
