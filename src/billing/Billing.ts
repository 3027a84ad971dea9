/**
 * The billing use cases behind `/v1/subscriptions` and `/v1/invoices`, and the due work that renews,
 * retries and expires subscriptions (research commerce-design §1.7, §4.1–§4.5).
 *
 * - Every command on a subscription runs in ONE transaction that first locks its read-model row
 *   `FOR UPDATE` (src/billing/contract.ts): renewals, retries, cancellations and PATCHes of one
 *   subscription queue behind each other, and usage writes (which lock it `FOR KEY SHARE`) never
 *   commit while a renewal reads the closed period's quantity and advances `usage_closed_before`.
 * - An invoice and its payment intent are created in that transaction (PaymentsPort.createIntent, no
 *   processor call). A renewal's invoice id derives from `<subscription>:<periodStart>` (UNIQUE in the
 *   read model) and its intent's processor keys start with `renewal:<subscription>:<periodStart>`: a
 *   re-run finds the period already advanced and the same invoice, never makes a second one.
 * - The charge (PaymentsPort.confirm) runs outside any transaction, then its outcome is recorded in a
 *   second one. One invoice has one intent, and an intent is charged at most once (confirming one
 *   that succeeded answers it): a re-run scheduler, a crashed worker's successor, or a manual retry
 *   racing a renewal can attempt a payment again, never take it twice.
 * - "Now" for a subscription is `BillingClock.nowFor(testClockId)`: a customer on a test clock lives
 *   on its time. Due items are scheduled under `clockedKind(kind, testClockId)`.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Layer, Option } from "effect"
import { CatalogPort, type ProductView } from "../catalog/index.js"
import { AppConfig } from "../config.js"
import { findCustomer } from "../customers/index.js"
import { provideSqlClient } from "../db/Sql.js"
import type { EventMetadata } from "../eventstore/EventStore.js"
import type { AuthenticatedActor } from "../http/Auth.js"
import { BadRequest, Conflict, Forbidden, NotFound, ServiceUnavailable } from "../http/errors.js"
import type { V1Page } from "../http/Lists.js"
import { CommandRunner, type LoadedAggregate } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import { metadataProblem } from "../kernel/Metadata.js"
import { commandMetadata, requestCallKeyPrefix } from "../kernel/UseCase.js"
import {
  findPayment,
  MAX_PAYMENT_AMOUNT,
  type NewIntentCommand,
  type PaymentIntentObject,
  PaymentsPort,
  type PaymentsPortError,
  ProcessorUnavailable,
  type StartedConfirmation,
  UnknownPaymentMethod
} from "../payments/index.js"
import { type DueItem, DueOutcome, DueWork, type ScheduleInput } from "../processors/DueWork.js"
import type {
  CancelParams,
  InvoiceListParams,
  NewSubscription,
  SubscriptionListParams,
  SubscriptionPatch
} from "./Api.js"
import { BillingClock, clockedKind, UsageLedger } from "./contract.js"
import {
  INCOMPLETE_WINDOW_MS,
  type InvoiceDraft,
  type InvoiceState,
  isRenewable,
  isTerminal,
  latestInvoiceOf,
  type NextPeriod,
  type PaymentOutcome,
  renewalKindOf,
  type SubscriptionCommand,
  type SubscriptionError,
  type SubscriptionState,
  subscriptionStream,
  trialReminderAt
} from "./decider.js"
import type { BillingReason, InvoiceLine, PriceSnapshot } from "./events.js"
import {
  type InvoiceObject,
  SubscriptionDecider,
  type SubscriptionObject,
  subscriptionObject
} from "./objects.js"
import { periodAt, periodIndexOf, trialEndOf } from "./periods.js"
import { subscriptionBeforeAppend } from "./projection.js"
import {
  heldSubscription,
  listInvoices,
  listSubscriptions,
  liveSubscriptionsOf,
  liveSubscriptionsOnClock,
  lockSubscription,
  selectInvoice,
  selectSubscription,
  withSubscriptionsLocked
} from "./queries.js"
import { microsOfValue, numberOfMicros, pricing } from "./usage/decider.js"

/** Due-work kinds (base names; a test clock's items carry `@<testClockId>`, see `clockedKind`). */
export const RENEW_KIND = "billing.renew"
export const RETRY_KIND = "billing.retry"
export const EXPIRE_KIND = "billing.expire_incomplete"
/** `subscription.trial_will_end`, three days before a trial ends (a no-op once no longer trialing). */
export const TRIAL_REMINDER_KIND = "billing.trial_will_end"
export const BILLING_KINDS = [RENEW_KIND, RETRY_KIND, EXPIRE_KIND, TRIAL_REMINDER_KIND] as const

/** A first charge is reconciled with its intent this long after creation (payments' recovery ran by then). */
const RECONCILE_AFTER_MS = 2 * 60_000

/** When a charge could not be made or its outcome is not known yet, the item runs again this much later. */
const COLLECT_RETRY_MS = 60_000

const SYSTEM: EventMetadata = { actor: { type: "system", id: "billing" } }

/** Later than any usage timestamp: a final invoice's usage runs to it (see `usageLine`). */
const END_OF_USAGE = new Date("9999-12-31T00:00:00.000Z")

/** The invoice of a subscription's period: one id per `<subscription>:<periodStart>`, however often asked. */
export const invoiceIdOf = (subscriptionId: string, periodStart: Date) =>
  Ids.derive("in", `${subscriptionId}:${periodStart.toISOString()}`, periodStart.getTime())

/** The processor-key prefix of the charge of a subscription's period (research §4.3). */
export const renewalKeyOf = (subscriptionId: string, periodStart: Date) =>
  `renewal:${subscriptionId}:${periodStart.toISOString()}`

const notFound = NotFound.of({ message: "No such subscription", param: "id" })
const invoiceNotFound = NotFound.of({ message: "No such invoice", param: "id" })

export const baseKindOf = (kind: string) => kind.split("@")[0] ?? kind

export const subscriptionIdOf = (item: DueItem): string => {
  const payload = item.payload
  if (typeof payload === "object" && payload !== null && "subscriptionId" in payload)
    return String(payload.subscriptionId)
  return item.key.split(":")[0] ?? ""
}

const usagePriceOf = (product: ProductView): PriceSnapshot["usage"] => {
  const usage = product.price.recurring?.usage ?? null
  return usage === null
    ? null
    : {
        meter: usage.meter,
        aggregation: usage.aggregation,
        unitAmount: usage.unitAmount,
        includedUnits: usage.includedUnits,
        uniqueKey: usage.uniqueKey ?? null
      }
}

/** The product's recurring price as a subscription snapshots it, or the 400 saying why it cannot. */
const priceOf = (product: ProductView, param: string): Effect.Effect<PriceSnapshot, BadRequest> => {
  const recurring = product.price.recurring
  if (product.status !== "active")
    return Effect.fail(
      BadRequest.of({
        code: "parameter_invalid",
        message: `Product ${product.id} is ${product.status}: only active products can be subscribed to.`,
        param
      })
    )
  if (product.price.type !== "recurring" || recurring === null)
    return Effect.fail(
      BadRequest.of({
        code: "parameter_invalid",
        message: `Product ${product.id} has a one-time price: subscriptions need a recurring price.`,
        param
      })
    )
  return Effect.succeed({
    amount: product.price.amount,
    currency: product.price.currency,
    interval: recurring.interval,
    intervalCount: recurring.intervalCount,
    usage: usagePriceOf(product)
  })
}

const subscriptionLine = (price: PriceSnapshot, quantity: number, start: Date, end: Date): InvoiceLine => ({
  type: "subscription",
  quantity,
  unitAmount: price.amount,
  amount: price.amount * quantity,
  period: { start, end }
})

