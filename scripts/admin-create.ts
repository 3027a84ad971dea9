/**
 * `npm run admin:create -- --email <address> [--password <password>]`: creates an admin user (the
 * password may come from ADMIN_PASSWORD instead, keeping it out of the shell history). Idempotent.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Layer } from "effect"
import { AppConfigLive } from "../src/config.js"
import { AttachToRunningService } from "../src/db/Database.js"
import { createAdmin } from "../src/identity/admin.js"
import { describeCause, LoggingLive } from "../src/logging.js"
import { projections } from "../src/registry.js"
import { servicesLayer } from "../src/services.js"

const flag = (name: string) => {
  const args = process.argv.slice(2)
  const index = args.indexOf(`--${name}`)
  return index >= 0 ? args[index + 1] : undefined
}

const program = Effect.gen(function* () {
  const email = flag("email") ?? process.env.ADMIN_EMAIL
  const password = flag("password") ?? process.env.ADMIN_PASSWORD
  if (!email || !password) {
    yield* Console.error(
      "usage: npm run admin:create -- --email <address> [--password <password>]\n(or set ADMIN_EMAIL / ADMIN_PASSWORD)"
    )
    return yield* Effect.sync(() => process.exit(2))
  }
  const result = yield* createAdmin(email, password)
  yield* Console.log(
    result.created
      ? `created admin ${email} (${result.userId})`
      : `${email} already exists (${result.userId}, role ${result.role})`
  )
})

program.pipe(
  Effect.provide(
    servicesLayer({ processors: [], projections }).pipe(
      Layer.provide(Layer.merge(AppConfigLive, AttachToRunningService))
    )
  ),
  Effect.provide(LoggingLive),
  // One line saying what failed (the runtime's own report would print the bare Cause as `[]`).
  Effect.tapErrorCause((cause) => Effect.logError(`admin:create failed: ${describeCause(cause)}`)),
  NodeRuntime.runMain({ disablePrettyLogger: true, disableErrorReporting: true })
)
