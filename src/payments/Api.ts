/**
 * The payments HTTP contract (spec §4.5; COMMERCE.md decision 5; research commerce-design §1.4–§1.6,
 * §3): payment intents, payments (Stripe's charges), refunds, and — with the test processor only —
 * the test routes that play the customer's bank. The `/v1` conventions of `/v1/webhooks`: `object`
 * on every resource, camelCase, list objects with `limit`/`startingAfter`/`endingBefore`, the one
 * error body (402 `card_error` with `declineCode` for declines).
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ApiBase } from "../http/ApiBase.js"
import { Authentication } from "../http/Auth.js"
import { byId, IdPath, scoped } from "../http/Endpoints.js"
import { Forbidden, NotFound, Unauthorized } from "../http/errors.js"
import { idOf, OptionalFieldsBody } from "../http/Fields.js"
import { V1List, v1ListParams } from "../http/Lists.js"
import { MetadataInput } from "../kernel/Metadata.js"
import { ISO_4217_CODES, isIso4217 } from "../kernel/Money.js"
import { MAX_AMOUNT } from "./decider.js"
import { CardDeclined, PaymentStateConflict } from "./errors.js"
import { CancellationReason, CaptureMethod, RefundReason } from "./events.js"
import {
  PAYMENT_STATUSES,
  PaymentIntentObject,
  PaymentObject,
  PaymentStatus,
  RefundObject
} from "./objects.js"
import { ProcessorEventReceipt } from "./stripeEvents.js"
import { TEST_CARDS } from "./testProcessor.js"

// --- Request fields ----------------------------------------------------------------------------------

// The rules below are what the handlers rely on; the annotations state them in the OpenAPI document
// and keep requests drawn from these schemas within them (test/http/schema-property.test.ts).

/** Minor units, a whole number from 1 to 99,999,999 (Stripe's bounds); a float or a string is a 400. */
const Amount = (field: string) =>
  Schema.Int.pipe(Schema.between(1, MAX_AMOUNT)).annotations({
    message: () => ({
      message: `${field} must be an integer number of minor units from 1 to ${MAX_AMOUNT}`,
      override: true
    }),
    jsonSchema: { type: "integer", minimum: 1, maximum: MAX_AMOUNT }
  })

/** An ISO 4217 code, either case (stored uppercase). */
const Currency = Schema.Trim.pipe(
  Schema.compose(Schema.Uppercase),
  Schema.filter(isIso4217, {
    message: () => "currency must be an ISO 4217 currency code such as USD or EUR",
    jsonSchema: { type: "string", enum: [...ISO_4217_CODES] },
    arbitrary: () => (fc) => fc.constantFrom(...ISO_4217_CODES)
  })
)

/** A payment-method token of the configured processor (the test processor also takes test card numbers). */
const PaymentMethodInput = Schema.String.pipe(
  Schema.maxLength(100, { message: () => "paymentMethod must be a payment method token (pm_…)" })
).annotations({
  message: () => "paymentMethod must be a payment method token (pm_…)",
  jsonSchema: { type: "string", minLength: 1, maxLength: 100, examples: ["pm_card_visa"] },
  arbitrary: () => (fc) => fc.constantFrom(...TEST_CARDS.map((c) => c.token))
})

const Description = Schema.String.pipe(
  Schema.maxLength(1000, { message: () => "description must be at most 1000 characters" })
)

const intentFields = {
  amount: Amount("amount"),
  currency: Currency,
  captureMethod: Schema.optional(
    CaptureMethod.annotations({ message: () => "captureMethod must be automatic or manual" })
  ),
  customerId: Schema.optional(idOf("cus", "customerId")),
  description: Schema.optional(Description),
  metadata: Schema.optional(MetadataInput.annotations({ message: () => "metadata must be a JSON object" }))
}

export const NewPaymentIntent = Schema.Struct({
  ...intentFields,
  paymentMethod: Schema.optional(PaymentMethodInput),
  confirm: Schema.optional(Schema.Boolean.annotations({ message: () => "confirm must be true or false" }))
})

export const NewPayment = Schema.Struct({ ...intentFields, paymentMethod: PaymentMethodInput })

