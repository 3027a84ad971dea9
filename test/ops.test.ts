/**
 * Operations, on the service as a user runs it (`tsx src/main.ts`):
 * - start-up waits for a database that is not there yet (retrying with back-off, one warning line per
 *   attempt) and gives up after DATABASE_CONNECT_TIMEOUT_SECONDS with one clear error line;
 * - while the database is unreachable (a TCP proxy in front of PostgreSQL, cut), requests answer 503
 *   `service_unavailable` with `Retry-After`, `/ready` says the database is unreachable (not "N
 *   pending"), and all is well again once it is back;
 * - a port in use is one line naming it; a shutdown logs one line;
 * - `/ready` is never 200 before the ADMIN_EMAIL admin can log in.
 * The outage needs a PostgreSQL server (DATABASE_URL); the rest runs on embedded PostgreSQL.
 */
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { createServer } from "node:net"
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { testDatabaseUrl } from "./support/database.js"
import {
  exitOf,
  freePort,
  logLines,
  type Service,
  sleep,
  startService,
  status,
  tcpProxy,
  waitUntil
} from "./support/service.js"

const running: Service[] = []
const start = async (env: NodeJS.ProcessEnv, port?: number) => {
  const service = await startService(env, port)
  running.push(service)
  return service
}
afterAll(() => {
  for (const s of running) if (s.child.exitCode === null) s.child.kill("SIGKILL")
})

const errorLines = (output: string) => logLines(output).filter((l) => l.logLevel === "ERROR" || l.raw)

