/**
 * `npm run projections:rebuild -- <name> [--batch-size N]`: rebuilds one projection from position
 * zero into fresh tables and swaps them in, printing progress. Side-effecting processors (webhooks,
 * notifications) are never re-run.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Layer } from "effect"
import { AppConfigLive } from "../src/config.js"
import { AttachToRunningService } from "../src/db/Database.js"
import { PersistenceLive } from "../src/eventstore/layers.js"
import { describeCause, LoggingLive } from "../src/logging.js"
import { type RebuildProgress, rebuildProjection } from "../src/processors/Rebuild.js"
import { projections } from "../src/registry.js"

const fmt = (n: number) => n.toLocaleString("en-US")

export const progressLine = (p: RebuildProgress): string => {
  const pct = p.eventsTotal > 0 ? ((100 * p.eventsDone) / p.eventsTotal).toFixed(1) : "100.0"
  return `[${p.projection}] ${fmt(p.eventsDone)} / ${fmt(p.eventsTotal)} events (${pct}%) · ${fmt(p.eventsPerSecond)} events/s · ETA ${p.etaSeconds}s`
}

const usage = () => {
  const names = projections.map((p) => p.name)
  return `usage: npm run projections:rebuild -- <name> [--batch-size N]\nprojections: ${names.length > 0 ? names.join(", ") : "(none registered yet)"}`
}

const program = Effect.gen(function* () {
  const args = process.argv.slice(2)
  const name = args.find((a) => !a.startsWith("--"))
  const batchIndex = args.indexOf("--batch-size")
  const batchSize = batchIndex >= 0 ? Number(args[batchIndex + 1]) : 5_000
  const projection = projections.find((p) => p.name === name)
  if (!name || !projection || !Number.isInteger(batchSize) || batchSize < 1) {
    yield* Console.error(name && !projection ? `unknown projection "${name}"\n${usage()}` : usage())
    return yield* Effect.sync(() => process.exit(2))
  }
  const report = yield* rebuildProjection(projection, {
    batchSize,
    onProgress: (p) => Console.log(progressLine(p))
  })
  yield* Console.log(
    `[${report.projection}] rebuilt from ${fmt(report.events)} events in ${report.seconds.toFixed(1)}s (${fmt(report.eventsPerSecond)} events/s); swapped in`
  )
})

program.pipe(
  Effect.provide(PersistenceLive.pipe(Layer.provide(Layer.merge(AppConfigLive, AttachToRunningService)))),
  Effect.provide(LoggingLive),
  // One line saying what failed (the runtime's own report would print the bare Cause as `[]`).
  Effect.tapErrorCause((cause) => Effect.logError(`rebuild failed: ${describeCause(cause)}`)),
  NodeRuntime.runMain({ disablePrettyLogger: true, disableErrorReporting: true })
)
