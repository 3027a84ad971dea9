/**
 * What every use case needs around its commands: ONE transaction for all the streams it writes
 * (retried whole on a concurrency conflict when it owns it), local processors woken once it
 * committed, and the metadata (actor, request id) each event carries.
 */
import { Effect } from "effect"
import { CurrentRequestId } from "../base/RequestId.js"
import type { Actor, EventMetadata } from "../eventstore/EventStore.js"
import { CommandRunner } from "./CommandRunner.js"

/** `transact(effect)`: the use case's commands in one transaction (see `CommandRunner.transact`). */
export const makeTransact = Effect.map(CommandRunner, (runner) => runner.transact)

/** The metadata of events a request causes: who (type and id only), and which request. */
export const commandMetadata = (actor: Actor): Effect.Effect<EventMetadata> =>
  Effect.map(CurrentRequestId, (requestId): EventMetadata => {
    const who: Actor = { type: actor.type, id: actor.id }
    return requestId === undefined ? { actor: who } : { actor: who, requestId }
  })
