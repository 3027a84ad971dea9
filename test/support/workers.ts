/**
 * Worker processes (`ROLE=worker`, `tsx src/main.ts`) on the test's own database, for tests of what
 * real processes do to shared work: racing, being killed with SIGKILL, taking over. PostgreSQL only
 * (child processes cannot share an embedded database). The scope kills what is still running.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { Effect, Option, Redacted } from "effect"
import { AppConfig } from "../../src/config.js"

export interface WorkerOptions {
  /** Environment beyond the database, the encryption key and the role. */
  readonly env?: NodeJS.ProcessEnv
  /**
   * Milliseconds the worker's clock runs ahead of real time (`Date.now`, which Effect's Clock reads,
   * shifted by the `shifted-now.mjs` preload): work falls due for it as if that time had passed.
   */
  readonly aheadMs?: number
}

/** Starts a worker process on the test's database. */
export const startWorker = (instanceId: string, options: WorkerOptions = {}) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      ROLE: "worker",
      INSTANCE_ID: instanceId,
      DATABASE_URL: Option.match(config.databaseUrl, { onNone: () => "", onSome: Redacted.value }),
      DATA_ENCRYPTION_KEY: Option.match(config.dataEncryptionKey, {
        onNone: () => "",
        onSome: Redacted.value
      }),
      LOG_LEVEL: "warning",
      ...(options.aheadMs === undefined ? {} : { TEST_CLOCK_AHEAD_MS: String(options.aheadMs) }),
      ...options.env
    }
    const preload = options.aheadMs === undefined ? [] : ["--import", "./test/support/shifted-now.mjs"]
    return yield* Effect.acquireRelease(
      Effect.sync(() =>
        spawn(process.execPath, ["--import", "tsx", ...preload, "src/main.ts"], {
          cwd: process.cwd(),
          env,
          stdio: "ignore"
        })
      ),
      (child) => Effect.sync(() => void child.kill("SIGKILL"))
    )
  })

/** Kills a worker with SIGKILL and waits for it to be gone. */
export const killed = (child: ChildProcess) =>
  Effect.async<void>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
    child.once("exit", () => resume(Effect.void))
    child.kill("SIGKILL")
  })
