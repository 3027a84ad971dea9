/**
 * The payments context's public face: what other contexts (checkout, orders, billing) may use —
 * its port (`PaymentsPort`: intents created in the caller's transaction, confirmations, cancels and
 * refunds through the processor, lookups), its read lookups, its objects and its public event
 * schemas. It knows nothing of them: they hold its ids and read its objects. Nothing else of
 * `payments/` is imported from outside it. The port is implemented in `port.ts`.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Data, type Effect, type Option } from "effect"
import type { EventMetadata } from "../eventstore/EventStore.js"
import type { EventDecodeError } from "../eventstore/errors.js"
import type { CommandError } from "../kernel/CommandRunner.js"
import type { Metadata } from "../kernel/Metadata.js"
import type {
  AmountTooLarge,
  ChargeAlreadyRefunded,
  ChargeNotRefundable,
  PaymentIntentNotFound,
  PaymentMethodMissing,
  PaymentNotFound,
  UnexpectedState
} from "./decider.js"
import type { CancellationReason, CaptureMethod, RefundReason } from "./events.js"
import type { PaymentIntentObject, RefundObject } from "./objects.js"
import type { AnsweredCall, StartedCall } from "./Payments.js"
import type { ProcessorUnavailable } from "./processor.js"

/** The most one payment can be (minor units): checkout totals and invoices are bounded by it. */
export {
  AmountTooLarge,
  ChargeAlreadyRefunded,
  ChargeNotRefundable,
  MAX_AMOUNT as MAX_PAYMENT_AMOUNT,
  PaymentIntentNotFound,
  PaymentMethodMissing,
  PaymentNotFound,
  refundIdFor,
  UnexpectedState
} from "./decider.js"
export * from "./events.js"
export type { PaymentIntentObject, PaymentObject, RefundObject } from "./objects.js"
export { ProcessorUnavailable } from "./processor.js"
export { findPayment, findPaymentIntent } from "./queries.js"

/** The processor does not know this payment method (a token or test card it cannot resolve). */
export class UnknownPaymentMethod extends Data.TaggedError("UnknownPaymentMethod")<{
  readonly paymentMethod: string
  readonly processor: string
}> {}

export interface NewIntentCommand {
  /** Minor units, 1 to 99,999,999. */
  readonly amount: number
  /** Uppercase ISO 4217. */
  readonly currency: string
  readonly customerId: string | null
  readonly captureMethod: CaptureMethod
  /** A processor token (`pm_card_visa`); the intent is then `requires_confirmation`. */
  readonly paymentMethod: string | null
  readonly metadata: Metadata
  readonly description?: string | null
  /**
   * What the intent's processor keys start with instead of its id: derived by the caller from a
   * request's `Idempotency-Key`, so the retry of a rolled-back request asks the processor with the
   * same keys (see `PaymentIntentCreated.callKeyPrefix`).
   */
  readonly callKeyPrefix?: string
}

export type IntentWithSecret = PaymentIntentObject & { readonly clientSecret: string }

/** What a confirmation came to: the intent after the processor's answer; a decline is data. */
export interface ConfirmOutcome {
  readonly intent: PaymentIntentObject
  /** The payment of the attempt made (or awaited, when a concurrent confirm made the call). */
  readonly paymentId: string
  /** That attempt was declined (the intent is back to `requires_payment_method`, `lastPaymentError` set). */
  readonly declined: boolean
}

export type PaymentsPortError = CommandError<never>

/**
 * A confirmation started with its intent's creation inside the caller's transaction
 * (`createConfirmingIntent`), for `callConfirmation` and `recordConfirmation` to complete after that
 * transaction commits.
 */
export interface StartedConfirmation {
  readonly paymentIntentId: string
  /** The payment of the attempt started. */
  readonly paymentId: string
  /** Payments' own record of the start; the caller only hands it back. */
  readonly call: StartedCall
}

/** A started confirmation the processor answered (`callConfirmation`), for `recordConfirmation`. */
export interface AnsweredConfirmation {
  readonly confirmation: StartedConfirmation
  /** Payments' own record of the answer; the caller only hands it back. */
  readonly answer: AnsweredCall
}

