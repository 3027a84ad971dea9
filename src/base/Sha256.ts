/**
 * SHA-256 of a text (UTF-8) as hex: the one helper for it (key and secret digests, call keys,
 * derived ids, migration checksums). Node's one-shot `crypto.hash` (20.12+) is
 * about 3× cheaper than `createHash(…).update(…).digest(…)` for short texts (~0.4 vs ~1.3 µs,
 * measured); on an older Node 20 the incremental hash gives the same digest.
 */
import * as crypto from "node:crypto"

const oneShot: ((algorithm: string, data: string, encoding: "hex") => string) | undefined =
  typeof crypto.hash === "function" ? crypto.hash : undefined

export const sha256Hex = (text: string): string =>
  oneShot === undefined
    ? crypto.createHash("sha256").update(text).digest("hex")
    : oneShot("sha256", text, "hex")
