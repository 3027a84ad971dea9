/**
 * The usage tests' reference model, written apart from the production arithmetic
 * (src/billing/usage/decider.ts) so that a mistake there cannot hide in both sides of a comparison:
 * a value becomes millionths from its 6-decimal text, each aggregation is its plain definition over
 * the records timestamped in [from, to), and the figure an API answer must show is the decimal text
 * of those millionths read as a number.
 */
import type { UsageAggregation } from "../../../src/billing/contract.js"

export interface ReferenceRecord {
  /** As posted: at most 6 decimals, ≥ 0. */
  readonly value: number
  /** Epoch milliseconds. */
  readonly at: number
  readonly identifier: string
  /** `properties[uniqueKey]` of the record, if it has one. */
  readonly uniqueValue: string | null
}

const MILLION = 1_000_000n

/** A value of at most 6 decimals in millionths, from its decimal text. */
export const millionthsOf = (value: number): bigint => {
  const [whole = "0", fraction = ""] = value.toFixed(6).split(".")
  return BigInt(whole) * MILLION + BigInt(fraction.padEnd(6, "0"))
}

/** Millionths as the number an answer shows (`12.5`, `0.000001`). */
export const shownAs = (millionths: bigint): number =>
  Number(`${millionths / MILLION}.${(millionths % MILLION).toString().padStart(6, "0")}`)

/** Byte order of UTF-8 text, as PostgreSQL's "C" collation orders identifiers. */
const laterIdentifier = (a: string, b: string): boolean => Buffer.compare(Buffer.from(a), Buffer.from(b)) > 0

/** The quantity (millionths) and record count of `aggregation` over the records in [from, to). */
export const referenceAggregate = (
  aggregation: UsageAggregation,
  records: ReadonlyArray<ReferenceRecord>,
  from: number,
  to: number
): { readonly quantity: bigint; readonly eventCount: number } => {
  const inRange = records.filter((r) => r.at >= from && r.at < to)
  const values = inRange.map((r) => millionthsOf(r.value))
  const quantity = (() => {
    switch (aggregation) {
      case "sum":
        return values.reduce((a, b) => a + b, 0n)
      case "count":
        return BigInt(inRange.length) * MILLION
      case "max": {
        // Values are ≥ 0, so none recorded reads 0. (Math.max takes no bigint.)
        let max = 0n
        for (const v of values) if (v > max) max = v
        return max
      }
      case "last": {
        let latest: ReferenceRecord | undefined
        for (const r of inRange) {
          if (
            latest === undefined ||
            r.at > latest.at ||
            (r.at === latest.at && laterIdentifier(r.identifier, latest.identifier))
          )
            latest = r
        }
        return latest === undefined ? 0n : millionthsOf(latest.value)
      }
      case "unique_count":
        return (
          BigInt(new Set(inRange.flatMap((r) => (r.uniqueValue === null ? [] : [r.uniqueValue]))).size) *
          MILLION
        )
    }
  })()
  return { quantity, eventCount: inRange.length }
}
