/**
 * Public ids: a type prefix + "_" + a UUIDv7 in Crockford base32 (TypeID style), e.g.
 * `cus_01jd4x8m6ffq2b3n5r7t9v1w3y`. Time-ordered, opaque, and cheap to validate: a malformed id is
 * simply "not found", never an error deeper in the stack.
 */
import { Effect, Schema } from "effect"
import { sha256Hex } from "../base/Sha256.js"
import { UUID_PATTERN, uuidv7 } from "../base/Uuid.js"

export const ID_PREFIXES = [
  "usr",
  "cus",
  "adr",
  "key",
  "cli",
  "wh",
  "evt",
  "dlv",
  "ntf",
  "tpl",
  "prod",
  "chk",
  "ord",
  "ful",
  "li",
  "pay",
  "pi",
  "re",
  "sub",
  "ue",
  "in",
  "ses",
  "prs",
  "clock"
] as const
export type IdPrefix = (typeof ID_PREFIXES)[number]

const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
const DECODE = new Map([...ALPHABET].map((c, i) => [c, i]))

/**
 * 128 bits → 26 base32 characters (the first carries 3 bits, so it is 0-7): the bits as 130 with
 * two leading zeros, five at a time from the top, read hex digit by hex digit (no BigInt: an id is
 * minted on every create).
 */
export const encodeUuid = (uuid: string): string => {
  let out = ""
  let bits = 2
  let acc = 0
  for (let i = 0; i < uuid.length; i++) {
    const code = uuid.charCodeAt(i)
    if (code === 45) continue // "-"
    // 0-9 → 0-9, a-f / A-F → 10-15 (the caller passes a checked UUID)
    const digit = code <= 57 ? code - 48 : (code | 32) - 87
    acc = (acc << 4) | digit
    bits += 4
    if (bits >= 5) {
      bits -= 5
      out += ALPHABET[(acc >> bits) & 31]
      acc &= (1 << bits) - 1
    }
  }
  return out
}

export const decodeToUuid = (encoded: string): string | undefined => {
  if (encoded.length !== 26 || !/^[0-7]/.test(encoded)) return undefined
  let n = 0n
  for (const c of encoded) {
    const v = DECODE.get(c)
    if (v === undefined) return undefined
    n = (n << 5n) | BigInt(v)
  }
  const hex = n.toString(16).padStart(32, "0")
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

export const fromUuid = <P extends IdPrefix>(prefix: P, uuid: string): `${P}_${string}` => {
  if (!UUID_PATTERN.test(uuid)) throw new Error(`not a UUID: ${uuid}`)
  return `${prefix}_${encodeUuid(uuid)}`
}

/** A fresh id stamped with Effect's Clock. */
export const make = <P extends IdPrefix>(prefix: P): Effect.Effect<`${P}_${string}`> =>
  Effect.map(uuidv7, (uuid) => fromUuid(prefix, uuid))

/**
 * A deterministic UUIDv7-shaped UUID: `timestampHex` (12 hex digits of Unix milliseconds) keeps ids
 * time-ordered, the remaining bits come from a SHA-256 of `key`. Same key, same id: replays dedupe.
 */
export const derivedUuid = (timestampHex: string, key: string): string => {
  const digest = sha256Hex(key)
  const variant = ((Number.parseInt(digest.slice(3, 4), 16) & 0x3) | 0x8).toString(16)
  const hex = `${timestampHex.padStart(12, "0").slice(-12)}7${digest.slice(0, 3)}${variant}${digest.slice(4, 19)}`
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`
}

/** A deterministic id for `key`, ordered by `timestampMs` (e.g. one notification per trigger and channel). */
export const derive = <P extends IdPrefix>(prefix: P, key: string, timestampMs: number): `${P}_${string}` =>
  fromUuid(prefix, derivedUuid(Math.max(0, Math.floor(timestampMs)).toString(16), key))

export const isValid = (prefix: IdPrefix, id: string): boolean => {
  if (id.length !== prefix.length + 27 || !id.startsWith(`${prefix}_`)) return false
  // What decodeToUuid accepts, without decoding (every request naming an id checks one).
  const first = id.charCodeAt(prefix.length + 1)
  if (first < 48 || first > 55) return false // 0-7: the first character carries 3 bits
  for (let i = prefix.length + 2; i < id.length; i++) if (!DECODE.has(id.charAt(i))) return false
  return true
}

export const toUuid = (prefix: IdPrefix, id: string): string | undefined =>
  id.startsWith(`${prefix}_`) ? decodeToUuid(id.slice(prefix.length + 1)) : undefined

/** Schema of an id with the given prefix (for payloads and path parameters). */
export const IdSchema = <P extends IdPrefix>(prefix: P) =>
  Schema.String.pipe(
    Schema.filter((s): s is `${P}_${string}` => isValid(prefix, s), {
      message: () => `must be a ${prefix}_ id`
    })
  )

/** The creation time (Unix milliseconds) a UUIDv7-based id carries, or undefined if malformed. */
export const timestampOf = (prefix: IdPrefix, id: string): number | undefined => {
  const uuid = toUuid(prefix, id)
  return uuid === undefined ? undefined : Number.parseInt(uuid.replace(/-/g, "").slice(0, 12), 16)
}
