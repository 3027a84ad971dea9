/** `npm run migrate`: applies pending migrations to the configured database and exits. */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { AppConfigLive } from "../src/config.js"
import { AttachToRunningService, DatabaseLive } from "../src/db/Database.js"
import { migrate } from "../src/db/Migrations.js"
import { describeCause, LoggingLive } from "../src/logging.js"

const program = Effect.gen(function* () {
  const report = yield* migrate()
  yield* Effect.logInfo(
    report.applied.length === 0
      ? `database is up to date (migration ${report.current})`
      : `applied ${report.applied.map((m) => `${m.id}_${m.name}`).join(", ")}; now at migration ${report.current}`
  )
})

program.pipe(
  Effect.provide(DatabaseLive.pipe(Layer.provide(Layer.merge(AppConfigLive, AttachToRunningService)))),
  Effect.provide(LoggingLive),
  // One line saying what failed (the runtime's own report would print the bare Cause as `[]`).
  Effect.tapErrorCause((cause) => Effect.logError(`migration failed: ${describeCause(cause)}`)),
  NodeRuntime.runMain({ disablePrettyLogger: true, disableErrorReporting: true })
)
