/**
 * The built-in test processor (`PAYMENT_PROCESSOR=test`): no network, deterministic. It accepts
 * Stripe's test payment-method tokens and their public test card numbers (a number is turned into
 * its token at once; only the brand, last four digits and expiry are ever kept) and answers as Stripe
 * does for them: `pm_card_visa` succeeds, `pm_card_visa_chargeDeclined` is declined, the 3-D Secure
 * cards want authentication first (`POST /v1/test/payment-intents/:id/authenticate`)…
 *
 * Like a real processor it keeps what it did by idempotency key: a key asked again gets its first
 * answer, and the money moved by it moves once. Its references are a hash of the key, so even a new
 * process (after a crash) answers a repeated key the same way.
 */
import { createHash } from "node:crypto"
import { Effect, Option } from "effect"
import type { PaymentMethod } from "./events.js"
import type {
  AuthorizationResult,
  PaymentProcessorShape,
  ProcessorCall,
  SettlementResult
} from "./processor.js"

type CardOutcome =
  | { readonly _tag: "Approve" }
  | {
      readonly _tag: "Decline"
      readonly code: string
      readonly declineCode: string
      readonly message: string
    }
  | { readonly _tag: "Authenticate" }
  /** Charges succeed; refunds of them fail (Stripe's `pm_card_refundFail`). */
  | { readonly _tag: "RefundFails" }

export interface TestCard {
  readonly token: string
  readonly number: string
  readonly brand: string
  readonly outcome: CardOutcome
}

const approve: CardOutcome = { _tag: "Approve" }
const decline = (code: string, declineCode: string, message: string): CardOutcome => ({
  _tag: "Decline",
  code,
  declineCode,
  message
})

/** Stripe's test cards (https://docs.stripe.com/testing), token and number alike. */
export const TEST_CARDS: ReadonlyArray<TestCard> = [
  { token: "pm_card_visa", number: "4242424242424242", brand: "visa", outcome: approve },
  { token: "pm_card_mastercard", number: "5555555555554444", brand: "mastercard", outcome: approve },
  { token: "pm_card_amex", number: "378282246310005", brand: "amex", outcome: approve },
  {
    token: "pm_card_visa_chargeDeclined",
    number: "4000000000000002",
    brand: "visa",
    outcome: decline("card_declined", "generic_decline", "Your card was declined.")
  },
  {
    token: "pm_card_visa_chargeDeclinedInsufficientFunds",
    number: "4000000000009995",
    brand: "visa",
    outcome: decline("card_declined", "insufficient_funds", "Your card has insufficient funds.")
  },
  {
    token: "pm_card_visa_chargeDeclinedLostCard",
    number: "4000000000009987",
    brand: "visa",
    outcome: decline("card_declined", "lost_card", "Your card was declined.")
  },
  {
    token: "pm_card_visa_chargeDeclinedStolenCard",
    number: "4000000000009979",
    brand: "visa",
    outcome: decline("card_declined", "stolen_card", "Your card was declined.")
  },
  {
    token: "pm_card_chargeDeclinedExpiredCard",
    number: "4000000000000069",
    brand: "visa",
    outcome: decline("expired_card", "expired_card", "Your card has expired.")
  },
  {
    token: "pm_card_chargeDeclinedIncorrectCvc",
    number: "4000000000000127",
    brand: "visa",
    outcome: decline("incorrect_cvc", "incorrect_cvc", "Your card's security code is incorrect.")
  },
  {
    token: "pm_card_chargeDeclinedProcessingError",
    number: "4000000000000119",
    brand: "visa",
    outcome: decline("processing_error", "processing_error", "An error occurred while processing your card.")
  },
  {
    token: "pm_card_authenticationRequired",
    number: "4000002760003184",
    brand: "visa",
    outcome: { _tag: "Authenticate" }
  },
  {
    token: "pm_card_threeDSecure2Required",
    number: "4000000000003220",
    brand: "visa",
    outcome: { _tag: "Authenticate" }
  },
  { token: "pm_card_refundFail", number: "4000000000005126", brand: "visa", outcome: { _tag: "RefundFails" } }
]

/** Test cards never expire: Stripe accepts any future date; this one is fixed so answers repeat. */
const EXP_MONTH = 12
const EXP_YEAR = 2034

const BY_TOKEN = new Map(TEST_CARDS.map((c) => [c.token, c]))
const BY_NUMBER = new Map(TEST_CARDS.map((c) => [c.number, c]))

/** A card by token or by number (spaces and dashes between the digits allowed). */
export const findTestCard = (input: string): TestCard | undefined => {
  const trimmed = input.trim()
  return BY_TOKEN.get(trimmed) ?? BY_NUMBER.get(trimmed.replace(/[\s-]/g, ""))
}

const paymentMethodOf = (card: TestCard): PaymentMethod => ({
  token: card.token,
  brand: card.brand,
  last4: card.number.slice(-4),
  expMonth: EXP_MONTH,
  expYear: EXP_YEAR
})

/** The same key always yields the same reference, in this process or the next. */
const referenceOf = (kind: string, key: string) =>
  `test_${kind}_${createHash("sha256").update(key).digest("hex").slice(0, 24)}`

/** What the processor holds for one authorization. */
interface Charge {
  readonly card: TestCard
  readonly amount: number
  readonly capture: boolean
  status: "requires_action" | "authorized" | "captured" | "voided" | "declined"
  captured: number
  refunded: number
}

