/**
 * `fastEncodeSync` (src/base/FastEncode.ts) answers what `Schema.encodeSync` answers — the same
 * JSON text, keys in the same order — for arbitrary values of the schemas it serves, and fails where
 * Schema fails, with Schema's error.
 */
import { Arbitrary, Either, FastCheck as fc, Schema } from "effect"
import { describe, expect, it } from "vitest"
import {
  fastDecodeUnknownEither,
  fastDecodeUnknownSync,
  fastEncodeEither,
  fastEncodeSync,
  nodesLeftToSchema
} from "../../src/base/FastEncode.js"
import { InvoiceStateSchema, SubscriptionStateSchema } from "../../src/billing/decider.js"
import { InvoiceObject, SubscriptionObject } from "../../src/billing/objects.js"
import { Metadata } from "../../src/kernel/Metadata.js"
import { OrderStateSchema } from "../../src/orders/decider.js"
import { OrderObject } from "../../src/orders/objects.js"
import { PaymentIntentObject, PaymentObject, PaymentRefundedSnapshot } from "../../src/payments/objects.js"
import { eventTypes } from "../../src/registry.js"

const sameAsSchema = <A, I>(name: string, schema: Schema.Schema<A, I, never>, numRuns = 200) =>
  it(`${name}: the same JSON as Schema.encodeSync, the same value as Schema.decodeUnknownSync`, () => {
    const fast = fastEncodeSync(schema)
    const slow = Schema.encodeSync(schema)
    const fastDecode = fastDecodeUnknownSync(schema)
    const slowDecode = Schema.decodeUnknownSync(schema)
    fc.assert(
      fc.property(Arbitrary.make(schema), (value) => {
        const encoded = slow(value)
        expect(JSON.stringify(fast(value))).toBe(JSON.stringify(encoded))
        // As stored (a copy: no value shared with the input): the decoded values equal, keys in the
        // same order. (Not through JSON: arbitrary numbers include NaN and -0, which JSON loses.)
        const stored: unknown = structuredClone(encoded)
        const decoded = fastDecode(stored)
        expect(decoded).toEqual(slowDecode(stored))
        expect(JSON.stringify(decoded)).toBe(JSON.stringify(slowDecode(stored)))
      }),
      { numRuns }
    )
  })

/** The error Schema throws for `value`, or undefined. */
const thrown = (encode: (value: never) => unknown, value: unknown) => {
  try {
    encode(value as never)
    return undefined
  } catch (error) {
    return String(error)
  }
}

