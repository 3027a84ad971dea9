/**
 * Rate limiting: a reusable token-bucket `RateLimiter` service and an HTTP middleware that applies
 * named policies by route (design/API.md "Auth" → rate limits).
 *
 * - `RateLimiter.consume(policy, key, cost?)` takes tokens from the bucket `(policy.name, key)` and
 *   answers whether the request may proceed, with the numbers for the `RateLimit-*` headers. Time
 *   comes from Effect's `Clock`, so `TestClock` drives refills in tests. Other contexts call it
 *   directly (the identity context throttles login failures per account with it).
 * - `rateLimitMiddleware()` applies a route table (login, registration, refresh, token and password
 *   reset per client IP, `/v1/*` per credential by
 *   default, limits from `AppConfig.rateLimit`), sets `RateLimit-Limit`, `RateLimit-Remaining` and
 *   `RateLimit-Reset` on every response of a rate-limited route, and answers 429 `rate_limited`
 *   (`rate_limit_error`) with `Retry-After` when the bucket is empty.
 *
 * The buckets live in this process's memory: with several API instances each enforces its own
 * limits (a client spread over N instances gets up to N times the limit). Memory is bounded: each
 * policy keeps at most `maxBucketsPerPolicy` buckets, idle (refilled) buckets are dropped as traffic
 * flows, and past the bound the least recently used bucket goes first.
 */
import { HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Context, Duration, Effect, Layer, Option } from "effect"
import { CurrentRequestId } from "../base/RequestId.js"
import { sha256Hex } from "../base/Sha256.js"
import { AppConfig, type AppConfigShape } from "../config.js"
import { type ErrorInput, errorBody, typeForStatus } from "./errors.js"
import { routePath } from "./middleware.js"

/** How fast a bucket fills and how large it is. Buckets are shared by policies with the same name. */
export interface RateLimitPolicy {
  readonly name: string
  /** The bucket size: how many requests may be made at once; also `RateLimit-Limit`. */
  readonly capacity: number
  /** Tokens added back per second. */
  readonly refillPerSecond: number
}

/**
 * `limit` requests per `window`, refilled continuously; `burst` (default `limit`) is the bucket size.
 * `rateLimitPolicy("login-failures", { limit: 10, window: "15 minutes" })`.
 */
export const rateLimitPolicy = (
  name: string,
  options: { readonly limit: number; readonly window: Duration.DurationInput; readonly burst?: number }
): RateLimitPolicy => {
  const seconds = Duration.toMillis(options.window) / 1000
  const capacity = options.burst ?? options.limit
  if (!(options.limit > 0) || !(seconds > 0) || !(capacity >= 1)) {
    throw new RangeError(`rate limit policy ${name}: limit, window and burst must be positive`)
  }
  return { name, capacity, refillPerSecond: options.limit / seconds }
}

export interface RateLimitDecision {
  /** Whether the request may proceed (its tokens were taken). */
  readonly allowed: boolean
  /** The bucket size (`RateLimit-Limit`). */
  readonly limit: number
  /** Whole tokens left after this request (`RateLimit-Remaining`). */
  readonly remaining: number
  /** Seconds until the bucket is full again (`RateLimit-Reset`); 0 when it is full. */
  readonly resetSeconds: number
  /** When refused: seconds until enough tokens are back (`Retry-After`, ≥ 1); 0 when allowed. */
  readonly retryAfterSeconds: number
}

export interface RateLimiterShape {
  /**
   * Takes `cost` (default 1) tokens from the bucket of `(policy.name, key)` if it holds that many;
   * a refused request takes nothing. A cost above the policy's capacity is always refused.
   */
  readonly consume: (policy: RateLimitPolicy, key: string, cost?: number) => Effect.Effect<RateLimitDecision>
  /** The bucket's state without taking anything; `allowed` tells whether one more token is there. */
  readonly peek: (policy: RateLimitPolicy, key: string) => Effect.Effect<RateLimitDecision>
  /** Forgets the bucket (it starts full again), e.g. after a successful login. */
  readonly reset: (policy: RateLimitPolicy, key: string) => Effect.Effect<void>
}

