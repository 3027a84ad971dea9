/** The master key that wraps the per-subject data keys: required in production, exactly 32 bytes. */
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, Redacted } from "effect"
import { AppConfig, makeAppConfig } from "../../src/config.js"
import { loadMasterKey, parseMasterKey } from "../../src/eventstore/Keyring.js"

const withConfig = (overrides: Parameters<typeof makeAppConfig>[0]) =>
  Effect.provideService(AppConfig, makeAppConfig(overrides))

describe("master key (DATA_ENCRYPTION_KEY)", () => {
  it.effect("is required in production", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(loadMasterKey.pipe(withConfig({ nodeEnv: "production" })))
      expect(error._tag).toBe("MasterKeyError")
      expect(error.message).toContain("DATA_ENCRYPTION_KEY is required")
      // Even with a database URL and a data directory.
      const withUrl = yield* Effect.flip(
        loadMasterKey.pipe(
          withConfig({
            nodeEnv: "production",
            databaseUrl: Option.some(Redacted.make("postgres://127.0.0.1/x")),
            pgliteDataDir: "/tmp/none"
          })
        )
      )
      expect(withUrl._tag).toBe("MasterKeyError")
    })
  )

  it.effect("must be exactly 32 bytes, as hex or base64", () =>
    Effect.gen(function* () {
      const key = randomBytes(32)
      const hex = yield* loadMasterKey.pipe(
        withConfig({
          nodeEnv: "production",
          dataEncryptionKey: Option.some(Redacted.make(key.toString("hex")))
        })
      )
      const b64 = yield* parseMasterKey(` ${key.toString("base64")}\n`)
      expect(hex.key.equals(key)).toBe(true)
      expect(b64.key.equals(key)).toBe(true)
      expect(b64.id).toBe(hex.id)
      for (const bad of [
        randomBytes(16).toString("hex"),
        randomBytes(31).toString("base64"),
        randomBytes(33).toString("base64"),
        key.toString("hex").slice(0, 62),
        "",
        "not a key"
      ]) {
        const error = yield* Effect.flip(
          loadMasterKey.pipe(
            withConfig({ nodeEnv: "production", dataEncryptionKey: Option.some(Redacted.make(bad)) })
          )
        )
        expect(error).toMatchObject({ _tag: "MasterKeyError" })
        expect(error.message).toContain("32 bytes")
      }
    })
  )

  it.effect("outside production it is generated once beside the embedded data, or in memory", () =>
    Effect.gen(function* () {
      const memory = yield* loadMasterKey.pipe(
        withConfig({ nodeEnv: "development", pgliteDataDir: "memory://" })
      )
      expect(memory.key).toHaveLength(32)
      const dir = mkdtempSync(join(tmpdir(), "cp-key-"))
      try {
        const config = { nodeEnv: "development" as const, dataDir: dir, pgliteDataDir: join(dir, "pglite") }
        const first = yield* loadMasterKey.pipe(withConfig(config))
        const second = yield* loadMasterKey.pipe(withConfig(config))
        expect(second.id).toBe(first.id)
        expect(statSync(join(dir, "data-encryption.key")).mode & 0o777).toBe(0o600)
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    })
  )
})
