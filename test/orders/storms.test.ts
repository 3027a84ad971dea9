/**
 * The orders' invariants under load, on PostgreSQL (skipped on PGlite, which runs one transaction at
 * a time): 500 concurrent placements draw display ids exactly 1001…1500 (no gap, no repeat); the same
 * order placed concurrently is one order; 50 concurrent refunds of one order never give back more
 * than was captured, in the order's books or the payment's.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { CommandRunner } from "../../src/kernel/CommandRunner.js"
import { OrdersPort } from "../../src/orders/index.js"
import { adminToken } from "../support/customers.js"
import { usingRealPostgres } from "../support/database.js"
import { call } from "../support/identity.js"
import { eventually } from "../support/notifications.js"
import {
  paidOrder,
  placeInput,
  placeOrder,
  publicEventsOf,
  RecoveryHttp,
  TEST_METADATA
} from "../support/orders.js"

const OPTIONS = { excludeTestServices: true, timeout: 300_000 } as const

layer(RecoveryHttp, OPTIONS)("order storms (PostgreSQL)", (it) => {
  // First in this file: its fresh database has placed no order yet.
  it.effect.skipIf(!usingRealPostgres)("500 concurrent placements → display ids exactly 1001…1500", () =>
    Effect.gen(function* () {
      const port = yield* OrdersPort
      const runner = yield* CommandRunner
      const inputs = yield* Effect.all(Array.from({ length: 500 }, () => placeInput()))
      // Placements queue on the counter row, so some wait longer for a connection than the pool
      // allows (5 s) and fail: they are retried as checkout completion would retry them (the same
      // order id). A failed placement must leave no gap behind.
      let failures = 0
      const placed = yield* Effect.all(
        inputs.map((input) =>
          runner.transact(port.place(input, TEST_METADATA)).pipe(
            Effect.tapError(() => Effect.sync(() => failures++)),
            Effect.retry({ times: 20 })
          )
        ),
        { concurrency: "unbounded" }
      )
      const ids = placed.map((o) => Number(o.displayId)).sort((a, b) => a - b)
      expect(ids).toEqual(Array.from({ length: 500 }, (_, i) => 1001 + i))
      expect(new Set(placed.map((o) => o.id)).size).toBe(500)
      console.info(`500 placements: ${failures} failed attempts retried`)
    })
  )

  it.effect.skipIf(!usingRealPostgres)("one order placed 20 times at once is one order, one number", () =>
    Effect.gen(function* () {
      const port = yield* OrdersPort
      const input = yield* placeInput()
      const answers = yield* Effect.all(
        Array.from({ length: 20 }, () => port.place(input, TEST_METADATA)),
        { concurrency: "unbounded" }
      )
      expect(new Set(answers.map((o) => o.displayId)).size).toBe(1)
      expect((yield* publicEventsOf(input.orderId)).filter((e) => e.type === "order.created")).toHaveLength(1)
      // The number drawn is the next one: nothing was drawn and lost for the 19 repeats.
      const next = yield* placeOrder()
      expect(Number(next.displayId)).toBe(Number(answers[0]?.displayId) + 1)
    })
  )

  it.effect.skipIf(!usingRealPostgres)(
    "50 concurrent refunds of one order never exceed what was captured",
    () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const order = yield* paidOrder(token)
        expect(order.amountPaid).toBe(3000)
        const replies = yield* Effect.all(
          Array.from({ length: 50 }, () =>
            call("POST", `/v1/orders/${order.id}/refund`, { token, json: { amount: 100 } })
          ),
          { concurrency: "unbounded" }
        )
        const statuses = replies.map((r) => r.status)
        expect(replies.filter((r) => r.status >= 500).map((r) => r.text)).toEqual([])
        expect(statuses.filter((s) => s === 200)).toHaveLength(30)
        for (const r of replies.filter((x) => x.status !== 200)) {
          expect(r.status, r.text).toBe(409)
          expect(r.body.error.code).toBe("order_not_refundable")
        }
        // Every refund recorded (by its request, or by the safety nets when its record lost a race).
        const after = yield* eventually(
          Effect.map(call("GET", `/v1/orders/${order.id}`, { token }), (r) =>
            r.body.refunds.every((x: { status: string }) => x.status === "succeeded") ? r : undefined
          ),
          90_000
        )
        expect(after.body).toMatchObject({
          amountRefunded: 3000,
          amountRefundable: 0,
          paymentStatus: "refunded",
          status: "cancelled"
        })
        expect(after.body.refunds).toHaveLength(30)
        const payment = yield* call("GET", `/v1/payments/${order.paymentId}`, { token })
        expect(payment.body).toMatchObject({ amountRefunded: 3000, status: "refunded" })
      })
  )
})
