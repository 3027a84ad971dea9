/**
 * A real local webhook receiver for tests and benchmarks: an HTTP server on 127.0.0.1 (random port;
 * also on [::1] at the same port when the machine has IPv6 loopback) that records every request and
 * answers as scripted per path: a status, never (hang), slowly (drip), a redirect, or a large body.
 * Scoped: closing the scope destroys every open socket, hanging ones included.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { Socket } from "node:net"
import { Effect, type Scope } from "effect"

export interface ReceivedRequest {
  readonly method: string
  /** Path and query, as sent. */
  readonly path: string
  /** Names lower-cased; repeated headers joined with ", ". */
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  /** `Date.now()` when the body was fully read. */
  readonly receivedAt: number
}

export type Behaviour =
  | {
      readonly _tag: "respond"
      readonly status: number
      readonly headers?: Readonly<Record<string, string>>
      readonly body?: string
    }
  /** Never answers (until the receiver closes). */
  | { readonly _tag: "hang" }
  /** The status and headers at once, then `chunk` every `everyMs`, `times` times, then the end. */
  | {
      readonly _tag: "drip"
      readonly status: number
      readonly chunk: string
      readonly everyMs: number
      readonly times: number
    }
  | { readonly _tag: "redirect"; readonly status: number; readonly location: string }
  /** `bytes` bytes of "a" (with a Content-Length). */
  | { readonly _tag: "large"; readonly status: number; readonly bytes: number }

/** `n` is the 1-based count of requests to that path since the last reset. */
export type Script = Behaviour | ((request: ReceivedRequest, n: number) => Behaviour)

export interface Receiver {
  readonly port: number
  /** `http://127.0.0.1:<port><path>` (path defaults to `/`). */
  readonly url: (path?: string) => string
  /** Whether the receiver also listens on [::1] (the same port). */
  readonly ipv6: boolean
  /** Everything received since the last reset, in order. */
  readonly requests: () => ReadonlyArray<ReceivedRequest>
  /** How requests to `path` (the path without the query) are answered from now on. */
  readonly on: (path: string, script: Script) => void
  /** Forgets the requests, the per-path counts and the scripts. */
  readonly reset: () => void
}

export const Behaviour = {
  ok: { _tag: "respond", status: 200, headers: { "content-type": "application/json" }, body: '{"ok":true}' },
  status: (status: number, headers?: Readonly<Record<string, string>>, body?: string): Behaviour => ({
    _tag: "respond",
    status,
    ...(headers === undefined ? {} : { headers }),
    ...(body === undefined ? {} : { body })
  }),
  hang: { _tag: "hang" },
  drip: (options: { chunk: string; everyMs: number; times: number; status?: number }): Behaviour => ({
    _tag: "drip",
    status: options.status ?? 200,
    chunk: options.chunk,
    everyMs: options.everyMs,
    times: options.times
  }),
  redirect: (location: string, status = 302): Behaviour => ({ _tag: "redirect", status, location }),
  large: (bytes: number, status = 200): Behaviour => ({ _tag: "large", status, bytes })
} as const satisfies Record<string, Behaviour | ((...args: never) => Behaviour)>

const flatHeaders = (req: IncomingMessage): Record<string, string> =>
  Object.fromEntries(
    Object.entries(req.headers).flatMap(([name, value]) =>
      value === undefined ? [] : [[name.toLowerCase(), Array.isArray(value) ? value.join(", ") : value]]
    )
  )

const answer = (res: ServerResponse, behaviour: Behaviour): void => {
  switch (behaviour._tag) {
    case "respond":
      res.writeHead(behaviour.status, behaviour.headers)
      res.end(behaviour.body ?? "")
      return
    case "hang":
      return
    case "redirect":
      res.writeHead(behaviour.status, { location: behaviour.location })
      res.end()
      return
    case "large":
      res.writeHead(behaviour.status, {
        "content-type": "text/plain",
        "content-length": String(behaviour.bytes)
      })
      res.end(Buffer.alloc(behaviour.bytes, "a"))
      return
    case "drip": {
      res.writeHead(behaviour.status, { "content-type": "text/plain" })
      res.flushHeaders()
      let sent = 0
      const interval = setInterval(() => {
        if (++sent >= behaviour.times) {
          clearInterval(interval)
          res.end(behaviour.chunk)
        } else {
          res.write(behaviour.chunk)
        }
      }, behaviour.everyMs)
      res.on("close", () => clearInterval(interval))
      return
    }
  }
}

const listen = (server: Server, port: number, host: string): Promise<boolean> =>
  new Promise((resolve) => {
    const onError = () => resolve(false)
    server.once("error", onError)
    server.listen(port, host, () => {
      server.off("error", onError)
      resolve(true)
    })
  })

const close = (server: Server): Promise<void> =>
  new Promise((resolve) => {
    if (!server.listening) return resolve()
    server.close(() => resolve())
  })

export const makeReceiver: Effect.Effect<Receiver, never, Scope.Scope> = Effect.gen(function* () {
  const received: Array<ReceivedRequest> = []
  const counts = new Map<string, number>()
  const scripts = new Map<string, Script>()
  const sockets = new Set<Socket>()

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Array<Buffer> = []
    // A client that gives up mid-request is normal here (time-out tests).
    req.on("error", () => undefined)
    res.on("error", () => undefined)
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const path = req.url ?? "/"
      const request: ReceivedRequest = {
        method: req.method ?? "",
        path,
        headers: flatHeaders(req),
        body: Buffer.concat(chunks).toString("utf8"),
        receivedAt: Date.now()
      }
      received.push(request)
      const pathname = path.split("?")[0] ?? path
      const n = (counts.get(pathname) ?? 0) + 1
      counts.set(pathname, n)
      const script = scripts.get(pathname) ?? Behaviour.ok
      answer(res, typeof script === "function" ? script(request, n) : script)
    })
  }

  const track = (server: Server) =>
    server.on("connection", (socket: Socket) => {
      sockets.add(socket)
      socket.on("close", () => sockets.delete(socket))
    })

  const servers = yield* Effect.acquireRelease(
    Effect.promise(async () => {
      const v4 = track(createServer(handle))
      await listen(v4, 0, "127.0.0.1")
      const address = v4.address()
      const port = address !== null && typeof address !== "string" ? address.port : 0
      // Best effort: lets tests reach the receiver as [::1] too; not every machine has IPv6.
      const v6 = track(createServer(handle))
      const ipv6 = await listen(v6, port, "::1")
      return { v4, v6, port, ipv6 }
    }),
    ({ v4, v6 }) =>
      Effect.promise(() => {
        for (const socket of sockets) socket.destroy()
        return Promise.all([close(v4), close(v6)])
      })
  )

  return {
    port: servers.port,
    ipv6: servers.ipv6,
    url: (path = "/") => `http://127.0.0.1:${servers.port}${path}`,
    requests: () => [...received],
    on: (path, script) => {
      scripts.set(path, script)
    },
    reset: () => {
      received.length = 0
      counts.clear()
      scripts.clear()
    }
  }
})
