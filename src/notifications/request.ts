/**
 * Requesting a notification: the ONE way anything asks for a notification (the HTTP route, automatic
 * triggers, other contexts' alerts). The request is appended and its send queued as due work in the
 * caller's transaction, so a notification is never requested without being queued; the sender is
 * woken after that transaction commits (db/Transaction).
 */
import { Effect } from "effect"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Time from "../kernel/Time.js"
import { DueWork } from "../processors/DueWork.js"
import { NotificationDecider, type NotificationRequest, notificationStream } from "./decider.js"

/** The due-work kind of a notification's send (key = notification id). */
export const SEND_KIND = "notification.send"

export interface RequestOptions {
  /** Who asked (and which request): the event metadata. */
  readonly metadata: EventMetadata
  /** When the send is due unless the request is scheduled: now by default. */
  readonly dueAt?: Date | undefined
}

/**
 * Requests the notification and queues its send (due at `scheduledAt`, else `dueAt`, else now).
 * With a derived id, a request seen again appends nothing and queues nothing: `requested` is false.
 */
export const requestNotification = (request: NotificationRequest, options: RequestOptions) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const work = yield* DueWork
    const result = yield* runner.execute(
      NotificationDecider,
      notificationStream(request.notificationId),
      { _tag: "Request", ...request },
      { metadata: options.metadata }
    )
    if (result.events.length === 0) return { requested: false }
    const dueAt = request.scheduledAt ?? options.dueAt ?? (yield* Time.now)
    yield* work.schedule({ kind: SEND_KIND, key: request.notificationId, dueAt, replace: false })
    return { requested: true }
  })
