/**
 * `/ready`'s checks while the database cannot be reached: the database check says so and why; the
 * migrations check does not claim "N pending" (it cannot know). Embedded PostgreSQL behind a TCP
 * proxy that is cut — no server needed (the whole service against a cut PostgreSQL is
 * test/ops.test.ts).
 */
import { PgClient } from "@effect/sql-pg"
import { PGlite } from "@electric-sql/pglite"
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { Effect, Layer } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AppConfig, makeAppConfig } from "../../src/config.js"
import { pgTypes } from "../../src/db/Database.js"
import { migrate } from "../../src/db/Migrations.js"
import { Readiness, ReadinessLive } from "../../src/http/Readiness.js"
import { tcpProxy } from "../support/service.js"

let db: PGlite
let server: PGLiteSocketServer
let proxy: Awaited<ReturnType<typeof tcpProxy>>

beforeAll(async () => {
  db = await PGlite.create("memory://", { extensions: { pg_trgm } })
  server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 1 })
  await server.start()
  const conn = server.getServerConn()
  proxy = await tcpProxy({ host: "127.0.0.1", port: Number(conn.slice(conn.lastIndexOf(":") + 1)) })
  await proxy.restore()
}, 60_000)

afterAll(async () => {
  await proxy.cut()
  await server.stop()
  await db.close()
})

describe("/ready while the database is unreachable", () => {
  it("says the database is unreachable and the migrations unknown, and recovers", async () => {
    const Sql = PgClient.layer({
      host: "127.0.0.1",
      port: proxy.port,
      database: "postgres",
      username: "postgres",
      maxConnections: 1,
      connectTimeout: "2 seconds",
      types: pgTypes
    })
    const check = Effect.flatMap(Readiness, (r) => r.check)
    await Effect.gen(function* () {
      yield* migrate()
      expect(yield* check).toMatchObject({ status: "ready" })

      yield* Effect.promise(() => proxy.cut())
      const down = yield* check
      expect(down.status).toBe("not_ready")
      expect(down.checks.database).toEqual({ ok: false, detail: expect.stringMatching(/^unreachable \(/) })
      expect(down.checks.migrations).toEqual({ ok: false, detail: "unknown: database unreachable" })
      expect(JSON.stringify(down)).not.toMatch(/pending/)

      yield* Effect.promise(() => proxy.restore())
      expect(yield* check).toMatchObject({ status: "ready" })
    }).pipe(
      Effect.provide(ReadinessLive),
      Effect.provide(Sql),
      Effect.provide(Layer.succeed(AppConfig, makeAppConfig({ role: "api" }))),
      Effect.scoped,
      Effect.runPromise
    )
  }, 60_000)
})
