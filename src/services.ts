/**
 * The services the composition root provides to handlers and processors, floor by floor: the
 * persistence stack, the kernel and processors' services, every context's infrastructure, then
 * every context's port (which needs only those), then every context's use cases (which may call any
 * port, inside their own transaction).
 */
import type { SqlClient } from "@effect/sql"
import { Layer } from "effect"
import { Api } from "./Api.js"
import { OpsStatusLive, subscriptionSpecs } from "./audit/OpsStatus.js"
import { billingModule } from "./billing/module.js"
import { catalogModule } from "./catalog/module.js"
import { checkoutModule } from "./checkout/module.js"
import type { AppConfig } from "./config.js"
import { customersModule } from "./customers/module.js"
import { eventsModule } from "./events/module.js"
import type { AppendSignal } from "./eventstore/AppendSignal.js"
import type { EventStore } from "./eventstore/EventStore.js"
import { KnownEventTypesLive } from "./eventstore/EventType.js"
import type { Keyring } from "./eventstore/Keyring.js"
import { PersistenceLive } from "./eventstore/layers.js"
import { AuthenticationLive, type CredentialVerifier, RouteScopes, routeScopesOf } from "./http/Auth.js"
import { RateLimiterLive } from "./http/RateLimit.js"
import { ReadinessLive } from "./http/Readiness.js"
import { identityModule } from "./identity/module.js"
import { type CommandRunner, CommandRunnerLive } from "./kernel/CommandRunner.js"
import { type Projection, ProjectionsLive } from "./kernel/Projection.js"
import { notificationsModule } from "./notifications/module.js"
import { ordersModule } from "./orders/module.js"
import { paymentsModule } from "./payments/module.js"
import { type DueWork, DueWorkLive } from "./processors/DueWork.js"
import { type Processor, SupervisorLive } from "./processors/Supervisor.js"
import { eventTypes } from "./registry.js"
import { webhooksModule } from "./webhooks/module.js"

/** What background processors may require. */
export type ProcessorServices =
  | SqlClient.SqlClient
  | AppConfig
  | AppendSignal
  | EventStore
  | Keyring
  | CommandRunner
  | DueWork
  | Layer.Layer.Success<typeof notificationsModule.infra>
  | Layer.Layer.Success<typeof paymentsModule.infra>
  | Layer.Layer.Success<typeof paymentsModule.port>
  | Layer.Layer.Success<typeof catalogModule.port>
  | Layer.Layer.Success<typeof checkoutModule.services>
  | Layer.Layer.Success<typeof billingModule.services>

/** Every context's use cases, over every context's port, over every context's infrastructure. */
export const ContextServicesLive = Layer.mergeAll(
  identityModule.services,
  customersModule.services,
  notificationsModule.services,
  webhooksModule.services,
  catalogModule.services,
  eventsModule.services,
  paymentsModule.services,
  ordersModule.services,
  checkoutModule.services,
  billingModule.services
).pipe(
  Layer.provideMerge(
    Layer.mergeAll(
      identityModule.port,
      customersModule.port,
      notificationsModule.port,
      webhooksModule.port,
      catalogModule.port,
      paymentsModule.port,
      ordersModule.port,
      checkoutModule.port,
      billingModule.port
    )
  ),
  Layer.provideMerge(
    Layer.mergeAll(
      identityModule.infra,
      customersModule.infra,
      notificationsModule.infra,
      webhooksModule.infra,
      catalogModule.infra,
      paymentsModule.infra,
      ordersModule.infra,
      checkoutModule.infra,
      billingModule.infra,
      RateLimiterLive
    )
  )
)

/**
 * Everything handlers and processors use, over a migrated database. Requires `AppConfig`. The
 * credential verifier is identity's unless a test passes its own.
 */
export const servicesLayer = <E = never, R = never>(options: {
  readonly processors: ReadonlyArray<Processor<ProcessorServices>>
  readonly projections: ReadonlyArray<Projection>
  readonly credentials?: Layer.Layer<CredentialVerifier, E, R>
}) => {
  const credentials: Layer.Layer<
    CredentialVerifier,
    E,
    R | Layer.Layer.Context<typeof identityModule.credentials>
  > = options.credentials ?? identityModule.credentials
  return OpsStatusLive(subscriptionSpecs(options.processors)).pipe(
    Layer.provideMerge(
      AuthenticationLive.pipe(
        Layer.provideMerge(credentials),
        Layer.provideMerge(Layer.succeed(RouteScopes, routeScopesOf(Api)))
      )
    ),
    Layer.provideMerge(ContextServicesLive),
    Layer.provideMerge(
      Layer.mergeAll(
        CommandRunnerLive,
        DueWorkLive,
        ReadinessLive.pipe(Layer.provide(identityModule.readiness))
      )
    ),
    Layer.provideMerge(
      Layer.mergeAll(
        // Below readiness and ops status: both report on the processors it supervises.
        SupervisorLive(),
        ProjectionsLive(options.projections)
      )
    ),
    // Every event type, for redacting secrets where stored events leave the process (audit feed).
    Layer.provideMerge(Layer.merge(PersistenceLive, KnownEventTypesLive(eventTypes)))
  )
}
