/**
 * The built-in test processor (`PAYMENT_PROCESSOR=test`): no network, deterministic. It accepts
 * Stripe's test payment-method tokens and their public test card numbers (a number is turned into
 * its token at once; only the brand, last four digits and expiry are ever kept) and answers as Stripe
 * does for them: `pm_card_visa` succeeds, `pm_card_visa_chargeDeclined` is declined, the 3-D Secure
 * cards want authentication first (`POST /v1/test/payment-intents/:id/authenticate`)…
 *
 * Like a real processor it keeps what it did by idempotency key, on ITS side of the wire: the
 * answers and the charges are rows of their own (migration 0018), written outside the service's
 * transactions, so a key asked again — by this process, another one, or one started after a crash —
 * gets its first answer and moves no money twice, and a charge authorized before a restart can still
 * be captured, voided or refunded. On PostgreSQL it has a pool of its own (two connections, so a
 * request holding a connection in its transaction never waits for one the processor needs); on the
 * embedded database (one connection, one process) its statements join the caller's transaction when
 * there is one: a rolled-back request then takes the processor's record with it — the charge never
 * happened — which a single process cannot tell from the processor forgetting a call that moved
 * nothing.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Layer, Option, Schema, type Scope } from "effect"
import { sha256Hex } from "../base/Sha256.js"
import { AppConfig } from "../config.js"
import { postgresLayer } from "../db/Database.js"
import { detached } from "../db/Transaction.js"
import { NextAction, type PaymentMethod } from "./events.js"
import {
  type AuthorizationResult,
  type PaymentProcessorShape,
  type ProcessorCall,
  ProcessorUnavailable,
  type SettlementResult
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
const referenceOf = (kind: string, key: string) => `test_${kind}_${sha256Hex(key).slice(0, 24)}`

type ChargeStatus = "requires_action" | "authorized" | "captured" | "voided" | "declined"

/** What the processor holds for one authorization (a row of `test_processor_charges`). */
interface Charge {
  readonly card: TestCard
  readonly amount: number
  readonly capture: boolean
  readonly status: ChargeStatus
  readonly captured: number
  readonly refunded: number
}

const Operation = Schema.Literal("authorize", "authenticate", "capture", "void", "refund")

/** The answers as stored (JSON), decoded back into the processor's result types. */
const AuthorizationResultJson = Schema.Union(
  Schema.TaggedStruct("Authorized", { processorReference: Schema.String, captured: Schema.Boolean }),
  Schema.TaggedStruct("ActionRequired", { processorReference: Schema.String, nextAction: NextAction }),
  Schema.TaggedStruct("Declined", {
    code: Schema.String,
    declineCode: Schema.NullOr(Schema.String),
    message: Schema.String
  })
)
const SettlementResultJson = Schema.Union(
  Schema.TaggedStruct("Succeeded", { processorReference: Schema.String }),
  Schema.TaggedStruct("Failed", { code: Schema.String, message: Schema.String })
)
const decodeAuthorization = Schema.decodeUnknown(AuthorizationResultJson)
const decodeSettlement = Schema.decodeUnknown(SettlementResultJson)
const decodeCall = Schema.decodeUnknown(
  Schema.Struct({
    idempotencyKey: Schema.String,
    operation: Operation,
    amount: Schema.Number,
    result: Schema.Union(AuthorizationResultJson, SettlementResultJson),
    requests: Schema.Number
  })
)
const ChargeRow = Schema.Struct({
  card: Schema.String,
  amount: Schema.Number,
  capture: Schema.Boolean,
  status: Schema.Literal("requires_action", "authorized", "captured", "voided", "declined"),
  captured: Schema.Number,
  refunded: Schema.Number
})
const decodeCharge = Schema.decodeUnknown(ChargeRow)

/** Runs the processor's statements where they belong (its own pool, or the embedded connection). */
type Run = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) => Effect.Effect<A, E>

const CALLS = "payments.test_processor_calls"
const CHARGES = "payments.test_processor_charges"

const unavailable = (error: SqlError | { readonly message: string }) =>
  new ProcessorUnavailable({ message: `test processor: ${error.message}` })

