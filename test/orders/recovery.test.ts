/**
 * A process that dies between the payment's refund and the order's record of it (refunds.ts): the
 * order holds the refund as pending with its safety net armed; when that comes due the worker asks
 * payments again with the same key — which answers the refund it already made, moving no money twice
 * — and records it on the order.
 */
import { layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { expect } from "vitest"
import { CommandRunner } from "../../src/kernel/CommandRunner.js"
import * as Ids from "../../src/kernel/Ids.js"
import { orderStream } from "../../src/orders/decider.js"
import { OrderDecider } from "../../src/orders/objects.js"
import { armRefund, payRefund } from "../../src/orders/refunds.js"
import { adminToken } from "../support/customers.js"
import { call } from "../support/identity.js"
import { eventually } from "../support/notifications.js"
import { paidOrder, RecoveryHttp, TEST_METADATA } from "../support/orders.js"

layer(RecoveryHttp, { excludeTestServices: true, timeout: 120_000 })("refund recovery", (it) => {
  it.effect("a refund whose record was lost is completed by the worker, with no second refund", () =>
    Effect.gen(function* () {
      const token = yield* adminToken
      const runner = yield* CommandRunner
      const order = yield* paidOrder(token)
      const refundId = yield* Ids.make("re")
      // Step 1 (the order's intent and its safety net), step 2 (the payment refunds) — then the crash.
      const started = yield* runner.transact(
        Effect.gen(function* () {
          const result = yield* runner.execute(
            OrderDecider,
            orderStream(order.id),
            { _tag: "Refund", refundId, amount: 700, reason: "other", items: undefined, restock: false },
            { metadata: TEST_METADATA }
          )
          const refund = result.state.refunds.find((r) => r.id === refundId)
          if (refund === undefined) throw new Error("no refund started")
          yield* armRefund(order.id, refund)
          return { state: result.state, refund }
        })
      )
      const outcome = yield* payRefund(started.state, started.refund)
      expect(Option.isSome(outcome)).toBe(true)
      const pending = yield* call("GET", `/v1/orders/${order.id}`, { token })
      expect(pending.body.refunds[0]).toMatchObject({ status: "pending", amount: 700 })
      expect(pending.body.amountRefundable).toBe(2300)

      const done = yield* eventually(
        Effect.map(call("GET", `/v1/orders/${order.id}`, { token }), (r) =>
          r.body.refunds[0]?.status === "succeeded" ? r.body : undefined
        ),
        30_000
      )
      expect(done).toMatchObject({
        paymentStatus: "partially_refunded",
        amountRefunded: 700,
        amountRefundable: 2300
      })
      const payment = yield* call("GET", `/v1/payments/${order.paymentId}`, { token })
      expect(payment.body).toMatchObject({ amountRefunded: 700 })
      expect(done.refunds[0].paymentRefundId).toMatch(/^re_/)
    })
  )
})
