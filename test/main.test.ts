/**
 * The composition root as a user runs it: `tsx src/main.ts` on embedded PostgreSQL, serving HTTP and
 * running processors; SIGTERM stops it cleanly within the shutdown budget.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { once } from "node:events"
import { createServer } from "node:net"
import { describe, expect, it } from "vitest"

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() =>
        typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))
      )
    })
  })

const waitFor = async (url: string, child: ChildProcess, timeoutMs: number) => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`service exited early with ${child.exitCode}`)
    try {
      const res = await fetch(url)
      if (res.ok) return
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200))
  }
  throw new Error(`${url} not up within ${timeoutMs} ms`)
}

describe("npm start", () => {
  it("serves, reports ready with its processors, and shuts down gracefully on SIGTERM", async () => {
    const port = await freePort()
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PORT: String(port),
      HOST: "127.0.0.1",
      PGLITE_DATA_DIR: "memory://",
      LOG_LEVEL: "warning",
      NODE_ENV: "development"
    }
    delete env.DATABASE_URL
    const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
      env,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    child.stdout?.on("data", (d) => {
      output += String(d)
    })
    child.stderr?.on("data", (d) => {
      output += String(d)
    })
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
      expect(code, output).toBe(0)
      expect(Date.now() - started).toBeLessThan(10_000)
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL")
    }
  }, 90_000)
})
