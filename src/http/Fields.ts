/** Request-field schemas shared by several contexts, each with the message a client reads. */
import { ParseResult, Schema } from "effect"

/** Trimmed text of 1 to `max` characters (names, labels). */
export const Text = (field: string, max = 100) =>
  Schema.Trim.pipe(
    Schema.minLength(1, { message: () => `${field} must not be empty` }),
    Schema.maxLength(max, {
      message: () => `${field} must be at most ${max} characters`,
      // The document states the trimmed rule: some non-blank character, at most `max` in all.
      jsonSchema: { type: "string", minLength: 1, maxLength: max, pattern: "\\S" }
    })
  )

const ISO_8601 =
  /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(\.\d{1,9})?)?([Zz]|[+-]\d{2}:?\d{2})?)?$/

/** An ISO 8601 date or date-time that exists on the calendar, years 0001–9999; UTC unless offset. */
const parseInstant = (text: string): Date | undefined => {
  const m = ISO_8601.exec(text.trim())
  if (!m) return undefined
  const [, y, mo, d, h = "00", mi = "00", s = "00", frac = "", zone = "Z"] = m
  const year = Number(y)
  const day = new Date(Date.UTC(year, Number(mo) - 1, Number(d)))
  // Rejects 2026-02-30 and 13th months instead of rolling them over.
  if (year < 1 || day.getUTCMonth() !== Number(mo) - 1 || day.getUTCDate() !== Number(d)) return undefined
  if (Number(h) > 23 || Number(mi) > 59 || Number(s) > 59) return undefined
  const offset = /^[Zz]$/.test(zone) ? "Z" : zone.length === 5 ? `${zone.slice(0, 3)}:${zone.slice(3)}` : zone
  const instant = new Date(`${y}-${mo}-${d}T${h}:${mi}:${s}${frac.slice(0, 4)}${offset}`)
  return Number.isNaN(instant.getTime()) ? undefined : instant
}

/**
 * A timestamp in a query or body: `2026-01-31`, `2026-01-31T12:00:00Z`, `…+02:00`. Out-of-calendar
 * dates and years outside 0001–9999 are a 400 here, never an out-of-range error from PostgreSQL.
 */
/** The instants `Instant` decodes to: valid dates of years 0001–9999 (what it can encode back, too). */
const InstantDate = Schema.ValidDateFromSelf.pipe(
  Schema.betweenDate(new Date("0001-01-01T00:00:00.000Z"), new Date("9999-12-31T23:59:59.999Z"))
)

export const Instant = (field: string) =>
  Schema.transformOrFail(Schema.String, InstantDate, {
    strict: true,
    decode: (text, _, ast) => {
      const instant = parseInstant(text)
      return instant
        ? ParseResult.succeed(instant)
        : ParseResult.fail(
            new ParseResult.Type(
              ast,
              text,
              `${field} must be an ISO 8601 date or timestamp between years 0001 and 9999, e.g. 2026-01-31 or 2026-01-31T12:00:00Z`
            )
          )
    },
    encode: (date) => ParseResult.succeed(date.toISOString())
  })

/**
 * An email address in a response: checked by `kernel/Email` when it was stored, so documented with
 * `format: email` for clients and response validators.
 */
export const StoredEmail = Schema.String.annotations({ jsonSchema: { type: "string", format: "email" } })

/** An absolute http(s) URL in a response (normalized with `new URL` when it was stored). */
export const StoredUrl = Schema.String.annotations({ jsonSchema: { type: "string", format: "uri" } })

/** An integer field between `min` and `max`; every message starts with the field's name. */
export const IntField = (field: string, min: number, max: number) =>
  Schema.Number.annotations({ message: () => `${field} must be an integer` }).pipe(
    Schema.int({ message: () => `${field} must be an integer` }),
    Schema.between(min, max, { message: () => `${field} must be an integer between ${min} and ${max}` })
  )

/** An id of `prefix` (`ord_…`); anything else, a non-string too, is refused with the field's name. */
export const idOf = (prefix: string, field: string) =>
  Schema.String.pipe(
    Schema.pattern(new RegExp(`^${prefix}_[0-7][0-9a-hjkmnp-tv-z]{25}$`), {
      message: () => `${field} must be an id (${prefix}_…)`
    })
  ).annotations({ message: () => `${field} must be an id (${prefix}_…)` })

/**
 * The payload of an action whose fields are all optional (`/cancel`, `/refund`, `/confirm`…): as on
 * Stripe, no body at all is the same as `{}` (the platform reads an absent JSON body as `null`). Any
 * other value that is not an object is still refused.
 */
export const OptionalFieldsBody = <A, I, R>(fields: Schema.Schema<A, I, R>) =>
  Schema.Union(
    fields,
    Schema.transform(Schema.Null, Schema.typeSchema(fields), {
      strict: false,
      decode: () => ({}),
      encode: () => null
    })
  )
