/**
 * The payment-intent aggregate as a pure decider (no database): the intent, payment and refund
 * state machines with Stripe's state names (research commerce-design §1.4–§1.6), the idempotency
 * keys each started call carries, the public events and their snapshots, and a model-based property
 * over random confirm / authenticate / capture / cancel / refund / processor-answer sequences:
 * captured ≤ authorized, refunded ≤ captured (even with refunds under way), refunds add up, and
 * `succeeded` / `canceled` intents (and `failed`, `canceled`, `refunded` payments) never change again.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as fc from "fast-check"
import type { EventMetadata } from "../../src/eventstore/EventStore.js"
import { fold, type Pending } from "../../src/kernel/Decider.js"
import {
  type IntentState,
  isTerminal,
  type PaymentCommand,
  PaymentIntentDecider,
  type PaymentState,
  type ProcessorOutcome,
  pendingRefunds
} from "../../src/payments/decider.js"
import {
  CaptureStarted,
  PaymentAttemptStarted,
  PaymentAuthorized,
  type PaymentEvent,
  PaymentFailed,
  PaymentIntentCanceled,
  PaymentIntentCreated,
  type PaymentMethod,
  RefundStarted,
  RefundSucceeded,
  VoidStarted
} from "../../src/payments/events.js"
import { deciderSpec } from "../support/decider.js"

const PI = "pi_01jd4x8m6ffq2b3n5r7t9v1w3y"
const VISA: PaymentMethod = {
  token: "pm_card_visa",
  brand: "visa",
  last4: "4242",
  expMonth: 12,
  expYear: 2034
}
const DECLINED: PaymentMethod = { ...VISA, token: "pm_card_visa_chargeDeclined", last4: "0002" }
const THREE_DS: PaymentMethod = { ...VISA, token: "pm_card_authenticationRequired", last4: "3184" }

const spec = deciderSpec(PaymentIntentDecider)

const create = (fields: Partial<Extract<PaymentCommand, { _tag: "Create" }>> = {}): PaymentCommand => ({
  _tag: "Create",
  paymentIntentId: PI,
  amount: 1000,
  currency: "USD",
  captureMethod: "automatic",
  customerId: null,
  description: null,
  metadata: {},
  paymentMethod: null,
  clientSecretHash: "hash",
  processor: "test",
  ...fields
})

const created = (fields: Partial<Extract<PaymentCommand, { _tag: "Create" }>> = {}) =>
  spec.when(create(fields)).state

const authorized = (reference = "ref_1", captured = true): ProcessorOutcome => ({
  _tag: "Authorized",
  processorReference: reference,
  captured
})
const declined: ProcessorOutcome = {
  _tag: "Declined",
  code: "card_declined",
  declineCode: "insufficient_funds",
  message: "Your card has insufficient funds."
}
const ok = (reference = "ref"): ProcessorOutcome => ({ _tag: "Succeeded", processorReference: reference })
const refused: ProcessorOutcome = { _tag: "Failed", code: "refund_failed", message: "refused" }

const confirm = (paymentId = "pay_1", paymentMethod: PaymentMethod | null = VISA): PaymentCommand => ({
  _tag: "Confirm",
  paymentMethod,
  paymentId
})
const record = (idempotencyKey: string, outcome: ProcessorOutcome): PaymentCommand => ({
  _tag: "Record",
  idempotencyKey,
  outcome
})

/** An intent whose payment `pay_1` (1000) is captured. */
const captured = () => spec.run(created(), confirm(), record(`${PI}:confirm:1`, authorized()))
/** An intent whose payment `pay_1` (1000) is authorized, not captured (manual capture). */
const authorizedOnly = () =>
  spec.run(
    created({ captureMethod: "manual" }),
    confirm(),
    record(`${PI}:confirm:1`, authorized("ref_1", false))
  )

