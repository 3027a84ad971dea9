/**
 * The test processor remembers on its side of the wire (migration 0018), as Stripe does: a fresh
 * instance — what a restarted process builds — answers a key asked before with its first answer
 * (counting the repeat, moving nothing), and captures, voids and refunds the charges an earlier
 * instance authorized, within what they hold.
 */
import { layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { expect } from "vitest"
import { testProcessor } from "../../src/payments/testProcessor.js"
import { TestPersistence } from "../support/database.js"

layer(TestPersistence, { timeout: 60_000 })("the test processor across a restart", (it) => {
  it.scoped("a new instance answers known keys the first way and settles the charges of the old one", () =>
    Effect.gen(function* () {
      const before = yield* testProcessor
      const prefix = `pi_restart_${Date.now()}`
      const authorize = {
        paymentIntentId: prefix,
        amount: 1000,
        currency: "USD",
        paymentMethod: "pm_card_visa"
      }
      const held = yield* before.authorize({
        ...authorize,
        idempotencyKey: `${prefix}:confirm:1`,
        capture: false
      })
      const paid = yield* before.authorize({
        ...authorize,
        idempotencyKey: `${prefix}:confirm:2`,
        capture: true
      })
      expect(held._tag).toBe("Authorized")
      expect(paid._tag).toBe("Authorized")
      if (held._tag !== "Authorized" || paid._tag !== "Authorized") return

      // "Restarted": nothing in memory carries over.
      const after = yield* testProcessor
      expect(
        yield* after.authorize({ ...authorize, idempotencyKey: `${prefix}:confirm:1`, capture: false })
      ).toEqual(held)
      const capture = { idempotencyKey: `${prefix}:capture`, processorReference: held.processorReference }
      expect((yield* after.capture({ ...capture, amount: 2000 }))._tag).toBe("Failed")
      expect(
        yield* after.capture({ ...capture, idempotencyKey: `${prefix}:capture:b`, amount: 600 })
      ).toEqual({
        _tag: "Succeeded",
        processorReference: held.processorReference
      })
      // A repeated key gets its first answer again, whatever the request now says.
      expect((yield* after.capture({ ...capture, amount: 600 }))._tag).toBe("Failed")
      const refund = (key: string, amount: number) =>
        after.refund({
          idempotencyKey: key,
          processorReference: paid.processorReference,
          amount,
          reason: null
        })
      expect((yield* refund(`${prefix}:refund:1`, 700))._tag).toBe("Succeeded")
      expect(yield* refund(`${prefix}:refund:2`, 400)).toMatchObject({
        _tag: "Failed",
        code: "amount_too_large"
      })
      expect((yield* refund(`${prefix}:refund:3`, 300))._tag).toBe("Succeeded")
      expect((yield* refund(`${prefix}:refund:1`, 700))._tag).toBe("Succeeded")

      const ledger = Option.getOrThrow(after.ledger)
      expect((yield* ledger.calls(prefix)).map((c) => [c.idempotencyKey, c.operation, c.requests])).toEqual([
        [`${prefix}:confirm:1`, "authorize", 2],
        [`${prefix}:confirm:2`, "authorize", 1],
        [`${prefix}:capture`, "capture", 2],
        [`${prefix}:capture:b`, "capture", 1],
        [`${prefix}:refund:1`, "refund", 2],
        [`${prefix}:refund:2`, "refund", 1],
        [`${prefix}:refund:3`, "refund", 1]
      ])
    })
  )
})
