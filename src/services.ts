/** The services the composition root provides to handlers and processors. */
import type { SqlClient } from "@effect/sql"
import { Layer } from "effect"
import { OpsStatusLive, subscriptionSpecs } from "./audit/OpsStatus.js"
import type { AppConfig } from "./config.js"
import { CustomersLive } from "./customers/Customers.js"
import { CustomersPortLive } from "./customers/port.js"
import type { AppendSignal } from "./eventstore/AppendSignal.js"
import type { EventStore } from "./eventstore/EventStore.js"
import type { Keyring } from "./eventstore/Keyring.js"
import { PersistenceLive } from "./eventstore/layers.js"
import { Api } from "./http/Api.js"
import { AuthenticationLive, type CredentialVerifier, RouteScopes, routeScopesOf } from "./http/Auth.js"
import { RateLimiterLive } from "./http/RateLimit.js"
import { ReadinessLive } from "./http/Readiness.js"
import { IdentityLive } from "./identity/Identity.js"
import { PasswordHasherLive } from "./identity/passwords.js"
import { IdentityPortLive } from "./identity/port.js"
import { ProfileCacheLive } from "./identity/profiles.js"
import { type Revocations, RevocationsLive } from "./identity/Revocations.js"
import { type AccessTokens, AccessTokensLive } from "./identity/tokens.js"
import { CredentialVerifierLive } from "./identity/Verifier.js"
import { type CommandRunner, CommandRunnerLive } from "./kernel/CommandRunner.js"
import { type Projection, ProjectionsLive } from "./kernel/Projection.js"
import type { NotificationProviders } from "./notifications/channels.js"
import { NotificationsLive } from "./notifications/Notifications.js"
import { NotificationProvidersLive } from "./notifications/providers.js"
import { type DueWork, DueWorkLive } from "./processors/DueWork.js"
import { type Processor, SupervisorLive } from "./processors/Supervisor.js"
import { WebhooksLive } from "./webhooks/Webhooks.js"

export type ProcessorServices =
  | SqlClient.SqlClient
  | AppConfig
  | AppendSignal
  | EventStore
  | Keyring
  | CommandRunner
  | DueWork
  | NotificationProviders

/** Identity's services: signing keys, the revocation list, password hashing and the use cases. */
export const IdentityServicesLive = Layer.mergeAll(IdentityLive, IdentityPortLive).pipe(
  Layer.provideMerge(CustomersPortLive),
  Layer.provideMerge(
    Layer.mergeAll(AccessTokensLive, RevocationsLive, PasswordHasherLive, RateLimiterLive, ProfileCacheLive)
  )
)

/** The customers use cases (over identity's port: a shopper's login follows their record). */
export const CustomersServicesLive = CustomersLive.pipe(Layer.provideMerge(IdentityServicesLive))

/**
 * Everything handlers and processors use, over a migrated database. Requires `AppConfig`. The
 * credential verifier is identity's (`CredentialVerifierLive`) unless a test passes its own.
 */
export const servicesLayer = <E = never, R = never>(options: {
  readonly processors: ReadonlyArray<Processor<ProcessorServices>>
  readonly projections: ReadonlyArray<Projection>
  readonly credentials?: Layer.Layer<CredentialVerifier, E, R>
}) => {
  const credentials: Layer.Layer<
    CredentialVerifier,
    E,
    R | SqlClient.SqlClient | AccessTokens | Revocations
  > = options.credentials ?? CredentialVerifierLive
  return OpsStatusLive(subscriptionSpecs(options.processors)).pipe(
    Layer.provideMerge(
      AuthenticationLive.pipe(
        Layer.provideMerge(credentials),
        Layer.provideMerge(Layer.succeed(RouteScopes, routeScopesOf(Api)))
      )
    ),
    Layer.provideMerge(Layer.mergeAll(CustomersServicesLive, NotificationsLive, WebhooksLive)),
    Layer.provideMerge(NotificationProvidersLive),
    Layer.provideMerge(Layer.mergeAll(CommandRunnerLive, DueWorkLive, ReadinessLive)),
    Layer.provideMerge(
      Layer.mergeAll(
        // Below readiness and ops status: both report on the processors it supervises.
        SupervisorLive(),
        ProjectionsLive(options.projections)
      )
    ),
    Layer.provideMerge(PersistenceLive)
  )
}
