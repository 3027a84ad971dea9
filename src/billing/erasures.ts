/**
 * Billing's part of a customer's erasure (`ROLE=worker|all`): on `customer.erased` their
 * subscriptions that are not over are canceled with nothing billed (`cancellationReason:
 * customer_deleted`), as Stripe's deletion of a customer cancels theirs — an erased customer is
 * charged nothing more. A checkpointed subscription over the log: the cancellations commit with its
 * checkpoint, so none is lost or made twice (a canceled subscription is left as it is), within the
 * worker's lag after the `DELETE /user/:id`.
 */
import { Effect, Either, Schema } from "effect"
import { CustomerErased } from "../customers/index.js"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { subscriptionProcessor } from "../processors/Subscription.js"
import { Billing } from "./Billing.js"

const ERASURES = "billing-customer-erasures"

const METADATA: EventMetadata = { actor: { type: "system", id: ERASURES } }

const decodeErased = Schema.decodeUnknownEither(CustomerErased.schema)

export const customerErasures = () =>
  subscriptionProcessor({
    name: ERASURES,
    source: "events",
    eventTypes: [CustomerErased.type],
    handle: (events) =>
      Effect.flatMap(Billing, (billing) =>
        Effect.forEach(
          events,
          (e) => {
            const erased = decodeErased(e.data)
            return Either.isLeft(erased)
              ? Effect.void
              : Effect.asVoid(billing.customerErased(erased.right.customerId, METADATA))
          },
          { discard: true }
        )
      )
  })
