/**
 * The checkout decider, pure (issue #20 item 7): given/when/then for each command and state, and a
 * model-based property over random command sequences — the stock a checkout reserved is released
 * (expired) or converted (completed) exactly once, completion happens once with one order, a
 * terminal state stays terminal, and a repeated command changes nothing.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as fc from "fast-check"
import { type CheckoutCommand, CheckoutDecider, type CheckoutState } from "../../src/checkout/decider.js"
import {
  CheckoutCompleted,
  CheckoutCreated,
  type CheckoutEvent,
  CheckoutExpired
} from "../../src/checkout/events.js"
import { fold } from "../../src/kernel/Decider.js"
import { deciderSpec } from "../support/decider.js"

const checkout = deciderSpec(CheckoutDecider)
const CHK = "chk_01jd4x8m6ffq2b3n5r7t9v1w3y"
const PI = "pi_01jd4x8m6ffq2b3n5r7t9v1w3y"

const created = (total = 2000) =>
  CheckoutCreated.make({
    checkoutId: CHK,
    customerId: null,
    email: "a@example.com",
    shippingAddress: null,
    currency: "USD",
    lineItems: [
      {
        productId: "prod_1",
        name: "Shirt",
        sku: null,
        quantity: 1,
        unitAmount: total,
        amountTotal: total,
        priceVersion: 1
      }
    ],
    subtotal: total,
    total,
    captureMethod: "automatic",
    paymentIntentId: total === 0 ? null : PI,
    expiresAt: new Date("2030-01-01T00:30:00Z"),
    metadata: {}
  })

const createCommand = (): CheckoutCommand => ({ _tag: "Create", ...created().data })

describe("checkout decider", () => {
  it("creates once", () => {
    checkout.when(createCommand()).thenEvents([created()])
    checkout.given([created()]).when(createCommand()).thenFails("CheckoutAlreadyExists")
  })

  it("commands on a checkout that does not exist fail", () => {
    for (const command of [{ _tag: "Expire" }, { _tag: "Complete", orderId: "ord_1" }] as const)
      checkout.when(command).thenFails("CheckoutNotFound")
  })

  it("open → processing → open (3-D Secure failed) → complete; completing again is a no-op", () => {
    const processing = checkout.given([created()]).when({ _tag: "MarkProcessing" })
    expect(processing.state.status).toBe("processing")
    checkout.givenState(processing.state).when({ _tag: "MarkProcessing" }).thenEvents([])
    const reopened = checkout.givenState(processing.state).when({ _tag: "Reopen" })
    expect(reopened.state.status).toBe("open")
    const done = checkout.givenState(reopened.state).when({ _tag: "Complete", orderId: "ord_1" })
    expect(done.events).toEqual([
      CheckoutCompleted.make({
        checkoutId: CHK,
        orderId: "ord_1",
        paymentIntentId: PI,
        paymentStatus: "paid"
      })
    ])
    expect(done.state).toMatchObject({ status: "complete", orderId: "ord_1", paymentStatus: "paid" })
    checkout.givenState(done.state).when({ _tag: "Complete", orderId: "ord_1" }).thenEvents([])
    checkout
      .givenState(done.state)
      .when({ _tag: "Expire" })
      .thenFails({ _tag: "CheckoutNotOpen", status: "complete" })
    checkout.givenState(done.state).when({ _tag: "MarkProcessing" }).thenFails("CheckoutNotOpen")
  })

  it("expired is terminal: expiring again is a no-op, completing is refused", () => {
    const expired = checkout.given([created()]).when({ _tag: "Expire" })
    expect(expired.events).toEqual([CheckoutExpired.make({ checkoutId: CHK, paymentIntentId: PI })])
    checkout.givenState(expired.state).when({ _tag: "Expire" }).thenEvents([])
    checkout.givenState(expired.state).when({ _tag: "Complete", orderId: "ord_1" }).thenFails({
      _tag: "CheckoutNotOpen",
      status: "expired"
    })
    checkout.givenState(expired.state).when({ _tag: "Reopen" }).thenFails("CheckoutNotOpen")
  })

  it("a zero total completes with no payment required", () => {
    const done = checkout.given([created(0)]).when({ _tag: "Complete", orderId: "ord_1" })
    expect(done.state.paymentStatus).toBe("no_payment_required")
    checkout
      .given([created(0)])
      .when({ _tag: "MarkProcessing" })
      .thenFails("CheckoutNotOpen")
  })
})

// --- The model-based property -------------------------------------------------------------------------

const commandArb: fc.Arbitrary<CheckoutCommand> = fc.oneof(
  fc.constant<CheckoutCommand>({ _tag: "MarkProcessing" }),
  fc.constant<CheckoutCommand>({ _tag: "Reopen" }),
  fc.constant<CheckoutCommand>({ _tag: "Expire" }),
  fc.constantFrom("ord_a", "ord_b").map((orderId): CheckoutCommand => ({ _tag: "Complete", orderId }))
)

describe("model-based property", () => {
  it("the reservation is released or converted exactly once; terminal stays terminal", () => {
    fc.assert(
      fc.property(fc.array(commandArb, { minLength: 1, maxLength: 40 }), (commands) => {
        let state: CheckoutState = fold(CheckoutDecider, [created()])
        const log: Array<CheckoutEvent> = []
        let terminalAt: CheckoutState | undefined
        for (const command of commands) {
          const exit = Effect.runSyncExit(CheckoutDecider.decide(command, state))
          if (Exit.isFailure(exit)) {
            // Refused only when the command does not apply to a terminal state.
            expect(state.status === "complete" || state.status === "expired").toBe(true)
            continue
          }
          log.push(...exit.value)
          state = fold(CheckoutDecider, exit.value, state)
          // The model: once terminal, nothing changes any more.
          if (terminalAt !== undefined) {
            expect(exit.value).toEqual([])
            expect(state).toEqual(terminalAt)
          }
          if (state.status === "complete" || state.status === "expired") terminalAt ??= state
        }
        const released = log.filter((e) => e.type === "checkout.expired").length
        const converted = log.filter((e) => e.type === "checkout.completed").length
        // The hold leaves exactly once when the checkout ended, never when it is still open.
        expect(released + converted).toBe(terminalAt === undefined ? 0 : 1)
        // One order at most, and the state names it.
        const completions = log.filter((e) => e.type === "checkout.completed")
        if (completions[0]?.type === "checkout.completed")
          expect(state.orderId).toBe(completions[0].data.orderId)
        else expect(state.orderId).toBeNull()
      }),
      { numRuns: 500 }
    )
  })
})
