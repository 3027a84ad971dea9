/**
 * The payments use cases behind `/v1/payment-intents`, `/v1/payments` and `/v1/refunds`.
 *
 * Money safety: every processor call runs in three steps.
 *   1. One transaction records the call about to be made (`…_started`, with its idempotency key
 *      derived from our ids and the committed state) and arms a due-work item that will make the
 *      call again if no outcome is recorded within `PAYMENT_RECOVERY_AFTER_SECONDS`.
 *   2. The call, with that key, outside any transaction the use case opens.
 *   3. One transaction records the outcome (a repeat of it changes nothing: the call is no longer
 *      pending) and disarms the due-work item.
 * A crash between 2 and 3 leaves the call pending: the worker (`processorCallRecovery`) asks the
 * processor again with the same key, gets the first answer, and records it. Because the key comes
 * from committed state, a request whose transaction rolled back (an `Idempotency-Key` request runs
 * in ONE transaction the HTTP middleware owns, steps 1–3 included) asks again with the same key
 * too: the processor answers what it already did, and moves no money twice.
 *
 * Why the request makes the call itself instead of waiting for a worker: Stripe answers `confirm`
 * synchronously, and so must we. Making the call in the request (the due-work item is only the
 * safety net) answers in one processor round trip, needs no worker in `ROLE=api` processes and no
 * cross-process wake-up; serializing on the intent's stream version (step 1) is the claim: a second
 * confirm finds the call started and waits for its outcome instead of starting another.
 */
import { randomBytes } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { Context, Duration, Effect, Layer, Option } from "effect"
import { sha256Hex } from "../base/Sha256.js"
import { AppConfig } from "../config.js"
import { findCustomer } from "../customers/index.js"
import { provideSqlClient } from "../db/Sql.js"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { type AuthenticatedActor, hasScope } from "../http/Auth.js"
import { BadRequest, Forbidden, NotFound, ServiceUnavailable } from "../http/errors.js"
import type { V1ListParams } from "../http/Lists.js"
import {
  type CommandError,
  type CommandResult,
  CommandRunner,
  isConcurrencyConflict,
  type LoadedAggregate
} from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import { type Metadata, metadataProblem } from "../kernel/Metadata.js"
import * as Time from "../kernel/Time.js"
import { commandMetadata, makeTransact, requestCallKeyPrefix } from "../kernel/UseCase.js"
import { DueWork } from "../processors/DueWork.js"
import {
  ConfirmationInProgress,
  type IntentState,
  intentObjectOf,
  latestPayment,
  type Operation,
  type PaymentCommand,
  type PaymentError,
  PaymentIntentDecider,
  type ProcessorOutcome,
  paymentIntentStream,
  paymentObjectOf,
  refundObjectOf
} from "./decider.js"
import { CardDeclined, orDieUnlessPaymentHttp, PaymentStateConflict } from "./errors.js"
import type {
  CancellationReason,
  CaptureMethod,
  PaymentEvent,
  PaymentMethod,
  RefundReason
} from "./events.js"
import type { PaymentIntentObject, PaymentStatus, RefundObject } from "./objects.js"
import { PaymentProcessor, type PaymentProcessorShape, type ProcessorUnavailable } from "./processor.js"
import { listPayments, selectIntent, selectPayment, selectRefund } from "./queries.js"

/** Due-work kind of a processor call's safety net (key = the call's idempotency key). */
export const PROCESSOR_CALL_KIND = "payments.processor_call"

/** How long a confirm waits for another request's call of the same intent before answering as is. */
const WAIT_FOR_CALL = Duration.seconds(10)

export interface NewIntentInput {
  readonly amount: number
  readonly currency: string
  readonly paymentMethod?: string | undefined
  readonly captureMethod?: CaptureMethod | undefined
  readonly confirm?: boolean | undefined
  readonly customerId?: string | undefined
  readonly description?: string | undefined
  readonly metadata?: Metadata | undefined
}

export interface NewPaymentInput {
  readonly amount: number
  readonly currency: string
  readonly paymentMethod: string
  readonly captureMethod?: CaptureMethod | undefined
  readonly customerId?: string | undefined
  readonly description?: string | undefined
  readonly metadata?: Metadata | undefined
}

export interface PaymentListInput extends V1ListParams {
  readonly customerId?: string | undefined
  readonly paymentIntentId?: string | undefined
  readonly status?: PaymentStatus | undefined
}

