/**
 * The checkout context's public face: its event schemas, and the command the completion flow
 * (`flows/checkoutCompletion.ts`) sends it when a payment intent changes (`CheckoutPort`). Nothing
 * else of `checkout/` is imported from outside it.
 */
import { Context, type Effect } from "effect"
import type { EventMetadata } from "../eventstore/EventStore.js"
import type { CommandError } from "../kernel/CommandRunner.js"

export * from "./events.js"

export interface CheckoutPortShape {
  /**
   * A payment intent's status changed: the checkout it belongs to (if any) follows, in the caller's
   * transaction — completed (its order placed) when paid, `processing` during 3-D Secure, open again
   * when that failed; a payment of an expired checkout is handed to the expiry worker to give back.
   * Idempotent: asking again changes nothing.
   */
  readonly paymentChanged: (
    paymentIntentId: string,
    metadata: EventMetadata
  ) => Effect.Effect<void, CommandError<never>>
}

export class CheckoutPort extends Context.Tag("checkout/CheckoutPort")<CheckoutPort, CheckoutPortShape>() {}
