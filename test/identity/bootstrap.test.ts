/**
 * Start-up of identity: the first admin from ADMIN_EMAIL/ADMIN_PASSWORD (`AdminBootstrapLive`) and
 * from `npm run admin:create`, both idempotent; and the JWT signing key (`loadSigningKey`): required
 * in production, at least 32 bytes, otherwise generated once into `<DATA_DIR>/jwt-secret.key`
 * (mode 0600) so access tokens survive a restart.
 */
import { randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { SqlClient } from "@effect/sql"
import { describe, it, layer } from "@effect/vitest"
import { Effect, Either, Layer, Logger, LogLevel, Option, Redacted } from "effect"
import pg from "pg"
import { expect } from "vitest"
import { AppConfig, type AppConfigShape, makeAppConfig } from "../../src/config.js"
import { CustomerDecider, customerStream } from "../../src/customers/decider.js"
import { AdminBootstrapError, AdminBootstrapLive, createAdmin } from "../../src/identity/admin.js"
import { Identity } from "../../src/identity/Identity.js"
import { AccessTokens, loadSigningKey, makeAccessTokens, SigningKeyError } from "../../src/identity/tokens.js"
import { CommandRunner } from "../../src/kernel/CommandRunner.js"
import * as Ids from "../../src/kernel/Ids.js"
import { scopedDatabaseUrl, testConfig, usingRealPostgres } from "../support/database.js"
import { identityServices, PASSWORD, uniqueEmail } from "../support/identity.js"
import { runScript } from "../support/scripts.js"

// --- AdminBootstrapLive ------------------------------------------------------------------------------

const ADMIN_EMAIL = uniqueEmail("bootstrap")

const BootstrapConfig = testConfig({
  identity: {
    ...makeAppConfig().identity,
    adminEmail: Option.some(ADMIN_EMAIL),
    adminPassword: Option.some(Redacted.make(PASSWORD))
  }
}).pipe(Layer.provideMerge(Logger.minimumLogLevel(LogLevel.Error)))

/** AdminBootstrapLive built once more, over the layer's database, with the given admin settings. */
const bootstrapWith = (email: string | undefined, password: string | undefined) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const settings: AppConfigShape = {
      ...config,
      identity: {
        ...config.identity,
        adminEmail: Option.fromNullable(email),
        adminPassword: Option.map(Option.fromNullable(password), Redacted.make)
      }
    }
    yield* Layer.build(AdminBootstrapLive.pipe(Layer.provide(Layer.succeed(AppConfig, settings))))
  }).pipe(Effect.scoped)

/** AdminBootstrapLive as start-up runs it: with the layer's own config. */
const bootstrap = Effect.scoped(Layer.build(AdminBootstrapLive))

const usersWithEmail = (email: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ userId: string; role: string; customerId: string | null }>`
      SELECT user_id AS "userId", role, customer_id AS "customerId" FROM identity.users
       WHERE email_normalized = ${email.trim().toLowerCase()}`
  )

const countRegistrations = (userId?: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      userId === undefined
        ? sql<{
            n: number
          }>`SELECT count(*)::int AS n FROM event_store.events WHERE event_type = 'user.registered'`
        : sql<{ n: number }>`SELECT count(*)::int AS n FROM event_store.events
            WHERE event_type = 'user.registered' AND stream_id = ${`user-${userId}`}`,
      (rows) => rows[0]?.n ?? 0
    )
  )

const loginAs = (email: string, password: string) =>
  Effect.flatMap(Identity, (identity) => identity.login({ email, password, ip: "127.0.0.1" }))