export interface PaymentsPortShape {
  /**
   * Creates an intent inside the CALLER's transaction (no processor call): `requires_payment_method`,
   * or `requires_confirmation` with a payment method. Answers it with its client secret (shown once).
   */
  readonly createIntent: (
    input: NewIntentCommand,
    metadata: EventMetadata
  ) => Effect.Effect<IntentWithSecret, UnknownPaymentMethod | ProcessorUnavailable | PaymentsPortError>
  /**
   * `createIntent`, and with a payment method also step 1 of its confirmation (the call recorded as
   * started, its safety net armed) in the same transaction: one transaction for what `createIntent`
   * then `confirm` take two. `confirmation` is null without a payment method. After the commit,
   * `callConfirmation` makes the call and `recordConfirmation` records its answer; if they never run
   * (a crash), the safety net does both.
   */
  readonly createConfirmingIntent: (
    input: NewIntentCommand,
    metadata: EventMetadata
  ) => Effect.Effect<
    { readonly intent: IntentWithSecret; readonly confirmation: StartedConfirmation | null },
    UnknownPaymentMethod | ProcessorUnavailable | PaymentsPortError
  >
  /**
   * Step 2 of a confirmation `createConfirmingIntent` started: the processor call. Must NOT run
   * inside a transaction. None when the processor could not be reached: the intent stays
   * `processing` and the safety net asks again under the same key.
   */
  readonly callConfirmation: (
    confirmation: StartedConfirmation
  ) => Effect.Effect<Option.Option<AnsweredConfirmation>, PaymentsPortError>
  /**
   * Step 3: the answer recorded (the safety net disarmed with it), JOINING the caller's transaction
   * so what the caller records of the outcome commits with it. A decline is an outcome
   * (`declined: true`). The first record of an answer decides on the intent as the start left it
   * (no read); a repeat (the caller's transaction run again after a conflict) reads the stream.
   */
  readonly recordConfirmation: (
    answered: AnsweredConfirmation,
    metadata: EventMetadata
  ) => Effect.Effect<ConfirmOutcome, PaymentsPortError>
  /**
   * Confirms: the three-step processor call (recorded as started, made, outcome recorded), or the
   * outcome of a concurrent confirmation's call. Must NOT run inside a transaction (the call would
   * hold it open). A decline is an outcome (`declined: true`), not a failure. `within`: the
   * caller's writes that follow from the outcome, run in the transaction that records it — only
   * when this very call records one (not when it awaited a concurrent confirmation's, or the
   * processor did not answer); a failure there rolls the record back with them (the safety net
   * records the answer later).
   */
  readonly confirm: (
    paymentIntentId: string,
    input: { readonly paymentMethod?: string | undefined },
    metadata: EventMetadata,
    within?: (outcome: ConfirmOutcome) => Effect.Effect<void, PaymentsPortError>
  ) => Effect.Effect<
    ConfirmOutcome,
    | UnknownPaymentMethod
    | ProcessorUnavailable
    | PaymentIntentNotFound
    | UnexpectedState
    | PaymentMethodMissing
    | PaymentsPortError
  >
  /**
   * Cancels the intent: an authorization (or a pending 3-D Secure) is voided at the processor first
   * (outside any transaction, like `confirm`); an intent never confirmed is canceled by one event.
   * Already canceled: answers it as it is. Succeeded (captured) → `UnexpectedState` (refund instead).
   */
  readonly cancel: (
    paymentIntentId: string,
    reason: CancellationReason | null,
    metadata: EventMetadata
  ) => Effect.Effect<PaymentIntentObject, PaymentIntentNotFound | UnexpectedState | PaymentsPortError>
  /**
   * Refunds a captured payment (all that remains when `amount` is null), never more than was
   * captured, even under concurrent refunds. `key` (the caller's, e.g. derived from its own ids)
   * makes a repeat a no-op that answers the first refund. A processor call, outside transactions.
   */
  readonly refund: (
    paymentId: string,
    input: { readonly amount: number | null; readonly reason: RefundReason | null; readonly key: string },
    metadata: EventMetadata
  ) => Effect.Effect<
    RefundObject,
    PaymentNotFound | ChargeNotRefundable | ChargeAlreadyRefunded | AmountTooLarge | PaymentsPortError
  >
  /**
   * Whether the processor knows a payment method token (fails `UnknownPaymentMethod` when not): for
   * a payment method stored now to be charged later (a subscription's), refused at once if it is bad.
   */
  readonly checkPaymentMethod: (
    paymentMethod: string
  ) => Effect.Effect<void, UnknownPaymentMethod | ProcessorUnavailable>
  /** The intent as its stream stands (inside a transaction: as of that transaction). */
  readonly find: (
    paymentIntentId: string
  ) => Effect.Effect<Option.Option<PaymentIntentObject>, EventDecodeError | SqlError>
  /**
   * The refunds of the intent's payments, oldest first, as its stream stands: whoever asked for
   * them (the refund routes or another context's `refund`). Empty for an unknown intent.
   */
  readonly refundsOf: (
    paymentIntentId: string
  ) => Effect.Effect<ReadonlyArray<PaymentRefundSummary>, EventDecodeError | SqlError>
}

/** A refund of one of an intent's payments (`refundsOf`). */
export interface PaymentRefundSummary {
  readonly refundId: string
  readonly paymentId: string
  readonly amount: number
  readonly reason: RefundReason | null
  readonly status: "pending" | "succeeded" | "failed"
}

export class PaymentsPort extends Context.Tag("payments/PaymentsPort")<PaymentsPort, PaymentsPortShape>() {}

/** The 402 a declined confirmation answers (with the intent embedded), for contexts that confirm. */
export { CardDeclined, orDieUnlessPaymentHttp, PaymentStateConflict } from "./errors.js"
