/**
 * Random secrets and their stored form. API keys, client secrets, refresh and reset tokens carry
 * 256 bits of randomness, so a SHA-256 digest is a safe stored form (no slow hash needed: there is
 * nothing to brute-force); comparisons of digests are constant-time.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import { sha256Hex } from "../base/Sha256.js"

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

/** 32 random bytes as 43 base62 characters (rejection sampling keeps every character uniform). */
export const randomBase62 = (length = 43): string => {
  let out = ""
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      // 248 = 4 × 62: bytes above it would bias the first characters.
      if (byte < 248) out += BASE62[byte % 62]
      if (out.length === length) break
    }
  }
  return out
}

export const isBase62 = (value: string, length = 43): boolean =>
  value.length === length && /^[0-9A-Za-z]+$/.test(value)

/** Hex SHA-256: the stored form of a high-entropy secret. */
export const digest = (secret: string): string => sha256Hex(secret)

/** Whether two digests (or any strings) are equal, in time independent of where they differ. */
export const constantTimeEqual = (a: string, b: string): boolean => {
  const left = createHash("sha256").update(a, "utf8").digest()
  const right = createHash("sha256").update(b, "utf8").digest()
  return timingSafeEqual(left, right) && a.length === b.length
}
