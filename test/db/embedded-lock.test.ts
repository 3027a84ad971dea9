/**
 * Two processes on one embedded data directory, as a user runs them: `tsx src/main.ts` owns the
 * directory (a lock naming it and its socket port); while it serves, a second start refuses with
 * that holder's name, and the scripts work through the running service instead of opening a second
 * PGlite on the same files (which lost the admin `admin:create` wrote and crashed
 * `projections:rebuild`). After kill -9 the next start takes the stale lock over. Embedded only.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { once } from "node:events"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { lockFileOf } from "../../src/db/DataDirLock.js"
import { usingRealPostgres } from "../support/database.js"
import { freePort } from "../support/service.js"

// Made by beforeAll, so a skipped run (DATABASE_URL set) leaves nothing behind.
let dataDir = ""
let lockFile = ""
const email = "lock-admin@example.com"
const password = "a strong admin password"

const baseEnv = (): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATA_DIR: dataDir,
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
    NODE_ENV: "development",
    // Cheap password hashes: logins are not what is tested here.
    PASSWORD_SCRYPT_COST: "1024",
    PASSWORD_SCRYPT_PARALLELISM: "1"
  }
  delete env.DATABASE_URL
  delete env.PGLITE_DATA_DIR
  return env
}

interface Proc {
  readonly child: ChildProcess
  output: string
}

const run = (file: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv): Proc => {
  const child = spawn(process.execPath, ["--import", "tsx", file, ...args], {
    env,
    stdio: ["ignore", "pipe", "pipe"]
  })
  const proc = { child, output: "" }
  child.stdout?.on("data", (d) => {
    proc.output += String(d)
  })
  child.stderr?.on("data", (d) => {
    proc.output += String(d)
  })
  return proc
}

/** Runs a script to its end; stdout apart (the export's NDJSON). */
const script = async (file: string, args: ReadonlyArray<string> = []) => {
  const child = spawn(process.execPath, ["--import", "tsx", file, ...args], {
    env: baseEnv(),
    stdio: ["ignore", "pipe", "pipe"]
  })
  let stdout = ""
  let stderr = ""
  child.stdout?.on("data", (d) => {
    stdout += String(d)
  })
  child.stderr?.on("data", (d) => {
    stderr += String(d)
  })
  const timer = setTimeout(() => child.kill("SIGKILL"), 45_000)
  const [code] = (await once(child, "exit")) as [number | null]
  clearTimeout(timer)
  return { code, stdout, stderr }
}

const startService = async () => {
  const port = await freePort()
  const proc = run("src/main.ts", [], { ...baseEnv(), PORT: String(port) })
  const service = { port, child: proc.child, output: () => proc.output }
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    if (service.child.exitCode !== null)
      throw new Error(`service exited with ${service.child.exitCode}: ${service.output()}`)
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) return service
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`service not up within 60 s: ${service.output()}`)
}

