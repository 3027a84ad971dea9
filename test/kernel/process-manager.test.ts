/**
 * The process-manager kernel, pure: decide/evolve over an instance's inputs, derived output ids, and
 * the once-only bookkeeping (a handled input is a duplicate, a cancelled or fired timeout is stale).
 */
import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"
import { defineEvent, Personal } from "../../src/eventstore/EventType.js"
import {
  applyInput,
  defineProcessManager,
  newInstance,
  outputId,
  step,
  TIMEOUT
} from "../../src/kernel/ProcessManager.js"
import { OrderReminder, REMINDER_DELAY_MS, ToyOrderPaid, ToyOrderPlaced } from "../support/orderReminder.js"
import { inputOf, instanceAfter, spec, timedOut } from "../support/processManager.js"

const at = new Date("2030-01-01T00:00:00Z")
const placed = inputOf(ToyOrderPlaced, { orderId: "o1", total: 4200 }, { id: "evt-placed", occurredAt: at })
const paid = inputOf(ToyOrderPaid, { orderId: "o1" }, { id: "evt-paid" })
const reminder = {
  kind: TIMEOUT,
  id: outputId(placed, "reminder"),
  dueAt: new Date(at.getTime() + REMINDER_DELAY_MS),
  payload: { orderId: "o1" }
} as const
const reminderDue = timedOut(reminder)

describe("process manager (pure)", () => {
  it("an order placed schedules its reminder 24 h later, with an id derived from the event", () => {
    spec(OrderReminder).given([]).when(placed).thenEmits([reminder])
    // Derived, not random: the same event always asks for the same timeout.
    expect(outputId(placed, "reminder")).toBe(outputId({ ...placed }, "reminder"))
    expect(outputId(placed, "reminder")).not.toBe(outputId(paid, "reminder"))
    expect(outputId(placed, "reminder")).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-/)
  })

  it("paid before the reminder: the reminder is cancelled and a receipt is sent", () => {
    spec(OrderReminder)
      .given([placed])
      .when(paid)
      .thenEmits([
        { kind: "cancel-timeout", id: reminder.id },
        { kind: "receipts.send", id: outputId(paid, "receipt"), input: { orderId: "o1", total: 4200 } }
      ])
    expect(spec(OrderReminder).given([placed]).when(paid).state()).toMatchObject({ status: "paid" })
  })

  it("not paid in time: the timeout comes back as an input and sends one reminder", () => {
    spec(OrderReminder)
      .given([placed])
      .when(reminderDue)
      .thenEmits([
        {
          kind: "reminders.send",
          id: outputId(reminderDue, "reminder"),
          input: { orderId: "o1", total: 4200 }
        }
      ])
    // Paid after the reminder: a receipt, nothing left to cancel.
    spec(OrderReminder)
      .given([placed, reminderDue])
      .when(paid)
      .thenEmits([
        { kind: "receipts.send", id: outputId(paid, "receipt"), input: { orderId: "o1", total: 4200 } }
      ])
  })

  it("an input handled before is a duplicate: nothing is decided twice", () => {
    spec(OrderReminder).given([placed]).when(placed).thenIgnores("Duplicate")
    spec(OrderReminder).given([placed, paid]).when(paid).thenIgnores("Duplicate")
    // A second, different "placed" event for the same order is decided, and does nothing.
    spec(OrderReminder)
      .given([placed])
      .when(inputOf(ToyOrderPlaced, { orderId: "o1", total: 1 }))
      .thenEmitsNothing()
  })

  it("a timeout that was cancelled, already fired or never scheduled is stale", () => {
    spec(OrderReminder).given([placed, paid]).when(reminderDue).thenIgnores("Stale")
    spec(OrderReminder).given([placed, reminderDue]).when(reminderDue).thenIgnores("Duplicate")
    spec(OrderReminder)
      .given([placed])
      .when(timedOut({ ...reminder, id: "not-scheduled" }))
      .thenIgnores("Stale")
  })

  it("an instance reloaded from its recorded inputs and outputs equals the one decided live", () => {
    // What the runner's load does: evolve plus the recorded outputs, without deciding again.
    let replayed = newInstance(OrderReminder)
    for (const input of [placed, paid]) {
      const decided = step(OrderReminder, replayed, input)
      if (decided._tag !== "Decided") throw new Error(decided._tag)
      replayed = applyInput(
        OrderReminder,
        replayed,
        input,
        decided.outputs.map((o) => ({ kind: o.kind, id: o.id }))
      )
    }
    const live = instanceAfter(OrderReminder, [placed, paid])
    expect(replayed).toEqual(live)
    expect([...live.handled]).toEqual(["evt-placed", "evt-paid"])
    expect(live.timeouts.size).toBe(0)
    expect(instanceAfter(OrderReminder, [placed]).timeouts).toEqual(new Set([reminder.id]))
  })

  it("a stateless process manager decides every input on its initial state", () => {
    const Pinged = defineEvent("toy_ping.sent", { schema: Schema.Struct({ n: Schema.Number }) })
    const echo = defineProcessManager<{ readonly "echo.send": { readonly n: number } }>()({
      name: "toy-echo",
      events: [Pinged],
      persistence: "none",
      correlate: (input) => input.id,
      initialState: 0,
      evolve: (count) => count + 1,
      decide: (input, count) =>
        input.type === TIMEOUT
          ? []
          : [{ kind: "echo.send", id: outputId(input, "echo"), input: { n: input.data.n + count } }]
    })
    const ping = inputOf(Pinged, { n: 1 }, { id: "p1" })
    spec(echo)
      .given([])
      .when(ping)
      .thenEmits([{ kind: "echo.send", id: outputId(ping, "echo"), input: { n: 1 } }])
  })

  it("refuses to keep personal data in an instance's stream", () => {
    const Registered = defineEvent("toy_member.registered", {
      schema: Schema.Struct({ memberId: Schema.String, email: Personal(Schema.String) }),
      subject: (d) => d.memberId
    })
    const define = (persistence: "stream" | "none") =>
      defineProcessManager<{ readonly "welcome.send": { readonly memberId: string } }>()({
        name: "toy-welcome",
        events: [Registered],
        persistence,
        correlate: (input) => input.data.memberId,
        initialState: null,
        decide: () => []
      })
    expect(() => define("stream")).toThrow(/personal data/)
    expect(define("none").persistence).toBe("none")
  })
})
