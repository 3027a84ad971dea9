/** Reads (and the advance's steps) of the test clocks read model: one statement each. */
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"
import type { BadRequest } from "../../http/errors.js"
import { type V1ListParams, type V1Page, v1Page } from "../../http/Lists.js"
import type { TestClockStatus } from "./events.js"
import { TEST_CLOCKS } from "./projection.js"

export interface TestClockRow {
  readonly id: string
  readonly name: string | null
  readonly frozenTime: Date
  readonly status: TestClockStatus
  readonly advancingTo: Date | null
  /** Real time of the running advance's last step (null when ready). */
  readonly heartbeatAt: Date | null
  readonly createdAt: Date
  readonly version: number
}

const COLUMNS = `clock_id AS id, name, frozen_time AS "frozenTime", status, advancing_to AS "advancingTo",
  heartbeat_at AS "heartbeatAt", created_at AS "createdAt", version`

export const selectClock = (sql: SqlClient.SqlClient, clockId: string) =>
  Effect.map(
    sql<TestClockRow>`SELECT ${sql.literal(COLUMNS)} FROM ${sql(TEST_CLOCKS)} WHERE clock_id = ${clockId}`,
    (rows) => Option.fromNullable(rows[0])
  )

/**
 * Locks the clock's row for the rest of the transaction: starting, finishing an advance and deleting
 * queue here, so each decides on the latest version instead of racing to append.
 */
export const lockClock = (sql: SqlClient.SqlClient, clockId: string) =>
  Effect.map(
    sql<TestClockRow>`SELECT ${sql.literal(COLUMNS)} FROM ${sql(TEST_CLOCKS)}
      WHERE clock_id = ${clockId} FOR UPDATE`,
    (rows) => Option.fromNullable(rows[0])
  )

/**
 * Whether a customer can be put on this clock (it exists), holding it `FOR KEY SHARE` to the end of
 * the caller's transaction, so a deletion waits for the customer's creation to commit.
 */
export const holdClock = (sql: SqlClient.SqlClient, clockId: string) =>
  Effect.map(
    sql<{ readonly id: string }>`SELECT clock_id AS id FROM ${sql(TEST_CLOCKS)}
      WHERE clock_id = ${clockId} FOR KEY SHARE`,
    (rows) => rows.length > 0
  )

/** The clock's frozen time (while it advances: the time of the item being run). */
export const frozenTimeOf = (sql: SqlClient.SqlClient, clockId: string) =>
  Effect.map(
    sql<{ readonly frozenTime: Date }>`SELECT frozen_time AS "frozenTime" FROM ${sql(TEST_CLOCKS)}
      WHERE clock_id = ${clockId}`,
    (rows) => Option.map(Option.fromNullable(rows[0]), (r) => r.frozenTime)
  )

/**
 * One step of a running advance: the clock's frozen time moves to `frozenTime` (never backwards) and
 * its heartbeat to `heartbeat` — only while the advance started at `version` is still the clock's
 * (false: it was taken over or the clock deleted, and this advance must stop).
 */
export const stepFrozenTime = (
  sql: SqlClient.SqlClient,
  clockId: string,
  version: number,
  frozenTime: Date,
  heartbeat: Date
) =>
  Effect.map(
    sql<{ readonly id: string }>`UPDATE ${sql(TEST_CLOCKS)}
        SET frozen_time = GREATEST(frozen_time, ${frozenTime}), heartbeat_at = ${heartbeat}
      WHERE clock_id = ${clockId} AND status = 'advancing' AND version = ${version}
      RETURNING clock_id AS id`,
    (rows) => rows.length > 0
  )

/** `GET /v1/test/clocks`: newest first, keyset-paged. */
export const listClocks = <A>(
  sql: SqlClient.SqlClient,
  params: V1ListParams,
  toItem: (row: TestClockRow) => A
): Effect.Effect<V1Page<A>, BadRequest | SqlError> =>
  v1Page(sql, {
    table: TEST_CLOCKS,
    idColumn: "clock_id",
    idPrefix: "clock",
    columns: COLUMNS,
    params,
    toItem
  })
