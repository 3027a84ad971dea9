/**
 * Checkouts over real HTTP (issue #20 items 1, 5, 6): every route, state and error — creation with
 * its price snapshot, reservation and payment intent; the bad inputs (one error body with `param`
 * naming the line, nothing reserved); confirm (paid → complete with its order, decline → 402 and
 * still open, 3-D Secure → processing), `paymentMethod` at creation, a zero total, manual capture;
 * expire; and who may see what (a shopper: their own only, others 404).
 */
import { layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { expect } from "vitest"
import { OrdersPort } from "../../src/orders/index.js"
import { createProduct, stockedProduct } from "../support/catalog.js"
import { createCheckout, getCheckout, type Json, stockOf } from "../support/checkout.js"
import { createCustomer, registeredShopper } from "../support/customers.js"
import { call, expectError, IdentityHttp } from "../support/identity.js"
import { ok, processorCalls, staffToken } from "../support/payments.js"

const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
const GHOST = { chk: "chk_01jd4x8m6ffq2b3n5r7t9v1w3y", prod: "prod_01jd4x8m6ffq2b3n5r7t9v1w3y" }

const orderOf = (orderId: string) => Effect.flatMap(OrdersPort, (orders) => orders.find(orderId))

const confirm = (token: string, id: string, json: Record<string, unknown> = {}) =>
  call("POST", `/v1/checkouts/${id}/confirm`, { token, json })

layer(IdentityHttp, { excludeTestServices: true, timeout: 120_000 })("checkouts over HTTP", (it) => {
  it.effect("create: 201 with the snapshot, totals, reservation and intent; GET shows the same", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const shirt = yield* stockedProduct(token, 20, { lowStockThreshold: 0 })
      const mug = yield* createProduct(token, { price: { amount: 500, currency: "USD" }, sku: null })
      const created = yield* createCheckout(
        token,
        [
          { productId: shirt.id, quantity: 2 },
          { productId: mug.id, quantity: 3 },
          { productId: shirt.id, quantity: 1 }
        ],
        {
          email: "Buyer@Example.com",
          shippingAddress: { line1: "1 Main St", city: "Springfield", country: "us", postalCode: "12345" },
          metadata: { cart: "c-1" }
        }
      )
      expect(created).toEqual({
        object: "checkout",
        id: expect.stringMatching(/^chk_[0-9a-z]{26}$/),
        status: "open",
        paymentStatus: "unpaid",
        customerId: null,
        email: "Buyer@Example.com",
        lineItems: [
          {
            productId: shirt.id,
            name: shirt.name,
            sku: shirt.sku,
            quantity: 2,
            unitAmount: 1999,
            amountTotal: 3998,
            currency: "USD"
          },
          {
            productId: mug.id,
            name: mug.name,
            sku: null,
            quantity: 3,
            unitAmount: 500,
            amountTotal: 1500,
            currency: "USD"
          },
          {
            productId: shirt.id,
            name: shirt.name,
            sku: shirt.sku,
            quantity: 1,
            unitAmount: 1999,
            amountTotal: 1999,
            currency: "USD"
          }
        ],
        currency: "USD",
        subtotal: 7497,
        total: 7497,
        shippingAddress: {
          label: null,
          line1: "1 Main St",
          city: "Springfield",
          state: null,
          postalCode: "12345",
          country: "US"
        },
        captureMethod: "automatic",
        paymentIntentId: expect.stringMatching(/^pi_/),
        clientSecret: expect.stringMatching(/^pi_[0-9a-z]{26}_secret_[0-9a-f]{32}$/),
        nextAction: null,
        orderId: null,
        expiresAt: expect.stringMatching(ISO_MS),
        metadata: { cart: "c-1" },
        createdAt: expect.stringMatching(ISO_MS),
        updatedAt: expect.stringMatching(ISO_MS),
        completedAt: null,
        expiredAt: null
      })
      // Default expiry: 30 minutes.
      expect(
        new Date(created.expiresAt).getTime() - new Date(created.createdAt).getTime()
      ).toBeGreaterThanOrEqual(1800 * 1000 - 1000)
      expect(yield* getCheckout(token, created.id)).toEqual({ ...created, clientSecret: null })
      expect(yield* stockOf(token, shirt.id)).toEqual({ stocked: 20, reserved: 3, available: 17 })
      const intent = yield* Effect.map(
        call("GET", `/v1/payment-intents/${created.paymentIntentId}`, { token }),
        ok(200)
      )
      expect(intent).toMatchObject({ amount: 7497, currency: "USD", status: "requires_payment_method" })
      expect(intent.metadata).toEqual({ checkoutId: created.id })
      // A custom expiry within 30 min – 24 h.
      const day = yield* createCheckout(token, [{ productId: mug.id, quantity: 1 }], {
        expiresInSeconds: 86_400
      })
      expect(new Date(day.expiresAt).getTime() - new Date(day.createdAt).getTime()).toBeGreaterThanOrEqual(
        86_400_000 - 1000
      )
    })
  )

  it.effect("bad input: the one error body naming the line; nothing reserved, nothing written", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 5)
      const other = yield* stockedProduct(token, 5)
      const draft = yield* createProduct(token, { status: "draft" })
      const archived = yield* createProduct(token)
      ok(200)(yield* call("DELETE", `/v1/products/${archived.id}`, { token }))
      const recurring = yield* createProduct(token, {
        price: { amount: 900, currency: "USD", type: "recurring", recurring: { interval: "month" } }
      })
      const euro = yield* createProduct(token, { price: { amount: 900, currency: "EUR" } })
      const line = (productId: string, quantity = 1) => ({ productId, quantity })
      const post = (json: Record<string, unknown>) => call("POST", "/v1/checkouts", { token, json })
      const guest = { email: "guest@example.com" }
      const cases: ReadonlyArray<[Record<string, unknown>, number, string, string]> = [
        [{ ...guest, lineItems: [] }, 400, "parameter_invalid", "lineItems"],
        [{ ...guest }, 400, "parameter_missing", "lineItems"],
        [{ ...guest, lineItems: [line(product.id, 0)] }, 400, "parameter_invalid", "lineItems[0].quantity"],
        [
          { ...guest, lineItems: [line(product.id), line(product.id, 1e9)] },
          400,
          "parameter_invalid",
          "lineItems[1].quantity"
        ],
        [{ ...guest, lineItems: [line(product.id, 1.5)] }, 400, "parameter_invalid", "lineItems[0].quantity"],
        [
          { ...guest, lineItems: [line(product.id), line(draft.id)] },
          400,
          "parameter_invalid",
          "lineItems[1].productId"
        ],
        [{ ...guest, lineItems: [line(archived.id)] }, 400, "parameter_invalid", "lineItems[0].productId"],
        [
          { ...guest, lineItems: [line(product.id), line(other.id), line(GHOST.prod)] },
          400,
          "resource_missing",
          "lineItems[2].productId"
        ],
        [{ ...guest, lineItems: [line("nonsense")] }, 400, "resource_missing", "lineItems[0].productId"],
        [{ ...guest, lineItems: [line(recurring.id)] }, 400, "parameter_invalid", "lineItems[0].productId"],
        [
          { ...guest, lineItems: [line(product.id), line(euro.id)] },
          400,
          "currency_mismatch",
          "lineItems[1].productId"
        ],
        [{ lineItems: [line(product.id)] }, 400, "parameter_missing", "email"],
        [{ email: "not an email", lineItems: [line(product.id)] }, 400, "parameter_invalid", "email"],
        [
          { customerId: "cus_01jd4x8m6ffq2b3n5r7t9v1w3y", lineItems: [line(product.id)] },
          400,
          "resource_missing",
          "customerId"
        ],
        [
          { ...guest, lineItems: [line(product.id)], expiresInSeconds: 60 },
          400,
          "parameter_invalid",
          "expiresInSeconds"
        ],
        [
          { ...guest, lineItems: [line(product.id)], expiresInSeconds: 86_401 },
          400,
          "parameter_invalid",
          "expiresInSeconds"
        ],
        [
          { ...guest, lineItems: [line(product.id)], paymentMethod: "pm_nope" },
          400,
          "parameter_invalid",
          "paymentMethod"
        ],
        [
          { ...guest, lineItems: [line(product.id)], captureMethod: "later" },
          400,
          "parameter_invalid",
          "captureMethod"
        ],
        // Summed per product: 3 + 3 of 5 is too many, though each line alone fits.
        [
          { ...guest, lineItems: [line(other.id), line(product.id, 3), line(product.id, 3)] },
          409,
          "insufficient_stock",
          "lineItems[1].quantity"
        ],
        [
          { ...guest, lineItems: [line(product.id), line(other.id, 6)] },
          409,
          "insufficient_stock",
          "lineItems[1].quantity"
        ]
      ]
      for (const [json, status, code, param] of cases) expectError(yield* post(json), status, code, param)
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 5, reserved: 0, available: 5 })
      expect(yield* stockOf(token, other.id)).toEqual({ stocked: 5, reserved: 0, available: 5 })
      // 101 lines is one too many.
      const many = Array.from({ length: 101 }, () => line(product.id))
      expectError(yield* post({ ...guest, lineItems: many }), 400, "parameter_invalid", "lineItems")
      // Unknown and malformed ids are 404.
      expectError(yield* call("GET", `/v1/checkouts/${GHOST.chk}`, { token }), 404, "resource_missing")
      expectError(yield* call("GET", "/v1/checkouts/nope", { token }), 404, "resource_missing")
      expectError(yield* confirm(token, GHOST.chk), 404, "resource_missing")
      expectError(
        yield* call("POST", `/v1/checkouts/${GHOST.chk}/expire`, { token }),
        404,
        "resource_missing"
      )
    })
  )

  it.effect("confirm: paid → complete with its order; again → the same order, no second charge", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 10)
      const customer = yield* createCustomer(token)
      const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 2 }], {
        customerId: customer.id,
        email: undefined
      })
      expect(checkout.email).toBe(customer.email)
      const done = ok(200)(yield* confirm(token, checkout.id, { paymentMethod: "pm_card_visa" }))
      expect(done).toMatchObject({
        status: "complete",
        paymentStatus: "paid",
        orderId: expect.stringMatching(/^ord_/),
        completedAt: expect.stringMatching(ISO_MS)
      })
      const again = ok(200)(yield* confirm(token, checkout.id, { paymentMethod: "pm_card_visa" }))
      expect(again.orderId).toBe(done.orderId)
      expect(yield* getCheckout(token, checkout.id)).toMatchObject({
        status: "complete",
        orderId: done.orderId
      })
      const calls = yield* processorCalls(checkout.paymentIntentId)
      expect(calls.map((c) => c.operation)).toEqual(["authorize"])
      const order = yield* orderOf(done.orderId)
      expect(Option.isSome(order)).toBe(true)
      expect(Option.getOrThrow(order)).toMatchObject({ id: done.orderId, total: 3998, currency: "USD" })
      // The hold moved to the order: still reserved, no longer the checkout's.
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 10, reserved: 2, available: 8 })
      // A complete checkout cannot expire.
      expectError(
        yield* call("POST", `/v1/checkouts/${checkout.id}/expire`, { token }),
        409,
        "checkout_not_open"
      )
    })
  )

  it.effect("decline: 402 card_error, the checkout stays open and is paid with another card", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 10)
      const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }])
      const declined = yield* confirm(token, checkout.id, {
        paymentMethod: "pm_card_visa_chargeDeclinedInsufficientFunds"
      })
      expectError(declined, 402, "card_declined")
      expect(declined.body.error.declineCode).toBe("insufficient_funds")
      expect(declined.body.error.paymentIntent.status).toBe("requires_payment_method")
      expect(yield* getCheckout(token, checkout.id)).toMatchObject({ status: "open", orderId: null })
      expect(yield* stockOf(token, product.id)).toMatchObject({ reserved: 1 })
      const missing = yield* confirm(token, checkout.id)
      expectError(missing, 400, "parameter_missing", "paymentMethod")
      // No body at all reads as `{}`: the same answer, not a complaint about the body.
      const noBody = yield* call("POST", `/v1/checkouts/${checkout.id}/confirm`, { token })
      expectError(noBody, 400, "parameter_missing", "paymentMethod")
      expectError(
        yield* confirm(token, checkout.id, { paymentMethod: "pm_nope" }),
        400,
        "parameter_invalid",
        "paymentMethod"
      )
      const paid = ok(200)(yield* confirm(token, checkout.id, { paymentMethod: "pm_card_mastercard" }))
      expect(paid.status).toBe("complete")
    })
  )

  it.effect("3-D Secure: processing with nextAction; approved → complete, failed → open again", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 10)
      for (const outcome of ["approve", "fail"] as const) {
        const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }])
        const pending = ok(200)(
          yield* confirm(token, checkout.id, { paymentMethod: "pm_card_authenticationRequired" })
        )
        expect(pending).toMatchObject({ status: "processing", orderId: null })
        expect(pending.nextAction).toMatchObject({ type: "use_test_authentication" })
        expect(yield* getCheckout(token, checkout.id)).toMatchObject({
          status: "processing",
          nextAction: pending.nextAction
        })
        // Confirming while the customer authenticates answers the checkout as it stands.
        expect(ok(200)(yield* confirm(token, checkout.id)).status).toBe("processing")
        const answered = yield* call(
          "POST",
          `/v1/test/payment-intents/${checkout.paymentIntentId}/authenticate`,
          {
            token,
            json: { outcome }
          }
        )
        expect(answered.status, answered.text).toBe(outcome === "approve" ? 200 : 402)
        const after = yield* confirm(
          token,
          checkout.id,
          outcome === "approve" ? {} : { paymentMethod: "pm_card_visa" }
        )
        expect(ok(200)(after)).toMatchObject({ status: "complete", orderId: expect.stringMatching(/^ord_/) })
      }
    })
  )

  it.effect("paymentMethod at creation: paid at once (201 complete); declined → 402, still open", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 10)
      const paid = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }], {
        paymentMethod: "pm_card_visa"
      })
      expect(paid).toMatchObject({
        status: "complete",
        paymentStatus: "paid",
        orderId: expect.stringMatching(/^ord_/)
      })
      expect(paid.clientSecret).toMatch(/_secret_/)
      const declined = yield* call("POST", "/v1/checkouts", {
        token,
        json: {
          email: "guest@example.com",
          lineItems: [{ productId: product.id, quantity: 1 }],
          paymentMethod: "pm_card_visa_chargeDeclined"
        }
      })
      expectError(declined, 402, "card_declined")
      const intentId: string = declined.body.error.paymentIntent.id
      const checkoutId: string = declined.body.error.paymentIntent.metadata.checkoutId
      expect(intentId).toMatch(/^pi_/)
      expect(yield* getCheckout(token, checkoutId)).toMatchObject({
        status: "open",
        paymentIntentId: intentId
      })
    })
  )

  it.effect("a zero total completes at creation without a processor", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const free = yield* createProduct(token, {
        price: { amount: 0, currency: "USD" },
        inventory: { stockedQuantity: 3 }
      })
      const checkout = yield* createCheckout(token, [{ productId: free.id, quantity: 2 }])
      expect(checkout).toMatchObject({
        status: "complete",
        paymentStatus: "no_payment_required",
        total: 0,
        paymentIntentId: null,
        clientSecret: null,
        orderId: expect.stringMatching(/^ord_/)
      })
      expect(Option.isSome(yield* orderOf(checkout.orderId))).toBe(true)
      expect(yield* stockOf(token, free.id)).toEqual({ stocked: 3, reserved: 2, available: 1 })
    })
  )

  it.effect("manual capture: complete once authorized; the order is placed with the authorization", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 10)
      const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }], {
        captureMethod: "manual"
      })
      const done = ok(200)(yield* confirm(token, checkout.id, { paymentMethod: "pm_card_visa" }))
      expect(done).toMatchObject({ status: "complete", captureMethod: "manual" })
      const intent = yield* Effect.map(
        call("GET", `/v1/payment-intents/${checkout.paymentIntentId}`, { token }),
        ok(200)
      )
      expect(intent.status).toBe("requires_capture")
    })
  )

  it.effect("expire: open → expired, stock released, intent canceled; then 409 checkout_not_open", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 4)
      const checkout = yield* createCheckout(token, [{ productId: product.id, quantity: 3 }])
      expect(yield* stockOf(token, product.id)).toMatchObject({ reserved: 3 })
      const expired = ok(200)(yield* call("POST", `/v1/checkouts/${checkout.id}/expire`, { token }))
      expect(expired).toMatchObject({
        status: "expired",
        expiredAt: expect.stringMatching(ISO_MS),
        orderId: null
      })
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 4, reserved: 0, available: 4 })
      const intent = yield* Effect.map(
        call("GET", `/v1/payment-intents/${checkout.paymentIntentId}`, { token }),
        ok(200)
      )
      expect(intent).toMatchObject({ status: "canceled", cancellationReason: "abandoned" })
      expectError(
        yield* call("POST", `/v1/checkouts/${checkout.id}/expire`, { token }),
        409,
        "checkout_not_open"
      )
      expectError(
        yield* confirm(token, checkout.id, { paymentMethod: "pm_card_visa" }),
        409,
        "checkout_not_open"
      )
      expect(yield* getCheckout(token, checkout.id)).toMatchObject({ status: "expired" })
      // A processing checkout (3-D Secure pending) expires too: its authorization attempt is voided.
      const pending = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }])
      expect(
        ok(200)(yield* confirm(token, pending.id, { paymentMethod: "pm_card_authenticationRequired" })).status
      ).toBe("processing")
      expect(ok(200)(yield* call("POST", `/v1/checkouts/${pending.id}/expire`, { token })).status).toBe(
        "expired"
      )
      const voided = yield* Effect.map(
        call("GET", `/v1/payment-intents/${pending.paymentIntentId}`, { token }),
        ok(200)
      )
      expect(voided.status).toBe("canceled")
      expect(yield* stockOf(token, product.id)).toEqual({ stocked: 4, reserved: 0, available: 4 })
    })
  )

  it.effect("shoppers buy for themselves and see only their own checkouts (others: 404)", () =>
    Effect.gen(function* () {
      const token = yield* staffToken
      const product = yield* stockedProduct(token, 10)
      const ann = yield* registeredShopper()
      const bob = yield* registeredShopper()
      const mine = yield* createCheckout(ann.accessToken, [{ productId: product.id, quantity: 1 }], {
        email: undefined
      })
      expect(mine).toMatchObject({ customerId: ann.customerId, email: ann.email })
      expect((yield* getCheckout(ann.accessToken, mine.id)).id).toBe(mine.id)
      expectError(
        yield* call("GET", `/v1/checkouts/${mine.id}`, { token: bob.accessToken }),
        404,
        "resource_missing"
      )
      expectError(
        yield* confirm(bob.accessToken, mine.id, { paymentMethod: "pm_card_visa" }),
        404,
        "resource_missing"
      )
      expectError(
        yield* call("POST", `/v1/checkouts/${mine.id}/expire`, { token: bob.accessToken }),
        404,
        "resource_missing"
      )
      // Buying for someone else is refused like an unknown customer.
      expectError(
        yield* call("POST", "/v1/checkouts", {
          token: bob.accessToken,
          json: { customerId: ann.customerId, lineItems: [{ productId: product.id, quantity: 1 }] }
        }),
        400,
        "resource_missing",
        "customerId"
      )
      // A guest checkout by staff is nobody's: shoppers do not see it.
      const guest = yield* createCheckout(token, [{ productId: product.id, quantity: 1 }], {
        email: ann.email
      })
      expect(guest.customerId).toBeNull()
      expectError(
        yield* call("GET", `/v1/checkouts/${guest.id}`, { token: ann.accessToken }),
        404,
        "resource_missing"
      )
      const paid = ok(200)(yield* confirm(ann.accessToken, mine.id, { paymentMethod: "pm_card_visa" }))
      expect(paid.status).toBe("complete")
      const anonymous = yield* call("GET", `/v1/checkouts/${mine.id}`)
      expect(anonymous.status).toBe(401)
      // Erasing the shopper keeps their checkout (ids, lines, totals) without who or where.
      const withAddress = yield* createCheckout(ann.accessToken, [{ productId: product.id, quantity: 1 }], {
        email: undefined,
        shippingAddress: { line1: "1 Main St", city: "Lyon", country: "FR" },
        metadata: { gift: "yes" }
      })
      expect((yield* call("DELETE", `/user/${ann.customerId}`, { token })).status).toBe(204)
      expect(yield* getCheckout(token, withAddress.id)).toMatchObject({
        customerId: ann.customerId,
        email: null,
        shippingAddress: null,
        metadata: {},
        total: withAddress.total
      })
    })
  )
})

export type { Json }
