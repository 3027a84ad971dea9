/**
 * `usage.recorded` carries a hand-written encoder (a batch appends 1,000 of them; the schema's
 * generic walk was a seventh of its CPU): for every value of the event's schema it must answer
 * exactly what the schema's own encoder answers — the stored JSON is the same either way.
 */
import { Arbitrary, Either, FastCheck as fc, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { UsageRecorded } from "../../../src/billing/usage/events.js"

describe("usage.recorded's encoder", () => {
  it("answers what the schema's encoder answers, for any value of the schema", () => {
    const bySchema = Schema.encodeEither(UsageRecorded.schema)
    fc.assert(
      fc.property(Arbitrary.make(UsageRecorded.schema), (data) => {
        const expected = bySchema(data)
        expect(Either.isRight(expected)).toBe(true)
        expect(UsageRecorded.encode(data)).toStrictEqual(expected)
        // And stored as the same JSON text.
        expect(JSON.stringify(Either.getOrThrow(UsageRecorded.encode(data)))).toBe(
          JSON.stringify(Either.getOrThrow(expected))
        )
      }),
      { numRuns: 500 }
    )
  })

  it('drops a "__proto__" property as the schema\'s encoder does (a random run found the difference)', () => {
    const properties: Record<string, unknown> = JSON.parse('{"__proto__": 0, "region": "eu"}')
    const data = {
      recordId: "ur_1",
      subscriptionId: "sub_1",
      customerId: "cus_1",
      meter: "api_calls",
      identifier: "id-1",
      value: 1,
      timestamp: new Date(0),
      properties,
      uniqueValue: null,
      periodStart: new Date(0),
      periodEnd: null
    }
    const expected = Either.getOrThrow(Schema.encodeEither(UsageRecorded.schema)(data))
    expect(JSON.stringify(Either.getOrThrow(UsageRecorded.encode(data)))).toBe(JSON.stringify(expected))
  })
})
