/**
 * A batch's dedup lookup (`selectRecordsByIdentifier`) is one primary-key probe per key, even as the
 * generic plan a connection makes while the table is still empty. The statement is named (planned
 * once per connection and kept): `meter = ANY(…) AND identifier = ANY(…)` was planned there as a scan
 * of the meter's index entries with the identifiers as a filter, so every batch compared every
 * record of the meter with each of its 1,000 identifiers as the table grew.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { recordsByKeyStatement } from "../../../src/billing/usage/queries.js"
import { TestPersistence } from "../../support/database.js"

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })("the usage dedup lookup", (it) => {
  it.effect("probes the primary key by meter and identifier, as a generic plan on an empty table", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const keys = Array.from({ length: 1_000 }, (_, i) => ({ meter: "api_calls", identifier: `k-${i}` }))
      const [text, params] = recordsByKeyStatement(sql, keys).compile()
      const plan = yield* sql.withTransaction(
        Effect.gen(function* () {
          yield* sql`SET LOCAL plan_cache_mode = force_generic_plan`
          yield* sql.unsafe(`PREPARE usage_lookup_probe AS ${text}`)
          // EXECUTE takes no bind parameters: the values as literals (quotes doubled).
          const literals = params.map((p) => `'${String(p).replaceAll("'", "''")}'`).join(", ")
          const rows = yield* sql.unsafe<Record<string, string>>(
            `EXPLAIN EXECUTE usage_lookup_probe(${literals})`
          )
          yield* sql.unsafe("DEALLOCATE usage_lookup_probe")
          return rows.map((row) => Object.values(row).join(" ")).join("\n")
        })
      )
      expect(plan).toMatch(/Index Scan using usage_records_pkey/)
      expect(plan).toMatch(/Index Cond: \(\(meter = .+\) AND \(identifier = .+\)\)/)
      expect(plan).not.toMatch(/Filter|Seq Scan|Hash/)
    })
  )
})
