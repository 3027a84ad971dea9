/**
 * Helpers for the customers surface (`/user`) over HTTP: customers created by staff, registered
 * shoppers with their customer id, and unique tags so each test can isolate its own rows.
 */
import { Effect } from "effect"
import { expect } from "vitest"
import { adminLogin, call, registerShopper, uniqueEmail } from "./identity.js"

let counter = 0
/** A tag (or search string) no other test uses: `label-<pid>-<time>-<n>`, at most 64 characters. */
export const uniqueTag = (label = "t") => `${label}-${process.pid}-${Date.now().toString(36)}-${counter++}`

export interface CreatedCustomer {
  readonly id: string
  readonly email: string
  readonly firstName: string
  readonly lastName: string
  readonly createdAt: string
}

/** What a new customer record shows beside its id, email, names and times: no phone, addresses, tags or orders yet. */
export const NEW_RECORD = {
  phone: null,
  metadata: {},
  addresses: [],
  orderCount: 0,
  totalSpent: 0,
  tags: [],
  active: true
}

/** `POST /user` as staff; fails the test unless it answers 201. */
export const createCustomer = (token: string, fields: Record<string, unknown> = {}) =>
  Effect.map(
    call("POST", "/user", {
      token,
      json: { email: uniqueEmail("customer"), firstName: "Grace", lastName: "Hopper", ...fields }
    }),
    (r) => {
      expect(r.status, r.text).toBe(201)
      return r.body as CreatedCustomer
    }
  )

/** `GET /user/:id`, asserting 200. */
export const getCustomer = (token: string, id: string) =>
  Effect.map(call("GET", `/user/${id}`, { token }), (r) => {
    expect(r.status, r.text).toBe(200)
    // biome-ignore lint/suspicious/noExplicitAny: test bodies are inspected field by field
    return r.body as any
  })

/** `GET /user?…` with the given query parameters (strings as sent). */
export const listCustomers = (token: string, params: Record<string, string | number> = {}) => {
  const query = new URLSearchParams(
    Object.entries(params).map(([k, v]): [string, string] => [k, String(v)])
  ).toString()
  return call("GET", query === "" ? "/user" : `/user?${query}`, { token })
}

/** An admin's access token (a fresh admin each call). */
export const adminToken = Effect.map(adminLogin(), (a) => a.accessToken)

export interface Shopper {
  readonly accessToken: string
  readonly refreshToken: string
  readonly userId: string
  readonly email: string
  readonly customerId: string
}

/** Registers a shopper (`Ann Lee`) and reads their customer id from `GET /auth/me`. */
export const registeredShopper = (email = uniqueEmail()) =>
  Effect.gen(function* () {
    const registered = yield* registerShopper(email)
    const me = yield* call("GET", "/auth/me", { token: registered.accessToken })
    expect(me.status, me.text).toBe(200)
    expect(me.body.customerId).toMatch(/^cus_/)
    const shopper: Shopper = {
      accessToken: registered.accessToken,
      refreshToken: registered.refreshToken,
      userId: registered.userId,
      email,
      customerId: me.body.customerId
    }
    return shopper
  })
