/**
 * `POST /v1/processor-events/stripe`: Stripe's signed events, applied to OUR payment intents exactly
 * once, whichever of the API answer and the event arrives first.
 *
 * An event is the answer to a call of ours, arriving another way: it is recorded through the same
 * `Record` command as the API answer (Payments.ts step 3), under the key of the call it answers.
 * `Record` applies an outcome only to a call still pending, so the second of the two to arrive —
 * event or answer, or a replayed event — changes nothing, and the public events
 * (`payment.authorized`, `payment.captured`, `payment.failed`, `payment.refunded`) are published
 * once. Which call: the key the Stripe object was created under (`metadata.commerce_call_key`,
 * stripeProcessor.ts), or the Stripe reference recorded on our payment.
 *
 * - `payment_intent.succeeded` / `.amount_capturable_updated` / `.requires_action` /
 *   `.payment_failed`: the outcome of the attempt's authorization, while it is pending. Once the
 *   attempt was recorded as `requires_action`, the customer's 3-D Secure answer at Stripe is what
 *   `succeeded` / `amount_capturable_updated` / `payment_failed` report: recorded as the completion
 *   of that authentication (`Authenticate` then `Record`, in one transaction — Stripe played the
 *   bank, no call of ours is made). `succeeded` also completes a pending capture.
 * - `charge.refunded` (with its refunds listed), `refund.created` / `.updated` / `.failed`: the
 *   outcome of a pending refund of ours, by the refund's key.
 * Anything else, or an object that is none of ours (an unknown intent, a refund made in Stripe's
 * dashboard), is answered 200 and logged: Stripe must not retry what we will never apply.
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option, Schema } from "effect"
import type Stripe from "stripe"
import { BadRequest, NotFound } from "../http/errors.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import {
  type IntentState,
  type Operation,
  PaymentIntentDecider,
  type ProcessorOutcome,
  paymentIntentStream
} from "./decider.js"
import { type AuthorizationResult, PaymentProcessor } from "./processor.js"
import { intentIdByCallKeyPrefix, intentIdOfPayment } from "./queries.js"
import { authorizationOf, CALL_KEY_METADATA, refundOutcomeOf, StripeWebhook } from "./stripeObjects.js"

export const ProcessorEventResult = Schema.Literal("recorded", "already_recorded", "ignored")
export type ProcessorEventResult = typeof ProcessorEventResult.Type

/** The answer to Stripe (any 2xx will do): what became of its event. */
export const ProcessorEventReceipt = Schema.Struct({
  object: Schema.Literal("processor_event"),
  id: Schema.String,
  type: Schema.String,
  result: ProcessorEventResult
}).annotations({ identifier: "ProcessorEventReceipt" })
export type ProcessorEventReceipt = typeof ProcessorEventReceipt.Type

const WEBHOOK = { actor: { type: "system" as const, id: "stripe-webhook" } }

const notConfigured = NotFound.of({
  message:
    "Unrecognized request URL (POST: /v1/processor-events/stripe): it exists with PAYMENT_PROCESSOR=stripe and STRIPE_WEBHOOK_SECRET"
})

/** The intent a call key belongs to: its prefix is an intent id, an `ik_…` prefix, or a payment id. */
const keyPrefix = (key: string) => key.slice(0, Math.max(0, key.indexOf(":")))

const metadataKey = (metadata: Stripe.Metadata | null | undefined) => {
  const key = metadata?.[CALL_KEY_METADATA]
  return typeof key === "string" && key.includes(":") ? Option.some(key) : Option.none<string>()
}

const idOf = (value: string | { readonly id: string } | null) =>
  value === null ? Option.none<string>() : Option.some(typeof value === "string" ? value : value.id)