describe("payment intent state machine", () => {
  it("create: requires_payment_method without a payment method, requires_confirmation with one", () => {
    spec.when(create()).thenEvents([
      PaymentIntentCreated.make({
        paymentIntentId: PI,
        amount: 1000,
        currency: "USD",
        captureMethod: "automatic",
        customerId: null,
        description: null,
        metadata: {},
        paymentMethod: null,
        clientSecretHash: "hash",
        processor: "test"
      })
    ])
    expect(created().status).toBe("requires_payment_method")
    expect(created({ paymentMethod: VISA }).status).toBe("requires_confirmation")
    spec.givenState(created()).when(create()).thenFails("PaymentIntentAlreadyExists")
    spec.when(confirm()).thenFails("PaymentIntentNotFound")
  })

  it("confirm starts the authorization with the key <pi>:confirm:<attempt> and a pending payment", () => {
    const decision = spec
      .givenState(created())
      .when(confirm())
      .thenEvents([
        PaymentAttemptStarted.make({
          paymentIntentId: PI,
          paymentId: "pay_1",
          idempotencyKey: `${PI}:confirm:1`,
          attempt: 1,
          paymentMethod: VISA,
          capture: true
        })
      ])
    expect(decision.state.status).toBe("processing")
    expect(decision.state.payments).toMatchObject([{ paymentId: "pay_1", status: "pending", amount: 1000 }])
    // A second confirm while the call is under way: no second call, wait for the first.
    spec
      .givenState(decision.state)
      .when(confirm("pay_2"))
      .thenFails({
        _tag: "ConfirmationInProgress",
        idempotencyKey: `${PI}:confirm:1`,
        paymentId: "pay_1"
      })
    spec.givenState(created()).when(confirm("pay_1", null)).thenFails("PaymentMethodMissing")
  })

  it("create with confirmPaymentId: one decision with exactly the events of create, then confirm", () => {
    for (const fields of [
      { paymentMethod: VISA },
      { paymentMethod: VISA, captureMethod: "manual" as const }
    ]) {
      const once = spec.when(create({ ...fields, confirmPaymentId: "pay_1" }))
      const alone = spec.when(create(fields))
      const confirmed = spec.givenState(alone.state).when(confirm("pay_1", null))
      expect(once.events).toEqual([...alone.events, ...confirmed.events])
      expect(once.state).toEqual(confirmed.state)
      expect(once.state.status).toBe("processing")
    }
    // No payment method to confirm with: nothing is created either.
    spec.when(create({ confirmPaymentId: "pay_1" })).thenFails("PaymentMethodMissing")
  })

  it("approved: succeeded with automatic capture, requires_capture with manual", () => {
    const auto = captured()
    expect(auto.status).toBe("succeeded")
    expect(auto.payments[0]).toMatchObject({
      status: "succeeded",
      amountCaptured: 1000,
      processorReference: "ref_1"
    })
    const manual = authorizedOnly()
    expect(manual.status).toBe("requires_capture")
    expect(manual.payments[0]).toMatchObject({ status: "authorized", amountCaptured: 0 })
  })

  it("declined: back to requires_payment_method with lastPaymentError; the next attempt gets a new key", () => {
    const started = spec.run(created(), confirm("pay_1", DECLINED))
    const failed = spec
      .givenState(started)
      .when(record(`${PI}:confirm:1`, declined))
      .thenEvents([
        PaymentFailed.make({
          paymentIntentId: PI,
          paymentId: "pay_1",
          idempotencyKey: `${PI}:confirm:1`,
          code: "card_declined",
          declineCode: "insufficient_funds",
          message: "Your card has insufficient funds."
        })
      ]).state
    expect(failed.status).toBe("requires_payment_method")
    expect(failed.paymentMethod).toBeNull()
    expect(failed.lastPaymentError).toEqual({
      type: "card_error",
      code: "card_declined",
      declineCode: "insufficient_funds",
      message: "Your card has insufficient funds.",
      paymentMethod: DECLINED
    })
    expect(failed.payments[0]).toMatchObject({ status: "failed", failureCode: "card_declined" })
    const retried = spec.givenState(failed).when(confirm("pay_2", VISA)).events[0]
    expect(retried?.data).toMatchObject({ idempotencyKey: `${PI}:confirm:2`, attempt: 2 })
    // The same outcome recorded again (the recovery worker after the request): nothing.
    spec
      .givenState(failed)
      .when(record(`${PI}:confirm:1`, declined))
      .thenNothing()
  })

  it("3-D Secure: requires_action with nextAction; approve → succeeded, fail → requires_payment_method", () => {
    const action = spec.run(
      created(),
      confirm("pay_1", THREE_DS),
      record(`${PI}:confirm:1`, {
        _tag: "ActionRequired",
        processorReference: "ref_1",
        nextAction: { type: "use_test_authentication", url: `/v1/test/payment-intents/${PI}/authenticate` }
      })
    )
    expect(action.status).toBe("requires_action")
    expect(action.nextAction?.type).toBe("use_test_authentication")
    // As Stripe: no confirm while the action is required, unless it brings a new payment method,
    // which abandons (cancels) the payment waiting for the action.
    spec.givenState(action).when(confirm("pay_2", null)).thenFails("UnexpectedState")
    const replaced = spec.givenState(action).when(confirm("pay_2", VISA))
    expect(replaced.events[0]?.data).toMatchObject({
      idempotencyKey: `${PI}:confirm:2`,
      paymentId: "pay_2",
      abandonedPaymentId: "pay_1"
    })
    expect(replaced.state.status).toBe("processing")
    expect(replaced.state.payments.map((p) => [p.paymentId, p.status])).toEqual([
      ["pay_1", "canceled"],
      ["pay_2", "pending"]
    ])
    const approving = spec.givenState(action).when({ _tag: "Authenticate", outcome: "approve" })
    expect(approving.events[0]?.data).toMatchObject({
      idempotencyKey: `${PI}:authenticate:1`,
      outcome: "approve"
    })
    expect(spec.run(approving.state, record(`${PI}:authenticate:1`, authorized())).status).toBe("succeeded")
    const failing = spec.run(
      action,
      { _tag: "Authenticate", outcome: "fail" },
      record(`${PI}:authenticate:1`, declined)
    )
    expect(failing.status).toBe("requires_payment_method")
    spec.givenState(created()).when({ _tag: "Authenticate", outcome: "approve" }).thenFails("UnexpectedState")
    // A cancel voids the payment waiting for the action: neither a new confirmation nor the
    // authentication may start beside that void (either could charge an intent told canceled).
    const voiding = spec.run(action, { _tag: "Cancel", reason: null })
    expect(voiding.operations.map((o) => o.kind)).toEqual(["void"])
    spec.givenState(voiding).when(confirm("pay_3", VISA)).thenFails("UnexpectedState")
    spec.givenState(voiding).when({ _tag: "Authenticate", outcome: "approve" }).thenFails("UnexpectedState")
  })

  it("terminal states refuse confirm, capture and cancel", () => {
    const done = captured()
    for (const command of [
      confirm("pay_2"),
      { _tag: "Capture", amount: null } as const,
      { _tag: "Cancel", reason: null } as const
    ])
      spec.givenState(done).when(command).thenFails({ _tag: "UnexpectedState", status: "succeeded" })
    const canceled = spec.run(created(), { _tag: "Cancel", reason: "abandoned" })
    expect(canceled.status).toBe("canceled")
    expect(canceled.cancellationReason).toBe("abandoned")
    for (const command of [confirm("pay_2"), { _tag: "Cancel", reason: null } as const])
      spec.givenState(canceled).when(command).thenFails({ _tag: "UnexpectedState", status: "canceled" })
  })
})