export const ConfirmRequest = Schema.Struct({
  paymentMethod: Schema.optional(PaymentMethodInput),
  /** The intent's client secret: lets a browser confirm without a secret key. */
  clientSecret: Schema.optional(
    Schema.String.pipe(Schema.maxLength(200, { message: () => "clientSecret must be a client secret" }))
  )
})

export const CaptureRequest = Schema.Struct({ amountToCapture: Schema.optional(Amount("amountToCapture")) })

export const CancelRequest = Schema.Struct({
  cancellationReason: Schema.optional(
    CancellationReason.annotations({
      message: () => ({
        message: "cancellationReason must be one of abandoned, duplicate, requested_by_customer, fraudulent",
        override: true
      })
    })
  )
})

export const RefundRequest = Schema.Struct({
  amount: Schema.optional(Amount("amount")),
  reason: Schema.optional(
    RefundReason.annotations({
      message: () => ({
        message: "reason must be one of duplicate, fraudulent, requested_by_customer, other",
        override: true
      })
    })
  )
})

export const AuthenticateRequest = Schema.Struct({
  outcome: Schema.Literal("approve", "fail").annotations({ message: () => "outcome must be approve or fail" })
})

export const PaymentListParams = Schema.Struct({
  ...v1ListParams("pay").fields,
  customerId: Schema.optional(idOf("cus", "customerId")),
  paymentIntentId: Schema.optional(idOf("pi", "paymentIntentId")),
  status: Schema.optional(
    PaymentStatus.annotations({
      message: () => ({ message: `status must be one of ${PAYMENT_STATUSES.join(", ")}`, override: true })
    })
  )
})

// --- Responses ----------------------------------------------------------------------------------------

export const PaymentIntentWithSecret = Schema.Struct({
  ...PaymentIntentObject.fields,
  /** `<id>_secret_…`: give it to the customer's browser to confirm with; shown on creation only. */
  clientSecret: Schema.String
}).annotations({ identifier: "PaymentIntentWithSecret" })

// --- Endpoints ----------------------------------------------------------------------------------------

const AMOUNT_RULES =
  "`amount`: integer minor units, 1 to 99,999,999. `currency`: ISO 4217 (either case, stored uppercase). " +
  "`paymentMethod`: a token of the processor (test processor: Stripe's test tokens and test card numbers; " +
  "never stored, only its token, brand, last four digits and expiry); an unknown one → 400 " +
  "`parameter_invalid` before any processor call."
const DECLINE =
  "A declined card → 402 `card_error` with `code`, `declineCode` and the object as it now stands " +
  "(the intent goes back to `requires_payment_method` with `lastPaymentError`), and `payment.failed`."

