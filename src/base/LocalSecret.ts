/**
 * A secret the service needs (the master key, the token signing key): from configuration; outside
 * production, when it is not configured, generated once into `<DATA_DIR>/<file>` (mode 0600) and
 * read back on later starts, or made per process for a throw-away in-memory database.
 */
import { randomBytes } from "node:crypto"
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { dirname } from "node:path"
import { Data, Effect, Option, Redacted } from "effect"
import { AppConfig, isMemoryDataDir } from "../config.js"

export class LocalSecretError extends Data.TaggedError("LocalSecretError")<{ readonly message: string }> {}

export interface LocalSecret {
  readonly text: string
  /** `configured`, `ephemeral` (in-memory database), `generated` (just written) or `file` (read back). */
  readonly source: "configured" | "ephemeral" | "generated" | "file"
  readonly file?: string
}

const isAlreadyExists = (error: unknown) =>
  typeof error === "object" && error !== null && "code" in error && error.code === "EEXIST"

export const localSecret = (options: {
  readonly configured: Option.Option<Redacted.Redacted<string>>
  /** The variable that configures it, for messages. */
  readonly variable: string
  readonly fileName: string
}): Effect.Effect<LocalSecret, LocalSecretError, AppConfig> =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    if (Option.isSome(options.configured)) {
      return { text: Redacted.value(options.configured.value), source: "configured" as const }
    }
    if (config.nodeEnv === "production") {
      return yield* new LocalSecretError({
        message: `${options.variable} is required when NODE_ENV=production`
      })
    }
    const fresh = () => randomBytes(32).toString("hex")
    if (Option.isNone(config.databaseUrl) && isMemoryDataDir(config.pgliteDataDir)) {
      return { text: fresh(), source: "ephemeral" as const }
    }
    const file = `${config.dataDir}/${options.fileName}`
    return yield* Effect.try({
      try: (): LocalSecret => {
        let created = false
        if (!existsSync(file)) {
          mkdirSync(dirname(file), { recursive: true })
          try {
            writeFileSync(file, `${fresh()}\n`, { mode: 0o600, flag: "wx" })
            chmodSync(file, 0o600)
            created = true
          } catch (error) {
            // Another process created it first: use theirs.
            if (!isAlreadyExists(error)) throw error
          }
        }
        return { text: readFileSync(file, "utf8"), source: created ? "generated" : "file", file }
      },
      catch: (error) =>
        new LocalSecretError({
          message: `cannot keep the generated ${options.variable} in ${file}: ${String(error)}`
        })
    })
  })
