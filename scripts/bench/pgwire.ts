/**
 * A counting TCP proxy for the PostgreSQL wire protocol: the service connects to it instead of the
 * database and it forwards every byte both ways unchanged, while reading the client's messages to
 * record each statement sent — a simple `Query` ('Q') or an extended-protocol `Execute` ('E', with
 * the text of the statement its portal was bound to). It needs no change to the service and works
 * in front of a PostgreSQL server and of PGlite's socket alike. Used by `npm run bench:http` (the
 * statements per request) and by test/http/statement-count.test.ts (a ceiling per command).
 *
 * BEGIN, SAVEPOINT and COMMIT count. It also counts round trips: each simple `Query` and each
 * `Sync` (the end of an extended-protocol pipeline, which may carry several statements: a deferred
 * BEGIN and writes travel with the next statement, src/db/PipelinedStatements.ts).
 */
import { createServer, connect as netConnect, type Socket } from "node:net"

/** Untyped messages that precede the startup message (their first int32 after the length). */
const SSL_REQUEST = 80_877_103
const GSSENC_REQUEST = 80_877_104

export interface CountingProxy {
  /** The port it listens on, on 127.0.0.1. */
  readonly port: number
  /** Every statement recorded so far, in the order sent (all connections interleaved). */
  readonly statements: () => ReadonlyArray<string>
  /** The statements recorded after `mark` (a previous `statements().length`). */
  readonly since: (mark: number) => ReadonlyArray<string>
  /** Round trips so far (simple Queries and Syncs, all connections). */
  readonly roundTrips: () => number
  /** Chunks the clients sent so far (all connections): statements sent together arrive as one. */
  readonly writes: () => number
  /** `url` (a postgres:// URL of the upstream server) with its host and port replaced by the proxy's. */
  readonly urlFor: (url: string) => string
  readonly close: () => Promise<void>
}

/** Reads the client side of one connection; `record` gets each statement's text, `trip` each round trip. */
const clientReader = (record: (text: string) => void, trip: () => void) => {
  let buffer: Buffer = Buffer.alloc(0)
  let started = false
  const prepared = new Map<string, string>()
  const portals = new Map<string, string>()
  const cstring = (b: Buffer, at: number): readonly [string, number] => {
    const end = b.indexOf(0, at)
    return end < 0 ? ["", b.length] : [b.toString("utf8", at, end), end + 1]
  }
  const message = (type: string, body: Buffer) => {
    switch (type) {
      case "Q":
        record(cstring(body, 0)[0])
        trip()
        break
      case "S":
        trip()
        break
      case "P": {
        const [name, next] = cstring(body, 0)
        prepared.set(name, cstring(body, next)[0])
        break
      }
      case "B": {
        const [portal, next] = cstring(body, 0)
        portals.set(portal, prepared.get(cstring(body, next)[0]) ?? "<unknown prepared statement>")
        break
      }
      case "E":
        record(portals.get(cstring(body, 0)[0]) ?? "<unknown portal>")
        break
    }
  }
  return (chunk: Buffer) => {
    buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk])
    let at = 0
    for (;;) {
      if (!started) {
        if (buffer.length - at < 8) break
        const length = buffer.readInt32BE(at)
        if (buffer.length - at < length) break
        const code = buffer.readInt32BE(at + 4)
        if (code !== SSL_REQUEST && code !== GSSENC_REQUEST) started = true
        at += length
        continue
      }
      if (buffer.length - at < 5) break
      const length = buffer.readInt32BE(at + 1)
      if (buffer.length - at < 1 + length) break
      message(String.fromCharCode(buffer[at] ?? 0), buffer.subarray(at + 5, at + 1 + length))
      at += 1 + length
    }
    buffer = at === buffer.length ? Buffer.alloc(0) : buffer.subarray(at)
  }
}

/** Starts the proxy in front of `upstream` (host and port of a PostgreSQL server or PGlite socket). */
export const startCountingProxy = (upstream: { readonly host: string; readonly port: number }) =>
  new Promise<CountingProxy>((resolve, reject) => {
    const statements: Array<string> = []
    let roundTrips = 0
    let writes = 0
    const sockets = new Set<Socket>()
    const server = createServer((client) => {
      const database = netConnect(upstream.port, upstream.host)
      sockets.add(client)
      sockets.add(database)
      client.setNoDelay(true)
      database.setNoDelay(true)
      const read = clientReader(
        (text) => statements.push(text),
        () => roundTrips++
      )
      client.on("data", (chunk: Buffer) => {
        writes++
        read(chunk)
        database.write(chunk)
      })
      database.on("data", (chunk: Buffer) => client.write(chunk))
      const closeBoth = () => {
        client.destroy()
        database.destroy()
        sockets.delete(client)
        sockets.delete(database)
      }
      client.on("close", closeBoth)
      database.on("close", closeBoth)
      client.on("error", closeBoth)
      database.on("error", closeBoth)
    })
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      if (address === null || typeof address === "string") {
        reject(new Error("the proxy is not on TCP"))
        return
      }
      resolve({
        port: address.port,
        statements: () => statements,
        since: (mark) => statements.slice(mark),
        roundTrips: () => roundTrips,
        writes: () => writes,
        urlFor: (url) => {
          const u = new URL(url)
          u.hostname = "127.0.0.1"
          u.port = String(address.port)
          return u.toString()
        },
        close: () =>
          new Promise<void>((done) => {
            for (const socket of sockets) socket.destroy()
            server.close(() => done())
          })
      })
    })
  })

/** A statement's text on one line, literals kept, for printing. */
export const oneLine = (text: string) => text.replace(/\s+/g, " ").trim()
