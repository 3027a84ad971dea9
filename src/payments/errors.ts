/**
 * The payments context's own HTTP errors: the one error body (design/API.md) with, as Stripe's do,
 * the object the error is about embedded — a declined card answers 402 `card_error` with `code`,
 * `declineCode` and the payment intent (or payment) as it now stands, so a client never needs a
 * second request to learn the state; a command on the wrong state answers 409 with the intent too.
 */
import { HttpApiSchema } from "@effect/platform"
import { Effect, Schema } from "effect"
import { fastEncodeSync } from "../base/FastEncode.js"
import { ErrorDetail, isHttpError } from "../http/errors.js"
import { PaymentIntentObject, PaymentObject } from "./objects.js"

/** An intent as an error embeds it (with its client secret when the failing request created it). */
const EmbeddedIntent = Schema.Struct({
  ...PaymentIntentObject.fields,
  clientSecret: Schema.optional(Schema.String)
})

interface Embedded {
  readonly paymentIntent?: typeof EmbeddedIntent.Type
  readonly payment?: PaymentObject
}

const encodeIntent = fastEncodeSync(EmbeddedIntent)
const encodePayment = fastEncodeSync(PaymentObject)

/** The embedded objects in their wire form (the error schema carries them as plain JSON). */
const embed = (embedded: Embedded) => ({
  ...(embedded.paymentIntent === undefined ? {} : { paymentIntent: encodeIntent(embedded.paymentIntent) }),
  ...(embedded.payment === undefined ? {} : { payment: encodePayment(embedded.payment) })
})

export class CardDeclined extends Schema.TaggedError<CardDeclined>()(
  "CardDeclined",
  { error: ErrorDetail },
  HttpApiSchema.annotations({
    status: 402,
    description: "The card was declined (type card_error, with declineCode and the object embedded)"
  })
) {
  static of = (input: {
    readonly code: string
    readonly declineCode: string | null
    readonly message: string
    readonly embedded: Embedded
  }) =>
    new CardDeclined({
      error: {
        type: "card_error",
        code: input.code,
        message: input.message,
        ...(input.declineCode === null ? {} : { declineCode: input.declineCode }),
        ...embed(input.embedded)
      }
    })
}

export class PaymentStateConflict extends Schema.TaggedError<PaymentStateConflict>()(
  "PaymentStateConflict",
  { error: ErrorDetail },
  HttpApiSchema.annotations({
    status: 409,
    description: "Not possible in the object's current state (the object embedded)"
  })
) {
  static of = (input: { readonly code: string; readonly message: string; readonly embedded: Embedded }) =>
    new PaymentStateConflict({
      error: {
        type: "invalid_request_error",
        code: input.code,
        message: input.message,
        ...embed(input.embedded)
      }
    })
}

const isPaymentHttpError = (error: unknown) =>
  isHttpError(error) || error instanceof CardDeclined || error instanceof PaymentStateConflict

/**
 * Keeps the HTTP errors (the shared ones and this context's) and turns everything else into a
 * defect: a logged 500 without internals. Domain errors are mapped before this.
 */
export const orDieUnlessPaymentHttp = <A, E, R>(
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, Extract<E, { readonly error: unknown }>, R> =>
  Effect.catchAll(self, (error) =>
    isPaymentHttpError(error) && isErrorOf<E>(error) ? Effect.fail(error) : Effect.die(error)
  )

const isErrorOf = <E>(error: E): error is Extract<E, { readonly error: unknown }> =>
  typeof error === "object" && error !== null && "error" in error
