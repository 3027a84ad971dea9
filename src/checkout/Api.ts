/**
 * The checkouts HTTP contract on `/v1` (spec §4.5; COMMERCE.md decision 2; research
 * commerce-design §1.2, §2.1): Stripe Checkout Session's shape, camelCase, `object: "checkout"`.
 * Shoppers (`write:checkouts`) create checkouts for themselves and see only their own (others: 404);
 * staff do everything.
 *
 * Every rule a request can break on its own is stated here (lines 1–100, quantities 1–10,000,
 * `customerId` or `email`, expiry 30 min – 24 h); what depends on stored state (a product missing,
 * draft, archived or recurring, mixed currencies, stock) is the use case's.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ApiBase } from "../http/ApiBase.js"
import { Authentication } from "../http/Auth.js"
import { byId, scoped } from "../http/Endpoints.js"
import { Conflict, NotFound } from "../http/errors.js"
import { IntField, idOf, OptionalFieldsBody, StoredEmail, Text } from "../http/Fields.js"
import { EmailSchema } from "../kernel/Email.js"
import { Metadata, MetadataInput } from "../kernel/Metadata.js"
import { CaptureMethod, CardDeclined, NextAction, PaymentStateConflict } from "../payments/index.js"
import { CheckoutStatus, ShippingAddress } from "./events.js"

export const MAX_LINES = 100
export const MAX_LINE_QUANTITY = 10_000
export const MIN_EXPIRES_IN = 1800
export const MAX_EXPIRES_IN = 86_400

const LineInput = Schema.Struct({
  productId: Schema.String.pipe(
    Schema.maxLength(100, { message: () => "productId must be a product id (prod_…)" })
  ).annotations({ message: () => "productId must be a product id (prod_…)" }),
  quantity: IntField("quantity", 1, MAX_LINE_QUANTITY)
})

const LineItems = Schema.Array(LineInput).pipe(
  Schema.minItems(1, { message: () => "lineItems must hold at least one line" }),
  Schema.maxItems(MAX_LINES, { message: () => `lineItems can hold at most ${MAX_LINES} lines` })
)

const OptionalText = (field: string, max: number) => Schema.optional(Schema.NullOr(Text(field, max)))

const Country = Schema.Trim.pipe(
  Schema.compose(Schema.Uppercase),
  Schema.pattern(/^[A-Z]{2}$/, { message: () => "country must be a two-letter ISO 3166-1 code such as US" })
)

export const ShippingAddressInput = Schema.Struct({
  label: OptionalText("label", 100),
  line1: Text("line1", 200),
  city: Text("city", 100),
  state: OptionalText("state", 100),
  postalCode: OptionalText("postalCode", 20),
  country: Country
})

const PaymentMethodInput = Schema.String.pipe(
  Schema.maxLength(100, { message: () => "paymentMethod must be a payment method token (pm_…)" })
).annotations({
  message: () => "paymentMethod must be a payment method token (pm_…)",
  jsonSchema: { type: "string", minLength: 1, maxLength: 100, examples: ["pm_card_visa"] },
  arbitrary: () => (fc) => fc.constantFrom("pm_card_visa", "pm_card_mastercard")
})

export const NewCheckout = Schema.Struct({
  lineItems: LineItems,
  customerId: Schema.optional(idOf("cus", "customerId")),
  email: Schema.optional(EmailSchema.annotations({ message: () => "email must be a valid email address" })),
  shippingAddress: Schema.optional(Schema.NullOr(ShippingAddressInput)),
  paymentMethod: Schema.optional(PaymentMethodInput),
  captureMethod: Schema.optional(
    CaptureMethod.annotations({ message: () => "captureMethod must be automatic or manual" })
  ),
  expiresInSeconds: Schema.optional(IntField("expiresInSeconds", MIN_EXPIRES_IN, MAX_EXPIRES_IN)),
  metadata: Schema.optional(MetadataInput.annotations({ message: () => "metadata must be a JSON object" }))
})
export type NewCheckoutInput = typeof NewCheckout.Type

export const ConfirmCheckout = Schema.Struct({ paymentMethod: Schema.optional(PaymentMethodInput) })

export const CheckoutLineItem = Schema.Struct({
  productId: Schema.String,
  name: Schema.String,
  sku: Schema.NullOr(Schema.String),
  quantity: Schema.Int,
  /** The product's price when the checkout was created (minor units). */
  unitAmount: Schema.Int,
  amountTotal: Schema.Int,
  currency: Schema.String
}).annotations({ identifier: "CheckoutLineItem" })

