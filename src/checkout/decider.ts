/**
 * The checkout aggregate (COMMERCE.md decision 2; research commerce-design §1.2):
 * `open` → `processing` (3-D Secure pending) → `complete` | `expired`, with `processing` → `open`
 * when the pending payment fails. `complete` and `expired` are terminal: the stock it reserved at
 * creation is either converted to its order (complete) or released (expired), each exactly once,
 * because only the command that leaves `open`/`processing` does it, in the same transaction.
 * Completing again answers the same order; expiring again changes nothing. Pure: tested without a
 * database (test/checkout/decider.test.ts, with a model-based property).
 */
import { Data, Effect } from "effect"
import type { EventOf, Shredded } from "../eventstore/EventType.js"
import { defineDecider, type Recorded } from "../kernel/Decider.js"
import type { Metadata } from "../kernel/Metadata.js"
import type { CaptureMethod } from "../payments/index.js"
import {
  CheckoutCompleted,
  CheckoutCreated,
  type CheckoutEvent,
  CheckoutExpired,
  type CheckoutLine,
  CheckoutProcessing,
  CheckoutReopened,
  type CheckoutStatus,
  checkoutEventTypes,
  type ShippingAddress
} from "./events.js"

export const checkoutStream = (checkoutId: string) => `checkout-${checkoutId}`

export class CheckoutNotFound extends Data.TaggedError("CheckoutNotFound")<{ readonly checkoutId: string }> {}
export class CheckoutAlreadyExists extends Data.TaggedError("CheckoutAlreadyExists")<{
  readonly checkoutId: string
}> {}
/** The command needs an open (or processing) checkout: 409 `checkout_not_open`. */
export class CheckoutNotOpen extends Data.TaggedError("CheckoutNotOpen")<{
  readonly checkoutId: string
  readonly status: CheckoutStatus
}> {}

export type CheckoutError = CheckoutNotFound | CheckoutAlreadyExists | CheckoutNotOpen

export interface CheckoutState {
  readonly exists: boolean
  readonly checkoutId: string
  readonly status: CheckoutStatus
  readonly customerId: string | null
  readonly email: string | Shredded
  readonly shippingAddress: ShippingAddress | null | Shredded
  readonly currency: string
  readonly lineItems: ReadonlyArray<CheckoutLine>
  readonly subtotal: number
  readonly total: number
  readonly captureMethod: CaptureMethod
  readonly paymentIntentId: string | null
  readonly orderId: string | null
  readonly paymentStatus: "unpaid" | "paid" | "no_payment_required"
  readonly expiresAt: Date
  readonly metadata: Metadata | Shredded
  readonly createdAt: Date
  readonly updatedAt: Date
  readonly completedAt: Date | null
  readonly expiredAt: Date | null
}

export const initialCheckoutState: CheckoutState = {
  exists: false,
  checkoutId: "",
  status: "open",
  customerId: null,
  email: "",
  shippingAddress: null,
  currency: "",
  lineItems: [],
  subtotal: 0,
  total: 0,
  captureMethod: "automatic",
  paymentIntentId: null,
  orderId: null,
  paymentStatus: "unpaid",
  expiresAt: new Date(0),
  metadata: {},
  createdAt: new Date(0),
  updatedAt: new Date(0),
  completedAt: null,
  expiredAt: null
}

export const isTerminal = (status: CheckoutStatus) => status === "complete" || status === "expired"

export type NewCheckout = EventOf<typeof CheckoutCreated>["data"]

export type CheckoutCommand =
  | ({ readonly _tag: "Create" } & NewCheckout)
  | { readonly _tag: "MarkProcessing" }
  | { readonly _tag: "Reopen" }
  | { readonly _tag: "Complete"; readonly orderId: string }
  | { readonly _tag: "Expire" }

const evolve = (state: CheckoutState, event: Recorded<CheckoutEvent> | CheckoutEvent): CheckoutState => {
  const at = "recordedAt" in event ? event.recordedAt : state.updatedAt
  switch (event.type) {
    case "checkout.created": {
      const d = event.data
      return {
        ...initialCheckoutState,
        exists: true,
        checkoutId: d.checkoutId,
        customerId: d.customerId,
        email: d.email,
        shippingAddress: d.shippingAddress,
        currency: d.currency,
        lineItems: d.lineItems,
        subtotal: d.subtotal,
        total: d.total,
        captureMethod: d.captureMethod,
        paymentIntentId: d.paymentIntentId,
        expiresAt: d.expiresAt,
        metadata: d.metadata,
        createdAt: at,
        updatedAt: at
      }
    }
    case "checkout.processing":
      return { ...state, status: "processing", updatedAt: at }
    case "checkout.reopened":
      return { ...state, status: "open", updatedAt: at }
    case "checkout.completed":
      return {
        ...state,
        status: "complete",
        orderId: event.data.orderId,
        paymentStatus: event.data.paymentStatus,
        completedAt: at,
        updatedAt: at
      }
    case "checkout.expired":
      return { ...state, status: "expired", expiredAt: at, updatedAt: at }
  }
}

type Decision = Effect.Effect<ReadonlyArray<CheckoutEvent>, CheckoutError>

const notOpen = (state: CheckoutState): Decision =>
  Effect.fail(new CheckoutNotOpen({ checkoutId: state.checkoutId, status: state.status }))

const decide = (command: CheckoutCommand, state: CheckoutState): Decision => {
  if (command._tag === "Create") {
    if (state.exists) return Effect.fail(new CheckoutAlreadyExists({ checkoutId: command.checkoutId }))
    const { _tag, ...data } = command
    return Effect.succeed([CheckoutCreated.make(data)])
  }
  if (!state.exists) return Effect.fail(new CheckoutNotFound({ checkoutId: "" }))
  const ids = { checkoutId: state.checkoutId }
  switch (command._tag) {
    case "MarkProcessing":
      if (state.status === "processing") return Effect.succeed([])
      if (state.status !== "open" || state.paymentIntentId === null) return notOpen(state)
      return Effect.succeed([CheckoutProcessing.make({ ...ids, paymentIntentId: state.paymentIntentId })])
    case "Reopen":
      if (state.status === "open") return Effect.succeed([])
      if (state.status !== "processing" || state.paymentIntentId === null) return notOpen(state)
      return Effect.succeed([CheckoutReopened.make({ ...ids, paymentIntentId: state.paymentIntentId })])
    case "Complete":
      // Completing again (a double click, the process manager after the confirm route) is a no-op.
      if (state.status === "complete") return Effect.succeed([])
      if (state.status !== "open" && state.status !== "processing") return notOpen(state)
      return Effect.succeed([
        CheckoutCompleted.make({
          ...ids,
          orderId: command.orderId,
          paymentIntentId: state.paymentIntentId,
          paymentStatus: state.total === 0 ? "no_payment_required" : "paid"
        })
      ])
    case "Expire":
      if (state.status === "expired") return Effect.succeed([])
      if (state.status !== "open" && state.status !== "processing") return notOpen(state)
      return Effect.succeed([CheckoutExpired.make({ ...ids, paymentIntentId: state.paymentIntentId })])
  }
}

export const CheckoutDecider = defineDecider({
  streamType: "checkout",
  events: checkoutEventTypes,
  initialState: initialCheckoutState,
  evolve,
  decide
})
