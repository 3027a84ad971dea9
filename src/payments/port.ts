/**
 * The payments port (`PaymentsPort` in `index.ts`): the payment intents' commands for other contexts
 * (checkout, orders), with domain input and domain errors, on the very internals of `Payments.ts` —
 * one state machine (the decider), one three-step processor call (record the start, call, record the
 * outcome; the recovery worker as the safety net). Nothing here talks HTTP.
 */
import { randomBytes } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Option } from "effect"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { type CommandError, CommandRunner } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import {
  type IntentState,
  intentObjectOf,
  type PaymentError,
  PaymentIntentDecider,
  PaymentNotFound,
  paymentIntentStream,
  refundIdFor,
  refundObjectOf
} from "./decider.js"
import {
  type AnsweredConfirmation,
  type ConfirmOutcome,
  type IntentWithSecret,
  PaymentsPort,
  type StartedConfirmation,
  UnknownPaymentMethod
} from "./index.js"
import { makePayments } from "./Payments.js"
import { PaymentProcessor } from "./processor.js"
import { selectPayment } from "./queries.js"

type Tag = PaymentError["_tag"]

/**
 * Keeps the domain errors a port operation answers with (`keep`) and makes every other one a defect:
 * they cannot happen for that operation (a bug), and the port's callers must not have to handle them.
 */
const only =
  <K extends PaymentError>(keep: (error: PaymentError) => error is K) =>
  <A, R>(
    self: Effect.Effect<A, CommandError<PaymentError>, R>
  ): Effect.Effect<A, K | CommandError<never>, R> =>
    Effect.catchAll(
      self,
      (error): Effect.Effect<never, K | CommandError<never>> =>
        isPaymentError(error) ? (keep(error) ? Effect.fail(error) : Effect.die(error)) : Effect.fail(error)
    )

/** No domain error is expected. */
const none = (_error: PaymentError): _error is never => false

const tagged =
  <const T extends Tag>(...tags: ReadonlyArray<T>) =>
  (error: PaymentError): error is Extract<PaymentError, { readonly _tag: T }> =>
    tags.some((t) => t === error._tag)

const PAYMENT_ERROR_TAGS: ReadonlySet<string> = new Set<Tag>([
  "PaymentIntentNotFound",
  "PaymentIntentAlreadyExists",
  "PaymentNotFound",
  "UnexpectedState",
  "ConfirmationInProgress",
  "PaymentMethodMissing",
  "AmountTooLarge",
  "ChargeAlreadyRefunded",
  "ChargeNotRefundable",
  "UnexpectedOutcome"
])

const isPaymentError = (error: unknown): error is PaymentError =>
  typeof error === "object" &&
  error !== null &&
  "_tag" in error &&
  typeof error._tag === "string" &&
  PAYMENT_ERROR_TAGS.has(error._tag)

