/**
 * The notifications context's public face: the one operation that requests a notification (and
 * queues its send), the built-in template other contexts may name, and the public event schemas.
 * Nothing else of `notifications/` is imported from outside it.
 */
export type { Channel, Trigger } from "./channels.js"
export type { NotificationRequest } from "./decider.js"
export {
  NotificationCancelled,
  type NotificationEvent,
  NotificationFailed,
  NotificationRequested,
  NotificationSent,
  notificationEventTypes
} from "./events.js"
export { type RequestOptions, requestNotification } from "./request.js"
export { WEBHOOK_DISABLED_TEMPLATE_ID } from "./templates.js"
