/** Composition of the persistence stack: database → migrations → event store services. */
import { Effect, Layer } from "effect"
import { DatabaseLive } from "../db/Database.js"
import { migrate } from "../db/Migrations.js"
import { retryWhileUnreachable } from "../db/Reachability.js"
import { AppendSignalLive } from "./AppendSignal.js"
import { AppendWatchersLive } from "./AppendWatchers.js"
import { EventStoreLive } from "./EventStore.js"
import { KeyringLive } from "./Keyring.js"

/** Applies pending migrations when built (start-up). */
export const MigrationsLive = Layer.effectDiscard(
  Effect.flatMap(migrate(), (report) =>
    report.applied.length > 0 ? Effect.logInfo(`database schema at migration ${report.current}`) : Effect.void
  )
)

/** Event store services over an already-migrated database. */
export const EventStoreServicesLive = EventStoreLive.pipe(
  Layer.provideMerge(Layer.mergeAll(KeyringLive, AppendSignalLive, AppendWatchersLive))
)

/**
 * Database, migrated, with the event store on top. Requires `AppConfig`. Connecting and migrating
 * are retried while the server cannot be reached (DATABASE_CONNECT_TIMEOUT_SECONDS).
 */
export const PersistenceLive = EventStoreServicesLive.pipe(
  Layer.provideMerge(retryWhileUnreachable(MigrationsLive.pipe(Layer.provideMerge(DatabaseLive))))
)
