/**
 * The safety net due at once (`PAYMENT_RECOVERY_AFTER_SECONDS=0`), so the `payments-recovery`
 * worker races every request's own record of its outcome. Both take the safety net's row before the
 * intent's stream (Payments.recordOutcome, DueWork.complete then its writes): none of them waits on
 * the other crosswise (the opposite order deadlocked, and a request answered 500), and each call is
 * recorded once.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { layer } from "@effect/vitest"
import { Effect, Layer, Logger, LogLevel } from "effect"
import { expect } from "vitest"
import { makeAppConfig } from "../../src/config.js"
import { processorCallRecovery } from "../../src/payments/recovery.js"
import { processorsLayer } from "../../src/processors/Supervisor.js"
import { projections } from "../../src/registry.js"
import { HttpAppLive } from "../../src/server.js"
import { servicesLayer } from "../../src/services.js"
import { testConfig } from "../support/database.js"
import { call } from "../support/identity.js"
import { processorCalls, staffToken } from "../support/payments.js"

const processors = [processorCallRecovery()]
const RacingHttp = Layer.mergeAll(HttpAppLive, processorsLayer(processors)).pipe(
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(
    servicesLayer({ processors, projections }).pipe(
      Layer.provideMerge(testConfig({ payments: { ...makeAppConfig().payments, recoveryAfterSeconds: 0 } }))
    )
  ),
  Layer.provideMerge(Logger.minimumLogLevel(LogLevel.Error))
)

const PAYMENTS = 40

layer(RacingHttp, { excludeTestServices: true, timeout: 180_000 })(
  "the recovery worker racing requests",
  (it) => {
    it.effect(
      `${PAYMENTS} concurrent payments with the safety net due at once: all answered, each charged once`,
      () =>
        Effect.gen(function* () {
          const token = yield* staffToken
          const replies = yield* Effect.forEach(
            Array.from({ length: PAYMENTS }, (_, i) => i),
            (i) =>
              call("POST", "/v1/payments", {
                token,
                json: { amount: 1000 + i, currency: "USD", paymentMethod: "pm_card_visa" }
              }),
            { concurrency: PAYMENTS }
          )
          for (const r of replies) expect(r.status, r.text).toBe(201)
          for (const r of replies) {
            const body = r.body as { readonly paymentIntentId: string; readonly amount: number }
            const calls = yield* processorCalls(body.paymentIntentId)
            // One authorization per payment at the processor, however many times it was asked.
            expect(calls.filter((c) => c.operation === "authorize")).toHaveLength(1)
          }
        })
    )
  }
)
