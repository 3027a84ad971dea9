/**
 * What becomes of a statement whose fiber is interrupted (a client that hung up mid-request, a
 * timeout): it runs to its end on its connection, and the connection serves nobody else until then.
 *
 * `@effect/sql-pg` cancels such a statement with `SELECT pg_cancel_backend(<pid>)` sent over another
 * pooled connection, and that is unsafe in two ways:
 *
 * - The statement may already have finished when the cancel arrives. The cancel then lands on
 *   whatever the backend runs next: another request's statement (a 500 for an innocent request), or
 *   the ROLLBACK of the interrupted transaction, which would put a connection inside an aborted
 *   transaction back into the pool. Measured: 3 stray cancels in 60,000 racing statements.
 * - Inside a transaction the cancel needs a second connection. With one (embedded PGlite), or a pool
 *   in full use, it waited for one, up to its 5 s timeout, while the transaction held its own.
 *
 * Our statements are short (the longest are bounded reads), so letting them finish costs little and
 * is always correct. This `pg.Client`:
 *
 * - hides the backend's pid from `@effect/sql-pg`, which then never sends a cancel;
 * - runs callback-style queries one after another in its own queue, so the ROLLBACK an interrupted
 *   transaction issues waits for the statement before it (pg itself would queue it too, but warns
 *   that it will stop doing so) — or, in pg's pipeline mode (the config's `pipeline`), sends each at
 *   once behind the ones in flight: the server runs them in the order sent, each up to its own Sync,
 *   so the ROLLBACK still runs after the statement before it, and the statements of fibers sharing
 *   one transaction travel together instead of one round trip each;
 * - returns to the pool only once idle: a release while a statement still runs is kept until the
 *   statement ends, so the pool hands a free connection to the next request instead of a busy one;
 * - keeps a connection error that arrives meanwhile from crashing the process (it still fails the
 *   statement, and the pool drops the connection on release).
 */
import pg from "pg"

type Callback = (error: Error | null, result: unknown) => void
type Release = (error?: Error | boolean) => void

const isCallback = (value: unknown): value is Callback => typeof value === "function"

const isRelease = (value: unknown): value is Release => typeof value === "function"

export class SettlingClient extends pg.Client {
  /** The backend's pid, for diagnostics and tests (`processID` reads as undefined on purpose). */
  backendPid: number | undefined = undefined

  constructor(config?: string | pg.ClientConfig) {
    super(config)
    const send: (...args: ReadonlyArray<unknown>) => unknown = pg.Client.prototype.query.bind(this)
    const pipelined = this.pipeline
    const waiting: Array<() => void> = []
    /** Statements sent whose callbacks have not run yet: at most one unless pipelined. */
    let inFlight = 0
    let poolRelease: Release | undefined
    let heldRelease: (() => void) | undefined

    /**
     * Pipelined statements sent in one tick (fibers of one transaction resumed by the same answers)
     * leave in one socket write: the stream is corked at the second and uncorked once the tick's
     * work is done. A system call per statement was a fifth of the renewal workers' CPU.
     */
    let corked = false
    const corkForTick = () => {
      if (corked) return
      const stream = this.connection.stream
      corked = true
      stream.cork()
      process.nextTick(() => {
        corked = false
        stream.uncork()
      })
    }

    const next = () => {
      const start = waiting.shift()
      if (start !== undefined) return start()
      if (inFlight > 0) return
      const held = heldRelease
      heldRelease = undefined
      held?.()
    }

    // Callback-style calls (the ones @effect/sql-pg and pg-pool make) are queued; promise-style calls
    // and submittables (cursors) pass through untouched.
    const query = (...args: ReadonlyArray<unknown>): unknown => {
      const callback = args[args.length - 1]
      if (!isCallback(callback)) return send(...args)
      const start = () => {
        // Alone, a statement leaves at once (as without pipelining); behind another, with the tick's others.
        if (pipelined && inFlight > 0) corkForTick()
        inFlight++
        send(...args.slice(0, -1), (error: Error | null, result: unknown) => {
          try {
            callback(error, result)
          } finally {
            inFlight--
            next()
          }
        })
      }
      if (inFlight > 0 && !pipelined) waiting.push(start)
      else start()
      return undefined
    }

    const release: Release = (error) => {
      const toPool = poolRelease
      if (toPool === undefined) return
      this.onRelease()
      // A broken connection goes back at once: the pool destroys it, failing what is still queued.
      if (inFlight === 0 || error !== undefined) toPool(error)
      else heldRelease = () => toPool()
    }

    Object.defineProperties(this, {
      query: { value: query, writable: true, configurable: true },
      processID: {
        configurable: true,
        get: () => undefined,
        set: (pid: unknown) => {
          this.backendPid = typeof pid === "number" ? pid : undefined
        }
      },
      // pg-pool sets its release function on each checkout; callers get ours, which may hold it.
      release: {
        configurable: true,
        get: () => release,
        set: (value: unknown) => {
          poolRelease = isRelease(value) ? value : undefined
        }
      }
    })
    this.on("error", () => {})
  }

  /** Called as the connection goes back to the pool: a subclass forgets what it kept for its user. */
  protected onRelease(): void {}
}