describe("payment state machine: capture and cancel", () => {
  it("capture: <pi>:capture for up to the authorized amount; the rest is released", () => {
    const state = authorizedOnly()
    spec.givenState(state).when({ _tag: "Capture", amount: 1001 }).thenFails({
      _tag: "AmountTooLarge",
      param: "amountToCapture"
    })
    const capturing = spec
      .givenState(state)
      .when({ _tag: "Capture", amount: 600 })
      .thenEvents([
        CaptureStarted.make({
          paymentIntentId: PI,
          paymentId: "pay_1",
          idempotencyKey: `${PI}:capture`,
          amount: 600
        })
      ]).state
    const done = spec.run(capturing, record(`${PI}:capture`, ok()))
    expect(done.status).toBe("succeeded")
    expect(done.payments[0]).toMatchObject({ status: "succeeded", amountCaptured: 600 })
  })

  it("capture racing cancel: whichever starts first wins, the other is refused", () => {
    const state = authorizedOnly()
    const capturing = spec.run(state, { _tag: "Capture", amount: null })
    spec.givenState(capturing).when({ _tag: "Cancel", reason: null }).thenFails("UnexpectedState")
    const voiding = spec
      .givenState(state)
      .when({ _tag: "Cancel", reason: "duplicate" })
      .thenEvents([
        VoidStarted.make({
          paymentIntentId: PI,
          paymentId: "pay_1",
          idempotencyKey: `${PI}:void`,
          cancellationReason: "duplicate"
        })
      ]).state
    spec.givenState(voiding).when({ _tag: "Capture", amount: null }).thenFails("UnexpectedState")
    spec
      .givenState(voiding)
      .when(record(`${PI}:void`, ok()))
      .thenEvents([
        PaymentIntentCanceled.make({
          paymentIntentId: PI,
          paymentId: "pay_1",
          idempotencyKey: `${PI}:void`,
          cancellationReason: "duplicate"
        })
      ])
    const canceled = spec.run(voiding, record(`${PI}:void`, ok()))
    expect(canceled.payments[0]?.status).toBe("canceled")
    // A processor that refuses the capture leaves the payment authorized.
    const refusedCapture = spec.run(capturing, record(`${PI}:capture`, refused))
    expect(refusedCapture.status).toBe("requires_capture")
    expect(refusedCapture.operations).toEqual([])
  })
})