export const makeTestProcessor = (): PaymentProcessorShape => {
  /** Every key asked, in the order first asked, with its first answer and how often it was asked. */
  const log = new Map<string, { call: Omit<ProcessorCall, "requests">; requests: number }>()
  const charges = new Map<string, Charge>()

  /**
   * Answers a key: its first answer again (money untouched), or the new answer `decide` makes.
   * Synchronous, so two concurrent requests of one key cannot both decide.
   */
  const remembering =
    <R extends AuthorizationResult | SettlementResult>(answers: Map<string, R>) =>
    (operation: ProcessorCall["operation"], key: string, amount: number, decide: () => R): Effect.Effect<R> =>
      Effect.sync(() => {
        const known = answers.get(key)
        const logged = log.get(key)
        if (known !== undefined) {
          if (logged !== undefined) logged.requests++
          return known
        }
        const result = decide()
        answers.set(key, result)
        log.set(key, { call: { operation, idempotencyKey: key, amount, result }, requests: 1 })
        return result
      })
  const authorizing = remembering(new Map<string, AuthorizationResult>())
  const settling = remembering(new Map<string, SettlementResult>())

  const failed = (code: string, message: string): SettlementResult => ({ _tag: "Failed", code, message })

  const authorizationOf = (reference: string, charge: Charge): AuthorizationResult => {
    charge.status = charge.capture ? "captured" : "authorized"
    if (charge.capture) charge.captured = charge.amount
    return { _tag: "Authorized", processorReference: reference, captured: charge.capture }
  }

  return {
    name: "test",
    resolvePaymentMethod: (input) =>
      Effect.succeed(Option.map(Option.fromNullable(findTestCard(input)), paymentMethodOf)),
    authorize: (request) =>
      authorizing("authorize", request.idempotencyKey, request.amount, (): AuthorizationResult => {
        const card = findTestCard(request.paymentMethod)
        if (card === undefined)
          return {
            _tag: "Declined",
            code: "card_declined",
            declineCode: "generic_decline",
            message: "Unknown card."
          }
        const reference = referenceOf("ch", request.idempotencyKey)
        const charge: Charge = {
          card,
          amount: request.amount,
          capture: request.capture,
          status: "declined",
          captured: 0,
          refunded: 0
        }
        charges.set(reference, charge)
        switch (card.outcome._tag) {
          case "Decline":
            return {
              _tag: "Declined",
              code: card.outcome.code,
              declineCode: card.outcome.declineCode,
              message: card.outcome.message
            }
          case "Authenticate":
            charge.status = "requires_action"
            return {
              _tag: "ActionRequired",
              processorReference: reference,
              nextAction: {
                type: "use_test_authentication",
                url: `/v1/test/payment-intents/${request.paymentIntentId}/authenticate`
              }
            }
          default:
            return authorizationOf(reference, charge)
        }
      }),
    authenticate: Option.some((request) =>
      authorizing("authenticate", request.idempotencyKey, 0, (): AuthorizationResult => {
        const charge = charges.get(request.processorReference)
        if (charge === undefined || charge.status !== "requires_action")
          return {
            _tag: "Declined",
            code: "payment_intent_authentication_failure",
            declineCode: null,
            message: "There is no authentication pending for this payment."
          }
        if (request.outcome === "fail") {
          charge.status = "declined"
          return {
            _tag: "Declined",
            code: "payment_intent_authentication_failure",
            declineCode: null,
            message: "The customer failed 3-D Secure authentication."
          }
        }
        return authorizationOf(request.processorReference, charge)
      })
    ),
    capture: (request) =>
      settling("capture", request.idempotencyKey, request.amount, (): SettlementResult => {
        const charge = charges.get(request.processorReference)
        if (charge === undefined || charge.status !== "authorized")
          return failed("charge_not_capturable", "This payment is not authorized.")
        if (request.amount > charge.amount)
          return failed("amount_too_large", "The capture exceeds the authorized amount.")
        charge.status = "captured"
        charge.captured = request.amount
        return { _tag: "Succeeded", processorReference: request.processorReference }
      }),
    void: (request) =>
      settling("void", request.idempotencyKey, 0, (): SettlementResult => {
        const charge = charges.get(request.processorReference)
        if (charge === undefined || (charge.status !== "authorized" && charge.status !== "requires_action"))
          return failed("charge_not_voidable", "This payment has no authorization to void.")
        charge.status = "voided"
        return { _tag: "Succeeded", processorReference: request.processorReference }
      }),
    refund: (request) =>
      settling("refund", request.idempotencyKey, request.amount, (): SettlementResult => {
        const charge = charges.get(request.processorReference)
        if (charge === undefined || charge.status !== "captured")
          return failed("charge_not_refundable", "This payment was not captured.")
        if (charge.card.outcome._tag === "RefundFails")
          return failed("refund_failed", "The card's issuer refused the refund.")
        if (charge.refunded + request.amount > charge.captured)
          return failed("amount_too_large", "The refund exceeds what is left of the payment.")
        charge.refunded += request.amount
        return { _tag: "Succeeded", processorReference: referenceOf("re", request.idempotencyKey) }
      }),
    ledger: Option.some({
      calls: () => [...log.values()].map(({ call, requests }) => ({ ...call, requests }))
    })
  }
}
