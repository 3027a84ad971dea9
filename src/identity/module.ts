/**
 * The identity context, as the composition root (src/registry.ts, src/Api.ts, src/services.ts)
 * registers it: its events, projection, routes and handlers, port and services.
 */
import { Layer } from "effect"
import { IdentityRoutes } from "./Api.js"
import { AdminBootstrapLive, AdminReadinessLive } from "./admin.js"
import { identityEventTypes } from "./events.js"
import { IdentityHttpLive } from "./Http.js"
import { IdentityLive } from "./Identity.js"
import { PasswordHasherLive } from "./passwords.js"
import { IdentityPortLive } from "./port.js"
import { ProfileCacheLive } from "./profiles.js"
import { IdentityProjection } from "./projection.js"
import { RevocationsLive } from "./Revocations.js"
import { AccessTokensLive } from "./tokens.js"
import { CredentialVerifierLive } from "./Verifier.js"

export const identityModule = {
  name: "identity",
  eventTypes: identityEventTypes,
  projections: [IdentityProjection],
  processors: [],
  routes: IdentityRoutes,
  http: IdentityHttpLive,
  /** What its port and use cases share: signing keys, the revocation list, hashing, the profile cache. */
  infra: Layer.mergeAll(AccessTokensLive, RevocationsLive, PasswordHasherLive, ProfileCacheLive),
  port: IdentityPortLive,
  services: IdentityLive,
  /** The authentication middleware's credential check (tests may pass their own). */
  credentials: CredentialVerifierLive,
  /** The first admin from `ADMIN_EMAIL`/`ADMIN_PASSWORD`, at start-up. */
  bootstrap: AdminBootstrapLive,
  /** `/ready`'s check that the ADMIN_EMAIL admin exists. */
  readiness: AdminReadinessLive
} as const