describe("refund state machine", () => {
  it("partial refunds accumulate; beyond what remains → AmountTooLarge; nothing left → ChargeAlreadyRefunded", () => {
    let state = captured()
    const first = spec
      .givenState(state)
      .when({ _tag: "Refund", paymentId: "pay_1", refundId: "re_1", amount: 300, reason: null })
    first.thenEvents([
      RefundStarted.make({
        paymentIntentId: PI,
        paymentId: "pay_1",
        idempotencyKey: "pay_1:refund:1",
        refundId: "re_1",
        amount: 300,
        reason: null
      })
    ])
    state = first.state
    // The pending refund is reserved: only 700 can be asked for meanwhile.
    spec
      .givenState(state)
      .when({ _tag: "Refund", paymentId: "pay_1", refundId: "re_2", amount: 701, reason: null })
      .thenFails({
        _tag: "AmountTooLarge",
        param: "amount"
      })
    state = spec
      .givenState(state)
      .when(record("pay_1:refund:1", ok("r1")))
      .thenEvents([
        RefundSucceeded.make({
          paymentIntentId: PI,
          paymentId: "pay_1",
          idempotencyKey: "pay_1:refund:1",
          refundId: "re_1",
          processorReference: "r1",
          amountRefunded: 300
        })
      ]).state
    expect(state.payments[0]).toMatchObject({ status: "partially_refunded", amountRefunded: 300 })
    // The rest (no amount): 700, key pay_1:refund:2.
    const rest = spec
      .givenState(state)
      .when({ _tag: "Refund", paymentId: "pay_1", refundId: "re_2", amount: null, reason: "duplicate" })
    expect(rest.events[0]?.data).toMatchObject({ amount: 700, idempotencyKey: "pay_1:refund:2" })
    state = spec.run(rest.state, record("pay_1:refund:2", ok("r2")))
    expect(state.payments[0]).toMatchObject({ status: "refunded", amountRefunded: 1000 })
    spec
      .givenState(state)
      .when({ _tag: "Refund", paymentId: "pay_1", refundId: "re_3", amount: null, reason: null })
      .thenFails("ChargeAlreadyRefunded")
  })

  it("a refused refund frees its amount; uncaptured or failed payments are not refundable", () => {
    const state = spec.run(
      captured(),
      { _tag: "Refund", paymentId: "pay_1", refundId: "re_1", amount: 1000, reason: null },
      record("pay_1:refund:1", refused)
    )
    expect(state.refunds[0]).toMatchObject({ status: "failed", failureReason: "refused" })
    expect(state.payments[0]).toMatchObject({ status: "succeeded", amountRefunded: 0 })
    expect(pendingRefunds(state, "pay_1")).toBe(0)
    spec
      .givenState(authorizedOnly())
      .when({ _tag: "Refund", paymentId: "pay_1", refundId: "re_1", amount: null, reason: null })
      .thenFails({
        _tag: "ChargeNotRefundable",
        status: "authorized"
      })
    spec
      .givenState(captured())
      .when({ _tag: "Refund", paymentId: "pay_9", refundId: "re_1", amount: null, reason: null })
      .thenFails("PaymentNotFound")
  })
})

