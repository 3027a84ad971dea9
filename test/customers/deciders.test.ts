/**
 * The customer aggregate as a pure decider (no database): creation, partial updates with metadata
 * merge patches, addresses and the default-address rules, tags, deactivation, erasure, the public
 * events and their snapshot, shredded personal fields, and a property over random command sequences.
 */
import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import * as fc from "fast-check"
import {
  type Address,
  type CustomerCommand,
  CustomerDecider,
  type CustomerState,
  customerSnapshot,
  customerStream,
  LIMITS,
  type NewAddress,
  uniqueTags
} from "../../src/customers/decider.js"
import {
  CustomerAddressAdded,
  CustomerAddressRemoved,
  CustomerCreated,
  CustomerDeactivated,
  CustomerErased,
  type CustomerEvent,
  CustomerReactivated,
  CustomerTagged,
  CustomerUpdated
} from "../../src/customers/events.js"
import type { EventMetadata } from "../../src/eventstore/EventStore.js"
import { shredded } from "../../src/eventstore/EventType.js"
import { fold, type Recorded } from "../../src/kernel/Decider.js"
import {
  applyMetadataPatch,
  METADATA_LIMITS,
  type Metadata,
  metadataProblem
} from "../../src/kernel/Metadata.js"
import { deciderSpec } from "../support/decider.js"

// --- Helpers ---------------------------------------------------------------------------------------

const customer = deciderSpec(CustomerDecider)
const { run } = customer

const at = (iso: string) => new Date(iso)
const metadata: EventMetadata = {}
let position = 0

/** A decided event as the store hands it back (the runner folds recorded events). */
const recorded = <E extends CustomerEvent>(event: E, recordedAt: Date, streamVersion = 1): Recorded<E> => ({
  ...event,
  globalPosition: ++position,
  transactionId: "1234",
  streamId: customerStream(customerId),
  streamVersion,
  eventId: `0190f6c0-0000-7000-8000-${String(position).padStart(12, "0")}`,
  schemaVersion: 1,
  metadata,
  recordedAt
})

const customerId = "cus_01jd4x8m6ffq2b3n5r7t9v1w3b"
const userId = "usr_01jd4x8m6ffq2b3n5r7t9v1w3a"

const create = {
  _tag: "Create",
  customerId,
  email: "ann@example.com",
  firstName: "Ann",
  lastName: "Lee",
  phone: "+33 1 23 45 67 89",
  tags: ["vip", "newsletter", "vip"],
  metadata: { source: "import", tier: 2 }
} as const satisfies CustomerCommand

const created: CustomerState = run(CustomerDecider.initialState, create)
const linked: CustomerState = run(CustomerDecider.initialState, { ...create, userId })

const newAddress = (n: number): NewAddress => ({
  label: n % 2 === 0 ? `Home ${n}` : null,
  line1: `${n} Rue de Rivoli`,
  city: "Paris",
  state: null,
  postalCode: "75001",
  country: "FR"
})

const addAddress = (addressId: string, makeDefault = false, n = 1): CustomerCommand => ({
  _tag: "AddAddress",
  addressId,
  address: newAddress(n),
  makeDefault
})

const update = (changes: Extract<CustomerCommand, { _tag: "Update" }>["changes"]): CustomerCommand => ({
  _tag: "Update",
  changes
})

const defaults = (state: CustomerState) => state.addresses.filter((a) => a.isDefault).map((a) => a.addressId)
const ids = (state: CustomerState) => state.addresses.map((a) => a.addressId)
const tagsN = (n: number, prefix = "t") => Array.from({ length: n }, (_, i) => `${prefix}${i}`)

/** A metadata object with `n` keys `k0`… */
const keys = (n: number): Record<string, unknown> => Object.fromEntries(tagsN(n, "k").map((k) => [k, "v"]))

// --- Create ----------------------------------------------------------------------------------------

