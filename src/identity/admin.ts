/**
 * The first admin: from `ADMIN_EMAIL` + `ADMIN_PASSWORD` at start-up, or `npm run admin:create`.
 * Idempotent: an existing account with that address is left untouched.
 */
import { Data, Effect, Layer, Option, Redacted } from "effect"
import { AppConfig } from "../config.js"
import { isEmail } from "../kernel/Email.js"
import { Identity } from "./Identity.js"

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
