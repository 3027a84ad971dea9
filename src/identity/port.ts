/** Identity's port (`IdentityPort` in `index.ts`): user commands other contexts run in their transaction. */
import { Effect, Layer } from "effect"
import { afterCommit } from "../db/Transaction.js"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { EventStore } from "../eventstore/EventStore.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import { type UserCommand, UserDecider, userStream } from "./decider.js"
import { IdentityPort } from "./index.js"
import { ProfileCache } from "./profiles.js"
import { Revocations } from "./Revocations.js"

export const IdentityPortLive = Layer.effect(
  IdentityPort,
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const store = yield* EventStore
    const revocations = yield* Revocations
    const profiles = yield* ProfileCache
    /**
     * The command in the caller's transaction; once that commits, what it revoked or changed is
     * applied to this process's caches (other processes poll for it).
     */
    const run = (userId: string, command: UserCommand, metadata: EventMetadata) =>
      Effect.gen(function* () {
        const { events } = yield* runner.execute(UserDecider, userStream(userId), command, { metadata })
        const first = events[0]
        if (first !== undefined) {
          yield* afterCommit(
            `identity-caches:${first.eventId}`,
            Effect.zipRight(revocations.recordEvents(events), profiles.forget(userId))
          )
        }
        return events
      })
    return IdentityPort.of({
      followProfile: (userId, profile, metadata) =>
        run(
          userId,
          {
            _tag: "ChangeProfile",
            ...(profile.email === undefined ? {} : { email: profile.email }),
            ...(profile.firstName === undefined ? {} : { firstName: profile.firstName }),
            ...(profile.lastName === undefined ? {} : { lastName: profile.lastName })
          },
          metadata
        ),
      deactivate: (userId, now, metadata) => run(userId, { _tag: "Deactivate", now }, metadata),
      reactivate: (userId, metadata) => run(userId, { _tag: "Reactivate" }, metadata),
      erase: (userId, now, metadata) => run(userId, { _tag: "Erase", now }, metadata),
      forgetKey: (userId) => Effect.asVoid(store.forgetSubject(userId))
    })
  })
)
