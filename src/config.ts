/**
 * Every setting of the service, typed, read from the environment once at start-up.
 * The README's configuration table lists each variable with its default.
 */
import { Config, ConfigError, Context, Effect, Either, Layer, Option, Redacted } from "effect"

export type NodeEnv = "development" | "test" | "production"
export type Role = "api" | "worker" | "all"

/** Request limits applied by `src/http/RateLimit.ts` (in-process token buckets, per instance). */
export interface RateLimitSettings {
  /** `false` turns every HTTP rate limit off. */
  readonly enabled: boolean
  /** Requests per minute per client IP on login, register, refresh, token and password reset. */
  readonly authPerMinute: number
  /** Sustained requests per second per credential on `/v1/*`. */
  readonly apiPerSecond: number
  /** Requests a credential may send at once on `/v1/*` before the per-second rate applies. */
  readonly apiBurst: number
}

/** Identity and access (`src/identity`). */
export interface IdentitySettings {
  /** HS256 signing key for access tokens (≥ 32 bytes); generated into DATA_DIR when absent outside production. */
  readonly jwtSecret: Option.Option<Redacted.Redacted<string>>
  /** Refresh tokens (and so sessions) expire this long after they were last rotated. */
  readonly refreshTokenTtlDays: number
  /** How long a password-reset token stays usable. */
  readonly passwordResetTtlMinutes: number
  /** scrypt parameters for new password hashes (stored with each hash, so they can change later). */
  readonly scrypt: { readonly cost: number; readonly blockSize: number; readonly parallelism: number }
  /** Failed logins per account, then per client IP, allowed within 15 minutes before 429. */
  readonly loginMaxFailuresPerAccount: number
  readonly loginMaxFailuresPerIp: number
  /** The first admin, created at start-up when both are set (idempotent). */
  readonly adminEmail: Option.Option<string>
  readonly adminPassword: Option.Option<Redacted.Redacted<string>>
}

/** Notifications (`src/notifications`): providers per channel, sender, store identity in templates. */
export interface NotificationSettings {
  /** `smtp://user:pass@host:587` or `smtps://…:465`; email goes to the log provider when absent. */
  readonly smtpUrl: Option.Option<Redacted.Redacted<string>>
  /** The From of every email, e.g. `Shop <no-reply@shop.example>`. */
  readonly emailFrom: string
  /** Base URL of a Twilio-Messages-shaped API (`https://api.twilio.com`); SMS is logged when absent. */
  readonly smsProviderUrl: Option.Option<string>
  /** Basic-auth user (Twilio Account SID) and password (auth token); the SID is also in the path. */
  readonly smsAccountSid: string
  readonly smsAuthToken: Option.Option<Redacted.Redacted<string>>
  /** Sender number (E.164) or messaging service id. */
  readonly smsFrom: string
  /** Base URL of an FCM-HTTP-v1-shaped API (`https://fcm.googleapis.com`); push is logged when absent. */
  readonly pushProviderUrl: Option.Option<string>
  readonly pushProjectId: string
  /** OAuth2 bearer token sent to the push provider. */
  readonly pushAccessToken: Option.Option<Redacted.Redacted<string>>
  /** One provider call may take this long before it counts as a (transient) failure. */
  readonly sendTimeoutSeconds: number
  /** Notifications one worker process sends at once. */
  readonly senderConcurrency: number
  /** Shown in the built-in templates. */
  readonly storeName: string
  /** The store front's base URL, for links in the built-in templates (password reset, orders). */
  readonly storeUrl: string
}

/** Webhooks (`src/webhooks`): delivery workers and the SSRF guard. */
export interface WebhookSettings {
  /** Lifts the SSRF guard (loopback, private and metadata targets): local receivers and tests only. */
  readonly allowPrivate: boolean
  /** Also told when an endpoint is disabled (besides the admin who created it). */
  readonly alertEmail: Option.Option<string>
  /** Attempts one worker process makes at once. */
  readonly concurrency: number
  /** Of those, at most this many to one endpoint, so a hung endpoint never holds up the others. */
  readonly endpointConcurrency: number
}

