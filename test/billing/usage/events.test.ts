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
})
