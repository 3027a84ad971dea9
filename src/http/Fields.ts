/** Request-field schemas shared by several contexts, each with the message a client reads. */
import { Schema } from "effect"

/** Trimmed text of 1 to `max` characters (names, labels). */
export const Text = (field: string, max = 100) =>
  Schema.Trim.pipe(
    Schema.minLength(1, { message: () => `${field} must not be empty` }),
    Schema.maxLength(max, { message: () => `${field} must be at most ${max} characters` })
  )
