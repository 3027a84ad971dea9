/**
 * The customer aggregate (a buyer, distinct from admin users). Registration creates one linked to
 * its user; the public `customer.*` events carry the customer snapshot (spec §2.4).
 */
import { Data, Effect } from "effect"
import { revealOr } from "../eventstore/EventType.js"
import { defineDecider } from "../kernel/Decider.js"
import { CustomerCreated, type CustomerEvent } from "./events.js"

export const customerStream = (customerId: string) => `customer-${customerId}`

export class CustomerAlreadyExists extends Data.TaggedError("CustomerAlreadyExists")<{
  readonly customerId: string
}> {}

export interface CustomerState {
  readonly status: "none" | "active"
  readonly customerId: string
  readonly email: string | null
  readonly firstName: string | null
  readonly lastName: string | null
  readonly phone: string | null
  readonly tags: ReadonlyArray<string>
  readonly metadata: Readonly<Record<string, unknown>>
  readonly userId: string | undefined
  readonly active: boolean
  readonly createdAt: Date
  readonly updatedAt: Date
}

const initial: CustomerState = {
  status: "none",
  customerId: "",
  email: null,
  firstName: null,
  lastName: null,
  phone: null,
  tags: [],
  metadata: {},
  userId: undefined,
  active: true,
  createdAt: new Date(0),
  updatedAt: new Date(0)
}

export type CustomerCommand = {
  readonly _tag: "Create"
  readonly customerId: string
  readonly email: string
  readonly firstName: string
  readonly lastName: string
  readonly phone: string | null
  readonly tags: ReadonlyArray<string>
  readonly metadata: Readonly<Record<string, unknown>>
  readonly userId?: string
}

/** The public snapshot of a customer (spec §2.4), as webhooks and notifications receive it. */
export const customerSnapshot = (state: CustomerState) => ({
  id: state.customerId,
  email: state.email,
  firstName: state.firstName,
  lastName: state.lastName,
  phone: state.phone,
  metadata: state.metadata,
  addresses: [],
  orderCount: 0,
  totalSpent: 0,
  tags: state.tags,
  active: state.active,
  createdAt: state.createdAt.toISOString(),
  updatedAt: state.updatedAt.toISOString()
})

export const CustomerDecider = defineDecider({
  streamType: "customer",
  events: [CustomerCreated],
  initialState: initial,
  evolve: (_state: CustomerState, event: CustomerEvent): CustomerState => {
    const at = "recordedAt" in event && event.recordedAt instanceof Date ? event.recordedAt : new Date(0)
    return {
      status: "active",
      customerId: event.data.customerId,
      email: revealOr(event.data.email, null),
      firstName: revealOr(event.data.firstName, null),
      lastName: revealOr(event.data.lastName, null),
      phone: revealOr(event.data.phone, null),
      tags: event.data.tags,
      metadata: revealOr(event.data.metadata, {}),
      userId: event.data.userId,
      active: true,
      createdAt: at,
      updatedAt: at
    }
  },
  decide: (command: CustomerCommand, state: CustomerState) =>
    state.status !== "none"
      ? Effect.fail(new CustomerAlreadyExists({ customerId: command.customerId }))
      : Effect.succeed([
          CustomerCreated.make({
            customerId: command.customerId,
            email: command.email,
            firstName: command.firstName,
            lastName: command.lastName,
            phone: command.phone,
            tags: command.tags,
            metadata: command.metadata,
            ...(command.userId === undefined ? {} : { userId: command.userId })
          })
        ]),
  publicEvents: (event, state) => [
    { type: "customer.created", data: customerSnapshot(state), subjectId: event.data.customerId }
  ]
})
