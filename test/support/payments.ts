/**
 * Helpers for the payments surface over HTTP: an admin token, intents and payments created through
 * the routes, and the test processor's record of its calls.
 */
import { Effect, Option } from "effect"
import { expect } from "vitest"
import { PaymentProcessor, type ProcessorCall } from "../../src/payments/processor.js"
import { adminLogin, call, type Reply } from "./identity.js"

// biome-ignore lint/suspicious/noExplicitAny: reply bodies are inspected field by field
export type Json = any

/** A fresh admin's access token. */
export const staffToken = Effect.map(adminLogin(), (a) => a.accessToken)

export const ok =
  (status: number) =>
  (r: Reply): Json => {
    expect(r.status, r.text).toBe(status)
    return r.body
  }

export const createIntent = (token: string, fields: Record<string, unknown> = {}) =>
  Effect.map(
    call("POST", "/v1/payment-intents", { token, json: { amount: 2000, currency: "usd", ...fields } }),
    ok(201)
  )

export const createPayment = (token: string, fields: Record<string, unknown> = {}) =>
  Effect.map(
    call("POST", "/v1/payments", {
      token,
      json: { amount: 2000, currency: "USD", paymentMethod: "pm_card_visa", ...fields }
    }),
    ok(201)
  )

/** The test processor's calls (by idempotency key), optionally only those whose key starts with `prefix`. */
export const processorCalls = (prefix = "") =>
  Effect.map(
    PaymentProcessor,
    (processor): ReadonlyArray<ProcessorCall> =>
      Option.match(processor.ledger, {
        onNone: () => [],
        onSome: (ledger) => ledger.calls().filter((c) => c.idempotencyKey.startsWith(prefix))
      })
  )
