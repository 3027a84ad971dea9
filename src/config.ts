/**
 * Every setting of the service, typed, read from the environment once at start-up.
 * The README's configuration table lists each variable with its default.
 */
import { Config, Context, Effect, Layer, Option, Redacted } from "effect"

export type NodeEnv = "development" | "test" | "production"
export type Role = "api" | "worker" | "all"

export interface AppConfigShape {
  readonly nodeEnv: NodeEnv
  /** `postgres://…` — when absent the service runs embedded PostgreSQL (PGlite). */
  readonly databaseUrl: Option.Option<Redacted.Redacted<string>>
  readonly databaseMaxConnections: number
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
  /** Seconds to finish in-flight requests and batches on SIGTERM/SIGINT before exiting. */
  readonly shutdownTimeoutSeconds: number
  /** OTLP/HTTP base URL (`…:4318`); tracing is off when absent. */
  readonly otelExporterOtlpEndpoint: Option.Option<string>
  readonly otelServiceName: string
  /** When set, `/metrics` requires `Authorization: Bearer <token>`; open otherwise. */
  readonly metricsToken: Option.Option<Redacted.Redacted<string>>
}

export class AppConfig extends Context.Tag("AppConfig")<AppConfig, AppConfigShape>() {}

const nodeEnv = Config.literal(
  "development",
  "test",
  "production"
)("NODE_ENV").pipe(Config.withDefault("development" as const))

export const appConfig: Config.Config<AppConfigShape> = Config.all({
  nodeEnv,
  databaseUrl: Config.option(Config.redacted("DATABASE_URL")),
  databaseMaxConnections: Config.integer("DATABASE_MAX_CONNECTIONS").pipe(
    Config.withDefault(10),
    Config.validate({ message: "must be between 1 and 1000", validation: (n) => n >= 1 && n <= 1000 })
  ),
  dataDir: Config.string("DATA_DIR").pipe(Config.withDefault(".data")),
  pgliteDataDir: Config.option(Config.string("PGLITE_DATA_DIR")),
  dataEncryptionKey: Config.option(Config.redacted("DATA_ENCRYPTION_KEY")),
  instanceId: Config.option(Config.string("INSTANCE_ID")),
  role: Config.literal("api", "worker", "all")("ROLE").pipe(Config.withDefault("all" as const)),
  host: Config.string("HOST").pipe(Config.withDefault("0.0.0.0")),
  port: Config.port("PORT").pipe(Config.withDefault(3000)),
  shutdownTimeoutSeconds: Config.integer("SHUTDOWN_TIMEOUT_SECONDS").pipe(
    Config.withDefault(10),
    Config.validate({ message: "must be between 1 and 300", validation: (n) => n >= 1 && n <= 300 })
  ),
  otelExporterOtlpEndpoint: Config.option(Config.string("OTEL_EXPORTER_OTLP_ENDPOINT")),
  otelServiceName: Config.string("OTEL_SERVICE_NAME").pipe(Config.withDefault("commerce-platform")),
  metricsToken: Config.option(Config.redacted("METRICS_TOKEN"))
}).pipe(
  Config.map((c) => ({
    ...c,
    databaseUrl: Option.filter(c.databaseUrl, (url) => Redacted.value(url).trim() !== ""),
    otelExporterOtlpEndpoint: Option.filter(c.otelExporterOtlpEndpoint, (url) => url.trim() !== ""),
    metricsToken: Option.filter(c.metricsToken, (token) => Redacted.value(token).trim() !== ""),
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
  dataDir: ".data",
  pgliteDataDir: "memory://",
  dataEncryptionKey: Option.none(),
  instanceId: `test-${process.pid}-${Math.random().toString(36).slice(2, 8)}`,
  role: "all",
  host: "127.0.0.1",
  port: 0,
  shutdownTimeoutSeconds: 10,
  otelExporterOtlpEndpoint: Option.none(),
  otelServiceName: "commerce-platform",
  metricsToken: Option.none(),
  ...overrides
})

export const isMemoryDataDir = (dir: string): boolean => dir.startsWith("memory://")

export const currentConfig = Effect.map(AppConfig, (c) => c)
