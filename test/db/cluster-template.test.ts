/**
 * A fresh embedded data directory is unpacked from a cached initdb cluster instead of running initdb
 * (~4.5 s of CPU per first start, issue #17 item 4): the first fresh directory of an installation
 * writes the template right after initdb; the next one starts from it and is a working cluster
 * (pg_trgm, migrations) like any other. Embedded only.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { clusterTemplate, embeddedLayer } from "../../src/db/Database.js"
import { migrate } from "../../src/db/Migrations.js"
import { usingRealPostgres } from "../support/database.js"

const dirs: Array<string> = []
const freshDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "cluster-template-"))
  dirs.push(dir)
  return join(dir, "data")
}

afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
})

/** Opens `dataDir`, migrates it, and answers a pg_trgm query and the cluster's migration count. */
const openAndMigrate = (dataDir: string) =>
  Effect.gen(function* () {
    yield* migrate()
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ similar: boolean; migrations: number }>`
      SELECT similarity('commerce', 'commerse') > 0.3 AS similar,
             (SELECT count(*)::int FROM schema_migrations) AS migrations`
    return row
  }).pipe(Effect.provide(embeddedLayer(dataDir)), Effect.scoped, Effect.runPromise)

describe.skipIf(usingRealPostgres)("embedded cluster template", () => {
  it("a fresh directory leaves (or uses) the initdb template, and starts from it as a full cluster", async () => {
    const file = clusterTemplate.file()
    expect(file).toBeDefined()
    const first = await openAndMigrate(freshDir())
    expect(existsSync(file ?? "")).toBe(true)
    const dataDir = freshDir()
    const second = await openAndMigrate(dataDir)
    expect(existsSync(join(dataDir, "PG_VERSION"))).toBe(true)
    expect(second).toEqual(first)
    expect(second?.similar).toBe(true)
  }, 120_000)
})