export const Checkout = Schema.Struct({
  object: Schema.Literal("checkout"),
  id: Schema.String,
  status: CheckoutStatus,
  paymentStatus: Schema.Literal("unpaid", "paid", "no_payment_required"),
  customerId: Schema.NullOr(Schema.String),
  email: Schema.NullOr(StoredEmail),
  lineItems: Schema.Array(CheckoutLineItem),
  currency: Schema.String,
  subtotal: Schema.Int,
  total: Schema.Int,
  shippingAddress: Schema.NullOr(ShippingAddress),
  captureMethod: CaptureMethod,
  paymentIntentId: Schema.NullOr(Schema.String),
  /** The intent's client secret (confirm it with Stripe.js-style clients): on creation only, else null. */
  clientSecret: Schema.NullOr(Schema.String),
  /** What the customer must do (3-D Secure) while `processing`. */
  nextAction: Schema.NullOr(NextAction),
  orderId: Schema.NullOr(Schema.String),
  expiresAt: Schema.Date,
  metadata: Metadata,
  createdAt: Schema.Date,
  updatedAt: Schema.Date,
  completedAt: Schema.NullOr(Schema.Date),
  expiredAt: Schema.NullOr(Schema.Date)
}).annotations({ identifier: "Checkout" })
export type Checkout = typeof Checkout.Type

const CREATE_RULES =
  "`lineItems` 1–100 lines `{productId, quantity 1–10,000}`: active products with one-time prices of one " +
  "currency (recurring prices → 400: subscriptions are created through `/v1/subscriptions`), else 400 " +
  "with `param` `lineItems[i].productId`; mixed currencies → 400 `currency_mismatch`. `customerId` (a " +
  "shopper: their own) or `email` (a guest: an email alone never attaches the checkout to a customer " +
  "record). `expiresInSeconds` 1800–86400 (default 1800). Prices are snapshotted and stock is reserved " +
  "atomically (quantities of one product summed first); not enough → 409 `insufficient_stock` with " +
  "`param` `lineItems[i].quantity`, nothing reserved. The payment intent is created with it (none for a " +
  "total of 0, which completes at once). With `paymentMethod` it is confirmed at once, as " +
  "`POST /v1/checkouts/:id/confirm` would (a decline → 402 `card_error`, the checkout stays open)."

export class CheckoutsApi extends HttpApiGroup.make("checkouts")
  .add(
    HttpApiEndpoint.post("create", "/v1/checkouts")
      .setPayload(NewCheckout)
      .addSuccess(Checkout, { status: 201 })
      .addError(Conflict)
      .addError(NotFound)
      .addError(CardDeclined)
      .addError(PaymentStateConflict)
      .pipe(scoped("write:checkouts"))
      .annotate(
        OpenApi.Summary,
        "Create a checkout: snapshot prices, reserve stock, create its payment intent"
      )
      .annotate(OpenApi.Description, CREATE_RULES)
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/checkouts/:id")
      .addSuccess(Checkout)
      .pipe(scoped("read:checkouts"), byId)
      .annotate(OpenApi.Summary, "A checkout (shoppers: their own only)")
  )
  .add(
    HttpApiEndpoint.post("confirm", "/v1/checkouts/:id/confirm")
      .setPayload(OptionalFieldsBody(ConfirmCheckout))
      .addSuccess(Checkout)
      .addError(Conflict)
      .addError(CardDeclined)
      .addError(PaymentStateConflict)
      .pipe(scoped("write:checkouts"), byId)
      .annotate(OpenApi.Summary, "Pay a checkout: confirm its payment intent and complete it")
      .annotate(
        OpenApi.Description,
        "Confirms the checkout's payment intent (`paymentMethod` replaces the intent's) and completes the " +
          "checkout at once: 200 `complete` with `orderId`. 3-D Secure → 200 `processing` with `nextAction`. " +
          "A decline → 402 `card_error` (the checkout stays `open`, retry with another method). Confirming " +
          "a complete checkout again answers it (the same order; no second charge). Expired → 409 " +
          "`checkout_not_open`."
      )
  )
  .add(
    HttpApiEndpoint.post("expire", "/v1/checkouts/:id/expire")
      .addSuccess(Checkout)
      .addError(Conflict)
      .addError(CardDeclined)
      .addError(PaymentStateConflict)
      .pipe(scoped("write:checkouts"), byId)
      .annotate(OpenApi.Summary, "Expire an open checkout now: its stock is released, its intent canceled")
      .annotate(OpenApi.Description, "A complete or expired checkout → 409 `checkout_not_open`.")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Checkouts")
  .annotate(
    OpenApi.Description,
    "open → processing (3-D Secure) → complete | expired. A checkout reserves its stock at creation and " +
      "completes exactly once, whichever path pays it (its confirm route, its intent's confirm route, a " +
      "processor event): one order, one charge."
  ) {}

export const CheckoutRoutes = ApiBase.add(CheckoutsApi)
