/**
 * What the events feed never shows (`GET /v1/events`): secret material inside a public event's
 * snapshot. The rule, applied to every event of every type, at any depth of `data`:
 *
 * - a field whose name ends in `token`, `secret`, `password` or `hash` (case-insensitive) is removed;
 *   today that is `customer.password_reset`'s `resetToken`, the raw single-use token the
 *   password-reset email needs (the notification pipeline reads it from the stored row, so the row
 *   keeps it; the feed must not hand it to an API key holder);
 * - nothing else changes. Snapshots of erased data subjects were already replaced in the table by
 *   `{ id, shredded: true }` (`EventStore.forgetSubject`), so they stay redacted here as stored.
 *
 * By field name rather than by a list of event types, so a type added later (a payment intent's
 * `clientSecret`, an invitation `token`) is covered before anyone remembers to list it.
 */

const SECRET_NAME = /(token|secret|password|hash)$/i

/** Whether a field of this name is secret material the feed leaves out. */
export const isSecretField = (name: string): boolean => SECRET_NAME.test(name)

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** `data` without its secret fields, at any depth (a copy; the input is not changed). */
export const redactSecrets = (data: unknown): unknown => {
  if (Array.isArray(data)) return data.map(redactSecrets)
  if (!isRecord(data)) return data
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(data)) {
    if (!isSecretField(key)) out[key] = redactSecrets(value)
  }
  return out
}