describe("CustomerDecider: Create", () => {
  it("creates a customer with its tags deduplicated (first occurrence kept)", () => {
    const fields = {
      customerId,
      email: "ann@example.com",
      firstName: "Ann",
      lastName: "Lee",
      phone: "+33 1 23 45 67 89",
      tags: ["vip", "newsletter"],
      metadata: { source: "import", tier: 2 }
    }
    const { events, state } = customer.when(create).thenEvents([CustomerCreated.make(fields)])
    // Staff-created: no userId key at all.
    expect(events[0]?.data).not.toHaveProperty("userId")
    expect(state).toEqual({
      status: "active",
      ...fields,
      addresses: [],
      userId: undefined,
      testClockId: null,
      active: true,
      // Decided events carry no recordedAt: the times stay those of the state folded into.
      createdAt: new Date(0),
      updatedAt: new Date(0)
    })
  })

  it("a registered shopper's record carries the userId", () => {
    const [event] = customer.when({ ...create, userId }).events
    expect(event?.data).toMatchObject({ customerId, userId })
    expect(linked.userId).toBe(userId)
    expect(linked.phone).toBe("+33 1 23 45 67 89")
  })

  it("a null phone and empty tags and metadata are fine", () => {
    const { state } = customer.when({
      ...create,
      phone: null,
      tags: [],
      metadata: {}
    })
    expect(state).toMatchObject({ status: "active", phone: null, tags: [], metadata: {} })
  })

  it("creating twice, or after erasure, is CustomerAlreadyExists", () => {
    customer.givenState(created).when(create).thenFails({ _tag: "CustomerAlreadyExists", customerId })
    const erased = run(created, { _tag: "Erase" })
    customer.givenState(erased).when(create).thenFails({ _tag: "CustomerAlreadyExists", customerId })
  })

  it("more than LIMITS.tags distinct tags is CustomerLimitExceeded on tags", () => {
    const error = customer
      .when({ ...create, tags: tagsN(LIMITS.tags + 1) })
      .thenFails({ _tag: "CustomerLimitExceeded", field: "tags" })
    expect(error.message).toContain(String(LIMITS.tags))
    // Exactly the limit is fine, and duplicates do not count.
    const atLimit = customer.when({ ...create, tags: [...tagsN(LIMITS.tags), ...tagsN(LIMITS.tags)] }).events
    expect(atLimit[0]?.data).toMatchObject({ tags: tagsN(LIMITS.tags) })
  })

  it("metadata over the limits is CustomerLimitExceeded on metadata", () => {
    for (const bad of [
      keys(METADATA_LIMITS.keys + 1),
      { ["k".repeat(METADATA_LIMITS.keyLength + 1)]: 1 },
      { "": 1 },
      { big: "x".repeat(METADATA_LIMITS.bytes) }
    ]) {
      const error = customer
        .when({ ...create, metadata: bad })
        .thenFails({ _tag: "CustomerLimitExceeded", field: "metadata" })
      expect(error.message).toBe(metadataProblem(bad))
    }
    const ok = customer.when({ ...create, metadata: keys(METADATA_LIMITS.keys) }).events
    expect(ok.map((e) => e.type)).toEqual(["customer.created"])
  })

  it("every other command on an unknown customer is CustomerNotFound", () => {
    const commands: ReadonlyArray<CustomerCommand> = [
      update({ firstName: "Bob" }),
      addAddress("adr_1"),
      { _tag: "RemoveAddress", addressId: "adr_1" },
      { _tag: "Tag", tags: ["x"] },
      { _tag: "Erase" }
    ]
    for (const command of commands) {
      const error = customer.when(command).error
      expect(error._tag, command._tag).toBe("CustomerNotFound")
    }
  })
})

// --- Update ----------------------------------------------------------------------------------------

