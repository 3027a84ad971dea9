/**
 * The customer aggregate (a buyer, distinct from admin users): contact details, addresses, tags,
 * metadata, the `active` flag and erasure. Pure: tested without a database (test/customers). Every
 * change publishes `customer.updated` with the customer snapshot (spec §2.4, §6.1).
 */
import { Data, Effect } from "effect"
import { revealOr, type Shredded } from "../eventstore/EventType.js"
import { defineDecider, type Recorded } from "../kernel/Decider.js"
import { applyMetadataPatch, type Metadata, type MetadataPatch, metadataProblem } from "../kernel/Metadata.js"
import {
  CustomerAddressAdded,
  CustomerAddressRemoved,
  CustomerCreated,
  CustomerDeactivated,
  CustomerErased,
  type CustomerEvent,
  CustomerReactivated,
  CustomerTagged,
  CustomerUpdated,
  customerEventTypes
} from "./events.js"

export const customerStream = (customerId: string) => `customer-${customerId}`

/** Limits of one customer record (documented in the OpenAPI descriptions and the README). */
export const LIMITS = {
  tags: 100,
  tagLength: 64,
  addresses: 50
} as const

// --- Domain errors (the use cases map them to HTTP) -------------------------------------------------

export class CustomerAlreadyExists extends Data.TaggedError("CustomerAlreadyExists")<{
  readonly customerId: string
}> {}
export class CustomerNotFound extends Data.TaggedError("CustomerNotFound")<{ readonly customerId: string }> {}
export class AddressNotFound extends Data.TaggedError("AddressNotFound")<{ readonly addressId: string }> {}
/** A limit of `LIMITS` would be exceeded; `field` names the request field at fault. */
export class CustomerLimitExceeded extends Data.TaggedError("CustomerLimitExceeded")<{
  readonly field: "tags" | "metadata" | "addresses"
  readonly message: string
}> {}

// --- State ------------------------------------------------------------------------------------------

export interface Address extends NewAddress {
  readonly addressId: string
  readonly isDefault: boolean
}

export interface CustomerState {
  readonly status: "none" | "active" | "erased"
  readonly customerId: string
  readonly email: string | null
  readonly firstName: string | null
  readonly lastName: string | null
  readonly phone: string | null
  readonly tags: ReadonlyArray<string>
  readonly metadata: Metadata
  readonly addresses: ReadonlyArray<Address>
  readonly userId: string | undefined
  /** The billing test clock the customer lives on, if any. */
  readonly testClockId: string | null
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
  addresses: [],
  userId: undefined,
  testClockId: null,
  active: true,
  createdAt: new Date(0),
  updatedAt: new Date(0)
}

// --- Commands ---------------------------------------------------------------------------------------

export interface NewAddress {
  readonly label: string | null
  readonly line1: string
  readonly city: string
  readonly state: string | null
  readonly postalCode: string | null
  readonly country: string
}

export interface CustomerChanges {
  readonly email?: string
  readonly firstName?: string
  readonly lastName?: string
  readonly phone?: string | null
  readonly metadata?: MetadataPatch
  /** The whole new list (POST /user/:id/tag adds instead). */
  readonly tags?: ReadonlyArray<string>
  readonly active?: boolean
}

export type CustomerCommand =
  | {
      readonly _tag: "Create"
      readonly customerId: string
      readonly email: string
      readonly firstName: string
      readonly lastName: string
      readonly phone: string | null
      readonly tags: ReadonlyArray<string>
      readonly metadata: Metadata
      readonly userId?: string
      readonly testClockId?: string
    }
  | { readonly _tag: "Update"; readonly changes: CustomerChanges }
  | {
      readonly _tag: "AddAddress"
      readonly addressId: string
      readonly address: NewAddress
      readonly makeDefault: boolean
    }
  | { readonly _tag: "RemoveAddress"; readonly addressId: string }
  | { readonly _tag: "Tag"; readonly tags: ReadonlyArray<string> }
  | { readonly _tag: "Erase" }

export type CustomerError = CustomerAlreadyExists | CustomerNotFound | AddressNotFound | CustomerLimitExceeded

/** Tags without duplicates, first spelling kept, in the order given. */
export const uniqueTags = (tags: ReadonlyArray<string>): ReadonlyArray<string> => [...new Set(tags)]

const sameJson = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b)

const tooManyTags = () =>
  new CustomerLimitExceeded({ field: "tags", message: `a customer can have at most ${LIMITS.tags} tags` })

const reveal = <A>(value: A | Shredded) => revealOr(value, null)