describe("start-up", () => {
  it("gives up on an unreachable database after DATABASE_CONNECT_TIMEOUT_SECONDS with one clear line", async () => {
    const closed = await freePort()
    const started = Date.now()
    const service = await start({
      DATABASE_URL: `postgres://someone:secret@127.0.0.1:${closed}/shop`,
      DATABASE_CONNECT_TIMEOUT_SECONDS: "3"
    })
    const code = await exitOf(service.child, 60_000)
    const elapsed = Date.now() - started
    expect(code, service.output).toBe(1)
    // Retried with back-off (one warning per attempt), for about the bound.
    const retries = logLines(service.output).filter(
      (l) =>
        l.logLevel === "WARN" && String(l.message).startsWith(`database unreachable at 127.0.0.1:${closed}`)
    )
    expect(retries.length, service.output).toBeGreaterThanOrEqual(2)
    expect(String(retries[0]?.message)).toMatch(/\(ECONNREFUSED\); retrying in \d+(\.\d)?s$/)
    expect(elapsed).toBeGreaterThanOrEqual(3_000)
    const errors = errorLines(service.output)
    expect(errors, service.output).toHaveLength(1)
    expect(errors[0]?.message).toEqual(expect.stringContaining(`database unreachable at 127.0.0.1:${closed}`))
    expect(errors[0]?.message).toEqual(expect.stringContaining("gave up after 3s"))
    expect(errors[0]?.cause).toBeUndefined()
    expect(service.output).not.toContain('"message":[]')
    expect(service.output).not.toContain("secret")
  }, 90_000)

  it("a script's failure is one error line too (npm run migrate against a closed port)", async () => {
    const closed = await freePort()
    const child = spawn(process.execPath, ["--import", "tsx", "scripts/migrate.ts"], {
      env: { ...process.env, DATABASE_URL: `postgres://someone@127.0.0.1:${closed}/shop` },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    child.stdout?.on("data", (d) => {
      output += String(d)
    })
    child.stderr?.on("data", (d) => {
      output += String(d)
    })
    expect(await exitOf(child, 60_000), output).toBe(1)
    const errors = errorLines(output)
    expect(errors, output).toHaveLength(1)
    expect(errors[0]?.message).toEqual(expect.stringMatching(/^migration failed: .*ECONNREFUSED/))
  }, 90_000)

  it("a port in use is one error line naming the port, and a non-zero exit", async () => {
    const port = await freePort()
    const holder = createServer()
    await new Promise<void>((resolve) => holder.listen(port, "127.0.0.1", resolve))
    try {
      const service = await start({}, port)
      const code = await exitOf(service.child, 60_000)
      expect(code, service.output).toBe(1)
      const errors = errorLines(service.output)
      expect(errors, service.output).toHaveLength(1)
      expect(errors[0]?.message).toEqual(
        expect.stringContaining(`port ${port} is already in use (EADDRINUSE`)
      )
      expect(errors[0]?.cause).toBeUndefined()
    } finally {
      holder.close()
    }
  }, 90_000)
})

describe("shutdown and readiness", () => {
  it("a shutdown logs one info line", async () => {
    const service = await start({ LOG_LEVEL: "info" })
    await waitUntil("ready", service, async () => (await status(`${service.base}/ready`)) === 200, 60_000)
    // Let start-up lines (processors taking leases) settle, then look only at what follows the signal.
    await sleep(500)
    const before = service.output.length
    service.child.kill("SIGTERM")
    expect(await exitOf(service.child, 20_000), service.output).toBe(0)
    const after = logLines(service.output.slice(before))
    expect(after, service.output.slice(before)).toHaveLength(1)
    expect(after[0]).toMatchObject({ logLevel: "INFO" })
    expect(String(after[0]?.message)).toMatch(/^shutting down \(SIGTERM\)/)
  }, 90_000)

  it("/ready is never 200 before the ADMIN_EMAIL admin can log in", async () => {
    const email = "ready-admin@example.com"
    const password = "a strong admin password"
    const service = await start({ ADMIN_EMAIL: email, ADMIN_PASSWORD: password })
    // Polled tightly: the first 200 is as early as an orchestrator could see it.
    await waitUntil("ready", service, async () => (await status(`${service.base}/ready`)) === 200, 60_000, 5)
    const login = await fetch(`${service.base}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email, password })
    })
    expect(login.status, service.output).toBe(200)
    const ready = (await (await fetch(`${service.base}/ready`)).json()) as { checks: { admin?: unknown } }
    expect(ready.checks.admin).toEqual({ ok: true, detail: `${email} exists` })
    service.child.kill("SIGTERM")
    await exitOf(service.child, 20_000)
  }, 90_000)
})

describe("readiness and the ADMIN_EMAIL admin", () => {
  it("with ADMIN_EMAIL but no admin (no ADMIN_PASSWORD), /ready is 503 naming the admin check", async () => {
    const service = await start({ ADMIN_EMAIL: "missing-admin@example.com" })
    try {
      await waitUntil("health", service, async () => (await status(`${service.base}/health`)) === 200, 60_000)
      const ready = await fetch(`${service.base}/ready`)
      const text = await ready.text()
      expect(ready.status, text).toBe(503)
      const body = JSON.parse(text) as ErrorJson
      expect(body.error.code).toBe("not_ready")
      expect(body.error.message).toBe(
        "admin: missing-admin@example.com does not exist yet (set ADMIN_PASSWORD, or run npm run admin:create)"
      )
    } finally {
      service.child.kill("SIGTERM")
      await exitOf(service.child, 20_000)
    }
  }, 90_000)
})

/** A fresh database on the DATABASE_URL server, and its URL through `port` on 127.0.0.1. */
const freshDatabase = async (adminUrl: string) => {
  const name = `cp_ops_${randomBytes(6).toString("hex")}`
  const admin = async (sql: string) => {
    const client = new pg.Client({ connectionString: adminUrl })
    await client.connect()
    try {
      await client.query(sql)
    } finally {
      await client.end()
    }
  }
  await admin(`CREATE DATABASE ${name}`)
  const target = new URL(adminUrl)
  return {
    target: { host: target.hostname || "127.0.0.1", port: Number(target.port || 5432) },
    urlThrough: (port: number) => {
      const u = new URL(adminUrl)
      u.hostname = "127.0.0.1"
      u.port = String(port)
      u.pathname = `/${name}`
      return u.toString()
    },
    drop: () => admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
  }
}

interface ErrorJson {
  readonly error: {
    readonly type: string
    readonly code: string
    readonly message: string
    readonly requestId: string
  }
}

describe.skipIf(testDatabaseUrl === undefined)(
  "an unreachable PostgreSQL (TCP proxy, cut and restored)",
  () => {
    it("start-up waits for it; while it is gone requests are 503 with Retry-After and /ready says so; then all recovers", async () => {
      const db = await freshDatabase(testDatabaseUrl ?? "")
      const proxy = await tcpProxy(db.target)
      try {
        const email = "ops-admin@example.com"
        const password = "a strong admin password"
        // The database is not there when the service starts.
        const service = await start({
          DATABASE_URL: db.urlThrough(proxy.port),
          DATABASE_CONNECT_TIMEOUT_SECONDS: "60",
          ADMIN_EMAIL: email,
          ADMIN_PASSWORD: password,
          LOG_LEVEL: "info"
        })
        await waitUntil(
          "a retry line",
          service,
          () =>
            service.output.includes(
              `database unreachable at 127.0.0.1:${proxy.port} (ECONNREFUSED); retrying in`
            ),
          30_000
        )
        await sleep(2_000)
        expect(service.child.exitCode).toBeNull()
        await proxy.restore()
        await waitUntil("ready", service, async () => (await status(`${service.base}/ready`)) === 200, 60_000)

        const login = await fetch(`${service.base}/auth/login`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ email, password })
        })
        expect(login.status).toBe(200)
        const { accessToken } = (await login.json()) as { accessToken: string }
        const created = await fetch(`${service.base}/apikey`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${accessToken}` },
          body: JSON.stringify({ name: "ops", scopes: ["read:customers", "write:customers", "read:events"] })
        })
        expect(created.status).toBe(201)
        const { key } = (await created.json()) as { key: string }
        const users = (credential: string) =>
          fetch(`${service.base}/user`, { headers: { authorization: `Bearer ${credential}` } })
        expect((await users(key)).status).toBe(200)

        // The database goes away.
        await proxy.cut()
        const errorsBefore = errorLines(service.output).length
        for (const [what, send] of [
          ["the API-key lookup", () => users(key)],
          ["a handler", () => users(accessToken)],
          [
            "a write with an Idempotency-Key",
            () =>
              fetch(`${service.base}/user`, {
                method: "POST",
                headers: {
                  "content-type": "application/json",
                  authorization: `Bearer ${accessToken}`,
                  "idempotency-key": `ops-${randomBytes(4).toString("hex")}`
                },
                body: JSON.stringify({ email: "ada@example.com", firstName: "Ada", lastName: "Lovelace" })
              })
          ],
          [
            "a login",
            () =>
              fetch(`${service.base}/auth/login`, {
                method: "POST",
                headers: { "content-type": "application/json" },
                body: JSON.stringify({ email, password })
              })
          ]
        ] as const) {
          const res = await send()
          const text = await res.text()
          expect(res.status, `${what}: ${text}`).toBe(503)
          expect(res.headers.get("retry-after"), what).toMatch(/^[1-9]\d*$/)
          const body = JSON.parse(text) as ErrorJson
          expect(body.error).toMatchObject({ type: "api_error", code: "service_unavailable" })
          expect(body.error.requestId).toBe(res.headers.get("request-id"))
        }
        // `/rpc` (HTTP 200, ndjson): the call's Exit carries the same error.
        for (const credential of [key, accessToken]) {
          const rpc = await fetch(`${service.base}/rpc`, {
            method: "POST",
            headers: { "content-type": "application/ndjson", authorization: `Bearer ${credential}` },
            body: `${JSON.stringify({ _tag: "Request", id: "1", tag: "Ops.Status", payload: {}, headers: [] })}\n`
          })
          const rpcText = await rpc.text()
          expect(rpcText).toContain('"code":"service_unavailable"')
          expect(rpcText).not.toContain("internal_error")
        }
        const ready = await fetch(`${service.base}/ready`)
        const readyText = await ready.text()
        expect(ready.status).toBe(503)
        const readyBody = JSON.parse(readyText) as ErrorJson
        expect(readyBody.error.code).toBe("not_ready")
        expect(readyBody.error.message).toMatch(/database: unreachable/)
        expect(readyBody.error.message).toContain("migrations: unknown: database unreachable")
        expect(readyBody.error.message).not.toMatch(/pending/)
        // An outage is warned about, not logged as errors with stacks.
        expect(errorLines(service.output).slice(errorsBefore), service.output).toEqual([])

        // It comes back: ready again, requests served.
        await proxy.restore()
        await waitUntil(
          "ready again",
          service,
          async () => (await status(`${service.base}/ready`)) === 200,
          60_000
        )
        expect((await users(key)).status).toBe(200)
        expect((await users(accessToken)).status).toBe(200)

        service.child.kill("SIGTERM")
        expect(await exitOf(service.child, 20_000), service.output).toBe(0)
      } finally {
        await proxy.cut()
        await db.drop()
      }
    }, 180_000)
  }
)
