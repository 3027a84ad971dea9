/**
 * The subscriptions and invoices HTTP contract on `/v1` (spec §4.5; COMMERCE decisions 6 and 7;
 * research commerce-design §1.7, §4): Stripe Billing's shapes, camelCase. Shoppers
 * (`read:subscriptions`, `write:subscriptions`) subscribe themselves, read their own subscriptions
 * and invoices (another's → 404), cancel them and change their payment method; staff do everything.
 *
 * Every rule a request can break on its own is stated here; what depends on stored state (the
 * product missing or not recurring, the customer missing, the subscription's status) is the use case's.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ApiBase } from "../http/ApiBase.js"
import { Authentication } from "../http/Auth.js"
import { byId, scoped } from "../http/Endpoints.js"
import { Conflict, NotFound, ServiceUnavailable } from "../http/errors.js"
import { IntField, idOf } from "../http/Fields.js"
import { V1List, v1ListParams } from "../http/Lists.js"
import { MetadataInput } from "../kernel/Metadata.js"
import { INVOICE_STATUSES, SUBSCRIPTION_STATUSES } from "./events.js"
import { InvoiceObject, SubscriptionObject } from "./objects.js"

export const MAX_QUANTITY = 10_000
export const MAX_TRIAL_DAYS = 730

const PaymentMethod = Schema.String.pipe(
  Schema.minLength(1, { message: () => "paymentMethod must not be empty" }),
  Schema.maxLength(255, { message: () => "paymentMethod must be at most 255 characters" })
).annotations({ message: () => "paymentMethod must be a payment method token (e.g. pm_card_visa)" })

export const NewSubscription = Schema.Struct({
  /** Staff: required. A shopper subscribes themselves (their own id, or left out). */
  customerId: Schema.optional(idOf("cus", "customerId")),
  productId: idOf("prod", "productId"),
  paymentMethod: Schema.optional(PaymentMethod),
  quantity: Schema.optional(IntField("quantity", 1, MAX_QUANTITY)),
  trialPeriodDays: Schema.optional(IntField("trialPeriodDays", 0, MAX_TRIAL_DAYS)),
  metadata: Schema.optional(MetadataInput)
})
export type NewSubscription = typeof NewSubscription.Type

export const SubscriptionPatch = Schema.Struct({
  quantity: Schema.optional(IntField("quantity", 1, MAX_QUANTITY)),
  paymentMethod: Schema.optional(PaymentMethod),
  cancelAtPeriodEnd: Schema.optional(
    Schema.Boolean.annotations({ message: () => "cancelAtPeriodEnd must be true or false" })
  ),
  productId: Schema.optional(idOf("prod", "productId")),
  metadata: Schema.optional(MetadataInput)
})
export type SubscriptionPatch = typeof SubscriptionPatch.Type

export const CancelParams = Schema.Struct({
  prorate: Schema.optional(
    Schema.Literal("true", "false").annotations({ message: () => "prorate must be true or false" })
  )
})

export const SubscriptionListParams = Schema.Struct({
  ...v1ListParams("sub").fields,
  customerId: Schema.optional(idOf("cus", "customerId")),
  productId: Schema.optional(idOf("prod", "productId")),
  status: Schema.optional(
    Schema.Literal(...SUBSCRIPTION_STATUSES).annotations({
      message: () => ({
        message: `status must be one of ${SUBSCRIPTION_STATUSES.join(", ")}`,
        override: true
      })
    })
  )
})
export type SubscriptionListParams = typeof SubscriptionListParams.Type

export const InvoiceListParams = Schema.Struct({
  ...v1ListParams("in").fields,
  subscriptionId: Schema.optional(idOf("sub", "subscriptionId")),
  customerId: Schema.optional(idOf("cus", "customerId")),
  status: Schema.optional(
    Schema.Literal(...INVOICE_STATUSES).annotations({
      message: () => ({ message: `status must be one of ${INVOICE_STATUSES.join(", ")}`, override: true })
    })
  )
})
export type InvoiceListParams = typeof InvoiceListParams.Type

const CREATE_RULES =
  "`productId` must be an active product with a recurring price (else 400, `param` `productId`). " +
  "Without a trial (`trialPeriodDays`, or the price's own `trialPeriodDays`), `paymentMethod` is required " +
  "and the first period's licensed fee (`price.amount × quantity`) is charged at once: paid → `active`; " +
  "declined → 201 `incomplete` with `latestInvoice` open (its `failureCode`), which a PATCH `paymentMethod` " +
  "within 23 hours pays, else it becomes `incomplete_expired`. With a trial: `trialing`, nothing charged; " +
  "at the trial's end the first period is charged (no payment method: it is canceled). Periods are " +
  "`interval × intervalCount` from the anchor (creation or trial end), months clamped (Jan 31 → Feb 28/29 → " +
  "Mar 31). Honours `Idempotency-Key` (a retry charges nothing twice). Publishes `subscription.created` " +
  "when it starts (trialing, or active). A shopper subscribes themselves on the product's terms: " +
  "`trialPeriodDays` or `metadata` from a shopper → 403 `insufficient_scope` (the store sets them)."

