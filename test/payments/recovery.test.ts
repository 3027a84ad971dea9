/**
 * The safety net running as the service runs it (`payments-recovery` under the supervisor): a
 * process that died between the processor call and the record of its outcome leaves the intent
 * `processing`; the worker asks the processor again with the same key and records the first answer.
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
import { eventually } from "../support/notifications.js"
import { confirmThenCrash, createIntent, ok, processorCalls, staffToken } from "../support/payments.js"

const processors = [processorCallRecovery()]
const RecoveringHttp = Layer.mergeAll(HttpAppLive, processorsLayer(processors)).pipe(
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(
    servicesLayer({ processors, projections }).pipe(
      Layer.provideMerge(testConfig({ payments: { ...makeAppConfig().payments, recoveryAfterSeconds: 1 } }))
    )
  ),
  Layer.provideMerge(Logger.minimumLogLevel(LogLevel.Warning))
)

layer(RecoveringHttp, { excludeTestServices: true, timeout: 120_000 })(
  "the payments-recovery worker",
  (it) => {
    it.effect("finishes a confirmation whose process died after the charge: same key, recorded once", () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const intent = yield* createIntent(token, { paymentMethod: "pm_card_visa", amount: 1357 })
        const op = yield* confirmThenCrash(intent.id)
        const recovered = yield* eventually(
          Effect.map(call("GET", `/v1/payment-intents/${intent.id}`, { token }), (r) =>
            r.body?.status === "succeeded" ? r.body : undefined
          ),
          15_000
        )
        expect(recovered).toMatchObject({ amountReceived: 1357, latestPaymentId: op.paymentId })
        expect((yield* processorCalls(intent.id)).map((c) => [c.idempotencyKey, c.requests])).toEqual([
          [op.key, 2]
        ])
        // A request that records its own outcome leaves the worker nothing to do.
        const paid = yield* Effect.map(
          call(
            "POST",
            `/v1/payment-intents/${(yield* createIntent(token, { paymentMethod: "pm_card_visa" })).id}/confirm`,
            {
              token,
              json: {}
            }
          ),
          ok(200)
        )
        yield* Effect.sleep("1500 millis")
        expect((yield* processorCalls(paid.id)).map((c) => c.requests)).toEqual([1])
      })
    )
  }
)