const evolve = (state: CustomerState, event: Recorded<CustomerEvent> | CustomerEvent): CustomerState => {
  // Events being decided have no `recordedAt` yet; the runner folds recorded ones.
  const at = "recordedAt" in event ? event.recordedAt : state.updatedAt
  switch (event.type) {
    case "customer.created":
      return {
        ...initial,
        status: "active",
        customerId: event.data.customerId,
        email: reveal(event.data.email),
        firstName: reveal(event.data.firstName),
        lastName: reveal(event.data.lastName),
        phone: reveal(event.data.phone),
        tags: event.data.tags,
        metadata: revealOr(event.data.metadata, {}),
        userId: event.data.userId,
        testClockId: event.data.testClockId ?? null,
        createdAt: at,
        updatedAt: at
      }
    case "customer.updated": {
      const d = event.data
      return {
        ...state,
        ...(d.email === undefined ? {} : { email: reveal(d.email) }),
        ...(d.firstName === undefined ? {} : { firstName: reveal(d.firstName) }),
        ...(d.lastName === undefined ? {} : { lastName: reveal(d.lastName) }),
        ...(d.phone === undefined ? {} : { phone: reveal(d.phone) }),
        ...(d.metadata === undefined ? {} : { metadata: revealOr(d.metadata, {}) }),
        ...(d.tags === undefined ? {} : { tags: d.tags }),
        updatedAt: at
      }
    }
    case "customer.address_added": {
      const d = event.data
      const address: Address = {
        addressId: d.addressId,
        label: reveal(d.label),
        line1: revealOr(d.line1, ""),
        city: revealOr(d.city, ""),
        state: reveal(d.state),
        postalCode: reveal(d.postalCode),
        country: revealOr(d.country, ""),
        isDefault: d.isDefault
      }
      const others = d.isDefault ? state.addresses.map((a) => ({ ...a, isDefault: false })) : state.addresses
      return { ...state, addresses: [...others, address], updatedAt: at }
    }
    case "customer.address_removed":
      return {
        ...state,
        addresses: state.addresses
          .filter((a) => a.addressId !== event.data.addressId)
          .map((a) => ({ ...a, isDefault: a.addressId === event.data.defaultAddressId })),
        updatedAt: at
      }
    case "customer.tagged":
      return { ...state, tags: uniqueTags([...state.tags, ...event.data.tags]), updatedAt: at }
    case "customer.deactivated":
      return { ...state, active: false, updatedAt: at }
    case "customer.reactivated":
      return { ...state, active: true, updatedAt: at }
    case "customer.erased":
      return { ...initial, status: "erased", customerId: state.customerId, userId: state.userId }
  }
}

const update = (
  state: CustomerState,
  changes: CustomerChanges
): Effect.Effect<ReadonlyArray<CustomerEvent>, CustomerLimitExceeded> => {
  const changed: {
    email?: string
    firstName?: string
    lastName?: string
    phone?: string | null
    metadata?: Metadata
    tags?: ReadonlyArray<string>
  } = {}
  if (changes.email !== undefined && changes.email !== state.email) changed.email = changes.email
  if (changes.firstName !== undefined && changes.firstName !== state.firstName)
    changed.firstName = changes.firstName
  if (changes.lastName !== undefined && changes.lastName !== state.lastName)
    changed.lastName = changes.lastName
  if (changes.phone !== undefined && changes.phone !== state.phone) changed.phone = changes.phone
  if (changes.metadata !== undefined) {
    const metadata = applyMetadataPatch(state.metadata, changes.metadata)
    const problem = metadataProblem(metadata)
    if (problem) return Effect.fail(new CustomerLimitExceeded({ field: "metadata", message: problem }))
    if (!sameJson(metadata, state.metadata)) changed.metadata = metadata
  }
  if (changes.tags !== undefined) {
    const tags = uniqueTags(changes.tags)
    if (tags.length > LIMITS.tags) return Effect.fail(tooManyTags())
    if (!sameJson(tags, state.tags)) changed.tags = tags
  }
  const events: Array<CustomerEvent> = []
  if (Object.keys(changed).length > 0)
    events.push(CustomerUpdated.make({ customerId: state.customerId, ...changed }))
  if (changes.active === false && state.active)
    events.push(CustomerDeactivated.make({ customerId: state.customerId }))
  if (changes.active === true && !state.active)
    events.push(CustomerReactivated.make({ customerId: state.customerId }))
  return Effect.succeed(events)
}

