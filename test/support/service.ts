/**
 * The service as a user runs it (`tsx src/main.ts`, spawned, its output collected), and a TCP proxy
 * that can be cut and restored in front of a database: an outage without touching the server.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { once } from "node:events"
import { createServer, type Server, type Socket, connect as tcpConnect } from "node:net"

export const freePort = () =>
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

export interface Service {
  readonly port: number
  readonly child: ChildProcess
  readonly base: string
  /** Everything written to stdout and stderr so far. */
  output: string
}

/**
 * `tsx src/main.ts` on a free port. Without DATABASE_URL in `env` it runs on an in-memory embedded
 * database (the DATABASE_URL of the test run is never inherited).
 */
export const startService = async (env: NodeJS.ProcessEnv = {}, port?: number): Promise<Service> => {
  const listen = port ?? (await freePort())
  const full: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: "",
    PORT: String(listen),
    HOST: "127.0.0.1",
    PGLITE_DATA_DIR: "memory://",
    LOG_LEVEL: "warning",
    NODE_ENV: "development",
    ...env
  }
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    env: full,
    stdio: ["ignore", "pipe", "pipe"]
  })
  const service: Service = { port: listen, child, base: `http://127.0.0.1:${listen}`, output: "" }
  child.stdout?.on("data", (d) => {
    service.output += String(d)
  })
  child.stderr?.on("data", (d) => {
    service.output += String(d)
  })
  return service
}

/** The JSON log lines of the output (anything else, e.g. a stack trace, as `{ raw }`). */
export const logLines = (output: string) =>
  output
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l): { message?: unknown; logLevel?: string; cause?: unknown; raw?: string } => {
      try {
        return JSON.parse(l) as { message?: unknown; logLevel?: string }
      } catch {
        return { raw: l }
      }
    })

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** Polls until `check` holds (or throws when the service exits or time runs out). */
export const waitUntil = async (
  what: string,
  service: Service,
  check: () => Promise<boolean> | boolean,
  timeoutMs: number,
  everyMs = 100
) => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (service.child.exitCode !== null) {
      throw new Error(`service exited with ${service.child.exitCode} before ${what}:\n${service.output}`)
    }
    try {
      if (await check()) return
    } catch {
      // not answering yet
    }
    await sleep(everyMs)
  }
  throw new Error(`${what}: not within ${timeoutMs} ms\n${service.output}`)
}

export const status = async (url: string, init?: RequestInit) => (await fetch(url, init)).status

/** Waits for the exit code (SIGKILL after `timeoutMs`). */
export const exitOf = async (child: ChildProcess, timeoutMs: number): Promise<number | null> => {
  if (child.exitCode !== null) return child.exitCode
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs)
  const [code] = (await once(child, "exit")) as [number | null]
  clearTimeout(timer)
  return code
}

/**
 * A TCP proxy on 127.0.0.1:`port` to `target`. `cut()` stops listening (new connections are
 * refused) and resets every open connection, as when the database goes away; `restore()` listens
 * again on the same port.
 */
export const tcpProxy = async (target: { host: string; port: number }) => {
  const port = await freePort()
  const sockets = new Set<Socket>()
  let server: Server | undefined
  const restore = () =>
    new Promise<void>((resolve, reject) => {
      const s = createServer((client) => {
        const upstream = tcpConnect(target.port, target.host)
        sockets.add(client)
        sockets.add(upstream)
        const drop = () => {
          client.destroy()
          upstream.destroy()
          sockets.delete(client)
          sockets.delete(upstream)
        }
        client.on("error", drop).on("close", drop)
        upstream.on("error", drop).on("close", drop)
        client.pipe(upstream)
        upstream.pipe(client)
      })
      s.once("error", reject)
      s.listen(port, "127.0.0.1", () => {
        server = s
        resolve()
      })
    })
  const cut = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.resetAndDestroy()
      sockets.clear()
      const s = server
      server = undefined
      if (!s) return resolve()
      s.close(() => resolve())
    })
  return { port, cut, restore, connections: () => sockets.size / 2 }
}