export class V1PaymentIntentsApi extends HttpApiGroup.make("v1PaymentIntents")
  .add(
    HttpApiEndpoint.post("create", "/v1/payment-intents")
      .setPayload(NewPaymentIntent)
      .addSuccess(PaymentIntentWithSecret, { status: 201 })
      .addError(CardDeclined)
      .addError(NotFound)
      .addError(PaymentStateConflict)
      .pipe(scoped("write:payments"))
      .annotate(OpenApi.Summary, "Create a payment intent (and confirm it with `confirm: true`)")
      .annotate(
        OpenApi.Description,
        `${AMOUNT_RULES} \`captureMethod\`: automatic (default) or manual. Without \`paymentMethod\` the ` +
          "intent is `requires_payment_method`, with one `requires_confirmation`. The answer carries " +
          `\`clientSecret\`, shown this once. ${DECLINE}`
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/payment-intents/:id")
      .addSuccess(PaymentIntentObject)
      .pipe(scoped("read:payments"), byId)
      .annotate(OpenApi.Summary, "A payment intent (never its client secret)")
      .annotate(
        OpenApi.Description,
        "A shopper sees only intents of their own customer record (others: 404)."
      )
  )
  .add(
    HttpApiEndpoint.post("capture", "/v1/payment-intents/:id/capture")
      .setPayload(OptionalFieldsBody(CaptureRequest))
      .addSuccess(PaymentIntentObject)
      .addError(PaymentStateConflict)
      .pipe(scoped("write:payments"), byId)
      .annotate(OpenApi.Summary, "Capture an authorized (`requires_capture`) intent, all or part of it")
      .annotate(
        OpenApi.Description,
        "`amountToCapture` (default: all) up to the authorized amount, else 400 `amount_too_large`; the rest " +
          "is released. Any other state → 409 `payment_intent_unexpected_state` (also when a cancel won the race)."
      )
  )
  .add(
    HttpApiEndpoint.post("cancel", "/v1/payment-intents/:id/cancel")
      .setPayload(OptionalFieldsBody(CancelRequest))
      .addSuccess(PaymentIntentObject)
      .addError(PaymentStateConflict)
      .pipe(scoped("write:payments"), byId)
      .annotate(
        OpenApi.Summary,
        "Cancel an intent that is not succeeded or canceled (an authorization is voided)"
      )
      .annotate(
        OpenApi.Description,
        "`succeeded`, `canceled`, or a call to the processor under way (a capture that won the race) → 409 " +
          "`payment_intent_unexpected_state`."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Payment intents")
  .annotate(
    OpenApi.Description,
    "Stripe's PaymentIntents: requires_payment_method → requires_confirmation → requires_action → " +
      "processing → requires_capture → succeeded | canceled. Every processor call carries an idempotency " +
      "key derived from our ids, so retries never charge twice."
  ) {}

/**
 * Confirming is its own group: a browser confirms with the intent's client secret and no credential
 * (as Stripe.js does), so the handler authenticates a credential itself when one is sent.
 */
export class V1PaymentIntentConfirmApi extends HttpApiGroup.make("v1PaymentIntentConfirm")
  .add(
    HttpApiEndpoint.post("confirm", "/v1/payment-intents/:id/confirm")
      .setPath(IdPath)
      .setPayload(OptionalFieldsBody(ConfirmRequest))
      .addSuccess(PaymentIntentObject)
      .addError(Unauthorized)
      .addError(Forbidden)
      .addError(NotFound)
      .addError(CardDeclined)
      .addError(PaymentStateConflict)
      .annotate(OpenApi.Summary, "Confirm a payment intent: authorize (and capture) its payment")
      .annotate(
        OpenApi.Description,
        "Authorized by `Authorization: Bearer <credential with write:payments>` or by the intent's " +
          "`clientSecret` in the body (a wrong one → 404). `paymentMethod` replaces the intent's. Approved: " +
          "`succeeded` (automatic capture) or `requires_capture` (manual); 3-D Secure cards: `requires_action` " +
          `with \`nextAction\`. ${DECLINE} Concurrent confirms make one processor call and all answer its ` +
          "outcome; `succeeded`, `canceled` or `requires_capture` → 409 `payment_intent_unexpected_state`."
      )
  )
  .annotate(OpenApi.Title, "Payment intents (confirm)")
  .annotate(
    OpenApi.Description,
    "Confirming a payment intent, with a credential or with its client secret."
  ) {}

export class V1PaymentsApi extends HttpApiGroup.make("v1Payments")
  .add(
    HttpApiEndpoint.post("create", "/v1/payments")
      .setPayload(NewPayment)
      .addSuccess(PaymentObject, { status: 201 })
      .addError(CardDeclined)
      .addError(NotFound)
      .addError(PaymentStateConflict)
      .pipe(scoped("write:payments"))
      .annotate(OpenApi.Summary, "Create and confirm a payment in one call")
      .annotate(OpenApi.Description, `${AMOUNT_RULES} ${DECLINE}`)
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/payments")
      .setUrlParams(PaymentListParams)
      .addSuccess(V1List(PaymentObject, "PaymentList"))
      .pipe(scoped("read:payments"))
      .annotate(OpenApi.Summary, "List payments, newest first")
      .annotate(
        OpenApi.Description,
        "Filters: `customerId`, `paymentIntentId`, `status`. `limit` 1–100 (default 10); `startingAfter` or " +
          "`endingBefore` (a payment id), not both. A shopper lists only their own payments."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/payments/:id")
      .addSuccess(PaymentObject)
      .pipe(scoped("read:payments"), byId)
      .annotate(OpenApi.Summary, "A payment")
      .annotate(OpenApi.Description, "A shopper sees only their own payments (others: 404).")
  )
  .add(
    HttpApiEndpoint.post("capture", "/v1/payments/:id/capture")
      .setPayload(OptionalFieldsBody(CaptureRequest))
      .addSuccess(PaymentObject)
      .addError(PaymentStateConflict)
      .pipe(scoped("write:payments"), byId)
      .annotate(OpenApi.Summary, "Capture an authorized payment, all or part of it")
      .annotate(
        OpenApi.Description,
        "`amountToCapture` up to the authorized amount (else 400 `amount_too_large`). A payment that is not " +
          "`authorized` → 409 `payment_intent_unexpected_state`."
      )
  )
  .add(
    HttpApiEndpoint.post("refund", "/v1/payments/:id/refund")
      .setPayload(OptionalFieldsBody(RefundRequest))
      .addSuccess(RefundObject)
      .addError(PaymentStateConflict)
      .pipe(scoped("write:payments"), byId)
      .annotate(OpenApi.Summary, "Refund a captured payment, all or part of what remains")
      .annotate(
        OpenApi.Description,
        "`amount` (default: all that remains) up to what remains refundable (else 400 `amount_too_large`); " +
          "partial refunds accumulate, concurrent ones never exceed the captured amount. Nothing left → 409 " +
          "`charge_already_refunded`; a payment not captured → 409 `charge_not_refundable`. Each refund " +
          "publishes `payment.refunded`. Answers the refund (`failed` when the processor refused it)."
      )
  )
  .add(
    HttpApiEndpoint.get("getRefund", "/v1/refunds/:id")
      .addSuccess(RefundObject)
      .pipe(scoped("read:payments"), byId)
      .annotate(OpenApi.Summary, "A refund")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Payments")
  .annotate(
    OpenApi.Description,
    "Payments (Stripe's charges): pending, authorized, succeeded, failed, canceled, partially_refunded, " +
      "refunded; and their refunds."
  ) {}

export class V1TestPaymentsApi extends HttpApiGroup.make("v1TestPayments")
  .add(
    HttpApiEndpoint.post("authenticate", "/v1/test/payment-intents/:id/authenticate")
      .setPayload(AuthenticateRequest)
      .addSuccess(PaymentIntentObject)
      .addError(CardDeclined)
      .addError(PaymentStateConflict)
      .pipe(scoped("write:payments"), byId)
      .annotate(OpenApi.Summary, "Test processor: complete 3-D Secure of a requires_action intent")
      .annotate(
        OpenApi.Description,
        "Only while `PAYMENT_PROCESSOR=test` (otherwise 404). `approve` → `succeeded` or `requires_capture`; " +
          "`fail` → 402 `card_error` and the intent back to `requires_payment_method`."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Test helpers")
  .annotate(OpenApi.Description, "Routes that exist only with the test processor.") {}

export class V1ProcessorEventsApi extends HttpApiGroup.make("v1ProcessorEvents")
  .add(
    HttpApiEndpoint.post("stripe", "/v1/processor-events/stripe")
      .addSuccess(ProcessorEventReceipt)
      .addError(NotFound)
      .annotate(OpenApi.Summary, "Stripe's signed events (point Stripe's webhook endpoint here)")
      .annotate(
        OpenApi.Description,
        "No credential: the `Stripe-Signature` header must sign the exact body with `STRIPE_WEBHOOK_SECRET` " +
          "(else 400 `signature_missing` / `signature_invalid`). Applies `payment_intent.succeeded`, " +
          "`.amount_capturable_updated`, `.requires_action`, `.payment_failed`, `charge.refunded` and " +
          "`refund.*` to the payment intent they concern, exactly once whichever of the API answer and the " +
          "event arrives first; anything else, or an object none of ours, is answered 200 `ignored`. Only " +
          "with `PAYMENT_PROCESSOR=stripe` and `STRIPE_WEBHOOK_SECRET` (otherwise 404)."
      )
  )
  .annotate(OpenApi.Title, "Processor events")
  .annotate(OpenApi.Description, "Events the payment processor sends us, verified by its signature.") {}

/** This context's routes on the service's API (`ApiBase`): what its handlers are built against. */
export const PaymentsRoutes = ApiBase.add(V1PaymentIntentsApi)
  .add(V1PaymentIntentConfirmApi)
  .add(V1PaymentsApi)
  .add(V1TestPaymentsApi)
  .add(V1ProcessorEventsApi)
