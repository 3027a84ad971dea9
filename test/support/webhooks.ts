/**
 * The whole app with the webhook processors running (dispatcher, attempt worker, health clock) and
 * the notification sender (owner alerts go to the SMTP sink), plus a real local receiver. Helpers
 * publish public events the way a command's transaction does.
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer } from "effect"
import { insertPublicEvents } from "../../src/eventstore/PublicEvents.js"
import type { AuthenticatedActor } from "../../src/http/Auth.js"
import * as Ids from "../../src/kernel/Ids.js"
import * as Time from "../../src/kernel/Time.js"
import { notificationSender } from "../../src/notifications/sender.js"
import { webhookDeliveryWorker, webhookDispatcher, webhookHealthWorker } from "../../src/webhooks/delivery.js"
import { type NotificationsHttpOptions, notificationsHttp } from "./notifications.js"
import { makeReceiver, type Receiver } from "./receiver.js"

export class TestReceiver extends Context.Tag("test/WebhookReceiver")<TestReceiver, Receiver>() {}

export const TestReceiverLive = Layer.scoped(TestReceiver, makeReceiver)

export const WEBHOOK_PROCESSORS = [
  webhookDispatcher(),
  webhookDeliveryWorker(),
  webhookHealthWorker(),
  notificationSender()
]

/** App + webhook processors + SMTP sink + receiver over a fresh database. */
export const webhooksHttp = (options: NotificationsHttpOptions = {}) =>
  notificationsHttp({
    ...options,
    processors: options.processors === false ? false : WEBHOOK_PROCESSORS
  }).pipe(Layer.provideMerge(TestReceiverLive))

/** Staff acting through the use cases directly. */
export const STAFF: AuthenticatedActor = {
  type: "user",
  id: "usr_webhook_test",
  role: "admin",
  scopes: new Set(["admin"])
}

/** Publishes one public event now (Clock time), in its own transaction, as a command would. */
export const publish = (type: string, data: Readonly<Record<string, unknown>>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const id = yield* Ids.make("evt")
    const occurredAt = yield* Time.now
    yield* sql.withTransaction(
      insertPublicEvents([
        { id, type, data, occurredAt, sourceEventId: randomUUID(), streamId: `test-${id}` }
      ])
    )
    return { id, type, data, occurredAt }
  })