describe("CustomerDecider: Update", () => {
  it("carries only the fields that changed", () => {
    const { events, state } = customer
      .givenState(created)
      .when(update({ email: "ann@example.com", firstName: "Anne", lastName: "Lee", phone: "+1 555 0100" }))
    expect(events).toEqual([CustomerUpdated.make({ customerId, firstName: "Anne", phone: "+1 555 0100" })])
    expect(state).toEqual({ ...created, firstName: "Anne", phone: "+1 555 0100" })
  })

  it("changes each contact field", () => {
    const { events, state } = customer
      .givenState(created)
      .when(update({ email: "anne@example.org", firstName: "Anne", lastName: "Li" }))
    expect(events).toEqual([
      CustomerUpdated.make({ customerId, email: "anne@example.org", firstName: "Anne", lastName: "Li" })
    ])
    expect(state).toMatchObject({ email: "anne@example.org", firstName: "Anne", lastName: "Li" })
  })

  it("a null phone clears it; clearing it again changes nothing", () => {
    const { state } = customer
      .givenState(created)
      .when(update({ phone: null }))
      .thenEvents([CustomerUpdated.make({ customerId, phone: null })])
    expect(state.phone).toBeNull()
    customer
      .givenState(state)
      .when(update({ phone: null }))
      .thenNothing()
  })

  it("nothing changed decides no event", () => {
    for (const changes of [
      {},
      { email: "ann@example.com", firstName: "Ann", lastName: "Lee", phone: "+33 1 23 45 67 89" },
      { tags: ["vip", "newsletter"] },
      { tags: ["vip", "newsletter", "vip"] },
      { metadata: {} },
      { metadata: { source: "import" } },
      { metadata: { absent: null } },
      { active: true }
    ]) {
      expect(customer.givenState(created).when(update(changes)).events, JSON.stringify(changes)).toEqual([])
    }
    const empty = run(created, update({ metadata: null }))
    customer
      .givenState(empty)
      .when(update({ metadata: null }))
      .thenNothing()
  })

  it("metadata is merged: keys added and overwritten, a null key removed, order kept", () => {
    const { events, state } = customer
      .givenState(created)
      .when(update({ metadata: { tier: 3, source: null, note: { vip: true }, gone: null } }))
    expect(events).toEqual([CustomerUpdated.make({ customerId, metadata: { tier: 3, note: { vip: true } } })])
    expect(state.metadata).toEqual({ tier: 3, note: { vip: true } })
    expect(Object.keys(state.metadata)).toEqual(["tier", "note"])
    // Falsy values other than null are values, not removals.
    const falsy = run(state, update({ metadata: { zero: 0, empty: "", no: false } }))
    expect(falsy.metadata).toEqual({ tier: 3, note: { vip: true }, zero: 0, empty: "", no: false })
  })

  it("a null metadata patch clears it", () => {
    const { state } = customer
      .givenState(created)
      .when(update({ metadata: null }))
      .thenEvents([CustomerUpdated.make({ customerId, metadata: {} })])
    expect(state.metadata).toEqual({})
  })

  it("the metadata limits apply to the merged result", () => {
    const full = run(created, update({ metadata: null }))
    const fifty = run(full, update({ metadata: keys(METADATA_LIMITS.keys) }))
    expect(Object.keys(fifty.metadata)).toHaveLength(METADATA_LIMITS.keys)

    const oneMore = customer
      .givenState(fifty)
      .when(update({ metadata: { extra: 1 } }))
      .thenFails({ _tag: "CustomerLimitExceeded", field: "metadata" })
    expect(oneMore.message).toContain(`${METADATA_LIMITS.keys} keys`)

    // Removing one key makes room for another in the same patch.
    const swapped = customer.givenState(fifty).when(update({ metadata: { k0: null, extra: 1 } })).events
    expect(swapped.map((e) => e.type)).toEqual(["customer.updated"])

    // Overwriting existing keys adds none.
    const overwrite = customer.givenState(fifty).when(update({ metadata: { k0: "w", k49: "w" } })).events
    expect(overwrite.map((e) => e.type)).toEqual(["customer.updated"])

    customer
      .givenState(full)
      .when(update({ metadata: { ["k".repeat(METADATA_LIMITS.keyLength + 1)]: 1 } }))
      .thenFails({ _tag: "CustomerLimitExceeded", field: "metadata" })

    // 8 KiB of JSON across two patches: each alone fits, the merge does not.
    const half = "x".repeat(METADATA_LIMITS.bytes / 2)
    const first = run(full, update({ metadata: { a: half } }))
    const tooBig = customer
      .givenState(first)
      .when(update({ metadata: { b: half } }))
      .thenFails({ _tag: "CustomerLimitExceeded", field: "metadata" })
    expect(tooBig.message).toContain(`${METADATA_LIMITS.bytes} bytes`)
  })

  it("a failing part of an update decides nothing at all", () => {
    customer
      .givenState(created)
      .when(update({ firstName: "Anne", active: false, metadata: keys(METADATA_LIMITS.keys + 1) }))
      .thenFails("CustomerLimitExceeded")
    customer
      .givenState(created)
      .when(update({ firstName: "Anne", tags: tagsN(LIMITS.tags + 1) }))
      .thenFails({ _tag: "CustomerLimitExceeded", field: "tags" })
  })

  it("tags replace the list (deduplicated); a new order is a change; [] clears", () => {
    const replaced = customer.givenState(created).when(update({ tags: ["b2b", "vip", "b2b"] }))
    expect(replaced.events).toEqual([CustomerUpdated.make({ customerId, tags: ["b2b", "vip"] })])
    expect(replaced.state.tags).toEqual(["b2b", "vip"])

    const reordered = customer.givenState(created).when(update({ tags: ["newsletter", "vip"] }))
    expect(reordered.events).toEqual([CustomerUpdated.make({ customerId, tags: ["newsletter", "vip"] })])

    const cleared = customer.givenState(created).when(update({ tags: [] }))
    expect(cleared.events).toEqual([CustomerUpdated.make({ customerId, tags: [] })])
    expect(cleared.state.tags).toEqual([])

    const atLimit = customer.givenState(created).when(update({ tags: tagsN(LIMITS.tags) })).events
    expect(atLimit.map((e) => e.type)).toEqual(["customer.updated"])
  })

  it("active false deactivates, true reactivates; repeating either decides nothing", () => {
    const off = customer.givenState(created).when(update({ active: false }))
    expect(off.events).toEqual([CustomerDeactivated.make({ customerId })])
    expect(off.state).toEqual({ ...created, active: false })
    customer
      .givenState(off.state)
      .when(update({ active: false }))
      .thenNothing()

    const on = customer.givenState(off.state).when(update({ active: true }))
    expect(on.events).toEqual([CustomerReactivated.make({ customerId })])
    expect(on.state).toEqual(created)
    customer
      .givenState(on.state)
      .when(update({ active: true }))
      .thenNothing()
  })

  it("a deactivated customer can still be edited; field changes come before the toggle", () => {
    const off = customer.givenState(created).when(update({ firstName: "Anne", active: false }))
    expect(off.events).toEqual([
      CustomerUpdated.make({ customerId, firstName: "Anne" }),
      CustomerDeactivated.make({ customerId })
    ])
    const edited = customer.givenState(off.state).when(update({ lastName: "Li", active: true }))
    expect(edited.events).toEqual([
      CustomerUpdated.make({ customerId, lastName: "Li" }),
      CustomerReactivated.make({ customerId })
    ])
    expect(edited.state).toMatchObject({ firstName: "Anne", lastName: "Li", active: true })
  })
})

// --- Addresses -------------------------------------------------------------------------------------

