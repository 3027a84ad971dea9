/** What `/ready` checks: database reachable, migrations applied, processors running with leases. */
import { SqlClient } from "@effect/sql"
import { Clock, Context, Duration, Effect, Layer, Option } from "effect"
import { AppConfig } from "../config.js"
import { loadMigrations, migrationStatus } from "../db/Migrations.js"
import { isDatabaseUnreachable, unreachableReason } from "../db/Reachability.js"
import { provideSqlClient } from "../db/Sql.js"
import { Supervisor } from "../processors/Supervisor.js"
import type { Readiness as ReadinessBody } from "./ApiBase.js"

export interface ReadinessShape {
  readonly check: Effect.Effect<ReadinessBody>
}

export class Readiness extends Context.Tag("Readiness")<Readiness, ReadinessShape>() {}

/**
 * Whether the ADMIN_EMAIL admin exists (provided by the identity context; optional): `/ready` is not
 * 200 before that admin can log in — with ADMIN_EMAIL but no ADMIN_PASSWORD and no admin yet, never.
 */
export class AdminReadiness extends Context.Tag("AdminReadiness")<
  AdminReadiness,
  { readonly check: Effect.Effect<{ readonly ok: boolean; readonly detail: string }> }
>() {}

const ok = (detail: string) => ({ ok: true, detail })
const notOk = (detail: string) => ({ ok: false, detail })

export const ReadinessLive = Layer.effect(
  Readiness,
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const supervisor = yield* Effect.serviceOption(Supervisor)
    const admin = yield* Effect.serviceOption(AdminReadiness)

    const database = sql`SELECT 1`.pipe(
      Effect.timeout(Duration.seconds(2)),
      Effect.as(ok("reachable")),
      Effect.catchAll((error) =>
        Effect.succeed(
          notOk(
            error._tag === "TimeoutException"
              ? "unreachable (no answer within 2s)"
              : isDatabaseUnreachable(error)
                ? `unreachable (${unreachableReason(error)})`
                : `failing: ${error.message}`
          )
        )
      ),
      Effect.catchAllCause(() => Effect.succeed(notOk("unreachable")))
    )
    // The files are read once: they do not change while the process runs.
    const files = yield* Effect.either(loadMigrations())
    const migrations =
      files._tag === "Left"
        ? Effect.succeed(notOk(`migration files unreadable: ${files.left.message}`))
        : migrationStatus(files.right).pipe(
            provideSqlClient(sql),
            Effect.map((s) => (s.upToDate ? ok("up to date") : notOk(`${s.pending} pending`))),
            Effect.catchAllCause(() => Effect.succeed(notOk("unknown: the status could not be read")))
          )
    const processors = Effect.gen(function* () {
      if (config.role === "api") return ok("not run by this process (ROLE=api)")
      const statuses = Option.isSome(supervisor) ? yield* supervisor.value.status : []
      const down = statuses.filter((s) => s.state !== "running")
      if (down.length > 0) return notOk(`not running: ${down.map((s) => s.name).join(", ")}`)
      const now = new Date(yield* Clock.currentTimeMillis)
      const unleased = yield* sql<{ id: string }>`SELECT subscription_id AS id FROM event_store.subscriptions
        WHERE status = 'running' AND (lease_until IS NULL OR lease_until < ${now})`.pipe(
        Effect.map((rows) => rows.map((r) => r.id)),
        Effect.catchAllCause(() => Effect.succeed(["(unknown)"]))
      )
      const mine = new Set(statuses.map((s) => s.name))
      const missing = unleased.filter((id) => mine.has(id))
      return missing.length > 0
        ? notOk(`no lease held: ${missing.join(", ")}`)
        : ok(`${statuses.length} running`)
    })

    return {
      check: Effect.gen(function* () {
        // The database first: while it cannot be reached, what the other checks would read from it
        // is unknown (not "10 pending", not "no lease held").
        const db = yield* database
        const unknown = notOk("unknown: database unreachable")
        const adminCheck = Option.match(admin, {
          onNone: () => Effect.succeed(undefined),
          onSome: (a) => a.check
        })
        const [mig, proc, adm] = db.ok
          ? yield* Effect.all([migrations, processors, adminCheck], { concurrency: "unbounded" })
          : [
              unknown,
              config.role === "api" ? yield* processors : unknown,
              Option.isSome(admin) ? unknown : undefined
            ]
        const ready = db.ok && mig.ok && proc.ok && (adm === undefined || adm.ok)
        return {
          status: ready ? ("ready" as const) : ("not_ready" as const),
          checks: {
            database: db,
            migrations: mig,
            processors: proc,
            ...(adm === undefined ? {} : { admin: adm })
          }
        }
      })
    }
  })
)