describe("public events", () => {
  const metadata: EventMetadata = {}
  const pending = (event: PaymentEvent, version: number): Pending<PaymentEvent> => ({
    ...event,
    streamId: `payment_intent-${PI}`,
    streamVersion: version,
    eventId: `00000000-0000-7000-8000-00000000000${version}`,
    schemaVersion: 1,
    metadata,
    recordedAt: new Date("2026-01-02T03:04:05.678Z")
  })
  const publicOf = (state: IntentState, event: PaymentEvent) =>
    PaymentIntentDecider.publicEvents?.(pending(event, 9), fold(PaymentIntentDecider, [event], state)) ?? []

  it("authorized (+ captured), failed, captured and one payment.refunded per refund, with the payment snapshot", () => {
    const started = spec.run(created({ customerId: "cus_1" }), confirm())
    const auth = PaymentAuthorized.make({
      paymentIntentId: PI,
      paymentId: "pay_1",
      idempotencyKey: `${PI}:confirm:1`,
      processorReference: "ref_1",
      captured: true,
      amount: 1000
    })
    const published = publicOf(started, auth)
    expect(published.map((p) => p.type)).toEqual(["payment.authorized", "payment.captured"])
    expect(published[0]?.data).toMatchObject({
      object: "payment",
      id: "pay_1",
      paymentIntentId: PI,
      customerId: "cus_1",
      status: "succeeded",
      amountCaptured: 1000,
      paymentMethod: { token: "pm_card_visa", brand: "visa", last4: "4242" }
    })
    const fail = PaymentFailed.make({
      paymentIntentId: PI,
      paymentId: "pay_1",
      idempotencyKey: `${PI}:confirm:1`,
      code: "card_declined",
      declineCode: null,
      message: "no"
    })
    expect(publicOf(started, fail).map((p) => p.type)).toEqual(["payment.failed"])
    const refunding = spec.run(captured(), {
      _tag: "Refund",
      paymentId: "pay_1",
      refundId: "re_1",
      amount: 400,
      reason: null
    })
    const refunded = publicOf(
      refunding,
      RefundSucceeded.make({
        paymentIntentId: PI,
        paymentId: "pay_1",
        idempotencyKey: "pay_1:refund:1",
        refundId: "re_1",
        processorReference: "r",
        amountRefunded: 400
      })
    )
    expect(refunded).toHaveLength(1)
    expect(refunded[0]).toMatchObject({
      type: "payment.refunded",
      data: {
        status: "partially_refunded",
        amountRefunded: 400,
        refund: { id: "re_1", amount: 400, status: "succeeded" }
      }
    })
  })
})

// --- The model-based property -------------------------------------------------------------------------

type Step =
  | { readonly kind: "confirm"; readonly method: PaymentMethod }
  | { readonly kind: "authenticate"; readonly outcome: "approve" | "fail" }
  | { readonly kind: "capture"; readonly amount: number | null }
  | { readonly kind: "cancel" }
  | { readonly kind: "refund"; readonly amount: number | null }
  /** The processor answers the `index`-th call under way, `success` or not. */
  | { readonly kind: "answer"; readonly index: number; readonly success: boolean }

const AMOUNT = 1000
const amountArb = fc.option(fc.integer({ min: 1, max: AMOUNT + 50 }), { nil: null })
const stepArb: fc.Arbitrary<Step> = fc.oneof(
  fc.constantFrom(VISA, DECLINED, THREE_DS).map((method) => ({ kind: "confirm" as const, method })),
  fc
    .constantFrom("approve" as const, "fail" as const)
    .map((outcome) => ({ kind: "authenticate" as const, outcome })),
  amountArb.map((amount) => ({ kind: "capture" as const, amount })),
  fc.constant({ kind: "cancel" as const }),
  amountArb.map((amount) => ({ kind: "refund" as const, amount })),
  fc.record({ kind: fc.constant("answer" as const), index: fc.nat(3), success: fc.boolean() }),
  fc.record({ kind: fc.constant("answer" as const), index: fc.nat(3), success: fc.boolean() })
)

/** What a processor would answer the call, as the test processor does for these cards. */
const answerFor = (state: IntentState, index: number, success: boolean): PaymentCommand | undefined => {
  const op = state.operations[index % Math.max(1, state.operations.length)]
  if (op === undefined) return undefined
  const payment = state.payments.find((p) => p.paymentId === op.paymentId)
  const capture = state.captureMethod === "automatic"
  let outcome: ProcessorOutcome
  switch (op.kind) {
    case "authorize":
      outcome =
        payment?.paymentMethod.token === DECLINED.token
          ? declined
          : payment?.paymentMethod.token === THREE_DS.token
            ? {
                _tag: "ActionRequired",
                processorReference: `ref_${op.paymentId}`,
                nextAction: { type: "use_test_authentication", url: "/x" }
              }
            : authorized(`ref_${op.paymentId}`, capture)
      break
    case "authenticate":
      outcome =
        op.outcome === "approve" ? authorized(payment?.processorReference ?? "ref", capture) : declined
      break
    default:
      outcome = success ? ok(`ref_${op.key}`) : refused
  }
  return record(op.key, outcome)
}