/** Payments (`src/payments`): which processor moves the money, and when a stalled call is retried. */
export interface PaymentSettings {
  /**
   * `PAYMENT_PROCESSOR`: `test` (deterministic, no network) is the default outside production; with
   * `NODE_ENV=production` it must be named, and start-up refuses to guess.
   */
  readonly processor: PaymentProcessorName
  /**
   * A processor call whose outcome was not recorded this long after it started (the process died
   * between the call and the record) is made again, with the same idempotency key, by the worker.
   */
  readonly recoveryAfterSeconds: number
  /** With `PAYMENT_PROCESSOR=stripe` (start-up refuses it without `STRIPE_SECRET_KEY`); None otherwise. */
  readonly stripe: Option.Option<StripeSettings>
  /**
   * `PAYMENTS_CRASH_AFTER_CALL=1`, for the crash test only: the process SIGKILLs itself right after
   * the processor answered a request's call, before the outcome is recorded. Honoured only with the
   * test processor and outside production.
   */
  readonly crashAfterCall: boolean
}

/** The Stripe adapter (`src/payments/stripeProcessor.ts`). */
export interface StripeSettings {
  /** `STRIPE_SECRET_KEY`: `sk_test_…` or `sk_live_…` (or a restricted `rk_…` key). */
  readonly secretKey: Redacted.Redacted<string>
  /**
   * `STRIPE_WEBHOOK_SECRET` (`whsec_…`): verifies `POST /v1/processor-events/stripe`; without it
   * that route answers 404 and 3-D Secure intents are completed only by asking again.
   */
  readonly webhookSecret: Option.Option<Redacted.Redacted<string>>
  /** `STRIPE_API_BASE`: another base URL than `https://api.stripe.com` (a local fake, in tests). */
  readonly apiBase: Option.Option<URL>
}

/** Billing (`src/billing`): dunning of failed renewals (research §4.5). */
export interface BillingSettings {
  /**
   * `BILLING_RETRY_SCHEDULE` (default `1d,3d,7d,14d`): when a failed renewal is tried again, each an
   * offset from the first failure (`s`, `m`, `h`, `d`); the number of entries is the number of retries.
   */
  readonly retrySchedule: ReadonlyArray<number>
  /** `BILLING_ON_RETRIES_EXHAUSTED`: `cancel` (default) or `mark_unpaid` once every retry failed. */
  readonly onRetriesExhausted: "cancel" | "mark_unpaid"
}

const DURATION_UNITS: Readonly<Record<string, number>> = { s: 1, m: 60, h: 3600, d: 86_400 }

/** `1d,3d,7d,14d` → offsets in seconds (increasing), or undefined when malformed. */
export const parseRetrySchedule = (text: string): ReadonlyArray<number> | undefined => {
  const parts = text.split(",").map((p) => p.trim())
  const seconds: Array<number> = []
  for (const part of parts) {
    const m = /^([0-9]{1,6})([smhd])$/.exec(part)
    const unit = m?.[2] === undefined ? undefined : DURATION_UNITS[m[2]]
    if (m === null || unit === undefined) return undefined
    const value = Number(m[1]) * unit
    if (value <= 0 || (seconds.length > 0 && value <= (seconds[seconds.length - 1] ?? 0))) return undefined
    seconds.push(value)
  }
  return seconds.length > 0 && seconds.length <= 20 ? seconds : undefined
}

export const PAYMENT_PROCESSORS = ["test", "stripe"] as const
export type PaymentProcessorName = (typeof PAYMENT_PROCESSORS)[number]

