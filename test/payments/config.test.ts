/**
 * `PAYMENT_PROCESSOR` (issue #19 item 3): the test processor is the default outside production; in
 * production the processor must be named, and start-up (reading the config) refuses to guess.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit } from "effect"
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
      crashAfterCall: false
    })
  })

  it("refuses a processor it does not know", () => {
    expect(Exit.isFailure(read({ PAYMENT_PROCESSOR: "paypal" }))).toBe(true)
    expect(Exit.isFailure(read({ PAYMENT_RECOVERY_AFTER_SECONDS: "-1" }))).toBe(true)
  })
})
