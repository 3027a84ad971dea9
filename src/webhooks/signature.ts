/**
 * Webhook signing (spec §6.2, §6.3) and the Standard Webhooks header set. Every attempt is signed
 * afresh with its own timestamp, so a retry a day later still passes a receiver's freshness check.
 *
 * - `X-Service-Signature`: lowercase hex HMAC-SHA256 of `<X-Service-Timestamp>.<raw body>`, keyed
 *   with the secret string as shown (`whsec_…`, UTF-8). `X-Service-Signature-Previous`: the same with
 *   the previous secret while a rotation window is open.
 * - `webhook-id` / `webhook-timestamp` / `webhook-signature` (standardwebhooks.com): base64
 *   HMAC-SHA256 of `<webhook-id>.<webhook-timestamp>.<raw body>` keyed with the secret's base64 part
 *   decoded, as `v1,<sig>` — the previous secret's signature follows, space-separated, in a window.
 */
import { createHmac, randomBytes } from "node:crypto"

export const SECRET_PREFIX = "whsec_"
/** Standard Webhooks allows 24–64 bytes; the design asks for at least 32. */
export const SECRET_BYTES = 32

export const newSecret = (): string => `${SECRET_PREFIX}${randomBytes(SECRET_BYTES).toString("base64")}`

export const serviceSignature = (secret: string, timestamp: number, body: string): string =>
  createHmac("sha256", secret).update(`${timestamp}.${body}`).digest("hex")

const standardKey = (secret: string): Buffer =>
  Buffer.from(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret, "base64")

export const standardSignature = (
  secret: string,
  messageId: string,
  timestamp: number,
  body: string
): string =>
  `v1,${createHmac("sha256", standardKey(secret)).update(`${messageId}.${timestamp}.${body}`).digest("base64")}`

export interface SigningInput {
  readonly deliveryId: string
  readonly eventType: string
  /** Unix seconds of this attempt. */
  readonly timestamp: number
  readonly body: string
  readonly secret: string
  readonly previousSecret?: string | undefined
}

/** Every header of one attempt. */
export const deliveryHeaders = (input: SigningInput): Record<string, string> => {
  const { deliveryId, timestamp, body, secret, previousSecret } = input
  const standard = [secret, ...(previousSecret === undefined ? [] : [previousSecret])]
    .map((s) => standardSignature(s, deliveryId, timestamp, body))
    .join(" ")
  return {
    "content-type": "application/json",
    "user-agent": "commerce-platform-webhooks/1",
    "x-service-signature": serviceSignature(secret, timestamp, body),
    ...(previousSecret === undefined
      ? {}
      : { "x-service-signature-previous": serviceSignature(previousSecret, timestamp, body) }),
    "x-service-timestamp": String(timestamp),
    "x-service-event": input.eventType,
    "x-service-delivery": deliveryId,
    "webhook-id": deliveryId,
    "webhook-timestamp": String(timestamp),
    "webhook-signature": standard
  }
}

/** The signed body (spec §2.6): the event id is inside, so receivers can dedupe on it. */
export const deliveryBody = (event: {
  readonly id: string
  readonly type: string
  readonly occurredAt: Date
  readonly data: unknown
}): string =>
  JSON.stringify({
    id: event.id,
    type: event.type,
    timestamp: event.occurredAt.toISOString(),
    data: event.data
  })
