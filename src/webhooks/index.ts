/**
 * The webhooks context's public face: its public event schemas and the catalogue of event types an
 * endpoint may subscribe to. Nothing else of `webhooks/` is imported from outside it. (No other
 * context commands webhooks yet; its commands join this file when one does.)
 */
export { WEBHOOK_EVENT_TYPES } from "./catalogue.js"
export * from "./events.js"
