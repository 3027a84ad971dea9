/** The webhook event catalogue: every type has a sample, and the samples follow the API's formats. */
import { describe, expect, it } from "vitest"
import { SAMPLE_DATA, WEBHOOK_EVENT_TYPES } from "../../src/webhooks/catalogue.js"

/** Every value under a key named `currency`, at any depth, with where it was found. */
const currencies = (value: unknown, path = "data"): ReadonlyArray<readonly [string, unknown]> => {
  if (Array.isArray(value)) return value.flatMap((item, i) => currencies(item, `${path}[${i}]`))
  if (typeof value !== "object" || value === null) return []
  return Object.entries(value).flatMap(([key, inner]) => [
    ...(key === "currency" ? [[`${path}.${key}`, inner] as const] : []),
    ...currencies(inner, `${path}.${key}`)
  ])
}

describe("webhook event samples", () => {
  it("every event type has one", () => {
    expect(Object.keys(SAMPLE_DATA).sort()).toEqual([...WEBHOOK_EVENT_TYPES].sort())
  })

  it("every currency is an ISO 4217 code in uppercase (design/API.md), at any depth", () => {
    const found = WEBHOOK_EVENT_TYPES.flatMap((type) => currencies(SAMPLE_DATA[type], type))
    expect(found.length).toBeGreaterThan(0)
    for (const [path, currency] of found) expect(currency, path).toMatch(/^[A-Z]{3}$/)
  })

  it("the walk finds currencies nested in objects and arrays", () => {
    const nested = { currency: "USD", lines: [{ price: { currency: "eur" } }] }
    expect(currencies(nested)).toEqual([
      ["data.currency", "USD"],
      ["data.lines[0].price.currency", "eur"]
    ])
  })
})
