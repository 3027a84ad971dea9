/**
 * The payments port (`PaymentsPort`, what checkout and orders use): an intent created in the
 * caller's transaction commits or rolls back with it (and so does a confirmation started with it, whose
 * call is made once after the commit); a decline is data, not a failure; cancel of a
 * canceled intent answers it; a refund under a caller's key is made once however often it is asked,
 * and never beyond what was captured.
 */
import { layer } from "@effect/vitest"
import { Effect, Exit, Option } from "effect"
import { expect } from "vitest"
import { CommandRunner } from "../../src/kernel/CommandRunner.js"
import { PaymentsPort, type StartedConfirmation } from "../../src/payments/index.js"
import { IdentityHttp } from "../support/identity.js"
import { processorCalls } from "../support/payments.js"

const META = { actor: { type: "system" as const, id: "port-test" } }

const newIntent = (paymentMethod: string | null, amount = 2500) => ({
  amount,
  currency: "USD",
  customerId: null,
  captureMethod: "automatic" as const,
  paymentMethod,
  metadata: { via: "port" }
})

layer(IdentityHttp, { excludeTestServices: true, timeout: 60_000 })("payments port", (it) => {
  it.effect("createIntent joins the caller's transaction: rolled back with it, nothing remains", () =>
    Effect.gen(function* () {
      const port = yield* PaymentsPort
      const runner = yield* CommandRunner
      let id = ""
      const exit = yield* Effect.exit(
        runner.transact(
          Effect.gen(function* () {
            const intent = yield* port.createIntent(newIntent(null), META)
            id = intent.id
            expect(Option.isSome(yield* port.find(intent.id))).toBe(true)
            return yield* Effect.fail("the caller gives up")
          })
        )
      )
      expect(Exit.isFailure(exit)).toBe(true)
      expect(Option.isNone(yield* port.find(id))).toBe(true)
      const kept = yield* port.createIntent(newIntent("pm_card_visa"), META)
      expect(kept).toMatchObject({ status: "requires_confirmation", metadata: { via: "port" } })
      expect(kept.clientSecret).toMatch(/_secret_/)
      const unknown = yield* Effect.either(port.createIntent(newIntent("pm_nope"), META))
      expect(unknown._tag === "Left" && unknown.left._tag).toBe("UnknownPaymentMethod")
    })
  )

  it.effect("confirm: a decline is data; paid after; cancel of a canceled intent answers it", () =>
    Effect.gen(function* () {
      const port = yield* PaymentsPort
      const intent = yield* port.createIntent(newIntent("pm_card_visa_chargeDeclined"), META)
      const declined = yield* port.confirm(intent.id, {}, META)
      expect(declined).toMatchObject({ declined: true, intent: { status: "requires_payment_method" } })
      const paid = yield* port.confirm(intent.id, { paymentMethod: "pm_card_visa" }, META)
      expect(paid).toMatchObject({ declined: false, intent: { status: "succeeded", amountReceived: 2500 } })
      const refused = yield* Effect.either(port.cancel(intent.id, "abandoned", META))
      expect(refused._tag === "Left" && refused.left._tag).toBe("UnexpectedState")
      const open = yield* port.createIntent(newIntent(null), META)
      const canceled = yield* port.cancel(open.id, "abandoned", META)
      expect(canceled).toMatchObject({ status: "canceled", cancellationReason: "abandoned" })
      expect(yield* port.cancel(open.id, "duplicate", META)).toEqual(canceled)
    })
  )

  it.effect(
    "createConfirmingIntent starts the confirmation in the caller's transaction; its answer is recorded in another, and charged once",
    () =>
      Effect.gen(function* () {
        const port = yield* PaymentsPort
        const runner = yield* CommandRunner
        // The call, then its answer recorded in a transaction of the caller's.
        const finish = (confirmation: StartedConfirmation) =>
          Effect.flatMap(port.callConfirmation(confirmation), (answered) =>
            Option.isNone(answered)
              ? Effect.die("the test processor did not answer")
              : runner.transact(port.recordConfirmation(answered.value, META))
          )
        // Rolled back with the caller: no intent, and no call was made.
        let rolledBack = ""
        const exit = yield* Effect.exit(
          runner.transact(
            Effect.gen(function* () {
              const started = yield* port.createConfirmingIntent(newIntent("pm_card_visa"), META)
              rolledBack = started.intent.id
              return yield* Effect.fail("the caller gives up")
            })
          )
        )
        expect(Exit.isFailure(exit)).toBe(true)
        expect(Option.isNone(yield* port.find(rolledBack))).toBe(true)

        const started = yield* runner.transact(
          port.createConfirmingIntent(newIntent("pm_card_visa", 1300), META)
        )
        expect(started.intent.status).toBe("processing")
        const confirmation = started.confirmation
        if (confirmation === null) return yield* Effect.die("no confirmation was started")
        expect(yield* processorCalls(started.intent.id)).toEqual([])
        const answered = yield* port.callConfirmation(confirmation)
        if (Option.isNone(answered)) return yield* Effect.die("the test processor did not answer")
        // The answer's record rolls back with the caller's transaction: the intent stays processing.
        const undone = yield* Effect.exit(
          runner.transact(
            Effect.zipRight(port.recordConfirmation(answered.value, META), Effect.fail("the caller gives up"))
          )
        )
        expect(Exit.isFailure(undone)).toBe(true)
        expect(Option.map(yield* port.find(started.intent.id), (i) => i.status)).toEqual(
          Option.some("processing")
        )
        // Recorded again (the caller's retry): decided on the stream as it now is.
        const paid = yield* runner.transact(port.recordConfirmation(answered.value, META))
        expect(paid).toMatchObject({
          declined: false,
          paymentId: confirmation.paymentId,
          intent: { status: "succeeded", amountReceived: 1300, latestPaymentId: confirmation.paymentId }
        })
        // Finishing again (a retried step) asks the processor again under the same key: one charge.
        expect(yield* finish(confirmation)).toMatchObject({
          intent: { status: "succeeded", amountReceived: 1300 }
        })
        expect((yield* processorCalls(started.intent.id)).map((c) => [c.operation, c.requests])).toEqual([
          ["authorize", 2]
        ])

        // A decline is data; without a payment method nothing is started.
        const declining = yield* port.createConfirmingIntent(newIntent("pm_card_visa_chargeDeclined"), META)
        if (declining.confirmation === null) return yield* Effect.die("no confirmation was started")
        expect(yield* finish(declining.confirmation)).toMatchObject({
          declined: true,
          intent: { status: "requires_payment_method" }
        })
        const bare = yield* port.createConfirmingIntent(newIntent(null), META)
        expect(bare).toMatchObject({ confirmation: null, intent: { status: "requires_payment_method" } })
      })
  )

  it.effect("refund under a key: made once however often asked; never beyond what was captured", () =>
    Effect.gen(function* () {
      const port = yield* PaymentsPort
      const intent = yield* port.createIntent(newIntent("pm_card_visa", 1000), META)
      const { intent: paid } = yield* port.confirm(intent.id, {}, META)
      const paymentId = paid.latestPaymentId ?? ""
      const first = yield* port.refund(paymentId, { amount: 400, reason: "other", key: "k-1" }, META)
      const repeats = yield* Effect.all(
        Array.from({ length: 5 }, () =>
          port.refund(paymentId, { amount: 400, reason: "other", key: "k-1" }, META)
        ),
        { concurrency: "unbounded" }
      )
      for (const r of repeats) expect(r).toEqual(first)
      expect(first).toMatchObject({ amount: 400, status: "succeeded" })
      const rest = yield* port.refund(paymentId, { amount: null, reason: null, key: "k-2" }, META)
      expect(rest.amount).toBe(600)
      const beyond = yield* Effect.either(
        port.refund(paymentId, { amount: 1, reason: null, key: "k-3" }, META)
      )
      expect(beyond._tag === "Left" && beyond.left._tag).toBe("ChargeAlreadyRefunded")
      const refunds = (yield* processorCalls(paymentId)).filter((c) => c.operation === "refund")
      expect(refunds.map((c) => c.amount)).toEqual([400, 600])
    })
  )
})
