/** Checkpoints: the (xid, position) pair, its padded text form, and its order. No database. */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Schema } from "effect"
import * as fc from "fast-check"
import * as Checkpoint from "../../src/eventstore/Checkpoint.js"
import { checkpointOf } from "../../src/eventstore/EventStore.js"

const arbCheckpoint = fc.record({
  // xid8 is 64-bit: well past Number.MAX_SAFE_INTEGER.
  xid: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map((x) => x.toString()),
  position: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER })
})

describe("Checkpoint", () => {
  it.effect("origin formats as zeros and parses back", () =>
    Effect.gen(function* () {
      const text = Checkpoint.format(Checkpoint.origin)
      expect(text).toBe("00000000000000000000:00000000000000000000")
      expect(yield* Checkpoint.parse(text)).toEqual(Checkpoint.origin)
    })
  )

  it.effect("parses unpadded and surrounding-space input, normalising the xid", () =>
    Effect.gen(function* () {
      expect(yield* Checkpoint.parse("42:7")).toEqual({ xid: "42", position: 7 })
      expect(yield* Checkpoint.parse("  0000042:0007 ")).toEqual({ xid: "42", position: 7 })
      expect(yield* Checkpoint.parse("18446744073709551615:1")).toEqual({
        xid: "18446744073709551615",
        position: 1
      })
    })
  )

  it.effect("refuses what is not a checkpoint with InvalidCheckpoint", () =>
    Effect.gen(function* () {
      for (const bad of [
        "",
        "1",
        "1:",
        ":1",
        "a:1",
        "1:b",
        "1:2:3",
        "-1:2",
        "1:-2",
        "1.5:2",
        "1:99999999999999999999"
      ]) {
        const error = yield* Effect.flip(Checkpoint.parse(bad))
        expect(error._tag).toBe("InvalidCheckpoint")
        expect(error.input).toBe(bad)
        expect(error.message).toContain("is not a checkpoint")
      }
    })
  )

  it.effect("compare orders by xid first (as big integers), then by position", () =>
    Effect.sync(() => {
      const c = (xid: string, position: number) => ({ xid, position })
      expect(Checkpoint.compare(c("9", 100), c("10", 1))).toBe(-1)
      expect(Checkpoint.compare(c("10", 1), c("9", 100))).toBe(1)
      expect(Checkpoint.compare(c("10", 1), c("10", 2))).toBe(-1)
      expect(Checkpoint.compare(c("10", 2), c("10", 2))).toBe(0)
      expect(Checkpoint.compare(c("9007199254740993", 0), c("9007199254740992", 5))).toBe(1)
      expect(checkpointOf({ transactionId: "77", globalPosition: 5 })).toEqual(c("77", 5))
    })
  )

  it("format → parse round-trips, and the text sorts like compare", () => {
    fc.assert(
      fc.property(arbCheckpoint, arbCheckpoint, (a, b) => {
        const ta = Checkpoint.format(a)
        const tb = Checkpoint.format(b)
        expect(Effect.runSync(Checkpoint.parse(ta))).toEqual(a)
        expect(Schema.is(Checkpoint.CheckpointString)(ta)).toBe(true)
        const lexical = ta < tb ? -1 : ta > tb ? 1 : 0
        expect(lexical).toBe(Checkpoint.compare(a, b))
      })
    )
  })

  it("CheckpointString accepts only the text form", () => {
    const decode = Schema.decodeUnknownEither(Checkpoint.CheckpointString)
    expect(Either.isRight(decode("1:2"))).toBe(true)
    expect(Either.isLeft(decode("1-2"))).toBe(true)
    expect(Either.isLeft(decode(12))).toBe(true)
  })
})
