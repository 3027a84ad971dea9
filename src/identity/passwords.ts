/**
 * Password rules (NIST 800-63B: 8 to 128 characters, no composition rules) and scrypt hashing.
 * A hash records its own parameters — `scrypt$<log2 N>$<r>$<p>$<salt>$<key>` — so changing
 * PASSWORD_SCRYPT_* later keeps older hashes verifiable. Hashing runs on libuv's thread pool.
 */
import { randomBytes, scrypt, timingSafeEqual } from "node:crypto"
import { Context, Effect, Layer } from "effect"
import { AppConfig } from "../config.js"

export const PASSWORD_MIN_LENGTH = 8
export const PASSWORD_MAX_LENGTH = 128

/** Why a password is refused, or undefined when it is acceptable. */
export const passwordProblem = (password: string): string | undefined => {
  const length = [...password].length
  if (length < PASSWORD_MIN_LENGTH) return `password must be at least ${PASSWORD_MIN_LENGTH} characters`
  if (length > PASSWORD_MAX_LENGTH) return `password must be at most ${PASSWORD_MAX_LENGTH} characters`
  if (password.trim() === "") return "password must not be only whitespace"
  return undefined
}

export interface ScryptParameters {
  readonly cost: number
  readonly blockSize: number
  readonly parallelism: number
}

const KEY_BYTES = 32
const SALT_BYTES = 16

const derive = (password: string, salt: Buffer, p: ScryptParameters): Promise<Buffer> =>
  new Promise((resolve, reject) =>
    scrypt(
      password.normalize("NFKC"),
      salt,
      KEY_BYTES,
      { N: p.cost, r: p.blockSize, p: p.parallelism, maxmem: 256 * p.cost * p.blockSize + 1024 * 1024 },
      (error, key) => (error ? reject(error) : resolve(key))
    )
  )

interface ParsedHash {
  readonly params: ScryptParameters
  readonly salt: Buffer
  readonly key: Buffer
}

const parseHash = (stored: string): ParsedHash | undefined => {
  const parts = stored.split("$")
  if (parts.length !== 6 || parts[0] !== "scrypt") return undefined
  const [, logN, r, p, salt, key] = parts
  const [log2Cost, blockSize, parallelism] = [logN, r, p].map((v) =>
    /^\d{1,2}$/.test(v ?? "") ? Number(v) : Number.NaN
  )
  // Parameters scrypt would refuse (or that would take unbounded memory) make the hash unreadable.
  if (log2Cost === undefined || !(log2Cost >= 1 && log2Cost <= 24)) return undefined
  if (blockSize === undefined || !(blockSize >= 1 && blockSize <= 32)) return undefined
  if (parallelism === undefined || !(parallelism >= 1 && parallelism <= 16)) return undefined
  const params = { cost: 2 ** log2Cost, blockSize, parallelism }
  return { params, salt: Buffer.from(salt ?? "", "base64"), key: Buffer.from(key ?? "", "base64") }
}

export interface PasswordHasherShape {
  readonly hash: (password: string) => Effect.Effect<string>
  /** Constant-time check; an unreadable stored hash is simply "no match". */
  readonly verify: (password: string, stored: string) => Effect.Effect<boolean>
  /**
   * Spends the same work as a real check against nothing, so "no such account" answers as slowly
   * as "wrong password" (no user enumeration through timing).
   */
  readonly verifyNothing: (password: string) => Effect.Effect<false>
}

export class PasswordHasher extends Context.Tag("identity/PasswordHasher")<
  PasswordHasher,
  PasswordHasherShape
>() {}

export const makePasswordHasher = (params: ScryptParameters): PasswordHasherShape => {
  const hash = (password: string) =>
    Effect.promise(async () => {
      const salt = randomBytes(SALT_BYTES)
      const key = await derive(password, salt, params)
      return [
        "scrypt",
        Math.log2(params.cost),
        params.blockSize,
        params.parallelism,
        salt.toString("base64"),
        key.toString("base64")
      ].join("$")
    })
  const decoy = { params, salt: randomBytes(SALT_BYTES), key: randomBytes(KEY_BYTES) }
  const check = (password: string, parsed: ParsedHash) =>
    Effect.promise(async () => {
      try {
        const key = await derive(password, parsed.salt, parsed.params)
        return key.length === parsed.key.length && timingSafeEqual(key, parsed.key)
      } catch {
        // scrypt refused the stored parameters (e.g. over its memory bound): no match.
        return false
      }
    })
  return {
    hash,
    verify: (password, stored) => {
      const parsed = parseHash(stored)
      return parsed ? check(password, parsed) : Effect.as(check(password, decoy), false)
    },
    verifyNothing: (password) => Effect.as(check(password, decoy), false as const)
  }
}

export const PasswordHasherLive = Layer.effect(
  PasswordHasher,
  Effect.map(AppConfig, (config) => makePasswordHasher(config.identity.scrypt))
)
