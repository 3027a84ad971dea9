/**
 * The payment-intent aggregate: three state machines on one stream (research commerce-design
 * §1.4–§1.6, Stripe's names; COMMERCE.md decision 5) — the intent, the payments (charges) its
 * confirmations create, and the refunds of those payments. Pure: tested without a database
 * (test/payments/deciders.test.ts, with a model-based property over random command sequences).
 *
 * Money moves only through processor calls, each bracketed by two events: `…_started` records the
 * call about to be made with its idempotency key, derived from our ids and the committed state
 * (`pi_…:confirm:<attempt>`, `pi_…:capture`, `pi_…:void`, `pi_…:authenticate:<attempt>`,
 * `pay_…:refund:<n>`), and `Record` turns the processor's answer into the outcome. A started call
 * blocks what it conflicts with (a second confirmation, a cancel racing a capture) and reserves what
 * it may take (a refund's amount), so the invariants hold whatever order requests arrive in:
 * captured ≤ authorized, refunded ≤ captured, `succeeded` and `canceled` are terminal.
 */
import { Data, Effect } from "effect"
import { defineDecider, type PublicEventDraft, type Recorded } from "../kernel/Decider.js"
import * as Ids from "../kernel/Ids.js"
import type { Metadata } from "../kernel/Metadata.js"
import {
  AuthenticationStarted,
  type CancellationReason,
  type CaptureMethod,
  CaptureStarted,
  type NextAction,
  OperationFailed,
  PaymentActionRequired,
  PaymentAttemptStarted,
  PaymentAuthorized,
  PaymentCaptured,
  type PaymentEvent,
  PaymentFailed,
  PaymentIntentCanceled,
  PaymentIntentCreated,
  type PaymentMethod,
  paymentEventTypes,
  RefundFailed,
  type RefundReason,
  RefundStarted,
  RefundSucceeded,
  VoidStarted
} from "./events.js"
import {
  encodePayment,
  encodeRefunded,
  type IntentStatus,
  isLive,
  type LastPaymentError,
  type PaymentIntentObject,
  type PaymentObject,
  type PaymentStatus,
  type RefundObject,
  type RefundStatus
} from "./objects.js"
import type { AuthorizationResult, SettlementResult } from "./processor.js"

export const paymentIntentStream = (paymentIntentId: string) => `payment_intent-${paymentIntentId}`

/** Stripe's bounds: a positive amount of at most eight digits of minor units. */
export const MAX_AMOUNT = 99_999_999

// --- Domain errors (the use cases map them to HTTP) -------------------------------------------------

export class PaymentIntentNotFound extends Data.TaggedError("PaymentIntentNotFound")<{
  readonly paymentIntentId: string
}> {}
export class PaymentIntentAlreadyExists extends Data.TaggedError("PaymentIntentAlreadyExists")<{
  readonly paymentIntentId: string
}> {}
export class PaymentNotFound extends Data.TaggedError("PaymentNotFound")<{ readonly paymentId: string }> {}
/** The command does not apply in the intent's (or payment's) current state: 409. */
export class UnexpectedState extends Data.TaggedError("UnexpectedState")<{
  readonly status: IntentStatus
  readonly message: string
}> {}
/** A confirmation's processor call is under way: its outcome is what a second confirm answers. */
export class ConfirmationInProgress extends Data.TaggedError("ConfirmationInProgress")<{
  readonly idempotencyKey: string
  /** The payment that call is for. */
  readonly paymentId: string
}> {}
export class PaymentMethodMissing extends Data.TaggedError("PaymentMethodMissing")<{
  readonly paymentIntentId: string
}> {}
/** More than can be captured or refunded: `param` names the request field. */
export class AmountTooLarge extends Data.TaggedError("AmountTooLarge")<{
  readonly param: "amount" | "amountToCapture"
  readonly message: string
}> {}
export class ChargeAlreadyRefunded extends Data.TaggedError("ChargeAlreadyRefunded")<{
  readonly paymentId: string
}> {}
export class ChargeNotRefundable extends Data.TaggedError("ChargeNotRefundable")<{
  readonly paymentId: string
  readonly status: PaymentStatus
}> {}
/** A processor answer of the wrong kind for the call it answers: a bug of the processor adapter. */
export class UnexpectedOutcome extends Data.TaggedError("UnexpectedOutcome")<{
  readonly idempotencyKey: string
  readonly outcome: string
}> {}