export const makePaymentsPort = Effect.gen(function* () {
  const { internals } = yield* makePayments
  const runner = yield* CommandRunner
  const processor = yield* PaymentProcessor
  const sql = yield* SqlClient.SqlClient

  const load = (paymentIntentId: string) =>
    runner.load(PaymentIntentDecider, paymentIntentStream(paymentIntentId))

  const resolve = (paymentMethod: string) =>
    Effect.flatMap(
      processor.resolvePaymentMethod(paymentMethod),
      Option.match({
        onNone: () => Effect.fail(new UnknownPaymentMethod({ paymentMethod, processor: processor.name })),
        onSome: (pm) => Effect.succeed(pm)
      })
    )

  /**
   * The intent created in the caller's transaction; with `confirmAs` (a payment id) and a payment
   * method, its confirmation started in the same command and the safety net armed.
   */
  const create = (
    input: Parameters<typeof PaymentsPort.Service.createIntent>[0],
    metadata: EventMetadata,
    confirmAs: string | undefined
  ) =>
    Effect.gen(function* () {
      const paymentMethod = input.paymentMethod === null ? null : yield* resolve(input.paymentMethod)
      const confirmPaymentId = paymentMethod === null ? undefined : confirmAs
      const paymentIntentId = yield* Ids.make("pi")
      const clientSecret = `${paymentIntentId}_secret_${randomBytes(16).toString("hex")}`
      const result = yield* internals
        .execute(
          paymentIntentId,
          {
            _tag: "Create",
            paymentIntentId,
            amount: input.amount,
            currency: input.currency,
            captureMethod: input.captureMethod,
            customerId: input.customerId,
            description: input.description ?? null,
            metadata: input.metadata,
            paymentMethod,
            clientSecretHash: internals.hashSecret(clientSecret),
            processor: processor.name,
            ...(input.callKeyPrefix === undefined ? {} : { callKeyPrefix: input.callKeyPrefix }),
            ...(confirmPaymentId === undefined ? {} : { confirmPaymentId })
          },
          metadata
        )
        .pipe(only(none))
      const intent: IntentWithSecret = { ...intentObjectOf(result.state), clientSecret }
      if (confirmPaymentId === undefined) return { intent, confirmation: null }
      const confirmation: StartedConfirmation = {
        paymentIntentId,
        paymentId: confirmPaymentId,
        call: yield* internals.arm(paymentIntentId, result)
      }
      return { intent, confirmation }
    })

  const createIntent = (
    input: Parameters<typeof PaymentsPort.Service.createIntent>[0],
    metadata: EventMetadata
  ) => Effect.map(create(input, metadata, undefined), ({ intent }) => intent)

  const createConfirmingIntent = (
    input: Parameters<typeof PaymentsPort.Service.createIntent>[0],
    metadata: EventMetadata
  ) => Effect.flatMap(Ids.make("pay"), (paymentId) => create(input, metadata, paymentId))

  const outcomeOf = (state: IntentState, paymentId: string): ConfirmOutcome => ({
    intent: intentObjectOf(state),
    paymentId,
    declined: state.payments.find((p) => p.paymentId === paymentId)?.status === "failed"
  })

  // Answers recorded once already: a repeat is the caller's transaction run again after a conflict,
  // so the intent may have moved since the start and is read again.
  const recordedOnce = new WeakSet<AnsweredConfirmation>()

  const callConfirmation = (confirmation: StartedConfirmation) =>
    Effect.map(
      internals.answer(confirmation.call),
      Option.map((answer): AnsweredConfirmation => ({ confirmation, answer }))
    )

  const recordConfirmation = (answered: AnsweredConfirmation, metadata: EventMetadata) =>
    Effect.suspend(() => {
      const { confirmation, answer } = answered
      const first = !recordedOnce.has(answered)
      recordedOnce.add(answered)
      return internals
        .recordOutcome(
          confirmation.paymentIntentId,
          answer.key,
          answer.outcome,
          metadata,
          first ? confirmation.call : undefined
        )
        .pipe(
          only(none),
          Effect.map((state) => outcomeOf(state, confirmation.paymentId))
        )
    })

  const confirm = (
    paymentIntentId: string,
    input: { readonly paymentMethod?: string | undefined },
    metadata: EventMetadata,
    within?: (outcome: ConfirmOutcome) => Effect.Effect<void, CommandError<never>>
  ) =>
    Effect.gen(function* () {
      const paymentMethod = input.paymentMethod === undefined ? null : yield* resolve(input.paymentMethod)
      const paymentId = yield* Ids.make("pay")
      const confirmed = yield* internals
        .confirmation(
          paymentIntentId,
          { _tag: "Confirm", paymentMethod, paymentId },
          metadata,
          within === undefined ? undefined : (state: IntentState) => within(outcomeOf(state, paymentId))
        )
        .pipe(only(tagged("PaymentIntentNotFound", "UnexpectedState", "PaymentMethodMissing")))
      return outcomeOf(confirmed.state, confirmed.paymentId)
    })

  const cancel = (
    paymentIntentId: string,
    reason: Parameters<typeof PaymentsPort.Service.cancel>[1],
    metadata: EventMetadata
  ) =>
    Effect.gen(function* () {
      const before = yield* load(paymentIntentId)
      if (before.state.exists && before.state.status === "canceled") return intentObjectOf(before.state)
      const state = yield* internals
        .run(paymentIntentId, { _tag: "Cancel", reason }, metadata)
        .pipe(only(tagged("PaymentIntentNotFound", "UnexpectedState")))
      return intentObjectOf(state)
    })

  const refund = (
    paymentId: string,
    input: Parameters<typeof PaymentsPort.Service.refund>[1],
    metadata: EventMetadata
  ) =>
    Effect.gen(function* () {
      const row = Ids.isValid("pay", paymentId) ? yield* selectPayment(sql, paymentId) : Option.none()
      if (Option.isNone(row)) return yield* new PaymentNotFound({ paymentId })
      const paymentIntentId = row.value.paymentIntentId
      // The caller's key names the refund: the same key, the same refund id, so a repeat finds it.
      const refundId = refundIdFor(paymentId, input.key)
      const state = yield* internals
        .run(
          paymentIntentId,
          { _tag: "Refund", paymentId, refundId, amount: input.amount, reason: input.reason },
          metadata
        )
        .pipe(
          only(tagged("PaymentNotFound", "ChargeNotRefundable", "ChargeAlreadyRefunded", "AmountTooLarge"))
        )
      const recorded = state.refunds.find((r) => r.refundId === refundId)
      if (recorded === undefined) return yield* Effect.dieMessage(`refund ${refundId} was not recorded`)
      return refundObjectOf(state, recorded)
    })

  const find = (paymentIntentId: string) =>
    Ids.isValid("pi", paymentIntentId)
      ? Effect.map(load(paymentIntentId), ({ state }) =>
          state.exists ? Option.some(intentObjectOf(state)) : Option.none()
        )
      : Effect.succeed(Option.none())

  const refundsOf = (paymentIntentId: string) =>
    Ids.isValid("pi", paymentIntentId)
      ? Effect.map(load(paymentIntentId), ({ state }) =>
          state.refunds.map((r) => ({
            refundId: r.refundId,
            paymentId: r.paymentId,
            amount: r.amount,
            reason: r.reason,
            status: r.status
          }))
        )
      : Effect.succeed([])

  return PaymentsPort.of({
    createIntent,
    createConfirmingIntent,
    callConfirmation,
    recordConfirmation,
    confirm,
    cancel,
    refund,
    checkPaymentMethod: (paymentMethod) => Effect.asVoid(resolve(paymentMethod)),
    find,
    refundsOf
  })
})

export const PaymentsPortLive = Layer.effect(PaymentsPort, makePaymentsPort)