describe("CustomerDecider: addresses", () => {
  it("the first address becomes the default even without makeDefault", () => {
    const { state } = customer
      .givenState(created)
      .when(addAddress("adr_1", false, 2))
      .thenEvents([
        CustomerAddressAdded.make({ customerId, addressId: "adr_1", ...newAddress(2), isDefault: true })
      ])
    const expected: Address = { addressId: "adr_1", ...newAddress(2), isDefault: true }
    expect(state.addresses).toEqual([expected])
  })

  it("later addresses are not default unless makeDefault, which moves the default", () => {
    const two = run(created, addAddress("adr_1"), addAddress("adr_2"))
    expect(ids(two)).toEqual(["adr_1", "adr_2"])
    expect(defaults(two)).toEqual(["adr_1"])

    const { events, state } = customer.givenState(two).when(addAddress("adr_3", true))
    expect(events[0]?.data).toMatchObject({ addressId: "adr_3", isDefault: true })
    expect(ids(state)).toEqual(["adr_1", "adr_2", "adr_3"])
    expect(defaults(state)).toEqual(["adr_3"])

    // makeDefault on the first address is the same as without.
    const first = customer.givenState(created).when(addAddress("adr_1", true)).events
    expect(first[0]?.data).toMatchObject({ isDefault: true })
  })

  it("removing a non-default address keeps the default", () => {
    const three = run(created, addAddress("adr_1"), addAddress("adr_2", true), addAddress("adr_3"))
    const { state } = customer
      .givenState(three)
      .when({
        _tag: "RemoveAddress",
        addressId: "adr_1"
      })
      .thenEvents([
        CustomerAddressRemoved.make({ customerId, addressId: "adr_1", defaultAddressId: "adr_2" })
      ])
    expect(ids(state)).toEqual(["adr_2", "adr_3"])
    expect(defaults(state)).toEqual(["adr_2"])
  })

  it("removing the default promotes the oldest remaining address", () => {
    const three = run(created, addAddress("adr_1"), addAddress("adr_2"), addAddress("adr_3", true))
    const { state } = customer
      .givenState(three)
      .when({
        _tag: "RemoveAddress",
        addressId: "adr_3"
      })
      .thenEvents([
        CustomerAddressRemoved.make({ customerId, addressId: "adr_3", defaultAddressId: "adr_1" })
      ])
    expect(defaults(state)).toEqual(["adr_1"])

    // A default in the middle: still the oldest (not the next) takes over.
    const middle = run(created, addAddress("adr_1"), addAddress("adr_2", true), addAddress("adr_3"))
    const promoted = run(middle, { _tag: "RemoveAddress", addressId: "adr_2" })
    expect(ids(promoted)).toEqual(["adr_1", "adr_3"])
    expect(defaults(promoted)).toEqual(["adr_1"])
  })

  it("removing the last address leaves no default; adding again makes a new default", () => {
    const one = run(created, addAddress("adr_1"))
    const { state } = customer
      .givenState(one)
      .when({
        _tag: "RemoveAddress",
        addressId: "adr_1"
      })
      .thenEvents([CustomerAddressRemoved.make({ customerId, addressId: "adr_1", defaultAddressId: null })])
    expect(state.addresses).toEqual([])
    expect(defaults(run(state, addAddress("adr_2")))).toEqual(["adr_2"])
  })

  it("removing an unknown or already removed address is AddressNotFound", () => {
    customer
      .givenState(created)
      .when({ _tag: "RemoveAddress", addressId: "adr_x" })
      .thenFails({ _tag: "AddressNotFound", addressId: "adr_x" })
    const removed = run(created, addAddress("adr_1"), { _tag: "RemoveAddress", addressId: "adr_1" })
    customer
      .givenState(removed)
      .when({ _tag: "RemoveAddress", addressId: "adr_1" })
      .thenFails({ _tag: "AddressNotFound", addressId: "adr_1" })
  })

  it("at most LIMITS.addresses addresses: one more is CustomerLimitExceeded on addresses", () => {
    const full = run(
      created,
      ...Array.from({ length: LIMITS.addresses }, (_, i) => addAddress(`adr_${i}`, false, i))
    )
    expect(full.addresses).toHaveLength(LIMITS.addresses)
    expect(defaults(full)).toEqual(["adr_0"])
    const error = customer
      .givenState(full)
      .when(addAddress("adr_more", true))
      .thenFails({ _tag: "CustomerLimitExceeded", field: "addresses" })
    expect(error.message).toContain(String(LIMITS.addresses))
    // Removing one makes room again.
    const room = run(full, { _tag: "RemoveAddress", addressId: "adr_7" })
    const added = run(room, addAddress("adr_more", true))
    expect(added.addresses).toHaveLength(LIMITS.addresses)
    expect(defaults(added)).toEqual(["adr_more"])
  })
})

// --- Tags ------------------------------------------------------------------------------------------

describe("CustomerDecider: Tag", () => {
  it("adds only the new tags, in the order given; the state keeps its order first", () => {
    const { state } = customer
      .givenState(created)
      .when({
        _tag: "Tag",
        tags: ["gold", "vip", "b2b", "gold"]
      })
      .thenEvents([CustomerTagged.make({ customerId, tags: ["gold", "b2b"] })])
    expect(state.tags).toEqual(["vip", "newsletter", "gold", "b2b"])
  })

  it("nothing new decides no event", () => {
    customer
      .givenState(created)
      .when({ _tag: "Tag", tags: ["vip", "newsletter"] })
      .thenNothing()
    customer.givenState(created).when({ _tag: "Tag", tags: [] }).thenNothing()
  })

  it("tags are compared exactly: another case is another tag", () => {
    customer
      .givenState(created)
      .when({ _tag: "Tag", tags: ["VIP"] })
      .thenEvents([CustomerTagged.make({ customerId, tags: ["VIP"] })])
  })

  it("going past LIMITS.tags is CustomerLimitExceeded; repeating tags at the limit is a no-op", () => {
    const almost = run(created, update({ tags: tagsN(LIMITS.tags - 1) }))
    customer
      .givenState(almost)
      .when({ _tag: "Tag", tags: ["x", "y"] })
      .thenFails({ _tag: "CustomerLimitExceeded", field: "tags" })

    // Known tags do not count towards the limit.
    const full = run(almost, { _tag: "Tag", tags: ["t0", "t1", "x", "x"] })
    expect(full.tags).toHaveLength(LIMITS.tags)
    expect(full.tags.at(-1)).toBe("x")
    customer
      .givenState(full)
      .when({ _tag: "Tag", tags: ["x", "t5"] })
      .thenNothing()
    customer
      .givenState(full)
      .when({ _tag: "Tag", tags: ["y"] })
      .thenFails({ _tag: "CustomerLimitExceeded", field: "tags" })
  })
})