export interface AppConfigShape {
  readonly nodeEnv: NodeEnv
  /** `postgres://…` — when absent the service runs embedded PostgreSQL (PGlite). */
  readonly databaseUrl: Option.Option<Redacted.Redacted<string>>
  readonly databaseMaxConnections: number
  /** Named (prepared) statements on a `DATABASE_URL` server (db/PreparedStatements.ts); default true. */
  readonly databasePreparedStatements: boolean
  /**
   * How long start-up waits for an unreachable `DATABASE_URL` server (retrying with back-off) before
   * giving up; 0 = try once.
   */
  readonly databaseConnectTimeoutSeconds: number
  /** Where generated local secrets and the embedded database live. */
  readonly dataDir: string
  /** Embedded database directory, or `memory://` for a throw-away database. */
  readonly pgliteDataDir: string
  /** Base64 (or hex) 32-byte master key that wraps per-subject data keys. */
  readonly dataEncryptionKey: Option.Option<Redacted.Redacted<string>>
  /** Identifies this process in leases (`owner`). */
  readonly instanceId: string
  /** `api` serves HTTP only, `worker` runs processors only, `all` does both. */
  readonly role: Role
  readonly host: string
  readonly port: number
  /**
   * Reverse proxies in front of the service that append to `X-Forwarded-For`; the client address is
   * taken that many entries from the right. 0 = use the socket address (no proxy trusted).
   */
  readonly trustProxyHops: number
  readonly rateLimit: RateLimitSettings
  /** Seconds to finish in-flight requests and batches on SIGTERM/SIGINT before exiting. */
  readonly shutdownTimeoutSeconds: number
  /** OTLP/HTTP base URL (`…:4318`); tracing is off when absent. */
  readonly otelExporterOtlpEndpoint: Option.Option<string>
  readonly otelServiceName: string
  /** When set, `/metrics` requires `Authorization: Bearer <token>`; open otherwise. */
  readonly metricsToken: Option.Option<Redacted.Redacted<string>>
  readonly identity: IdentitySettings
  readonly notifications: NotificationSettings
  readonly webhooks: WebhookSettings
  readonly payments: PaymentSettings
  readonly billing: BillingSettings
}

export class AppConfig extends Context.Tag("AppConfig")<AppConfig, AppConfigShape>() {}

const nodeEnv = Config.literal(
  "development",
  "test",
  "production"
)("NODE_ENV").pipe(Config.withDefault("development" as const))

const positiveInt = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.withDefault(fallback),
    Config.validate({ message: "must be between 1 and 1000000", validation: (n) => n >= 1 && n <= 1_000_000 })
  )

