/**
 * The migration runner: plain numbered SQL files applied in order, once; a file numbered below the
 * newest applied one, an edited applied file, or a malformed name is an error, never skipped.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { expect } from "vitest"
import { DatabaseLive } from "../../src/db/Database.js"
import { loadMigrations, migrate, migrationStatus } from "../../src/db/Migrations.js"
import { TestConfig } from "../support/database.js"

/** A scratch folder for migration files, removed when the test ends (however it ends). */
const scratchDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "cp-migrations-"))),
  (d) => Effect.sync(() => rmSync(d, { recursive: true, force: true }))
)
const write = (d: string, file: string, sql: string) => writeFileSync(join(d, file), sql)

const tables = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql<{ name: string }>`SELECT table_name AS name FROM information_schema.tables
      WHERE table_schema = 'mig' ORDER BY table_name`,
    (rows) => rows.map((r) => r.name)
  )
)

layer(DatabaseLive.pipe(Layer.provideMerge(TestConfig)), { excludeTestServices: true, timeout: 60_000 })(
  "migrations",
  (it) => {
    it.scoped("applies pending files in order, once; refuses late, edited and failing migrations", () =>
      Effect.gen(function* () {
        const d = yield* scratchDir
        write(d, "0001_schema.sql", "CREATE SCHEMA mig; CREATE TABLE mig.a (id int);")
        write(d, "0003_c.sql", "CREATE TABLE mig.c (id int);")
        const first = yield* migrate(d)
        expect(first.applied.map((m) => m.id)).toEqual([1, 3])
        expect(first.current).toBe(3)
        expect(yield* tables).toEqual(["a", "c"])
        expect((yield* migrate(d)).applied).toEqual([])
        expect(yield* migrationStatus(yield* loadMigrations(d))).toEqual({ upToDate: true, pending: 0 })

        // A late-merged file numbered below the newest applied one is an error, not skipped.
        write(d, "0002_b.sql", "CREATE TABLE mig.b (id int);")
        const late = yield* Effect.flip(migrate(d))
        expect(late._tag).toBe("MigrationError")
        expect(late._tag === "MigrationError" && late.reason).toBe("out_of_order")
        expect(yield* tables).toEqual(["a", "c"])
        expect(yield* migrationStatus(yield* loadMigrations(d))).toEqual({ upToDate: false, pending: 1 })
        rmSync(join(d, "0002_b.sql"))

        // Editing an applied migration is refused.
        write(d, "0003_c.sql", "CREATE TABLE mig.c (id bigint);")
        const edited = yield* Effect.flip(migrate(d))
        expect(edited._tag === "MigrationError" && edited.reason).toBe("checksum_mismatch")
        write(d, "0003_c.sql", "CREATE TABLE mig.c (id int);")

        // A failing batch rolls back whole: neither of its migrations is applied.
        write(d, "0004_d.sql", "CREATE TABLE mig.d (id int);")
        write(d, "0005_broken.sql", "CREATE TABLE mig.e (id int); SELECT 1/0;")
        const failed = yield* Effect.exit(migrate(d))
        expect(failed._tag).toBe("Failure")
        expect(yield* tables).toEqual(["a", "c"])
        write(d, "0005_broken.sql", "CREATE TABLE mig.e (id int);")
        expect((yield* migrate(d)).applied.map((m) => m.id)).toEqual([4, 5])
        expect(yield* tables).toEqual(["a", "c", "d", "e"])
      })
    )

    it.scoped("malformed file names and duplicate numbers are errors", () =>
      Effect.gen(function* () {
        const d = yield* scratchDir
        write(d, "1_ok.sql", "SELECT 1;")
        write(d, "second.sql", "SELECT 1;")
        expect((yield* Effect.flip(loadMigrations(d))).reason).toBe("invalid_file_name")
        rmSync(join(d, "second.sql"))
        write(d, "0001_again.sql", "SELECT 1;")
        expect((yield* Effect.flip(loadMigrations(d))).reason).toBe("duplicate_id")
      })
    )

    it.effect("the service's own migrations load cleanly, numbered and unique", () =>
      Effect.gen(function* () {
        const own = yield* loadMigrations()
        expect(own.length).toBeGreaterThanOrEqual(3)
        expect(own.map((m) => m.id)).toEqual([...own.map((m) => m.id)].sort((a, b) => a - b))
      })
    )
  }
)