describe("uniqueTags", () => {
  it("drops duplicates, keeps the first occurrence's position, and is case-sensitive", () => {
    expect(uniqueTags([])).toEqual([])
    expect(uniqueTags(["b", "a", "b", "c", "a"])).toEqual(["b", "a", "c"])
    expect(uniqueTags(["VIP", "vip", "VIP"])).toEqual(["VIP", "vip"])
  })

  it("is idempotent and keeps exactly the distinct elements", () =>
    fc.assert(
      fc.property(fc.array(fc.constantFrom("a", "b", "c", "d", "e", "A")), (tags) => {
        const unique = uniqueTags(tags)
        expect(new Set(unique).size).toBe(unique.length)
        expect(new Set(unique)).toEqual(new Set(tags))
        expect(uniqueTags(unique)).toEqual(unique)
        // The order of first appearance.
        expect(unique).toEqual(tags.filter((t, i) => tags.indexOf(t) === i))
      })
    ))
})

describe("metadataProblem", () => {
  it("accepts metadata within every limit", () => {
    expect(metadataProblem({})).toBeUndefined()
    expect(metadataProblem(keys(METADATA_LIMITS.keys))).toBeUndefined()
    expect(metadataProblem({ ["k".repeat(METADATA_LIMITS.keyLength)]: 1, k: 1 })).toBeUndefined()
  })

  it("counts keys", () => {
    expect(metadataProblem(keys(METADATA_LIMITS.keys + 1))).toBe(
      `metadata can have at most ${METADATA_LIMITS.keys} keys`
    )
  })

  it("bounds key length to 1..METADATA_LIMITS.keyLength", () => {
    const long = "k".repeat(METADATA_LIMITS.keyLength + 1)
    expect(metadataProblem({ [long]: 1 })).toBe(
      `metadata keys must be 1 to ${METADATA_LIMITS.keyLength} characters (${JSON.stringify(long)})`
    )
    expect(metadataProblem({ "": 1 })).toBe(
      `metadata keys must be 1 to ${METADATA_LIMITS.keyLength} characters ("")`
    )
    // A very long key is quoted shortened.
    expect(metadataProblem({ ["k".repeat(500)]: 1 })).toContain(JSON.stringify("k".repeat(50)))
  })

  it("counts key length in characters: an emoji is one", () => {
    expect(metadataProblem({ ["😀".repeat(METADATA_LIMITS.keyLength)]: 1 })).toBeUndefined()
    expect(metadataProblem({ ["😀".repeat(METADATA_LIMITS.keyLength + 1)]: 1 })).toBeDefined()
  })

  it("bounds the JSON size in UTF-8 bytes, the boundary included", () => {
    const wrapper = Buffer.byteLength(JSON.stringify({ a: "" }), "utf8")
    const exactly: Metadata = { a: "x".repeat(METADATA_LIMITS.bytes - wrapper) }
    expect(Buffer.byteLength(JSON.stringify(exactly), "utf8")).toBe(METADATA_LIMITS.bytes)
    expect(metadataProblem(exactly)).toBeUndefined()
    const over: Metadata = { a: "x".repeat(METADATA_LIMITS.bytes - wrapper + 1) }
    expect(metadataProblem(over)).toBe(`metadata must be at most ${METADATA_LIMITS.bytes} bytes as JSON`)
    // Bytes, not characters: "é" is two bytes in UTF-8.
    const accents: Metadata = { a: "é".repeat(METADATA_LIMITS.bytes / 2) }
    expect(JSON.stringify(accents).length).toBeLessThan(METADATA_LIMITS.bytes)
    expect(metadataProblem(accents)).toBeDefined()
  })
})

// --- Erase -----------------------------------------------------------------------------------------

