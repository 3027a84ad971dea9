/**
 * `PAYMENT_PROCESSOR` (issue #19 item 3): the test processor is the default outside production; in
 * production the processor must be named, and start-up (reading the config) refuses to guess.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Option, Redacted } from "effect"
import { appConfig } from "../../src/config.js"

const read = (env: Record<string, string>) =>
  Effect.runSyncExit(
    Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env))))
  )

describe("PAYMENT_PROCESSOR", () => {
  it("defaults to the test processor outside production", () => {
    for (const NODE_ENV of ["development", "test"]) {
      const exit = read({ NODE_ENV })
      expect(Exit.isSuccess(exit) && exit.value.payments).toEqual({
        processor: "test",
        recoveryAfterSeconds: 30,
        stripe: Option.none(),
        crashAfterCall: false
      })
    }
  })

  it("must be named in production: start-up refuses to guess", () => {
    const exit = read({ NODE_ENV: "production" })
    expect(Exit.isFailure(exit)).toBe(true)
    expect(String(Exit.isFailure(exit) ? exit.cause : "")).toContain(
      "PAYMENT_PROCESSOR must be set in production"
    )
    const named = read({
      NODE_ENV: "production",
      PAYMENT_PROCESSOR: "test",
      PAYMENT_RECOVERY_AFTER_SECONDS: "5"
    })
    expect(Exit.isSuccess(named) && named.value.payments).toEqual({
      processor: "test",
      recoveryAfterSeconds: 5,
      stripe: Option.none(),
      crashAfterCall: false
    })
  })

  it("refuses a processor it does not know", () => {
    expect(Exit.isFailure(read({ PAYMENT_PROCESSOR: "paypal" }))).toBe(true)
    expect(Exit.isFailure(read({ PAYMENT_RECOVERY_AFTER_SECONDS: "-1" }))).toBe(true)
  })

  it("stripe: refused without STRIPE_SECRET_KEY; its settings read with it", () => {
    const missing = read({ NODE_ENV: "production", PAYMENT_PROCESSOR: "stripe" })
    expect(Exit.isFailure(missing)).toBe(true)
    expect(String(Exit.isFailure(missing) ? missing.cause : "")).toContain(
      "STRIPE_SECRET_KEY must be set when PAYMENT_PROCESSOR=stripe"
    )
    expect(Exit.isFailure(read({ PAYMENT_PROCESSOR: "stripe", STRIPE_SECRET_KEY: "  " }))).toBe(true)
    expect(
      Exit.isFailure(
        read({
          PAYMENT_PROCESSOR: "stripe",
          STRIPE_SECRET_KEY: "sk_test_x",
          STRIPE_API_BASE: "localhost:12111"
        })
      )
    ).toBe(true)
    const exit = read({
      NODE_ENV: "production",
      PAYMENT_PROCESSOR: "stripe",
      STRIPE_SECRET_KEY: "sk_live_abc",
      STRIPE_WEBHOOK_SECRET: "whsec_abc",
      STRIPE_API_BASE: "http://127.0.0.1:12111"
    })
    if (!Exit.isSuccess(exit)) throw new Error(String(exit.cause))
    const stripe = Option.getOrThrow(exit.value.payments.stripe)
    expect(exit.value.payments.processor).toBe("stripe")
    expect(Redacted.value(stripe.secretKey)).toBe("sk_live_abc")
    expect(Option.map(stripe.webhookSecret, Redacted.value)).toEqual(Option.some("whsec_abc"))
    expect(Option.map(stripe.apiBase, (u) => u.href)).toEqual(Option.some("http://127.0.0.1:12111/"))
    // The key is redacted wherever the config is printed.
    expect(String(stripe.secretKey)).not.toContain("sk_live_abc")
    // Stripe's settings are read only for the Stripe processor.
    const test = read({ PAYMENT_PROCESSOR: "test", STRIPE_SECRET_KEY: "sk_test_x" })
    expect(Exit.isSuccess(test) && Option.isNone(test.value.payments.stripe)).toBe(true)
  })
})