export class RateLimiter extends Context.Tag("http/RateLimiter")<RateLimiter, RateLimiterShape>() {}

export interface RateLimiterOptions {
  /** Buckets kept per policy before the least recently used are dropped (default 100 000). */
  readonly maxBucketsPerPolicy?: number
}

interface Bucket {
  tokens: number
  updatedAt: number
}

/** Floating-point slack so a bucket refilled to 0.999999999… still counts as one token. */
const EPSILON = 1e-9

export const makeRateLimiter = (options: RateLimiterOptions = {}): Effect.Effect<RateLimiterShape> =>
  Effect.sync(() => {
    const maxBuckets = Math.max(1, options.maxBucketsPerPolicy ?? 100_000)
    // policy name → key → bucket; each inner map is in least-recently-used order (touch = re-insert).
    const policies = new Map<string, Map<string, Bucket>>()

    const bucketsOf = (policy: RateLimitPolicy) => {
      let buckets = policies.get(policy.name)
      if (!buckets) {
        buckets = new Map()
        policies.set(policy.name, buckets)
      }
      return buckets
    }

    const refilled = (policy: RateLimitPolicy, bucket: Bucket | undefined, now: number) => {
      if (!bucket) return policy.capacity
      const elapsed = Math.max(0, now - bucket.updatedAt) / 1000
      return Math.min(policy.capacity, bucket.tokens + elapsed * policy.refillPerSecond)
    }

    const decision = (policy: RateLimitPolicy, tokens: number, allowed: boolean, cost: number) => ({
      allowed,
      limit: policy.capacity,
      remaining: Math.max(0, Math.floor(tokens + EPSILON)),
      resetSeconds: Math.max(0, Math.ceil((policy.capacity - tokens - EPSILON) / policy.refillPerSecond)),
      retryAfterSeconds: allowed
        ? 0
        : Math.max(1, Math.ceil((Math.min(cost, policy.capacity) - tokens) / policy.refillPerSecond))
    })

    /** Drops up to two idle (full) buckets from the old end, and the oldest ones past the bound. */
    const evict = (policy: RateLimitPolicy, buckets: Map<string, Bucket>, now: number) => {
      let checked = 0
      for (const [key, bucket] of buckets) {
        if (checked++ >= 2) break
        if (refilled(policy, bucket, now) + EPSILON >= policy.capacity) buckets.delete(key)
      }
      if (buckets.size <= maxBuckets) return
      for (const key of buckets.keys()) {
        if (buckets.size <= maxBuckets) break
        buckets.delete(key)
      }
    }

    const take = (policy: RateLimitPolicy, key: string, cost: number, commit: boolean) =>
      Effect.clockWith((clock) =>
        Effect.sync((): RateLimitDecision => {
          const now = clock.unsafeCurrentTimeMillis()
          const buckets = bucketsOf(policy)
          const existing = buckets.get(key)
          const tokens = refilled(policy, existing, now)
          const allowed = cost <= policy.capacity && tokens + EPSILON >= cost
          if (!commit) return decision(policy, tokens, allowed, cost)
          const left = allowed ? Math.max(0, tokens - cost) : tokens
          if (existing) buckets.delete(key)
          buckets.set(key, { tokens: left, updatedAt: now })
          evict(policy, buckets, now)
          return decision(policy, left, allowed, cost)
        })
      )

    return {
      consume: (policy, key, cost = 1) => take(policy, key, Math.max(0, cost), true),
      peek: (policy, key) => take(policy, key, 1, false),
      reset: (policy, key) =>
        Effect.sync(() => {
          policies.get(policy.name)?.delete(key)
        })
    }
  })

/** One limiter per process; provide this same layer wherever `RateLimiter` is needed (memoized). */
export const RateLimiterLive = Layer.effect(RateLimiter, makeRateLimiter())

// --- Who is asking ----------------------------------------------------------------------------