/** The processor over `run` (see `testProcessor` for where its statements go). */
export const makeTestProcessor = (run: Run): PaymentProcessorShape => {
  const json = (value: unknown) => JSON.stringify(value)

  /** The first answer to `key`, counting this request, if it was asked before. */
  const repeated = (key: string) =>
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      Effect.map(
        sql<{ result: unknown }>`UPDATE ${sql(CALLS)} SET requests = requests + 1
          WHERE idempotency_key = ${key} RETURNING result`,
        (rows) => Option.fromNullable(rows[0]).pipe(Option.map((r) => r.result))
      )
    )

  /** Records `result` as the answer to `key` (or, when a racing request recorded one first, that). */
  const record = (operation: ProcessorCall["operation"], key: string, amount: number, result: unknown) =>
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      Effect.map(
        sql<{ result: unknown }>`INSERT INTO ${sql(CALLS)} (idempotency_key, operation, amount, result)
          VALUES (${key}, ${operation}, ${amount}, ${json(result)}::jsonb)
          ON CONFLICT (idempotency_key) DO UPDATE SET requests = ${sql(CALLS)}.requests + 1
          RETURNING result`,
        (rows) => rows[0]?.result ?? result
      )
    )

  const loadCharge = (reference: string) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql`SELECT card, amount, capture, status, captured, refunded
        FROM ${sql(CHARGES)} WHERE processor_reference = ${reference} FOR UPDATE`
      if (rows[0] === undefined) return undefined
      const row = yield* decodeCharge(rows[0])
      const card = findTestCard(row.card)
      if (card === undefined) return undefined
      const charge: Charge = { ...row, card }
      return charge
    })

  const saveCharge = (reference: string, charge: Charge) =>
    Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql`UPDATE ${sql(CHARGES)} SET status = ${charge.status}, captured = ${charge.captured},
        refunded = ${charge.refunded} WHERE processor_reference = ${reference}`
    )

  /**
   * A call that decides on a charge's state (capture, void, refund, authentication): one transaction
   * that locks the charge, answers a repeated key with its first answer, or decides, changes the charge
   * and records the answer.
   */
  const onCharge = <R>(
    operation: ProcessorCall["operation"],
    key: string,
    amount: number,
    reference: string,
    decide: (charge: Charge | undefined) => { readonly result: R; readonly charge?: Charge },
    decode: (u: unknown) => Effect.Effect<R, { readonly message: string }>
  ): Effect.Effect<R, ProcessorUnavailable> =>
    run(
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql.withTransaction(
          Effect.gen(function* () {
            const charge = yield* loadCharge(reference)
            const known = yield* repeated(key)
            if (Option.isSome(known)) return yield* decode(known.value)
            const decided = decide(charge)
            if (decided.charge !== undefined) yield* saveCharge(reference, decided.charge)
            return yield* decode(yield* record(operation, key, amount, decided.result))
          })
        )
      )
    ).pipe(Effect.mapError(unavailable))

  const failed = (code: string, message: string): SettlementResult => ({ _tag: "Failed", code, message })

  const authorized = (reference: string, charge: Charge) => ({
    result: { _tag: "Authorized", processorReference: reference, captured: charge.capture } as const,
    charge: {
      ...charge,
      status: charge.capture ? ("captured" as const) : ("authorized" as const),
      captured: charge.capture ? charge.amount : 0
    }
  })

  return {
    name: "test",
    resolvePaymentMethod: (input) =>
      Effect.succeed(Option.map(Option.fromNullable(findTestCard(input)), paymentMethodOf)),
    /**
     * ONE statement: the answer (a pure function of the card and the key) recorded under the key —
     * or the first answer when the key was asked before — with the charge it creates.
     */
    authorize: (request) => {
      const card = findTestCard(request.paymentMethod)
      const reference = referenceOf("ch", request.idempotencyKey)
      const status: ChargeStatus =
        card === undefined || card.outcome._tag === "Decline"
          ? "declined"
          : card.outcome._tag === "Authenticate"
            ? "requires_action"
            : request.capture
              ? "captured"
              : "authorized"
      const result: AuthorizationResult =
        card === undefined
          ? {
              _tag: "Declined",
              code: "card_declined",
              declineCode: "generic_decline",
              message: "Unknown card."
            }
          : card.outcome._tag === "Decline"
            ? {
                _tag: "Declined",
                code: card.outcome.code,
                declineCode: card.outcome.declineCode,
                message: card.outcome.message
              }
            : card.outcome._tag === "Authenticate"
              ? {
                  _tag: "ActionRequired",
                  processorReference: reference,
                  nextAction: {
                    type: "use_test_authentication",
                    url: `/v1/test/payment-intents/${request.paymentIntentId}/authenticate`
                  }
                }
              : { _tag: "Authorized", processorReference: reference, captured: request.capture }
      return run(
        Effect.flatMap(
          SqlClient.SqlClient,
          (sql) =>
            sql<{ result: unknown }>`WITH call AS (
              INSERT INTO ${sql(CALLS)} (idempotency_key, operation, amount, result)
              VALUES (${request.idempotencyKey}, 'authorize', ${request.amount}, ${json(result)}::jsonb)
              ON CONFLICT (idempotency_key) DO UPDATE SET requests = ${sql(CALLS)}.requests + 1
              RETURNING result, requests),
            charge AS (
              INSERT INTO ${sql(CHARGES)} (processor_reference, card, amount, capture, status, captured)
              SELECT ${reference}, ${card?.token ?? ""}, ${request.amount}, ${request.capture}, ${status},
                ${status === "captured" ? request.amount : 0}
              FROM call WHERE call.requests = 1 AND ${card !== undefined}
              ON CONFLICT (processor_reference) DO NOTHING)
            SELECT result FROM call`
        )
      ).pipe(
        Effect.flatMap((rows) => decodeAuthorization(rows[0]?.result ?? result)),
        Effect.mapError(unavailable)
      )
    },
    authenticate: Option.some((request) =>
      onCharge(
        "authenticate",
        request.idempotencyKey,
        0,
        request.processorReference,
        (charge): { result: AuthorizationResult; charge?: Charge } => {
          if (charge === undefined || charge.status !== "requires_action")
            return {
              result: {
                _tag: "Declined",
                code: "payment_intent_authentication_failure",
                declineCode: null,
                message: "There is no authentication pending for this payment."
              }
            }
          if (request.outcome === "fail")
            return {
              result: {
                _tag: "Declined",
                code: "payment_intent_authentication_failure",
                declineCode: null,
                message: "The customer failed 3-D Secure authentication."
              },
              charge: { ...charge, status: "declined" }
            }
          return authorized(request.processorReference, charge)
        },
        decodeAuthorization
      )
    ),
    capture: (request) =>
      onCharge(
        "capture",
        request.idempotencyKey,
        request.amount,
        request.processorReference,
        (charge): { result: SettlementResult; charge?: Charge } => {
          if (charge === undefined || charge.status !== "authorized")
            return { result: failed("charge_not_capturable", "This payment is not authorized.") }
          if (request.amount > charge.amount)
            return { result: failed("amount_too_large", "The capture exceeds the authorized amount.") }
          return {
            result: { _tag: "Succeeded", processorReference: request.processorReference },
            charge: { ...charge, status: "captured", captured: request.amount }
          }
        },
        decodeSettlement
      ),
    void: (request) =>
      onCharge(
        "void",
        request.idempotencyKey,
        0,
        request.processorReference,
        (charge): { result: SettlementResult; charge?: Charge } => {
          if (charge === undefined || (charge.status !== "authorized" && charge.status !== "requires_action"))
            return { result: failed("charge_not_voidable", "This payment has no authorization to void.") }
          return {
            result: { _tag: "Succeeded", processorReference: request.processorReference },
            charge: { ...charge, status: "voided" }
          }
        },
        decodeSettlement
      ),
    refund: (request) =>
      onCharge(
        "refund",
        request.idempotencyKey,
        request.amount,
        request.processorReference,
        (charge): { result: SettlementResult; charge?: Charge } => {
          if (charge === undefined || charge.status !== "captured")
            return { result: failed("charge_not_refundable", "This payment was not captured.") }
          if (charge.card.outcome._tag === "RefundFails")
            return { result: failed("refund_failed", "The card's issuer refused the refund.") }
          if (charge.refunded + request.amount > charge.captured)
            return { result: failed("amount_too_large", "The refund exceeds what is left of the payment.") }
          return {
            result: { _tag: "Succeeded", processorReference: referenceOf("re", request.idempotencyKey) },
            charge: { ...charge, refunded: charge.refunded + request.amount }
          }
        },
        decodeSettlement
      ),
    ledger: Option.some({
      calls: (prefix = "") =>
        run(
          Effect.flatMap(
            SqlClient.SqlClient,
            (sql) =>
              sql`SELECT idempotency_key AS "idempotencyKey", operation, amount, result, requests
              FROM ${sql(CALLS)} WHERE starts_with(idempotency_key, ${prefix}) ORDER BY seq`
          )
        ).pipe(
          Effect.flatMap((rows) => Effect.forEach(rows, (row) => decodeCall(row))),
          Effect.orDie
        )
    })
  }
}

/**
 * The test processor as `PAYMENT_PROCESSOR=test` runs it: on PostgreSQL over a pool of its own (two
 * connections), its statements outside any transaction of the caller; on the embedded database
 * (one connection) over the service's connection, joined to the caller's transaction if any.
 */
export const testProcessor: Effect.Effect<
  PaymentProcessorShape,
  never,
  AppConfig | SqlClient.SqlClient | Scope.Scope
> = Effect.gen(function* () {
  const config = yield* AppConfig
  const shared = yield* SqlClient.SqlClient
  // A server taking one connection (the embedded database, or a proxy in front of it) has no second
  // one to give: the processor's statements share the service's.
  if (Option.isNone(config.databaseUrl) || config.databaseMaxConnections <= 1)
    return makeTestProcessor((effect) => Effect.provideService(effect, SqlClient.SqlClient, shared))
  const own = yield* Effect.orDie(Layer.build(postgresLayer(config.databaseUrl.value, 2, false)))
  const client = Context.get(own, SqlClient.SqlClient)
  return makeTestProcessor((effect) => detached(Effect.provideService(effect, SqlClient.SqlClient, client)))
})
