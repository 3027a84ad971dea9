/**
 * A toy process manager used only by tests: an order placed and not paid within 24 h gets one
 * payment reminder; an order paid gets a receipt, and its reminder is cancelled.
 */
import { Schema } from "effect"
import { defineEvent } from "../../src/eventstore/EventType.js"
import { defineProcessManager, outputId, TIMEOUT } from "../../src/kernel/ProcessManager.js"

export const ToyOrderPlaced = defineEvent("toy_order.placed", {
  schema: Schema.Struct({ orderId: Schema.String, total: Schema.Int })
})
export const ToyOrderPaid = defineEvent("toy_order.paid", {
  schema: Schema.Struct({ orderId: Schema.String })
})

/** The ports it calls, by command kind. */
export interface ToyCommands {
  readonly "reminders.send": { readonly orderId: string; readonly total: number }
  readonly "receipts.send": { readonly orderId: string; readonly total: number }
}

export const REMINDER_DELAY_MS = 24 * 60 * 60 * 1000

export type ToyOrderState =
  | { readonly status: "new" }
  | {
      readonly status: "awaiting_payment" | "reminded" | "paid"
      readonly orderId: string
      readonly total: number
      readonly reminderId: string
    }

/** One per name, so tests sharing a database keep their subscriptions and streams apart. */
export const makeOrderReminder = (name = "toy-order-reminder") =>
  defineProcessManager<ToyCommands>()({
    name,
    events: [ToyOrderPlaced, ToyOrderPaid],
    timeout: Schema.Struct({ orderId: Schema.String }),
    correlate: (input) => `order-${input.data.orderId}`,
    initialState: { status: "new" } as ToyOrderState,
    evolve: (state, input): ToyOrderState => {
      switch (input.type) {
        case "toy_order.placed":
          return state.status !== "new"
            ? state
            : {
                status: "awaiting_payment",
                orderId: input.data.orderId,
                total: input.data.total,
                reminderId: outputId(input, "reminder")
              }
        case "toy_order.paid":
          return state.status === "new" ? state : { ...state, status: "paid" }
        case TIMEOUT:
          return state.status === "awaiting_payment" ? { ...state, status: "reminded" } : state
      }
    },
    decide: (input, state) => {
      switch (input.type) {
        case "toy_order.placed":
          if (state.status !== "new") return []
          return [
            {
              kind: TIMEOUT,
              id: outputId(input, "reminder"),
              dueAt: new Date(input.occurredAt.getTime() + REMINDER_DELAY_MS),
              payload: { orderId: input.data.orderId }
            }
          ]
        case "toy_order.paid":
          if (state.status !== "awaiting_payment" && state.status !== "reminded") return []
          return [
            ...(state.status === "awaiting_payment"
              ? [{ kind: "cancel-timeout" as const, id: state.reminderId }]
              : []),
            {
              kind: "receipts.send",
              id: outputId(input, "receipt"),
              input: { orderId: state.orderId, total: state.total }
            }
          ]
        case TIMEOUT:
          if (state.status !== "awaiting_payment") return []
          return [
            {
              kind: "reminders.send",
              id: outputId(input, "reminder"),
              input: { orderId: state.orderId, total: state.total }
            }
          ]
      }
    }
  })

export const OrderReminder = makeOrderReminder()
