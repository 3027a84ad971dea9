/**
 * The Stripe adapter (`PAYMENT_PROCESSOR=stripe`): the processor interface on Stripe's PaymentIntents
 * and Refunds APIs through the official `stripe` SDK, and the verification of Stripe's signed events
 * (`POST /v1/processor-events/stripe`, stripeEvents.ts).
 *
 * - Every call carries the key our core derives as Stripe's `Idempotency-Key` (the SDK reuses it on
 *   its own retries), so asking again — the SDK after a 5xx, the recovery worker after a crash, a
 *   retried request — gets Stripe's first answer and never moves money twice.
 * - One Stripe PaymentIntent per confirmation attempt of ours, created and confirmed in one call
 *   (`confirm: true`) under that attempt's key: each key names exactly one Stripe object, a retried
 *   key can never confirm another payment method on a shared one, and a declined attempt's Stripe
 *   intent is simply left as Stripe leaves it (`requires_payment_method`, no funds held). Capture,
 *   cancel (our void) and refunds then address that attempt's Stripe intent (`processorReference`).
 * - Stripe's objects carry the call's key in `metadata.commerce_call_key`; nothing else of ours
 *   (our ids may differ between a rolled-back request and its retry, and Stripe refuses a key reused
 *   with different parameters). The webhook finds our intent from that key or from the reference.
 * - Payment-method tokens (`pm_…`) pass through; `resolvePaymentMethod` retrieves the PaymentMethod
 *   once (brand, last four digits, expiry: what we store). Anything else — card numbers included —
 *   is refused before any network call: card numbers are never sent anywhere, nor stored.
 * - Answers: `succeeded` / `requires_capture` → Authorized, `requires_action` → ActionRequired,
 *   a card error (402) or `requires_payment_method` → Declined (`code`, `decline_code`, `message`);
 *   no answer, 5xx, 429, 409, `lock_timeout` (after the SDK's own retries), or an answer whose
 *   outcome is not final yet (`processing`) → ProcessorUnavailable: the core asks again, same key.
 */
import { Effect, Option, Redacted } from "effect"
import Stripe from "stripe"
import type { StripeSettings } from "../config.js"
import type { PaymentMethod } from "./events.js"
import {
  type AuthorizationResult,
  type PaymentProcessorShape,
  ProcessorUnavailable,
  type SettlementResult
} from "./processor.js"
import {
  authorizationOf,
  CALL_KEY_METADATA,
  nonEmpty,
  refundOutcomeOf,
  type StripeWebhookShape
} from "./stripeObjects.js"

/** Stripe's SDK retries (same key) before the core's own: network errors, 409, 5xx. */
const SDK_RETRIES = 2
const TIMEOUT_MS = 20_000

export const makeStripe = (settings: StripeSettings): Stripe =>
  new Stripe(Redacted.value(settings.secretKey), {
    maxNetworkRetries: SDK_RETRIES,
    timeout: TIMEOUT_MS,
    appInfo: { name: "commerce-platform" },
    ...Option.match(settings.apiBase, {
      onNone: () => ({}),
      onSome: (url) => ({
        host: url.hostname,
        port: url.port === "" ? (url.protocol === "http:" ? 80 : 443) : Number(url.port),
        protocol: url.protocol === "http:" ? ("http" as const) : ("https" as const)
      })
    })
  })

// --- Stripe's answers → ours --------------------------------------------------------------------------

/** What a failed SDK call means for us. */
type Failure =
  | {
      readonly _tag: "Card"
      readonly code: string
      readonly declineCode: string | null
      readonly message: string
    }
  /** Stripe refused the request itself (state, amount, unknown object): a definite answer. */
  | { readonly _tag: "Refused"; readonly code: string; readonly message: string; readonly status: number }
  /** No definite answer: the outcome is unknown, ask again with the same key. */
  | { readonly _tag: "Unavailable"; readonly message: string }

export const classify = (error: unknown): Failure => {
  if (!(error instanceof Stripe.errors.StripeError))
    return { _tag: "Unavailable", message: error instanceof Error ? error.message : String(error) }
  const message = error.message === "" ? error.type : error.message
  if (error instanceof Stripe.errors.StripeCardError)
    return {
      _tag: "Card",
      code: nonEmpty(error.code) ?? "card_declined",
      declineCode: nonEmpty(error.decline_code),
      message
    }
  const status = error.statusCode ?? 0
  if (
    error instanceof Stripe.errors.StripeInvalidRequestError &&
    error.code !== "lock_timeout" &&
    status !== 409 &&
    status !== 429
  )
    return { _tag: "Refused", code: nonEmpty(error.code) ?? "invalid_request", message, status }
  // Connection errors, 5xx, 429, lock_timeout, 409 — and answers that are our own fault (401 bad
  // key, 403, idempotency_error): none tells what happened to the money, so none is an outcome.
  return { _tag: "Unavailable", message: `${error.type}${status === 0 ? "" : ` ${status}`}: ${message}` }
}

const unavailable = (message: string) => new ProcessorUnavailable({ message: `stripe: ${message}` })

/** One SDK call, its failure classified. */
const attempt = <A>(call: () => Promise<A>): Effect.Effect<A, Failure> =>
  Effect.tryPromise({ try: call, catch: classify })

