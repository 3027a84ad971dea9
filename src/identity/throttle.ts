/**
 * Login throttling (design/API.md "Auth" → rate limits): failed attempts are counted per account
 * and per client IP in 15-minute token buckets. Once either is spent, attempts are refused with
 * 429 `rate_limited` and `Retry-After` before any password is checked. A success clears the
 * account's count. Buckets live in process memory, like every rate limit here.
 */
import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import type { AppConfigShape } from "../config.js"
import { TooManyRequests } from "../http/errors.js"
import { type RateLimiterShape, type RateLimitPolicy, rateLimitPolicy } from "../http/RateLimit.js"
import { normalizeEmail } from "../kernel/Email.js"

const WINDOW = "15 minutes"

export interface LoginThrottle {
  /** Fails with 429 when the account or the address has no attempts left. */
  readonly check: (ip: string, account: string) => Effect.Effect<void, TooManyRequests>
  readonly failed: (ip: string, account: string) => Effect.Effect<void>
  readonly succeeded: (account: string) => Effect.Effect<void>
}

/** Sets `Retry-After` on the response the current request is answering with. */
export const withRetryAfter = (seconds: number) =>
  HttpApp.appendPreResponseHandler((_request, response) =>
    Effect.succeed(HttpServerResponse.setHeader(response, "retry-after", String(seconds)))
  )

/** 429 `rate_limited` with `Retry-After`. */
export const rateLimited = (seconds: number, what: string) =>
  Effect.zipRight(
    withRetryAfter(seconds),
    Effect.fail(
      TooManyRequests.of({
        code: "rate_limited",
        message: `Too many ${what}; retry in ${seconds} second${seconds === 1 ? "" : "s"}`
      })
    )
  )

export const makeLoginThrottle = (limiter: RateLimiterShape, config: AppConfigShape): LoginThrottle => {
  const perAccount: RateLimitPolicy = rateLimitPolicy("identity.login-failures.account", {
    limit: config.identity.loginMaxFailuresPerAccount,
    window: WINDOW
  })
  const perIp: RateLimitPolicy = rateLimitPolicy("identity.login-failures.ip", {
    limit: config.identity.loginMaxFailuresPerIp,
    window: WINDOW
  })
  const accountKey = (account: string) => normalizeEmail(account)
  return {
    check: (ip, account) =>
      Effect.flatMap(
        Effect.all([limiter.peek(perAccount, accountKey(account)), limiter.peek(perIp, ip)]),
        (decisions) => {
          const refused = decisions.filter((d) => !d.allowed)
          if (refused.length === 0) return Effect.void
          // Until every exhausted bucket has a token again.
          return rateLimited(Math.max(1, ...refused.map((d) => d.retryAfterSeconds)), "failed attempts")
        }
      ),
    failed: (ip, account) =>
      Effect.asVoid(
        Effect.all([limiter.consume(perAccount, accountKey(account)), limiter.consume(perIp, ip)])
      ),
    succeeded: (account) => limiter.reset(perAccount, accountKey(account))
  }
}
