/**
 * The test clocks read model (migration 0023): one row per live clock. Each event moves the row's
 * `version` forward and stops when the row is already at or past it, so applying an event twice
 * changes nothing and a rebuild from the log reproduces every row (a deleted clock has none).
 * While an advance runs, the advance itself moves `frozen_time` item by item (queries.ts,
 * `stepFrozenTime`); `test_clock.advanced` then sets the final time, as a rebuild does.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { defineProjection } from "../../kernel/Projection.js"
import { testClockEventTypes } from "./events.js"

export const TEST_CLOCKS = "billing.test_clocks"

export const TestClocksProjection = defineProjection({
  name: "test_clocks",
  tables: [TEST_CLOCKS],
  events: testClockEventTypes,
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const table = sql(target.table(TEST_CLOCKS))
      for (const e of events) {
        const at = e.recordedAt
        const version = e.streamVersion
        switch (e.type) {
          case "test_clock.created":
            yield* sql`INSERT INTO ${table} (clock_id, name, frozen_time, status, created_at, updated_at, version)
              VALUES (${e.data.clockId}, ${e.data.name}, ${e.data.frozenTime}, 'ready', ${at}, ${at}, ${version})
              ON CONFLICT (clock_id) DO NOTHING`
            break
          case "test_clock.advancing":
            yield* sql`UPDATE ${table} SET status = 'advancing', advancing_to = ${e.data.to}, heartbeat_at = ${at},
                updated_at = ${at}, version = ${version}
              WHERE clock_id = ${e.data.clockId} AND version < ${version}`
            break
          case "test_clock.advanced":
            yield* sql`UPDATE ${table} SET status = 'ready', frozen_time = ${e.data.frozenTime}, advancing_to = NULL,
                heartbeat_at = NULL, updated_at = ${at}, version = ${version}
              WHERE clock_id = ${e.data.clockId} AND version < ${version}`
            break
          case "test_clock.deleted":
            yield* sql`DELETE FROM ${table} WHERE clock_id = ${e.data.clockId}`
            break
        }
      }
    })
})