let ids = 0
const commandFor = (state: IntentState, step: Step): PaymentCommand | undefined => {
  const latest = state.payments[state.payments.length - 1]
  ids++
  switch (step.kind) {
    case "confirm":
      return confirm(`pay_${ids}`, step.method)
    case "authenticate":
      return { _tag: "Authenticate", outcome: step.outcome }
    case "capture":
      return { _tag: "Capture", amount: step.amount }
    case "cancel":
      return { _tag: "Cancel", reason: null }
    case "refund":
      return latest === undefined
        ? undefined
        : {
            _tag: "Refund",
            paymentId: latest.paymentId,
            refundId: `re_${ids}`,
            amount: step.amount,
            reason: null
          }
    case "answer":
      return answerFor(state, step.index, step.success)
  }
}

const FINAL_PAYMENT: ReadonlySet<PaymentState["status"]> = new Set(["failed", "canceled", "refunded"])

describe("model-based property", () => {
  it("over random sequences: captured ≤ authorized, refunded ≤ captured, terminal stays terminal", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("automatic" as const, "manual" as const),
        fc.array(stepArb, { minLength: 1, maxLength: 40 }),
        (captureMethod, steps) => {
          let state = created({ captureMethod, amount: AMOUNT })
          // The model: what succeeded refunds and captures add up to, kept beside the decider.
          const refundedByPayment = new Map<string, number>()
          for (const step of steps) {
            const command = commandFor(state, step)
            if (command === undefined) continue
            const exit = Effect.runSyncExit(PaymentIntentDecider.decide(command, state))
            if (Exit.isFailure(exit)) continue
            const before = state
            state = fold(PaymentIntentDecider, exit.value, state)
            for (const e of exit.value) {
              if (e.type === "payment_intent.refund_started") {
                // A refund never reserves more than remains.
                const payment = before.payments.find((p) => p.paymentId === e.data.paymentId)
                expect(e.data.amount).toBeLessThanOrEqual(
                  (payment?.amountCaptured ?? 0) -
                    (payment?.amountRefunded ?? 0) -
                    pendingRefunds(before, e.data.paymentId)
                )
              }
              if (e.type === "payment_intent.refund_succeeded") {
                const op = before.operations.find((o) => o.key === e.data.idempotencyKey)
                const amount = op?.kind === "refund" ? op.amount : 0
                refundedByPayment.set(
                  e.data.paymentId,
                  (refundedByPayment.get(e.data.paymentId) ?? 0) + amount
                )
              }
            }
            // Terminal intents stay as they are.
            if (isTerminal(before.status)) expect(state.status).toBe(before.status)
            for (const p of before.payments) {
              const after = state.payments.find((q) => q.paymentId === p.paymentId)
              if (FINAL_PAYMENT.has(p.status)) expect(after?.status).toBe(p.status)
            }
            // The money invariants, after every step.
            let capturedTotal = 0
            for (const p of state.payments) {
              expect(p.amountCaptured).toBeLessThanOrEqual(p.amount)
              expect(p.amountRefunded).toBeLessThanOrEqual(p.amountCaptured)
              expect(p.amountRefunded + pendingRefunds(state, p.paymentId)).toBeLessThanOrEqual(
                p.amountCaptured
              )
              expect(p.amountRefunded).toBe(refundedByPayment.get(p.paymentId) ?? 0)
              if (p.amountCaptured > 0) expect(p.authorizedAt).not.toBeNull()
              capturedTotal += p.amountCaptured
            }
            // One intent never takes more than its amount, whatever was retried.
            expect(capturedTotal).toBeLessThanOrEqual(state.amount)
            // A canceled intent holds no money, and once a cancellation (void) started nothing new
            // is attempted or authenticated beside it.
            if (state.status === "canceled") expect(capturedTotal).toBe(0)
            if (before.operations.some((o) => o.kind === "void"))
              for (const e of exit.value) expect(e.type).not.toMatch(/attempt_started|authentication_started/)
            expect(state.payments.filter((p) => p.amountCaptured > 0).length).toBeLessThanOrEqual(1)
          }
        }
      ),
      { numRuns: 500, seed: 19 }
    )
  })
})
