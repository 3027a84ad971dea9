/**
 * The usage read model, written in the record's own transaction (read-your-writes), in ONE
 * statement per batch of events: the raw records (`billing.usage_records`, keyed by (meter,
 * identifier)), and — for the records that statement inserted, so replaying an event changes
 * nothing — the hourly and minute rollups (`billing.usage_hourly`, `billing.usage_minutely`: count,
 * sum, max, last) and the distinct values unique_count counts (`billing.usage_distinct`). Summaries
 * and invoices read the rollups, never a scan of the raw records; a rebuild from position zero
 * reproduces every row.
 *
 * The records' key is what makes an identifier record once (events.ts): the same record again (a
 * replay: same record id) is skipped; ANOTHER record under a key already taken — a concurrent write
 * of the identifier that committed first — raises a unique violation (migration 0028), so that
 * write's transaction fails instead of answering a record that is not the one recorded.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { defineProjection } from "../../kernel/Projection.js"
import { UsageRecorded, usageEventTypes } from "./events.js"

export const USAGE_RECORDS = "billing.usage_records"
export const USAGE_HOURLY = "billing.usage_hourly"
export const USAGE_DISTINCT = "billing.usage_distinct"
export const USAGE_MINUTELY = "billing.usage_minutely"

export const HOUR_MS = 3_600_000
export const MINUTE_MS = 60_000

export const UsageProjection = defineProjection({
  name: "billing_usage",
  tables: [USAGE_RECORDS, USAGE_HOURLY, USAGE_MINUTELY, USAGE_DISTINCT],
  events: usageEventTypes,
  apply: (events, target) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const records = sql(target.table(USAGE_RECORDS))
      const distinct = sql(target.table(USAGE_DISTINCT))
      /**
       * The upsert of one rollup (per hour or per minute) from the freshly inserted records. Rows are
       * locked in one order by every write: two batches never wait on each other crosswise.
       */
      const rollup = (table: string, bucket: "hour" | "minute") => {
        const column = sql.literal(bucket)
        return sql`INSERT INTO ${sql(table)} AS h (subscription_id, meter, ${column}, event_count, sum_value,
              max_value, last_value, last_at, last_identifier)
            SELECT subscription_id, meter, ${column}, count(*), sum(value), max(value),
                (array_agg(value ORDER BY occurred_at DESC, identifier COLLATE "C" DESC))[1],
                max(occurred_at),
                (array_agg(identifier ORDER BY occurred_at DESC, identifier COLLATE "C" DESC))[1]
              FROM fresh
              GROUP BY subscription_id, meter, ${column}
              ORDER BY subscription_id, meter, ${column}
            ON CONFLICT (subscription_id, meter, ${column}) DO UPDATE SET
              event_count = h.event_count + EXCLUDED.event_count,
              sum_value = h.sum_value + EXCLUDED.sum_value,
              max_value = GREATEST(h.max_value, EXCLUDED.max_value),
              last_value = CASE WHEN (EXCLUDED.last_at, EXCLUDED.last_identifier) > (h.last_at, h.last_identifier)
                THEN EXCLUDED.last_value ELSE h.last_value END,
              last_identifier = CASE WHEN (EXCLUDED.last_at, EXCLUDED.last_identifier) > (h.last_at, h.last_identifier)
                THEN EXCLUDED.last_identifier ELSE h.last_identifier END,
              last_at = GREATEST(h.last_at, EXCLUDED.last_at)
            RETURNING 1`
      }
      // The records' rows are read from the log by position (the inline projection runs in the
      // append's transaction; a rebuild or catch-up projects events already there): the data goes
      // from the service to the database once, and is parsed once. It is read as recorded —
      // usage.recorded has one schema version; a second one would be mapped here. The record's
      // time is when its event was recorded; hours and minutes are UTC buckets (date_bin from an
      // hour-aligned origin). The rollups take the rows the INSERT returns (no join back to the
      // input: a join planned on a guessed row count could compare every pair). Records are
      // inserted in key order, as rollup rows are upserted in theirs: two writes sharing
      // identifiers wait on each other's keys in one order, never crosswise (a deadlock).
      const positions = `{${events.map((e) => e.globalPosition).join(",")}}`
      yield* sql`
        WITH inserted AS (
          INSERT INTO ${records} AS r (id, subscription_id, customer_id, meter, identifier, value, occurred_at,
              properties, unique_value, period_start, period_end, created_at)
            SELECT e.data->>'recordId', e.data->>'subscriptionId', e.data->>'customerId', e.data->>'meter',
                e.data->>'identifier', round((e.data->>'value')::numeric, 6), (e.data->>'timestamp')::timestamptz,
                e.data->'properties', e.data->>'uniqueValue', (e.data->>'periodStart')::timestamptz,
                (e.data->>'periodEnd')::timestamptz, e.recorded_at
              FROM event_store.events e
             WHERE e.global_position = ANY(${positions}::bigint[]) AND e.event_type = ${UsageRecorded.type}
             ORDER BY e.data->>'meter' COLLATE "C", e.data->>'identifier' COLLATE "C"
            ON CONFLICT (meter, identifier) DO UPDATE
              SET id = billing.refuse_taken_usage_identifier(r.meter, r.identifier)
              WHERE r.id <> EXCLUDED.id
            RETURNING subscription_id, meter, identifier, value, occurred_at, unique_value
        ), fresh AS (
          SELECT subscription_id, meter, identifier, value, occurred_at, unique_value,
              date_bin('1 hour', occurred_at, timestamptz '2000-01-01 00:00Z') AS hour,
              date_bin('1 minute', occurred_at, timestamptz '2000-01-01 00:00Z') AS minute
            FROM inserted
        ), hours AS (${rollup(target.table(USAGE_HOURLY), "hour")}
        ), minutes AS (${rollup(target.table(USAGE_MINUTELY), "minute")}
        )
        INSERT INTO ${distinct} (subscription_id, meter, hour, value)
          SELECT DISTINCT subscription_id, meter, hour, unique_value FROM fresh WHERE unique_value IS NOT NULL
            ORDER BY subscription_id, meter, hour, unique_value
          ON CONFLICT DO NOTHING`
    })
})
