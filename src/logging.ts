/** Structured JSON logs (one object per line) at the configured level. */
import { Cause, Config, ConfigError, Effect, Layer, Logger, LogLevel, Option } from "effect"

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

const fieldOf = (value: object, name: string): unknown => Reflect.get(value, name)

/**
 * What went wrong, in one line: the error's message, then the messages of its causes (an
 * AggregateError's first error included) where they add something. A JSON log line of a bare
 * `Cause` has an empty message (`[]`), and a stack trace is not a message.
 */
export const describeError = (error: unknown): string => {
  const parts: string[] = []
  let current: unknown = error
  for (let depth = 0; depth < 6 && current !== undefined && current !== null; depth++) {
    if (typeof current !== "object") {
      parts.push(String(current))
      break
    }
    if (ConfigError.isConfigError(current)) {
      parts.push(`configuration: ${String(current)}`)
      break
    }
    const code = fieldOf(current, "code")
    // listen EADDRINUSE: the port named, and what to do about it.
    if (code === "EADDRINUSE" || code === "EACCES") {
      const address = fieldOf(current, "address")
      const port = fieldOf(current, "port")
      const where = `${typeof address === "string" ? `${address}:` : ""}${String(port)}`
      return code === "EADDRINUSE"
        ? `port ${String(port)} is already in use (EADDRINUSE on ${where}): stop the other process or set PORT`
        : `no permission to listen on port ${String(port)} (EACCES on ${where}): use a port above 1023 or set PORT`
    }
    const message = fieldOf(current, "message")
    const text = typeof message === "string" ? message.trim() : ""
    const tag = fieldOf(current, "_tag")
    const errors = fieldOf(current, "errors")
    if (text !== "" && !parts.some((p) => p.includes(text))) parts.push(text)
    else if (text === "" && typeof code === "string") parts.push(code)
    else if (text === "" && typeof tag === "string" && parts.length === 0) parts.push(tag)
    const next = fieldOf(current, "cause")
    current = next ?? (Array.isArray(errors) ? errors[0] : undefined)
  }
  return parts.length > 0 ? parts.join(": ") : "unknown error"
}

/** The first failure (else defect) of `cause`, described in one line. */
export const describeCause = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure)) return describeError(failure.value)
  const defect = Cause.dieOption(cause)
  return Option.isSome(defect) ? describeError(defect.value) : Cause.pretty(cause).split("\n")[0] || "unknown"
}