describe("CustomerDecider: Erase", () => {
  it("erases: personal fields, tags, metadata and addresses are gone, the ids stay", () => {
    const full = run(
      linked,
      addAddress("adr_1"),
      { _tag: "Tag", tags: ["gold"] },
      update({ active: false, metadata: { note: "x" } })
    )
    const { state } = customer
      .givenState(full)
      .when({ _tag: "Erase" })
      .thenEvents([CustomerErased.make({ customerId, userId })])
    expect(state).toEqual({
      ...CustomerDecider.initialState,
      status: "erased",
      customerId,
      userId
    })
    expect(state).toMatchObject({
      email: null,
      firstName: null,
      lastName: null,
      phone: null,
      tags: [],
      metadata: {},
      addresses: []
    })
  })

  it("a staff-created customer's erasure has no userId key", () => {
    const [event] = customer.givenState(created).when({ _tag: "Erase" }).events
    expect(event).toEqual(CustomerErased.make({ customerId }))
    expect(event?.data).not.toHaveProperty("userId")
  })

  it("after erasure every command but Create is CustomerNotFound", () => {
    const erased = run(run(created, addAddress("adr_1")), { _tag: "Erase" })
    const commands: ReadonlyArray<CustomerCommand> = [
      update({ firstName: "Bob" }),
      update({}),
      addAddress("adr_2"),
      { _tag: "RemoveAddress", addressId: "adr_1" },
      { _tag: "Tag", tags: ["x"] },
      { _tag: "Tag", tags: [] },
      { _tag: "Erase" }
    ]
    for (const command of commands) {
      const error = customer.givenState(erased).when(command).error
      expect(error, command._tag).toMatchObject({ _tag: "CustomerNotFound", customerId })
    }
  })
})

// --- Recorded events, public events and snapshots -------------------------------------------------

describe("CustomerDecider: recorded events and public events", () => {
  const t0 = at("2030-01-01T10:00:00.000Z")
  const t1 = at("2030-01-02T11:00:00.000Z")

  it("recorded events set createdAt once and updatedAt on every change; erasure resets both", () => {
    const createdEvent = recorded(
      CustomerCreated.make({
        customerId,
        email: "ann@example.com",
        firstName: "Ann",
        lastName: "Lee",
        phone: null,
        tags: [],
        metadata: {}
      }),
      t0
    )
    const state = fold(CustomerDecider, [createdEvent])
    expect(state.createdAt).toEqual(t0)
    expect(state.updatedAt).toEqual(t0)
    const later = fold(
      CustomerDecider,
      [recorded(CustomerTagged.make({ customerId, tags: ["a"] }), t1, 2)],
      state
    )
    expect(later.createdAt).toEqual(t0)
    expect(later.updatedAt).toEqual(t1)
    // A decided (not yet recorded) event keeps the times it was folded onto.
    const decided = fold(CustomerDecider, [CustomerDeactivated.make({ customerId })], later)
    expect(decided.updatedAt).toEqual(t1)
    const erased = fold(CustomerDecider, [recorded(CustomerErased.make({ customerId }), t1, 3)], later)
    expect(erased.createdAt).toEqual(new Date(0))
  })

  it("each event publishes customer.created / customer.updated with the snapshot after it", () => {
    const publicEvents = CustomerDecider.publicEvents
    if (publicEvents === undefined) return expect.fail("CustomerDecider has no public events")

    const events: ReadonlyArray<CustomerEvent> = [
      CustomerCreated.make({
        customerId,
        email: "ann@example.com",
        firstName: "Ann",
        lastName: "Lee",
        phone: "+33 1",
        tags: ["vip"],
        metadata: { tier: 2 },
        userId
      }),
      CustomerUpdated.make({ customerId, firstName: "Anne" }),
      CustomerAddressAdded.make({ customerId, addressId: "adr_1", ...newAddress(2), isDefault: true }),
      CustomerAddressAdded.make({ customerId, addressId: "adr_2", ...newAddress(3), isDefault: false }),
      CustomerAddressRemoved.make({ customerId, addressId: "adr_1", defaultAddressId: "adr_2" }),
      CustomerTagged.make({ customerId, tags: ["gold"] }),
      CustomerDeactivated.make({ customerId }),
      CustomerReactivated.make({ customerId })
    ]
    const expectedTypes = [
      "customer.created",
      "customer.updated",
      "customer.updated",
      "customer.updated",
      "customer.updated",
      "customer.updated",
      "customer.updated",
      "customer.updated"
    ]
    let state = CustomerDecider.initialState
    for (const [i, event] of events.entries()) {
      const r = recorded(event, new Date(t0.getTime() + i * 60_000), i + 1)
      state = CustomerDecider.evolve(state, r)
      const drafts = publicEvents(r, state)
      expect(drafts).toEqual([
        { type: expectedTypes[i], data: customerSnapshot(state), subjectId: customerId }
      ])
    }

    // The snapshot in full, after the last event.
    const last = publicEvents(recorded(CustomerReactivated.make({ customerId }), t1, 9), state)
    expect(last[0]?.data).toEqual({
      id: customerId,
      email: "ann@example.com",
      firstName: "Anne",
      lastName: "Lee",
      phone: "+33 1",
      metadata: { tier: 2 },
      addresses: [
        {
          id: "adr_2",
          label: null,
          line1: "3 Rue de Rivoli",
          city: "Paris",
          state: null,
          postalCode: "75001",
          country: "FR",
          isDefault: true
        }
      ],
      orderCount: 0,
      totalSpent: 0,
      tags: ["vip", "gold"],
      active: true,
      hasAccount: true,
      testClockId: null,
      createdAt: t0.toISOString(),
      updatedAt: new Date(t0.getTime() + 7 * 60_000).toISOString()
    })
  })

  it("erasure publishes customer.deleted with the id only and no subject", () => {
    const publicEvents = CustomerDecider.publicEvents
    if (publicEvents === undefined) return expect.fail("CustomerDecider has no public events")
    const r = recorded(CustomerErased.make({ customerId, userId }), t1, 5)
    const after = CustomerDecider.evolve(created, r)
    const drafts = publicEvents(r, after)
    expect(drafts).toEqual([{ type: "customer.deleted", data: { id: customerId, deleted: true } }])
    expect(drafts[0]).not.toHaveProperty("subjectId")
  })

  it("customerSnapshot of a staff-created, deactivated customer", () => {
    const state = run(created, update({ active: false }))
    expect(customerSnapshot(state)).toMatchObject({
      id: customerId,
      hasAccount: false,
      active: false,
      addresses: [],
      tags: ["vip", "newsletter"],
      createdAt: new Date(0).toISOString()
    })
  })
})

