/**
 * The identity context's public face: what other contexts may ask of a user account (`IdentityPort`,
 * each command in the caller's transaction), its read lookups and its public event schemas. Nothing
 * else of `identity/` is imported from outside it. The port is implemented in `port.ts` and provided
 * at the composition root, so this file imports only identity's own events and types.
 */

import type { SqlError } from "@effect/sql/SqlError"
import { Context, type Effect } from "effect"
import type { EventMetadata } from "../eventstore/EventStore.js"
import type { CommandError } from "../kernel/CommandRunner.js"
import type { Recorded } from "../kernel/Decider.js"
import type { UserDecider } from "./decider.js"
import type { UserEvent } from "./events.js"

export * from "./events.js"
export { USERS as USERS_TABLE } from "./projection.js"
export { actorEmail, userEmailHolders } from "./queries.js"

export type UserCommandError = CommandError<Effect.Effect.Error<ReturnType<typeof UserDecider.decide>>>

/** What a command did to the user: its new events (none when nothing changed). */
export type UserEvents = ReadonlyArray<Recorded<UserEvent>>

/** The profile a shopper's login follows from their customer record (absent fields stay). */
export interface FollowedProfile {
  readonly email?: string | undefined
  readonly firstName?: string | undefined
  readonly lastName?: string | undefined
}

/**
 * A user command for another context (a shopper's login follows their customer record): on the
 * user `userId`, in the caller's transaction; what it revoked or changed reaches this process's
 * caches once that transaction commits.
 */
export type UserCommandPort<Args extends ReadonlyArray<unknown>> = (
  userId: string,
  ...args: Args
) => Effect.Effect<UserEvents, UserCommandError>

export interface IdentityPortShape {
  /** The login takes the record's email and names (unchanged ones are dropped). */
  readonly followProfile: UserCommandPort<[profile: FollowedProfile, metadata: EventMetadata]>
  /** No login, no refresh, sessions revoked. */
  readonly deactivate: UserCommandPort<[now: Date, metadata: EventMetadata]>
  readonly reactivate: UserCommandPort<[metadata: EventMetadata]>
  /** Appends `user.erased`; the personal data goes with `forgetKey`, last in the erasing transaction. */
  readonly erase: UserCommandPort<[now: Date, metadata: EventMetadata]>
  /** Destroys the user's data key (crypto-shredding): their personal fields read back as `Shredded`. */
  readonly forgetKey: (userId: string) => Effect.Effect<void, SqlError>
}

export class IdentityPort extends Context.Tag("identity/IdentityPort")<IdentityPort, IdentityPortShape>() {}