/** Who confirms: a credential (with `write:payments`), or a browser holding the client secret. */
export interface ConfirmAuthority {
  readonly actor: AuthenticatedActor | undefined
  readonly clientSecret: string | undefined
}

export type IntentWithSecret = PaymentIntentObject & { readonly clientSecret: string }

const WRITE = "write:payments"

const intentNotFound = NotFound.of({ message: "No such payment intent", param: "id" })
const paymentNotFound = NotFound.of({ message: "No such payment", param: "id" })
const refundNotFound = NotFound.of({ message: "No such refund", param: "id" })

const hashSecret = sha256Hex

/** The events a call's start or outcome writes carry its key: the call a command started, if any. */
const startedOperation = (state: IntentState, events: ReadonlyArray<{ readonly data: unknown }>) => {
  const keys = new Set<string>()
  for (const e of events) {
    const data = e.data
    if (
      typeof data === "object" &&
      data !== null &&
      "idempotencyKey" in data &&
      typeof data.idempotencyKey === "string"
    )
      keys.add(data.idempotencyKey)
  }
  return state.operations.find((op) => keys.has(op.key))
}

/** The processor call an operation stands for, built from the state that started it. */
export const callFor = (
  processor: PaymentProcessorShape,
  state: IntentState,
  op: Operation
): Effect.Effect<ProcessorOutcome, ProcessorUnavailable> => {
  const payment = state.payments.find((p) => p.paymentId === op.paymentId)
  if (payment === undefined)
    return Effect.dieMessage(`${op.key}: payment ${op.paymentId} is not in the state`)
  const reference = payment.processorReference
  const needReference = (f: (reference: string) => Effect.Effect<ProcessorOutcome, ProcessorUnavailable>) =>
    reference === null
      ? Effect.dieMessage(`${op.key}: payment ${op.paymentId} has no processor reference`)
      : f(reference)
  switch (op.kind) {
    case "authorize":
      return processor.authorize({
        idempotencyKey: op.key,
        paymentIntentId: state.paymentIntentId,
        amount: payment.amount,
        currency: state.currency,
        paymentMethod: payment.paymentMethod.token,
        capture: state.captureMethod === "automatic"
      })
    case "authenticate":
      return Option.match(processor.authenticate, {
        onNone: () => Effect.dieMessage(`${op.key}: the ${processor.name} processor cannot authenticate`),
        onSome: (authenticate) =>
          needReference((processorReference) =>
            authenticate({
              idempotencyKey: op.key,
              paymentIntentId: state.paymentIntentId,
              processorReference,
              outcome: op.outcome,
              capture: state.captureMethod === "automatic"
            })
          )
      })
    case "capture":
      return needReference((processorReference) =>
        processor.capture({ idempotencyKey: op.key, processorReference, amount: op.amount })
      )
    case "void":
      return needReference((processorReference) =>
        processor.void({ idempotencyKey: op.key, processorReference })
      )
    case "refund":
      return needReference((processorReference) =>
        processor.refund({
          idempotencyKey: op.key,
          processorReference,
          amount: op.amount,
          reason: state.refunds.find((r) => r.refundId === op.refundId)?.reason ?? null
        })
      )
  }
}

/** A processor call recorded as started (step 1), for `finish` to make and record (steps 2 and 3). */
export interface StartedCall {
  readonly state: IntentState
  readonly version: number
  readonly op: Operation | undefined
}

/**
 * A caller's writes that follow from a recorded outcome, run in the transaction that records it
 * (see `recordOutcome`); only when this very call recorded one.
 */
export type Within<E, R> = (state: IntentState) => Effect.Effect<void, E, R>

/** Step 2's result: the processor's answer to the call under `key`, for step 3 to record. */
export interface AnsweredCall {
  readonly key: string
  readonly outcome: ProcessorOutcome
}

