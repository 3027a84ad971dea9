/** Runs one of the project's scripts (`npx tsx scripts/<name>.ts`) as a child process. */
import { spawn } from "node:child_process"
import { Effect } from "effect"

export interface ScriptRun {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** `env` is the child's whole environment; the child is killed if the test gives up (30 s at most). */
export const runScript = (script: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv) =>
  Effect.async<ScriptRun>((resume) => {
    const child = spawn("npx", ["tsx", script, ...args], {
      cwd: process.cwd(),
      env,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString("utf8")
    })
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString("utf8")
    })
    child.on("close", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => {
      child.kill()
    })
  }).pipe(Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => new Error(`${script} hung`) }))
