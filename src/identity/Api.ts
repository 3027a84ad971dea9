/**
 * The identity HTTP contract (spec §4.1, §5, §7.1; design/API.md "Auth"): registration, login,
 * refresh, logout, the current user, the client credentials grant, password reset, API keys and
 * OAuth clients.
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ApiBase } from "../http/ApiBase.js"
import { Authentication } from "../http/Auth.js"
import { byId, scoped } from "../http/Endpoints.js"
import { Conflict, Forbidden, NotFound, TooManyRequests, Unauthorized } from "../http/errors.js"
import { StoredEmail, Text } from "../http/Fields.js"
import { ListOf, PageParams } from "../http/Lists.js"
import { EmailSchema } from "../kernel/Email.js"

const Name = (field: string) => Text(field)

// --- Shapes ----------------------------------------------------------------------------------------

export const AuthUser = Schema.Struct({
  id: Schema.String,
  email: StoredEmail,
  firstName: Schema.String,
  lastName: Schema.String,
  createdAt: Schema.Date
}).annotations({ identifier: "AuthUser" })

export const Me = Schema.Struct({
  ...AuthUser.fields,
  role: Schema.Literal("admin", "customer"),
  permissions: Schema.Array(Schema.String),
  lastLoginAt: Schema.Date,
  customerId: Schema.optional(Schema.String)
}).annotations({ identifier: "Me" })

const tokenFields = {
  accessToken: Schema.String,
  tokenType: Schema.Literal("Bearer"),
  expiresIn: Schema.Int,
  scope: Schema.String,
  issuedAt: Schema.Date
}

export const TokenSet = Schema.Struct({
  ...tokenFields,
  refreshToken: Schema.String,
  userId: Schema.String
}).annotations({ identifier: "TokenSet" })

export const Registration = Schema.Struct({
  ...tokenFields,
  refreshToken: Schema.String,
  userId: Schema.String,
  user: AuthUser
}).annotations({ identifier: "Registration" })

export const ClientToken = Schema.Struct(tokenFields).annotations({ identifier: "ClientToken" })

export const ApiKey = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  /** The full secret: only in the creation response. */
  key: Schema.optional(Schema.String),
  scopes: Schema.Array(Schema.String),
  last4: Schema.String,
  createdAt: Schema.Date
}).annotations({ identifier: "ApiKey" })

export const OAuthClient = Schema.Struct({
  id: Schema.String,
  clientId: Schema.String,
  /** Only in the creation response. */
  clientSecret: Schema.optional(Schema.String),
  name: Schema.String,
  scopes: Schema.Array(Schema.String),
  createdAt: Schema.Date
}).annotations({ identifier: "OAuthClient" })

export const Accepted = Schema.Struct({ status: Schema.Literal("accepted") }).annotations({
  identifier: "Accepted"
})

// --- Public endpoints (no credential) --------------------------------------------------------------

export class AuthApi extends HttpApiGroup.make("auth")
  .add(
    HttpApiEndpoint.post("register", "/auth/register")
      .setPayload(
        Schema.Struct({
          email: EmailSchema,
          password: Schema.String,
          firstName: Name("firstName"),
          lastName: Name("lastName")
        })
      )
      .addSuccess(Registration, { status: 201 })
      .addError(Conflict)
      .addError(TooManyRequests)
      .annotate(OpenApi.Summary, "Register a shopper: creates the user and its customer record, and logs in")
  )
  .add(
    HttpApiEndpoint.post("login", "/auth/login")
      .setPayload(Schema.Struct({ email: Schema.String, password: Schema.String }))
      .addSuccess(TokenSet)
      .addError(Unauthorized)
      .addError(Forbidden)
      .addError(TooManyRequests)
      .annotate(OpenApi.Summary, "Log in with email and password")
      .annotate(
        OpenApi.Description,
        "A shopper whose customer record is deactivated gets 403 `account_deactivated` (only with the right password)."
      )
  )
  .add(
    HttpApiEndpoint.post("refresh", "/auth/refresh")
      .setPayload(Schema.Struct({ refreshToken: Schema.String }))
      .addSuccess(TokenSet)
      .addError(Unauthorized)
      .addError(Forbidden)
      .annotate(
        OpenApi.Summary,
        "Exchange a refresh token (single use) for a new token set; a reused one revokes its session"
      )
  )
  .add(
    HttpApiEndpoint.post("token", "/auth/token")
      .setPayload(
        Schema.Struct({
          grant_type: Schema.optional(Schema.String),
          client_id: Schema.optional(Schema.String),
          client_secret: Schema.optional(Schema.String),
          scope: Schema.optional(Schema.String)
        }).pipe(HttpApiSchema.withEncoding({ kind: "UrlParams" }))
      )
      .addSuccess(ClientToken)
      .addError(Unauthorized)
      .addError(TooManyRequests)
      .annotate(
        OpenApi.Summary,
        "OAuth 2.0 client credentials grant (form-encoded; client_secret_post or HTTP Basic)"
      )
  )
  .add(
    HttpApiEndpoint.post("requestPasswordReset", "/auth/password-reset")
      .setPayload(Schema.Struct({ email: Schema.String }))
      .addSuccess(Accepted, { status: 202 })
      .annotate(
        OpenApi.Summary,
        "Mail a single-use reset token if the account exists (always 202: accounts are not disclosed)"
      )
  )
  .add(
    HttpApiEndpoint.post("confirmPasswordReset", "/auth/password-reset/confirm")
      .setPayload(Schema.Struct({ token: Schema.String, password: Schema.String }))
      .addSuccess(HttpApiSchema.NoContent)
      .annotate(OpenApi.Summary, "Set a new password with a reset token; every existing session is revoked")
  )
  .annotate(OpenApi.Title, "Authentication")
  .annotate(
    OpenApi.Description,
    "Registration, login, token refresh, the client credentials grant, password reset, logout and the " +
      "current user. Access tokens (JWT), API keys (`sk_…`) and client-credentials tokens are all sent as " +
      "`Authorization: Bearer <credential>`."
  ) {}

