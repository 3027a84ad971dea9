/**
 * The checkout use cases behind `/v1/checkouts`, the completion command every payment path ends in,
 * and the expiry (research commerce-design §2.1–§2.2; design/FLOWS.md).
 *
 * - Creation is ONE transaction: the reservation (CatalogPort, all lines or none), the price
 *   snapshot (read under the rows the reservation locked), the payment intent (PaymentsPort, no
 *   processor call), `checkout.created` and the expiry's due work. A total of 0 completes in it too.
 * - Completion is ONE transaction, under the checkout's row lock: `checkout.completed` (only when
 *   open or processing and its intent is authorized or captured), the hold moved to the order
 *   (CatalogPort.convertToOrder) and the order placed (OrdersPort.place) under an id derived from the
 *   checkout's. Every path that can complete a checkout (its confirm route, the process manager
 *   following its intent's events, the expiry finding it paid) runs this one command: the second
 *   finds it complete and answers the same order.
 * - Processor calls (confirm, and the cancel or refund of an expired checkout's payment) run
 *   outside these transactions, through PaymentsPort, which records each call before making it.
 * - Expiry is due work (`checkout.expire`, key = checkout id, due at `expiresAt`): one transaction
 *   expires the checkout and releases its stock, then (outside it) its intent is canceled, or a late
 *   payment refunded (captured) or voided (authorized). The item is re-armed whenever a payment of an
 *   expired checkout turns up, so a late payment is always given back.
 */
import { SqlClient } from "@effect/sql"
import { Context, Data, Duration, Effect, Either, Layer, Option } from "effect"
import {
  CatalogPort,
  type InsufficientStock,
  type ProductUnavailable,
  type ReservationLineInvalid,
  type ReservedLine
} from "../catalog/index.js"
import { findCustomer } from "../customers/index.js"
import { provideSqlClient } from "../db/Sql.js"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { isShredded } from "../eventstore/EventType.js"
import type { AuthenticatedActor } from "../http/Auth.js"
import { BadRequest, Conflict, NotFound, ServiceUnavailable } from "../http/errors.js"
import { CommandRunner, type LoadedAggregate } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import { metadataProblem } from "../kernel/Metadata.js"
import * as Time from "../kernel/Time.js"
import { commandMetadata, requestCallKeyPrefix } from "../kernel/UseCase.js"
import { OrdersPort } from "../orders/index.js"
import {
  CardDeclined,
  type ConfirmOutcome,
  MAX_PAYMENT_AMOUNT,
  type PaymentIntentObject,
  PaymentStateConflict,
  PaymentsPort,
  type ProcessorUnavailable,
  type UnexpectedState,
  type UnknownPaymentMethod
} from "../payments/index.js"
import { DueOutcome, DueWork } from "../processors/DueWork.js"
import { type Checkout, MAX_EXPIRES_IN, MIN_EXPIRES_IN, type NewCheckoutInput } from "./Api.js"
import {
  type CheckoutCommand,
  CheckoutDecider,
  type CheckoutError,
  CheckoutNotFound,
  CheckoutNotOpen,
  type CheckoutState,
  checkoutStream
} from "./decider.js"
import type { CheckoutLine, ShippingAddress } from "./events.js"
import { type CheckoutRow, checkoutOfIntent, lockCheckout, selectCheckout } from "./queries.js"

/** Due-work kind of a checkout's expiry (key = checkout id). */
export const EXPIRE_KIND = "checkout.expire"

/** When an expired checkout's payment cannot be settled yet (a call under way), it is tried again. */
const SETTLE_RETRY = Duration.seconds(30)

const SYSTEM: EventMetadata = { actor: { type: "system", id: "checkout-expiry" } }

/** The order a checkout completes into: derived from its id, so every completion names the same one. */
export const orderIdOf = (checkoutId: string) =>
  Ids.derive("ord", `order:${checkoutId}`, Ids.timestampOf("chk", checkoutId) ?? 0)

/** The key of the refund of an expired checkout's late payment: one refund, however often asked. */
const lateRefundKey = (checkoutId: string) => `checkout:${checkoutId}:expired`

const isPaid = (intent: PaymentIntentObject) =>
  intent.status === "requires_capture" || intent.status === "succeeded"

/** The payment did not come to authorized or captured: the checkout cannot complete (yet). */
export class PaymentNotCompleted extends Data.TaggedError("PaymentNotCompleted")<{
  readonly checkoutId: string
  readonly status: string
}> {}

const notFound = NotFound.of({ message: "No such checkout", param: "id" })

const notOpen = (status: string) =>
  Conflict.of({
    code: "checkout_not_open",
    message: `This checkout is ${status}: only an open checkout can be paid or expired.`
  })

const linesParam = (line: number, field: "productId" | "quantity") => `lineItems[${line}].${field}`

