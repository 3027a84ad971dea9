/** UUIDv7 (RFC 9562): 48-bit Unix milliseconds, then randomness. Time-ordered, index friendly. */
import { Clock, Effect } from "effect"
import { randomBytesPooled } from "./Random.js"

export const uuidv7FromMillis = (millis: number): string => {
  const bytes = randomBytesPooled(16)
  let ms = Math.max(0, Math.floor(millis))
  for (let i = 5; i >= 0; i--) {
    bytes[i] = ms % 256
    ms = Math.floor(ms / 256)
  }
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x70
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80
  const hex = bytes.toString("hex")
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

/** A UUIDv7 stamped with Effect's Clock (so TestClock controls it). */
export const uuidv7: Effect.Effect<string> = Effect.map(Clock.currentTimeMillis, uuidv7FromMillis)

export const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** Milliseconds since the epoch encoded in a UUIDv7. */
export const uuidv7Millis = (uuid: string): number => Number.parseInt(uuid.replace(/-/g, "").slice(0, 12), 16)