// --- The caller's own session ----------------------------------------------------------------------

export class AccountApi extends HttpApiGroup.make("account")
  .add(
    HttpApiEndpoint.post("logout", "/auth/logout")
      .addSuccess(HttpApiSchema.NoContent)
      .annotate(OpenApi.Summary, "Revoke the current access token and its refresh token")
  )
  .add(
    HttpApiEndpoint.get("me", "/auth/me")
      .addSuccess(Me)
      .addError(NotFound)
      .annotate(OpenApi.Summary, "The current user, with role, permissions and lastLoginAt")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Authentication") {}

// --- API keys --------------------------------------------------------------------------------------

const ScopeList = Schema.Array(Schema.String).pipe(
  Schema.minItems(1, { message: () => "scopes must name at least one scope" }),
  Schema.maxItems(50, { message: () => "scopes must have at most 50 entries" })
)

export class ApiKeysApi extends HttpApiGroup.make("apikeys")
  .add(
    HttpApiEndpoint.post("create", "/apikey")
      .setPayload(Schema.Struct({ name: Name("name"), scopes: ScopeList }))
      .addSuccess(ApiKey, { status: 201 })
      .pipe(scoped("write:apikeys"))
      .annotate(OpenApi.Summary, "Create an API key (scopes ⊆ the caller's); `key` is shown only here")
  )
  .add(
    HttpApiEndpoint.get("list", "/apikey")
      .setUrlParams(PageParams)
      .addSuccess(ListOf(ApiKey, "ApiKeyList"))
      .pipe(scoped("read:apikeys"))
      .annotate(OpenApi.Summary, "List live API keys (without their secrets)")
  )
  .add(
    HttpApiEndpoint.del("revoke", "/apikey/:id")
      .addSuccess(HttpApiSchema.NoContent)
      .pipe(scoped("write:apikeys"), byId)
      .annotate(OpenApi.Summary, "Revoke an API key: it stops working at once")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "API keys")
  .annotate(
    OpenApi.Description,
    "Long-lived secret keys (`sk_…`) for servers, each with scopes no wider than its creator's."
  ) {}

// --- OAuth clients (admin) ---------------------------------------------------------------------------

export class OAuthClientsApi extends HttpApiGroup.make("oauthClients")
  .add(
    HttpApiEndpoint.post("create", "/oauth/clients")
      .setPayload(Schema.Struct({ name: Name("name"), scopes: Schema.optional(ScopeList) }))
      .addSuccess(OAuthClient, { status: 201 })
      .pipe(scoped("admin"))
      .annotate(
        OpenApi.Summary,
        "Register a client for the client credentials grant (scopes default to admin); the secret is shown only here"
      )
  )
  .add(
    HttpApiEndpoint.get("list", "/oauth/clients")
      .setUrlParams(PageParams)
      .addSuccess(ListOf(OAuthClient, "OAuthClientList"))
      .pipe(scoped("admin"))
      .annotate(OpenApi.Summary, "List OAuth clients (without their secrets)")
  )
  .add(
    HttpApiEndpoint.del("remove", "/oauth/clients/:id")
      .addSuccess(HttpApiSchema.NoContent)
      .pipe(scoped("admin"), byId)
      .annotate(OpenApi.Summary, "Delete an OAuth client: its tokens are revoked")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "OAuth clients")
  .annotate(
    OpenApi.Description,
    "Clients of the OAuth 2.0 client credentials grant (`POST /auth/token`); admin only."
  ) {}

/** This context's routes on the service's API (`ApiBase`): what its handlers are built against. */
export const IdentityRoutes = ApiBase.add(AuthApi).add(AccountApi).add(ApiKeysApi).add(OAuthClientsApi)