/** Catalog refusals of a line, as the one error body naming that line. */
const reservationErrors = {
  InsufficientStock: (e: InsufficientStock) =>
    Effect.fail(
      Conflict.of({
        code: "insufficient_stock",
        message: `Only ${Math.max(0, e.available)} of product ${e.productId} are available (${e.requested} requested).`,
        param: linesParam(e.line, "quantity")
      })
    ),
  ProductUnavailable: (e: ProductUnavailable) =>
    Effect.fail(
      BadRequest.of(
        e.reason === "not_found"
          ? {
              code: "resource_missing",
              message: `No such product: ${e.productId}`,
              param: linesParam(e.line, "productId")
            }
          : {
              code: "parameter_invalid",
              message: `Product ${e.productId} is ${e.reason}: only active products can be bought.`,
              param: linesParam(e.line, "productId")
            }
      )
    ),
  ReservationLineInvalid: (e: ReservationLineInvalid) =>
    Effect.fail(
      BadRequest.of({ code: "parameter_invalid", message: e.message, param: linesParam(e.line, "quantity") })
    )
}

const unknownPaymentMethod = (e: UnknownPaymentMethod) =>
  BadRequest.of({
    code: "parameter_invalid",
    message: `No such payment method: ${JSON.stringify(e.paymentMethod.slice(0, 40))} (a ${e.processor} processor token, e.g. pm_card_visa)`,
    param: "paymentMethod"
  })

/** The processor did not answer a payment-method lookup (the Stripe adapter): nothing was charged, retry. */
const processorUnavailable = (e: ProcessorUnavailable) =>
  new ServiceUnavailable({
    error: {
      type: "api_error",
      code: "processor_unavailable",
      message: `The payment processor did not answer (${e.message}); nothing was charged, retry`
    }
  })

/** A checkout's personal fields, as clients read them (null once the customer was erased). */
const revealed = <A>(value: A | { readonly _tag: "Shredded" }): A | null => (isShredded(value) ? null : value)

const lineItemsOf = (lines: ReadonlyArray<CheckoutLine>, currency: string) =>
  lines.map((l) => ({
    productId: l.productId,
    name: l.name,
    sku: l.sku,
    quantity: l.quantity,
    unitAmount: l.unitAmount,
    amountTotal: l.amountTotal,
    currency
  }))

export interface Extras {
  readonly clientSecret?: string | null
  readonly nextAction?: PaymentIntentObject["nextAction"]
}

/** The checkout object from the aggregate's state (what a write answers). */
export const objectOfState = (state: CheckoutState, extras: Extras = {}): Checkout => {
  const metadata = revealed(state.metadata)
  return {
    object: "checkout",
    id: state.checkoutId,
    status: state.status,
    paymentStatus:
      state.paymentStatus === "unpaid" && state.total === 0 ? "no_payment_required" : state.paymentStatus,
    customerId: state.customerId,
    email: revealed(state.email),
    lineItems: lineItemsOf(state.lineItems, state.currency),
    currency: state.currency,
    subtotal: state.subtotal,
    total: state.total,
    shippingAddress: revealed(state.shippingAddress),
    captureMethod: state.captureMethod,
    paymentIntentId: state.paymentIntentId,
    clientSecret: extras.clientSecret ?? null,
    nextAction: extras.nextAction ?? null,
    orderId: state.orderId,
    expiresAt: state.expiresAt,
    metadata: metadata ?? {},
    createdAt: state.createdAt,
    updatedAt: state.updatedAt,
    completedAt: state.completedAt,
    expiredAt: state.expiredAt
  }
}

/** The checkout object from its read-model row (what `GET` answers). */
export const objectOfRow = (row: CheckoutRow, extras: Extras = {}): Checkout => ({
  object: "checkout",
  id: row.id,
  status: row.status,
  paymentStatus: row.paymentStatus,
  customerId: row.customerId,
  email: row.email,
  lineItems: lineItemsOf(row.lineItems, row.currency),
  currency: row.currency,
  subtotal: row.subtotal,
  total: row.total,
  shippingAddress: row.shippingAddress,
  captureMethod: row.captureMethod,
  paymentIntentId: row.paymentIntentId,
  clientSecret: extras.clientSecret ?? null,
  nextAction: extras.nextAction ?? null,
  orderId: row.orderId,
  expiresAt: row.expiresAt,
  metadata: row.metadata,
  createdAt: row.createdAt,
  updatedAt: row.updatedAt,
  completedAt: row.completedAt,
  expiredAt: row.expiredAt
})

const shippingOf = (input: NewCheckoutInput["shippingAddress"]): ShippingAddress | null =>
  input === undefined || input === null
    ? null
    : {
        label: input.label ?? null,
        line1: input.line1,
        city: input.city,
        state: input.state ?? null,
        postalCode: input.postalCode ?? null,
        country: input.country
      }

