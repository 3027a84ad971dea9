/**
 * The product aggregate as a pure decider (no database): creation, partial updates (metadata merge,
 * price versions, stock set and adjusted), archiving and its guard, reservations (idempotent per
 * owner, untracked and backorder products), transfer, fulfilment and restock, the stock-level
 * crossings and their public events, and a model-based property over random sequences of
 * reserve/release/adjust/set/fulfil/restock/threshold commands: `available = stocked − reserved`,
 * never below 0 without backorders, and exactly one crossing event per crossing.
 */
import { describe, expect, it } from "@effect/vitest"
import { HashMap } from "effect"
import * as fc from "fast-check"
import {
  availableQuantity,
  crossingEvent,
  type NewProduct,
  type ProductCommand,
  ProductDecider,
  type ProductState,
  productSnapshot,
  productStream,
  RECENT_KEYS,
  stockLevel
} from "../../src/catalog/decider.js"
import {
  ProductArchived,
  ProductCreated,
  type ProductEvent,
  ProductUpdated,
  ReservationReleased,
  ReservationTransferred,
  StockConsumed,
  type StockLevel,
  StockLevelChanged,
  StockReserved,
  StockReturned
} from "../../src/catalog/events.js"
import type { Pending } from "../../src/kernel/Decider.js"
import { deciderSpec } from "../support/decider.js"

const product = deciderSpec(ProductDecider)
const productId = "prod_01jd4x8m6ffq2b3n5r7t9v1w3y"

const newProduct = (
  inventory: Partial<NewProduct["inventory"]> = {},
  extra: Partial<NewProduct> = {}
): NewProduct => ({
  productId,
  name: "Mug",
  description: null,
  sku: "MUG-1",
  status: "active",
  price: { amount: 1200, currency: "EUR", type: "one_time", recurring: null },
  images: [],
  metadata: {},
  inventory: {
    tracked: true,
    stockedQuantity: 10,
    lowStockThreshold: 3,
    allowBackorder: false,
    ...inventory
  },
  ...extra
})
const created = (inventory: Partial<NewProduct["inventory"]> = {}, extra: Partial<NewProduct> = {}) =>
  ProductCreated.make(newProduct(inventory, extra))
const stocked = (inventory: Partial<NewProduct["inventory"]> = {}) => product.given([created(inventory)])
const crossing = (previousLevel: StockLevel, level: StockLevel) =>
  StockLevelChanged.make({ productId, previousLevel, level })

/** The public events of decided events, folded from `state` (what the runner writes). */
const publicOf = (state: ProductState, events: ReadonlyArray<ProductEvent>) => {
  const out: Array<{ type: string; data: unknown }> = []
  let s = state
  for (const [i, e] of events.entries()) {
    s = ProductDecider.evolve(s, e)
    const pending: Pending<ProductEvent> = {
      ...e,
      streamId: productStream(productId),
      streamVersion: i + 1,
      eventId: `0190f6c0-0000-7000-8000-${String(i).padStart(12, "0")}`,
      schemaVersion: 1,
      metadata: {},
      recordedAt: new Date(0)
    }
    out.push(...(ProductDecider.publicEvents?.(pending, s) ?? []))
  }
  return out
}

