/** Email addresses: one practical syntax check and one normal form for uniqueness and lookups. */
import { Schema } from "effect"

/** Lower-cased and trimmed: `Ann@Example.com ` and `ann@example.com` are one account. */
export const normalizeEmail = (email: string): string => email.trim().toLowerCase()

// Local part and domain as mail servers accept them in practice (no quoted local parts, no IP hosts).
const EMAIL =
  /^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/

export const isEmail = (value: string): boolean => value.length <= 254 && EMAIL.test(value)

/**
 * An email address in a request body: trimmed, then checked. The pattern and length are stated in
 * the JSON Schema too (OpenAPI clients and generated requests see the same rule as the check).
 */
export const EmailSchema = Schema.Trim.pipe(
  Schema.filter((s) => isEmail(s), {
    message: () => "must be a valid email address",
    jsonSchema: { type: "string", pattern: EMAIL.source, maxLength: 254 }
  })
)