export const makeCheckouts = Effect.gen(function* () {
  const runner = yield* CommandRunner
  const sql = yield* SqlClient.SqlClient
  const catalog = yield* CatalogPort
  const payments = yield* PaymentsPort
  const orders = yield* OrdersPort
  const work = yield* DueWork
  const withSql = provideSqlClient(sql)

  /** `loaded`: the stream as the caller just read it (saves reading it again; a retry reads it). */
  const execute = (
    checkoutId: string,
    command: CheckoutCommand,
    metadata: EventMetadata,
    loaded?: LoadedAggregate<CheckoutState>
  ) =>
    runner.execute(CheckoutDecider, checkoutStream(checkoutId), command, {
      metadata,
      newStream: command._tag === "Create",
      ...(loaded === undefined ? {} : { loaded })
    })

  /**
   * The checkout's row lock, then its stream, for a command that decides on it without reading it
   * again (`execute`'s `loaded`). Should a writer that skips the lock move the stream meanwhile, the
   * append's expected version refuses the command and the owning transaction runs again.
   */
  const lockedLoad = (checkoutId: string) =>
    Effect.zipRight(lockCheckout(sql, checkoutId), runner.load(CheckoutDecider, checkoutStream(checkoutId)))

  const load = (checkoutId: string) =>
    Effect.map(runner.load(CheckoutDecider, checkoutStream(checkoutId)), ({ state }) => state)

  /** Staff see every checkout; a shopper only their own (others are 404, like unknown ids). */
  const visible = (actor: AuthenticatedActor, customerId: string | null) =>
    actor.role !== "customer" || (customerId !== null && customerId === actor.customerId)

  // --- Completion (one transaction) -------------------------------------------------------------

  /**
   * Completes an open (or processing) checkout whose payment is authorized or captured (or that has
   * nothing to pay): `checkout.completed`, the hold converted to the order, the order placed — in
   * the caller's transaction, or one of its own, under the checkout's row lock. Complete already:
   * the same state (same order). Expired: `CheckoutNotOpen`. Not paid: `PaymentNotCompleted`.
   * `recorded`: its intent as the caller's transaction has just recorded it (not read again).
   */
  const complete = (checkoutId: string, metadata: EventMetadata, recorded?: PaymentIntentObject) =>
    runner.transact(
      Effect.gen(function* () {
        const loaded = yield* lockedLoad(checkoutId)
        const state = loaded.state
        if (!state.exists) return yield* new CheckoutNotFound({ checkoutId })
        if (state.status === "complete") return state
        if (state.status === "expired")
          return yield* new CheckoutNotOpen({ checkoutId, status: state.status })
        let paid: { readonly intent: PaymentIntentObject } | undefined
        if (state.paymentIntentId !== null) {
          const intent =
            recorded?.id === state.paymentIntentId
              ? Option.some(recorded)
              : yield* payments.find(state.paymentIntentId)
          if (Option.isNone(intent) || !isPaid(intent.value))
            return yield* new PaymentNotCompleted({
              checkoutId,
              status: Option.match(intent, { onNone: () => "missing", onSome: (i) => i.status })
            })
          paid = { intent: intent.value }
        }
        const orderId = orderIdOf(checkoutId)
        const result = yield* execute(checkoutId, { _tag: "Complete", orderId }, metadata, loaded)
        yield* catalog.convertToOrder(checkoutId, orderId, metadata)
        yield* orders.place(
          {
            orderId,
            checkoutId,
            customerId: state.customerId,
            email: revealed(state.email) ?? "",
            currency: state.currency,
            lineItems: state.lineItems.map((l) => ({
              productId: l.productId,
              name: l.name,
              sku: l.sku,
              quantity: l.quantity,
              unitAmount: l.unitAmount,
              amountTotal: l.amountTotal
            })),
            subtotal: state.subtotal,
            total: state.total,
            shippingAddress: revealed(state.shippingAddress),
            paymentIntentId: state.paymentIntentId,
            paymentId: paid?.intent.latestPaymentId ?? null,
            payment:
              paid === undefined
                ? "not_required"
                : paid.intent.status === "succeeded"
                  ? "captured"
                  : "authorized",
            amountCaptured: paid?.intent.amountReceived ?? 0,
            metadata: revealed(state.metadata) ?? {}
          },
          metadata
        )
        return result.state
      })
    )

  // --- Expiry ------------------------------------------------------------------------------------

  /** Re-arms the expiry item now: the worker gives back a late payment of an expired checkout. */
  const settleSoon = (checkoutId: string) =>
    Effect.flatMap(Time.now, (now) =>
      work.schedule({
        kind: EXPIRE_KIND,
        key: checkoutId,
        dueAt: now,
        payload: { checkoutId },
        replace: true
      })
    )

  /**
   * Expires an open (or processing) checkout and releases its stock, in one transaction under its
   * row lock. Expired already: the same state. Complete: `CheckoutNotOpen`. The intent is canceled
   * afterwards (a processor call when it holds an authorization), see `settle`.
   */
  const expireNow = (checkoutId: string, metadata: EventMetadata) =>
    runner.transact(
      Effect.gen(function* () {
        const loaded = yield* lockedLoad(checkoutId)
        const state = loaded.state
        if (!state.exists) return yield* new CheckoutNotFound({ checkoutId })
        if (state.status === "expired") return state
        const result = yield* execute(checkoutId, { _tag: "Expire" }, metadata, loaded)
        yield* catalog.release(checkoutId, metadata)
        return result.state
      })
    )

  /**
   * What an expired checkout's intent still holds, given back (outside any transaction): an intent
   * never paid is canceled, an authorization voided, a captured payment refunded under a key derived
   * from the checkout. Answers whether it is settled (false: a call is under way, try again later).
   */
  const settle = (state: CheckoutState, metadata: EventMetadata) =>
    Effect.gen(function* () {
      if (state.paymentIntentId === null) return true
      const found = yield* payments.find(state.paymentIntentId)
      if (Option.isNone(found)) return true
      const intent = found.value
      switch (intent.status) {
        case "canceled":
          return true
        case "processing":
          return false
        case "succeeded": {
          if (intent.latestPaymentId === null || intent.amountReceived === 0) return true
          yield* Effect.logInfo(
            `checkout ${state.checkoutId}: late payment ${intent.latestPaymentId} refunded`
          )
          return yield* payments
            .refund(
              intent.latestPaymentId,
              { amount: null, reason: "duplicate", key: lateRefundKey(state.checkoutId) },
              metadata
            )
            .pipe(
              Effect.as(true),
              Effect.catchTags({
                ChargeAlreadyRefunded: () => Effect.succeed(true),
                ChargeNotRefundable: () => Effect.succeed(true),
                AmountTooLarge: () => Effect.succeed(true),
                PaymentNotFound: () => Effect.succeed(true)
              })
            )
        }
        default:
          return yield* payments.cancel(intent.id, "abandoned", metadata).pipe(
            Effect.map((after) => after.status === "canceled"),
            Effect.catchTags({
              UnexpectedState: () => Effect.succeed(false),
              PaymentIntentNotFound: () => Effect.succeed(true)
            })
          )
      }
    })

  /**
   * The `checkout.expire` item (outside any transaction): an open checkout past its time is expired
   * — or completed, when its payment went through and the completion flow has not caught up — and
   * an expired checkout's intent settled. Done when nothing is left to give back.
   */
  const handleExpiry = (checkoutId: string) =>
    Effect.gen(function* () {
      let state = yield* load(checkoutId)
      if (!state.exists || state.status === "complete") return DueOutcome.done()
      if (state.status === "open" || state.status === "processing") {
        const now = yield* Time.now
        if (now.getTime() < state.expiresAt.getTime())
          return DueOutcome.retry({ at: state.expiresAt, error: "not due yet" })
        const intent =
          state.paymentIntentId === null ? Option.none() : yield* payments.find(state.paymentIntentId)
        if (Option.isSome(intent) && isPaid(intent.value)) {
          const completed = yield* Effect.either(complete(checkoutId, SYSTEM))
          if (completed._tag === "Right") return DueOutcome.done()
        }
        state = yield* expireNow(checkoutId, SYSTEM).pipe(
          Effect.catchTag("CheckoutNotOpen", () => load(checkoutId))
        )
        if (state.status !== "expired") return DueOutcome.done()
      }
      const settled = yield* settle(state, SYSTEM)
      return settled
        ? DueOutcome.done()
        : DueOutcome.retry({ at: yield* Time.fromNow(SETTLE_RETRY), error: "a payment call is under way" })
    })

  // --- The completion flow's command ---------------------------------------------------------------

  /**
   * A payment intent's status changed (the completion flow, in its batch's transaction): the
   * checkout it belongs to follows — completed when paid, `processing` while 3-D Secure is pending,
   * open again when that failed; a payment of an expired checkout re-arms its settlement; the
   * capture of a complete checkout's authorization (manual capture) and refunds made on its payment
   * directly are recorded on its order. Intents of no checkout change nothing. Idempotent: each step
   * is a no-op once done.
   */
  const paymentChanged = (paymentIntentId: string, metadata: EventMetadata) =>
    Effect.gen(function* () {
      const checkoutId = yield* checkoutOfIntent(sql, paymentIntentId)
      if (Option.isNone(checkoutId)) return
      const id = checkoutId.value
      const state = yield* load(id)
      if (!state.exists) return
      const found = yield* payments.find(paymentIntentId)
      if (Option.isNone(found)) return
      const intent = found.value
      if (state.status === "complete") {
        if (state.orderId === null) return
        // A manual capture after completion: the order's payment is captured now (a no-op once it is).
        if (intent.status === "succeeded" && state.captureMethod === "manual")
          yield* orders.recordCapture(state.orderId, intent.amountReceived, metadata)
        // Its authorization canceled on the intent directly: the pending order is cancelled with it.
        if (intent.status === "canceled") {
          const voided = yield* orders.recordVoid(state.orderId, metadata)
          if (voided.releaseHold) yield* catalog.release(state.orderId, metadata)
        }
        // Refunds made on the payment directly reach the order (each once); one that gave all back
        // releases its stock hold with it, as the order's own refunds do.
        const refunds = yield* payments.refundsOf(paymentIntentId)
        if (refunds.some((r) => r.status === "succeeded")) {
          const recorded = yield* orders.recordPaymentRefunds(state.orderId, refunds, metadata)
          if (recorded.releaseHold) yield* catalog.release(state.orderId, metadata)
        }
        return
      }
      if (state.status === "expired") {
        if (isPaid(intent)) yield* settleSoon(id)
        return
      }
      if (isPaid(intent)) {
        yield* complete(id, metadata).pipe(
          Effect.catchTag("CheckoutNotOpen", () => Effect.asVoid(settleSoon(id))),
          Effect.catchTag("PaymentNotCompleted", () => Effect.void)
        )
        return
      }
      // Its intent canceled directly (not through the checkout): nothing can pay it any more, so it
      // expires now rather than hold its stock until its time runs out.
      if (intent.status === "canceled") {
        yield* expireNow(id, metadata)
        return
      }
      if (intent.status === "requires_action" && state.status === "open")
        yield* execute(id, { _tag: "MarkProcessing" }, metadata)
      else if (intent.status === "requires_payment_method" && state.status === "processing")
        yield* execute(id, { _tag: "Reopen" }, metadata)
    }).pipe(
      Effect.catchTags({
        CheckoutNotFound: () => Effect.void,
        CheckoutNotOpen: () => Effect.void,
        CheckoutAlreadyExists: (e) => Effect.die(e)
      })
    )

  // --- Routes --------------------------------------------------------------------------------------

  /** The request's processor-key prefix (as `Payments` derives it): a retried request asks with the same keys. */
  const callKeyPrefixOf = (actor: AuthenticatedActor, requestKey: string | undefined) =>
    requestKey === undefined
      ? {}
      : {
          callKeyPrefix: requestCallKeyPrefix("checkout:", actor, requestKey)
        }

  /** Who buys: a shopper themselves; staff name a customer or an email (a guest). */
  const buyerOf = (actor: AuthenticatedActor, input: NewCheckoutInput) =>
    Effect.gen(function* () {
      const customerId =
        actor.role === "customer"
          ? (input.customerId ?? actor.customerId ?? null)
          : (input.customerId ?? null)
      if (actor.role === "customer" && customerId !== (actor.customerId ?? null))
        return yield* Effect.fail(
          BadRequest.of({
            code: "resource_missing",
            message: `No such customer: ${customerId}`,
            param: "customerId"
          })
        )
      if (customerId === null) {
        if (input.email === undefined)
          return yield* Effect.fail(
            BadRequest.of({
              code: "parameter_missing",
              message: "email is required when no customerId is given",
              param: "email"
            })
          )
        // A guest stays a guest: an email alone never attaches the checkout to a customer record.
        return { customerId: null, email: input.email }
      }
      const customer = yield* withSql(findCustomer(customerId))
      if (Option.isNone(customer))
        return yield* Effect.fail(
          BadRequest.of({
            code: "resource_missing",
            message: `No such customer: ${customerId}`,
            param: "customerId"
          })
        )
      return { customerId, email: input.email ?? customer.value.email }
    })

  /**
   * Lines snapshotted from the products as the reservation left them (`reserved`: under the rows it
   * locked; a product it did not answer is read).
   */
  const snapshot = (input: NewCheckoutInput, reserved: ReadonlyArray<ReservedLine>) =>
    Effect.gen(function* () {
      const products = new Map(reserved.map((r) => [r.productId, r.product]))
      const lines: Array<CheckoutLine> = []
      let currency: string | undefined
      for (const [i, l] of input.lineItems.entries()) {
        const held = products.get(l.productId)
        const found = held === undefined ? yield* catalog.findProduct(l.productId) : Option.some(held)
        if (Option.isNone(found) || found.value.status !== "active")
          return yield* Effect.fail(
            BadRequest.of({
              code: Option.isNone(found) ? "resource_missing" : "parameter_invalid",
              message: Option.isNone(found)
                ? `No such product: ${l.productId}`
                : `Product ${l.productId} is ${found.value.status}: only active products can be bought.`,
              param: linesParam(i, "productId")
            })
          )
        const product = found.value
        if (product.price.type !== "one_time")
          return yield* Effect.fail(
            BadRequest.of({
              code: "parameter_invalid",
              message: `Product ${l.productId} has a recurring price: a checkout sells one-time prices (subscriptions come through /v1/subscriptions).`,
              param: linesParam(i, "productId")
            })
          )
        if (currency !== undefined && product.price.currency !== currency)
          return yield* Effect.fail(
            BadRequest.of({
              code: "currency_mismatch",
              message: `Product ${l.productId} is priced in ${product.price.currency}, the checkout's other lines in ${currency}: one checkout, one currency.`,
              param: linesParam(i, "productId")
            })
          )
        currency = product.price.currency
        lines.push({
          productId: product.id,
          name: product.name,
          sku: product.sku,
          quantity: l.quantity,
          unitAmount: product.price.amount,
          amountTotal: product.price.amount * l.quantity,
          priceVersion: product.price.version
        })
      }
      const total = lines.reduce((sum, l) => sum + l.amountTotal, 0)
      if (total > MAX_PAYMENT_AMOUNT)
        return yield* Effect.fail(
          BadRequest.of({
            code: "amount_too_large",
            message: `The checkout's total (${total}) is more than ${MAX_PAYMENT_AMOUNT} minor units.`,
            param: "lineItems"
          })
        )
      return { lines, currency: currency ?? "USD", subtotal: total, total }
    })

  const create = (actor: AuthenticatedActor, input: NewCheckoutInput, requestKey?: string) =>
    Effect.gen(function* () {
      const problem = input.metadata === undefined ? undefined : metadataProblem(input.metadata)
      if (problem !== undefined)
        return yield* Effect.fail(
          BadRequest.of({ code: "parameter_invalid", message: problem, param: "metadata" })
        )
      const buyer = yield* buyerOf(actor, input)
      const metadata = yield* commandMetadata(actor)
      const checkoutId = yield* Ids.make("chk")
      const expiresIn = Math.min(
        MAX_EXPIRES_IN,
        Math.max(MIN_EXPIRES_IN, input.expiresInSeconds ?? MIN_EXPIRES_IN)
      )
      const expiresAt = yield* Time.fromNow(Duration.seconds(expiresIn))
      const captureMethod = input.captureMethod ?? "automatic"
      const created = yield* runner.transact(
        Effect.gen(function* () {
          const reserved = yield* catalog
            .reserve(checkoutId, input.lineItems, metadata)
            .pipe(Effect.catchTags(reservationErrors))
          const priced = yield* snapshot(input, reserved)
          const intent =
            priced.total === 0
              ? undefined
              : yield* payments
                  .createIntent(
                    {
                      amount: priced.total,
                      currency: priced.currency,
                      customerId: buyer.customerId,
                      captureMethod,
                      paymentMethod: input.paymentMethod ?? null,
                      metadata: { checkoutId },
                      description: `Checkout ${checkoutId}`,
                      ...callKeyPrefixOf(actor, requestKey)
                    },
                    metadata
                  )
                  .pipe(
                    Effect.catchTags({
                      UnknownPaymentMethod: (e) => Effect.fail(unknownPaymentMethod(e)),
                      ProcessorUnavailable: (e) => Effect.fail(processorUnavailable(e))
                    })
                  )
          const result = yield* execute(
            checkoutId,
            {
              _tag: "Create",
              checkoutId,
              customerId: buyer.customerId,
              email: buyer.email,
              shippingAddress: shippingOf(input.shippingAddress),
              currency: priced.currency,
              lineItems: priced.lines,
              subtotal: priced.subtotal,
              total: priced.total,
              captureMethod,
              paymentIntentId: intent?.id ?? null,
              expiresAt,
              metadata: input.metadata ?? {}
            },
            metadata
          )
          yield* work.schedule({
            kind: EXPIRE_KIND,
            key: checkoutId,
            dueAt: expiresAt,
            payload: { checkoutId }
          })
          // Nothing to pay: it completes at once, without a processor.
          const state = priced.total === 0 ? yield* complete(checkoutId, metadata) : result.state
          return { state, clientSecret: intent?.clientSecret ?? null }
        })
      )
      if (input.paymentMethod !== undefined && created.state.status === "open")
        return yield* pay(created.state, {}, metadata, created.clientSecret)
      return objectOfState(created.state, { clientSecret: created.clientSecret })
    })

  /**
   * Confirms the checkout's intent through the port (outside any transaction) and follows its
   * outcome: paid → completed (one transaction); 3-D Secure → processing; declined → 402 with the
   * intent, the checkout open (reopened if it was processing).
   */
  const pay = (
    state: Pick<CheckoutState, "checkoutId" | "paymentIntentId" | "status">,
    input: { readonly paymentMethod?: string | undefined },
    metadata: EventMetadata,
    clientSecret: string | null = null
  ) =>
    Effect.gen(function* () {
      const paymentIntentId = state.paymentIntentId
      if (paymentIntentId === null) return objectOfState(yield* complete(state.checkoutId, metadata))
      // A payment this call records completes the checkout in the same transaction (one commit,
      // its intent not read again): the completed state, or the refusal of a checkout that expired
      // meanwhile (decided before anything is written, so the payment's record still commits).
      let completedWithin: Either.Either<CheckoutState, CheckoutNotOpen> | undefined
      const completeWithin = (outcome: ConfirmOutcome) =>
        isPaid(outcome.intent)
          ? complete(state.checkoutId, metadata, outcome.intent).pipe(
              Effect.map(Either.right),
              Effect.catchTag("CheckoutNotOpen", (e) => Effect.succeed(Either.left(e))),
              Effect.catchTags({
                CheckoutNotFound: Effect.die,
                PaymentNotCompleted: Effect.die,
                CheckoutAlreadyExists: Effect.die
              }),
              Effect.flatMap((result) =>
                Effect.sync(() => {
                  completedWithin = result
                })
              )
            )
          : Effect.void
      // An open checkout's intent is confirmed straight away (one read fewer): should it be paid
      // already or await the customer's action after all (its own confirm route ran), the refusal
      // below finds it so and answers as the look first would have.
      const before = state.status === "open" ? Option.none() : yield* payments.find(paymentIntentId)
      let intent: PaymentIntentObject
      let declined = false
      // Paid already (another request, the intent's own confirm route): nothing to confirm. A call
      // under way (processing) is confirmed too: the port awaits that call's outcome, makes no other.
      if (Option.isSome(before) && isPaid(before.value)) {
        intent = before.value
      } else if (
        Option.isSome(before) &&
        before.value.status === "requires_action" &&
        input.paymentMethod === undefined
      ) {
        intent = before.value
      } else {
        const outcome = yield* payments.confirm(paymentIntentId, input, metadata, completeWithin).pipe(
          Effect.catchTags({
            UnknownPaymentMethod: (e) => Effect.fail(unknownPaymentMethod(e)),
            ProcessorUnavailable: (e) => Effect.fail(processorUnavailable(e)),
            PaymentMethodMissing: () =>
              Effect.fail(
                BadRequest.of({
                  code: "parameter_missing",
                  message:
                    "paymentMethod is required: this checkout's payment intent has no payment method yet",
                  param: "paymentMethod"
                })
              ),
            PaymentIntentNotFound: () => Effect.fail(notFound),
            UnexpectedState: (e: UnexpectedState) =>
              Effect.flatMap(payments.find(paymentIntentId), (now) =>
                Option.isSome(now) &&
                (isPaid(now.value) ||
                  (now.value.status === "requires_action" && input.paymentMethod === undefined))
                  ? Effect.succeed({ intent: now.value, paymentId: "", declined: false })
                  : Effect.fail(
                      PaymentStateConflict.of({
                        code: "payment_intent_unexpected_state",
                        message: e.message,
                        embedded: Option.isSome(now) ? { paymentIntent: now.value } : {}
                      })
                    )
              )
          })
        )
        intent = outcome.intent
        declined = outcome.declined
      }
      // Set by a try that committed only if the payment reads as recorded (a record given up after
      // lost races answers the intent as it was, unpaid: the completion rolled back with it).
      if (completedWithin !== undefined && isPaid(intent)) {
        const within = completedWithin
        if (Either.isRight(within)) return objectOfState(within.right, { clientSecret })
        yield* settleSoon(state.checkoutId)
        return yield* Effect.fail(notOpen(within.left.status))
      }
      if (isPaid(intent)) {
        const completed = yield* complete(state.checkoutId, metadata).pipe(
          Effect.catchTag("CheckoutNotOpen", (e) =>
            // Expired while the payment was made: it is given back by the expiry worker.
            Effect.zipRight(settleSoon(state.checkoutId), Effect.fail(notOpen(e.status)))
          )
        )
        return objectOfState(completed, { clientSecret })
      }
      if (intent.status === "requires_action") {
        const processing = yield* execute(state.checkoutId, { _tag: "MarkProcessing" }, metadata)
        return objectOfState(processing.state, { clientSecret, nextAction: intent.nextAction })
      }
      if (declined || intent.status === "requires_payment_method") {
        if (state.status === "processing") yield* execute(state.checkoutId, { _tag: "Reopen" }, metadata)
        if (declined)
          return yield* Effect.fail(
            CardDeclined.of({
              code: intent.lastPaymentError?.code ?? "card_declined",
              declineCode: intent.lastPaymentError?.declineCode ?? null,
              message: intent.lastPaymentError?.message ?? "Your card was declined.",
              embedded: { paymentIntent: intent }
            })
          )
      }
      // The processor did not answer yet (the safety net will record it): the checkout as it stands.
      return objectOfState(yield* load(state.checkoutId), { clientSecret })
    })

  const visibleState = (actor: AuthenticatedActor, checkoutId: string) =>
    Effect.gen(function* () {
      if (!Ids.isValid("chk", checkoutId)) return yield* Effect.fail(notFound)
      const state = yield* load(checkoutId)
      if (!state.exists || !visible(actor, state.customerId)) return yield* Effect.fail(notFound)
      return state
    })

  const confirm = (
    actor: AuthenticatedActor,
    checkoutId: string,
    input: { readonly paymentMethod?: string | undefined }
  ) =>
    Effect.gen(function* () {
      // The read model, written with every change of the checkout: one row, nothing to decrypt.
      if (!Ids.isValid("chk", checkoutId)) return yield* Effect.fail(notFound)
      const row = yield* selectCheckout(sql, checkoutId)
      if (Option.isNone(row) || !visible(actor, row.value.customerId)) return yield* Effect.fail(notFound)
      const checkout = row.value
      if (checkout.status === "complete") return objectOfRow(checkout)
      if (checkout.status === "expired") return yield* Effect.fail(notOpen(checkout.status))
      const metadata = yield* commandMetadata(actor)
      return yield* pay(
        { checkoutId: checkout.id, paymentIntentId: checkout.paymentIntentId, status: checkout.status },
        input,
        metadata
      )
    })

  const get = (actor: AuthenticatedActor, checkoutId: string) =>
    Effect.gen(function* () {
      if (!Ids.isValid("chk", checkoutId)) return yield* Effect.fail(notFound)
      const row = yield* selectCheckout(sql, checkoutId)
      if (Option.isNone(row) || !visible(actor, row.value.customerId)) return yield* Effect.fail(notFound)
      const checkout = row.value
      if (checkout.status !== "processing" || checkout.paymentIntentId === null) return objectOfRow(checkout)
      const intent = yield* payments.find(checkout.paymentIntentId)
      return objectOfRow(checkout, {
        nextAction: Option.match(intent, { onNone: () => null, onSome: (i) => i.nextAction })
      })
    })

  const expire = (actor: AuthenticatedActor, checkoutId: string) =>
    Effect.gen(function* () {
      const before = yield* visibleState(actor, checkoutId)
      if (before.status !== "open" && before.status !== "processing")
        return yield* Effect.fail(notOpen(before.status))
      const metadata = yield* commandMetadata(actor)
      const state = yield* expireNow(checkoutId, metadata)
      // The intent is canceled now; should that not finish, the re-armed expiry item finishes it.
      yield* settleSoon(checkoutId)
      const settled = yield* Effect.either(settle(state, metadata))
      if (settled._tag === "Left") yield* Effect.logWarning(`checkout ${checkoutId}: intent not canceled yet`)
      return objectOfState(state)
    })

  /** Domain errors → HTTP (one mapper for the context); anything else not HTTP is a defect. */
  const http = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, HttpAnswer, R> =>
    Effect.catchAll(self, (error): Effect.Effect<never, HttpAnswer> => {
      if (isHttpish(error)) return Effect.fail(error)
      if (!isCheckoutError(error)) return Effect.die(error)
      switch (error._tag) {
        case "CheckoutNotFound":
          return Effect.fail(notFound)
        case "CheckoutNotOpen":
          return Effect.fail(notOpen(error.status))
        case "PaymentNotCompleted":
          return Effect.fail(
            Conflict.of({
              code: "payment_intent_unexpected_state",
              message: `The checkout's payment is ${error.status}: it completes once authorized or captured.`
            })
          )
        case "CheckoutAlreadyExists":
          return Effect.die(error)
      }
    })

  return {
    create: (actor: AuthenticatedActor, input: NewCheckoutInput, requestKey?: string) =>
      http(create(actor, input, requestKey)),
    get: (actor: AuthenticatedActor, checkoutId: string) =>
      Effect.catchAll(get(actor, checkoutId), (error) =>
        error instanceof NotFound ? Effect.fail(error) : Effect.die(error)
      ),
    confirm: (
      actor: AuthenticatedActor,
      checkoutId: string,
      input: { readonly paymentMethod?: string | undefined }
    ) => http(confirm(actor, checkoutId, input)),
    expire: (actor: AuthenticatedActor, checkoutId: string) => http(expire(actor, checkoutId)),
    complete,
    handleExpiry,
    paymentChanged
  }
})

