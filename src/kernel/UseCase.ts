/**
 * What every use case needs around its commands: ONE transaction for all the streams it writes
 * (retried whole on a concurrency conflict when it owns it), local processors woken once it
 * committed, and the metadata (actor, request id) each event carries.
 */
import { Effect } from "effect"
import { CurrentRequestId } from "../base/RequestId.js"
import { sha256Hex } from "../base/Sha256.js"
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

/**
 * The processor-call key prefix of a request carrying an `Idempotency-Key`: derived from the
 * requester, the key and the use case (`scope`), so the retry of a rolled-back request calls the
 * processor with the same keys, and another requester's same key never does.
 */
export const requestCallKeyPrefix = (scope: string, actor: Actor, requestKey: string): string =>
  `ik_${sha256Hex(`${scope}${actor.type}:${actor.id}:${requestKey}`).slice(0, 32)}`
