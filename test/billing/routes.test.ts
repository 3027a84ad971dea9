/**
 * `/v1/subscriptions` and `/v1/invoices` over HTTP (issue #21 items 1, 2, 6, 7): creation with and
 * without a trial, a declined first payment (incomplete, then paid by a new payment method), the
 * PATCH rules (pending plan changes, 409s), DELETE now with a prorated refund, invoices, shoppers
 * limited to their own, and bad input answered with a 4xx that writes nothing.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { invoiceIdOf } from "../../src/billing/index.js"
import { addMonths } from "../../src/billing/periods.js"
import {
  callsOf,
  chargesOf,
  getSubscription,
  invoicesOf,
  ok,
  recurringProduct,
  subscribe,
  subscribedShopper
} from "../support/billing.js"
import { createProduct } from "../support/catalog.js"
import { registeredShopper } from "../support/customers.js"
import { call, expectError, IdentityHttp } from "../support/identity.js"
import { staffToken } from "../support/payments.js"

const DAY = 86_400_000

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("subscription routes", (it) => {
  it.effect("without a trial: the first period is charged at once and the subscription is active", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const shopper = yield* registeredShopper()
      const product = yield* recurringProduct(token, {}, { amount: 1500 })
      const sub = ok(201)(
        yield* subscribe(token, {
          customerId: shopper.customerId,
          productId: product.id,
          paymentMethod: "pm_card_visa",
          quantity: 2,
          metadata: { plan: "pro" }
        })
      )
      expect(sub).toMatchObject({
        object: "subscription",
        status: "active",
        customerId: shopper.customerId,
        productId: product.id,
        quantity: 2,
        cancelAtPeriodEnd: false,
        pendingUpdate: null,
        trialEnd: null,
        metadata: { plan: "pro" },
        price: { amount: 1500, currency: "USD", interval: "month", intervalCount: 1, usage: null }
      })
      expect(sub.id).toMatch(/^sub_/)
      const start = new Date(sub.currentPeriodStart)
      expect(sub.currentPeriodEnd).toBe(addMonths(start, 1).toISOString())
      expect(sub.billingCycleAnchor).toBe(sub.currentPeriodStart)
      expect(sub.latestInvoice).toMatchObject({ status: "paid", total: 3000, attemptCount: 0 })
      const invoiceId = invoiceIdOf(sub.id, start)
      expect(sub.latestInvoice.id).toBe(invoiceId)
      // The read model agrees with what the write answered.
      expect(yield* getSubscription(token, sub.id)).toEqual(sub)
      const invoice = ok(200)(yield* call("GET", `/v1/invoices/${invoiceId}`, { token }))
      expect(invoice).toMatchObject({
        object: "invoice",
        subscriptionId: sub.id,
        customerId: shopper.customerId,
        billingReason: "subscription_create",
        periodStart: sub.currentPeriodStart,
        periodEnd: sub.currentPeriodEnd,
        lines: [
          {
            type: "subscription",
            quantity: 2,
            unitAmount: 1500,
            amount: 3000,
            period: { start: sub.currentPeriodStart, end: sub.currentPeriodEnd }
          }
        ],
        subtotal: 3000,
        total: 3000,
        currency: "USD",
        status: "paid",
        nextPaymentAttempt: null
      })
      expect(invoice.paymentId).toMatch(/^pay_/)
      expect((yield* invoicesOf(token, sub.id)).map((i) => i.id)).toEqual([invoiceId])
      // One charge, of the first period's fee.
      const charges = yield* chargesOf(`renewal:${sub.id}:`)
      expect(charges.map((c) => c.amount)).toEqual([3000])
      const payment = ok(200)(yield* call("GET", `/v1/payments/${invoice.paymentId}`, { token }))
      expect(payment).toMatchObject({ amount: 3000, status: "succeeded" })
      // Lists: by customer, status and product.
      const listed = ok(200)(
        yield* call(
          "GET",
          `/v1/subscriptions?customerId=${shopper.customerId}&status=active&productId=${product.id}`,
          { token }
        )
      )
      expect(listed).toMatchObject({ object: "list", hasMore: false })
      expect(listed.data.map((s: { id: string }) => s.id)).toEqual([sub.id])
      const none = ok(200)(
        yield* call("GET", `/v1/subscriptions?customerId=${shopper.customerId}&status=trialing`, { token })
      )
      expect(none.data).toEqual([])
    })
  )

  it.effect("Idempotency-Key: a repeated create answers the same subscription and charges once", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const shopper = yield* registeredShopper()
      const product = yield* recurringProduct(token)
      const body = { customerId: shopper.customerId, productId: product.id, paymentMethod: "pm_card_visa" }
      const headers = { "idempotency-key": `sub-${shopper.customerId}` }
      const first = ok(201)(yield* subscribe(token, body, headers))
      const again = yield* subscribe(token, body, headers)
      expect(ok(201)(again).id).toBe(first.id)
      expect(again.headers["idempotent-replayed"]).toBe("true")
      const listed = ok(200)(
        yield* call("GET", `/v1/subscriptions?customerId=${shopper.customerId}`, { token })
      )
      expect(listed.data).toHaveLength(1)
    })
  )

  it.effect("with a trial: trialing, nothing charged, the trial's end is the anchor", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const shopper = yield* registeredShopper()
      const product = yield* recurringProduct(token)
      const sub = ok(201)(
        yield* subscribe(token, {
          customerId: shopper.customerId,
          productId: product.id,
          trialPeriodDays: 14
        })
      )
      expect(sub).toMatchObject({ status: "trialing", paymentMethod: null, latestInvoice: null })
      const start = new Date(sub.trialStart).getTime()
      expect(sub.trialEnd).toBe(new Date(start + 14 * DAY).toISOString())
      expect(sub.currentPeriodStart).toBe(sub.trialStart)
      expect(sub.currentPeriodEnd).toBe(sub.trialEnd)
      expect(sub.billingCycleAnchor).toBe(sub.trialEnd)
      expect(yield* invoicesOf(token, sub.id)).toEqual([])
      expect(yield* callsOf(`renewal:${sub.id}:`)).toEqual([])
      // The price's own trial applies when the request names none.
      const trialProduct = yield* recurringProduct(token, { trialPeriodDays: 3 })
      const byPrice = ok(201)(
        yield* subscribe(token, {
          customerId: shopper.customerId,
          productId: trialProduct.id,
          paymentMethod: "pm_card_visa"
        })
      )
      expect(byPrice.status).toBe("trialing")
      expect(new Date(byPrice.trialEnd).getTime() - new Date(byPrice.trialStart).getTime()).toBe(3 * DAY)
    })
  )

  it.effect("a declined first payment: 201 incomplete; a new payment method pays it (active)", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const shopper = yield* registeredShopper()
      const product = yield* recurringProduct(token)
      const sub = ok(201)(
        yield* subscribe(token, {
          customerId: shopper.customerId,
          productId: product.id,
          paymentMethod: "pm_card_visa_chargeDeclined"
        })
      )
      expect(sub.status).toBe("incomplete")
      expect(sub.latestInvoice).toMatchObject({
        status: "open",
        attemptCount: 1,
        failureCode: "card_declined"
      })
      expect(sub.latestPaymentId).toMatch(/^pay_/)
      expect(yield* chargesOf(`renewal:${sub.id}:`)).toEqual([])
      const paid = ok(200)(
        yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
          token,
          json: { paymentMethod: "pm_card_visa" }
        })
      )
      expect(paid).toMatchObject({ status: "active", paymentMethod: "pm_card_visa" })
      expect(paid.latestInvoice).toMatchObject({ id: sub.latestInvoice.id, status: "paid" })
      expect((yield* chargesOf(`renewal:${sub.id}:`)).length).toBe(1)
    })
  )

  it.effect("PATCH: plan and quantity wait for the renewal (pendingUpdate); terminal → 409", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const shopper = yield* registeredShopper()
      const product = yield* recurringProduct(token)
      const bigger = yield* recurringProduct(token, {}, { amount: 2999 })
      const sub = ok(201)(
        yield* subscribe(token, {
          customerId: shopper.customerId,
          productId: product.id,
          paymentMethod: "pm_card_visa"
        })
      )
      const changed = ok(200)(
        yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
          token,
          json: { productId: bigger.id, quantity: 3, cancelAtPeriodEnd: true, metadata: { a: "b" } }
        })
      )
      expect(changed).toMatchObject({
        status: "active",
        productId: product.id,
        quantity: 1,
        cancelAtPeriodEnd: true,
        metadata: { a: "b" },
        pendingUpdate: { productId: bigger.id, quantity: 3, effectiveAt: sub.currentPeriodEnd }
      })
      // Back to the current plan: nothing pending; cancelAtPeriodEnd false takes the cancellation back.
      const back = ok(200)(
        yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
          token,
          json: { productId: product.id, quantity: 1, cancelAtPeriodEnd: false }
        })
      )
      expect(back).toMatchObject({ pendingUpdate: null, cancelAtPeriodEnd: false })
      // A one-time product is no plan; an unknown product is missing: 400, nothing changes.
      const oneTime = yield* createProduct(token)
      expectError(
        yield* call("PATCH", `/v1/subscriptions/${sub.id}`, { token, json: { productId: oneTime.id } }),
        400,
        "parameter_invalid",
        "productId"
      )
      expectError(
        yield* call("PATCH", `/v1/subscriptions/${sub.id}`, { token, json: { quantity: 0 } }),
        400,
        "parameter_invalid",
        "quantity"
      )
      // A payment method the processor does not know is refused now, not at the next renewal.
      expectError(
        yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
          token,
          json: { paymentMethod: "pm_no_such_card", quantity: 2 }
        }),
        400,
        "parameter_invalid",
        "paymentMethod"
      )
      expect(yield* getSubscription(token, sub.id)).toEqual(back)
      expect(
        ok(200)(
          yield* call("PATCH", `/v1/subscriptions/${sub.id}`, {
            token,
            json: { paymentMethod: "pm_card_mastercard" }
          })
        )
      ).toMatchObject({ paymentMethod: "pm_card_mastercard" })
      ok(200)(yield* call("DELETE", `/v1/subscriptions/${sub.id}`, { token }))
      expectError(
        yield* call("PATCH", `/v1/subscriptions/${sub.id}`, { token, json: { quantity: 2 } }),
        409,
        "subscription_not_active"
      )
    })
  )

  it.effect("DELETE now: canceled; ?prorate=true refunds the unused part; again → 200 unchanged", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const { sub } = yield* subscribedShopper(
        token,
        { interval: "day", intervalCount: 30 },
        { amount: 3000 }
      )
      const canceled = ok(200)(yield* call("DELETE", `/v1/subscriptions/${sub.id}?prorate=true`, { token }))
      expect(canceled).toMatchObject({ status: "canceled", cancellationReason: "admin" })
      expect(canceled.endedAt).toBe(canceled.canceledAt)
      // Canceled (almost) at once: nearly all of the 3000 comes back, never more.
      const refunded = ok(200)(yield* call("GET", `/v1/payments/${sub.latestInvoice.paymentId}`, { token }))
      expect(refunded.amountRefunded).toBeGreaterThan(2990)
      expect(refunded.amountRefunded).toBeLessThanOrEqual(3000)
      const again = ok(200)(yield* call("DELETE", `/v1/subscriptions/${sub.id}?prorate=true`, { token }))
      expect(again).toEqual(canceled)
      const after = ok(200)(yield* call("GET", `/v1/payments/${sub.latestInvoice.paymentId}`, { token }))
      expect(after.amountRefunded).toBe(refunded.amountRefunded)
    })
  )

  it.effect(
    "?prorate=true refunds no more than the payment still holds (a refund made on it took the rest)",
    () =>
      Effect.gen(function* () {
        const token = yield* staffToken
        const { sub } = yield* subscribedShopper(
          token,
          { interval: "day", intervalCount: 30 },
          { amount: 3000 }
        )
        const paymentId = sub.latestInvoice.paymentId
        ok(200)(yield* call("POST", `/v1/payments/${paymentId}/refund`, { token, json: { amount: 2900 } }))
        ok(200)(yield* call("DELETE", `/v1/subscriptions/${sub.id}?prorate=true`, { token }))
        const after = ok(200)(yield* call("GET", `/v1/payments/${paymentId}`, { token }))
        expect(after).toMatchObject({ amountCaptured: 3000, amountRefunded: 3000 })
      })
  )

  it.effect("DELETE now bills all usage recorded so far, records stamped a few minutes ahead too", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const meter = `calls_${Date.now().toString(36)}`
      const { sub } = yield* subscribedShopper(
        token,
        { usage: { meter, aggregation: "sum", unitAmount: 2, includedUnits: 10 } },
        { amount: 1000 }
      )
      const record = (identifier: string, value: number, timestamp?: string) =>
        call("POST", "/v1/usage", {
          token,
          json: { subscriptionId: sub.id, meter, identifier, value, ...(timestamp ? { timestamp } : {}) }
        })
      ok(201)(yield* record("now", 20))
      // Accepted up to 5 minutes ahead: no later invoice would take it once the subscription ends.
      ok(201)(yield* record("ahead", 30, new Date(Date.now() + 4 * 60_000).toISOString()))
      const canceled = ok(200)(yield* call("DELETE", `/v1/subscriptions/${sub.id}`, { token }))
      expect(canceled.latestInvoice).toMatchObject({ status: "paid", total: 80 })
      const final = ok(200)(yield* call("GET", `/v1/invoices/${canceled.latestInvoice.id}`, { token }))
      expect(final).toMatchObject({ billingReason: "subscription_cancel", status: "paid", total: 80 })
      expect(final.lines).toEqual([
        expect.objectContaining({
          type: "usage",
          quantity: 50,
          includedUnits: 10,
          billableUnits: 40,
          amount: 80
        })
      ])
    })
  )

  it.effect("shoppers: their own subscriptions and invoices only; another's is 404", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const ann = yield* registeredShopper()
      const bob = yield* registeredShopper()
      const product = yield* recurringProduct(token)
      // A shopper subscribes themself.
      const mine = ok(201)(
        yield* subscribe(ann.accessToken, { productId: product.id, paymentMethod: "pm_card_visa" })
      )
      expect(mine.customerId).toBe(ann.customerId)
      // Billing terms are the store's: a shopper sets no trial, no metadata, no prorated refund.
      for (const [field, extra] of [
        ["trialPeriodDays", { trialPeriodDays: 730 }],
        ["metadata", { metadata: { vip: "yes" } }]
      ] as const)
        expectError(
          yield* subscribe(ann.accessToken, {
            productId: product.id,
            paymentMethod: "pm_card_visa",
            ...extra
          }),
          403,
          "insufficient_scope",
          field
        )
      expectError(
        yield* call("DELETE", `/v1/subscriptions/${mine.id}?prorate=true`, { token: ann.accessToken }),
        403,
        "insufficient_scope"
      )
      expect((yield* getSubscription(token, mine.id)).status).toBe("active")
      expect(
        ok(200)(yield* call("GET", `/v1/subscriptions?customerId=${ann.customerId}`, { token })).data
      ).toHaveLength(1)
      const invoiceId = mine.latestInvoice.id
      ok(200)(yield* call("GET", `/v1/subscriptions/${mine.id}`, { token: ann.accessToken }))
      ok(200)(yield* call("GET", `/v1/invoices/${invoiceId}`, { token: ann.accessToken }))
      expectError(
        yield* call("GET", `/v1/subscriptions/${mine.id}`, { token: bob.accessToken }),
        404,
        "resource_missing"
      )
      expectError(
        yield* call("GET", `/v1/invoices/${invoiceId}`, { token: bob.accessToken }),
        404,
        "resource_missing"
      )
      expectError(
        yield* call("DELETE", `/v1/subscriptions/${mine.id}`, { token: bob.accessToken }),
        404,
        "resource_missing"
      )
      expectError(
        yield* call("PATCH", `/v1/subscriptions/${mine.id}`, {
          token: bob.accessToken,
          json: { cancelAtPeriodEnd: true }
        }),
        404,
        "resource_missing"
      )
      const bobs = ok(200)(yield* call("GET", "/v1/subscriptions", { token: bob.accessToken }))
      expect(bobs.data).toEqual([])
      const bobsByFilter = ok(200)(
        yield* call("GET", `/v1/subscriptions?customerId=${ann.customerId}`, { token: bob.accessToken })
      )
      expect(bobsByFilter.data).toEqual([])
      expect(ok(200)(yield* call("GET", "/v1/invoices", { token: bob.accessToken })).data).toEqual([])
      // Ann's ids as Bob's cursors: unknown to him, as ids that never existed.
      for (const path of [
        `/v1/subscriptions?startingAfter=${mine.id}`,
        `/v1/invoices?endingBefore=${invoiceId}`
      ])
        expectError(yield* call("GET", path, { token: bob.accessToken }), 400, "resource_missing")
      ok(200)(yield* call("GET", `/v1/subscriptions?startingAfter=${mine.id}`, { token: ann.accessToken }))
      // Subscribing someone else is refused.
      expectError(
        yield* subscribe(bob.accessToken, {
          customerId: ann.customerId,
          productId: product.id,
          paymentMethod: "pm_card_visa"
        }),
        400,
        "resource_missing",
        "customerId"
      )
      // Shoppers change the payment method and cancellation, not the plan.
      expectError(
        yield* call("PATCH", `/v1/subscriptions/${mine.id}`, {
          token: ann.accessToken,
          json: { quantity: 5 }
        }),
        403,
        "insufficient_scope"
      )
      const flagged = ok(200)(
        yield* call("PATCH", `/v1/subscriptions/${mine.id}`, {
          token: ann.accessToken,
          json: { cancelAtPeriodEnd: true }
        })
      )
      expect(flagged.cancelAtPeriodEnd).toBe(true)
      const own = ok(200)(yield* call("GET", "/v1/subscriptions", { token: ann.accessToken }))
      expect(own.data.map((s: { id: string }) => s.id)).toEqual([mine.id])
      const canceled = ok(200)(
        yield* call("DELETE", `/v1/subscriptions/${mine.id}`, { token: ann.accessToken })
      )
      expect(canceled).toMatchObject({ status: "canceled", cancellationReason: "requested_by_customer" })
    })
  )

  it.effect("bad input: a clear 4xx with its param, and nothing written", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const shopper = yield* registeredShopper()
      const product = yield* recurringProduct(token)
      const oneTime = yield* createProduct(token)
      const base = { customerId: shopper.customerId, productId: product.id, paymentMethod: "pm_card_visa" }
      const cases: ReadonlyArray<[Record<string, unknown>, number, string, string]> = [
        [{ ...base, productId: oneTime.id }, 400, "parameter_invalid", "productId"],
        [{ ...base, productId: "prod_00000000000000000000000000" }, 400, "resource_missing", "productId"],
        [{ ...base, productId: "nope" }, 400, "parameter_invalid", "productId"],
        [{ ...base, paymentMethod: undefined }, 400, "parameter_missing", "paymentMethod"],
        [{ ...base, paymentMethod: "pm_nonsense" }, 400, "parameter_invalid", "paymentMethod"],
        // A trial charges nothing now, yet an unknown method is refused now, not at the trial's end.
        [
          { ...base, paymentMethod: "pm_nonsense", trialPeriodDays: 3 },
          400,
          "parameter_invalid",
          "paymentMethod"
        ],
        [{ ...base, quantity: 0 }, 400, "parameter_invalid", "quantity"],
        [{ ...base, quantity: 1.5 }, 400, "parameter_invalid", "quantity"],
        [{ ...base, trialPeriodDays: -1 }, 400, "parameter_invalid", "trialPeriodDays"],
        [{ ...base, customerId: "cus_00000000000000000000000000" }, 400, "resource_missing", "customerId"],
        [{ ...base, customerId: undefined }, 400, "parameter_missing", "customerId"]
      ]
      for (const [json, status, code, param] of cases)
        expectError(yield* subscribe(token, json), status, code, param)
      const listed = ok(200)(
        yield* call("GET", `/v1/subscriptions?customerId=${shopper.customerId}`, { token })
      )
      expect(listed.data).toEqual([])
      expect(
        ok(200)(yield* call("GET", `/v1/invoices?customerId=${shopper.customerId}`, { token })).data
      ).toEqual([])
      expectError(yield* call("GET", "/v1/subscriptions/sub_nope", { token }), 404, "resource_missing")
      expectError(yield* call("GET", "/v1/invoices/in_nope", { token }), 404, "resource_missing")
      expectError(
        yield* call("GET", "/v1/subscriptions?status=sleeping", { token }),
        400,
        "parameter_invalid",
        "status"
      )
      expectError(
        yield* call("DELETE", "/v1/subscriptions/sub_00000000000000000000000000?prorate=maybe", { token }),
        400,
        "parameter_invalid",
        "prorate"
      )
    })
  )

  it.effect("GET /v1/invoices?status=: paid, open or void invoices only; anything else → 400", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const shopper = yield* registeredShopper()
      const product = yield* recurringProduct(token)
      const paid = ok(201)(
        yield* subscribe(token, {
          customerId: shopper.customerId,
          productId: product.id,
          paymentMethod: "pm_card_visa"
        })
      )
      const declined = ok(201)(
        yield* subscribe(token, {
          customerId: shopper.customerId,
          productId: product.id,
          paymentMethod: "pm_card_visa_chargeDeclinedInsufficientFunds"
        })
      )
      expect(declined.latestInvoice.status).toBe("open")
      const byStatus = (status: string) =>
        Effect.map(
          call("GET", `/v1/invoices?customerId=${shopper.customerId}&status=${status}`, { token }),
          (r) => ok(200)(r).data.map((i: { id: string }) => i.id)
        )
      expect(yield* byStatus("paid")).toEqual([paid.latestInvoice.id])
      expect(yield* byStatus("open")).toEqual([declined.latestInvoice.id])
      expect(yield* byStatus("void")).toEqual([])
      // The shopper's own list takes the filter too.
      expect(
        ok(200)(yield* call("GET", "/v1/invoices?status=open", { token: shopper.accessToken })).data.map(
          (i: { id: string }) => i.id
        )
      ).toEqual([declined.latestInvoice.id])
      expectError(
        yield* call("GET", "/v1/invoices?status=draft", { token }),
        400,
        "parameter_invalid",
        "status"
      )
    })
  )
})