export type PaymentError =
  | PaymentIntentNotFound
  | PaymentIntentAlreadyExists
  | PaymentNotFound
  | UnexpectedState
  | ConfirmationInProgress
  | PaymentMethodMissing
  | AmountTooLarge
  | ChargeAlreadyRefunded
  | ChargeNotRefundable
  | UnexpectedOutcome

// --- State ------------------------------------------------------------------------------------------

export interface PaymentState {
  readonly paymentId: string
  readonly attempt: number
  readonly status: PaymentStatus
  readonly amount: number
  readonly amountCaptured: number
  readonly amountRefunded: number
  readonly paymentMethod: PaymentMethod
  readonly processorReference: string | null
  readonly failureCode: string | null
  readonly declineCode: string | null
  readonly failureMessage: string | null
  readonly authorizedAt: Date | null
  readonly capturedAt: Date | null
  readonly canceledAt: Date | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

export interface RefundState {
  readonly refundId: string
  readonly paymentId: string
  readonly amount: number
  readonly reason: RefundReason | null
  readonly status: RefundStatus
  readonly failureReason: string | null
  readonly processorReference: string | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

/** A processor call started and not yet recorded. */
export type Operation =
  | { readonly kind: "authorize"; readonly key: string; readonly paymentId: string }
  | {
      readonly kind: "authenticate"
      readonly key: string
      readonly paymentId: string
      readonly outcome: "approve" | "fail"
    }
  | { readonly kind: "capture"; readonly key: string; readonly paymentId: string; readonly amount: number }
  | {
      readonly kind: "void"
      readonly key: string
      readonly paymentId: string
      readonly cancellationReason: CancellationReason | null
    }
  | {
      readonly kind: "refund"
      readonly key: string
      readonly paymentId: string
      readonly refundId: string
      readonly amount: number
    }

export interface IntentState {
  readonly exists: boolean
  readonly paymentIntentId: string
  readonly amount: number
  readonly currency: string
  readonly captureMethod: CaptureMethod
  readonly customerId: string | null
  readonly description: string | null
  readonly metadata: Metadata
  readonly status: IntentStatus
  readonly paymentMethod: PaymentMethod | null
  readonly clientSecretHash: string
  readonly processor: string
  /** What the intent's processor keys start with: its id, or the creating request's key (see events). */
  readonly callKeyPrefix: string
  readonly lastPaymentError: LastPaymentError | null
  readonly nextAction: NextAction | null
  readonly cancellationReason: CancellationReason | null
  /** Confirmations so far (the next one is attempt `attempts + 1`). */
  readonly attempts: number
  /** Oldest first: the last one is the latest attempt's. */
  readonly payments: ReadonlyArray<PaymentState>
  readonly refunds: ReadonlyArray<RefundState>
  readonly operations: ReadonlyArray<Operation>
  readonly canceledAt: Date | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

export const initialIntentState: IntentState = {
  exists: false,
  paymentIntentId: "",
  amount: 0,
  currency: "",
  captureMethod: "automatic",
  customerId: null,
  description: null,
  metadata: {},
  status: "requires_payment_method",
  paymentMethod: null,
  clientSecretHash: "",
  processor: "",
  callKeyPrefix: "",
  lastPaymentError: null,
  nextAction: null,
  cancellationReason: null,
  attempts: 0,
  payments: [],
  refunds: [],
  operations: [],
  canceledAt: null,
  createdAt: new Date(0),
  updatedAt: new Date(0)
}

/** Stripe: only these two are final. */
export const isTerminal = (status: IntentStatus) => status === "succeeded" || status === "canceled"

export const latestPayment = (state: IntentState): PaymentState | undefined =>
  state.payments[state.payments.length - 1]

/**
 * The id of the refund a caller's key names (`PaymentsPort.refund`): the same key, the same id, so a
 * repeat finds the refund it made — and a caller can tell its own refunds from others' by their id.
 */
export const refundIdFor = (paymentId: string, key: string) =>
  Ids.derive("re", `${paymentId}:refund:${key}`, Ids.timestampOf("pay", paymentId) ?? 0)

/** Refund amounts started and not yet answered: reserved, so concurrent refunds cannot overdraw. */
export const pendingRefunds = (state: IntentState, paymentId: string) =>
  state.operations.reduce(
    (sum, op) => (op.kind === "refund" && op.paymentId === paymentId ? sum + op.amount : sum),
    0
  )

/** What can still be refunded of a payment (captured − refunded − refunds under way). */
export const refundable = (state: IntentState, payment: PaymentState) =>
  payment.amountCaptured - payment.amountRefunded - pendingRefunds(state, payment.paymentId)

// --- Commands ---------------------------------------------------------------------------------------

/** What the processor answered a call. */
export type ProcessorOutcome = AuthorizationResult | SettlementResult

export type PaymentCommand =
  | {
      readonly _tag: "Create"
      readonly paymentIntentId: string
      readonly amount: number
      readonly currency: string
      readonly captureMethod: CaptureMethod
      readonly customerId: string | null
      readonly description: string | null
      readonly metadata: Metadata
      readonly paymentMethod: PaymentMethod | null
      readonly clientSecretHash: string
      readonly processor: string
      /** See `PaymentIntentCreated.callKeyPrefix`; absent: the intent's id. */
      readonly callKeyPrefix?: string
      /**
       * Confirm at once with the payment method given, as the payment this id names: the creation
       * and the attempt's start are one decision (one append) — exactly `Create` then `Confirm`.
       */
      readonly confirmPaymentId?: string
    }
  /** `paymentId`: the id of the payment this confirmation creates (minted by the caller). */
  | { readonly _tag: "Confirm"; readonly paymentMethod: PaymentMethod | null; readonly paymentId: string }
  | { readonly _tag: "Authenticate"; readonly outcome: "approve" | "fail" }
  | { readonly _tag: "Capture"; readonly amount: number | null }
  | { readonly _tag: "Cancel"; readonly reason: CancellationReason | null }
  | {
      readonly _tag: "Refund"
      readonly paymentId: string
      readonly refundId: string
      readonly amount: number | null
      readonly reason: RefundReason | null
    }
  /** The processor's answer to the call started under `idempotencyKey`; a late repeat changes nothing. */
  | { readonly _tag: "Record"; readonly idempotencyKey: string; readonly outcome: ProcessorOutcome }

// --- Evolve -----------------------------------------------------------------------------------------

const withoutOperation = (state: IntentState, key: string) => state.operations.filter((op) => op.key !== key)

const updatePayment = (
  state: IntentState,
  paymentId: string,
  change: (payment: PaymentState) => PaymentState
): ReadonlyArray<PaymentState> => state.payments.map((p) => (p.paymentId === paymentId ? change(p) : p))

const updateRefund = (
  state: IntentState,
  refundId: string,
  change: (refund: RefundState) => RefundState
): ReadonlyArray<RefundState> => state.refunds.map((r) => (r.refundId === refundId ? change(r) : r))

const evolve = (state: IntentState, event: Recorded<PaymentEvent> | PaymentEvent): IntentState => {
  // Events being decided have no `recordedAt` yet; the runner folds recorded ones.
  const at = "recordedAt" in event ? event.recordedAt : state.updatedAt
  switch (event.type) {
    case "payment_intent.created": {
      const d = event.data
      return {
        ...initialIntentState,
        exists: true,
        paymentIntentId: d.paymentIntentId,
        amount: d.amount,
        currency: d.currency,
        captureMethod: d.captureMethod,
        customerId: d.customerId,
        description: d.description,
        metadata: d.metadata,
        status: d.paymentMethod === null ? "requires_payment_method" : "requires_confirmation",
        paymentMethod: d.paymentMethod,
        clientSecretHash: d.clientSecretHash,
        processor: d.processor,
        callKeyPrefix: d.callKeyPrefix ?? d.paymentIntentId,
        createdAt: at,
        updatedAt: at
      }
    }
    case "payment_intent.attempt_started": {
      const d = event.data
      const payment: PaymentState = {
        paymentId: d.paymentId,
        attempt: d.attempt,
        status: "pending",
        amount: state.amount,
        amountCaptured: 0,
        amountRefunded: 0,
        paymentMethod: d.paymentMethod,
        processorReference: null,
        failureCode: null,
        declineCode: null,
        failureMessage: null,
        authorizedAt: null,
        capturedAt: null,
        canceledAt: null,
        createdAt: at,
        updatedAt: at
      }
      return {
        ...state,
        status: "processing",
        paymentMethod: d.paymentMethod,
        attempts: d.attempt,
        lastPaymentError: null,
        nextAction: null,
        payments: [
          ...(d.abandonedPaymentId === undefined
            ? state.payments
            : updatePayment(state, d.abandonedPaymentId, (p) => ({
                ...p,
                status: "canceled",
                canceledAt: at,
                updatedAt: at
              }))),
          payment
        ],
        operations: [
          ...state.operations,
          { kind: "authorize", key: d.idempotencyKey, paymentId: d.paymentId }
        ],
        updatedAt: at
      }
    }
    case "payment_intent.payment_authorized": {
      const d = event.data
      return {
        ...state,
        status: d.captured ? "succeeded" : "requires_capture",
        nextAction: null,
        payments: updatePayment(state, d.paymentId, (p) => ({
          ...p,
          status: d.captured ? "succeeded" : "authorized",
          processorReference: d.processorReference,
          amountCaptured: d.captured ? d.amount : 0,
          authorizedAt: at,
          capturedAt: d.captured ? at : null,
          updatedAt: at
        })),
        operations: withoutOperation(state, d.idempotencyKey),
        updatedAt: at
      }
    }
    case "payment_intent.action_required": {
      const d = event.data
      return {
        ...state,
        status: "requires_action",
        nextAction: d.nextAction,
        payments: updatePayment(state, d.paymentId, (p) => ({
          ...p,
          processorReference: d.processorReference,
          updatedAt: at
        })),
        operations: withoutOperation(state, d.idempotencyKey),
        updatedAt: at
      }
    }
    case "payment_intent.authentication_started": {
      const d = event.data
      return {
        ...state,
        status: "processing",
        nextAction: null,
        operations: [
          ...state.operations,
          { kind: "authenticate", key: d.idempotencyKey, paymentId: d.paymentId, outcome: d.outcome }
        ],
        updatedAt: at
      }
    }
    case "payment_intent.payment_failed": {
      const d = event.data
      const failed = state.payments.find((p) => p.paymentId === d.paymentId)
      return {
        ...state,
        status: "requires_payment_method",
        // Stripe: the declined method leaves the intent; it is kept on the error for the record.
        paymentMethod: null,
        nextAction: null,
        lastPaymentError: {
          type: "card_error",
          code: d.code,
          declineCode: d.declineCode,
          message: d.message,
          paymentMethod: failed?.paymentMethod ?? null
        },
        payments: updatePayment(state, d.paymentId, (p) => ({
          ...p,
          status: "failed",
          failureCode: d.code,
          declineCode: d.declineCode,
          failureMessage: d.message,
          updatedAt: at
        })),
        operations: withoutOperation(state, d.idempotencyKey),
        updatedAt: at
      }
    }
    case "payment_intent.capture_started":
    case "payment_intent.void_started": {
      const d = event.data
      const operation: Operation =
        event.type === "payment_intent.capture_started"
          ? { kind: "capture", key: d.idempotencyKey, paymentId: d.paymentId, amount: event.data.amount }
          : {
              kind: "void",
              key: d.idempotencyKey,
              paymentId: d.paymentId,
              cancellationReason: event.data.cancellationReason
            }
      return { ...state, operations: [...state.operations, operation], updatedAt: at }
    }
    case "payment_intent.payment_captured": {
      const d = event.data
      return {
        ...state,
        status: "succeeded",
        payments: updatePayment(state, d.paymentId, (p) => ({
          ...p,
          status: "succeeded",
          amountCaptured: d.amount,
          capturedAt: at,
          updatedAt: at
        })),
        operations: withoutOperation(state, d.idempotencyKey),
        updatedAt: at
      }
    }
    case "payment_intent.canceled": {
      const d = event.data
      const paymentId = d.paymentId
      return {
        ...state,
        status: "canceled",
        nextAction: null,
        cancellationReason: d.cancellationReason,
        canceledAt: at,
        payments:
          paymentId === null
            ? state.payments
            : updatePayment(state, paymentId, (p) => ({
                ...p,
                status: "canceled",
                canceledAt: at,
                updatedAt: at
              })),
        operations: d.idempotencyKey === null ? state.operations : withoutOperation(state, d.idempotencyKey),
        updatedAt: at
      }
    }
    case "payment_intent.operation_failed":
      return { ...state, operations: withoutOperation(state, event.data.idempotencyKey), updatedAt: at }
    case "payment_intent.refund_started": {
      const d = event.data
      const refund: RefundState = {
        refundId: d.refundId,
        paymentId: d.paymentId,
        amount: d.amount,
        reason: d.reason,
        status: "pending",
        failureReason: null,
        processorReference: null,
        createdAt: at,
        updatedAt: at
      }
      return {
        ...state,
        refunds: [...state.refunds, refund],
        operations: [
          ...state.operations,
          {
            kind: "refund",
            key: d.idempotencyKey,
            paymentId: d.paymentId,
            refundId: d.refundId,
            amount: d.amount
          }
        ],
        updatedAt: at
      }
    }
    case "payment_intent.refund_succeeded": {
      const d = event.data
      return {
        ...state,
        payments: updatePayment(state, d.paymentId, (p) => ({
          ...p,
          amountRefunded: d.amountRefunded,
          status: d.amountRefunded >= p.amountCaptured ? "refunded" : "partially_refunded",
          updatedAt: at
        })),
        refunds: updateRefund(state, d.refundId, (r) => ({
          ...r,
          status: "succeeded",
          processorReference: d.processorReference,
          updatedAt: at
        })),
        operations: withoutOperation(state, d.idempotencyKey),
        updatedAt: at
      }
    }
    case "payment_intent.refund_failed": {
      const d = event.data
      return {
        ...state,
        refunds: updateRefund(state, d.refundId, (r) => ({
          ...r,
          status: "failed",
          failureReason: d.failureReason,
          updatedAt: at
        })),
        operations: withoutOperation(state, d.idempotencyKey),
        updatedAt: at
      }
    }
  }
}

// --- Decide -----------------------------------------------------------------------------------------

type Decision = Effect.Effect<ReadonlyArray<PaymentEvent>, PaymentError>

const unexpected = (state: IntentState, message: string): Decision =>
  Effect.fail(new UnexpectedState({ status: state.status, message }))

const ofIntent = (state: IntentState) => ({ paymentIntentId: state.paymentIntentId })

/** Calls that decide the intent's fate (refunds are not among them: they may run side by side). */
const intentOperation = (state: IntentState) => state.operations.find((op) => op.kind !== "refund")

/**
 * A void or capture under way decides the intent's fate: a confirmation or an authentication started
 * beside it could charge an intent its caller is told is canceled (a void racing a new attempt).
 */
const settling = (state: IntentState, running: Operation): Decision =>
  unexpected(
    state,
    running.kind === "void"
      ? "This PaymentIntent is being canceled: it can no longer be confirmed or authenticated."
      : "A capture of this PaymentIntent is in progress; retry once it ended."
  )

const confirm = (state: IntentState, command: Extract<PaymentCommand, { _tag: "Confirm" }>): Decision => {
  const running = intentOperation(state)
  if (running !== undefined && (running.kind === "authorize" || running.kind === "authenticate"))
    return Effect.fail(
      new ConfirmationInProgress({ idempotencyKey: running.key, paymentId: running.paymentId })
    )
  if (running !== undefined) return settling(state, running)
  // Stripe: while the customer's action is required, a confirm must bring a new payment method
  // (which abandons the attempt waiting for it); without one it is refused.
  const replacing = state.status === "requires_action" && command.paymentMethod !== null
  if (state.status !== "requires_payment_method" && state.status !== "requires_confirmation" && !replacing)
    return unexpected(
      state,
      state.status === "requires_action"
        ? "This PaymentIntent requires the customer's action (nextAction): complete it, or confirm with a new paymentMethod."
        : `This PaymentIntent's status is ${state.status}: only one in requires_payment_method, requires_confirmation or (with a new paymentMethod) requires_action can be confirmed.`
    )
  const abandoned = replacing ? latestPayment(state) : undefined
  const paymentMethod = command.paymentMethod ?? state.paymentMethod
  if (paymentMethod === null)
    return Effect.fail(new PaymentMethodMissing({ paymentIntentId: state.paymentIntentId }))
  const attempt = state.attempts + 1
  return Effect.succeed([
    PaymentAttemptStarted.make({
      ...ofIntent(state),
      paymentId: command.paymentId,
      idempotencyKey: `${state.callKeyPrefix}:confirm:${attempt}`,
      attempt,
      paymentMethod,
      capture: state.captureMethod === "automatic",
      ...(abandoned === undefined ? {} : { abandonedPaymentId: abandoned.paymentId })
    })
  ])
}

const authenticate = (state: IntentState, outcome: "approve" | "fail"): Decision => {
  const running = intentOperation(state)
  if (running?.kind === "authenticate")
    return Effect.fail(
      new ConfirmationInProgress({ idempotencyKey: running.key, paymentId: running.paymentId })
    )
  if (running !== undefined && running.kind !== "authorize") return settling(state, running)
  const payment = latestPayment(state)
  if (state.status !== "requires_action" || payment === undefined)
    return unexpected(
      state,
      `This PaymentIntent's status is ${state.status}: there is no authentication to complete.`
    )
  return Effect.succeed([
    AuthenticationStarted.make({
      ...ofIntent(state),
      paymentId: payment.paymentId,
      idempotencyKey: `${state.callKeyPrefix}:authenticate:${state.attempts}`,
      outcome
    })
  ])
}

const capture = (state: IntentState, amount: number | null): Decision => {
  const payment = latestPayment(state)
  if (state.status !== "requires_capture" || payment === undefined || payment.status !== "authorized")
    return unexpected(
      state,
      `This PaymentIntent's status is ${state.status}: only one in requires_capture can be captured.`
    )
  if (intentOperation(state) !== undefined)
    return unexpected(state, "A capture or cancellation of this PaymentIntent is already in progress.")
  const toCapture = amount ?? payment.amount
  if (toCapture > payment.amount)
    return Effect.fail(
      new AmountTooLarge({
        param: "amountToCapture",
        message: `amountToCapture (${toCapture}) is more than the authorized amount (${payment.amount})`
      })
    )
  return Effect.succeed([
    CaptureStarted.make({
      ...ofIntent(state),
      paymentId: payment.paymentId,
      idempotencyKey: `${state.callKeyPrefix}:capture`,
      amount: toCapture
    })
  ])
}

const cancel = (state: IntentState, reason: CancellationReason | null): Decision => {
  if (isTerminal(state.status))
    return unexpected(state, `This PaymentIntent's status is ${state.status}: it cannot be canceled.`)
  if (intentOperation(state) !== undefined)
    return unexpected(
      state,
      "A call to the processor for this PaymentIntent is in progress; retry once it ended."
    )
  const payment = latestPayment(state)
  // An authorization (or one waiting for 3-D Secure) holds funds: the processor releases it first.
  if ((state.status === "requires_capture" || state.status === "requires_action") && payment !== undefined)
    return Effect.succeed([
      VoidStarted.make({
        ...ofIntent(state),
        paymentId: payment.paymentId,
        idempotencyKey: `${state.callKeyPrefix}:void`,
        cancellationReason: reason
      })
    ])
  return Effect.succeed([
    PaymentIntentCanceled.make({
      ...ofIntent(state),
      paymentId: null,
      idempotencyKey: null,
      cancellationReason: reason
    })
  ])
}

const refund = (state: IntentState, command: Extract<PaymentCommand, { _tag: "Refund" }>): Decision => {
  // A refund id already recorded (a caller's derived id asked again): nothing more to refund.
  if (state.refunds.some((r) => r.refundId === command.refundId)) return Effect.succeed([])
  const payment = state.payments.find((p) => p.paymentId === command.paymentId)
  if (payment === undefined) return Effect.fail(new PaymentNotFound({ paymentId: command.paymentId }))
  if (payment.status === "refunded")
    return Effect.fail(new ChargeAlreadyRefunded({ paymentId: payment.paymentId }))
  if (payment.status !== "succeeded" && payment.status !== "partially_refunded")
    return Effect.fail(new ChargeNotRefundable({ paymentId: payment.paymentId, status: payment.status }))
  const remaining = refundable(state, payment)
  if (remaining <= 0) return Effect.fail(new ChargeAlreadyRefunded({ paymentId: payment.paymentId }))
  const amount = command.amount ?? remaining
  if (amount > remaining)
    return Effect.fail(
      new AmountTooLarge({
        param: "amount",
        message: `amount (${amount}) is more than what remains refundable of this payment (${remaining})`
      })
    )
  const sequence = state.refunds.filter((r) => r.paymentId === payment.paymentId).length + 1
  return Effect.succeed([
    RefundStarted.make({
      ...ofIntent(state),
      paymentId: payment.paymentId,
      idempotencyKey: `${payment.paymentId}:refund:${sequence}`,
      refundId: command.refundId,
      amount,
      reason: command.reason
    })
  ])
}

const record = (state: IntentState, key: string, outcome: ProcessorOutcome): Decision => {
  const op = state.operations.find((o) => o.key === key)
  // Already recorded (the other of the request and the recovery worker got there first): nothing.
  if (op === undefined) return Effect.succeed([])
  const call = { ...ofIntent(state), paymentId: op.paymentId, idempotencyKey: key }
  // Built only when answered: an error captures a stack trace, and this runs for every outcome.
  const mismatch = (): Decision =>
    Effect.fail(new UnexpectedOutcome({ idempotencyKey: key, outcome: outcome._tag }))
  switch (op.kind) {
    case "authorize":
    case "authenticate":
      switch (outcome._tag) {
        case "Authorized":
          return Effect.succeed([
            PaymentAuthorized.make({
              ...call,
              processorReference: outcome.processorReference,
              captured: outcome.captured,
              amount: state.amount
            })
          ])
        case "ActionRequired":
          return Effect.succeed([
            PaymentActionRequired.make({
              ...call,
              processorReference: outcome.processorReference,
              nextAction: outcome.nextAction
            })
          ])
        case "Declined":
          return Effect.succeed([
            PaymentFailed.make({
              ...call,
              code: outcome.code,
              declineCode: outcome.declineCode,
              message: outcome.message
            })
          ])
        default:
          return mismatch()
      }
    case "capture":
      switch (outcome._tag) {
        case "Succeeded":
          return Effect.succeed([PaymentCaptured.make({ ...call, amount: op.amount })])
        case "Failed":
          return Effect.succeed([
            OperationFailed.make({ ...call, code: outcome.code, message: outcome.message })
          ])
        default:
          return mismatch()
      }
    case "void":
      switch (outcome._tag) {
        case "Succeeded":
          return Effect.succeed([
            PaymentIntentCanceled.make({
              ...ofIntent(state),
              paymentId: op.paymentId,
              idempotencyKey: key,
              cancellationReason: op.cancellationReason
            })
          ])
        case "Failed":
          return Effect.succeed([
            OperationFailed.make({ ...call, code: outcome.code, message: outcome.message })
          ])
        default:
          return mismatch()
      }
    case "refund": {
      const payment = state.payments.find((p) => p.paymentId === op.paymentId)
      switch (outcome._tag) {
        case "Succeeded":
          return Effect.succeed([
            RefundSucceeded.make({
              ...call,
              refundId: op.refundId,
              processorReference: outcome.processorReference,
              amountRefunded: (payment?.amountRefunded ?? 0) + op.amount
            })
          ])
        case "Failed":
          return Effect.succeed([
            RefundFailed.make({ ...call, refundId: op.refundId, failureReason: outcome.message })
          ])
        default:
          return mismatch()
      }
    }
  }
}

const decide = (command: PaymentCommand, state: IntentState): Decision => {
  if (command._tag === "Create") {
    if (state.exists)
      return Effect.fail(new PaymentIntentAlreadyExists({ paymentIntentId: command.paymentIntentId }))
    const { _tag, confirmPaymentId, ...data } = command
    const created = PaymentIntentCreated.make(data)
    if (confirmPaymentId === undefined) return Effect.succeed([created])
    return Effect.map(
      confirm(evolve(state, created), { _tag: "Confirm", paymentMethod: null, paymentId: confirmPaymentId }),
      (started) => [created, ...started]
    )
  }
  if (!state.exists) return Effect.fail(new PaymentIntentNotFound({ paymentIntentId: "" }))
  switch (command._tag) {
    case "Confirm":
      return confirm(state, command)
    case "Authenticate":
      return authenticate(state, command.outcome)
    case "Capture":
      return capture(state, command.amount)
    case "Cancel":
      return cancel(state, command.reason)
    case "Refund":
      return refund(state, command)
    case "Record":
      return record(state, command.idempotencyKey, command.outcome)
  }
}

// --- Objects (responses and snapshots) --------------------------------------------------------------

export const paymentObjectOf = (state: IntentState, payment: PaymentState): PaymentObject => ({
  object: "payment",
  id: payment.paymentId,
  paymentIntentId: state.paymentIntentId,
  customerId: state.customerId,
  amount: payment.amount,
  currency: state.currency,
  status: payment.status,
  captureMethod: state.captureMethod,
  amountCaptured: payment.amountCaptured,
  amountRefunded: payment.amountRefunded,
  paymentMethod: payment.paymentMethod,
  failureCode: payment.failureCode,
  declineCode: payment.declineCode,
  failureMessage: payment.failureMessage,
  processor: state.processor,
  processorReference: payment.processorReference,
  description: state.description,
  metadata: state.metadata,
  livemode: isLive(state.processor),
  authorizedAt: payment.authorizedAt,
  capturedAt: payment.capturedAt,
  canceledAt: payment.canceledAt,
  createdAt: payment.createdAt,
  updatedAt: payment.updatedAt
})

export const intentObjectOf = (state: IntentState): PaymentIntentObject => {
  const latest = latestPayment(state)
  return {
    object: "payment_intent",
    id: state.paymentIntentId,
    amount: state.amount,
    currency: state.currency,
    status: state.status,
    captureMethod: state.captureMethod,
    customerId: state.customerId,
    description: state.description,
    metadata: state.metadata,
    paymentMethod: state.paymentMethod,
    lastPaymentError: state.lastPaymentError,
    nextAction: state.nextAction,
    cancellationReason: state.cancellationReason,
    latestPaymentId: latest?.paymentId ?? null,
    amountCapturable: state.status === "requires_capture" && latest !== undefined ? latest.amount : 0,
    amountReceived: state.payments.reduce((sum, p) => sum + p.amountCaptured, 0),
    livemode: isLive(state.processor),
    canceledAt: state.canceledAt,
    createdAt: state.createdAt,
    updatedAt: state.updatedAt
  }
}

export const refundObjectOf = (state: IntentState, refund: RefundState): RefundObject => ({
  object: "refund",
  id: refund.refundId,
  paymentId: refund.paymentId,
  paymentIntentId: state.paymentIntentId,
  amount: refund.amount,
  currency: state.currency,
  status: refund.status,
  reason: refund.reason,
  failureReason: refund.failureReason,
  createdAt: refund.createdAt,
  updatedAt: refund.updatedAt
})

/** The public events (spec §6.1) an event publishes, each with the payment as of the event. */
const publicEvents = (event: PaymentEvent, state: IntentState): ReadonlyArray<PublicEventDraft> => {
  const paymentSnapshot = (paymentId: string) => {
    const payment = state.payments.find((p) => p.paymentId === paymentId)
    return payment === undefined ? undefined : encodePayment(paymentObjectOf(state, payment))
  }
  switch (event.type) {
    case "payment_intent.payment_authorized": {
      const data = paymentSnapshot(event.data.paymentId)
      if (data === undefined) return []
      return event.data.captured
        ? [
            { type: "payment.authorized", data },
            { type: "payment.captured", data }
          ]
        : [{ type: "payment.authorized", data }]
    }
    case "payment_intent.payment_captured":
    case "payment_intent.payment_failed": {
      const data = paymentSnapshot(event.data.paymentId)
      if (data === undefined) return []
      return [
        { type: event.type === "payment_intent.payment_failed" ? "payment.failed" : "payment.captured", data }
      ]
    }
    case "payment_intent.refund_succeeded": {
      const payment = state.payments.find((p) => p.paymentId === event.data.paymentId)
      const refunded = state.refunds.find((r) => r.refundId === event.data.refundId)
      if (payment === undefined || refunded === undefined) return []
      return [
        {
          type: "payment.refunded",
          data: encodeRefunded({
            ...paymentObjectOf(state, payment),
            refund: refundObjectOf(state, refunded)
          })
        }
      ]
    }
    default:
      return []
  }
}

export const PaymentIntentDecider = defineDecider({
  streamType: "payment_intent",
  events: paymentEventTypes,
  initialState: initialIntentState,
  evolve,
  decide,
  publicEvents
})