// --- Shredded personal fields ----------------------------------------------------------------------

describe("CustomerDecider: shredded personal fields", () => {
  it("fold to null (or empty) without throwing, and the snapshot still builds", () => {
    const t = at("2030-01-01T00:00:00.000Z")
    const events: ReadonlyArray<CustomerEvent> = [
      CustomerCreated.make({
        customerId,
        email: shredded,
        firstName: shredded,
        lastName: shredded,
        phone: shredded,
        tags: ["vip"],
        metadata: shredded,
        userId
      }),
      CustomerAddressAdded.make({
        customerId,
        addressId: "adr_1",
        label: shredded,
        line1: shredded,
        city: shredded,
        state: shredded,
        postalCode: shredded,
        country: shredded,
        isDefault: true
      }),
      CustomerUpdated.make({ customerId, tags: ["vip", "gold"] }),
      CustomerTagged.make({ customerId, tags: ["b2b"] })
    ]
    const state = fold(
      CustomerDecider,
      events.map((e, i) => recorded(e, t, i + 1))
    )
    expect(state).toMatchObject({
      status: "active",
      customerId,
      email: null,
      firstName: null,
      lastName: null,
      phone: null,
      metadata: {},
      tags: ["vip", "gold", "b2b"],
      userId
    })
    expect(state.addresses).toEqual([
      {
        addressId: "adr_1",
        label: null,
        line1: "",
        city: "",
        state: null,
        postalCode: null,
        country: "",
        isDefault: true
      }
    ])
    const snapshot = customerSnapshot(state)
    expect(snapshot).toMatchObject({
      id: customerId,
      email: null,
      firstName: null,
      phone: null,
      metadata: {}
    })
    expect(() => JSON.stringify(snapshot)).not.toThrow()
  })

  it("a shredded update nulls the fields it carries and leaves the others", () => {
    const state = fold(
      CustomerDecider,
      [
        CustomerUpdated.make({
          customerId,
          email: shredded,
          firstName: shredded,
          lastName: shredded,
          phone: shredded,
          metadata: shredded
        })
      ],
      created
    )
    expect(state).toEqual({
      ...created,
      email: null,
      firstName: null,
      lastName: null,
      phone: null,
      metadata: {}
    })
    // An update carrying no personal field leaves them alone.
    expect(fold(CustomerDecider, [CustomerUpdated.make({ customerId })], created)).toEqual(created)
  })
})

// --- Property: random command sequences ------------------------------------------------------------

/** The part of the state the model follows. */
interface Model {
  readonly addresses: ReadonlyArray<{ readonly id: string; readonly isDefault: boolean }>
  readonly tags: ReadonlyArray<string>
  readonly active: boolean
  readonly firstName: string | null
}

type ModelResult = { readonly ok: Model } | { readonly error: string; readonly field?: string }

const modelOf = (state: CustomerState): Model => ({
  addresses: state.addresses.map((a) => ({ id: a.addressId, isDefault: a.isDefault })),
  tags: state.tags,
  active: state.active,
  firstName: state.firstName
})

/** The rules, written out plainly. */
const modelStep = (model: Model, command: CustomerCommand): ModelResult => {
  const distinct = (tags: ReadonlyArray<string>) => {
    const out: Array<string> = []
    for (const t of tags) if (!out.includes(t)) out.push(t)
    return out
  }
  switch (command._tag) {
    case "AddAddress": {
      if (model.addresses.length >= LIMITS.addresses)
        return { error: "CustomerLimitExceeded", field: "addresses" }
      const isDefault = command.makeDefault || model.addresses.length === 0
      const before = isDefault ? model.addresses.map((a) => ({ ...a, isDefault: false })) : model.addresses
      return { ok: { ...model, addresses: [...before, { id: command.addressId, isDefault }] } }
    }
    case "RemoveAddress": {
      const index = model.addresses.findIndex((a) => a.id === command.addressId)
      if (index < 0) return { error: "AddressNotFound" }
      const wasDefault = model.addresses[index]?.isDefault === true
      const rest = model.addresses.filter((_, i) => i !== index)
      return {
        ok: { ...model, addresses: wasDefault ? rest.map((a, i) => ({ ...a, isDefault: i === 0 })) : rest }
      }
    }
    case "Tag": {
      const added = distinct(command.tags).filter((t) => !model.tags.includes(t))
      if (added.length === 0) return { ok: model }
      if (model.tags.length + added.length > LIMITS.tags)
        return { error: "CustomerLimitExceeded", field: "tags" }
      return { ok: { ...model, tags: [...model.tags, ...added] } }
    }
    case "Update": {
      const c = command.changes
      let next = model
      if (c.tags !== undefined) {
        const tags = distinct(c.tags)
        if (tags.length > LIMITS.tags) return { error: "CustomerLimitExceeded", field: "tags" }
        next = { ...next, tags }
      }
      if (c.firstName !== undefined) next = { ...next, firstName: c.firstName }
      if (c.active !== undefined) next = { ...next, active: c.active }
      return { ok: next }
    }
    default:
      return expect.fail(`the model does not cover ${command._tag}`)
  }
}