describe("fastEncodeSync", () => {
  sameAsSchema("the subscription state (billing.subscriptions.state)", SubscriptionStateSchema, 100)
  sameAsSchema("the invoice state (billing.invoices.state)", InvoiceStateSchema)
  sameAsSchema("the subscription object", SubscriptionObject)
  sameAsSchema("the invoice object", InvoiceObject)
  sameAsSchema("the order state (orders.orders.state)", OrderStateSchema, 100)
  sameAsSchema("the order object", OrderObject, 100)
  sameAsSchema("the payment object", PaymentObject)
  sameAsSchema("the payment object with its refund", PaymentRefundedSnapshot)
  sameAsSchema("the payment intent object", PaymentIntentObject)

  const Shape = Schema.Struct({
    id: Schema.String,
    count: Schema.Int,
    at: Schema.Date,
    maybe: Schema.NullOr(Schema.Date),
    kind: Schema.Literal("a", "b"),
    tags: Schema.Array(Schema.String),
    note: Schema.optional(Schema.String),
    defaulted: Schema.optionalWith(Schema.NullOr(Schema.Date), { default: () => null, exact: true }),
    line: Schema.Union(
      Schema.Struct({ type: Schema.Literal("fee"), amount: Schema.Int }),
      Schema.Struct({ type: Schema.Literal("usage"), quantity: Schema.Number, at: Schema.Date })
    ),
    metadata: Metadata,
    nested: Schema.Struct({ flag: Schema.Boolean, at: Schema.Date.annotations({ description: "when" }) })
  })
  sameAsSchema("a struct of every supported kind", Shape, 300)

  it("compiles the billing schemas whole: no node is left to Schema's encoder", () => {
    for (const schema of [
      SubscriptionStateSchema,
      InvoiceStateSchema,
      SubscriptionObject,
      InvoiceObject,
      Shape
    ])
      expect(nodesLeftToSchema(schema)).toEqual([])
  })

  it("drops properties the schema does not declare, as Schema does", () => {
    const value = {
      id: "x",
      count: 1,
      at: new Date(0),
      maybe: null,
      kind: "a" as const,
      tags: [],
      metadata: {},
      nested: { flag: true, at: new Date(1) },
      defaulted: null,
      line: { type: "fee" as const, amount: 1 },
      extra: "dropped"
    }
    expect(fastEncodeSync(Shape)(value)).toEqual(Schema.encodeSync(Shape)(value))
    expect(fastEncodeSync(Shape)(value)).not.toHaveProperty("extra")
  })

  it("fails where Schema fails, with Schema's error", () => {
    const fast = fastEncodeSync(Shape)
    const slow = Schema.encodeSync(Shape)
    const valid = {
      id: "x",
      count: 1,
      at: new Date(0),
      maybe: null,
      kind: "a",
      tags: ["t"],
      metadata: { k: "v" },
      nested: { flag: true, at: new Date(1) },
      defaulted: new Date(2),
      line: { type: "usage", quantity: 0.5, at: new Date(3) }
    }
    expect(thrown(fast, valid)).toBeUndefined()
    for (const misfit of [
      { ...valid, count: 1.5 },
      { ...valid, at: new Date(Number.NaN) },
      { ...valid, maybe: "2020-01-01" },
      { ...valid, kind: "c" },
      { ...valid, tags: [1] },
      { ...valid, note: 3 },
      { ...valid, metadata: [] },
      { ...valid, nested: { flag: "yes", at: new Date(1) } },
      { ...valid, id: undefined },
      { ...valid, defaulted: undefined },
      { ...valid, line: { type: "fee", amount: 0.5 } },
      { ...valid, line: { type: "other", amount: 1 } },
      { ...valid, line: { type: "usage", quantity: 1 } },
      null
    ]) {
      const error = thrown(slow, misfit)
      expect(error).toBeDefined()
      expect(thrown(fast, misfit)).toBe(error)
    }
  })

  it("decoding refuses what Schema refuses, with Schema's error", () => {
    const fast = fastDecodeUnknownSync(Shape)
    const slow = Schema.decodeUnknownSync(Shape)
    const valid = {
      id: "x",
      count: 1,
      at: "1970-01-01T00:00:00.000Z",
      maybe: null,
      kind: "a",
      tags: ["t"],
      metadata: { k: "v" },
      nested: { flag: true, at: "1970-01-01T00:00:00.001Z" },
      defaulted: "1970-01-01T00:00:00.002Z",
      line: { type: "usage", quantity: 0.5, at: "1970-01-01T00:00:00.003Z" },
      extra: "dropped"
    }
    expect(fast(valid)).toEqual(slow(valid))
    const { defaulted: _, ...withoutDefaulted } = valid
    expect(fast(withoutDefaulted)).toEqual(slow(withoutDefaulted))
    for (const misfit of [
      { ...valid, count: 1.5 },
      { ...valid, at: "not a date" },
      { ...valid, at: 0 },
      { ...valid, maybe: 5 },
      { ...valid, kind: "c" },
      { ...valid, tags: [1] },
      { ...valid, note: 3 },
      { ...valid, metadata: [] },
      { ...valid, nested: { flag: "yes", at: valid.at } },
      { ...valid, id: undefined },
      { ...valid, defaulted: 7 },
      { ...valid, line: { type: "fee", amount: 0.5 } },
      { ...valid, line: { type: "other", amount: 1 } },
      [],
      null
    ]) {
      const error = thrown(slow, misfit)
      expect(error).toBeDefined()
      expect(thrown(fast, misfit)).toBe(error)
    }
  })

  it("every event type's data (what each append encodes): the same JSON as Schema.encodeEither", () => {
    let checked = 0
    for (const eventType of eventTypes) {
      const schema = eventType.schema
      const fast = fastEncodeEither(schema)
      const slow = Schema.encodeEither(schema)
      const fastDecode = fastDecodeUnknownEither(schema)
      const slowDecode = Schema.decodeUnknownEither(schema)
      fc.assert(
        fc.property(Arbitrary.make(schema), (data) => {
          const expected = slow(data)
          const actual = fast(data)
          expect(Either.isRight(actual)).toBe(Either.isRight(expected))
          if (Either.isRight(actual) && Either.isRight(expected)) {
            expect(JSON.stringify(actual.right)).toBe(JSON.stringify(expected.right))
            // And back, as a load decodes it.
            const stored: unknown = structuredClone(expected.right)
            const decoded = fastDecode(stored)
            const schemaDecoded = slowDecode(stored)
            expect(Either.isRight(decoded)).toBe(true)
            if (Either.isRight(decoded) && Either.isRight(schemaDecoded))
              expect(decoded.right).toEqual(schemaDecoded.right)
          }
        }),
        { numRuns: 20 }
      )
      checked++
    }
    expect(checked).toBe(eventTypes.length)
  })
})
