/**
 * A customer's erasure ends their subscriptions (Stripe cancels a deleted customer's): the
 * `billing-customer-erasures` processor, running, cancels every subscription of theirs that is not
 * over with nothing billed — no final invoice, no proration, no charge — and leaves other
 * customers' alone.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { customerErasures } from "../../src/billing/erasures.js"
import { chargesOf, getSubscription, invoicesOf, subscribedShopper } from "../support/billing.js"
import { call } from "../support/identity.js"
import { eventually, notificationsHttp } from "../support/notifications.js"
import { staffToken } from "../support/payments.js"

layer(notificationsHttp({ processors: [customerErasures()] }), {
  excludeTestServices: true,
  timeout: 120_000
})("billing on a customer's erasure", (it) => {
  it.effect("DELETE /user/:id cancels their subscriptions, billing nothing; others stay active", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const gone = yield* subscribedShopper(token, { interval: "month", intervalCount: 1 })
      const kept = yield* subscribedShopper(token, { interval: "month", intervalCount: 1 })
      const paymentsOf = (customerId: string) =>
        Effect.map(
          call("GET", `/v1/payments?customerId=${customerId}&limit=100`, { token }),
          (r) =>
            r.body.data as ReadonlyArray<{ readonly amountCaptured: number; readonly amountRefunded: number }>
        )
      const paidBefore = yield* paymentsOf(gone.shopper.customerId)
      expect(paidBefore).toHaveLength(1)
      expect((yield* call("DELETE", `/user/${gone.shopper.customerId}`, { token })).status).toBe(204)
      const canceled = yield* eventually(
        Effect.map(getSubscription(token, gone.sub.id), (s) => (s.status === "canceled" ? s : undefined))
      )
      expect(canceled).toMatchObject({ cancellationReason: "customer_deleted", cancelAtPeriodEnd: false })
      // Nothing billed: the first period's invoice only, and no new charge or refund.
      expect((yield* invoicesOf(token, gone.sub.id)).length).toBe(1)
      expect(yield* paymentsOf(gone.shopper.customerId)).toEqual(paidBefore)
      expect(yield* chargesOf(`renewal:${gone.sub.id}:`)).toHaveLength(1)
      expect(yield* getSubscription(token, kept.sub.id)).toMatchObject({ status: "active" })
    })
  )
})
