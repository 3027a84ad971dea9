/** `BILLING_RETRY_SCHEDULE` and `BILLING_ON_RETRIES_EXHAUSTED` (issue #21 item 2): defaults, parsing, refusals. */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit } from "effect"
import { appConfig, parseRetrySchedule } from "../../src/config.js"

const read = (env: Record<string, string>) =>
  Effect.runSyncExit(
    Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env))))
  )

describe("billing settings", () => {
  it("default: four tries over 14 days, then cancel", () => {
    const exit = read({})
    expect(Exit.isSuccess(exit) && exit.value.billing).toEqual({
      retrySchedule: [86_400, 3 * 86_400, 7 * 86_400, 14 * 86_400],
      onRetriesExhausted: "cancel"
    })
  })

  it("reads a schedule and mark_unpaid", () => {
    const exit = read({ BILLING_RETRY_SCHEDULE: "30m, 2h,1d", BILLING_ON_RETRIES_EXHAUSTED: "mark_unpaid" })
    expect(Exit.isSuccess(exit) && exit.value.billing).toEqual({
      retrySchedule: [1800, 7200, 86_400],
      onRetriesExhausted: "mark_unpaid"
    })
  })

  it("refuses malformed, non-increasing or unknown settings", () => {
    for (const BILLING_RETRY_SCHEDULE of ["", "1d,1d", "3d,1d", "1w", "0d", "d", "1d;2d"])
      expect(Exit.isFailure(read({ BILLING_RETRY_SCHEDULE })), BILLING_RETRY_SCHEDULE).toBe(true)
    expect(Exit.isFailure(read({ BILLING_ON_RETRIES_EXHAUSTED: "pause" }))).toBe(true)
    expect(parseRetrySchedule("90s")).toEqual([90])
  })
})