export const makeStripeEvents = Effect.gen(function* () {
  const runner = yield* CommandRunner
  const sql = yield* SqlClient.SqlClient
  const webhook = yield* StripeWebhook
  const processor = yield* PaymentProcessor

  /** Our intent of a Stripe object: by its call key, else by the Stripe payment intent it concerns. */
  const findIntent = (key: Option.Option<string>, stripePaymentIntent: Option.Option<string>) =>
    Effect.gen(function* () {
      if (Option.isSome(key)) {
        const prefix = keyPrefix(key.value)
        const found = prefix.startsWith("pay_")
          ? yield* intentIdOfPayment(sql, { paymentId: prefix })
          : yield* intentIdByCallKeyPrefix(sql, prefix)
        if (Option.isSome(found)) return found
      }
      if (Option.isNone(stripePaymentIntent)) return Option.none<string>()
      return yield* intentIdOfPayment(sql, {
        processor: processor.name,
        reference: stripePaymentIntent.value
      })
    })

  /** In one transaction: the commands `plan` decides from the intent's current state. */
  const applyTo = (
    paymentIntentId: string,
    plan: (state: IntentState) => Option.Option<(state: IntentState) => Effect.Effect<void, unknown>>
  ): Effect.Effect<ProcessorEventResult, unknown> =>
    runner.transact(
      Effect.gen(function* () {
        const { state } = yield* runner.load(PaymentIntentDecider, paymentIntentStream(paymentIntentId))
        if (!state.exists) return "ignored" as const
        const step = plan(state)
        if (Option.isNone(step)) return "already_recorded" as const
        yield* step.value(state)
        return "recorded" as const
      })
    )

  /**
   * The outcome, through the same `Record` as the API answer. The call's safety net (its due-work
   * item) is left armed on purpose: when it comes due the worker finds the call recorded and is done
   * without asking Stripe. Disarming it here would take the due-work row in this transaction, and
   * the request recording the same call (stream first, then that row) and the recovery worker (that
   * row first, then the stream) take the two in opposite orders: whichever order this took, it could
   * deadlock with one of them.
   */
  const record = (paymentIntentId: string, key: string, outcome: ProcessorOutcome) =>
    Effect.asVoid(
      runner.execute(
        PaymentIntentDecider,
        paymentIntentStream(paymentIntentId),
        { _tag: "Record", idempotencyKey: key, outcome },
        { metadata: WEBHOOK }
      )
    )

  /** The customer's 3-D Secure answer, given at Stripe: the authentication and its outcome at once. */
  const completeAuthentication = (paymentIntentId: string, outcome: AuthorizationResult) =>
    Effect.gen(function* () {
      const stream = paymentIntentStream(paymentIntentId)
      const started = yield* runner.execute(
        PaymentIntentDecider,
        stream,
        { _tag: "Authenticate", outcome: outcome._tag === "Declined" ? "fail" : "approve" },
        { metadata: WEBHOOK }
      )
      const op = started.state.operations.find((o) => o.kind === "authenticate")
      if (op === undefined) return yield* Effect.dieMessage("an authentication started no operation")
      yield* runner.execute(
        PaymentIntentDecider,
        stream,
        { _tag: "Record", idempotencyKey: op.key, outcome },
        { metadata: WEBHOOK }
      )
    })

  /** A Stripe payment intent's news, for the attempt it belongs to. */
  const planIntent =
    (pi: Stripe.PaymentIntent, key: Option.Option<string>, outcome: AuthorizationResult, type: string) =>
    (state: IntentState) => {
      const paymentOf = (op: Operation) => state.payments.find((p) => p.paymentId === op.paymentId)
      const pending = state.operations.find(
        (op) =>
          (op.kind === "authorize" || op.kind === "authenticate") &&
          ((Option.isSome(key) && op.key === key.value) || paymentOf(op)?.processorReference === pi.id)
      )
      if (pending !== undefined) return Option.some(() => record(state.paymentIntentId, pending.key, outcome))
      const payment = state.payments.find((p) => p.processorReference === pi.id)
      if (payment === undefined) return Option.none()
      const latest = state.payments[state.payments.length - 1]
      if (
        state.status === "requires_action" &&
        latest?.paymentId === payment.paymentId &&
        (outcome._tag === "Authorized" || outcome._tag === "Declined")
      )
        return Option.some(() => completeAuthentication(state.paymentIntentId, outcome))
      const capture = state.operations.find(
        (op) => op.kind === "capture" && op.paymentId === payment.paymentId
      )
      if (capture !== undefined && type === "payment_intent.succeeded")
        return Option.some(() =>
          record(state.paymentIntentId, capture.key, { _tag: "Succeeded", processorReference: pi.id })
        )
      return Option.none()
    }

  const onPaymentIntent = (pi: Stripe.PaymentIntent, type: string) =>
    Effect.gen(function* () {
      const outcome = authorizationOf(pi)
      if (Option.isNone(outcome)) return "ignored" as const
      const key = metadataKey(pi.metadata)
      const intent = yield* findIntent(key, Option.some(pi.id))
      if (Option.isNone(intent)) return "ignored" as const
      return yield* applyTo(intent.value, planIntent(pi, key, outcome.value, type))
    })

  const onRefund = (refund: Stripe.Refund) =>
    Effect.gen(function* () {
      const key = metadataKey(refund.metadata)
      if (Option.isNone(key)) return "ignored" as const
      const intent = yield* findIntent(key, idOf(refund.payment_intent))
      if (Option.isNone(intent)) return "ignored" as const
      // Stripe's refund still `pending` is left to the API answer (which counts it as done).
      if (refund.status === "pending") return "already_recorded" as const
      return yield* applyTo(intent.value, (state) =>
        state.operations.some((op) => op.kind === "refund" && op.key === key.value)
          ? Option.some(() => record(state.paymentIntentId, key.value, refundOutcomeOf(refund)))
          : Option.none()
      )
    })

  const apply = (event: Stripe.Event): Effect.Effect<ProcessorEventResult, unknown> => {
    switch (event.type) {
      case "payment_intent.succeeded":
      case "payment_intent.amount_capturable_updated":
      case "payment_intent.requires_action":
      case "payment_intent.payment_failed":
        return onPaymentIntent(event.data.object, event.type)
      case "charge.refunded":
        return Effect.map(
          Effect.forEach(event.data.object.refunds?.data ?? [], onRefund),
          (results): ProcessorEventResult =>
            results.includes("recorded")
              ? "recorded"
              : results.includes("already_recorded")
                ? "already_recorded"
                : "ignored"
        )
      case "refund.created":
      case "refund.updated":
      case "refund.failed":
        return onRefund(event.data.object)
      default:
        return Effect.succeed("ignored")
    }
  }

  /** Verifies the signature over the exact bytes received, then applies the event. */
  const receive = (payload: string, signature: string | undefined) =>
    Effect.gen(function* () {
      if (Option.isNone(webhook)) return yield* Effect.fail(notConfigured)
      if (signature === undefined || signature.trim() === "")
        return yield* Effect.fail(
          BadRequest.of({
            code: "signature_missing",
            message: "A Stripe event needs its Stripe-Signature header"
          })
        )
      const event = yield* webhook.value.verify(payload, signature).pipe(
        Effect.mapError((reason) =>
          BadRequest.of({
            code: "signature_invalid",
            message: `The Stripe-Signature header does not sign this body with our webhook secret (${reason.slice(0, 200)})`
          })
        )
      )
      const result = yield* apply(event).pipe(Effect.orDie)
      if (result === "ignored")
        yield* Effect.logInfo(
          `payments: Stripe event ${event.id} (${event.type}) concerns nothing of ours; ignored`
        )
      else yield* Effect.logDebug(`payments: Stripe event ${event.id} (${event.type}): ${result}`)
      const receipt: ProcessorEventReceipt = {
        object: "processor_event",
        id: event.id,
        type: event.type,
        result
      }
      return receipt
    })

  return { receive }
})

export type StripeEventsShape = Effect.Effect.Success<typeof makeStripeEvents>

export class StripeEvents extends Context.Tag("payments/StripeEvents")<StripeEvents, StripeEventsShape>() {}

export const StripeEventsLive = Layer.effect(StripeEvents, makeStripeEvents)