export const appConfig: Config.Config<AppConfigShape> = Config.all({
  nodeEnv,
  databaseUrl: Config.option(Config.redacted("DATABASE_URL")),
  databaseMaxConnections: Config.integer("DATABASE_MAX_CONNECTIONS").pipe(
    Config.withDefault(10),
    Config.validate({ message: "must be between 1 and 1000", validation: (n) => n >= 1 && n <= 1000 })
  ),
  databasePreparedStatements: Config.boolean("DATABASE_PREPARED_STATEMENTS").pipe(Config.withDefault(true)),
  databaseConnectTimeoutSeconds: Config.integer("DATABASE_CONNECT_TIMEOUT_SECONDS").pipe(
    Config.withDefault(60),
    Config.validate({ message: "must be between 0 and 3600", validation: (n) => n >= 0 && n <= 3600 })
  ),
  dataDir: Config.string("DATA_DIR").pipe(Config.withDefault(".data")),
  pgliteDataDir: Config.option(Config.string("PGLITE_DATA_DIR")),
  dataEncryptionKey: Config.option(Config.redacted("DATA_ENCRYPTION_KEY")),
  instanceId: Config.option(Config.string("INSTANCE_ID")),
  role: Config.literal("api", "worker", "all")("ROLE").pipe(Config.withDefault("all" as const)),
  host: Config.string("HOST").pipe(Config.withDefault("0.0.0.0")),
  port: Config.port("PORT").pipe(Config.withDefault(3000)),
  trustProxyHops: Config.integer("TRUST_PROXY_HOPS").pipe(
    Config.withDefault(0),
    Config.validate({ message: "must be between 0 and 10", validation: (n) => n >= 0 && n <= 10 })
  ),
  rateLimit: Config.all({
    enabled: Config.boolean("RATE_LIMIT_ENABLED").pipe(Config.withDefault(true)),
    authPerMinute: positiveInt("RATE_LIMIT_AUTH_PER_MINUTE", 30),
    apiPerSecond: positiveInt("RATE_LIMIT_API_PER_SECOND", 25),
    apiBurst: positiveInt("RATE_LIMIT_API_BURST", 50)
  }),
  shutdownTimeoutSeconds: Config.integer("SHUTDOWN_TIMEOUT_SECONDS").pipe(
    Config.withDefault(10),
    Config.validate({ message: "must be between 1 and 300", validation: (n) => n >= 1 && n <= 300 })
  ),
  otelExporterOtlpEndpoint: Config.option(Config.string("OTEL_EXPORTER_OTLP_ENDPOINT")),
  otelServiceName: Config.string("OTEL_SERVICE_NAME").pipe(Config.withDefault("commerce-platform")),
  metricsToken: Config.option(Config.redacted("METRICS_TOKEN")),
  identity: Config.all({
    jwtSecret: Config.option(Config.redacted("JWT_SECRET")),
    refreshTokenTtlDays: Config.integer("REFRESH_TOKEN_TTL_DAYS").pipe(
      Config.withDefault(30),
      Config.validate({ message: "must be between 1 and 365", validation: (n) => n >= 1 && n <= 365 })
    ),
    passwordResetTtlMinutes: Config.integer("PASSWORD_RESET_TTL_MINUTES").pipe(
      Config.withDefault(60),
      Config.validate({ message: "must be between 5 and 1440", validation: (n) => n >= 5 && n <= 1440 })
    ),
    scrypt: Config.all({
      cost: Config.integer("PASSWORD_SCRYPT_COST").pipe(
        Config.withDefault(32_768),
        Config.validate({
          message: "must be a power of two between 1024 and 1048576",
          validation: (n) => n >= 1024 && n <= 1_048_576 && (n & (n - 1)) === 0
        })
      ),
      blockSize: Config.integer("PASSWORD_SCRYPT_BLOCK_SIZE").pipe(
        Config.withDefault(8),
        Config.validate({ message: "must be between 1 and 32", validation: (n) => n >= 1 && n <= 32 })
      ),
      parallelism: Config.integer("PASSWORD_SCRYPT_PARALLELISM").pipe(
        Config.withDefault(3),
        Config.validate({ message: "must be between 1 and 16", validation: (n) => n >= 1 && n <= 16 })
      )
    }),
    loginMaxFailuresPerAccount: positiveInt("LOGIN_MAX_FAILURES_PER_ACCOUNT", 10),
    loginMaxFailuresPerIp: positiveInt("LOGIN_MAX_FAILURES_PER_IP", 100),
    adminEmail: Config.option(Config.string("ADMIN_EMAIL")),
    adminPassword: Config.option(Config.redacted("ADMIN_PASSWORD"))
  }),
  notifications: Config.all({
    smtpUrl: Config.option(Config.redacted("SMTP_URL")),
    emailFrom: Config.string("EMAIL_FROM").pipe(Config.withDefault("commerce-platform <no-reply@localhost>")),
    smsProviderUrl: Config.option(Config.string("SMS_PROVIDER_URL")),
    smsAccountSid: Config.string("SMS_ACCOUNT_SID").pipe(Config.withDefault("")),
    smsAuthToken: Config.option(Config.redacted("SMS_AUTH_TOKEN")),
    smsFrom: Config.string("SMS_FROM").pipe(Config.withDefault("")),
    pushProviderUrl: Config.option(Config.string("PUSH_PROVIDER_URL")),
    pushProjectId: Config.string("PUSH_PROJECT_ID").pipe(Config.withDefault("")),
    pushAccessToken: Config.option(Config.redacted("PUSH_ACCESS_TOKEN")),
    sendTimeoutSeconds: Config.integer("NOTIFICATION_SEND_TIMEOUT_SECONDS").pipe(
      Config.withDefault(15),
      Config.validate({ message: "must be between 1 and 120", validation: (n) => n >= 1 && n <= 120 })
    ),
    senderConcurrency: Config.integer("NOTIFICATION_CONCURRENCY").pipe(
      Config.withDefault(16),
      Config.validate({ message: "must be between 1 and 256", validation: (n) => n >= 1 && n <= 256 })
    ),
    storeName: Config.string("STORE_NAME").pipe(Config.withDefault("Our store")),
    storeUrl: Config.string("STORE_URL").pipe(Config.withDefault("http://localhost:3000"))
  }),
  webhooks: Config.all({
    allowPrivate: Config.boolean("WEBHOOK_ALLOW_PRIVATE").pipe(Config.withDefault(false)),
    alertEmail: Config.option(Config.string("WEBHOOK_ALERT_EMAIL")),
    concurrency: Config.integer("WEBHOOK_CONCURRENCY").pipe(
      Config.withDefault(64),
      Config.validate({ message: "must be between 1 and 1024", validation: (n) => n >= 1 && n <= 1024 })
    ),
    endpointConcurrency: Config.integer("WEBHOOK_ENDPOINT_CONCURRENCY").pipe(
      Config.withDefault(16),
      Config.validate({ message: "must be between 1 and 256", validation: (n) => n >= 1 && n <= 256 })
    )
  }),
  payments: Config.all({
    processor: Config.option(Config.literal(...PAYMENT_PROCESSORS)("PAYMENT_PROCESSOR")),
    recoveryAfterSeconds: Config.integer("PAYMENT_RECOVERY_AFTER_SECONDS").pipe(
      Config.withDefault(30),
      Config.validate({ message: "must be between 0 and 3600", validation: (n) => n >= 0 && n <= 3600 })
    ),
    stripeSecretKey: Config.option(Config.redacted("STRIPE_SECRET_KEY")),
    stripeWebhookSecret: Config.option(Config.redacted("STRIPE_WEBHOOK_SECRET")),
    stripeApiBase: Config.option(
      Config.string("STRIPE_API_BASE").pipe(
        Config.validate({
          message: "must be an http(s) URL such as https://api.stripe.com",
          validation: (url) => url.trim() === "" || /^https?:\/\/[^/\s]+\/?$/.test(url.trim())
        })
      )
    ),
    crashAfterCall: Config.boolean("PAYMENTS_CRASH_AFTER_CALL").pipe(Config.withDefault(false))
  }),
  billing: Config.all({
    retrySchedule: Config.string("BILLING_RETRY_SCHEDULE").pipe(
      Config.withDefault("1d,3d,7d,14d"),
      Config.mapOrFail((text) => {
        const schedule = parseRetrySchedule(text)
        return schedule === undefined
          ? Either.left(
              ConfigError.InvalidData(
                ["BILLING_RETRY_SCHEDULE"],
                "must be increasing offsets such as 1d,3d,7d,14d (units s, m, h, d)"
              )
            )
          : Either.right(schedule)
      })
    ),
    onRetriesExhausted: Config.literal(
      "cancel",
      "mark_unpaid"
    )("BILLING_ON_RETRIES_EXHAUSTED").pipe(Config.withDefault("cancel" as const))
  })
}).pipe(
  // Money must never move through a processor nobody chose: production names it explicitly.
  Config.mapOrFail((c) => {
    const { stripeSecretKey, stripeWebhookSecret, stripeApiBase, ...payments } = c.payments
    const nonEmpty = (value: Option.Option<Redacted.Redacted<string>>) =>
      Option.filter(value, (v) => Redacted.value(v).trim() !== "")
    const settings = (
      processor: PaymentProcessorName
    ): Either.Either<PaymentSettings, ConfigError.ConfigError> => {
      if (processor !== "stripe") return Either.right({ ...payments, processor, stripe: Option.none() })
      return Option.match(nonEmpty(stripeSecretKey), {
        onNone: () =>
          Either.left(
            ConfigError.MissingData(
              ["STRIPE_SECRET_KEY"],
              "STRIPE_SECRET_KEY must be set when PAYMENT_PROCESSOR=stripe (sk_test_… or sk_live_…)"
            )
          ),
        onSome: (secretKey) =>
          Either.right({
            ...payments,
            processor,
            stripe: Option.some({
              secretKey,
              webhookSecret: nonEmpty(stripeWebhookSecret),
              apiBase: Option.map(
                Option.filter(stripeApiBase, (url) => url.trim() !== ""),
                (url) => new URL(url.trim())
              )
            })
          })
      })
    }
    return Option.match(payments.processor, {
      onSome: (processor) => Either.map(settings(processor), (p) => ({ ...c, payments: p })),
      onNone: () =>
        c.nodeEnv === "production"
          ? Either.left(
              ConfigError.MissingData(
                ["PAYMENT_PROCESSOR"],
                `PAYMENT_PROCESSOR must be set in production (one of ${PAYMENT_PROCESSORS.join(", ")})`
              )
            )
          : Either.map(settings("test"), (p) => ({ ...c, payments: p }))
    })
  }),
  Config.map((c) => ({
    ...c,
    databaseUrl: Option.filter(c.databaseUrl, (url) => Redacted.value(url).trim() !== ""),
    otelExporterOtlpEndpoint: Option.filter(c.otelExporterOtlpEndpoint, (url) => url.trim() !== ""),
    metricsToken: Option.filter(c.metricsToken, (token) => Redacted.value(token).trim() !== ""),
    identity: {
      ...c.identity,
      jwtSecret: Option.filter(c.identity.jwtSecret, (secret) => Redacted.value(secret).trim() !== ""),
      adminEmail: Option.filter(c.identity.adminEmail, (email) => email.trim() !== ""),
      adminPassword: Option.filter(c.identity.adminPassword, (password) => Redacted.value(password) !== "")
    },
    notifications: {
      ...c.notifications,
      smtpUrl: Option.filter(c.notifications.smtpUrl, (url) => Redacted.value(url).trim() !== ""),
      smsProviderUrl: Option.filter(c.notifications.smsProviderUrl, (url) => url.trim() !== ""),
      pushProviderUrl: Option.filter(c.notifications.pushProviderUrl, (url) => url.trim() !== ""),
      storeUrl: c.notifications.storeUrl.replace(/\/+$/, "")
    },
    webhooks: {
      ...c.webhooks,
      alertEmail: Option.filter(c.webhooks.alertEmail, (email) => email.trim() !== "")
    },
    pgliteDataDir: Option.getOrElse(c.pgliteDataDir, () => `${c.dataDir}/pglite`),
    instanceId: Option.getOrElse(
      c.instanceId,
      () => `${process.pid}-${Math.random().toString(36).slice(2, 8)}`
    )
  }))
)

