/**
 * Usage events: one `usage.recorded` per record, on the stream of the WRITE that accepted it — a
 * batch, or the single posts written together — `usage-<UUIDv7>`, a new stream per write, its events
 * in input order. Every usage record is an event in the log (auditors replay billing). An identifier
 * records once by the usage read model's key, written in the same transaction (projection.ts); time-
 * ordered stream ids keep the event store's stream indexes growing at their end (a stream per record,
 * named by a hash of its identifier, put a random index page under every record: bench:billing).
 * Logs written before hold one stream per record, `usage-<40 hex digits>`; both replay alike.
 */
import { Schema } from "effect"
import { defineEvent, type EventOf } from "../../eventstore/EventType.js"

/** A record's free-form properties (`unique_count` counts distinct `properties[uniqueKey]`). */
export const UsageProperties = Schema.Record({ key: Schema.String, value: Schema.Unknown })
export type UsageProperties = typeof UsageProperties.Type

const UsageRecordedData = Schema.Struct({
  recordId: Schema.String,
  subscriptionId: Schema.String,
  customerId: Schema.String,
  meter: Schema.String,
  identifier: Schema.String,
  /** ≥ 0, at most 6 decimals, below `MAX_VALUE`. */
  value: Schema.Number,
  timestamp: Schema.Date,
  properties: UsageProperties,
  /** properties[uniqueKey] as text when the price counts distinct values, else null. */
  uniqueValue: Schema.NullOr(Schema.String),
  periodStart: Schema.Date,
  /** null: the period after the subscription's current one, whose end its renewal fixes. */
  periodEnd: Schema.NullOr(Schema.Date)
})

/**
 * The properties as the schema's encoder copies a record: key by key, by assignment, so a
 * `"__proto__"` key is dropped as it drops it (a spread would keep it as an own key, and the stored
 * JSON would differ from the schema's).
 */
const copyProperties = (properties: UsageProperties): Record<string, unknown> => {
  const copy: Record<string, unknown> = {}
  for (const key of Object.keys(properties)) copy[key] = properties[key]
  return copy
}

export const UsageRecorded = defineEvent("usage.recorded", {
  schema: UsageRecordedData,
  // Appended 1,000 at a time by a batch: the schema's encoder, written out (no refinement to check;
  // test/billing/usage/events.test.ts holds it equal to the schema's).
  encode: (data) => ({
    recordId: data.recordId,
    subscriptionId: data.subscriptionId,
    customerId: data.customerId,
    meter: data.meter,
    identifier: data.identifier,
    value: data.value,
    timestamp: data.timestamp.toISOString(),
    properties: copyProperties(data.properties),
    uniqueValue: data.uniqueValue,
    periodStart: data.periodStart.toISOString(),
    periodEnd: data.periodEnd === null ? null : data.periodEnd.toISOString()
  })
})

export const usageEventTypes = [UsageRecorded] as const
export type UsageEvent = EventOf<(typeof usageEventTypes)[number]>

/** The stream of one usage write (`uuid`: a fresh UUIDv7). */
export const usageWriteStream = (uuid: string): string => `usage-${uuid}`
