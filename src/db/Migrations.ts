/**
 * Forward-only migrations: plain numbered SQL files (`migrations/0001_name.sql`), applied in order at
 * start-up and by `npm run migrate`. Unlike @effect/sql's migrator, a file numbered below the newest
 * applied migration is an error (it would otherwise be skipped silently), and so is an applied file
 * whose content changed.
 */
import { readdirSync, readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Data, Effect } from "effect"
import { sha256Hex } from "../base/Sha256.js"

export interface Migration {
  readonly id: number
  readonly name: string
  readonly sql: string
  readonly checksum: string
}

export class MigrationError extends Data.TaggedError("MigrationError")<{
  readonly reason:
    | "invalid_file_name"
    | "duplicate_id"
    | "out_of_order"
    | "checksum_mismatch"
    | "missing_file"
  readonly message: string
}> {}

export const defaultMigrationsDir = fileURLToPath(new URL("../../migrations/", import.meta.url))

const FILE_NAME = /^(\d+)_([A-Za-z0-9_-]+)\.sql$/

export const loadMigrations = (
  dir: string = defaultMigrationsDir
): Effect.Effect<Migration[], MigrationError> =>
  Effect.gen(function* () {
    const files = readdirSync(dir).filter((f) => f.endsWith(".sql"))
    const migrations: Migration[] = []
    for (const file of files) {
      const match = FILE_NAME.exec(file)
      if (!match?.[1] || !match[2]) {
        return yield* new MigrationError({
          reason: "invalid_file_name",
          message: `migration file ${file} must be named NNNN_name.sql`
        })
      }
      const sql = readFileSync(`${dir}/${file}`, "utf8")
      migrations.push({
        id: Number(match[1]),
        name: match[2],
        sql,
        checksum: sha256Hex(sql)
      })
    }
    migrations.sort((a, b) => a.id - b.id)
    for (let i = 1; i < migrations.length; i++) {
      const prev = migrations[i - 1]
      const cur = migrations[i]
      if (prev && cur && prev.id === cur.id) {
        return yield* new MigrationError({
          reason: "duplicate_id",
          message: `two migrations are numbered ${cur.id}: ${prev.name} and ${cur.name}`
        })
      }
    }
    return migrations
  })

interface AppliedRow {
  readonly id: number
  readonly name: string
  readonly checksum: string
}

export interface MigrationReport {
  readonly applied: ReadonlyArray<Pick<Migration, "id" | "name">>
  readonly current: number
}

/**
 * Applies pending migrations in one transaction behind an exclusive table lock, so processes that
 * start together apply each migration once (the second waits, then finds nothing to do).
 */
export const runMigrations = (
  migrations: ReadonlyArray<Migration>
): Effect.Effect<MigrationReport, MigrationError | SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`CREATE TABLE IF NOT EXISTS public.schema_migrations (
      id integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL)`
    return yield* sql.withTransaction(
      Effect.gen(function* () {
        yield* sql`LOCK TABLE public.schema_migrations IN ACCESS EXCLUSIVE MODE`
        const applied =
          yield* sql<AppliedRow>`SELECT id, name, checksum FROM public.schema_migrations ORDER BY id`
        const newest = applied.reduce((max, row) => Math.max(max, row.id), 0)
        const byId = new Map(migrations.map((m) => [m.id, m]))
        for (const row of applied) {
          const file = byId.get(row.id)
          if (!file) {
            return yield* new MigrationError({
              reason: "missing_file",
              message: `migration ${row.id}_${row.name} is applied but its file is gone`
            })
          }
          if (file.checksum !== row.checksum) {
            return yield* new MigrationError({
              reason: "checksum_mismatch",
              message: `migration ${row.id}_${row.name} changed after it was applied; add a new migration instead`
            })
          }
        }
        const appliedIds = new Set(applied.map((r) => r.id))
        const pending = migrations.filter((m) => !appliedIds.has(m.id))
        const late = pending.find((m) => m.id < newest)
        if (late) {
          return yield* new MigrationError({
            reason: "out_of_order",
            message: `migration ${late.id}_${late.name} is numbered below the newest applied migration (${newest}); renumber it above ${newest}`
          })
        }
        for (const migration of pending) {
          yield* sql
            .unsafe(migration.sql)
            .pipe(Effect.withSpan("migration.apply", { attributes: { "migration.id": migration.id } }))
          const now = new Date(yield* Clock.currentTimeMillis)
          yield* sql`INSERT INTO public.schema_migrations (id, name, checksum, applied_at)
                     VALUES (${migration.id}, ${migration.name}, ${migration.checksum}, ${now})`
          yield* Effect.logInfo(`applied migration ${migration.id}_${migration.name}`)
        }
        return {
          applied: pending.map(({ id, name }) => ({ id, name })),
          current: Math.max(newest, ...pending.map((m) => m.id))
        }
      })
    )
  })

/** Loads `migrations/` and applies what is pending. */
export const migrate = (dir?: string) => Effect.flatMap(loadMigrations(dir), runMigrations)

/** PostgreSQL's undefined_table (42P01), under the SqlError that wraps it. */
const isUndefinedTable = (error: SqlError): boolean => {
  const cause: unknown = error.cause
  return typeof cause === "object" && cause !== null && Reflect.get(cause, "code") === "42P01"
}

/** Whether every given migration is applied, and how many are not (for /ready: load the files once). */
export const migrationStatus = (migrations: ReadonlyArray<Pick<Migration, "id">>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    // No table yet means nothing applied; any other failure (an unreachable database) is not "all
    // pending" and is left to the caller.
    const rows = yield* sql<{ id: number }>`SELECT id FROM public.schema_migrations`.pipe(
      Effect.catchIf(isUndefinedTable, () => Effect.succeed([] as ReadonlyArray<{ id: number }>))
    )
    const applied = new Set(rows.map((r) => r.id))
    const pending = migrations.filter((m) => !applied.has(m.id)).length
    return { upToDate: pending === 0, pending }
  })
