/**
 * The embedded database's socket: PGlite served over the PostgreSQL wire protocol on 127.0.0.1, to
 * the service's own pool and to scripts that attach to the running service (`EmbeddedAccess`).
 *
 * PGlite is ONE backend session. pglite-socket 0.2.17 queues single protocol messages from all its
 * connections, so (with `maxConnections` > 1) connection B's Parse can land between connection A's
 * Parse and Bind — A then runs B's statement with A's parameters — and it only keeps a connection's
 * messages together once `BEGIN` has run. This front grants the session to one connection at a time
 * instead: from that connection's first message until PGlite answers it with ReadyForQuery status
 * `I` (idle, outside any transaction). A whole extended-protocol exchange (Parse…Sync) and a whole
 * BEGIN…COMMIT therefore run without anything of another connection in between; waiting connections
 * are served first come, first served, one statement or transaction each in turn.
 */
import { createServer, type Server, type Socket } from "node:net"
import type { PGlite } from "@electric-sql/pglite"

const SSL_REQUEST = 80877103
const GSSENC_REQUEST = 80877104
const CANCEL_REQUEST = 80877102
const PROTOCOL_3 = 196608

/** FIFO mutex over the PGlite session. */
class SessionGate {
  private holder: Connection | null = null
  private readonly waiting: Array<{ readonly conn: Connection; readonly grant: () => void }> = []

  isHeldBy(conn: Connection): boolean {
    return this.holder === conn
  }

  acquire(conn: Connection): Promise<void> {
    if (this.holder === conn) return Promise.resolve()
    if (this.holder === null) {
      this.holder = conn
      return Promise.resolve()
    }
    return new Promise((grant) => this.waiting.push({ conn, grant }))
  }

  release(conn: Connection): void {
    if (this.holder !== conn) return
    const next = this.waiting.shift()
    this.holder = next?.conn ?? null
    next?.grant()
  }

  /** A connection that went away stops waiting. */
  forget(conn: Connection): void {
    const index = this.waiting.findIndex((w) => w.conn === conn)
    if (index >= 0) this.waiting.splice(index, 1)
  }
}

/**
 * Follows the backend messages PGlite writes for one frontend message (possibly split over chunks)
 * and remembers whether the last one was ReadyForQuery, and its transaction status.
 */
class ReplyTracker {
  private header: Buffer = Buffer.alloc(0)
  private remaining = 0
  private type = 0
  /** Transaction status of the last ReadyForQuery ('I', 'T' or 'E'), when it was the last message. */
  lastReadyStatus: string | null = null

  reset(): void {
    this.header = Buffer.alloc(0)
    this.remaining = 0
    this.lastReadyStatus = null
  }

  feed(chunk: Uint8Array): void {
    let offset = 0
    while (offset < chunk.length) {
      if (this.remaining > 0) {
        const take = Math.min(this.remaining, chunk.length - offset)
        // ReadyForQuery's body is its one status byte.
        if (this.type === 0x5a && this.remaining === 1)
          this.lastReadyStatus = String.fromCharCode(chunk[offset] ?? 0)
        this.remaining -= take
        offset += take
        continue
      }
      const need = 5 - this.header.length
      this.header = Buffer.concat([this.header, chunk.subarray(offset, offset + need)])
      offset += Math.min(need, chunk.length - offset)
      if (this.header.length < 5) return
      this.type = this.header[0] ?? 0
      this.remaining = this.header.readInt32BE(1) - 4
      this.header = Buffer.alloc(0)
      this.lastReadyStatus = null
    }
  }
}

const SYNC = new Uint8Array([0x53, 0, 0, 0, 4])

/** One client connection: its bytes become whole messages, run one at a time under the gate. */
class Connection {
  private buffer: Buffer = Buffer.alloc(0)
  private started = false
  private closed = false
  private readonly pending: Array<Uint8Array> = []
  private pumping = false
  private readonly reply = new ReplyTracker()

  constructor(
    private readonly db: PGlite,
    private readonly gate: SessionGate,
    private readonly socket: Socket,
    private readonly onGone: (conn: Connection) => void
  ) {
    socket.setNoDelay(true)
    socket.on("data", (data) => this.receive(data))
    socket.on("error", () => this.close())
    socket.on("close", () => this.close())
  }

