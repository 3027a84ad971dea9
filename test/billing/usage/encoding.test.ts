/**
 * The batch answer's hand-written encoding (`encodeUsageBatchResult`, `encodeUsageRecord`) is the
 * documented schema's: on arbitrary results, the same JSON text as `Schema.encodeSync` gives —
 * same keys in the same order, dates as the same ISO text, error details as Schema encodes them.
 */
import { Arbitrary, FastCheck as fc, Schema } from "effect"
import { describe, expect, it } from "vitest"
import {
  encodeUsageBatchResult,
  encodeUsageRecord,
  UsageBatchResult,
  UsageRecordObject
} from "../../../src/billing/usage/Api.js"

describe("usage batch answer encoding", () => {
  it("equals Schema's encoding of UsageBatchResult", () => {
    const schemaEncode = Schema.encodeSync(UsageBatchResult)
    fc.assert(
      fc.property(Arbitrary.make(UsageBatchResult), (result) => {
        expect(JSON.stringify(encodeUsageBatchResult(result))).toBe(JSON.stringify(schemaEncode(result)))
      }),
      { numRuns: 300 }
    )
  })

  it("equals Schema's encoding of UsageRecordObject, a record's period shared with others", () => {
    const schemaEncode = Schema.encodeSync(UsageRecordObject)
    fc.assert(
      fc.property(Arbitrary.make(UsageRecordObject), (record) => {
        expect(JSON.stringify(encodeUsageRecord(record))).toBe(JSON.stringify(schemaEncode(record)))
        // Two records sharing a period's dates (the encoder remembers ISO text by time).
        const sibling = { ...record, id: `${record.id}x`, createdAt: record.periodStart }
        const batch = encodeUsageBatchResult({
          object: "usage_batch",
          created: 2,
          replayed: 0,
          failed: 0,
          results: [
            { index: 0, status: 201, record },
            { index: 1, status: 201, record: sibling }
          ]
        })
        expect(JSON.stringify(batch.results.map((r) => r.record))).toBe(
          JSON.stringify([schemaEncode(record), schemaEncode(sibling)])
        )
      }),
      { numRuns: 300 }
    )
  })
})
