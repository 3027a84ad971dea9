/**
 * The payment processor behind the payments context (research commerce-design §3.1): authorize,
 * capture, void and refund, each idempotent on a key WE derive from our own ids and committed state
 * (`pi_…:confirm:1`, `pi_…:capture`, `pay_…:refund:3`), so asking again after a crash, a time-out or
 * a rolled-back request returns the first answer and never moves money twice. Nothing above this
 * interface knows which processor it is; an adapter (Stripe) passes the key on as its own
 * `Idempotency-Key`.
 */
import { Context, Data, Effect, Layer, Option } from "effect"
import { AppConfig } from "../config.js"
import type { NextAction, PaymentMethod, RefundReason } from "./events.js"
import { StripeWebhook } from "./stripeObjects.js"
import { testProcessor } from "./testProcessor.js"

export interface AuthorizeRequest {
  readonly idempotencyKey: string
  readonly paymentIntentId: string
  readonly amount: number
  readonly currency: string
  /** The payment method's token (never a card number). */
  readonly paymentMethod: string
  /** Capture in the same call (`captureMethod: automatic`). */
  readonly capture: boolean
}

export interface AuthenticateRequest {
  readonly idempotencyKey: string
  readonly paymentIntentId: string
  readonly processorReference: string
  readonly outcome: "approve" | "fail"
  readonly capture: boolean
}

export interface CaptureRequest {
  readonly idempotencyKey: string
  readonly processorReference: string
  readonly amount: number
}

export interface VoidRequest {
  readonly idempotencyKey: string
  readonly processorReference: string
}

export interface RefundRequest {
  readonly idempotencyKey: string
  readonly processorReference: string
  readonly amount: number
  readonly reason: RefundReason | null
}

/** What an authorization (or a completed authentication) came to. */
export type AuthorizationResult =
  | { readonly _tag: "Authorized"; readonly processorReference: string; readonly captured: boolean }
  | { readonly _tag: "ActionRequired"; readonly processorReference: string; readonly nextAction: NextAction }
  | {
      readonly _tag: "Declined"
      /** Stripe's error code: `card_declined`, `expired_card`, `incorrect_cvc`, `processing_error`… */
      readonly code: string
      /** Stripe's decline code: `generic_decline`, `insufficient_funds`, `lost_card`… */
      readonly declineCode: string | null
      readonly message: string
    }

/** What a capture, void or refund came to. */
export type SettlementResult =
  | { readonly _tag: "Succeeded"; readonly processorReference: string }
  | { readonly _tag: "Failed"; readonly code: string; readonly message: string }

/** The processor could not be reached or did not answer: the call's outcome is unknown, ask again. */
export class ProcessorUnavailable extends Data.TaggedError("ProcessorUnavailable")<{
  readonly message: string
}> {}

/** One call as the test processor recorded it. */
export interface ProcessorCall {
  readonly operation: "authorize" | "authenticate" | "capture" | "void" | "refund"
  readonly idempotencyKey: string
  readonly amount: number
  /** The first answer to this key, which every repeat of it gets again. */
  readonly result: AuthorizationResult | SettlementResult
  /** How many times the key was asked in all (1 + repeats). */
  readonly requests: number
}

/** The test processor's record of its calls, by idempotency key, in the order first asked. */
export interface ProcessorLedger {
  /** The calls whose key starts with `prefix` (all by default). */
  readonly calls: (prefix?: string) => Effect.Effect<ReadonlyArray<ProcessorCall>>
}

export interface PaymentProcessorShape {
  readonly name: string
  /**
   * The payment method a client's `paymentMethod` names (a token, or a test card number for the
   * test processor), or None for one this processor does not know: refused before any charge. The
   * test processor knows its tokens by heart; the Stripe adapter retrieves the PaymentMethod (its
   * brand, last four digits and expiry), and fails with `ProcessorUnavailable` when Stripe does not
   * answer.
   */
  readonly resolvePaymentMethod: (
    input: string
  ) => Effect.Effect<Option.Option<PaymentMethod>, ProcessorUnavailable>
  readonly authorize: (request: AuthorizeRequest) => Effect.Effect<AuthorizationResult, ProcessorUnavailable>
  /**
   * Completes a `requires_action` authorization with the customer's answer. Only processors that
   * let the service itself play the customer's bank have it (the test processor): the routes of
   * `/v1/test` exist only with them.
   */
  readonly authenticate: Option.Option<
    (request: AuthenticateRequest) => Effect.Effect<AuthorizationResult, ProcessorUnavailable>
  >
  readonly capture: (request: CaptureRequest) => Effect.Effect<SettlementResult, ProcessorUnavailable>
  readonly void: (request: VoidRequest) => Effect.Effect<SettlementResult, ProcessorUnavailable>
  readonly refund: (request: RefundRequest) => Effect.Effect<SettlementResult, ProcessorUnavailable>
  /** The calls made so far (the test processor keeps them; others answer None). */
  readonly ledger: Option.Option<ProcessorLedger>
}

export class PaymentProcessor extends Context.Tag("payments/PaymentProcessor")<
  PaymentProcessor,
  PaymentProcessorShape
>() {}

/** The processor `PAYMENT_PROCESSOR` names (config.ts refuses to start without one in production). */
export const PaymentProcessorLive = Layer.scopedContext(
  Effect.flatMap(AppConfig, (config) => {
    switch (config.payments.processor) {
      case "test":
        return Effect.map(testProcessor, (processor) =>
          Context.make(PaymentProcessor, processor).pipe(Context.add(StripeWebhook, Option.none()))
        )
      case "stripe":
        return Option.match(config.payments.stripe, {
          onNone: () => Effect.dieMessage("PAYMENT_PROCESSOR=stripe without its settings (config.ts)"),
          onSome: (settings) =>
            Effect.gen(function* () {
              // Loaded only here: the SDK costs a quarter of a second of start-up to services without it.
              const { makeStripe, makeStripeProcessor, makeStripeWebhook, stripeProcessorName } =
                yield* Effect.promise(() => import("./stripeProcessor.js"))
              const stripe = makeStripe(settings)
              if (Option.isNone(settings.webhookSecret))
                yield* Effect.logWarning(
                  "payments: STRIPE_WEBHOOK_SECRET is not set — POST /v1/processor-events/stripe answers 404, " +
                    "so 3-D Secure payments completed at Stripe are never recorded here"
                )
              return Context.make(
                PaymentProcessor,
                makeStripeProcessor(stripe, stripeProcessorName(settings))
              ).pipe(
                Context.add(
                  StripeWebhook,
                  Option.map(settings.webhookSecret, (secret) => makeStripeWebhook(stripe, secret))
                )
              )
            })
        })
    }
  })
)
