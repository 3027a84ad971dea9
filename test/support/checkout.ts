/**
 * Helpers for the checkouts surface (`/v1/checkouts`) over HTTP: a checkout created through the
 * route, and the stock of a product as the catalogue shows it.
 */
import { Effect } from "effect"
import { expect } from "vitest"
import { getProduct } from "./catalog.js"
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
