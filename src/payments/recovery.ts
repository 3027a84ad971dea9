/**
 * The safety net of processor calls (the shape of webhooks/delivery.ts): every call a request
 * starts arms a due-work item (kind `payments.processor_call`, key = the call's idempotency key) due
 * `PAYMENT_RECOVERY_AFTER_SECONDS` later, which the request disarms when it records the outcome.
 * An item that comes due means the request never recorded it (the process died between the call
 * and the record, or the processor did not answer): the worker asks the processor again with the
 * SAME key, outside any transaction — the processor answers what it already did, moving no money
 * twice — and records that outcome with the claim's fenced completion. A call recorded meanwhile
 * (the request was only slow) is simply done: recording an outcome twice changes nothing.
 */
import type { SqlClient } from "@effect/sql"
import { Duration, Effect } from "effect"
import type { AppConfig } from "../config.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Time from "../kernel/Time.js"
import { type DueItem, DueOutcome, type DueWork, dueWorker } from "../processors/DueWork.js"
import type { Processor } from "../processors/Supervisor.js"
import { PaymentIntentDecider, paymentIntentStream } from "./decider.js"
import { callFor, PROCESSOR_CALL_KIND } from "./Payments.js"
import { PaymentProcessor } from "./processor.js"

const RECOVERER = { actor: { type: "system" as const, id: "payments-recovery" } }

/** When an unanswered processor is asked again. */
const RETRY_UNAVAILABLE = Duration.seconds(30)

const intentIdOf = (item: DueItem): string | undefined => {
  const payload = item.payload
  return typeof payload === "object" && payload !== null && "paymentIntentId" in payload
    ? String(payload.paymentIntentId)
    : undefined
}

export const handleProcessorCall = (item: DueItem) =>
  Effect.gen(function* () {
    const runner = yield* CommandRunner
    const processor = yield* PaymentProcessor
    const paymentIntentId = intentIdOf(item)
    if (paymentIntentId === undefined)
      return DueOutcome.failed({ error: "no paymentIntentId in the payload" })
    const stream = paymentIntentStream(paymentIntentId)
    const { state } = yield* runner.load(PaymentIntentDecider, stream)
    const op = state.operations.find((o) => o.key === item.key)
    // Recorded meanwhile: the request was slower than the safety net, nothing is left to do.
    if (op === undefined) return DueOutcome.done()
    const answered = yield* Effect.either(callFor(processor, state, op))
    if (answered._tag === "Left")
      return DueOutcome.retry({ at: yield* Time.fromNow(RETRY_UNAVAILABLE), error: answered.left.message })
    yield* Effect.logInfo(`payments: recovered ${item.key} (${answered.right._tag})`)
    return DueOutcome.done({
      inTransaction: Effect.asVoid(
        runner.execute(
          PaymentIntentDecider,
          stream,
          { _tag: "Record", idempotencyKey: item.key, outcome: answered.right },
          { metadata: RECOVERER }
        )
      )
    })
  })

/** The worker (`ROLE=worker|all`). */
export const processorCallRecovery = (): Processor<
  SqlClient.SqlClient | AppConfig | CommandRunner | DueWork | PaymentProcessor
> => ({
  name: "payments-recovery",
  run: dueWorker({
    name: "payments-recovery",
    kinds: [PROCESSOR_CALL_KIND],
    concurrency: 8,
    maxAttempts: 50,
    handle: handleProcessorCall
  }).run
})
