/**
 * Helpers for the payments surface over HTTP: an admin token, intents and payments created through
 * the routes, and the test processor's record of its calls.
 */
import { Effect, Option } from "effect"
import { expect } from "vitest"
import { CommandRunner } from "../../src/kernel/CommandRunner.js"
import * as Ids from "../../src/kernel/Ids.js"
import { PaymentIntentDecider, paymentIntentStream } from "../../src/payments/decider.js"
import { callFor, PROCESSOR_CALL_KIND } from "../../src/payments/Payments.js"
import { PaymentProcessor, type ProcessorCall } from "../../src/payments/processor.js"
import { DueWork } from "../../src/processors/DueWork.js"
import { adminLogin, call, type Reply } from "./identity.js"

// biome-ignore lint/suspicious/noExplicitAny: reply bodies are inspected field by field
export type Json = any

/** A fresh admin's access token. */
export const staffToken = Effect.map(adminLogin(), (a) => a.accessToken)

export const ok =
  (status: number) =>
  (r: Reply): Json => {
    expect(r.status, r.text).toBe(status)
    return r.body
  }

export const createIntent = (token: string, fields: Record<string, unknown> = {}) =>
  Effect.map(
    call("POST", "/v1/payment-intents", { token, json: { amount: 2000, currency: "usd", ...fields } }),
    ok(201)
  )

export const createPayment = (token: string, fields: Record<string, unknown> = {}) =>
  Effect.map(
    call("POST", "/v1/payments", {
      token,
      json: { amount: 2000, currency: "USD", paymentMethod: "pm_card_visa", ...fields }
    }),
    ok(201)
  )

/** The test processor's calls (by idempotency key), optionally only those whose key starts with `prefix`. */
export const processorCalls = (prefix = "") =>
  Effect.flatMap(
    PaymentProcessor,
    (processor): Effect.Effect<ReadonlyArray<ProcessorCall>> =>
      Option.match(processor.ledger, {
        onNone: () => Effect.succeed([]),
        onSome: (ledger) => ledger.calls(prefix)
      })
  )

/**
 * The processor call of a confirmation already recorded as started (a renewal starts it with the
 * invoice's intent, safety net armed), made at the processor — then nothing, as if the process died
 * before recording the outcome. Answers the started call.
 */
export const callStartedThenCrash = (paymentIntentId: string) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const processor = yield* PaymentProcessor
    const { state } = yield* runner.load(PaymentIntentDecider, paymentIntentStream(paymentIntentId))
    const op = state.operations[0]
    if (op === undefined) throw new Error("no call was started")
    const answer = yield* callFor(processor, state, op)
    expect(answer._tag).toBe("Authorized")
    return op
  })

/**
 * A confirmation as `Payments` makes it, cut short where a crash would: the call recorded as
 * started (with its safety net armed, due at once) and made at the processor — then nothing, as if
 * the process died before recording the outcome. Answers the started call.
 */
export const confirmThenCrash = (paymentIntentId: string) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const work = yield* DueWork
    const processor = yield* PaymentProcessor
    const paymentId = yield* Ids.make("pay")
    const started = yield* runner.transact(
      Effect.gen(function* () {
        const result = yield* runner.execute(
          PaymentIntentDecider,
          paymentIntentStream(paymentIntentId),
          { _tag: "Confirm", paymentMethod: null, paymentId },
          {}
        )
        const op = result.state.operations[0]
        if (op === undefined) throw new Error("the confirmation started no call")
        yield* work.schedule({
          kind: PROCESSOR_CALL_KIND,
          key: op.key,
          dueAt: new Date(),
          payload: { paymentIntentId }
        })
        return { state: result.state, op }
      })
    )
    const answer = yield* callFor(processor, started.state, started.op)
    expect(answer._tag).toBe("Authorized")
    return { ...started.op, paymentId }
  })
