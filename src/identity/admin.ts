/**
 * The first admin: from `ADMIN_EMAIL` + `ADMIN_PASSWORD` at start-up, or `npm run admin:create`.
 * Idempotent: an existing account with that address is left untouched.
 */
import { SqlClient } from "@effect/sql"
import { Data, Effect, Layer, Option, Redacted } from "effect"
import { AppConfig } from "../config.js"
import { provideSqlClient } from "../db/Sql.js"
import { AdminReadiness } from "../http/Readiness.js"
import { isEmail } from "../kernel/Email.js"
import { Identity } from "./Identity.js"
import { findUserByEmail } from "./queries.js"

export class AdminBootstrapError extends Data.TaggedError("AdminBootstrapError")<{
  readonly message: string
}> {}

export const createAdmin = (email: string, password: string) =>
  Effect.gen(function* () {
    const address = email.trim()
    if (!isEmail(address)) {
      return yield* new AdminBootstrapError({
        message: `admin email ${JSON.stringify(address)} is not a valid address`
      })
    }
    const identity = yield* Identity
    const result = yield* identity
      .ensureAdmin({ email: address, password, firstName: "Store", lastName: "Admin" })
      .pipe(
        Effect.mapError((e) => new AdminBootstrapError({ message: `admin not created: ${e.error.message}` }))
      )
    yield* Effect.logInfo(
      result.created
        ? `created admin ${address} (${result.userId})`
        : `admin ${address} already exists (${result.userId})`
    )
    return result
  })

/** At start-up: creates the admin named by ADMIN_EMAIL/ADMIN_PASSWORD when both are set. */
export const AdminBootstrapLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const { adminEmail, adminPassword } = config.identity
    if (Option.isNone(adminEmail) || Option.isNone(adminPassword)) {
      if (Option.isSome(adminEmail) !== Option.isSome(adminPassword)) {
        yield* Effect.logWarning("ADMIN_EMAIL and ADMIN_PASSWORD must both be set to create the first admin")
      }
      return
    }
    yield* createAdmin(adminEmail.value, Redacted.value(adminPassword.value))
  })
)

/**
 * `/ready`'s `admin` check: with ADMIN_EMAIL, ok once that address is an admin user (created here at
 * start-up, or by `npm run admin:create` when ADMIN_PASSWORD is not given). No check without it.
 */
export const AdminReadinessLive = Layer.unwrapEffect(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const sql = yield* SqlClient.SqlClient
    const email = config.identity.adminEmail
    if (Option.isNone(email)) return Layer.empty
    const address = email.value.trim()
    return Layer.succeed(AdminReadiness, {
      check: findUserByEmail(address).pipe(
        provideSqlClient(sql),
        Effect.map(
          Option.match({
            onNone: () => ({
              ok: false,
              detail: `${address} does not exist yet (set ADMIN_PASSWORD, or run npm run admin:create)`
            }),
            onSome: (user) =>
              user.role === "admin"
                ? { ok: true, detail: `${address} exists` }
                : { ok: false, detail: `${address} is a ${user.role} user, not an admin` }
          })
        ),
        Effect.catchAllCause(() => Effect.succeed({ ok: false, detail: "unknown: the check failed" }))
      )
    })
  })
)