export const makePayments = Effect.gen(function* () {
  const runner = yield* CommandRunner
  const transact = yield* makeTransact
  const work = yield* DueWork
  const processor = yield* PaymentProcessor
  const config = yield* AppConfig
  const sql = yield* SqlClient.SqlClient
  const withSql = provideSqlClient(sql)
  const recoveryAfter = Duration.seconds(config.payments.recoveryAfterSeconds)

  /** `loaded`: the intent as this request's previous command left it (saves reading the stream). */
  const execute = (
    paymentIntentId: string,
    command: PaymentCommand,
    metadata: EventMetadata,
    loaded?: LoadedAggregate<IntentState>
  ) =>
    runner.execute(PaymentIntentDecider, paymentIntentStream(paymentIntentId), command, {
      metadata,
      newStream: command._tag === "Create",
      ...(loaded === undefined ? {} : { loaded })
    })

  /**
   * Step 3: the outcome, recorded once; the safety net disarmed with it. `within`: the caller's
   * writes that follow from the recorded state, in the same transaction (a checkout completed by
   * its payment); they run again with it when it runs again.
   */
  const recordOutcome = <E = never, R = never>(
    paymentIntentId: string,
    key: string,
    outcome: ProcessorOutcome,
    metadata: EventMetadata,
    started?: LoadedAggregate<IntentState>,
    within?: Within<E, R>
  ) => {
    // The state the call was started from serves the first try only (a retry of the transaction
    // means the stream moved: it is read again).
    let from = started
    return transact(
      Effect.gen(function* () {
        const loaded = from
        from = undefined
        // The safety net's row first, then the stream: the recovery worker completes its claim in
        // that order too (DueWork.complete, then its writes), so the two never wait on each other
        // crosswise (the opposite order deadlocked when the worker raced a slow request).
        yield* work.cancel(PROCESSOR_CALL_KIND, key)
        const result = yield* execute(
          paymentIntentId,
          { _tag: "Record", idempotencyKey: key, outcome },
          metadata,
          loaded
        )
        if (within !== undefined) yield* within(result.state)
        return result.state
      })
    )
  }

  /** Step 1's second half: arms the safety net of the call a command started, if it started one. */
  const arm = (paymentIntentId: string, result: CommandResult<IntentState, PaymentEvent>) =>
    Effect.gen(function* () {
      const op = startedOperation(result.state, result.events)
      if (op !== undefined)
        yield* work.schedule({
          kind: PROCESSOR_CALL_KIND,
          key: op.key,
          dueAt: yield* Time.fromNow(recoveryAfter),
          payload: { paymentIntentId }
        })
      const started: StartedCall = { state: result.state, version: result.version, op }
      return started
    })

  /** A test-only crash point (`PAYMENTS_CRASH_AFTER_CALL`, test processor, never in production). */
  const crashAfterCall =
    config.payments.crashAfterCall && processor.name === "test" && config.nodeEnv !== "production"
      ? Effect.sync(() => process.kill(process.pid, "SIGKILL"))
      : Effect.void

  /**
   * Step 2 of a started call: the processor's answer. None when the command started no call, or the
   * processor could not be reached (the safety net asks again under the same key).
   */
  const answer = (started: StartedCall) =>
    Effect.gen(function* () {
      if (started.op === undefined) return Option.none<AnsweredCall>()
      const op = started.op
      const outcome = yield* Effect.either(callFor(processor, started.state, op))
      if (outcome._tag === "Left") {
        yield* Effect.logWarning(
          `payments: ${op.key} unanswered (${outcome.left.message}); the worker asks again`
        )
        return Option.none<AnsweredCall>()
      }
      yield* crashAfterCall
      return Option.some<AnsweredCall>({ key: op.key, outcome: outcome.right })
    })

  /** Steps 2 and 3 of a started call (nothing when the command started none). */
  const finish = <E = never, R = never>(
    paymentIntentId: string,
    started: StartedCall,
    metadata: EventMetadata,
    within?: Within<E, R>
  ) =>
    Effect.gen(function* () {
      const answered = yield* answer(started)
      if (Option.isNone(answered)) return started.state
      const { key, outcome } = answered.value
      // Writers on the stream kept winning the race (other processes' refunds): the call is made
      // and the worker will record it; the client gets the state as it stands rather than a 500.
      return yield* recordOutcome(paymentIntentId, key, outcome, metadata, started, within).pipe(
        Effect.catchIf(isConcurrencyConflict, () =>
          Effect.as(
            Effect.logWarning(`payments: ${key} answered but not recorded yet; the worker records it`),
            started.state
          )
        )
      )
    })

  /**
   * Runs a command that may start a processor call, then the call and its record (steps 1–3 above).
   * Answers the state after the outcome (or after the start, when the processor could not be reached:
   * the safety net makes the call again later).
   */
  const run = <E = never, R = never>(
    paymentIntentId: string,
    command: PaymentCommand,
    metadata: EventMetadata,
    within?: Within<E, R>
  ) =>
    Effect.gen(function* () {
      const started = yield* transact(
        Effect.flatMap(execute(paymentIntentId, command, metadata), (result) => arm(paymentIntentId, result))
      )
      return yield* finish(paymentIntentId, started, metadata, within)
    })

  /** The intent once the call under `key` is recorded (polled; another request or the worker records it). */
  const awaitCall = (paymentIntentId: string, key: string) =>
    Effect.gen(function* () {
      const deadline = (yield* Time.nowMillis) + Duration.toMillis(WAIT_FOR_CALL)
      let delay = 5
      while (true) {
        const { state } = yield* runner.load(PaymentIntentDecider, paymentIntentStream(paymentIntentId))
        if (!state.operations.some((op) => op.key === key)) return state
        if ((yield* Time.nowMillis) >= deadline) return state
        yield* Effect.sleep(Duration.millis(delay))
        delay = Math.min(delay * 2, 50)
      }
    })

  const loadIntent = (paymentIntentId: string) =>
    Effect.flatMap(runner.load(PaymentIntentDecider, paymentIntentStream(paymentIntentId)), ({ state }) =>
      state.exists ? Effect.succeed(state) : Effect.fail(intentNotFound)
    )

  /** Staff see everything; a shopper only what belongs to their customer record (others: 404). */
  const visible = (actor: AuthenticatedActor, customerId: string | null) =>
    actor.role !== "customer" || (customerId !== null && customerId === actor.customerId)

  const resolvePaymentMethod = (
    input: string | undefined
  ): Effect.Effect<PaymentMethod | null, BadRequest | ServiceUnavailable> => {
    if (input === undefined) return Effect.succeed(null)
    return processor.resolvePaymentMethod(input).pipe(
      // The Stripe adapter looks the token up: no answer → 503, retry (nothing was charged).
      Effect.catchTag("ProcessorUnavailable", (e) =>
        Effect.fail(
          new ServiceUnavailable({
            error: {
              type: "api_error",
              code: "processor_unavailable",
              message: `The payment processor did not answer (${e.message}); nothing was charged, retry`
            }
          })
        )
      ),
      Effect.flatMap(
        Option.match({
          onNone: () =>
            Effect.fail(
              BadRequest.of({
                code: "parameter_invalid",
                message: `No such payment method: ${JSON.stringify(input.slice(0, 40))} (a ${processor.name} processor token, e.g. pm_card_visa)`,
                param: "paymentMethod"
              })
            ),
          onSome: (pm) => Effect.succeed(pm)
        })
      )
    )
  }

  const checkMetadata = (metadata: Metadata | undefined) => {
    const problem = metadata === undefined ? undefined : metadataProblem(metadata)
    return problem === undefined
      ? Effect.void
      : Effect.fail(BadRequest.of({ code: "parameter_invalid", message: problem, param: "metadata" }))
  }

  const checkCustomer = (customerId: string | undefined) =>
    customerId === undefined
      ? Effect.void
      : Effect.flatMap(withSql(findCustomer(customerId)), (found) =>
          Option.isSome(found)
            ? Effect.void
            : Effect.fail(
                BadRequest.of({
                  code: "resource_missing",
                  message: `No such customer: ${customerId}`,
                  param: "customerId"
                })
              )
        )

  /** The answer to a confirmation that ended declined: 402 with the intent (or payment) embedded. */
  const declined = (state: IntentState, embed: "paymentIntent" | "payment", clientSecret?: string) => {
    const error = state.lastPaymentError
    const payment = latestPayment(state)
    const intent = intentObjectOf(state)
    return CardDeclined.of({
      code: error?.code ?? "card_declined",
      declineCode: error?.declineCode ?? null,
      message: error?.message ?? "Your card was declined.",
      embedded:
        embed === "payment" && payment !== undefined
          ? { payment: paymentObjectOf(state, payment) }
          : { paymentIntent: clientSecret === undefined ? intent : { ...intent, clientSecret } }
    })
  }

  /** Whether the attempt made by this request (or awaited by it) was declined. */
  const attemptDeclined = (state: IntentState, paymentId: string) =>
    state.payments.find((p) => p.paymentId === paymentId)?.status === "failed"

  /** Domain errors → HTTP (one mapper for the context). */
  const domainErrors =
    (state: () => Option.Option<IntentState>) =>
    (error: PaymentError): Effect.Effect<never, NotFound | BadRequest | PaymentStateConflict> => {
      const embedded = Option.match(state(), {
        onNone: () => ({}),
        onSome: (s) => ({ paymentIntent: intentObjectOf(s) })
      })
      switch (error._tag) {
        case "PaymentIntentNotFound":
          return Effect.fail(intentNotFound)
        case "PaymentNotFound":
          return Effect.fail(paymentNotFound)
        case "UnexpectedState":
          return Effect.fail(
            PaymentStateConflict.of({
              code: "payment_intent_unexpected_state",
              message: error.message,
              embedded
            })
          )
        case "PaymentMethodMissing":
          return Effect.fail(
            BadRequest.of({
              code: "parameter_missing",
              message: "paymentMethod is required: this PaymentIntent has no payment method to confirm with",
              param: "paymentMethod"
            })
          )
        case "AmountTooLarge":
          return Effect.fail(
            BadRequest.of({ code: "amount_too_large", message: error.message, param: error.param })
          )
        case "ChargeAlreadyRefunded":
          return Effect.fail(
            PaymentStateConflict.of({
              code: "charge_already_refunded",
              message: `Payment ${error.paymentId} has already been refunded.`,
              embedded: {}
            })
          )
        case "ChargeNotRefundable":
          return Effect.fail(
            PaymentStateConflict.of({
              code: "charge_not_refundable",
              message: `Payment ${error.paymentId} is ${error.status}: only a captured payment can be refunded.`,
              embedded: {}
            })
          )
        case "ConfirmationInProgress":
        case "PaymentIntentAlreadyExists":
        case "UnexpectedOutcome":
          return Effect.die(error)
      }
    }

  /**
   * A confirmation (or a 3-D Secure answer): the call, or — when another request's call for the
   * intent is under way — that call's outcome. Answers the state and the payment of the attempt
   * made or awaited, so every concurrent caller answers the same intent (402 for all on a decline).
   */
  const confirmation = <E = never, R = never>(
    paymentIntentId: string,
    command: Extract<PaymentCommand, { _tag: "Confirm" | "Authenticate" }>,
    metadata: EventMetadata,
    within?: Within<E, R>
  ) =>
    run(paymentIntentId, command, metadata, within).pipe(
      Effect.map((state) => ({
        state,
        paymentId: command._tag === "Confirm" ? command.paymentId : (latestPayment(state)?.paymentId ?? "")
      })),
      Effect.catchIf(
        (e): e is ConfirmationInProgress => e instanceof ConfirmationInProgress,
        (e) =>
          Effect.map(awaitCall(paymentIntentId, e.idempotencyKey), (state) => ({
            state,
            paymentId: e.paymentId
          }))
      )
    )

  /** A domain error mapped to HTTP with the intent as it now stands embedded (409s show it). */
  const withCurrent =
    (paymentIntentId: string) =>
    (
      error: CommandError<PaymentError>
    ): Effect.Effect<never, NotFound | BadRequest | PaymentStateConflict | CommandError<never>> =>
      isPaymentError(error)
        ? Effect.flatMap(
            runner.load(PaymentIntentDecider, paymentIntentStream(paymentIntentId)),
            ({ state }) => domainErrors(() => (state.exists ? Option.some(state) : Option.none()))(error)
          )
        : Effect.fail(error)

  /**
   * The intent's processor-key prefix when the creating request carries an `Idempotency-Key`: from
   * the requester and that key, so the retry of a rolled-back request calls with the same keys.
   */
  const callKeyPrefixOf = (actor: AuthenticatedActor, requestKey: string | undefined) =>
    requestKey === undefined
      ? {}
      : {
          callKeyPrefix: requestCallKeyPrefix("", actor, requestKey)
        }

  /**
   * Creates the intent; with `confirmAs` (a payment id) and a payment method, also starts its
   * confirmation in the same transaction (step 1 of the call: one transaction, not two), and
   * answers the started call as `started`.
   */
  const createIntentState = (
    actor: AuthenticatedActor,
    input: NewIntentInput,
    requestKey: string | undefined,
    confirmAs?: string
  ) =>
    Effect.gen(function* () {
      const paymentMethod = yield* resolvePaymentMethod(input.paymentMethod)
      yield* checkMetadata(input.metadata)
      yield* checkCustomer(input.customerId)
      const paymentIntentId = yield* Ids.make("pi")
      const clientSecret = `${paymentIntentId}_secret_${randomBytes(16).toString("hex")}`
      const metadata = yield* commandMetadata(actor)
      const confirmNow = confirmAs !== undefined && paymentMethod !== null ? confirmAs : undefined
      const { result, started } = yield* transact(
        Effect.gen(function* () {
          const result = yield* execute(
            paymentIntentId,
            {
              _tag: "Create",
              paymentIntentId,
              amount: input.amount,
              currency: input.currency,
              captureMethod: input.captureMethod ?? "automatic",
              customerId: input.customerId ?? null,
              description: input.description ?? null,
              metadata: input.metadata ?? {},
              paymentMethod,
              clientSecretHash: hashSecret(clientSecret),
              processor: processor.name,
              ...callKeyPrefixOf(actor, requestKey),
              ...(confirmNow === undefined ? {} : { confirmPaymentId: confirmNow })
            },
            metadata
          )
          if (confirmNow === undefined) return { result, started: undefined }
          return { result, started: yield* arm(paymentIntentId, result) }
        })
      )
      return { state: result.state, clientSecret, metadata, started }
    })

  /** A confirmation started with the intent's creation (`createIntentState`'s `started`), finished. */
  const finishCreated = (
    created: Effect.Effect.Success<ReturnType<typeof createIntentState>>,
    paymentId: string
  ) => {
    const id = created.state.paymentIntentId
    return created.started === undefined
      ? confirmation(id, { _tag: "Confirm", paymentMethod: null, paymentId }, created.metadata).pipe(
          Effect.catchAll(withCurrent(id))
        )
      : finish(id, created.started, created.metadata).pipe(
          Effect.map((state) => ({ state, paymentId })),
          Effect.catchAll(withCurrent(id))
        )
  }

  // --- Payment intents ------------------------------------------------------------------------------

  /** `requestKey`: the request's `Idempotency-Key`, if it has one. */
  const createIntent = (actor: AuthenticatedActor, input: NewIntentInput, requestKey?: string) =>
    Effect.gen(function* () {
      const paymentId = input.confirm === true ? yield* Ids.make("pay") : undefined
      const created = yield* createIntentState(actor, input, requestKey, paymentId)
      let state = created.state
      if (paymentId !== undefined) {
        const confirmed = yield* finishCreated(created, paymentId)
        state = confirmed.state
        if (attemptDeclined(state, confirmed.paymentId))
          return yield* declined(state, "paymentIntent", created.clientSecret)
      }
      const answer: IntentWithSecret = { ...intentObjectOf(state), clientSecret: created.clientSecret }
      return answer
    }).pipe(orDieUnlessPaymentHttp)

  const getIntent = (actor: AuthenticatedActor, id: string) =>
    Effect.gen(function* () {
      if (!Ids.isValid("pi", id)) return yield* Effect.fail(intentNotFound)
      const intent = yield* selectIntent(sql, id)
      if (Option.isNone(intent) || !visible(actor, intent.value.customerId))
        return yield* Effect.fail(intentNotFound)
      return intent.value
    }).pipe(orDieUnlessPaymentHttp)

  /** Staff with `write:payments`, or anyone holding the intent's client secret (Stripe.js). */
  const authorizeConfirm = (authority: ConfirmAuthority, state: IntentState) => {
    const secretMatches =
      authority.clientSecret !== undefined && hashSecret(authority.clientSecret) === state.clientSecretHash
    if (secretMatches) return Effect.void
    if (authority.clientSecret !== undefined) return Effect.fail(intentNotFound)
    if (
      authority.actor !== undefined &&
      hasScope(authority.actor, WRITE) &&
      authority.actor.role !== "customer"
    )
      return Effect.void
    return Effect.fail(
      Forbidden.of({
        code: "insufficient_scope",
        message: `confirming needs the ${WRITE} scope, or the payment intent's clientSecret`
      })
    )
  }

  const confirmIntent = (
    authority: ConfirmAuthority,
    id: string,
    input: { readonly paymentMethod?: string | undefined }
  ) =>
    Effect.gen(function* () {
      if (!Ids.isValid("pi", id)) return yield* Effect.fail(intentNotFound)
      const before = yield* loadIntent(id)
      yield* authorizeConfirm(authority, before)
      const paymentMethod = yield* resolvePaymentMethod(input.paymentMethod)
      const metadata = yield* commandMetadata(authority.actor ?? { type: "system", id: "client_secret" })
      const paymentId = yield* Ids.make("pay")
      const confirmed = yield* confirmation(id, { _tag: "Confirm", paymentMethod, paymentId }, metadata).pipe(
        Effect.catchAll(withCurrent(id))
      )
      if (attemptDeclined(confirmed.state, confirmed.paymentId))
        return yield* declined(confirmed.state, "paymentIntent")
      return intentObjectOf(confirmed.state)
    }).pipe(orDieUnlessPaymentHttp)

  const captureIntent = (actor: AuthenticatedActor, id: string, amountToCapture: number | undefined) =>
    Effect.gen(function* () {
      if (!Ids.isValid("pi", id)) return yield* Effect.fail(intentNotFound)
      const metadata = yield* commandMetadata(actor)
      const state = yield* run(id, { _tag: "Capture", amount: amountToCapture ?? null }, metadata).pipe(
        Effect.catchAll(withCurrent(id))
      )
      return intentObjectOf(state)
    }).pipe(orDieUnlessPaymentHttp)

  const cancelIntent = (actor: AuthenticatedActor, id: string, reason: CancellationReason | undefined) =>
    Effect.gen(function* () {
      if (!Ids.isValid("pi", id)) return yield* Effect.fail(intentNotFound)
      const metadata = yield* commandMetadata(actor)
      const state = yield* run(id, { _tag: "Cancel", reason: reason ?? null }, metadata).pipe(
        Effect.catchAll(withCurrent(id))
      )
      return intentObjectOf(state)
    }).pipe(orDieUnlessPaymentHttp)

  /** `POST /v1/test/payment-intents/:id/authenticate`: only where the processor can play the bank. */
  const authenticateIntent = (actor: AuthenticatedActor, id: string, outcome: "approve" | "fail") =>
    Effect.gen(function* () {
      if (Option.isNone(processor.authenticate) || !Ids.isValid("pi", id))
        return yield* Effect.fail(
          Option.isNone(processor.authenticate)
            ? NotFound.of({
                message: `Unrecognized request URL (POST: /v1/test/payment-intents/${id}/authenticate)`
              })
            : intentNotFound
        )
      yield* loadIntent(id)
      const metadata = yield* commandMetadata(actor)
      const confirmed = yield* confirmation(id, { _tag: "Authenticate", outcome }, metadata).pipe(
        Effect.catchAll(withCurrent(id))
      )
      if (attemptDeclined(confirmed.state, confirmed.paymentId))
        return yield* declined(confirmed.state, "paymentIntent")
      return intentObjectOf(confirmed.state)
    }).pipe(orDieUnlessPaymentHttp)

  // --- Payments -------------------------------------------------------------------------------------

  /** `POST /v1/payments`: an intent created and confirmed in one call; answers its payment. */
  const createPayment = (actor: AuthenticatedActor, input: NewPaymentInput, requestKey?: string) =>
    Effect.gen(function* () {
      const paymentId = yield* Ids.make("pay")
      const created = yield* createIntentState(actor, input, requestKey, paymentId)
      const { state } = yield* finishCreated(created, paymentId)
      if (attemptDeclined(state, paymentId)) return yield* declined(state, "payment")
      const payment = state.payments.find((p) => p.paymentId === paymentId) ?? latestPayment(state)
      if (payment === undefined) return yield* Effect.dieMessage("a confirmed intent has no payment")
      return paymentObjectOf(state, payment)
    }).pipe(orDieUnlessPaymentHttp)

  const findVisiblePayment = (actor: AuthenticatedActor, id: string) =>
    Effect.gen(function* () {
      if (!Ids.isValid("pay", id)) return yield* Effect.fail(paymentNotFound)
      const payment = yield* selectPayment(sql, id)
      if (Option.isNone(payment) || !visible(actor, payment.value.customerId))
        return yield* Effect.fail(paymentNotFound)
      return payment.value
    })

  const getPayment = (actor: AuthenticatedActor, id: string) =>
    findVisiblePayment(actor, id).pipe(orDieUnlessPaymentHttp)

  const listPaymentsOf = (actor: AuthenticatedActor, input: PaymentListInput) => {
    const { customerId, paymentIntentId, status, ...params } = input
    // A shopper lists only their own payments, whatever filter they send.
    const owner = actor.role === "customer" ? { owner: actor.customerId ?? "" } : { customerId }
    return listPayments(sql, { ...owner, paymentIntentId, status }, params).pipe(orDieUnlessPaymentHttp)
  }

  const capturePayment = (actor: AuthenticatedActor, id: string, amountToCapture: number | undefined) =>
    Effect.gen(function* () {
      const payment = yield* findVisiblePayment(actor, id)
      const metadata = yield* commandMetadata(actor)
      const before = yield* loadIntent(payment.paymentIntentId)
      if (latestPayment(before)?.paymentId !== payment.id || payment.status !== "authorized")
        return yield* Effect.fail(
          PaymentStateConflict.of({
            code: "payment_intent_unexpected_state",
            message: `This payment is ${payment.status}: only an authorized payment can be captured.`,
            embedded: { payment }
          })
        )
      const state = yield* run(
        payment.paymentIntentId,
        { _tag: "Capture", amount: amountToCapture ?? null },
        metadata
      ).pipe(Effect.catchAll(withCurrent(payment.paymentIntentId)))
      const after = state.payments.find((p) => p.paymentId === payment.id)
      return after === undefined ? payment : paymentObjectOf(state, after)
    }).pipe(orDieUnlessPaymentHttp)

  const refundPayment = (
    actor: AuthenticatedActor,
    id: string,
    input: { readonly amount?: number | undefined; readonly reason?: RefundReason | undefined }
  ) =>
    Effect.gen(function* () {
      const payment = yield* findVisiblePayment(actor, id)
      const metadata = yield* commandMetadata(actor)
      const refundId = yield* Ids.make("re")
      const state = yield* run(
        payment.paymentIntentId,
        {
          _tag: "Refund",
          paymentId: payment.id,
          refundId,
          amount: input.amount ?? null,
          reason: input.reason ?? null
        },
        metadata
      ).pipe(Effect.catchAll(withCurrent(payment.paymentIntentId)))
      const refund = state.refunds.find((r) => r.refundId === refundId)
      if (refund === undefined) return yield* Effect.dieMessage(`refund ${refundId} was not recorded`)
      const answer: RefundObject = refundObjectOf(state, refund)
      return answer
    }).pipe(orDieUnlessPaymentHttp)

  const getRefund = (actor: AuthenticatedActor, id: string) =>
    Effect.gen(function* () {
      if (!Ids.isValid("re", id)) return yield* Effect.fail(refundNotFound)
      const refund = yield* selectRefund(sql, id)
      if (Option.isNone(refund)) return yield* Effect.fail(refundNotFound)
      if (actor.role === "customer") {
        const payment = yield* selectPayment(sql, refund.value.paymentId)
        if (Option.isNone(payment) || !visible(actor, payment.value.customerId))
          return yield* Effect.fail(refundNotFound)
      }
      return refund.value
    }).pipe(orDieUnlessPaymentHttp)

  return {
    createIntent,
    getIntent,
    confirmIntent,
    captureIntent,
    cancelIntent,
    authenticateIntent,
    createPayment,
    getPayment,
    listPayments: listPaymentsOf,
    capturePayment,
    refundPayment,
    getRefund,
    /** For the safety net (and tests): step 3 of a call, as the worker records it. */
    recordOutcome,
    /**
     * The internals the payments port (port.ts) reuses, so the state machine and the three-step
     * processor calls exist once: `execute` (one command, joining the caller's transaction), `run`
     * (a command that may start a call, then the call and its record; never inside a transaction),
     * `confirmation` (a confirm or the awaited outcome of a concurrent one), the client-secret hash,
     * and the parts of `run` for a call started inside the caller's transaction: `arm` (in it), then
     * after its commit `answer` (the call) and `recordOutcome` (joining a transaction of the caller's).
     */
    internals: { execute, run, confirmation, hashSecret, arm, answer, recordOutcome }
  }
})

const PAYMENT_ERROR_TAGS: ReadonlySet<string> = new Set([
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

export type PaymentsShape = Effect.Effect.Success<typeof makePayments>

export class Payments extends Context.Tag("payments/Payments")<Payments, PaymentsShape>() {}

export const PaymentsLive = Layer.effect(Payments, makePayments)
