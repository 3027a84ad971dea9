/**
 * Helpers for the checkouts surface (`/v1/checkouts`) over HTTP: a checkout created through the
 * route, and the stock of a product as the catalogue shows it.
 */
import { Effect } from "effect"
import { expect } from "vitest"
import { getProduct, stockedProduct } from "./catalog.js"
import { call } from "./identity.js"

// biome-ignore lint/suspicious/noExplicitAny: reply bodies are inspected field by field
export type Json = any

/** `POST /v1/checkouts` as a guest by default, asserting 201. */
export const createCheckout = (
  token: string,
  lineItems: ReadonlyArray<{ readonly productId: string; readonly quantity: number }>,
  fields: Record<string, unknown> = {}
) =>
  Effect.map(
    call("POST", "/v1/checkouts", { token, json: { lineItems, email: "guest@example.com", ...fields } }),
    (r) => {
      expect(r.status, r.text).toBe(201)
      return r.body as Json
    }
  )

export const getCheckout = (token: string, id: string) =>
  Effect.map(call("GET", `/v1/checkouts/${id}`, { token }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.body as Json
  })

/** The product's inventory: stocked, reserved, available. */
export const stockOf = (token: string, productId: string) =>
  Effect.map(getProduct(token, productId), (p) => ({
    stocked: p.inventory.stockedQuantity as number,
    reserved: p.inventory.reservedQuantity as number,
    available: p.inventory.availableQuantity as number
  }))

/**
 * An order paid through a checkout: `quantity` units (default 2) of a product stocked with `stock`
 * (default 5) units at the default price (1,999), confirmed with `paymentMethod` (default
 * `pm_card_visa`); a guest order unless `customerId` is given. Answers the product and the order.
 */
export const checkoutOrder = (
  token: string,
  options: {
    readonly stock?: number
    readonly quantity?: number
    readonly customerId?: string
    readonly paymentMethod?: string
    readonly captureMethod?: "automatic" | "manual"
  } = {}
) =>
  Effect.gen(function* () {
    const product = yield* stockedProduct(token, options.stock ?? 5)
    const checkout = yield* createCheckout(
      token,
      [{ productId: product.id, quantity: options.quantity ?? 2 }],
      {
        ...(options.customerId === undefined ? {} : { customerId: options.customerId, email: undefined }),
        ...(options.captureMethod === undefined ? {} : { captureMethod: options.captureMethod })
      }
    )
    const confirmed = yield* call("POST", `/v1/checkouts/${checkout.id}/confirm`, {
      token,
      json: { paymentMethod: options.paymentMethod ?? "pm_card_visa" }
    })
    expect(confirmed.status, confirmed.text).toBe(200)
    expect(confirmed.body.status).toBe("complete")
    const order = yield* call("GET", `/v1/orders/${confirmed.body.orderId}`, { token })
    expect(order.status, order.text).toBe(200)
    return { product, checkout, order: order.body as Json }
  })
