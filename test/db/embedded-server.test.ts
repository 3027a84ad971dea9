/**
 * The embedded database's socket with several clients (the service's pool and an attached script):
 * PGlite is one session, so the socket gives it to one connection at a time, for a whole
 * extended-protocol exchange or a whole transaction. pglite-socket 0.2.17 with `maxConnections: 2`
 * fails the first case: a client's Bind lands on the other client's Parse.
 */
import { PGlite } from "@electric-sql/pglite"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type EmbeddedServer, startEmbeddedServer } from "../../src/db/EmbeddedServer.js"

let db: PGlite
let server: EmbeddedServer
const clients: Array<pg.Client> = []

const connect = async () => {
  const client = new pg.Client({
    host: "127.0.0.1",
    port: server.port,
    user: "postgres",
    database: "postgres"
  })
  await client.connect()
  clients.push(client)
  return client
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

beforeAll(async () => {
  db = await PGlite.create("memory://")
  server = await startEmbeddedServer(db)
  await db.exec("CREATE TABLE t (id serial PRIMARY KEY, who text NOT NULL)")
})

afterAll(async () => {
  await Promise.all(clients.map((c) => c.end().catch(() => undefined)))
  await server.stop()
  await db.close()
})

describe("embedded socket with several connections", () => {
  it("never mixes two connections' extended-protocol exchanges (Parse of one, Bind of the other)", async () => {
    const [a, b] = [await connect(), await connect()]
    // A large parameter arrives in several TCP chunks, so A's Bind comes in after its Parse ran.
    const big = "x".repeat(300_000)
    const wrong: Array<string> = []
    await Promise.all([
      (async () => {
        for (let i = 0; i < 60; i++) {
          const { rows } = await a.query("SELECT $1::int AS a_i, length($2::text) AS a_len", [i, big])
          if (rows[0]?.a_i !== i || rows[0]?.a_len !== big.length)
            wrong.push(`a ${JSON.stringify(rows[0]).slice(0, 60)}`)
        }
      })(),
      (async () => {
        for (let i = 0; i < 60; i++) {
          const { rows } = await b.query("SELECT $1::int AS b_i, $2::text AS b_s", [i, "small"])
          if (rows[0]?.b_i !== i || rows[0]?.b_s !== "small")
            wrong.push(`b ${JSON.stringify(rows[0]).slice(0, 60)}`)
        }
      })()
    ])
    expect(wrong).toEqual([])
  })

  it("runs another connection's writes only outside a multi-statement transaction", async () => {
    const [script, service] = [await connect(), await connect()]
    await script.query("BEGIN")
    await script.query("INSERT INTO t (who) VALUES ('script')")
    // The service writes while the script's transaction is open, the way live traffic would.
    const serviceWrites = (async () => {
      for (const n of [1, 2, 3]) await service.query("INSERT INTO t (who) VALUES ($1)", [`service-${n}`])
    })()
    await sleep(100)
    const inside = await script.query<{ who: string }>("SELECT who FROM t ORDER BY id")
    await sleep(50)
    const later = await script.query<{ who: string }>("SELECT who FROM t ORDER BY id")
    await script.query("ROLLBACK")
    await serviceWrites
    // Inside the transaction: only its own row, twice the same; the rollback took nothing else along.
    expect(inside.rows.map((r) => r.who)).toEqual(["script"])
    expect(later.rows.map((r) => r.who)).toEqual(["script"])
    const after = await service.query<{ who: string }>("SELECT who FROM t ORDER BY who")
    expect(after.rows.map((r) => r.who)).toEqual(["service-1", "service-2", "service-3"])
    await service.query("DELETE FROM t")
  })

  it("an error in one connection's exchange does not swallow the other's messages", async () => {
    const [a, b] = [await connect(), await connect()]
    const results = await Promise.all([
      (async () => {
        let failed = 0
        for (let i = 0; i < 40; i++) await a.query("SELECT 1 / $1::int", [0]).catch(() => failed++)
        return failed
      })(),
      (async () => {
        const got: Array<number> = []
        for (let i = 0; i < 40; i++) got.push((await b.query("SELECT $1::int AS v", [i])).rows[0]?.v)
        return got
      })()
    ])
    expect(results[0]).toBe(40)
    expect(results[1]).toEqual(Array.from({ length: 40 }, (_, i) => i))
  })

  it("large answers arrive intact while another connection is served", async () => {
    const [a, b] = [await connect(), await connect()]
    const query = "SELECT string_agg(md5(g::text), '' ORDER BY g) AS s FROM generate_series(1, $1::int) g"
    const expected = (await db.query<{ s: string }>(query, [60_000])).rows[0]?.s
    const [big, small] = await Promise.all([
      Promise.all([1, 2, 3].map(() => a.query<{ s: string }>(query, [60_000]))),
      (async () => {
        const got: Array<number> = []
        for (let i = 0; i < 30; i++) got.push((await b.query("SELECT $1::int AS v", [i])).rows[0]?.v)
        return got
      })()
    ])
    expect(expected?.length).toBe(60_000 * 32)
    for (const result of big) expect(result.rows[0]?.s === expected).toBe(true)
    expect(small).toEqual(Array.from({ length: 30 }, (_, i) => i))
  })

  it("a client that disconnects inside a transaction has it rolled back, and the others go on", async () => {
    const other = await connect()
    const leaving = new pg.Client({
      host: "127.0.0.1",
      port: server.port,
      user: "postgres",
      database: "postgres"
    })
    await leaving.connect()
    await leaving.query("BEGIN")
    await leaving.query("INSERT INTO t (who) VALUES ('gone')")
    const waiting = other.query<{ n: number }>("SELECT count(*)::int AS n FROM t")
    await sleep(50)
    await leaving.end()
    expect((await waiting).rows[0]?.n).toBe(0)
    expect(db.isInTransaction()).toBe(false)
  })

  it("serves waiting connections in turn: a loop of transactions delays another client, never starves it", async () => {
    const [script, service] = [await connect(), await connect()]
    let transactionsDone = 0
    const loop = (async () => {
      for (let i = 0; i < 20; i++) {
        await script.query("BEGIN")
        await script.query("INSERT INTO t (who) VALUES ('batch')")
        await sleep(20)
        await script.query("COMMIT")
        transactionsDone++
      }
    })()
    await sleep(30)
    await service.query("SELECT 1")
    const doneWhenServed = transactionsDone
    await loop
    // Served after the transaction in progress (or the next one), not after the whole loop.
    expect(doneWhenServed).toBeLessThan(5)
    await service.query("DELETE FROM t")
  })
})
