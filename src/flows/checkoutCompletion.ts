/**
 * The checkout-completion flow (design/FLOWS.md): payment intent → checkout → order, for every
 * payment that does NOT come through the checkout's own confirm route — an intent confirmed directly
 * (`POST /v1/payment-intents/:id/confirm` with its client secret, Stripe.js style), a 3-D Secure
 * answer, a confirmation the recovery worker finished after a crash. A process manager over the
 * payment intents' domain events (authorized, captured, action required, failed, canceled, and
 * refunded: a refund made on an order's payment directly is recorded on the order),
 * correlated by payment intent id: each becomes ONE command to the checkout context
 * (`CheckoutPort.paymentChanged`, id derived from the event), which brings the checkout the intent
 * belongs to in line with it, in the subscription batch's transaction — complete with its order when
 * paid, `processing` during 3-D Secure, open again when that failed, and for an EXPIRED checkout the
 * expiry worker re-armed to give the late payment back (refund when captured, void when authorized).
 *
 * Stateless (`persistence: "none"`): the choice between completing and giving back is made against
 * the checkout's CURRENT state under its row lock, in the transaction that acts on it — a state kept
 * here would only be a copy that can lag the expiry. Once-only rests on that command being
 * idempotent (a complete checkout stays complete with the same order; the refund's key is derived
 * from the checkout) and on the derived output ids. A crash between payment and order loses nothing:
 * the payment's event stays in the log and the subscription resumes from its checkpoint.
 *
 * One event per batch: a completion locks the checkout's row, the products and the order counter
 * (in that order, like the confirm route's); a batch completing two checkouts could hold the counter
 * while waiting for a row the confirm route holds — a deadlock. One per batch keeps the lock order.
 */
import { Effect } from "effect"
import { CheckoutPort } from "../checkout/index.js"
import { defineProcessManager, isTimedOut, outputId } from "../kernel/ProcessManager.js"
import {
  PaymentActionRequired,
  PaymentAuthorized,
  PaymentCaptured,
  PaymentFailed,
  PaymentIntentCanceled,
  RefundSucceeded
} from "../payments/index.js"
import { type CommandHandlers, processManagerSubscription } from "../processors/ProcessManagerRunner.js"

export interface CompletionCommands {
  readonly "checkout.payment_changed": { readonly paymentIntentId: string }
}

export const CheckoutCompletion = defineProcessManager<CompletionCommands>()({
  name: "checkout-completion",
  events: [
    PaymentAuthorized,
    PaymentCaptured,
    PaymentActionRequired,
    PaymentFailed,
    PaymentIntentCanceled,
    RefundSucceeded
  ],
  persistence: "none",
  correlate: (input) => input.data.paymentIntentId,
  initialState: undefined,
  decide: (input) =>
    isTimedOut(input)
      ? []
      : [
          {
            kind: "checkout.payment_changed" as const,
            id: outputId(input, "checkout.payment_changed"),
            input: { paymentIntentId: input.data.paymentIntentId }
          }
        ]
})

export const completionPorts: CommandHandlers<CompletionCommands, unknown, CheckoutPort> = {
  "checkout.payment_changed": (command, context) =>
    Effect.flatMap(CheckoutPort, (port) =>
      port.paymentChanged(command.input.paymentIntentId, context.metadata)
    )
}

/** The flow's subscription (`ROLE=worker|all`): payment intent events → checkout commands. */
export const checkoutCompletion = () =>
  processManagerSubscription(CheckoutCompletion, completionPorts, { source: "events", batchSize: 1 })