describe("identity start-up", () => {
  layer(identityServices(BootstrapConfig), { excludeTestServices: true, timeout: 120_000 })(
    "AdminBootstrapLive",
    (it) => {
      it.effect("creates the ADMIN_EMAIL admin, who can log in with ADMIN_PASSWORD", () =>
        Effect.gen(function* () {
          expect(yield* usersWithEmail(ADMIN_EMAIL)).toEqual([])
          yield* bootstrap
          const users = yield* usersWithEmail(ADMIN_EMAIL)
          expect(users).toEqual([{ userId: expect.stringMatching(/^usr_/), role: "admin", customerId: null }])
          const session = yield* loginAs(ADMIN_EMAIL, PASSWORD)
          expect(session.userId).toBe(users[0]?.userId)
          expect(session.scope).toBe("admin")
          const claims = yield* (yield* AccessTokens).verify(session.accessToken)
          expect(claims.role).toBe("admin")
          expect(claims.scopes).toEqual(["admin"])
          const me = yield* (yield* Identity).me({
            type: "user",
            id: session.userId,
            role: "admin",
            scopes: new Set(claims.scopes),
            tokenId: claims.jti,
            ...(claims.sid === undefined ? {} : { sessionId: claims.sid })
          })
          expect(me.role).toBe("admin")
          expect(me.email).toBe(ADMIN_EMAIL)
          expect(me.customerId).toBeNull()
        })
      )

      it.effect("is idempotent: one user row and one user.registered event however often it runs", () =>
        Effect.gen(function* () {
          yield* bootstrap
          const registrations = yield* countRegistrations()
          yield* bootstrap
          yield* bootstrap
          const users = yield* usersWithEmail(ADMIN_EMAIL)
          expect(users).toHaveLength(1)
          expect(users[0]?.role).toBe("admin")
          expect(yield* countRegistrations(users[0]?.userId)).toBe(1)
          expect(yield* countRegistrations()).toBe(registrations)
          // An existing admin is left as it is: another ADMIN_PASSWORD changes nothing.
          yield* bootstrapWith(ADMIN_EMAIL, "a different strong password")
          yield* bootstrapWith(` ${ADMIN_EMAIL.toUpperCase()} `, "a different strong password")
          expect(yield* usersWithEmail(ADMIN_EMAIL)).toHaveLength(1)
          expect(yield* countRegistrations()).toBe(registrations)
          expect((yield* loginAs(ADMIN_EMAIL, PASSWORD)).userId).toBe(users[0]?.userId)
          const refused = yield* Effect.flip(loginAs(ADMIN_EMAIL, "a different strong password"))
          expect(refused.error.code).toBe("invalid_credentials")
        })
      )

      it.effect("an address already registered as a shopper stays a shopper (no error)", () =>
        Effect.gen(function* () {
          const email = uniqueEmail("shopper")
          const identity = yield* Identity
          const shopper = yield* identity.register({
            email,
            password: PASSWORD,
            firstName: "Ann",
            lastName: "Lee"
          })
          const registrations = yield* countRegistrations()
          yield* bootstrapWith(email, "the admin password")
          const users = yield* usersWithEmail(email)
          expect(users).toEqual([
            { userId: shopper.userId, role: "customer", customerId: expect.any(String) }
          ])
          expect(yield* countRegistrations()).toBe(registrations)
          const session = yield* loginAs(email, PASSWORD)
          expect((yield* (yield* AccessTokens).verify(session.accessToken)).role).toBe("customer")
          const refused = yield* Effect.flip(loginAs(email, "the admin password"))
          expect(refused.error.code).toBe("invalid_credentials")
        })
      )

      it.effect("an address held by a customer record without an account: an admin, or an error", () =>
        Effect.gen(function* () {
          // A buyer the store recorded (no login): customers are not admin users (spec §1).
          const email = uniqueEmail("buyer")
          const customerId = yield* Ids.make("cus")
          yield* (yield* CommandRunner)
            .execute(CustomerDecider, customerStream(customerId), {
              _tag: "Create",
              customerId,
              email,
              firstName: "Bo",
              lastName: "Buyer",
              phone: null,
              tags: [],
              metadata: {}
            })
            .pipe(Effect.orDie)
          const outcome = yield* Effect.either(createAdmin(email, PASSWORD))
          const users = yield* usersWithEmail(email)
          if (Either.isLeft(outcome)) {
            expect(outcome.left).toBeInstanceOf(AdminBootstrapError)
            expect(users).toEqual([])
          } else {
            // Success must mean an admin that exists and can log in, not "already exists ()".
            expect(outcome.right.userId).toMatch(/^usr_/)
            expect(users).toEqual([{ userId: outcome.right.userId, role: "admin", customerId: null }])
            expect((yield* loginAs(email, PASSWORD)).userId).toBe(outcome.right.userId)
          }
        })
      )

      it.effect("a weak ADMIN_PASSWORD or an invalid ADMIN_EMAIL fails with AdminBootstrapError", () =>
        Effect.gen(function* () {
          const email = uniqueEmail("weak")
          const weak = yield* Effect.flip(bootstrapWith(email, "7 chars"))
          expect(weak).toBeInstanceOf(AdminBootstrapError)
          expect(weak._tag).toBe("AdminBootstrapError")
          expect(weak.message).toMatch(/at least 8 characters/)
          expect(yield* usersWithEmail(email)).toEqual([])

          const invalid = yield* Effect.flip(bootstrapWith("not an address", PASSWORD))
          expect(invalid).toBeInstanceOf(AdminBootstrapError)
          expect(invalid.message).toMatch(/not a valid address/)
        })
      )

      it.effect("without both ADMIN_EMAIL and ADMIN_PASSWORD it creates nobody", () =>
        Effect.gen(function* () {
          const email = uniqueEmail("half")
          const registrations = yield* countRegistrations()
          yield* bootstrapWith(email, undefined)
          yield* bootstrapWith(undefined, PASSWORD)
          expect(yield* usersWithEmail(email)).toEqual([])
          expect(yield* countRegistrations()).toBe(registrations)
        })
      )
    }
  )

  // --- The signing key ----------------------------------------------------------------------------

  /** A temporary directory, removed with the scope. */
  const tempDir = Effect.acquireRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), "cp-signing-key-"))),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  )

  const loadWith = (overrides: Partial<AppConfigShape>) =>
    loadSigningKey.pipe(
      Effect.provideService(AppConfig, makeAppConfig(overrides)),
      Effect.provide(Logger.minimumLogLevel(LogLevel.Error))
    )

  /** A data directory on disk (not `memory://`) and no DATABASE_URL: the key is kept in a file. */
  const onDisk = (dataDir: string): Partial<AppConfigShape> => ({
    nodeEnv: "development",
    dataDir,
    pgliteDataDir: join(dataDir, "pglite"),
    databaseUrl: Option.none(),
    identity: { ...makeAppConfig().identity, jwtSecret: Option.none() }
  })

  const withSecret = (secret: string, overrides: Partial<AppConfigShape> = {}): Partial<AppConfigShape> => ({
    ...overrides,
    identity: { ...makeAppConfig().identity, jwtSecret: Option.some(Redacted.make(secret)) }
  })

  const token = {
    subject: "usr_01jd4x8m6ffq2b3n5r7t9v1w3y",
    tokenId: "survives-restarts",
    scopes: ["admin"],
    ttlSeconds: 3600,
    role: "admin" as const,
    sessionId: "ses_01jd4x8m6ffq2b3n5r7t9v1w3y"
  }

  describe("loadSigningKey", () => {
    it.scoped("NODE_ENV=production without JWT_SECRET → SigningKeyError (and no key file)", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const error = yield* Effect.flip(loadWith({ ...onDisk(dir), nodeEnv: "production" }))
        expect(error).toBeInstanceOf(SigningKeyError)
        expect(error.message).toMatch(/JWT_SECRET/)
        expect(existsSync(join(dir, "jwt-secret.key"))).toBe(false)
        const memory = yield* Effect.flip(loadWith({ nodeEnv: "production", pgliteDataDir: "memory://" }))
        expect(memory).toBeInstanceOf(SigningKeyError)
      })
    )

    it.effect("a JWT_SECRET shorter than 32 bytes → SigningKeyError; 32 bytes is enough", () =>
      Effect.gen(function* () {
        for (const secret of ["short", "x".repeat(31), `   ${"y".repeat(31)}   `]) {
          const error = yield* Effect.flip(loadWith(withSecret(secret)))
          expect(error, JSON.stringify(secret)).toBeInstanceOf(SigningKeyError)
          expect(error.message).toMatch(/32 bytes/)
          const production = yield* Effect.flip(loadWith(withSecret(secret, { nodeEnv: "production" })))
          expect(production).toBeInstanceOf(SigningKeyError)
        }
        const secret = "z".repeat(32)
        const key = yield* loadWith(withSecret(secret, { nodeEnv: "production" }))
        expect(Buffer.from(key).toString("utf8")).toBe(secret)
      })
    )

    it.scoped(
      "without JWT_SECRET on disk: <dataDir>/jwt-secret.key, mode 0600, reused on the next load",
      () =>
        Effect.gen(function* () {
          const root = yield* tempDir
          const dataDir = join(root, "nested", "data")
          const file = join(dataDir, "jwt-secret.key")
          const key1 = yield* loadWith(onDisk(dataDir))
          expect(existsSync(file)).toBe(true)
          expect(statSync(file).mode & 0o777).toBe(0o600)
          expect(key1.length).toBeGreaterThanOrEqual(32)
          const stored = readFileSync(file)
          const key2 = yield* loadWith(onDisk(dataDir))
          expect(Buffer.from(key2).equals(Buffer.from(key1))).toBe(true)
          expect(readFileSync(file).equals(stored)).toBe(true)
          expect(statSync(file).mode & 0o777).toBe(0o600)

          // Tokens survive a restart: issued under the first load, verified under the second.
          const issued = yield* makeAccessTokens(key1).issue(token)
          const claims = yield* makeAccessTokens(key2).verify(issued.token)
          expect(claims.sub).toBe(token.subject)
          expect(claims.jti).toBe(token.tokenId)

          // Another data directory has another key: the token is not valid there.
          const other = yield* tempDir
          const key3 = yield* loadWith(onDisk(other))
          expect(Buffer.from(key3).equals(Buffer.from(key1))).toBe(false)
          const refused = yield* Effect.flip(makeAccessTokens(key3).verify(issued.token))
          expect(refused.reason).toBe("invalid")

          // With DATABASE_URL the embedded data dir does not matter: the file is used too.
          const withUrl = yield* loadWith({
            ...onDisk(dataDir),
            pgliteDataDir: "memory://",
            databaseUrl: Option.some(Redacted.make("postgres://nobody@127.0.0.1:1/none"))
          })
          expect(Buffer.from(withUrl).equals(Buffer.from(key1))).toBe(true)
        })
    )

    it.scoped("JWT_SECRET wins over the key file; memory:// without a database keeps no file", () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const secret = randomBytes(32).toString("hex")
        const key = yield* loadWith(withSecret(secret, onDisk(dir)))
        expect(Buffer.from(key).toString("utf8")).toBe(secret)
        expect(existsSync(join(dir, "jwt-secret.key"))).toBe(false)

        const memory = { ...onDisk(dir), pgliteDataDir: "memory://" }
        const first = yield* loadWith(memory)
        const second = yield* loadWith(memory)
        expect(Buffer.from(first).equals(Buffer.from(second))).toBe(false)
        expect(existsSync(join(dir, "jwt-secret.key"))).toBe(false)
      })
    )
  })

  // --- npm run admin:create ---------------------------------------------------------------------------

  const adminCreate = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv) =>
    runScript("scripts/admin-create.ts", args, env)

  describe("npm run admin:create", () => {
    it.scoped.skipIf(!usingRealPostgres)(
      "creates the admin, then says it already exists; without --email → exit 2",
      () =>
        Effect.gen(function* () {
          const url = yield* scopedDatabaseUrl
          if (Option.isNone(url)) return yield* Effect.dieMessage("DATABASE_URL is required here")
          const dataDir = yield* tempDir
          const env: NodeJS.ProcessEnv = {
            ...process.env,
            NODE_ENV: "development",
            DATABASE_URL: url.value,
            DATA_ENCRYPTION_KEY: randomBytes(32).toString("hex"),
            JWT_SECRET: randomBytes(32).toString("hex"),
            DATA_DIR: dataDir
          }
          delete env.ADMIN_EMAIL
          delete env.ADMIN_PASSWORD
          const email = uniqueEmail("cli")

          const first = yield* adminCreate(["--email", email, "--password", PASSWORD], env)
          expect(first.code, first.stdout + first.stderr).toBe(0)
          expect(first.stdout).toContain(`created admin ${email}`)
          expect(first.stdout).not.toContain("already exists")

          const again = yield* adminCreate(["--email", email, "--password", PASSWORD], env)
          expect(again.code, again.stdout + again.stderr).toBe(0)
          expect(again.stdout).toContain(`${email} already exists`)
          expect(again.stdout).toContain("role admin")
          expect(again.stdout).not.toContain("created admin")

          const rows = yield* Effect.promise(async () => {
            const client = new pg.Client({ connectionString: url.value })
            await client.connect()
            try {
              const result = await client.query<{ role: string }>(
                "SELECT role FROM identity.users WHERE email_normalized = $1",
                [email.toLowerCase()]
              )
              return result.rows
            } finally {
              await client.end()
            }
          })
          expect(rows.map((r) => r.role)).toEqual(["admin"])

          const missing = yield* adminCreate(["--password", PASSWORD], env)
          expect(missing.code, missing.stdout + missing.stderr).toBe(2)
          expect(missing.stderr).toContain("usage")
        }),
      60_000
    )
  })
})