const CHECKOUT_ERROR_TAGS: ReadonlySet<string> = new Set([
  "CheckoutNotFound",
  "CheckoutAlreadyExists",
  "CheckoutNotOpen",
  "PaymentNotCompleted"
])

const isCheckoutError = (error: unknown): error is CheckoutError | PaymentNotCompleted =>
  typeof error === "object" &&
  error !== null &&
  "_tag" in error &&
  typeof error._tag === "string" &&
  CHECKOUT_ERROR_TAGS.has(error._tag)

/** The HTTP errors a checkout route answers with; anything else is a defect (a logged 500). */
type HttpAnswer = BadRequest | NotFound | Conflict | CardDeclined | PaymentStateConflict | ServiceUnavailable

const isHttpish = (error: unknown): error is HttpAnswer =>
  error instanceof BadRequest ||
  error instanceof NotFound ||
  error instanceof Conflict ||
  error instanceof CardDeclined ||
  error instanceof PaymentStateConflict ||
  error instanceof ServiceUnavailable

export type CheckoutsShape = Effect.Effect.Success<typeof makeCheckouts>

export class Checkouts extends Context.Tag("checkout/Checkouts")<Checkouts, CheckoutsShape>() {}

export const CheckoutsLive = Layer.effect(Checkouts, makeCheckouts)