  private receive(data: Buffer): void {
    this.buffer = this.buffer.length === 0 ? data : Buffer.concat([this.buffer, data])
    for (;;) {
      if (!this.started) {
        // Startup-phase packets have no type byte: length, then a code.
        if (this.buffer.length < 8) return
        const length = this.buffer.readInt32BE(0)
        if (length < 8) {
          void this.close()
          return
        }
        if (this.buffer.length < length) return
        const code = this.buffer.readInt32BE(4)
        const packet = this.buffer.subarray(0, length)
        this.buffer = this.buffer.subarray(length)
        if (code === SSL_REQUEST || code === GSSENC_REQUEST) {
          this.socket.write("N")
          continue
        }
        if (code === CANCEL_REQUEST || code !== PROTOCOL_3) {
          // PGlite has no backend to signal; an unknown protocol version is refused by closing.
          this.socket.destroy()
          return
        }
        this.started = true
        this.enqueue(new Uint8Array(packet))
        continue
      }
      if (this.buffer.length < 5) return
      const length = 1 + this.buffer.readInt32BE(1)
      if (length < 5) {
        // Not the PostgreSQL protocol.
        void this.close()
        return
      }
      if (this.buffer.length < length) return
      const message = new Uint8Array(this.buffer.subarray(0, length))
      this.buffer = this.buffer.subarray(length)
      // Terminate ('X') is the client's goodbye; PGlite's session outlives it.
      if (message[0] === 0x58) {
        this.socket.end()
        this.close()
        return
      }
      this.enqueue(message)
    }
  }

  private enqueue(message: Uint8Array): void {
    this.pending.push(message)
    if (!this.pumping) void this.pump()
  }

  private async pump(): Promise<void> {
    this.pumping = true
    try {
      for (let message = this.pending.shift(); message; message = this.pending.shift()) {
        await this.gate.acquire(this)
        if (this.closed) break
        this.reply.reset()
        await this.db.runExclusive(() =>
          this.db.execProtocolRawStream(message, {
            onRawData: (data) => {
              this.reply.feed(data)
              // A copy: PGlite hands out a view of its memory, reused by the next message while
              // the socket may still be queueing this one.
              if (!this.closed) this.socket.write(Buffer.from(data))
            }
          })
        )
        // Idle outside a transaction, with the whole answer out: another connection may go.
        if (this.reply.lastReadyStatus === "I") this.gate.release(this)
      }
    } catch {
      // PGlite itself failed (not an SQL error, those are ErrorResponse messages): drop the client.
      void this.close()
    } finally {
      this.pumping = false
    }
    if (this.closed) await this.cleanUp()
  }

  private finished: () => void = () => {}
  private readonly gone = new Promise<void>((resolve) => {
    this.finished = resolve
  })

  /** Ends the connection; resolves once whatever it held of the session is cleaned up. */
  close(): Promise<void> {
    if (this.closed) return this.gone
    this.closed = true
    this.pending.length = 0
    this.socket.destroy()
    this.gate.forget(this)
    this.onGone(this)
    if (!this.gate.isHeldBy(this)) this.finished()
    // A message in flight finishes first; the pump then cleans up.
    else if (!this.pumping) void this.cleanUp()
    return this.gone
  }

  /**
   * A client that left while holding the session leaves it as it would a real backend: whatever
   * extended-protocol exchange it began is ended (Sync) and its open transaction rolled back.
   */
  private async cleanUp(): Promise<void> {
    if (!this.gate.isHeldBy(this)) return this.finished()
    try {
      await this.db.runExclusive(() => this.db.execProtocolRaw(SYNC))
      if (this.db.isInTransaction()) await this.db.exec("ROLLBACK")
    } catch {
      // The database is closing; nothing left to clean.
    } finally {
      this.gate.release(this)
      this.finished()
    }
  }
}

export interface EmbeddedServer {
  readonly port: number
  readonly stop: () => Promise<void>
}

/** Serves `db` on 127.0.0.1 (a free port when `port` is 0). */
export const startEmbeddedServer = (db: PGlite, options: { readonly port?: number } = {}) =>
  new Promise<EmbeddedServer>((resolve, reject) => {
    const gate = new SessionGate()
    const connections = new Set<Connection>()
    const server: Server = createServer((socket) => {
      connections.add(new Connection(db, gate, socket, (conn) => connections.delete(conn)))
    })
    server.once("error", reject)
    server.listen(options.port ?? 0, "127.0.0.1", () => {
      const address = server.address()
      if (address === null || typeof address !== "object") {
        reject(new Error("the embedded database socket has no TCP address"))
        return
      }
      resolve({
        port: address.port,
        // Clients are cut off and whatever they held is rolled back before the database closes.
        stop: async () => {
          const closed = new Promise<void>((done) => server.close(() => done()))
          await Promise.all([...connections].map((conn) => conn.close()))
          await closed
        }
      })
    })
  })
