/**
 * Handlers of `/v1/payment-intents…`, `/v1/payments…`, `/v1/refunds/:id` and `/v1/test/…`: each hands
 * the request to `Payments` with the current actor. Confirm authenticates a credential itself, when
 * one is sent: a browser confirms with the client secret alone.
 */
import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Effect, Layer } from "effect"
import { authenticate, CredentialVerifier, CurrentActor } from "../http/Auth.js"
import { BadRequest } from "../http/errors.js"
import { PaymentsRoutes } from "./Api.js"
import { Payments } from "./Payments.js"
import { StripeEvents } from "./stripeEvents.js"

const withActor = <A, E, R>(f: (actor: typeof CurrentActor.Service) => Effect.Effect<A, E, R>) =>
  Effect.flatMap(CurrentActor, f)

/** The request's `Idempotency-Key`: creations derive their processor keys from it (Payments.ts). */
const requestKey = Effect.map(HttpServerRequest.HttpServerRequest, (request) => {
  const key = request.headers["idempotency-key"]?.trim()
  return key === undefined || key === "" ? undefined : key
})

const PaymentIntentsHttpLive = HttpApiBuilder.group(PaymentsRoutes, "v1PaymentIntents", (handlers) =>
  Effect.gen(function* () {
    const payments = yield* Payments
    return handlers
      .handle("create", ({ payload }) =>
        withActor((actor) => Effect.flatMap(requestKey, (key) => payments.createIntent(actor, payload, key)))
      )
      .handle("get", ({ path }) => withActor((actor) => payments.getIntent(actor, path.id)))
      .handle("capture", ({ path, payload }) =>
        withActor((actor) => payments.captureIntent(actor, path.id, payload.amountToCapture))
      )
      .handle("cancel", ({ path, payload }) =>
        withActor((actor) => payments.cancelIntent(actor, path.id, payload.cancellationReason))
      )
  })
)

const ConfirmHttpLive = HttpApiBuilder.group(PaymentsRoutes, "v1PaymentIntentConfirm", (handlers) =>
  Effect.gen(function* () {
    const payments = yield* Payments
    const verifier = yield* CredentialVerifier
    return handlers.handle("confirm", ({ path, payload }) =>
      Effect.gen(function* () {
        const request = yield* HttpServerRequest.HttpServerRequest
        const header = request.headers.authorization
        // With the client secret, a credential is optional; without it, one is required.
        const actor =
          header === undefined && payload.clientSecret !== undefined
            ? undefined
            : yield* authenticate(verifier, header)
        return yield* payments.confirmIntent({ actor, clientSecret: payload.clientSecret }, path.id, {
          paymentMethod: payload.paymentMethod
        })
      })
    )
  })
)

const PaymentsHttp = HttpApiBuilder.group(PaymentsRoutes, "v1Payments", (handlers) =>
  Effect.gen(function* () {
    const payments = yield* Payments
    return handlers
      .handle("create", ({ payload }) =>
        withActor((actor) => Effect.flatMap(requestKey, (key) => payments.createPayment(actor, payload, key)))
      )
      .handle("list", ({ urlParams }) => withActor((actor) => payments.listPayments(actor, urlParams)))
      .handle("get", ({ path }) => withActor((actor) => payments.getPayment(actor, path.id)))
      .handle("capture", ({ path, payload }) =>
        withActor((actor) => payments.capturePayment(actor, path.id, payload.amountToCapture))
      )
      .handle("refund", ({ path, payload }) =>
        withActor((actor) => payments.refundPayment(actor, path.id, payload))
      )
      .handle("getRefund", ({ path }) => withActor((actor) => payments.getRefund(actor, path.id)))
  })
)

const TestPaymentsHttpLive = HttpApiBuilder.group(PaymentsRoutes, "v1TestPayments", (handlers) =>
  Effect.gen(function* () {
    const payments = yield* Payments
    return handlers.handle("authenticate", ({ path, payload }) =>
      withActor((actor) => payments.authenticateIntent(actor, path.id, payload.outcome))
    )
  })
)

/** Stripe's events: the body is read as sent (the signature covers its exact bytes). */
const ProcessorEventsHttpLive = HttpApiBuilder.group(PaymentsRoutes, "v1ProcessorEvents", (handlers) =>
  Effect.gen(function* () {
    const events = yield* StripeEvents
    return handlers.handle("stripe", () =>
      Effect.gen(function* () {
        const request = yield* HttpServerRequest.HttpServerRequest
        const payload = yield* request.text.pipe(
          Effect.mapError(() =>
            BadRequest.of({ code: "invalid_body", message: "the request body could not be read" })
          )
        )
        return yield* events.receive(payload, request.headers["stripe-signature"])
      })
    )
  })
)

export const PaymentsHttpLive = Layer.mergeAll(
  PaymentIntentsHttpLive,
  ConfirmHttpLive,
  PaymentsHttp,
  TestPaymentsHttpLive,
  ProcessorEventsHttpLive
)
