/**
 * The composition root as a user runs it: `npm start` (the prebuilt bundle, scripts/start.mjs) and the
 * image's `node --import tsx src/main.ts`, on embedded PostgreSQL, serving HTTP and
 * running processors; SIGTERM stops it cleanly within the shutdown budget; with ADMIN_EMAIL and
 * ADMIN_PASSWORD the admin exists before the server accepts its first request.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { once } from "node:events"
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { freePort } from "./support/service.js"

const waitFor = async (url: string, child: ChildProcess, timeoutMs: number, everyMs = 200) => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`service exited early with ${child.exitCode}`)
    try {
      const res = await fetch(url)
      if (res.ok) return
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, everyMs))
  }
  throw new Error(`${url} not up within ${timeoutMs} ms`)
}

/** What `npm start` runs: package.json's `start` script, `node <launcher>`. */
const npmStartArgs = (): ReadonlyArray<string> => {
  const manifest = JSON.parse(readFileSync("package.json", "utf8")) as { scripts: { start: string } }
  const [program, ...args] = manifest.scripts.start.split(/\s+/)
  expect(program).toBe("node")
  return args
}

/**
 * The service (`npm start` by default; `["--import", "tsx", "src/main.ts"]` is the image's command)
 * on a free port and an in-memory embedded database; its output is collected.
 */
const start = async (extraEnv: NodeJS.ProcessEnv = {}, args: ReadonlyArray<string> = npmStartArgs()) => {
  const port = await freePort()
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: String(port),
    HOST: "127.0.0.1",
    PGLITE_DATA_DIR: "memory://",
    LOG_LEVEL: "warning",
    NODE_ENV: "development",
    ...extraEnv
  }
  delete env.DATABASE_URL
  const child = spawn(process.execPath, [...args], {
    env,
    stdio: ["ignore", "pipe", "pipe"]
  })
  const service = { port, child, output: "" }
  child.stdout?.on("data", (d) => {
    service.output += String(d)
  })
  child.stderr?.on("data", (d) => {
    service.output += String(d)
  })
  return service
}

describe("npm start", () => {
  it("serves, reports ready with its processors, and shuts down gracefully on SIGTERM", async () => {
    const { port, child, ...service } = await start()
    try {
      await waitFor(`http://127.0.0.1:${port}/health`, child, 60_000)
      const ready = await fetch(`http://127.0.0.1:${port}/ready`)
      const body = (await ready.json()) as {
        status: string
        checks: { processors: { ok: boolean; detail: string } }
      }
      expect(ready.status).toBe(200)
      expect(body.status).toBe("ready")
      expect(body.checks.processors.detail).toMatch(/^[1-9]\d* running$/)
      expect(ready.headers.get("request-id")).toMatch(/^req_/)
      const started = Date.now()
      child.kill("SIGTERM")
      const [code] = (await once(child, "exit")) as [number | null]
      expect(code, service.output).toBe(0)
      expect(Date.now() - started).toBeLessThan(10_000)
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL")
    }
  }, 90_000)

  it("runs the prebuilt bundle, rebuilt from the current sources (no tsx loader at start)", async () => {
    const { port, child, ...service } = await start()
    try {
      await waitFor(`http://127.0.0.1:${port}/health`, child, 60_000)
      const newest = (dir: string): number =>
        Math.max(
          ...readdirSync(dir, { withFileTypes: true }).map((e) =>
            e.isDirectory() ? newest(`${dir}/${e.name}`) : statSync(`${dir}/${e.name}`).mtimeMs
          )
        )
      expect(statSync("dist/src/main.mjs").mtimeMs, service.output).toBeGreaterThan(newest("src"))
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL")
    }
  }, 90_000)

  it("`node --import tsx src/main.ts` (the image's command) serves too", async () => {
    const { port, child } = await start({}, ["--import", "tsx", "src/main.ts"])
    try {
      await waitFor(`http://127.0.0.1:${port}/health`, child, 60_000)
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL")
    }
  }, 90_000)

  it("with ADMIN_EMAIL/ADMIN_PASSWORD, the admin can log in as soon as the server answers", async () => {
    const email = "first-admin@example.com"
    const password = "a strong admin password"
    const { port, child, ...service } = await start({ ADMIN_EMAIL: email, ADMIN_PASSWORD: password })
    try {
      // Polled tightly, so the first answer is as early as a user's script could see it.
      await waitFor(`http://127.0.0.1:${port}/health`, child, 60_000, 5)
      const login = await fetch(`http://127.0.0.1:${port}/auth/login`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ email, password })
      })
      const text = await login.text()
      expect(login.status, `${text}\n${service.output}`).toBe(200)
      expect(JSON.parse(text)).toMatchObject({ accessToken: expect.any(String), expiresIn: 3600 })
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL")
    }
  }, 90_000)

  it("creates and migrates a fresh data directory (in a child process), which keeps its data", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "cp-main-fresh-"))
    const email = "fresh-admin@example.com"
    const password = "a strong admin password"
    const env = { DATA_DIR: dataDir, PGLITE_DATA_DIR: join(dataDir, "pglite"), LOG_LEVEL: "info" }
    const run = async (extraEnv: NodeJS.ProcessEnv) => {
      // Not destructured: `output` grows as the service logs.
      const service = await start({ ...env, ...extraEnv })
      const { port, child } = service
      try {
        await waitFor(`http://127.0.0.1:${port}/health`, child, 60_000)
        const login = await fetch(`http://127.0.0.1:${port}/auth/login`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ email, password })
        })
        expect(login.status, service.output).toBe(200)
        child.kill("SIGTERM")
        const [code] = (await once(child, "exit")) as [number | null]
        expect(code, service.output).toBe(0)
        return service.output
      } finally {
        if (child.exitCode === null) child.kill("SIGKILL")
      }
    }
    try {
      const first = await run({ ADMIN_EMAIL: email, ADMIN_PASSWORD: password })
      expect(first).toContain("applied migration 1_event_store")
      expect(first).toMatch(/database schema at migration \d+/)
      // The admin created on the first start is still there; nothing is left to migrate.
      const warm = await run({})
      expect(warm).not.toContain("applied migration")
    } finally {
      rmSync(dataDir, { recursive: true, force: true })
    }
  }, 120_000)
})