const decide = (
  command: CustomerCommand,
  state: CustomerState
): Effect.Effect<ReadonlyArray<CustomerEvent>, CustomerError> => {
  if (command._tag === "Create") {
    if (state.status !== "none")
      return Effect.fail(new CustomerAlreadyExists({ customerId: command.customerId }))
    // As in an update, a key set to null is no key.
    const metadata = applyMetadataPatch({}, command.metadata)
    const problem = metadataProblem(metadata)
    if (problem) return Effect.fail(new CustomerLimitExceeded({ field: "metadata", message: problem }))
    const tags = uniqueTags(command.tags)
    if (tags.length > LIMITS.tags) return Effect.fail(tooManyTags())
    return Effect.succeed([
      CustomerCreated.make({
        customerId: command.customerId,
        email: command.email,
        firstName: command.firstName,
        lastName: command.lastName,
        phone: command.phone,
        tags,
        metadata,
        ...(command.userId === undefined ? {} : { userId: command.userId }),
        ...(command.testClockId === undefined ? {} : { testClockId: command.testClockId })
      })
    ])
  }
  if (state.status !== "active") return Effect.fail(new CustomerNotFound({ customerId: state.customerId }))
  const customerId = state.customerId
  switch (command._tag) {
    case "Update":
      return update(state, command.changes)
    case "AddAddress": {
      if (state.addresses.length >= LIMITS.addresses) {
        return Effect.fail(
          new CustomerLimitExceeded({
            field: "addresses",
            message: `a customer can have at most ${LIMITS.addresses} addresses: remove one first`
          })
        )
      }
      return Effect.succeed([
        CustomerAddressAdded.make({
          customerId,
          addressId: command.addressId,
          ...command.address,
          isDefault: command.makeDefault || state.addresses.length === 0
        })
      ])
    }
    case "RemoveAddress": {
      const removed = state.addresses.find((a) => a.addressId === command.addressId)
      if (!removed) return Effect.fail(new AddressNotFound({ addressId: command.addressId }))
      const rest = state.addresses.filter((a) => a.addressId !== command.addressId)
      // The default goes: the oldest remaining address takes its place.
      const defaultAddressId =
        (removed.isDefault ? rest[0] : rest.find((a) => a.isDefault))?.addressId ?? null
      return Effect.succeed([
        CustomerAddressRemoved.make({ customerId, addressId: command.addressId, defaultAddressId })
      ])
    }
    case "Tag": {
      const added = uniqueTags(command.tags).filter((t) => !state.tags.includes(t))
      if (added.length === 0) return Effect.succeed([])
      if (state.tags.length + added.length > LIMITS.tags) return Effect.fail(tooManyTags())
      return Effect.succeed([CustomerTagged.make({ customerId, tags: added })])
    }
    case "Erase":
      return Effect.succeed([
        CustomerErased.make({ customerId, ...(state.userId === undefined ? {} : { userId: state.userId }) })
      ])
  }
}

/** The public snapshot of a customer (spec §2.4), as webhooks and notifications receive it. */
export const customerSnapshot = (state: CustomerState) => ({
  id: state.customerId,
  email: state.email,
  firstName: state.firstName,
  lastName: state.lastName,
  phone: state.phone,
  metadata: state.metadata,
  addresses: state.addresses.map((a) => ({
    id: a.addressId,
    label: a.label,
    line1: a.line1,
    city: a.city,
    state: a.state,
    postalCode: a.postalCode,
    country: a.country,
    isDefault: a.isDefault
  })),
  // Order totals live in the customers read model, fed by the orders and payments contexts.
  orderCount: 0,
  totalSpent: 0,
  tags: state.tags,
  active: state.active,
  hasAccount: state.userId !== undefined,
  testClockId: state.testClockId,
  createdAt: state.createdAt.toISOString(),
  updatedAt: state.updatedAt.toISOString()
})

export const CustomerDecider = defineDecider({
  streamType: "customer",
  events: customerEventTypes,
  initialState: initial,
  // No snapshots: they would keep personal fields in clear beyond crypto-shredding (a customer's
  // stream grows only with staff or shopper edits).
  evolve,
  decide,
  publicEvents: (event, state) => {
    const customerId = event.data.customerId
    switch (event.type) {
      case "customer.created":
        return [{ type: "customer.created", data: customerSnapshot(state), subjectId: customerId }]
      case "customer.erased":
        // No personal data: subscribers learn the id is gone (Stripe's `customer.deleted`).
        return [{ type: "customer.deleted", data: { id: customerId, deleted: true } }]
      default:
        return [{ type: "customer.updated", data: customerSnapshot(state), subjectId: customerId }]
    }
  }
})
