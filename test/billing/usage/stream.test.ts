/**
 * A usage record's stream id is stored in the log and is how a second record with the same
 * identifier is found: it must never change with how it is computed.
 */
import { createHash } from "node:crypto"
import { FastCheck as fc } from "effect"
import { describe, expect, it } from "vitest"
import { sha256Hex } from "../../../src/base/Sha256.js"
import { usageStream } from "../../../src/billing/usage/events.js"

describe("usageStream", () => {
  it("is the first 40 hex digits of SHA-256 over meter, NUL, identifier (pinned values)", () => {
    expect(usageStream("api_calls", "req-1")).toBe("usage-ee632e3cd797a2450e14492c18e592019351928c")
    expect(usageStream("tokens", "zażółć 🚀")).toBe("usage-71654aa2a06440d6cb250c75522395f90fb08f55")
  })

  it("equals the incremental hash it was first computed with, for any texts", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary" }), fc.string({ unit: "binary" }), (meter, identifier) => {
        const incremental = createHash("sha256")
          .update(meter)
          .update("\u0000")
          .update(identifier)
          .digest("hex")
        expect(usageStream(meter, identifier)).toBe(`usage-${incremental.slice(0, 40)}`)
        expect(sha256Hex(`${meter}\u0000${identifier}`)).toBe(incremental)
      }),
      { numRuns: 500 }
    )
  })
})
