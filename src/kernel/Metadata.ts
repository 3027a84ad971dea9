/**
 * Metadata: the free-form key/value object a store attaches to its records (customers, webhook
 * endpoints, notifications), with Stripe's patch rule and one set of limits for every context.
 */
import { Schema } from "effect"

/** Limits of one metadata object (documented in the OpenAPI descriptions and the README). */
export const METADATA_LIMITS = {
  keys: 50,
  keyLength: 40,
  /** Serialized JSON size of the whole metadata object. */
  bytes: 8 * 1024
} as const

export const Metadata = Schema.Record({ key: Schema.String, value: Schema.Unknown })
export type Metadata = Readonly<Record<string, unknown>>

/**
 * Metadata in a request. `metadataProblem` checks the limits (after a merge, with its own message);
 * the annotations state the key limits in the OpenAPI document and keep requests drawn from the
 * schema within them (JSON values, a few keys).
 */
export const MetadataInput = Metadata.annotations({
  jsonSchema: {
    type: "object",
    maxProperties: METADATA_LIMITS.keys,
    propertyNames: { minLength: 1, maxLength: METADATA_LIMITS.keyLength },
    description: `At most ${METADATA_LIMITS.keys} keys of 1 to ${METADATA_LIMITS.keyLength} characters, ${METADATA_LIMITS.bytes} bytes as JSON.`
  },
  arbitrary: () => (fc) =>
    fc.dictionary(
      fc.string({ minLength: 1, maxLength: METADATA_LIMITS.keyLength }),
      fc.jsonValue({ maxDepth: 2 }),
      {
        maxKeys: 10
      }
    )
})

/**
 * A metadata patch (Stripe's rule): keys are merged into the current metadata, a key set to `null`
 * is removed, and `null` for the whole patch clears it.
 */
export type MetadataPatch = Readonly<Record<string, unknown>> | null

/**
 * The merged metadata. Built with `Object.fromEntries` (own data properties only), so a key such as
 * `__proto__` is stored as a key, never as the object's prototype.
 */
export const applyMetadataPatch = (current: Metadata, patch: MetadataPatch): Metadata => {
  if (patch === null) return {}
  const next = new Map(Object.entries(current))
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) next.delete(key)
    else next.set(key, value)
  }
  return Object.fromEntries(next)
}

/** Checks the limits of a metadata object (after a merge, so the result is what counts). */
export const metadataProblem = (metadata: Metadata): string | undefined => {
  const keys = Object.keys(metadata)
  if (keys.length > METADATA_LIMITS.keys) return `metadata can have at most ${METADATA_LIMITS.keys} keys`
  // Counted in characters (code points), as a client counts them.
  const long = keys.find((k) => k.length === 0 || [...k].length > METADATA_LIMITS.keyLength)
  if (long !== undefined) {
    return `metadata keys must be 1 to ${METADATA_LIMITS.keyLength} characters (${JSON.stringify(long.slice(0, 50))})`
  }
  if (Buffer.byteLength(JSON.stringify(metadata), "utf8") > METADATA_LIMITS.bytes) {
    return `metadata must be at most ${METADATA_LIMITS.bytes} bytes as JSON`
  }
  return undefined
}
