/** Structured JSON logs (one object per line) at the configured level. */
import { Config, Effect, Layer, Logger, LogLevel } from "effect"

const levels: Record<string, LogLevel.LogLevel> = {
  trace: LogLevel.Trace,
  debug: LogLevel.Debug,
  info: LogLevel.Info,
  warning: LogLevel.Warning,
  warn: LogLevel.Warning,
  error: LogLevel.Error,
  none: LogLevel.None
}

export const LoggingLive = Layer.unwrapEffect(
  Effect.gen(function* () {
    const format = yield* Config.literal(
      "json",
      "pretty"
    )("LOG_FORMAT").pipe(Config.withDefault("json" as const))
    const levelName = yield* Config.string("LOG_LEVEL").pipe(Config.withDefault("info"))
    const level = levels[levelName.toLowerCase()] ?? LogLevel.Info
    return Layer.merge(format === "json" ? Logger.json : Logger.pretty, Logger.minimumLogLevel(level))
  })
)
