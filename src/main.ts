/**
 * Composition root: config → logging → database (+ migrations) → event store → processors →
 * HTTP server. `ROLE=api|worker|all` picks what this process runs. SIGTERM/SIGINT stop accepting,
 * finish in-flight requests and batches, release leases, and exit within SHUTDOWN_TIMEOUT_SECONDS.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Layer, Runtime } from "effect"
import { AppConfig, AppConfigLive } from "./config.js"
import { identityModule } from "./identity/module.js"
import { describeCause, LoggingLive } from "./logging.js"
import { TracingLive } from "./observability/Tracing.js"
import { processorsLayer } from "./processors/Supervisor.js"
import { processors, projections } from "./registry.js"
import { HttpLive } from "./server.js"
import { servicesLayer } from "./services.js"

// For the child process that creates a fresh embedded data directory (Database.ts).
export { prepareEmbeddedDataDir } from "./db/Database.js"

export const ServicesLive = servicesLayer({ processors, projections })

/**
 * What this process runs, by ROLE. The ADMIN_EMAIL admin is created first: the server listens (and
 * `/health` answers) only once that admin can log in.
 */
export const AppLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) =>
    Layer.mergeAll(
      config.role === "worker" ? Layer.empty : HttpLive,
      config.role === "api" ? Layer.empty : processorsLayer(processors)
    ).pipe(
      // The admin exists before the server listens: an immediate login never misses it.
      Layer.provide(identityModule.bootstrap)
    )
  )
).pipe(
  Layer.provide(ServicesLive),
  // Below everything that traces (the database and migrations included); off without an endpoint.
  Layer.provide(TracingLive),
  Layer.tap(() => Effect.logInfo("commerce-platform started"))
)

/** Runs the service until SIGTERM/SIGINT. Needs `AppConfig`, read once for the whole process. */
export const program = Effect.gen(function* () {
  const config = yield* AppConfig
  // The process's logger and level, for the line logged from the signal handler.
  const runtime = yield* Effect.runtime<never>()
  // Finalizers (close the server, stop processors, release leases, close the database) get the
  // shutdown budget; past it the process exits regardless.
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    process.once(signal, () => {
      Runtime.runFork(runtime)(
        Effect.logInfo(
          `shutting down (${signal}): finishing in-flight work within ${config.shutdownTimeoutSeconds}s`
        )
      )
      setTimeout(() => process.exit(1), config.shutdownTimeoutSeconds * 1000).unref()
    })
  }
  return yield* Layer.launch(AppLive)
})

/**
 * A start-up (or later) failure as one error line naming what went wrong: the runtime's own report
 * logs the bare Cause, which the JSON logger prints as `"message":[]` with a stack trace.
 */
export const reportFailure = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.tapErrorCause(self, (cause) =>
    Cause.isInterruptedOnly(cause)
      ? Effect.void
      : Effect.logError(`commerce-platform stopped: ${describeCause(cause)}`).pipe(
          Effect.zipRight(Effect.logDebug("failure details", cause))
        )
  )

/** The process entry: runs `program` until a signal, on its configuration and logger. */
export const runService = () =>
  program.pipe(
    // Another process owns the embedded database: say who, in one line, without a stack trace.
    Effect.catchTag("DataDirLocked", (locked) =>
      Effect.zipRight(
        Effect.logError(locked.message),
        Effect.sync(() => process.exit(1))
      )
    ),
    Effect.provide(AppConfigLive),
    reportFailure,
    Effect.provide(LoggingLive),
    NodeRuntime.runMain({ disablePrettyLogger: true, disableErrorReporting: true })
  )

// `tsx src/main.ts` (and the image's `node --import tsx src/main.ts`); `npm start` goes through
// scripts/start.mjs, which calls `runService` on the prebuilt bundle.
if (import.meta.url === `file://${process.argv[1]}`) runService()