describe("product decider", () => {
  describe("create", () => {
    it("records the product; a repeat of the same id changes nothing", () => {
      product.when({ _tag: "Create", ...newProduct() }).thenEvents([created()])
      product
        .given([created()])
        .when({ _tag: "Create", ...newProduct() })
        .thenNothing()
    })

    it("metadata keys set to null are dropped; over the limits is refused", () => {
      const d = product.when({ _tag: "Create", ...newProduct({}, { metadata: { a: 1, b: null } }) })
      expect(d.state.metadata).toEqual({ a: 1 })
      const tooMany = Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, i]))
      product
        .when({ _tag: "Create", ...newProduct({}, { metadata: tooMany }) })
        .thenFails({ _tag: "ProductChangeInvalid", field: "metadata" })
    })

    it("the snapshot carries the full price with its version and the inventory", () => {
      const state = product.when({ _tag: "Create", ...newProduct() }).state
      expect(productSnapshot(state)).toMatchObject({
        object: "product",
        id: productId,
        status: "active",
        price: { amount: 1200, currency: "EUR", type: "one_time", recurring: null, version: 1 },
        inventory: {
          tracked: true,
          stockedQuantity: 10,
          reservedQuantity: 0,
          availableQuantity: 10,
          lowStockThreshold: 3,
          allowBackorder: false
        },
        deletedAt: null
      })
    })

    it("commands on a product that does not exist fail with ProductNotFound", () => {
      product.when({ _tag: "Update", changes: { name: "x" } }).thenFails("ProductNotFound")
      product.when({ _tag: "Archive" }).thenFails("ProductNotFound")
      product.when({ _tag: "Reserve", ownerId: "chk_1", quantity: 1 }).thenFails("ProductNotFound")
    })
  })

  describe("update", () => {
    it("records only what changed; nothing changed → no event", () => {
      stocked()
        .when({ _tag: "Update", changes: { name: "Mug", sku: "MUG-1", description: "Blue" } })
        .thenEvents([ProductUpdated.make({ productId, description: "Blue" })])
      stocked()
        .when({ _tag: "Update", changes: { name: "Mug", tracked: true } })
        .thenNothing()
    })

    it("a price change records the whole price and bumps the version (earlier snapshots keep theirs)", () => {
      const price = { amount: 1500, currency: "EUR", type: "one_time" as const, recurring: null }
      const before = stocked().when({ _tag: "Update", changes: {} }).before
      const d = stocked().when({ _tag: "Update", changes: { price } })
      d.thenEvents([ProductUpdated.make({ productId, price })])
      expect(productSnapshot(before).price).toMatchObject({ amount: 1200, version: 1 })
      expect(productSnapshot(d.state).price).toMatchObject({ amount: 1500, version: 2 })
    })

    it("metadata is merged like Stripe's", () => {
      const s = product.run(
        product.given([created({}, { metadata: { a: 1, b: 2 } })]).when({ _tag: "Update", changes: {} })
          .before,
        { _tag: "Update", changes: { metadata: { b: null, c: 3 } } }
      )
      expect(s.metadata).toEqual({ a: 1, c: 3 })
    })

    it("adjustBy moves the stock against the latest state; stockedQuantity sets it", () => {
      stocked()
        .when({ _tag: "Update", changes: { adjustBy: -4 } })
        .thenEvents([ProductUpdated.make({ productId, stockedQuantity: 6, stockDelta: -4 })])
      stocked()
        .when({ _tag: "Update", changes: { stockedQuantity: 25 } })
        .thenEvents([ProductUpdated.make({ productId, stockedQuantity: 25, stockDelta: 15 })])
    })

    it("stock never goes below 0, nor below what is reserved without backorders", () => {
      stocked()
        .when({ _tag: "Update", changes: { adjustBy: -11 } })
        .thenFails({ _tag: "ProductChangeInvalid", field: "inventory.adjustBy" })
      // Nor above the limit a set stock is held to, reached by adjustments (10 + 10^9).
      stocked()
        .when({ _tag: "Update", changes: { adjustBy: 1_000_000_000 } })
        .thenFails({ _tag: "ProductChangeInvalid", field: "inventory.adjustBy" })
      const reserved = product.run(stocked().when({ _tag: "Update", changes: {} }).before, {
        _tag: "Reserve",
        ownerId: "chk_a",
        quantity: 6
      })
      product
        .givenState(reserved)
        .when({ _tag: "Update", changes: { stockedQuantity: 5 } })
        .thenFails({ _tag: "ProductChangeInvalid", field: "inventory.stockedQuantity" })
      // With backorders turned on in the same change, it may.
      const d = product
        .givenState(reserved)
        .when({ _tag: "Update", changes: { stockedQuantity: 5, allowBackorder: true } })
      expect(availableQuantity(d.state.inventory)).toBe(-1)
      // …and they cannot be turned off again while more is reserved than stocked.
      product
        .givenState(d.state)
        .when({ _tag: "Update", changes: { allowBackorder: false } })
        .thenFails({ _tag: "ProductChangeInvalid", field: "inventory.allowBackorder" })
    })

    it("archiving through a status change is refused while reservations hold it", () => {
      const held = product.run(stocked().when({ _tag: "Update", changes: {} }).before, {
        _tag: "Reserve",
        ownerId: "chk_a",
        quantity: 1
      })
      product
        .givenState(held)
        .when({ _tag: "Update", changes: { status: "archived" } })
        .thenFails("ProductInUse")
    })
  })

  describe("archive", () => {
    it("archives once; again is a no-op; a held product is in use", () => {
      const d = stocked().when({ _tag: "Archive" })
      d.thenEvents([ProductArchived.make({ productId })])
      expect(d.state.status).toBe("archived")
      product.givenState(d.state).when({ _tag: "Archive" }).thenNothing()
      const held = product.run(stocked().when({ _tag: "Update", changes: {} }).before, {
        _tag: "Reserve",
        ownerId: "chk_a",
        quantity: 2
      })
      product
        .givenState(held)
        .when({ _tag: "Archive" })
        .thenFails({ _tag: "ProductInUse", reservedQuantity: 2 })
    })

    it("an archived or draft product cannot be reserved", () => {
      const archived = stocked().when({ _tag: "Archive" }).state
      product
        .givenState(archived)
        .when({ _tag: "Reserve", ownerId: "chk_a", quantity: 1 })
        .thenFails({ _tag: "ProductUnavailable", status: "archived" })
      product
        .given([created({}, { status: "draft" })])
        .when({ _tag: "Reserve", ownerId: "chk_a", quantity: 1 })
        .thenFails({ _tag: "ProductUnavailable", status: "draft" })
    })
  })

  describe("reservations", () => {
    it("reserves while available; once per owner", () => {
      const d = stocked().when({ _tag: "Reserve", ownerId: "chk_a", quantity: 4 })
      d.thenEvents([StockReserved.make({ productId, ownerId: "chk_a", quantity: 4 })])
      expect(d.state.inventory.reservedQuantity).toBe(4)
      expect(Object.fromEntries(d.state.holds)).toEqual({ chk_a: 4 })
      product.givenState(d.state).when({ _tag: "Reserve", ownerId: "chk_a", quantity: 4 }).thenNothing()
    })

    it("refuses more than available, naming what is available", () => {
      stocked({ stockedQuantity: 3 })
        .when({ _tag: "Reserve", ownerId: "chk_a", quantity: 4 })
        .thenFails({ _tag: "InsufficientStock", requested: 4, available: 3 })
    })

    it("untracked products always succeed and hold nothing; backorders may go below 0", () => {
      stocked({ tracked: false, stockedQuantity: 0 })
        .when({ _tag: "Reserve", ownerId: "chk_a", quantity: 1000 })
        .thenNothing()
      const d = stocked({ stockedQuantity: 1, allowBackorder: true }).when({
        _tag: "Reserve",
        ownerId: "chk_a",
        quantity: 3
      })
      d.thenEvents([
        StockReserved.make({ productId, ownerId: "chk_a", quantity: 3 }),
        crossing("low_stock", "out_of_stock")
      ])
      expect(availableQuantity(d.state.inventory)).toBe(-2)
    })

    it("release gives the whole hold back, once", () => {
      const held = product.run(stocked().when({ _tag: "Update", changes: {} }).before, {
        _tag: "Reserve",
        ownerId: "chk_a",
        quantity: 4
      })
      const d = product.givenState(held).when({ _tag: "Release", ownerId: "chk_a" })
      d.thenEvents([ReservationReleased.make({ productId, ownerId: "chk_a", quantity: 4 })])
      expect(d.state.inventory.reservedQuantity).toBe(0)
      product.givenState(d.state).when({ _tag: "Release", ownerId: "chk_a" }).thenNothing()
    })

    it("transfer re-owns the hold to the order, once", () => {
      const held = product.run(stocked().when({ _tag: "Update", changes: {} }).before, {
        _tag: "Reserve",
        ownerId: "chk_a",
        quantity: 4
      })
      const d = product.givenState(held).when({ _tag: "Transfer", fromOwnerId: "chk_a", toOwnerId: "ord_a" })
      d.thenEvents([
        ReservationTransferred.make({ productId, fromOwnerId: "chk_a", toOwnerId: "ord_a", quantity: 4 })
      ])
      expect(Object.fromEntries(d.state.holds)).toEqual({ ord_a: 4 })
      expect(d.state.inventory.reservedQuantity).toBe(4)
      product
        .givenState(d.state)
        .when({ _tag: "Transfer", fromOwnerId: "chk_a", toOwnerId: "ord_a" })
        .thenNothing()
    })

    it("fulfilment drops stocked and reserved together; its key makes a repeat a no-op", () => {
      const held = product.run(stocked().when({ _tag: "Update", changes: {} }).before, {
        _tag: "Reserve",
        ownerId: "ord_a",
        quantity: 4
      })
      const partial = product
        .givenState(held)
        .when({ _tag: "Consume", ownerId: "ord_a", key: "ful_1", quantity: 1 })
      partial.thenEvents([
        StockConsumed.make({ productId, ownerId: "ord_a", key: "ful_1", quantity: 1, fromHold: 1 })
      ])
      expect(partial.state.inventory).toMatchObject({ stockedQuantity: 9, reservedQuantity: 3 })
      product
        .givenState(partial.state)
        .when({ _tag: "Consume", ownerId: "ord_a", key: "ful_1", quantity: 1 })
        .thenNothing()
      const rest = product.givenState(partial.state).when({ _tag: "Consume", ownerId: "ord_a", key: "ful_2" })
      expect(rest.state.inventory).toMatchObject({ stockedQuantity: 6, reservedQuantity: 0 })
      expect(HashMap.size(rest.state.holds)).toBe(0)
      // Beyond the hold, only what is available (never other owners' holds).
      const crowded = product.run(held, { _tag: "Reserve", ownerId: "ord_b", quantity: 6 })
      product
        .givenState(crowded)
        .when({ _tag: "Consume", ownerId: "ord_a", key: "ful_3", quantity: 5 })
        .thenFails({ _tag: "InsufficientStock", requested: 5, available: 4 })
    })

    it("restock puts units back, once per key", () => {
      const d = stocked({ stockedQuantity: 0 }).when({
        _tag: "Return",
        ownerId: "ord_a",
        key: "re_1",
        quantity: 2
      })
      d.thenEvents([
        StockReturned.make({ productId, ownerId: "ord_a", key: "re_1", quantity: 2 }),
        crossing("out_of_stock", "low_stock")
      ])
      product
        .givenState(d.state)
        .when({ _tag: "Return", ownerId: "ord_a", key: "re_1", quantity: 2 })
        .thenNothing()
    })

    it("untracked products count nothing: fulfilment and restock of them change nothing", () => {
      stocked({ tracked: false })
        .when({ _tag: "Consume", ownerId: "ord_a", key: "ful_1", quantity: 3 })
        .thenNothing()
      stocked({ tracked: false })
        .when({ _tag: "Return", ownerId: "ord_a", key: "re_1", quantity: 3 })
        .thenNothing()
    })

    it("remembers at most RECENT_KEYS keys", () => {
      let state = stocked({ stockedQuantity: 0 }).when({ _tag: "Update", changes: {} }).before
      for (let i = 0; i < RECENT_KEYS + 5; i++)
        state = product.run(state, { _tag: "Return", ownerId: "ord_a", key: `re_${i}`, quantity: 1 })
      expect(state.recentKeys.length).toBe(RECENT_KEYS)
      expect(state.recentKeys[state.recentKeys.length - 1]).toBe(`ord_a:re_${RECENT_KEYS + 4}`)
    })
  })

  describe("snapshots", () => {
    it("a state survives the snapshot's JSON round trip (holds, keys, dates, price)", () => {
      const policy = ProductDecider.snapshot
      if (policy === undefined) return expect.fail("the product decider keeps snapshots")
      let state = product
        .given([created({}, { metadata: { a: { b: [1, 2] } } })])
        .when({ _tag: "Archive" }).before
      state = product.run(
        state,
        { _tag: "Reserve", ownerId: "chk_a", quantity: 2 },
        { _tag: "Reserve", ownerId: "chk_b", quantity: 1 },
        { _tag: "Transfer", fromOwnerId: "chk_a", toOwnerId: "ord_a" },
        { _tag: "Consume", ownerId: "ord_a", key: "ful_1", quantity: 1 },
        {
          _tag: "Update",
          changes: { price: { amount: 5, currency: "EUR", type: "one_time", recurring: null } }
        }
      )
      const stored = JSON.parse(JSON.stringify(policy.encode(state)))
      const decoded = policy.decode(stored)
      if (decoded._tag === "None") return expect.fail("the snapshot does not decode")
      // Holds are a persistent map: compared by content (its internal layout may differ).
      const { holds, ...rest } = decoded.value
      const { holds: stateHolds, ...stateRest } = state
      expect(rest).toEqual(stateRest)
      expect(Object.fromEntries(holds)).toEqual(Object.fromEntries(stateHolds))
      expect(HashMap.size(holds)).toBe(2)
    })
  })

  describe("crossings (COMMERCE decision 8, research §2.2)", () => {
    it("the level follows available against 0 and the threshold; untracked has none", () => {
      const inv = {
        tracked: true,
        stockedQuantity: 10,
        reservedQuantity: 0,
        lowStockThreshold: 3,
        allowBackorder: false
      }
      expect(stockLevel(inv)).toBe("in_stock")
      expect(stockLevel({ ...inv, reservedQuantity: 7 })).toBe("low_stock")
      expect(stockLevel({ ...inv, reservedQuantity: 10 })).toBe("out_of_stock")
      expect(stockLevel({ ...inv, tracked: false })).toBeUndefined()
    })

    it("which level changes publish", () => {
      expect(crossingEvent("in_stock", "low_stock")).toBe("inventory.low_stock")
      expect(crossingEvent("in_stock", "out_of_stock")).toBe("inventory.out_of_stock")
      expect(crossingEvent("low_stock", "out_of_stock")).toBe("inventory.out_of_stock")
      expect(crossingEvent("out_of_stock", "low_stock")).toBe("inventory.restocked")
      expect(crossingEvent("out_of_stock", "in_stock")).toBe("inventory.restocked")
      expect(crossingEvent("low_stock", "in_stock")).toBeUndefined()
      expect(crossingEvent("low_stock", "low_stock")).toBeUndefined()
    })

    it("a reservation into the low band publishes inventory.low_stock with research's payload", () => {
      const d = stocked().when({ _tag: "Reserve", ownerId: "chk_a", quantity: 8 })
      d.thenEvents([
        StockReserved.make({ productId, ownerId: "chk_a", quantity: 8 }),
        crossing("in_stock", "low_stock")
      ])
      expect(publicOf(d.before, d.events)).toEqual([
        {
          type: "inventory.low_stock",
          data: {
            productId,
            sku: "MUG-1",
            stockedQuantity: 10,
            reservedQuantity: 8,
            availableQuantity: 2,
            lowStockThreshold: 3,
            previousState: "in_stock",
            state: "low_stock"
          }
        }
      ])
    })

    it("a stock change publishes product.updated and, on a crossing, the inventory event", () => {
      const d = stocked().when({ _tag: "Update", changes: { stockedQuantity: 0 } })
      expect(publicOf(d.before, d.events).map((e) => e.type)).toEqual([
        "product.updated",
        "inventory.out_of_stock"
      ])
      const back = product.givenState(d.state).when({ _tag: "Update", changes: { adjustBy: 20 } })
      expect(publicOf(back.before, back.events).map((e) => e.type)).toEqual([
        "product.updated",
        "inventory.restocked"
      ])
    })

    it("reservations publish only their crossings; create, archive publish their product events", () => {
      const d = stocked().when({ _tag: "Reserve", ownerId: "chk_a", quantity: 1 })
      expect(publicOf(d.before, d.events)).toEqual([])
      const c = product.when({ _tag: "Create", ...newProduct() })
      expect(publicOf(c.before, c.events).map((e) => e.type)).toEqual(["product.created"])
      const a = stocked().when({ _tag: "Archive" })
      const archived = publicOf(a.before, a.events)
      expect(archived.map((e) => e.type)).toEqual(["product.deleted"])
      expect(archived[0]?.data).toMatchObject({ id: productId, status: "archived" })
    })
  })

  // --- Model-based property ----------------------------------------------------------------------

  type Step =
    | { readonly kind: "reserve"; readonly owner: number; readonly quantity: number }
    | { readonly kind: "release"; readonly owner: number }
    | { readonly kind: "adjust"; readonly by: number }
    | { readonly kind: "set"; readonly to: number }
    | { readonly kind: "fulfil"; readonly owner: number; readonly key: number; readonly quantity?: number }
    | { readonly kind: "restock"; readonly owner: number; readonly key: number; readonly quantity: number }
    | { readonly kind: "threshold"; readonly to: number }

  const owner = fc.integer({ min: 0, max: 4 })
  const key = fc.integer({ min: 0, max: 6 })
  const step: fc.Arbitrary<Step> = fc.oneof(
    fc.record({ kind: fc.constant("reserve" as const), owner, quantity: fc.integer({ min: 1, max: 6 }) }),
    fc.record({ kind: fc.constant("release" as const), owner }),
    fc.record({ kind: fc.constant("adjust" as const), by: fc.integer({ min: -8, max: 12 }) }),
    fc.record({ kind: fc.constant("set" as const), to: fc.integer({ min: 0, max: 20 }) }),
    fc.record(
      { kind: fc.constant("fulfil" as const), owner, key, quantity: fc.integer({ min: 1, max: 6 }) },
      { requiredKeys: ["kind", "owner", "key"] }
    ),
    fc.record({
      kind: fc.constant("restock" as const),
      owner,
      key,
      quantity: fc.integer({ min: 1, max: 5 })
    }),
    fc.record({ kind: fc.constant("threshold" as const), to: fc.integer({ min: 0, max: 8 }) })
  )

  const commandOf = (s: Step): ProductCommand => {
    switch (s.kind) {
      case "reserve":
        return { _tag: "Reserve", ownerId: `chk_${s.owner}`, quantity: s.quantity }
      case "release":
        return { _tag: "Release", ownerId: `chk_${s.owner}` }
      case "adjust":
        return { _tag: "Update", changes: { adjustBy: s.by } }
      case "set":
        return { _tag: "Update", changes: { stockedQuantity: s.to } }
      case "fulfil":
        return {
          _tag: "Consume",
          ownerId: `chk_${s.owner}`,
          key: `ful_${s.key}`,
          ...(s.quantity === undefined ? {} : { quantity: s.quantity })
        }
      case "restock":
        return { _tag: "Return", ownerId: `chk_${s.owner}`, key: `re_${s.key}`, quantity: s.quantity }
      case "threshold":
        return { _tag: "Update", changes: { lowStockThreshold: s.to } }
    }
  }

  /** The model: plain counters, written independently of the decider. */
  interface Model {
    stocked: number
    reserved: number
    threshold: number
    holds: Map<string, number>
    keys: Set<string>
  }

  const levelOf = (m: Model): StockLevel => {
    const available = m.stocked - m.reserved
    return available <= 0 ? "out_of_stock" : available <= m.threshold ? "low_stock" : "in_stock"
  }

  /** Applies a step to the model; false when the model says it must be refused. */
  const applyModel = (m: Model, s: Step, backorder: boolean): boolean => {
    const available = m.stocked - m.reserved
    switch (s.kind) {
      case "reserve": {
        const o = `chk_${s.owner}`
        if (m.holds.has(o)) return true
        if (!backorder && s.quantity > available) return false
        m.holds.set(o, s.quantity)
        m.reserved += s.quantity
        return true
      }
      case "release": {
        const o = `chk_${s.owner}`
        m.reserved -= m.holds.get(o) ?? 0
        m.holds.delete(o)
        return true
      }
      case "adjust":
      case "set": {
        const next = s.kind === "adjust" ? m.stocked + s.by : s.to
        if (next < 0 || (!backorder && next < m.reserved)) return false
        m.stocked = next
        return true
      }
      case "fulfil": {
        const o = `chk_${s.owner}`
        const k = `${o}:ful_${s.key}`
        if (m.keys.has(k)) return true
        const held = m.holds.get(o) ?? 0
        const quantity = s.quantity ?? held
        if (quantity <= 0) return true
        const fromHold = Math.min(quantity, held)
        if (!backorder && quantity - fromHold > Math.max(0, available)) return false
        m.stocked = Math.max(0, m.stocked - quantity)
        m.reserved -= fromHold
        if (held - fromHold > 0) m.holds.set(o, held - fromHold)
        else m.holds.delete(o)
        m.keys.add(k)
        return true
      }
      case "restock": {
        const k = `chk_${s.owner}:re_${s.key}`
        if (m.keys.has(k)) return true
        m.stocked += s.quantity
        m.keys.add(k)
        return true
      }
      case "threshold":
        m.threshold = s.to
        return true
    }
  }

  it("model: available = stocked − reserved ≥ 0 without backorders; one event per crossing", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 15 }),
        fc.boolean(),
        fc.array(step, { maxLength: 60 }),
        (initialStock, backorder, steps) => {
          let state = product.when({
            _tag: "Create",
            ...newProduct({ stockedQuantity: initialStock, allowBackorder: backorder })
          }).state
          const model: Model = {
            stocked: initialStock,
            reserved: 0,
            threshold: 3,
            holds: new Map(),
            keys: new Set()
          }
          const counts = { expected: new Map<string, number>(), published: new Map<string, number>() }
          const bump = (map: Map<string, number>, type: string) => map.set(type, (map.get(type) ?? 0) + 1)
          for (const s of steps) {
            const levelBefore = levelOf(model)
            const accepted = applyModel(model, s, backorder)
            const decision = product.givenState(state).when(commandOf(s))
            if (!accepted) {
              decision.thenFails()
              continue
            }
            const events = decision.events
            for (const p of publicOf(state, events))
              if (p.type.startsWith("inventory.")) bump(counts.published, p.type)
            state = decision.state
            const inv = state.inventory
            expect(inv.stockedQuantity).toBe(model.stocked)
            expect(inv.reservedQuantity).toBe(model.reserved)
            expect(availableQuantity(inv)).toBe(inv.stockedQuantity - inv.reservedQuantity)
            expect([...HashMap.values(state.holds)].reduce((a, b) => a + b, 0)).toBe(inv.reservedQuantity)
            expect(inv.stockedQuantity).toBeGreaterThanOrEqual(0)
            if (!backorder) expect(availableQuantity(inv)).toBeGreaterThanOrEqual(0)
            const levelAfter = levelOf(model)
            const changes = events.filter((e) => e.type === "product.stock_level_changed")
            expect(changes.length).toBe(levelBefore === levelAfter ? 0 : 1)
            const expected = crossingEvent(levelBefore, levelAfter)
            if (expected !== undefined) bump(counts.expected, expected)
          }
          expect(counts.published).toEqual(counts.expected)
        }
      ),
      { numRuns: 500 }
    )
  })
})
