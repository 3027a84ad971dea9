/**
 * Handlers of the identity groups: each reads the request, calls `Identity`, shapes the answer.
 * Scopes are checked by the authentication middleware from each route's `RequiredScope`.
 */
import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Effect, Layer } from "effect"
import { AppConfig } from "../config.js"
import { detached } from "../db/Transaction.js"
import { CurrentActor } from "../http/Auth.js"
import { clientIp } from "../http/RateLimit.js"
import { IdentityRoutes } from "./Api.js"
import { Identity } from "./Identity.js"
import { permissionsOf, scopesOfRole } from "./permissions.js"

const requestIp = Effect.all([HttpServerRequest.HttpServerRequest, AppConfig]).pipe(
  Effect.map(([request, config]) => clientIp(request, config.trustProxyHops))
)

/** `Authorization: Basic base64(client_id:client_secret)` (RFC 6749 §2.3.1), when sent. */
const basicClientCredentials = Effect.map(HttpServerRequest.HttpServerRequest, (request) => {
  const match = /^basic\s+(\S+)$/i.exec((request.headers.authorization ?? "").trim())
  if (!match?.[1]) return undefined
  const decoded = Buffer.from(match[1], "base64").toString("utf8")
  const colon = decoded.indexOf(":")
  if (colon < 0) return undefined
  const formDecode = (s: string) => {
    try {
      return decodeURIComponent(s.replace(/\+/g, " "))
    } catch {
      return s
    }
  }
  return { clientId: formDecode(decoded.slice(0, colon)), clientSecret: formDecode(decoded.slice(colon + 1)) }
})

export const AuthHttpLive = HttpApiBuilder.group(IdentityRoutes, "auth", (handlers) =>
  Effect.gen(function* () {
    const identity = yield* Identity
    return handlers
      .handle("register", ({ payload }) => identity.register(payload))
      .handle("login", ({ payload }) =>
        Effect.flatMap(requestIp, (ip) =>
          identity.login({ email: payload.email, password: payload.password, ip })
        )
      )
      .handle("refresh", ({ payload }) =>
        Effect.flatMap(requestIp, (ip) => identity.refresh({ refreshToken: payload.refreshToken, ip }))
      )
      .handle("token", ({ payload }) =>
        Effect.gen(function* () {
          const basic = yield* basicClientCredentials
          return yield* identity.clientCredentials({
            grantType: payload.grant_type,
            clientId: payload.client_id ?? basic?.clientId,
            clientSecret: payload.client_secret ?? basic?.clientSecret,
            scope: payload.scope,
            ip: yield* requestIp
          })
        })
      )
      .handle("requestPasswordReset", ({ payload }) =>
        // Answered at once, the work done apart: response time says nothing about the account.
        // Apart from the request's transaction too (an Idempotency-Key request runs in one).
        Effect.as(Effect.forkDaemon(detached(identity.requestPasswordReset(payload.email))), {
          status: "accepted" as const
        })
      )
      .handle("confirmPasswordReset", ({ payload }) => identity.confirmPasswordReset(payload))
  })
)

export const AccountHttpLive = HttpApiBuilder.group(IdentityRoutes, "account", (handlers) =>
  Effect.gen(function* () {
    const identity = yield* Identity
    return handlers
      .handle("logout", () => Effect.flatMap(CurrentActor, identity.logout))
      .handle("me", () =>
        Effect.gen(function* () {
          const actor = yield* CurrentActor
          const user = yield* identity.me(actor)
          return {
            id: user.userId,
            email: user.email,
            firstName: user.firstName,
            lastName: user.lastName,
            createdAt: user.createdAt,
            role: user.role,
            permissions: permissionsOf(scopesOfRole(user.role)),
            lastLoginAt: user.lastLoginAt,
            ...(user.customerId === null ? {} : { customerId: user.customerId })
          }
        })
      )
  })
)

export const ApiKeysHttpLive = HttpApiBuilder.group(IdentityRoutes, "apikeys", (handlers) =>
  Effect.gen(function* () {
    const identity = yield* Identity
    return handlers
      .handle("create", ({ payload }) =>
        Effect.flatMap(CurrentActor, (actor) => identity.createApiKey(actor, payload))
      )
      .handle("list", ({ urlParams }) => identity.listApiKeys(urlParams))
      .handle("revoke", ({ path }) =>
        Effect.flatMap(CurrentActor, (actor) => identity.revokeApiKey(actor, path.id))
      )
  })
)

export const OAuthClientsHttpLive = HttpApiBuilder.group(IdentityRoutes, "oauthClients", (handlers) =>
  Effect.gen(function* () {
    const identity = yield* Identity
    return handlers
      .handle("create", ({ payload }) =>
        Effect.flatMap(CurrentActor, (actor) =>
          identity.createClient(actor, { name: payload.name, scopes: payload.scopes })
        )
      )
      .handle("list", ({ urlParams }) => identity.listClients(urlParams))
      .handle("remove", ({ path }) =>
        Effect.flatMap(CurrentActor, (actor) => identity.deleteClient(actor, path.id))
      )
  })
)

export const IdentityHttpLive = Layer.mergeAll(
  AuthHttpLive,
  AccountHttpLive,
  ApiKeysHttpLive,
  OAuthClientsHttpLive
)
