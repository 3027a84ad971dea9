/**
 * `npm run events:export -- [--out file] [--stream id] [--after checkpoint] [--types a,b] [--limit n]`:
 * the event history as NDJSON (the `EventLog.Stream` item shape, one event per line) for auditors,
 * read in batches with the gap-safe reader so memory stays flat. The data goes to the file (moved into
 * place only when complete) or stdout; logs and the summary go to stderr. The database is read as it
 * is: no migrations are applied. Secret fields (`Secret(…)` in the event schemas) are written as
 * `"[secret]"`. Run it as `npm run -s events:export` when redirecting stdout: without `-s`, npm
 * prints its own banner to stdout ahead of the NDJSON.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Either, Layer, Logger, LogLevel } from "effect"
import { exportEventLog, parseEventLogRequest } from "../src/audit/EventLog.js"
import { EXPORT_USAGE, openSink, parseExportArgs } from "../src/audit/Export.js"
import { AppConfigLive } from "../src/config.js"
import { AttachToRunningService, DatabaseLive } from "../src/db/Database.js"
import { EventStore } from "../src/eventstore/EventStore.js"
import { KnownEventTypesLive } from "../src/eventstore/EventType.js"
import { EventStoreServicesLive } from "../src/eventstore/layers.js"
import { describeCause } from "../src/logging.js"
import { eventTypes } from "../src/registry.js"

/** Usage errors are reported before the database is opened. */
const usage = (message: string): never => {
  process.stderr.write(`${message}\n\n${EXPORT_USAGE}\n`)
  process.exit(2)
}

const args = Either.getOrElse(parseExportArgs(process.argv.slice(2)), (e) => usage(e.message))
if (args.help) {
  process.stdout.write(`${EXPORT_USAGE}\n`)
  process.exit(0)
}
const query = Either.getOrElse(
  Effect.runSync(Effect.either(parseEventLogRequest(args.request, { maxLimit: Number.POSITIVE_INFINITY }))),
  (e) => usage(`--${e.param === "streamId" ? "stream" : e.param}: ${e.message}`)
)

const program = Effect.gen(function* () {
  const store = yield* EventStore
  const sink = yield* openSink(args.out)
  const started = performance.now()
  const summary = yield* exportEventLog(store, query, sink.write, { batchSize: args.batchSize }).pipe(
    Effect.zipLeft(sink.finish),
    Effect.onError(() => sink.abort)
  )
  const seconds = (performance.now() - started) / 1000
  const range =
    summary.firstPosition === null ? "" : ` (positions ${summary.firstPosition}…${summary.lastPosition})`
  yield* Console.error(
    `exported ${summary.events} events${range} to ${sink.name} in ${seconds.toFixed(1)}s; ` +
      `resume with --after ${summary.checkpoint}`
  )
})

// Logs go to stderr as JSON lines, so stdout carries nothing but the export.
const StderrLogs = Layer.merge(
  Logger.replace(Logger.defaultLogger, Logger.withConsoleError(Logger.jsonLogger)),
  Logger.minimumLogLevel(LogLevel.Warning)
)

program.pipe(
  Effect.provide(
    Layer.merge(
      EventStoreServicesLive.pipe(
        Layer.provideMerge(DatabaseLive),
        Layer.provide(Layer.merge(AppConfigLive, AttachToRunningService))
      ),
      // Secret fields of these types leave as "[secret]".
      KnownEventTypesLive(eventTypes)
    )
  ),
  Effect.provide(StderrLogs),
  // One line saying what failed (the runtime's own report would print the bare Cause as `[]`).
  Effect.tapErrorCause((cause) => Effect.logError(`events:export failed: ${describeCause(cause)}`)),
  NodeRuntime.runMain({ disablePrettyLogger: true, disableErrorReporting: true })
)
