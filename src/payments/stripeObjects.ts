/**
 * Stripe's objects as ours, and the Stripe webhook verifier's tag: what the webhook route
 * (stripeEvents.ts) shares with the adapter (stripeProcessor.ts) without loading the `stripe` SDK —
 * only its types are imported here, so a service on the test processor never loads it.
 */
import { Context, type Effect, Option } from "effect"
import type Stripe from "stripe"
import type { NextAction } from "./events.js"
import type { AuthorizationResult, SettlementResult } from "./processor.js"

/** The metadata key of the idempotency key a Stripe object was created under. */
export const CALL_KEY_METADATA = "commerce_call_key"

export const nonEmpty = (value: string | null | undefined): string | null =>
  value === undefined || value === null || value === "" ? null : value

const nextActionOf = (pi: Stripe.PaymentIntent): NextAction => {
  const url = pi.next_action?.redirect_to_url?.url
  if (pi.next_action?.type === "redirect_to_url" && typeof url === "string")
    return { type: "redirect_to_url", url }
  return pi.client_secret === null
    ? { type: "use_stripe_sdk" }
    : { type: "use_stripe_sdk", clientSecret: pi.client_secret }
}

/** A Stripe PaymentIntent as the outcome of its confirmation; None while it is not final. */
export const authorizationOf = (pi: Stripe.PaymentIntent): Option.Option<AuthorizationResult> => {
  switch (pi.status) {
    case "succeeded":
      return Option.some({ _tag: "Authorized", processorReference: pi.id, captured: true })
    case "requires_capture":
      return Option.some({ _tag: "Authorized", processorReference: pi.id, captured: false })
    case "requires_action":
      return Option.some({ _tag: "ActionRequired", processorReference: pi.id, nextAction: nextActionOf(pi) })
    case "requires_payment_method": {
      const error = pi.last_payment_error
      return error === null
        ? Option.none()
        : Option.some({
            _tag: "Declined",
            code: nonEmpty(error.code) ?? "card_declined",
            declineCode: nonEmpty(error.decline_code),
            message: nonEmpty(error.message) ?? "Your card was declined."
          })
    }
    case "canceled":
      return Option.some({
        _tag: "Declined",
        code: "payment_intent_canceled",
        declineCode: null,
        message: "The payment was canceled at Stripe."
      })
    default:
      return Option.none()
  }
}

/**
 * A Stripe refund as our outcome. `pending` counts as done (Stripe has accepted it; card refunds
 * settle so): a later `failed` is logged by the webhook, not applied (README, "Running against Stripe").
 */
export const refundOutcomeOf = (refund: Stripe.Refund): SettlementResult =>
  refund.status === "failed" || refund.status === "canceled"
    ? {
        _tag: "Failed",
        code: "refund_failed",
        message: `Stripe could not refund it (${refund.failure_reason ?? refund.status}).`
      }
    : { _tag: "Succeeded", processorReference: refund.id }

// --- Signed events ------------------------------------------------------------------------------------

export interface StripeWebhookShape {
  /** The event, if `signature` (the `Stripe-Signature` header) signs exactly `payload` with our secret. */
  readonly verify: (payload: string, signature: string) => Effect.Effect<Stripe.Event, string>
}

/** The configured webhook verifier: None unless `PAYMENT_PROCESSOR=stripe` with `STRIPE_WEBHOOK_SECRET`. */
export class StripeWebhook extends Context.Tag("payments/StripeWebhook")<
  StripeWebhook,
  Option.Option<StripeWebhookShape>
>() {}
