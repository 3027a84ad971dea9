/** The pooled random source behind ids, IVs and data keys: fresh bytes every time, any size. */
import { describe, expect, it } from "vitest"
import { randomBytesPooled } from "../../src/base/Random.js"

describe("randomBytesPooled", () => {
  it("hands out fresh bytes of the size asked, across pool refills, never the same twice", () => {
    const seen = new Set<string>()
    // 4096-byte pool: 1000 draws of 16 and 12 bytes cross several refills and odd offsets.
    for (let i = 0; i < 1000; i++) {
      const size = i % 2 === 0 ? 16 : 12
      const bytes = randomBytesPooled(size)
      expect(bytes.length).toBe(size)
      seen.add(bytes.toString("hex"))
    }
    expect(seen.size).toBe(1000)
  })

  it("a value is the caller's own: changing it changes no later draw", () => {
    const a = randomBytesPooled(32)
    a.fill(0)
    expect(randomBytesPooled(32).equals(Buffer.alloc(32))).toBe(false)
  })

  it("large requests bypass the pool", () => {
    const big = randomBytesPooled(8192)
    expect(big.length).toBe(8192)
    expect(big.equals(Buffer.alloc(8192))).toBe(false)
  })
})
