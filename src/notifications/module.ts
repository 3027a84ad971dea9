/**
 * The notifications context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: its events, projection, processors, routes and handlers, providers and services.
 */
import { Layer } from "effect"
import { NotificationsRoutes } from "./Api.js"
import { automaticNotifications } from "./automatic.js"
import { notificationEventTypes, settingsEventTypes, templateEventTypes } from "./events.js"
import { NotificationsHttpLive } from "./Http.js"
import { NotificationsLive } from "./Notifications.js"
import { NotificationsProjection } from "./projection.js"
import { NotificationProvidersLive } from "./providers.js"
import { notificationSender } from "./sender.js"

export const notificationsModule = {
  name: "notifications",
  eventTypes: [...notificationEventTypes, ...templateEventTypes, ...settingsEventTypes],
  projections: [NotificationsProjection],
  /** Trigger events → notifications; due notifications → providers. */
  processors: [automaticNotifications(), notificationSender()],
  routes: NotificationsRoutes,
  http: NotificationsHttpLive,
  /** The email, SMS and push providers (the sender's, and the use cases'). */
  infra: NotificationProvidersLive,
  /** Other contexts request notifications with `requestNotification` (index.ts): no service needed. */
  port: Layer.empty,
  services: NotificationsLive
} as const
