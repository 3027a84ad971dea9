/** The services the composition root provides to handlers and processors. */
import type { SqlClient } from "@effect/sql"
import { Layer } from "effect"
import { OpsStatusLive, subscriptionSpecs } from "./audit/OpsStatus.js"
import type { AppConfig } from "./config.js"
import { PersistenceLive } from "./db/layers.js"
import type { AppendSignal } from "./eventstore/AppendSignal.js"
import type { EventStore } from "./eventstore/EventStore.js"
import type { Keyring } from "./eventstore/Keyring.js"
import { AuthenticationLive, type CredentialVerifier } from "./http/Auth.js"
import { ReadinessLive } from "./http/Readiness.js"
import { type CommandRunner, CommandRunnerLive } from "./kernel/CommandRunner.js"
import { type Projection, ProjectionsLive } from "./kernel/Projection.js"
import { type DueWork, DueWorkLive } from "./processors/DueWork.js"
import { type Processor, SupervisorLive } from "./processors/Supervisor.js"

export type ProcessorServices =
  | SqlClient.SqlClient
  | AppConfig
  | AppendSignal
  | EventStore
  | Keyring
  | CommandRunner
  | DueWork

/**
 * Everything handlers and processors use, over a migrated database. Requires `AppConfig`; the
 * credential verifier comes from the identity context (tests pass their own).
 */
export const servicesLayer = <E, R>(options: {
  readonly processors: ReadonlyArray<Processor<ProcessorServices>>
  readonly projections: ReadonlyArray<Projection>
  readonly credentials: Layer.Layer<CredentialVerifier, E, R>
}) =>
  OpsStatusLive(subscriptionSpecs(options.processors)).pipe(
    Layer.provideMerge(Layer.mergeAll(CommandRunnerLive, DueWorkLive, ReadinessLive)),
    Layer.provideMerge(
      Layer.mergeAll(
        // Below readiness and ops status: both report on the processors it supervises.
        SupervisorLive(),
        ProjectionsLive(options.projections),
        AuthenticationLive.pipe(Layer.provideMerge(options.credentials))
      )
    ),
    Layer.provideMerge(PersistenceLive)
  )