export const makeBilling = Effect.gen(function* () {
  const runner = yield* CommandRunner
  const sql = yield* SqlClient.SqlClient
  const catalog = yield* CatalogPort
  const payments = yield* PaymentsPort
  const work = yield* DueWork
  const clock = yield* BillingClock
  const ledger = yield* UsageLedger
  const config = yield* AppConfig
  const withSql = provideSqlClient(sql)

  /**
   * `loaded`: the stream as `locked` read it under the row lock, so the command decides on it without
   * reading the stream again (a stream that moved anyway is refused by the append's expected version
   * and the transaction runs again).
   */
  const execute = (
    subscriptionId: string,
    command: SubscriptionCommand,
    metadata: EventMetadata,
    loaded?: LoadedAggregate<SubscriptionState>
  ) => {
    const executed = runner.execute(SubscriptionDecider, subscriptionStream(subscriptionId), command, {
      metadata,
      newStream: command._tag === "Create",
      ...(loaded === undefined ? {} : { loaded })
    })
    // Given the state it decides on, the projection folds from it instead of reading the row back.
    return loaded === undefined ? executed : Effect.locally(executed, subscriptionBeforeAppend, loaded)
  }

  const loadAggregate = (subscriptionId: string) =>
    runner.load(SubscriptionDecider, subscriptionStream(subscriptionId))

  const load = (subscriptionId: string) => Effect.map(loadAggregate(subscriptionId), ({ state }) => state)

  const nowOf = (state: SubscriptionState) => clock.nowFor(state.testClockId)

  /** Staff see every subscription; a shopper only their own (others are 404, like unknown ids). */
  const visible = (actor: AuthenticatedActor, customerId: string) =>
    actor.role !== "customer" || customerId === actor.customerId

  // --- Due work ------------------------------------------------------------------------------------

  /**
   * The due-work writes the state calls for (renewal, dunning retry, expiry), each with an id naming
   * all it writes: two states that call for the same id call for the very same write.
   */
  const schedulePlanOf = (s: SubscriptionState) => {
    const plan: Array<{ readonly id: string; readonly write: () => Effect.Effect<unknown, SqlError> }> = []
    const payload = { subscriptionId: s.subscriptionId }
    const schedule = (input: ScheduleInput) =>
      plan.push({
        id: `schedule ${input.kind} ${input.key} ${input.dueAt.toISOString()} ${input.replace === true}`,
        write: () => work.schedule(input)
      })
    const cancelPending = (kind: string, key: string) =>
      plan.push({ id: `cancel ${kind} ${key}`, write: () => work.cancel(kind, key, { pendingOnly: true }) })
    if (isRenewable(s))
      schedule({
        kind: clockedKind(RENEW_KIND, s.testClockId),
        key: `${s.subscriptionId}:${s.currentPeriodEnd.toISOString()}`,
        dueAt: s.currentPeriodEnd,
        payload,
        replace: true
      })
    if (
      s.status === "trialing" &&
      s.trialEnd !== null &&
      (s.trialReminderFor === null || s.trialReminderFor.getTime() !== s.trialEnd.getTime())
    )
      schedule({
        kind: clockedKind(TRIAL_REMINDER_KIND, s.testClockId),
        key: `${s.subscriptionId}:${s.trialEnd.toISOString()}`,
        dueAt: trialReminderAt(s.trialEnd),
        payload
      })
    const latest = latestInvoiceOf(s)
    if (s.status === "past_due" && latest?.status === "open" && latest.nextPaymentAttempt !== null)
      schedule({
        kind: clockedKind(RETRY_KIND, s.testClockId),
        key: `${s.subscriptionId}:${latest.invoiceId}:${latest.nextPaymentAttempt.toISOString()}`,
        dueAt: latest.nextPaymentAttempt,
        payload
      })
    // Items the state no longer calls for are withdrawn (a run would find nothing to do anyway).
    if (s.status === "past_due" || s.status === "unpaid" || isTerminal(s))
      cancelPending(
        clockedKind(RENEW_KIND, s.testClockId),
        `${s.subscriptionId}:${s.currentPeriodEnd.toISOString()}`
      )
    if (s.status !== "incomplete" && latest?.billingReason === "subscription_create") {
      cancelPending(clockedKind(EXPIRE_KIND, s.testClockId), s.subscriptionId)
      cancelPending(
        clockedKind(RETRY_KIND, s.testClockId),
        `${s.subscriptionId}:${latest.invoiceId}:reconcile`
      )
    }
    if (s.status === "incomplete") {
      schedule({
        kind: clockedKind(EXPIRE_KIND, s.testClockId),
        key: s.subscriptionId,
        dueAt: new Date(s.currentPeriodStart.getTime() + INCOMPLETE_WINDOW_MS),
        payload
      })
      // A first charge whose outcome the creating request never recorded (it died after the
      // processor call, or the intent was confirmed directly): reconciled once payments knows.
      if (latest?.status === "open" && latest.billingReason === "subscription_create")
        schedule({
          kind: clockedKind(RETRY_KIND, s.testClockId),
          key: `${s.subscriptionId}:${latest.invoiceId}:reconcile`,
          dueAt: new Date(s.currentPeriodStart.getTime() + RECONCILE_AFTER_MS),
          payload
        })
    }
    return plan
  }

  /**
   * The items the state calls for (inside its transaction). `scheduledFor`: a state whose items this
   * caller's previous transaction already wrote, committed, just before (a renewal's, for the record
   * of its charge): the same writes again would change nothing, so they are left out.
   */
  const scheduleFor = (s: SubscriptionState, scheduledFor?: SubscriptionState) => {
    const written = new Set(scheduledFor === undefined ? [] : schedulePlanOf(scheduledFor).map((w) => w.id))
    return Effect.forEach(
      schedulePlanOf(s).filter((w) => !written.has(w.id)),
      (w) => w.write(),
      { discard: true }
    )
  }

  /**
   * Runs `body` in one transaction under the subscription's row lock, with its state as of the lock
   * (and the stream as read, for its one `execute`), then schedules what the new state calls for
   * (same transaction) and wakes the workers after it. `known`: the stream as this caller's previous
   * transaction left it, which serves the first try instead of a read (a stream that moved since is
   * refused by the append's expected version, and the retry reads it).
   */
  const locked = <A, E, R>(
    subscriptionId: string,
    body: (
      state: SubscriptionState,
      loaded: LoadedAggregate<SubscriptionState>
    ) => Effect.Effect<readonly [A, SubscriptionState], E, R>,
    known?: LoadedAggregate<SubscriptionState>
  ) => {
    let firstTry = known
    return Effect.tap(
      runner.transact(
        Effect.gen(function* () {
          const exists = yield* lockSubscription(sql, subscriptionId)
          const known = firstTry
          firstTry = undefined
          const loaded =
            known ?? (yield* heldSubscription(subscriptionId)) ?? (yield* loadAggregate(subscriptionId))
          const state = loaded.state
          if (!exists || !state.exists) return Option.none<A>()
          const [result, after] = yield* body(state, loaded)
          yield* scheduleFor(after, known?.state)
          return Option.some(result)
        })
      ),
      () => work.wake
    )
  }

  // --- Invoices and their charge -------------------------------------------------------------------

  interface InvoiceInput {
    readonly billingReason: BillingReason
    readonly periodStart: Date
    readonly periodEnd: Date
    readonly lines: ReadonlyArray<InvoiceLine>
    readonly paymentMethod: string | null
    readonly callKeyPrefix: string
    readonly metadata: EventMetadata
  }

  /**
   * An invoice's draft and, when it has something to pay, its intent (in the caller's transaction).
   * `confirm`: the intent's confirmation is started with it (one transaction instead of two; the
   * caller makes the call with `callConfirmation` after the commit, else payments' safety net does).
   */
  const draftWithIntent = (s: SubscriptionState, input: InvoiceInput, confirm: boolean) =>
    Effect.gen(function* () {
      const invoiceId = invoiceIdOf(s.subscriptionId, input.periodStart)
      const total = input.lines.reduce((sum, l) => sum + l.amount, 0)
      const intentOf = (paymentMethod: string | null) => {
        const intent: NewIntentCommand = {
          // The whole total, never a capped part of it: an invoice is paid in full or not at all
          // (a processor that refuses the amount fails the charge, and dunning shows it).
          amount: total,
          currency: s.price.currency,
          customerId: s.customerId,
          captureMethod: "automatic",
          paymentMethod,
          metadata: { subscriptionId: s.subscriptionId, invoiceId },
          description: `Subscription ${s.subscriptionId}, invoice ${invoiceId}`,
          callKeyPrefix: input.callKeyPrefix
        }
        return confirm
          ? payments.createConfirmingIntent(intent, input.metadata)
          : Effect.map(payments.createIntent(intent, input.metadata), (created) => ({
              intent: created,
              confirmation: null
            }))
      }
      // An invoice above what a payment can be has no intent: its collection fails (amount_too_large).
      const created =
        total === 0 || total > MAX_PAYMENT_AMOUNT
          ? null
          : yield* intentOf(input.paymentMethod).pipe(
              // A renewal never stalls on a payment method the processor no longer knows: the invoice
              // is issued, and its charge fails (dunning) until a new one is given.
              Effect.catchTag("UnknownPaymentMethod", (e) =>
                input.billingReason === "subscription_create" ? Effect.fail(e) : intentOf(null)
              )
            )
      const draft: InvoiceDraft = {
        subscriptionId: s.subscriptionId,
        invoiceId,
        customerId: s.customerId,
        billingReason: input.billingReason,
        currency: s.price.currency,
        periodStart: input.periodStart,
        periodEnd: input.periodEnd,
        lines: input.lines,
        subtotal: total,
        total,
        paymentIntentId: created?.intent.id ?? null
      }
      return { draft, confirmation: created?.confirmation ?? null }
    })

  const draftInvoice = (s: SubscriptionState, input: InvoiceInput) =>
    Effect.map(draftWithIntent(s, input, false), ({ draft }) => draft)

  /**
   * The usage of [start, end) as an invoice line (null for a licensed-only price). A subscription's
   * final invoice (it is canceled, now or at its
   * period's end) passes `final`: it bills everything recorded from `start` on, records stamped after
   * the end included (up to 5 minutes ahead are accepted, and no later invoice would ever take them),
   * and shows the period as [start, end).
   */
  const usageLine = (s: SubscriptionState, start: Date, end: Date, final = false) =>
    Effect.gen(function* () {
      const usage = s.price.usage
      if (usage === null || end.getTime() <= start.getTime()) return null
      const { quantity } = yield* ledger.periodQuantity({
        subscriptionId: s.subscriptionId,
        usage,
        periodStart: start,
        periodEnd: final ? END_OF_USAGE : end
      })
      // The summary's own pricing (exact decimals, rounded half up once), so the invoice shows what
      // `GET /v1/usage` estimated.
      const priced = pricing(usage, microsOfValue(quantity))
      const line: InvoiceLine = {
        type: "usage",
        meter: usage.meter,
        quantity,
        includedUnits: usage.includedUnits,
        billableUnits: numberOfMicros(priced.billableMicros),
        unitAmount: usage.unitAmount,
        amount: priced.estimatedAmount,
        period: { start, end }
      }
      return line
    })

  /** What a payment attempt came to, from the intent after it (or before, when it already succeeded). */
  type Collected =
    | { readonly _tag: "Outcome"; readonly outcome: PaymentOutcome }
    /** Nothing was recorded: the processor did not answer, or the outcome is not known yet. */
    | { readonly _tag: "Unknown"; readonly reason: string }

  const outcomeOfIntent = (
    intent: PaymentIntentObject,
    declined: boolean,
    paymentId: string | null
  ): Collected => {
    if (intent.status === "succeeded")
      return { _tag: "Outcome", outcome: { _tag: "Paid", paymentId: intent.latestPaymentId } }
    if (declined || intent.status === "requires_payment_method" || intent.status === "requires_action")
      return {
        _tag: "Outcome",
        outcome: {
          _tag: "Failed",
          paymentId: paymentId ?? intent.latestPaymentId,
          failureCode:
            intent.status === "requires_action"
              ? "authentication_required"
              : (intent.lastPaymentError?.code ?? "card_declined"),
          failureMessage:
            intent.status === "requires_action"
              ? "The payment needs the customer's authentication, which a renewal cannot ask for."
              : (intent.lastPaymentError?.message ?? "The payment was declined."),
          nextPaymentAttempt: null,
          exhausted: null
        }
      }
    return { _tag: "Unknown", reason: `the payment intent is ${intent.status}` }
  }

  const failed = (code: string, message: string): Collected => ({
    _tag: "Outcome",
    outcome: {
      _tag: "Failed",
      paymentId: null,
      failureCode: code,
      failureMessage: message,
      nextPaymentAttempt: null,
      exhausted: null
    }
  })

  /**
   * One payment attempt of the invoice's intent (outside any transaction). `fresh`: the intent was
   * created by this very call's renewal, so it is not looked up first (it awaits confirmation; a
   * confirmation racing this one makes ours an UnexpectedState, answered from the intent as it is).
   */
  const charge = (
    invoice: InvoiceState,
    paymentMethod: string | null,
    metadata: EventMetadata,
    fresh: boolean
  ) =>
    Effect.gen(function* () {
      const intentId = invoice.paymentIntentId
      if (intentId === null && invoice.total > MAX_PAYMENT_AMOUNT)
        return failed(
          "amount_too_large",
          `This invoice's total (${invoice.total}) is more than a payment can be (${MAX_PAYMENT_AMOUNT} minor units).`
        )
      if (intentId === null)
        return { _tag: "Outcome", outcome: { _tag: "Paid", paymentId: null } } as Collected
      const before = fresh ? Option.none() : yield* payments.find(intentId)
      if (Option.isSome(before) && before.value.status === "succeeded")
        return outcomeOfIntent(before.value, false, null)
      if (Option.isSome(before) && before.value.status === "canceled")
        return { _tag: "Unknown", reason: "the payment intent was canceled" } as Collected
      return yield* payments
        .confirm(intentId, paymentMethod === null ? {} : { paymentMethod }, metadata)
        .pipe(
          Effect.map((o) => outcomeOfIntent(o.intent, o.declined, o.paymentId)),
          Effect.catchTags({
            UnknownPaymentMethod: (e) =>
              Effect.succeed(
                failed("invalid_payment_method", `No such payment method: ${e.paymentMethod.slice(0, 40)}`)
              ),
            PaymentMethodMissing: () =>
              Effect.succeed(failed("payment_method_missing", "The subscription has no payment method.")),
            ProcessorUnavailable: (e) =>
              Effect.succeed<Collected>({ _tag: "Unknown", reason: `processor unavailable: ${e.message}` }),
            PaymentIntentNotFound: (e) => Effect.die(e),
            // Another confirmation got there first: its outcome, as the intent now stands.
            UnexpectedState: () =>
              Effect.map(payments.find(intentId), (now) =>
                Option.isSome(now)
                  ? outcomeOfIntent(now.value, false, null)
                  : ({ _tag: "Unknown", reason: "no such payment intent" } as Collected)
              )
          })
        )
    })

  /**
   * When the next automatic try of a cycle invoice comes after a failure at `now`: the first offset of
   * the schedule (from the invoice's period start, when the first try ran) still ahead; none left →
   * exhausted.
   */
  const nextAttemptOf = (invoice: InvoiceState, now: Date): Date | null => {
    for (const seconds of config.billing.retrySchedule) {
      const at = new Date(invoice.periodStart.getTime() + seconds * 1000)
      if (at.getTime() > now.getTime()) return at
    }
    return null
  }

  /**
   * Records a payment attempt's outcome on the invoice (one transaction, under the row lock): dunning
   * decides the next try (automatic failures only; a manual one leaves the schedule as it is).
   * `attempt` runs first in that transaction: what the attempt came to, recorded by payments in the
   * same commit when the call was answered just before. Unknown there records nothing here.
   */
  const record = <E, R>(
    subscriptionId: string,
    invoiceId: string,
    attempt: Effect.Effect<Collected, E, R>,
    automatic: boolean,
    metadata: EventMetadata,
    known?: LoadedAggregate<SubscriptionState>
  ) =>
    locked(
      subscriptionId,
      (state, loaded) =>
        Effect.gen(function* () {
          const collected = yield* attempt
          const invoice = state.invoices.find((i) => i.invoiceId === invoiceId)
          if (collected._tag === "Unknown" || invoice === undefined || invoice.status !== "open")
            return [{ collected, state }, state] as const
          const now = yield* nowOf(state)
          let outcome = collected.outcome
          if (outcome._tag === "Failed") {
            const dunning = invoice.billingReason === "subscription_cycle" && state.status !== "unpaid"
            const next = !dunning
              ? null
              : automatic
                ? nextAttemptOf(invoice, now)
                : invoice.nextPaymentAttempt
            outcome = {
              ...outcome,
              nextPaymentAttempt: next,
              exhausted: dunning && automatic && next === null ? config.billing.onRetriesExhausted : null
            }
          }
          const result = yield* execute(
            subscriptionId,
            { _tag: "RecordPayment", invoiceId, outcome, now },
            metadata,
            loaded
          )
          return [{ collected, state: result.state }, result.state] as const
        }),
      known
    )

  /**
   * A payment attempt on an open invoice, up to the processor's answer (outside any transaction):
   * Done (nothing to attempt: the invoice is not open), Unknown (nothing could be recorded: the
   * caller tries again later), or Answered with the `record` that writes the answer and the invoice's
   * outcome, to run in a transaction of the caller's choosing (it opens its own otherwise).
   * `renewed`: the stream a renewal just committed with this invoice (and its intent) new, so neither
   * is read again, and the confirmation it started with the intent, if it did: its answer is recorded
   * by payments in the transaction that records it on the invoice.
   */
  const attemptCollect = (
    subscriptionId: string,
    invoiceId: string,
    options: {
      readonly paymentMethod?: string | null
      readonly automatic: boolean
      readonly renewed?: {
        readonly loaded: LoadedAggregate<SubscriptionState>
        readonly confirmation: StartedConfirmation | null
      }
    },
    metadata: EventMetadata
  ) =>
    Effect.gen(function* () {
      const state = options.renewed?.loaded.state ?? (yield* load(subscriptionId))
      const invoice = state.invoices.find((i) => i.invoiceId === invoiceId)
      if (invoice === undefined || invoice.status !== "open") return { _tag: "Done" as const, state }
      const unknown = (reason: string) => ({ _tag: "Unknown" as const, state, reason })
      const started = options.renewed?.confirmation ?? null
      let attempt: Effect.Effect<Collected, PaymentsPortError>
      if (started !== null) {
        const answered = yield* payments.callConfirmation(started)
        if (Option.isNone(answered)) return unknown("processor unavailable; the safety net asks again")
        attempt = Effect.map(payments.recordConfirmation(answered.value, metadata), (o) =>
          outcomeOfIntent(o.intent, o.declined, o.paymentId)
        )
      } else {
        const collected = yield* charge(
          invoice,
          options.paymentMethod ?? state.paymentMethod,
          metadata,
          options.renewed !== undefined
        )
        if (collected._tag === "Unknown") return unknown(collected.reason)
        attempt = Effect.succeed(collected)
      }
      return {
        _tag: "Answered" as const,
        state,
        // Built once: a run again (its transaction retried) reads the stream instead of `renewed`.
        record: record(
          subscriptionId,
          invoiceId,
          attempt,
          options.automatic,
          metadata,
          options.renewed?.loaded
        )
      }
    })

  /** `attemptCollect` and its record. Answers the state after, or Unknown when nothing was recorded. */
  const collect = (
    subscriptionId: string,
    invoiceId: string,
    options: Parameters<typeof attemptCollect>[2],
    metadata: EventMetadata
  ) =>
    Effect.gen(function* () {
      const attempted = yield* attemptCollect(subscriptionId, invoiceId, options, metadata)
      if (attempted._tag !== "Answered") return attempted
      const { state } = attempted
      const after = yield* attempted.record
      if (Option.isNone(after)) return { _tag: "Done" as const, state }
      const { collected } = after.value
      if (collected._tag === "Unknown") return { _tag: "Unknown" as const, state, reason: collected.reason }
      return { _tag: "Done" as const, state: after.value.state }
    })

  // --- Renewal, retry, expiry ------------------------------------------------------------------------

  /**
   * The plan the next period is billed at (the pending update, or the current one) and its period.
   * A period already over by `now` (a subscription that was past_due or unpaid through it) is not
   * billed retroactively (research §4.5): the renewal skips to the period `now` falls in.
   */
  const nextPeriodOf = (s: SubscriptionState, now: Date): NextPeriod => {
    const plan = s.pendingUpdate ?? {
      productId: s.productId,
      planName: s.planName,
      quantity: s.quantity,
      price: s.price
    }
    const sameCycle =
      plan.price.interval === s.price.interval && plan.price.intervalCount === s.price.intervalCount
    // A new interval starts a new cycle at the renewal; the same one keeps counting from the anchor.
    const anchor = sameCycle ? s.anchor : s.currentPeriodEnd
    const following = sameCycle ? s.periodIndex + 1 : 0
    const periodIndex =
      periodAt(anchor, plan.price, following).end.getTime() <= now.getTime()
        ? periodIndexOf(anchor, plan.price, now)
        : following
    const period = periodAt(anchor, plan.price, periodIndex)
    return {
      productId: plan.productId,
      planName: plan.planName,
      quantity: plan.quantity,
      price: plan.price,
      anchor,
      periodIndex,
      periodStart: period.start,
      periodEnd: period.end
    }
  }

  /**
   * The renewal of a subscription whose period ended, in one transaction under its row lock: the
   * closed period's usage (through `UsageLedger`), the invoice (licensed fee of the new period in
   * advance + usage in arrears) and its intent, the period advanced — or, with `cancelAtPeriodEnd`,
   * the final usage invoiced and the subscription canceled. Not due (renewed already, past_due,
   * canceled…): nothing. Answers the stream after, and whether this call drafted its latest invoice.
   */
  const renewInTransaction = (subscriptionId: string, metadata: EventMetadata) =>
    locked(subscriptionId, (state, loaded) =>
      Effect.gen(function* () {
        const now = yield* nowOf(state)
        const kind = renewalKindOf(state, now)
        if (kind === "not_due") return [{ loaded, drafted: false, confirmation: null }, state] as const
        const end = state.currentPeriodEnd
        // Usage of a trial is billed at 0 (research §4.2).
        const usage =
          state.status === "trialing"
            ? null
            : yield* usageLine(state, state.currentPeriodStart, end, kind === "cancel_at_period_end")
        let next: NextPeriod | null = null
        let drafted: {
          readonly draft: InvoiceDraft
          readonly confirmation: StartedConfirmation | null
        } | null = null
        if (kind === "cancel_at_period_end") {
          if (usage !== null && usage.amount > 0)
            drafted = yield* draftWithIntent(
              state,
              {
                billingReason: "subscription_cancel",
                periodStart: end,
                periodEnd: end,
                lines: [usage],
                paymentMethod: state.paymentMethod,
                callKeyPrefix: renewalKeyOf(subscriptionId, end),
                metadata
              },
              true
            )
        } else if (kind === "renew") {
          next = nextPeriodOf(state, now)
          const lines = [
            subscriptionLine(next.price, next.quantity, next.periodStart, next.periodEnd),
            ...(usage === null ? [] : [usage])
          ]
          drafted = yield* draftWithIntent(
            state,
            {
              billingReason: "subscription_cycle",
              periodStart: next.periodStart,
              periodEnd: next.periodEnd,
              lines,
              paymentMethod: state.paymentMethod,
              callKeyPrefix: renewalKeyOf(subscriptionId, next.periodStart),
              metadata
            },
            true
          )
        }
        const invoice = drafted?.draft ?? null
        const result = yield* execute(subscriptionId, { _tag: "Renew", now, next, invoice }, metadata, loaded)
        const renewal = {
          loaded: { state: result.state, version: result.version },
          drafted: invoice !== null,
          confirmation: drafted?.confirmation ?? null
        }
        return [renewal, result.state] as const
      })
    )

  /** What `renewInTransaction` answered for one subscription. */
  type Renewal = Effect.Effect.Success<ReturnType<typeof renewInTransaction>>

  /**
   * The renewal transactions of several subscriptions (a worker's claimed batch) as ONE transaction:
   * each exactly as `renewInTransaction` alone, in subscription id order (row locks always taken in
   * one order). One BEGIN/COMMIT and one WAL flush for all; a lost race runs all of them again, like
   * any transaction. Answers each one's renewal by subscription id, for `renewDue` to go on from.
   */
  const renewTogether = (subscriptionIds: ReadonlyArray<string>, metadata: EventMetadata = SYSTEM) => {
    const ids = [...new Set(subscriptionIds)].sort()
    // The rows first, in id order; then the renewals side by side: on a PostgreSQL server their
    // statements share the transaction's round trips (pipelined), not one round trip each.
    return runner
      .transact(
        withSubscriptionsLocked(
          sql,
          ids,
          Effect.forEach(
            ids,
            (id) => Effect.map(renewInTransaction(id, metadata), (renewal) => [id, renewal] as const),
            { concurrency: "unbounded" }
          ),
          // Each renewal decides on its row's state as the lock read it, not on its stream read again.
          { states: true }
        )
      )
      .pipe(Effect.map((renewals) => new Map(renewals)))
  }

  const renewLocked = (subscriptionId: string, metadata: EventMetadata) =>
    Effect.map(
      renewInTransaction(subscriptionId, metadata),
      Option.map(({ loaded }) => loaded.state)
    )

  /**
   * `billing.renew`: renews when due, then charges the latest invoice if no attempt was recorded on
   * it yet — which is also how a renewal interrupted after its transaction (or after the processor
   * call) completes on the next run, without a second invoice or charge. The answer's record is the
   * outcome's writes: they commit with the item's completion (a worker records many together).
   */
  const renewDue = (subscriptionId: string, metadata: EventMetadata = SYSTEM, renewed?: Renewal) =>
    Effect.gen(function* () {
      const renewal = renewed ?? (yield* renewInTransaction(subscriptionId, metadata))
      if (Option.isNone(renewal)) return DueOutcome.done()
      const { loaded, drafted, confirmation } = renewal.value
      const state = loaded.state
      const latest = latestInvoiceOf(state)
      if (latest === undefined || latest.status !== "open" || latest.attemptCount > 0)
        return DueOutcome.done()
      if (latest.billingReason === "subscription_create") return DueOutcome.done()
      const attempted = yield* attemptCollect(
        subscriptionId,
        latest.invoiceId,
        drafted ? { automatic: true, renewed: { loaded, confirmation } } : { automatic: true },
        metadata
      )
      if (attempted._tag === "Done") return DueOutcome.done()
      // The clock is read only when an attempt comes back later (a test clock's is a query).
      const later = Effect.map(nowOf(state), (now) => new Date(now.getTime() + COLLECT_RETRY_MS))
      if (attempted._tag === "Unknown") return DueOutcome.retry({ at: yield* later, error: attempted.reason })
      const writes = Effect.flatMap(attempted.record, (after) =>
        // Answered, yet what the intent came to is not an outcome (not seen with a processor's answer
        // recorded): the item is done, so another comes back for the invoice a minute later.
        Option.isSome(after) && after.value.collected._tag === "Unknown"
          ? Effect.flatMap(later, (dueAt) =>
              work.schedule({
                kind: clockedKind(RENEW_KIND, state.testClockId),
                key: `${subscriptionId}:${latest.invoiceId}:collect`,
                dueAt,
                payload: { subscriptionId },
                replace: true
              })
            ).pipe(Effect.asVoid)
          : Effect.void
      )
      return DueOutcome.done({ inTransaction: writes, batched: { subscriptionId, writes } })
    })

  /** `billing.renew` run by hand: `renewDue` with its outcome's writes committed. */
  const renew = (subscriptionId: string, metadata: EventMetadata = SYSTEM) =>
    Effect.flatMap(renewDue(subscriptionId, metadata), (outcome) =>
      outcome.inTransaction === undefined
        ? Effect.succeed(outcome)
        : Effect.as(runner.transact(outcome.inTransaction), DueOutcome.done())
    )

  /**
   * An open invoice whose intent succeeded without the outcome being recorded here (a request that
   * died after the processor call, an intent confirmed directly): recorded paid, no charge made.
   * Answers whether it was.
   */
  const reconcile = (subscriptionId: string, invoice: InvoiceState | undefined, metadata: EventMetadata) =>
    Effect.gen(function* () {
      if (invoice === undefined || invoice.status !== "open" || invoice.paymentIntentId === null) return false
      const intent = yield* payments.find(invoice.paymentIntentId)
      if (Option.isNone(intent) || intent.value.status !== "succeeded") return false
      yield* record(
        subscriptionId,
        invoice.invoiceId,
        Effect.succeed<Collected>({
          _tag: "Outcome",
          outcome: { _tag: "Paid", paymentId: intent.value.latestPaymentId }
        }),
        false,
        metadata
      )
      return true
    })

  /**
   * `billing.retry`: an open invoice paid meanwhile is recorded (reconcile); otherwise the next
   * dunning attempt of a past_due subscription's open invoice, when due.
   */
  const retry = (subscriptionId: string, metadata: EventMetadata = SYSTEM) =>
    Effect.gen(function* () {
      const state = yield* load(subscriptionId)
      const latest = latestInvoiceOf(state)
      if (!state.exists || latest === undefined || latest.status !== "open") return DueOutcome.done()
      if (yield* reconcile(subscriptionId, latest, metadata)) return DueOutcome.done()
      if (state.status !== "past_due") return DueOutcome.done()
      const now = yield* nowOf(state)
      if (latest.nextPaymentAttempt === null) return DueOutcome.done()
      if (now.getTime() < latest.nextPaymentAttempt.getTime())
        return DueOutcome.retry({ at: latest.nextPaymentAttempt, error: "not due yet" })
      const collected = yield* collect(subscriptionId, latest.invoiceId, { automatic: true }, metadata)
      if (collected._tag === "Unknown")
        return DueOutcome.retry({ at: new Date(now.getTime() + COLLECT_RETRY_MS), error: collected.reason })
      return DueOutcome.done()
    })

  /** `billing.trial_will_end`: `subscription.trial_will_end` once, if the subscription still trials. */
  const remindTrialEnd = (subscriptionId: string) =>
    Effect.as(
      locked(subscriptionId, (state, loaded) =>
        Effect.gen(function* () {
          const now = yield* nowOf(state)
          const result = yield* execute(subscriptionId, { _tag: "RemindTrialEnd", now }, SYSTEM, loaded)
          return [undefined, result.state] as const
        })
      ),
      DueOutcome.done()
    )

  /** `billing.expire_incomplete`: 23 h after creation an unpaid first invoice ends the subscription. */
  const expire = (subscriptionId: string, metadata: EventMetadata = SYSTEM) =>
    Effect.gen(function* () {
      // Paid after all (its outcome unrecorded): active, not expired.
      const current = yield* load(subscriptionId)
      if (
        current.status === "incomplete" &&
        (yield* reconcile(subscriptionId, latestInvoiceOf(current), metadata))
      )
        return DueOutcome.done()
      const expired = yield* locked(subscriptionId, (state, loaded) =>
        Effect.gen(function* () {
          const now = yield* nowOf(state)
          const result = yield* execute(subscriptionId, { _tag: "Expire", now }, metadata, loaded)
          return [{ before: state, after: result.state }, result.state] as const
        })
      )
      if (Option.isNone(expired)) return DueOutcome.done()
      const { before, after } = expired.value
      if (after.status !== "incomplete_expired" || before.status === "incomplete_expired")
        return DueOutcome.done()
      // The first invoice's intent is canceled, so nothing can charge it any more.
      const first = before.invoices.find((i) => i.billingReason === "subscription_create")
      if (first?.paymentIntentId != null)
        yield* payments.cancel(first.paymentIntentId, "abandoned", metadata).pipe(
          Effect.asVoid,
          Effect.catchTags({
            // Paid in the meantime (after the last look): the money goes back, the subscription is over.
            UnexpectedState: () => refundLate(subscriptionId, first.paymentIntentId, metadata),
            PaymentIntentNotFound: () => Effect.void
          })
        )
      return DueOutcome.done()
    })

  /** The payment of an intent that succeeded after its subscription expired, refunded (one refund, by key). */
  const refundLate = (subscriptionId: string, paymentIntentId: string | null, metadata: EventMetadata) =>
    Effect.gen(function* () {
      if (paymentIntentId === null) return
      const intent = yield* payments.find(paymentIntentId)
      if (
        Option.isNone(intent) ||
        intent.value.status !== "succeeded" ||
        intent.value.latestPaymentId === null
      )
        return
      yield* payments
        .refund(
          intent.value.latestPaymentId,
          { amount: null, reason: "duplicate", key: `subscription:${subscriptionId}:expired` },
          metadata
        )
        .pipe(
          Effect.asVoid,
          Effect.catchTags({
            PaymentNotFound: () => Effect.void,
            ChargeNotRefundable: () => Effect.void,
            ChargeAlreadyRefunded: () => Effect.void,
            AmountTooLarge: () => Effect.void
          })
        )
    })

  /**
   * One due item (a real-time worker's or a test clock's): its handler, by base kind. `renewed`: a
   * `billing.renew` item's renewal, already made with others of its batch (`renewTogether`); the
   * handler goes on from it.
   */
  const handleDue = (item: DueItem, renewed?: Renewal) => {
    const subscriptionId = subscriptionIdOf(item)
    if (!Ids.isValid("sub", subscriptionId))
      return Effect.succeed(DueOutcome.failed({ error: "no subscriptionId in the item" }))
    switch (baseKindOf(item.kind)) {
      case RENEW_KIND:
        return renewDue(subscriptionId, SYSTEM, renewed)
      case RETRY_KIND:
        return retry(subscriptionId)
      case EXPIRE_KIND:
        return expire(subscriptionId)
      case TRIAL_REMINDER_KIND:
        return remindTrialEnd(subscriptionId)
      default:
        return Effect.succeed(DueOutcome.failed({ error: `unknown billing kind ${item.kind}` }))
    }
  }

  // --- Routes --------------------------------------------------------------------------------------

  const callKeyPrefixOf = (actor: AuthenticatedActor, requestKey: string) =>
    requestCallKeyPrefix("subscription:", actor, requestKey)

  const productFor = (productId: string, param: string) =>
    Effect.gen(function* () {
      const found = yield* catalog.findProduct(productId)
      if (Option.isNone(found))
        return yield* Effect.fail(
          BadRequest.of({ code: "resource_missing", message: `No such product: ${productId}`, param })
        )
      const price = yield* priceOf(found.value, param)
      return { product: found.value, price }
    })

  const amountCheck = (price: PriceSnapshot, quantity: number, param: string) =>
    price.amount * quantity > MAX_PAYMENT_AMOUNT
      ? Effect.fail(
          BadRequest.of({
            code: "amount_too_large",
            message: `price × quantity (${price.amount * quantity}) is more than ${MAX_PAYMENT_AMOUNT} minor units.`,
            param
          })
        )
      : Effect.void

  const customerOf = (actor: AuthenticatedActor, input: NewSubscription) =>
    Effect.gen(function* () {
      const customerId = actor.role === "customer" ? (input.customerId ?? actor.customerId) : input.customerId
      if (customerId === undefined)
        return yield* Effect.fail(
          BadRequest.of({ code: "parameter_missing", message: "customerId is required", param: "customerId" })
        )
      const mine = actor.role !== "customer" || customerId === actor.customerId
      const customer = mine ? yield* withSql(findCustomer(customerId)) : Option.none()
      if (Option.isNone(customer))
        return yield* Effect.fail(
          BadRequest.of({
            code: "resource_missing",
            message: `No such customer: ${customerId}`,
            param: "customerId"
          })
        )
      return customerId
    })

  /** A payment method the processor does not know → 400; the processor not answering → 503. */
  const paymentMethodErrors = <A, E, R>(
    self: Effect.Effect<A, E | UnknownPaymentMethod | ProcessorUnavailable, R>
  ) =>
    Effect.catchIf(
      self,
      (e): e is UnknownPaymentMethod | ProcessorUnavailable =>
        e instanceof UnknownPaymentMethod || e instanceof ProcessorUnavailable,
      (e) =>
        Effect.fail(
          e instanceof UnknownPaymentMethod
            ? BadRequest.of({
                code: "parameter_invalid",
                message: `No such payment method: ${JSON.stringify(e.paymentMethod.slice(0, 40))} (a ${e.processor} processor token, e.g. pm_card_visa)`,
                param: "paymentMethod"
              })
            : new ServiceUnavailable({
                error: {
                  type: "api_error",
                  code: "processor_unavailable",
                  message: `The payment processor did not answer (${e.message}); nothing was charged, retry`
                }
              })
        )
    )

  const create = (actor: AuthenticatedActor, input: NewSubscription, requestKey?: string) =>
    Effect.gen(function* () {
      if (actor.role === "customer" && (input.trialPeriodDays !== undefined || input.metadata !== undefined))
        return yield* Effect.fail(
          Forbidden.of({
            code: "insufficient_scope",
            message:
              "A shopper subscribes on the product's terms: trialPeriodDays and metadata are set by the store.",
            param: input.trialPeriodDays !== undefined ? "trialPeriodDays" : "metadata"
          })
        )
      const problem = input.metadata === undefined ? undefined : metadataProblem(input.metadata)
      if (problem !== undefined)
        return yield* Effect.fail(
          BadRequest.of({ code: "parameter_invalid", message: problem, param: "metadata" })
        )
      const customerId = yield* customerOf(actor, input)
      const { product, price } = yield* productFor(input.productId, "productId")
      const quantity = input.quantity ?? 1
      yield* amountCheck(price, quantity, "quantity")
      const trialDays = input.trialPeriodDays ?? product.price.recurring?.trialPeriodDays ?? 0
      const paymentMethod = input.paymentMethod ?? null
      if (trialDays === 0 && paymentMethod === null)
        return yield* Effect.fail(
          BadRequest.of({
            code: "parameter_missing",
            message: "paymentMethod is required unless the subscription starts with a trial",
            param: "paymentMethod"
          })
        )
      // A trial charges nothing now, yet an unknown method is refused now, not at the trial's end
      // (without a trial the first charge refuses it).
      if (trialDays > 0 && paymentMethod !== null)
        yield* paymentMethodErrors(payments.checkPaymentMethod(paymentMethod))
      const metadata = yield* commandMetadata(actor)
      const testClockId = yield* clock.clockOf(customerId)
      const now = yield* clock.nowFor(testClockId)
      const subscriptionId = yield* Ids.make("sub")
      const trialEnd = trialDays > 0 ? trialEndOf(now, trialDays) : null
      const anchor = trialEnd ?? now
      const first = periodAt(anchor, price, 0)
      const created = yield* runner
        .transact(
          Effect.gen(function* () {
            // The invoice is drafted before the stream exists: from the initial state, not a read.
            const probe: SubscriptionState = {
              ...SubscriptionDecider.initialState,
              subscriptionId,
              customerId,
              price,
              testClockId
            }
            const firstInvoice =
              trialEnd !== null
                ? null
                : yield* draftInvoice(probe, {
                    billingReason: "subscription_create",
                    periodStart: first.start,
                    periodEnd: first.end,
                    lines: [subscriptionLine(price, quantity, first.start, first.end)],
                    paymentMethod,
                    callKeyPrefix:
                      requestKey === undefined
                        ? renewalKeyOf(subscriptionId, first.start)
                        : callKeyPrefixOf(actor, requestKey),
                    metadata
                  })
            const result = yield* execute(
              subscriptionId,
              {
                _tag: "Create",
                created: {
                  subscriptionId,
                  customerId,
                  productId: product.id,
                  planName: product.name,
                  quantity,
                  price,
                  status: trialEnd === null ? "incomplete" : "trialing",
                  paymentMethod,
                  anchor,
                  currentPeriodStart: trialEnd === null ? first.start : now,
                  currentPeriodEnd: trialEnd ?? first.end,
                  trialStart: trialEnd === null ? null : now,
                  trialEnd,
                  metadata: input.metadata ?? {},
                  testClockId
                },
                firstInvoice
              },
              metadata
            )
            yield* scheduleFor(result.state)
            return result.state
          })
        )
        .pipe(paymentMethodErrors)
      yield* work.wake
      const latest = latestInvoiceOf(created)
      if (latest === undefined || latest.status !== "open") return subscriptionObject(created)
      const collected = yield* collect(subscriptionId, latest.invoiceId, { automatic: false }, metadata)
      return subscriptionObject(collected.state)
    })

  const visibleState = (actor: AuthenticatedActor, subscriptionId: string) =>
    Effect.gen(function* () {
      if (!Ids.isValid("sub", subscriptionId)) return yield* Effect.fail(notFound)
      const state = yield* load(subscriptionId)
      if (!state.exists || !visible(actor, state.customerId)) return yield* Effect.fail(notFound)
      return state
    })

  const get = (actor: AuthenticatedActor, subscriptionId: string) =>
    Effect.gen(function* () {
      if (!Ids.isValid("sub", subscriptionId)) return yield* Effect.fail(notFound)
      const row = yield* selectSubscription(sql, subscriptionId)
      if (Option.isNone(row) || !visible(actor, row.value.customerId)) return yield* Effect.fail(notFound)
      return subscriptionObject(row.value)
    })

  const list = (
    actor: AuthenticatedActor,
    params: SubscriptionListParams
  ): Effect.Effect<V1Page<SubscriptionObject>, BadRequest | NotFound> =>
    Effect.gen(function* () {
      const own = actor.role === "customer"
      if (own && params.customerId !== undefined && params.customerId !== actor.customerId)
        return { object: "list", data: [], hasMore: false } as const
      return yield* listSubscriptions(
        sql,
        {
          ...(own ? { owner: actor.customerId ?? "" } : { customerId: params.customerId }),
          status: params.status,
          productId: params.productId
        },
        params,
        subscriptionObject
      )
    }).pipe(Effect.catchTag("SqlError", Effect.die))

  const update = (actor: AuthenticatedActor, subscriptionId: string, patch: SubscriptionPatch) =>
    Effect.gen(function* () {
      const before = yield* visibleState(actor, subscriptionId)
      if (
        actor.role === "customer" &&
        (patch.quantity !== undefined || patch.productId !== undefined || patch.metadata !== undefined)
      )
        return yield* Effect.fail(
          Forbidden.of({
            code: "insufficient_scope",
            message:
              "A shopper may change paymentMethod and cancelAtPeriodEnd only; plans are changed by the store."
          })
        )
      const problem = patch.metadata === undefined ? undefined : metadataProblem(patch.metadata)
      if (problem !== undefined)
        return yield* Effect.fail(
          BadRequest.of({ code: "parameter_invalid", message: problem, param: "metadata" })
        )
      const planOf = (s: SubscriptionState) =>
        s.pendingUpdate ?? {
          productId: s.productId,
          planName: s.planName,
          quantity: s.quantity,
          price: s.price
        }
      let plan: { productId: string; planName: string; quantity: number; price: PriceSnapshot } | undefined
      if (patch.productId !== undefined || patch.quantity !== undefined) {
        const base = planOf(before)
        if (patch.productId !== undefined && patch.productId !== base.productId) {
          const { product, price } = yield* productFor(patch.productId, "productId")
          if (price.currency !== before.price.currency)
            return yield* Effect.fail(
              BadRequest.of({
                code: "currency_mismatch",
                message: `Product ${product.id} is priced in ${price.currency}, this subscription in ${before.price.currency}.`,
                param: "productId"
              })
            )
          plan = { productId: product.id, planName: product.name, quantity: base.quantity, price }
        } else plan = { ...base }
        plan = { ...plan, quantity: patch.quantity ?? plan.quantity }
        yield* amountCheck(plan.price, plan.quantity, "quantity")
      }
      // A payment method is charged later (renewals): one the processor does not know is refused now.
      if (patch.paymentMethod !== undefined)
        yield* paymentMethodErrors(payments.checkPaymentMethod(patch.paymentMethod))
      const metadata = yield* commandMetadata(actor)
      const updated = yield* locked(subscriptionId, (state, loaded) =>
        Effect.map(
          execute(
            subscriptionId,
            {
              _tag: "Update",
              patch: {
                paymentMethod: patch.paymentMethod,
                cancelAtPeriodEnd: patch.cancelAtPeriodEnd,
                requestedBy: actor.role === "customer" ? "customer" : "admin",
                metadata: patch.metadata,
                plan,
                changesProduct: plan !== undefined && plan.productId !== state.productId
              }
            },
            metadata,
            loaded
          ),
          (r) => [r.state, r.state] as const
        )
      )
      if (Option.isNone(updated)) return yield* Effect.fail(notFound)
      const state = updated.value
      // A new payment method pays what is owed at once (research §4.5).
      const latest = latestInvoiceOf(state)
      if (
        patch.paymentMethod !== undefined &&
        latest?.status === "open" &&
        (state.status === "incomplete" || state.status === "past_due" || state.status === "unpaid")
      ) {
        const collected = yield* collect(
          subscriptionId,
          latest.invoiceId,
          { paymentMethod: patch.paymentMethod, automatic: false },
          metadata
        )
        return subscriptionObject(collected.state)
      }
      return subscriptionObject(state)
    })

  const refundProrated = (s: SubscriptionState, metadata: EventMetadata) =>
    s.prorate === null
      ? Effect.void
      : payments
          .refund(
            s.prorate.paymentId,
            {
              amount: s.prorate.amount,
              reason: "requested_by_customer",
              key: `subscription:${s.subscriptionId}:prorate`
            },
            metadata
          )
          .pipe(
            Effect.flatMap((refund) =>
              refund.status === "failed"
                ? Effect.logWarning(
                    `billing: the prorated refund of ${s.subscriptionId} was refused: ${refund.failureReason ?? "no reason"}`
                  )
                : Effect.void
            ),
            Effect.catchTags({
              PaymentNotFound: () => Effect.void,
              ChargeNotRefundable: () => Effect.void,
              ChargeAlreadyRefunded: () => Effect.void,
              AmountTooLarge: (e) =>
                Effect.logWarning(
                  `billing: the prorated refund of ${s.subscriptionId} exceeds the payment`,
                  e
                )
            })
          )

  /**
   * The unused part of the current period's licensed fee, from the payment that paid it — no more
   * than that payment still holds (a refund made on it meanwhile took the rest).
   */
  const prorationOf = (s: SubscriptionState, now: Date) =>
    Effect.gen(function* () {
      const paid = s.invoices.find(
        (i) =>
          i.status === "paid" &&
          i.paymentId !== null &&
          i.billingReason !== "subscription_cancel" &&
          i.periodStart.getTime() === s.currentPeriodStart.getTime()
      )
      if (paid === undefined || paid.paymentId === null || s.status === "trialing") return null
      const licensed = paid.lines.reduce((sum, l) => (l.type === "subscription" ? sum + l.amount : sum), 0)
      const length = s.currentPeriodEnd.getTime() - s.currentPeriodStart.getTime()
      const unused = Math.max(
        0,
        s.currentPeriodEnd.getTime() - Math.max(now.getTime(), s.currentPeriodStart.getTime())
      )
      const payment = yield* findPayment(paid.paymentId)
      const held = Option.match(payment, {
        onNone: () => 0,
        onSome: (p) => p.amountCaptured - p.amountRefunded
      })
      const amount = Math.min(length <= 0 ? 0 : Math.floor((licensed * unused) / length), held)
      return amount > 0 ? { paymentId: paid.paymentId, amount } : null
    })

  /**
   * A test clock is being deleted (in the caller's transaction, before the clock goes): its customers'
   * subscriptions that are not over are canceled at the clock's time with nothing billed — no usage
   * invoice, no proration — as Stripe's deletion of the clock's customers ends them. Without it they
   * would stay active with no renewal ever due. Answers how many were canceled.
   */
  const clockDeleted = (testClockId: string, metadata: EventMetadata) =>
    Effect.flatMap(liveSubscriptionsOnClock(sql, testClockId), (ids) =>
      endUnbilled(ids, "test_clock_deleted", metadata)
    )

  /**
   * A customer was erased (`customer.erased`): their subscriptions that are not over are canceled
   * with nothing billed (no usage invoice, no proration, no charge to a customer who no longer
   * exists), as Stripe's deletion of a customer cancels their subscriptions. Answers how many.
   */
  const customerErased = (customerId: string, metadata: EventMetadata) =>
    Effect.flatMap(liveSubscriptionsOf(sql, customerId), (ids) =>
      endUnbilled(ids, "customer_deleted", metadata)
    )

  /** Cancels these subscriptions now, at their clock's time, billing nothing; the canceled ones counted. */
  const endUnbilled = (
    subscriptionIds: ReadonlyArray<string>,
    reason: "test_clock_deleted" | "customer_deleted",
    metadata: EventMetadata
  ) =>
    Effect.gen(function* () {
      let canceled = 0
      for (const subscriptionId of subscriptionIds) {
        yield* locked(subscriptionId, (state, loaded) =>
          isTerminal(state)
            ? Effect.succeed([undefined, state] as const)
            : Effect.gen(function* () {
                const now = yield* nowOf(state)
                const command = { _tag: "Cancel", now, reason, finalInvoice: null, prorate: null } as const
                const result = yield* execute(subscriptionId, command, metadata, loaded)
                canceled++
                return [undefined, result.state] as const
              })
        )
      }
      return canceled
    })

  const cancel = (actor: AuthenticatedActor, subscriptionId: string, params: typeof CancelParams.Type) =>
    Effect.gen(function* () {
      const before = yield* visibleState(actor, subscriptionId)
      if (actor.role === "customer" && params.prorate === "true")
        return yield* Effect.fail(
          Forbidden.of({
            code: "insufficient_scope",
            message: "A prorated refund is the store's decision: a shopper cancels without prorate.",
            param: "prorate"
          })
        )
      const metadata = yield* commandMetadata(actor)
      if (before.status === "canceled") {
        yield* refundProrated(before, metadata)
        return subscriptionObject(before)
      }
      const canceled = yield* locked(subscriptionId, (state, loaded) =>
        Effect.gen(function* () {
          const now = yield* nowOf(state)
          const billsUsage =
            state.status !== "trialing" && state.status !== "incomplete" && state.status !== "canceled"
          const usage = billsUsage ? yield* usageLine(state, state.currentPeriodStart, now, true) : null
          const finalInvoice =
            usage === null || usage.amount === 0
              ? null
              : yield* draftInvoice(state, {
                  billingReason: "subscription_cancel",
                  periodStart: now,
                  periodEnd: now,
                  lines: [usage],
                  paymentMethod: state.paymentMethod,
                  callKeyPrefix: renewalKeyOf(subscriptionId, now),
                  metadata
                })
          const prorate = params.prorate === "true" ? yield* prorationOf(state, now) : null
          const result = yield* execute(
            subscriptionId,
            {
              _tag: "Cancel",
              now,
              reason: actor.role === "customer" ? "requested_by_customer" : "admin",
              finalInvoice,
              prorate
            },
            metadata,
            loaded
          )
          return [result.state, result.state] as const
        })
      )
      if (Option.isNone(canceled)) return yield* Effect.fail(notFound)
      const state = canceled.value
      yield* refundProrated(state, metadata)
      const latest = latestInvoiceOf(state)
      if (latest?.status === "open" && latest.billingReason === "subscription_cancel") {
        const collected = yield* collect(subscriptionId, latest.invoiceId, { automatic: false }, metadata)
        return subscriptionObject(collected.state)
      }
      return subscriptionObject(state)
    })

  const getInvoice = (actor: AuthenticatedActor, invoiceId: string) =>
    Effect.gen(function* () {
      if (!Ids.isValid("in", invoiceId)) return yield* Effect.fail(invoiceNotFound)
      const found = yield* selectInvoice(sql, invoiceId)
      if (Option.isNone(found) || !visible(actor, found.value.customerId))
        return yield* Effect.fail(invoiceNotFound)
      return found.value
    }).pipe(Effect.catchTag("SqlError", Effect.die))

  const listInvoicesOf = (
    actor: AuthenticatedActor,
    params: InvoiceListParams
  ): Effect.Effect<V1Page<InvoiceObject>, BadRequest> =>
    Effect.gen(function* () {
      const own = actor.role === "customer"
      if (own && params.customerId !== undefined && params.customerId !== actor.customerId)
        return { object: "list", data: [], hasMore: false } as const
      return yield* listInvoices(
        sql,
        {
          subscriptionId: params.subscriptionId,
          status: params.status,
          ...(own ? { owner: actor.customerId ?? "" } : { customerId: params.customerId })
        },
        params
      )
    }).pipe(Effect.catchTag("SqlError", Effect.die))

  /** Domain errors → HTTP (one mapper for the context); anything else not HTTP is a defect. */
  const http = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, HttpAnswer, R> =>
    Effect.catchAll(self, (error): Effect.Effect<never, HttpAnswer> => {
      if (isHttpish(error)) return Effect.fail(error)
      if (!isSubscriptionError(error)) return Effect.die(error)
      switch (error._tag) {
        case "SubscriptionNotFound":
          return Effect.fail(notFound)
        case "SubscriptionNotActive":
          return Effect.fail(Conflict.of({ code: "subscription_not_active", message: error.message }))
        case "PlanChangeBlocked":
          return Effect.fail(
            Conflict.of({
              code: "subscription_past_due",
              message: `This subscription is ${error.status}: its plan can change once what it owes is paid (PATCH paymentMethod).`,
              param: "productId"
            })
          )
        case "SubscriptionAlreadyExists":
          return Effect.die(error)
      }
    })

  /** A read's answers: 404 and 400 only (anything else is a defect). */
  const read = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, NotFound | BadRequest, R> =>
    Effect.catchAll(self, (error) =>
      error instanceof NotFound || error instanceof BadRequest ? Effect.fail(error) : Effect.die(error)
    )
  const listing = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, BadRequest, R> =>
    Effect.catchAll(self, (error) => (error instanceof BadRequest ? Effect.fail(error) : Effect.die(error)))
  /** A write's answers, but the 503 only where a processor call can be refused before anything happened. */
  const write = <A, E, R>(
    self: Effect.Effect<A, E, R>
  ): Effect.Effect<A, Exclude<HttpAnswer, ServiceUnavailable>, R> =>
    Effect.catchAll(http(self), (error) =>
      error instanceof ServiceUnavailable ? Effect.die(error) : Effect.fail(error)
    )

  return {
    create: (actor: AuthenticatedActor, input: NewSubscription, requestKey?: string) =>
      http(create(actor, input, requestKey)),
    get: (actor: AuthenticatedActor, subscriptionId: string) => read(get(actor, subscriptionId)),
    list: (actor: AuthenticatedActor, params: SubscriptionListParams) => listing(list(actor, params)),
    update: (actor: AuthenticatedActor, subscriptionId: string, patch: SubscriptionPatch) =>
      write(update(actor, subscriptionId, patch)),
    cancel: (actor: AuthenticatedActor, subscriptionId: string, params: typeof CancelParams.Type) =>
      write(cancel(actor, subscriptionId, params)),
    getInvoice: (actor: AuthenticatedActor, invoiceId: string) => read(getInvoice(actor, invoiceId)),
    listInvoices: (actor: AuthenticatedActor, params: InvoiceListParams) =>
      listing(listInvoicesOf(actor, params)),
    /** One due item's handler (`billing.renew`, `billing.retry`, `billing.expire_incomplete`, any clock). */
    handleDue,
    clockDeleted,
    customerErased,
    /** The renewal transactions of a batch of `billing.renew` items as one (see `handleDue`). */
    renewTogether,
    /** A manual renewal run (what a due item does), e.g. an operator's retry. */
    renew,
    /** The transaction half of a renewal alone (invoice, intent, period advanced; no charge): for tests. */
    openRenewal: renewLocked,
    retry,
    load
  }
})

const SUBSCRIPTION_ERROR_TAGS: ReadonlySet<string> = new Set([
  "SubscriptionNotFound",
  "SubscriptionAlreadyExists",
  "SubscriptionNotActive",
  "PlanChangeBlocked"
])

const isSubscriptionError = (error: unknown): error is SubscriptionError =>
  typeof error === "object" &&
  error !== null &&
  "_tag" in error &&
  typeof error._tag === "string" &&
  SUBSCRIPTION_ERROR_TAGS.has(error._tag)

/** The HTTP errors a billing route answers with; anything else is a defect (a logged 500). */
type HttpAnswer = BadRequest | NotFound | Conflict | Forbidden | ServiceUnavailable

const isHttpish = (error: unknown): error is HttpAnswer =>
  error instanceof BadRequest ||
  error instanceof NotFound ||
  error instanceof Conflict ||
  error instanceof Forbidden ||
  error instanceof ServiceUnavailable

export type BillingShape = Effect.Effect.Success<typeof makeBilling>

export class Billing extends Context.Tag("billing/Billing")<Billing, BillingShape>() {}

export const BillingLive = Layer.effect(Billing, makeBilling)