const normalizeAddress = (address: string) => {
  const a = address.trim()
  return a.startsWith("::ffff:") && a.includes(".") ? a.slice("::ffff:".length) : a
}

/**
 * The client's IP address: the socket address, or with `trustProxyHops` = n reverse proxies in front
 * the n-th `X-Forwarded-For` entry from the right (each proxy appends the address it saw).
 */
export const clientIp = (request: HttpServerRequest.HttpServerRequest, trustProxyHops: number): string => {
  const socket = normalizeAddress(Option.getOrElse(request.remoteAddress, () => "unknown"))
  if (trustProxyHops <= 0) return socket
  const forwarded = (request.headers["x-forwarded-for"] ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "")
  if (forwarded.length === 0) return socket
  const candidate = forwarded[Math.max(0, forwarded.length - trustProxyHops)]
  return candidate === undefined ? socket : normalizeAddress(candidate)
}

/**
 * Who a request speaks for before authentication has run: `credential:<sha256 of the Authorization
 * header>` when there is one, `anonymous:<client ip>` otherwise. Rate limits and idempotency keys
 * are scoped by it (a credential is never kept in clear).
 */
export const requesterKey = (
  request: HttpServerRequest.HttpServerRequest,
  trustProxyHops: number
): string => {
  const authorization = request.headers.authorization?.trim() ?? ""
  return authorization === ""
    ? `anonymous:${clientIp(request, trustProxyHops)}`
    : `credential:${sha256Hex(authorization)}`
}

// --- HTTP middleware --------------------------------------------------------------------------

export type RateLimitKeyBy = "ip" | "credential"

export interface RateLimitRule {
  /** A path prefix: `/auth` matches `/auth` and `/auth/…`. The first matching rule applies. */
  readonly prefix: string
  /** `null`: not limited (a more specific prefix exempted from a broader rule after it). */
  readonly policy: RateLimitPolicy | null
  /** `ip`: per client address; `credential`: per Authorization header (per IP without one). */
  readonly keyBy: RateLimitKeyBy
}

/**
 * Not limited: payment processors' event deliveries (Stripe sends bursts and retries a refused event
 * for days; a signature, not a credential, authenticates them, so they would all share one address's
 * bucket).
 */
export const RATE_LIMIT_EXEMPT_PREFIXES = ["/v1/processor-events"] as const

/** The unauthenticated credential routes, limited per client IP (one shared bucket). */
export const AUTH_RATE_LIMITED_PREFIXES = [
  "/auth/login",
  "/auth/register",
  "/auth/refresh",
  "/auth/token",
  "/auth/password-reset"
] as const

/** The commerce surface, limited per credential. */
export const API_RATE_LIMITED_PREFIX = "/v1"

/** The service's route table, from configuration (the first matching rule applies). */
export const defaultRateLimitRules = (config: AppConfigShape): ReadonlyArray<RateLimitRule> => [
  ...RATE_LIMIT_EXEMPT_PREFIXES.map((prefix): RateLimitRule => ({ prefix, keyBy: "ip", policy: null })),
  ...AUTH_RATE_LIMITED_PREFIXES.map(
    (prefix): RateLimitRule => ({
      prefix,
      keyBy: "ip",
      policy: rateLimitPolicy("http.auth", { limit: config.rateLimit.authPerMinute, window: "1 minute" })
    })
  ),
  {
    prefix: API_RATE_LIMITED_PREFIX,
    keyBy: "credential",
    policy: rateLimitPolicy("http.api", {
      limit: config.rateLimit.apiPerSecond,
      window: "1 second",
      burst: Math.max(config.rateLimit.apiBurst, 1)
    })
  }
]

/** `path` as `routePath` gives it. */
const matches = (prefix: string, path: string) => {
  const lower = prefix.toLowerCase()
  const p = lower.endsWith("/") ? lower.slice(0, -1) : lower
  return path === p || path.startsWith(`${p}/`)
}

