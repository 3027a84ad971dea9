/**
 * Helpers for the products surface (`/v1/products`) over HTTP, and for calling the catalog's
 * reservation port as another context would (inside a transaction of the app's own layers).
 */
import { Effect } from "effect"
import { expect } from "vitest"
import { CatalogPort, type ReservationLine } from "../../src/catalog/index.js"
import { CommandRunner } from "../../src/kernel/CommandRunner.js"
import { call } from "./identity.js"

let counter = 0
/** A marker no other test uses (SKUs, names to search for). */
export const unique = (label = "p") => `${label}-${process.pid}-${Date.now().toString(36)}-${counter++}`

// biome-ignore lint/suspicious/noExplicitAny: test bodies are inspected field by field
export type Body = any

/** `POST /v1/products`, asserting 201; `name` and `price` default to a one-time USD price. */
export const createProduct = (token: string, json: Record<string, unknown> = {}) =>
  Effect.map(
    call("POST", "/v1/products", {
      token,
      json: { name: `Product ${unique()}`, price: { amount: 1999, currency: "USD" }, ...json }
    }),
    (r) => {
      expect(r.status, r.text).toBe(201)
      return r.body as Body
    }
  )

/** A tracked product with `stock` units and `lowStockThreshold` (default 5). */
export const stockedProduct = (token: string, stock: number, inventory: Record<string, unknown> = {}) =>
  createProduct(token, { inventory: { stockedQuantity: stock, ...inventory } })

export const getProduct = (token: string, id: string) =>
  Effect.map(call("GET", `/v1/products/${id}`, { token }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.body as Body
  })

export const query = (params: Record<string, string | number | undefined>) => {
  const text = new URLSearchParams(
    Object.entries(params).flatMap(
      ([k, v]): Array<[string, string]> => (v === undefined ? [] : [[k, String(v)]])
    )
  ).toString()
  return text === "" ? "" : `?${text}`
}

/** Reserves through the port, in a transaction of its own (as checkout's would be). */
export const reserve = (ownerId: string, lines: ReadonlyArray<ReservationLine>) =>
  Effect.gen(function* () {
    const port = yield* CatalogPort
    const runner = yield* CommandRunner
    return yield* runner.transact(port.reserve(ownerId, lines, { actor: { type: "system", id: "test" } }))
  })

export const release = (ownerId: string) =>
  Effect.flatMap(CatalogPort, (port) => port.release(ownerId, { actor: { type: "system", id: "test" } }))