/** Settlements: a refusal is the answer (Failed); anything unknown is asked again. */
const settle = <A>(
  call: () => Promise<A>,
  answer: (value: A) => SettlementResult
): Effect.Effect<SettlementResult, ProcessorUnavailable> =>
  attempt(call).pipe(
    Effect.map(answer),
    Effect.catchAll((failure) =>
      failure._tag === "Unavailable"
        ? Effect.fail(unavailable(failure.message))
        : Effect.succeed<SettlementResult>({ _tag: "Failed", code: failure.code, message: failure.message })
    )
  )

const PM_TOKEN = /^pm_[A-Za-z0-9_]{1,200}$/

/** Stripe's refund reasons (ours add `other`, which Stripe has no word for: sent without one). */
const refundReasonOf = (reason: string | null) =>
  reason === "duplicate" || reason === "fraudulent" || reason === "requested_by_customer" ? reason : undefined

/** `stripe` with a live key; `stripe_test` with a test key (`sk_test_…`, `rk_test_…`): not `livemode`. */
export const stripeProcessorName = (settings: StripeSettings) =>
  /^[a-z]{2}_test_/.test(Redacted.value(settings.secretKey)) ? "stripe_test" : "stripe"

export const makeStripeProcessor = (stripe: Stripe, name: string): PaymentProcessorShape => ({
  name,
  resolvePaymentMethod: (input) => {
    const token = input.trim()
    // Card numbers and anything not a PaymentMethod id never leave the process.
    if (!PM_TOKEN.test(token)) return Effect.succeed(Option.none())
    return attempt(() => stripe.paymentMethods.retrieve(token)).pipe(
      Effect.map((pm) =>
        pm.card === null || pm.card === undefined
          ? Option.none<PaymentMethod>()
          : Option.some<PaymentMethod>({
              token,
              brand: pm.card.brand,
              last4: pm.card.last4,
              expMonth: pm.card.exp_month,
              expYear: pm.card.exp_year
            })
      ),
      Effect.catchAll((failure) =>
        failure._tag === "Unavailable"
          ? Effect.fail(unavailable(failure.message))
          : Effect.succeed(Option.none<PaymentMethod>())
      )
    )
  },
  authorize: (request) =>
    attempt(() =>
      stripe.paymentIntents.create(
        {
          amount: request.amount,
          currency: request.currency.toLowerCase(),
          payment_method: request.paymentMethod,
          allowed_payment_method_types: ["card"],
          confirm: true,
          capture_method: request.capture ? "automatic" : "manual",
          metadata: { [CALL_KEY_METADATA]: request.idempotencyKey }
        },
        { idempotencyKey: request.idempotencyKey }
      )
    ).pipe(
      Effect.flatMap((pi) =>
        Option.match(authorizationOf(pi), {
          // `processing`: the outcome arrives as an event (or as the answer to asking again).
          onNone: () => Effect.fail(unavailable(`payment intent ${pi.id} is ${pi.status}`)),
          onSome: (result) => Effect.succeed(result)
        })
      ),
      Effect.catchAll((failure) => {
        if (failure instanceof ProcessorUnavailable) return Effect.fail(failure)
        switch (failure._tag) {
          case "Card":
            return Effect.succeed<AuthorizationResult>({
              _tag: "Declined",
              code: failure.code,
              declineCode: failure.declineCode,
              message: failure.message
            })
          case "Refused":
            // A definite no that is not the card's (e.g. a payment method Stripe does not know).
            return Effect.succeed<AuthorizationResult>({
              _tag: "Declined",
              code: failure.code,
              declineCode: null,
              message: failure.message
            })
          case "Unavailable":
            return Effect.fail(unavailable(failure.message))
        }
      })
    ),
  // The customer authenticates at Stripe (Stripe.js or its redirect); the outcome arrives as an event.
  authenticate: Option.none(),
  capture: (request) =>
    settle(
      () =>
        stripe.paymentIntents.capture(
          request.processorReference,
          { amount_to_capture: request.amount },
          { idempotencyKey: request.idempotencyKey }
        ),
      (pi): SettlementResult =>
        pi.status === "succeeded"
          ? { _tag: "Succeeded", processorReference: pi.id }
          : { _tag: "Failed", code: "capture_failed", message: `Stripe left the payment ${pi.status}.` }
    ),
  void: (request) =>
    settle(
      () =>
        stripe.paymentIntents.cancel(
          request.processorReference,
          {},
          { idempotencyKey: request.idempotencyKey }
        ),
      (pi): SettlementResult =>
        pi.status === "canceled"
          ? { _tag: "Succeeded", processorReference: pi.id }
          : { _tag: "Failed", code: "cancel_failed", message: `Stripe left the payment ${pi.status}.` }
    ),
  refund: (request) => {
    const reason = refundReasonOf(request.reason)
    return settle(
      () =>
        stripe.refunds.create(
          {
            payment_intent: request.processorReference,
            amount: request.amount,
            ...(reason === undefined ? {} : { reason }),
            metadata: { [CALL_KEY_METADATA]: request.idempotencyKey }
          },
          { idempotencyKey: request.idempotencyKey }
        ),
      refundOutcomeOf
    )
  },
  ledger: Option.none()
})

// --- Signed events ------------------------------------------------------------------------------------

export const makeStripeWebhook = (stripe: Stripe, secret: Redacted.Redacted<string>): StripeWebhookShape => ({
  verify: (payload, signature) =>
    Effect.tryPromise({
      // Stripe's default tolerance: a signature older than 5 minutes is refused (replays).
      try: () => stripe.webhooks.constructEventAsync(payload, signature, Redacted.value(secret)),
      catch: (error) => (error instanceof Error ? error.message : String(error))
    })
})
