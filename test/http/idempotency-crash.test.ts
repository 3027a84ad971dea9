/**
 * Idempotency-Key across a process death (issue 16 §1), with real processes on the test's
 * PostgreSQL database (test/support/idempotency-child.ts): a service SIGKILLed after its handler
 * wrote but before the request's COMMIT left nothing behind, and one SIGKILLed between the COMMIT
 * and the response left the response; either way the next process resolves the key at once — it
 * runs the request, or replays it — with exactly one row written.
 * PostgreSQL only: child processes cannot share an embedded database.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { createServer } from "node:net"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Option, Redacted } from "effect"
import { AppConfig } from "../../src/config.js"
import { TestPersistence, usingRealPostgres } from "../support/database.js"

const freePort = Effect.async<number>((resume) => {
  const server = createServer()
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

interface Answer {
  readonly status: number
  readonly replayed: boolean
  readonly text: string
}

const post = (port: number, key: string, item: string) =>
  Effect.tryPromise(() =>
    fetch(`http://127.0.0.1:${port}/probe/writes`, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": key },
      body: JSON.stringify({ item })
    }).then(
      async (r): Promise<Answer> => ({
        status: r.status,
        replayed: r.headers.get("idempotent-replayed") === "true",
        text: await r.text()
      })
    )
  )

/** Starts a service process (killing itself as `die` says) and waits until it answers. */
const startService = (die: string) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const port = yield* freePort
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        spawn(process.execPath, ["--import", "tsx", "test/support/idempotency-child.ts"], {
          cwd: process.cwd(),
          env: {
            PATH: process.env.PATH,
            HOME: process.env.HOME,
            PORT: String(port),
            DIE: die,
            DATABASE_URL: Option.match(config.databaseUrl, { onNone: () => "", onSome: Redacted.value }),
            DATA_ENCRYPTION_KEY: Option.match(config.dataEncryptionKey, {
              onNone: () => "",
              onSome: Redacted.value
            })
          },
          stdio: "ignore"
        })
      ),
      (child) => Effect.sync(() => void child.kill("SIGKILL"))
    )
    for (let i = 0; i < 300; i++) {
      const up = yield* Effect.either(
        Effect.tryPromise(() => fetch(`http://127.0.0.1:${port}/nothing`).then((r) => r.status))
      )
      if (up._tag === "Right") return { port, child }
      yield* Effect.sleep("100 millis")
    }
    return yield* Effect.dieMessage("the service process did not start")
  })

const exited = (child: ChildProcess) =>
  Effect.async<string | null>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.succeed(child.signalCode))
    child.once("exit", (_code, signal) => resume(Effect.succeed(signal)))
  })

const rowsOf = (item: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ row: number }>`SELECT row_id AS row FROM probe_writes WHERE item = ${item} ORDER BY row_id`,
      (rows) => rows.map((r) => r.row)
    )
  )

/** A service SIGKILLed at `hook` while it handles `item` under `key`; then the item's rows. */
const killedDuring = (hook: string, key: string, item: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`CREATE TABLE IF NOT EXISTS probe_writes (row_id serial PRIMARY KEY, item text NOT NULL)`
    const doomed = yield* startService(hook)
    const lost = yield* Effect.either(post(doomed.port, key, item))
    expect(lost._tag).toBe("Left")
    expect(yield* exited(doomed.child)).toBe("SIGKILL")
    return yield* rowsOf(item)
  })

describe.skipIf(!usingRealPostgres)("Idempotency-Key across a process death (PostgreSQL)", () => {
  layer(TestPersistence, { excludeTestServices: true, timeout: 180_000 })("", (it) => {
    it.scoped("killed after the handler wrote, before COMMIT: nothing happened, the retry runs at once", () =>
      Effect.gen(function* () {
        const item = `before-${Date.now()}`
        expect(yield* killedDuring("after-write", "key-before", item)).toEqual([])
        const next = yield* startService("")
        const retry = yield* post(next.port, "key-before", item)
        expect(retry.status, retry.text).toBe(201)
        expect(retry.replayed).toBe(false)
        const rows = yield* rowsOf(item)
        expect(rows).toHaveLength(1)
        expect(JSON.parse(retry.text)).toEqual({ item, row: rows[0] })
        const again = yield* post(next.port, "key-before", item)
        expect(again.replayed).toBe(true)
        expect(again.text).toBe(retry.text)
        expect(yield* rowsOf(item)).toHaveLength(1)
      })
    )

    it.scoped("killed between COMMIT and the response: the next process replays it at once", () =>
      Effect.gen(function* () {
        const item = `after-${Date.now()}`
        const rows = yield* killedDuring("after-commit", "key-after", item)
        expect(rows).toHaveLength(1)
        const next = yield* startService("")
        const retry = yield* post(next.port, "key-after", item)
        expect(retry.status, retry.text).toBe(201)
        expect(retry.replayed).toBe(true)
        expect(JSON.parse(retry.text)).toEqual({ item, row: rows[0] })
        expect(yield* rowsOf(item)).toHaveLength(1)
      })
    )
  })
})