export const rateLimitHeaders = (d: RateLimitDecision): Record<string, string> => ({
  "ratelimit-limit": String(d.limit),
  "ratelimit-remaining": String(d.remaining),
  "ratelimit-reset": String(d.resetSeconds)
})

const encoder = new TextEncoder()

/**
 * A complete error response for middleware that runs inside `apiMiddleware` and answers without
 * calling the app (such responses bypass its normalizer): the one error body with the current
 * request id, and the `Request-Id` header.
 */
export const errorResponse = (
  status: number,
  input: ErrorInput,
  headers: Record<string, string> = {}
): Effect.Effect<HttpServerResponse.HttpServerResponse> =>
  Effect.map(CurrentRequestId, (requestId) => {
    const body = errorBody(typeForStatus(status), input)
    return HttpServerResponse.uint8Array(
      encoder.encode(JSON.stringify({ error: { ...body.error, ...(requestId ? { requestId } : {}) } })),
      {
        status,
        contentType: "application/json",
        headers: { ...headers, ...(requestId ? { "request-id": requestId } : {}) }
      }
    )
  })

export interface RateLimitMiddlewareOptions {
  /** The route table; default `defaultRateLimitRules(config)`. */
  readonly rules?: ReadonlyArray<RateLimitRule> | ((config: AppConfigShape) => ReadonlyArray<RateLimitRule>)
}

/**
 * Applies the first matching rule to each request (OPTIONS excepted). Runs inside `apiMiddleware`,
 * so a 429 is built complete here (error body with the request id, `Request-Id`), and the
 * `RateLimit-*` headers are added both in a pre-response handler (responses the app produced, which
 * the platform sends itself) and to whatever an inner middleware returns directly (a replay).
 * `AppConfig.rateLimit.enabled = false` turns it off.
 */
export const rateLimitMiddleware = (options: RateLimitMiddlewareOptions = {}) => {
  const cache = new WeakMap<AppConfigShape, ReadonlyArray<RateLimitRule>>()
  const rulesFor = (config: AppConfigShape) => {
    const rules = options.rules ?? defaultRateLimitRules
    if (typeof rules !== "function") return rules
    let cached = cache.get(config)
    if (!cached) {
      cached = rules(config)
      cache.set(config, cached)
    }
    return cached
  }
  const limited = <E, R>(
    app: HttpApp.Default<E, R>,
    config: AppConfigShape,
    request: HttpServerRequest.HttpServerRequest,
    keyBy: RateLimitKeyBy,
    policy: RateLimitPolicy
  ) =>
    Effect.gen(function* () {
      const limiter = yield* RateLimiter
      const key =
        keyBy === "ip"
          ? `ip:${clientIp(request, config.trustProxyHops)}`
          : requesterKey(request, config.trustProxyHops)
      const d = yield* limiter.consume(policy, key)
      const headers = rateLimitHeaders(d)
      if (!d.allowed) {
        const seconds = d.retryAfterSeconds
        return yield* errorResponse(
          429,
          {
            code: "rate_limited",
            message: `Too many requests; retry in ${seconds} second${seconds === 1 ? "" : "s"}`
          },
          { ...headers, "retry-after": String(seconds) }
        )
      }
      const withHeaders = (response: HttpServerResponse.HttpServerResponse) =>
        HttpServerResponse.setHeaders(response, headers)
      return yield* HttpApp.withPreResponseHandler(app, (_request, response) =>
        Effect.succeed(withHeaders(response))
      ).pipe(Effect.map(withHeaders))
    })

  return <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R | RateLimiter | AppConfig> =>
    // Every request passes here: the requests no rule limits (limits off, OPTIONS, unlimited paths)
    // go on at the cost of two service lookups, without a generator.
    Effect.flatMap(AppConfig, (config) => {
      if (!config.rateLimit.enabled) return app
      return Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
        if (request.method === "OPTIONS") return app
        const path = routePath(request.url)
        const rule = rulesFor(config).find((r) => matches(r.prefix, path))
        return rule === undefined || rule.policy === null
          ? app
          : limited(app, config, request, rule.keyBy, rule.policy)
      })
    })
}