export const AppConfigLive = Layer.effect(AppConfig, appConfig)

/** A config for tests and scripts, without reading the environment. */
export const makeAppConfig = (overrides: Partial<AppConfigShape> = {}): AppConfigShape => ({
  nodeEnv: "test",
  databaseUrl: Option.none(),
  databaseMaxConnections: 10,
  databasePreparedStatements: true,
  databaseConnectTimeoutSeconds: 60,
  dataDir: ".data",
  pgliteDataDir: "memory://",
  dataEncryptionKey: Option.none(),
  instanceId: `test-${process.pid}-${Math.random().toString(36).slice(2, 8)}`,
  role: "all",
  host: "127.0.0.1",
  port: 0,
  trustProxyHops: 0,
  // Off in tests and scripts: suites sending many requests from one address would trip the limits.
  rateLimit: { enabled: false, authPerMinute: 30, apiPerSecond: 25, apiBurst: 50 },
  shutdownTimeoutSeconds: 10,
  otelExporterOtlpEndpoint: Option.none(),
  otelServiceName: "commerce-platform",
  metricsToken: Option.none(),
  identity: {
    jwtSecret: Option.none(),
    refreshTokenTtlDays: 30,
    passwordResetTtlMinutes: 60,
    // Cheap hashes in tests: the parameters travel with each hash, production uses the defaults.
    scrypt: { cost: 1024, blockSize: 8, parallelism: 1 },
    loginMaxFailuresPerAccount: 10,
    loginMaxFailuresPerIp: 100,
    adminEmail: Option.none(),
    adminPassword: Option.none()
  },
  notifications: {
    smtpUrl: Option.none(),
    emailFrom: "commerce-platform <no-reply@localhost>",
    smsProviderUrl: Option.none(),
    smsAccountSid: "",
    smsAuthToken: Option.none(),
    smsFrom: "",
    pushProviderUrl: Option.none(),
    pushProjectId: "",
    pushAccessToken: Option.none(),
    sendTimeoutSeconds: 15,
    senderConcurrency: 16,
    storeName: "Our store",
    storeUrl: "http://localhost:3000"
  },
  // Tests and scripts deliver to receivers on 127.0.0.1.
  webhooks: { allowPrivate: true, alertEmail: Option.none(), concurrency: 64, endpointConcurrency: 16 },
  payments: { processor: "test", recoveryAfterSeconds: 30, stripe: Option.none(), crashAfterCall: false },
  billing: { retrySchedule: [86_400, 3 * 86_400, 7 * 86_400, 14 * 86_400], onRetriesExhausted: "cancel" },
  ...overrides
})

export const isMemoryDataDir = (dir: string): boolean => dir.startsWith("memory://")

export const currentConfig = Effect.map(AppConfig, (c) => c)