/** A command with its address pick resolved against the state it runs on. */
type Step =
  | { readonly kind: "add"; readonly makeDefault: boolean }
  | { readonly kind: "remove"; readonly pick: number }
  | { readonly kind: "tag"; readonly tags: ReadonlyArray<string> }
  | {
      readonly kind: "update"
      readonly tags: ReadonlyArray<string> | undefined
      readonly active: boolean | undefined
      readonly firstName: string | undefined
    }

// Enough tags to reach LIMITS.tags, few enough to repeat often.
const tagPool = tagsN(LIMITS.tags + 20, "tag")
const tagList = (max: number) => fc.array(fc.constantFrom(...tagPool), { maxLength: max, size: "max" })

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 8, arbitrary: fc.record({ kind: fc.constant("add" as const), makeDefault: fc.boolean() }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("remove" as const), pick: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("tag" as const), tags: tagList(30) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("update" as const),
      tags: fc.option(
        // Now and then a whole new list around the limit (distinct tags, some lists over it).
        fc.oneof(tagList(20), fc.shuffledSubarray(tagPool, { minLength: LIMITS.tags - 10 })),
        { nil: undefined }
      ),
      active: fc.option(fc.boolean(), { nil: undefined }),
      firstName: fc.option(fc.constantFrom("Ann", "Bob"), { nil: undefined })
    })
  }
)

const commandOf = (s: Step, index: number, state: CustomerState): CustomerCommand => {
  switch (s.kind) {
    case "add":
      return addAddress(`adr_${index}`, s.makeDefault, index)
    case "remove": {
      // One pick in (count + 1) names an address that does not exist.
      const pick = s.pick % (state.addresses.length + 1)
      return { _tag: "RemoveAddress", addressId: state.addresses[pick]?.addressId ?? `adr_missing_${index}` }
    }
    case "tag":
      return { _tag: "Tag", tags: s.tags }
    case "update":
      return update({
        ...(s.tags === undefined ? {} : { tags: s.tags }),
        ...(s.active === undefined ? {} : { active: s.active }),
        ...(s.firstName === undefined ? {} : { firstName: s.firstName })
      })
  }
}

describe("CustomerDecider: random command sequences", () => {
  it("keep the invariants and evolve exactly as the model says", () =>
    fc.assert(
      fc.property(fc.array(stepArb, { minLength: 1, maxLength: 200, size: "max" }), (steps) => {
        let state = created
        let model = modelOf(created)
        for (const [index, s] of steps.entries()) {
          const command = commandOf(s, index, state)
          const expected = modelStep(model, command)
          const result = customer.givenState(state).when(command).result
          if ("error" in expected) {
            if (Either.isRight(result))
              return expect.fail(`${command._tag} should fail with ${expected.error}`)
            expect(result.left._tag).toBe(expected.error)
            if (expected.field !== undefined) expect(result.left).toMatchObject({ field: expected.field })
            continue
          }
          if (Either.isLeft(result)) return expect.fail(`${command._tag} failed: ${result.left._tag}`)
          const events = result.right
          const next = fold(CustomerDecider, events, state)
          expect(modelOf(next)).toEqual(expected.ok)
          // No event exactly when nothing changed.
          expect(events.length === 0).toBe(JSON.stringify(expected.ok) === JSON.stringify(model))
          // Invariants.
          const defaultCount = next.addresses.filter((a) => a.isDefault).length
          expect(defaultCount).toBe(next.addresses.length === 0 ? 0 : 1)
          expect(next.addresses.length).toBeLessThanOrEqual(LIMITS.addresses)
          expect(new Set(next.addresses.map((a) => a.addressId)).size).toBe(next.addresses.length)
          expect(new Set(next.tags).size).toBe(next.tags.length)
          expect(next.tags.length).toBeLessThanOrEqual(LIMITS.tags)
          // Untouched fields stay.
          expect(next.email).toBe(created.email)
          expect(next.metadata).toEqual(created.metadata)
          state = next
          model = expected.ok
        }
      }),
      { numRuns: 200 }
    ))
})

describe("applyMetadataPatch", () => {
  it("stores __proto__ as a key, never as the prototype", () => {
    const merged = applyMetadataPatch({}, JSON.parse('{"__proto__": {"polluted": true}, "a": 1}'))
    expect(Object.getPrototypeOf(merged)).toBe(Object.prototype)
    expect(Object.keys(merged)).toEqual(["__proto__", "a"])
    expect(JSON.stringify(merged)).toBe('{"__proto__":{"polluted":true},"a":1}')
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined()
  })

  it("at creation, a key set to null is no key", () => {
    expect(customer.when({ ...create, metadata: { a: null, b: 2 } }).state.metadata).toEqual({ b: 2 })
  })
})