const login = (port: number) =>
  fetch(`http://127.0.0.1:${port}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email, password })
  })

const holder = () => JSON.parse(readFileSync(lockFile, "utf8")) as { pid: number; port: number | null }

let service: Awaited<ReturnType<typeof startService>>
let shopperId = ""

describe.skipIf(usingRealPostgres)("one embedded data directory, several processes", () => {
  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "cp-embedded-lock-"))
    lockFile = lockFileOf(join(dataDir, "pglite"))
    service = await startService()
    const res = await fetch(`http://127.0.0.1:${service.port}/auth/register`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: "shopper@example.com", password, firstName: "Ann", lastName: "Lee" })
    })
    const body = (await res.json()) as { userId?: string }
    if (res.status !== 201 || !body.userId) throw new Error(`register: ${res.status} ${JSON.stringify(body)}`)
    shopperId = body.userId
  }, 90_000)

  afterAll(() => {
    if (service && service.child.exitCode === null) service.child.kill("SIGKILL")
    if (dataDir) rmSync(dataDir, { recursive: true, force: true })
  })

  describe("while the service runs", () => {
    it.concurrent("a second start refuses before opening the database, naming the holder; the first keeps serving", async () => {
      const second = run("src/main.ts", [], { ...baseEnv(), PORT: String(await freePort()) })
      // Without the lock it would open the same files and serve on its own port: stop waiting then.
      const timer = setTimeout(() => second.child.kill("SIGKILL"), 40_000)
      const [code] = (await once(second.child, "exit")) as [number | null]
      clearTimeout(timer)
      expect(code, second.output).toBe(1)
      const lock = holder()
      expect(lock.pid).toBe(service.child.pid)
      expect(second.output).toContain(`is in use by process ${service.child.pid} (src/main.ts, since `)
      expect(second.output).toContain(`which serves it on 127.0.0.1:${lock.port}`)
      // It never opened PGlite (which would have logged its own failure or aborted).
      expect(second.output).not.toMatch(/Failed to open embedded PostgreSQL|Aborted/)
      expect((await fetch(`http://127.0.0.1:${service.port}/health`)).status).toBe(200)
    }, 60_000)

    it.concurrent("admin:create stores an admin the service can log in with", async () => {
      const created = await script("scripts/admin-create.ts", ["--email", email, "--password", password])
      expect(created.code, created.stderr).toBe(0)
      expect(created.stdout).toContain(`created admin ${email}`)
      // Logs go to stdout, the script's own lines too.
      expect(created.stdout).toContain(`is served by process ${service.child.pid}`)
      const res = await login(service.port)
      expect(res.status, await res.clone().text()).toBe(200)
    }, 60_000)

    it.concurrent("events:export writes valid NDJSON including the shopper the service just registered", async () => {
      const exported = await script("scripts/events-export.ts")
      expect(exported.code, exported.stderr).toBe(0)
      const events = exported.stdout
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line) as { type: string; streamId: string; position: number })
      expect(events.length).toBeGreaterThan(0)
      // Written by the service's /auth/register moments ago, read through the service's socket.
      expect(events).toContainEqual(
        expect.objectContaining({ type: "user.registered", streamId: `user-${shopperId}` })
      )
      expect(events.map((e) => e.type)).toContain("customer.created")
      expect(exported.stderr).toMatch(/exported \d+ events/)
    }, 60_000)

    it.concurrent("projections:rebuild succeeds while the service keeps serving requests", async () => {
      let served = 0
      let failed = 0
      let rebuilding = true
      const traffic = (async () => {
        while (rebuilding) {
          const res = await fetch(`http://127.0.0.1:${service.port}/ready`)
          if (res.status === 200) served++
          else failed++
          await new Promise((r) => setTimeout(r, 50))
        }
      })()
      const rebuilt = await script("scripts/projections-rebuild.ts", ["customers", "--batch-size", "2"])
      rebuilding = false
      await traffic
      expect(rebuilt.code, rebuilt.stderr + rebuilt.stdout).toBe(0)
      expect(rebuilt.stdout).toMatch(/\[customers\] rebuilt from [1-9]\d* events .*; swapped in/)
      // Through the service's socket, not a second PGlite on the same files (which, before the lock,
      // could finish on its own copy and leave the service's tables as they were, or abort).
      expect(rebuilt.stdout).toContain(`is served by process ${service.child.pid}`)
      expect(failed).toBe(0)
      expect(served).toBeGreaterThan(0)
    }, 60_000)
  })

  describe("after the service is killed", () => {
    it("kill -9 leaves a stale lock that the next start takes over; SIGTERM removes the lock", async () => {
      const killed = service.child.pid
      service.child.kill("SIGKILL")
      await once(service.child, "exit")
      expect(holder().pid).toBe(killed)

      service = await startService()
      expect(service.output()).toContain(`taking over the stale lock ${lockFile} of process ${killed}`)
      expect(holder().pid).toBe(service.child.pid)
      // What the scripts wrote through the first service is still there.
      expect((await login(service.port)).status).toBe(200)

      service.child.kill("SIGTERM")
      const [code] = (await once(service.child, "exit")) as [number | null]
      expect(code, service.output()).toBe(0)
      expect(existsSync(lockFile)).toBe(false)
    }, 90_000)
  })
})
