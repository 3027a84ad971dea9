/**
 * What every use case needs around its commands: ONE transaction for all the streams it writes
 * (retried whole on a stream-ordering conflict), local processors woken once it committed, and the
 * metadata (actor, request id) each event carries.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { CurrentRequestId } from "../base/RequestId.js"
import { AppendSignal } from "../eventstore/AppendSignal.js"
import type { Actor, EventMetadata } from "../eventstore/EventStore.js"
import { isConcurrencyConflict } from "./CommandRunner.js"

/**
 * `transact(effect)`: runs the effect's commands in one transaction. A stream-ordering conflict
 * cannot resolve inside the transaction (its id is older than the competing commit's), so the
 * whole transaction runs again.
 */
export const makeTransact = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const signal = yield* AppendSignal
  return <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    sql.withTransaction(effect).pipe(
      Effect.retry({ times: 3, while: isConcurrencyConflict }),
      Effect.tap(() => signal.notify)
    )
})

/** The metadata of events a request causes: who (type and id only), and which request. */
export const commandMetadata = (actor: Actor): Effect.Effect<EventMetadata> =>
  Effect.map(CurrentRequestId, (requestId): EventMetadata => {
    const who: Actor = { type: actor.type, id: actor.id }
    return requestId === undefined ? { actor: who } : { actor: who, requestId }
  })