export class SubscriptionsApi extends HttpApiGroup.make("subscriptions")
  .add(
    HttpApiEndpoint.post("create", "/v1/subscriptions")
      .setPayload(NewSubscription)
      .addSuccess(SubscriptionObject, { status: 201 })
      .addError(NotFound)
      .addError(Conflict)
      .addError(ServiceUnavailable)
      .pipe(scoped("write:subscriptions"))
      .annotate(OpenApi.Summary, "Subscribe a customer to a recurring product")
      .annotate(OpenApi.Description, CREATE_RULES)
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/subscriptions")
      .setUrlParams(SubscriptionListParams)
      .addSuccess(V1List(SubscriptionObject, "SubscriptionList"))
      .pipe(scoped("read:subscriptions"))
      .annotate(OpenApi.Summary, "List subscriptions, newest first")
      .annotate(
        OpenApi.Description,
        "Filters: `customerId`, `status`, `productId`. `limit` 1–100 (default 10); `startingAfter` / " +
          "`endingBefore` (subscription ids), not both. A shopper lists only their own."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/subscriptions/:id")
      .addSuccess(SubscriptionObject)
      .pipe(scoped("read:subscriptions"), byId)
      .annotate(OpenApi.Summary, "A subscription (shoppers: their own only)")
  )
  .add(
    HttpApiEndpoint.patch("update", "/v1/subscriptions/:id")
      .setPayload(SubscriptionPatch)
      .addSuccess(SubscriptionObject)
      .addError(Conflict)
      .pipe(scoped("write:subscriptions"), byId)
      .annotate(OpenApi.Summary, "Change a subscription (plan and quantity at the next renewal)")
      .annotate(
        OpenApi.Description,
        "`productId` and `quantity` take effect at the next renewal (no mid-cycle proration) and show as " +
          "`pendingUpdate {productId, quantity, effectiveAt}`; a plan change while `past_due` or `unpaid` → " +
          "409 `subscription_past_due` (pay first). `cancelAtPeriodEnd: true` ends it at `currentPeriodEnd` " +
          "(final usage billed), `false` takes that back. A new `paymentMethod` while `incomplete`, " +
          "`past_due` or `unpaid` pays the open invoice at once. Canceled or incomplete_expired → 409 " +
          "`subscription_not_active`. Shoppers may change `paymentMethod` and `cancelAtPeriodEnd` only."
      )
  )
  .add(
    HttpApiEndpoint.del("cancel", "/v1/subscriptions/:id")
      .setUrlParams(CancelParams)
      .addSuccess(SubscriptionObject)
      .addError(Conflict)
      .pipe(scoped("write:subscriptions"), byId)
      .annotate(OpenApi.Summary, "Cancel a subscription now")
      .annotate(
        OpenApi.Description,
        "`canceled` at once; usage so far is invoiced and charged now (a final invoice). `?prorate=true` " +
          "refunds the unused part of the current period's licensed fee (no more than its payment still " +
          "holds); it is the store's: a shopper's → 403 `insufficient_scope`. Open invoices are voided and " +
          "dunning stops. Canceled already → 200 with it as it is; incomplete_expired → 409 " +
          "`subscription_not_active`. Publishes `subscription.cancelled`."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Subscriptions (v1)")
  .annotate(
    OpenApi.Description,
    "Subscriptions to recurring products: states incomplete, incomplete_expired, trialing, active, past_due, " +
      "unpaid, canceled (research §1.7). Renewals, trial ends, dunning retries and cancellations at period end " +
      "run as durable due work; each period's invoice is charged once, under the key " +
      "`renewal:<subscription>:<periodStart>`."
  ) {}

export class InvoicesApi extends HttpApiGroup.make("invoices")
  .add(
    HttpApiEndpoint.get("list", "/v1/invoices")
      .setUrlParams(InvoiceListParams)
      .addSuccess(V1List(InvoiceObject, "InvoiceList"))
      .pipe(scoped("read:subscriptions"))
      .annotate(OpenApi.Summary, "List invoices, newest first")
      .annotate(
        OpenApi.Description,
        "Filters: `subscriptionId`, `customerId`, `status` (`paid`, `open`, `void`). `limit` 1–100 (default " +
          "10); `startingAfter` / " +
          "`endingBefore` (invoice ids), not both. A shopper lists only their own."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/invoices/:id")
      .addSuccess(InvoiceObject)
      .pipe(scoped("read:subscriptions"), byId)
      .annotate(OpenApi.Summary, "An invoice (shoppers: their own only)")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Invoices (v1)")
  .annotate(
    OpenApi.Description,
    "One invoice per subscription period (`in_…`, derived from `<subscription>:<periodStart>`): the licensed " +
      "fee in advance and the closed period's usage in arrears; status open, paid or void."
  ) {}

/** This context's routes on the service's API (`ApiBase`): what its handlers are built against. */
export const BillingRoutes = ApiBase.add(SubscriptionsApi).add(InvoicesApi)
