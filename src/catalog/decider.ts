/**
 * The product aggregate: catalogue fields, one embedded price, and inventory with its reservations
 * (research §1.1, §2.2; COMMERCE decisions 1 and 8). Pure: tested without a database
 * (test/catalog/decider.test.ts). Stock is decided here and nowhere else, one product stream at a
 * time, so "check then reserve" is a single decision against the latest state: the event store's
 * expected-version append refuses a decision made on stale state (the Saleor/Vendure/Medusa
 * oversells of research §6 rows 1–2 were check and write in different places).
 */
import { Data, Effect, HashMap, Option, Schema } from "effect"
import { defineDecider, type Recorded, snapshotPolicy } from "../kernel/Decider.js"
import { applyMetadataPatch, type Metadata, type MetadataPatch, metadataProblem } from "../kernel/Metadata.js"
import {
  MAX_QUANTITY,
  PriceData,
  ProductArchived,
  ProductCreated,
  type ProductEvent,
  type ProductStatus,
  ProductUpdated,
  productEventTypes,
  ReservationReleased,
  ReservationTransferred,
  StockConsumed,
  type StockLevel,
  StockLevelChanged,
  StockReserved,
  StockReturned
} from "./events.js"

export const productStream = (productId: string) => `product-${productId}`

/** Fulfilment and refund keys remembered per product, so a retried consume or restock is a no-op. */
export const RECENT_KEYS = 500

// --- Domain errors ------------------------------------------------------------------------------------

export class ProductNotFound extends Data.TaggedError("ProductNotFound")<{ readonly productId: string }> {}
/** Draft or archived: it cannot be reserved (an order could not be placed for it). */
export class ProductUnavailable extends Data.TaggedError("ProductUnavailable")<{
  readonly productId: string
  readonly status: string
}> {}
export class InsufficientStock extends Data.TaggedError("InsufficientStock")<{
  readonly productId: string
  readonly requested: number
  readonly available: number
}> {}
/** Held by an open reservation (a checkout's or an unfulfilled order's): it cannot be archived. */
export class ProductInUse extends Data.TaggedError("ProductInUse")<{
  readonly productId: string
  readonly reservedQuantity: number
}> {}
/** A change the request is at fault for; `field` is its request path (`inventory.adjustBy`). */
export class ProductChangeInvalid extends Data.TaggedError("ProductChangeInvalid")<{
  readonly field: string
  readonly message: string
}> {}

export type ProductError =
  | ProductNotFound
  | ProductUnavailable
  | InsufficientStock
  | ProductInUse
  | ProductChangeInvalid

// --- State --------------------------------------------------------------------------------------------

export interface Inventory {
  readonly tracked: boolean
  readonly stockedQuantity: number
  readonly reservedQuantity: number
  readonly lowStockThreshold: number
  readonly allowBackorder: boolean
}

export interface ProductState {
  readonly status: "none" | ProductStatus
  readonly productId: string
  readonly name: string
  readonly description: string | null
  readonly sku: string | null
  readonly price: PriceData
  /** 1 at creation, +1 for every price change: what later snapshots of the price can name. */
  readonly priceVersion: number
  readonly images: ReadonlyArray<string>
  readonly metadata: Metadata
  readonly inventory: Inventory
  /**
   * Open holds by owner (checkout or order id) → units. A persistent map: a hot product holds one
   * entry per open checkout (thousands in a sale), and folding its stream must not copy them all
   * for every event.
   */
  readonly holds: HashMap.HashMap<string, number>
  /** The last `RECENT_KEYS` consume/restock keys (`<owner>:<key>`), oldest first. */
  readonly recentKeys: ReadonlyArray<string>
  readonly archivedAt: Date | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

const initial: ProductState = {
  status: "none",
  productId: "",
  name: "",
  description: null,
  sku: null,
  price: { amount: 0, currency: "USD", type: "one_time", recurring: null },
  priceVersion: 0,
  images: [],
  metadata: {},
  inventory: {
    tracked: false,
    stockedQuantity: 0,
    reservedQuantity: 0,
    lowStockThreshold: 5,
    allowBackorder: false
  },
  holds: HashMap.empty(),
  recentKeys: [],
  archivedAt: null,
  createdAt: new Date(0),
  updatedAt: new Date(0)
}

export const availableQuantity = (inventory: Inventory) =>
  inventory.stockedQuantity - inventory.reservedQuantity

/**
 * The level of a tracked product (untracked ones have none and never publish inventory events):
 * out of stock at 0 or below (backorders), low at or below the threshold, else in stock.
 */
export const stockLevel = (inventory: Inventory): StockLevel | undefined => {
  if (!inventory.tracked) return undefined
  const available = availableQuantity(inventory)
  if (available <= 0) return "out_of_stock"
  return available <= inventory.lowStockThreshold ? "low_stock" : "in_stock"
}

/**
 * Which level changes publish (research §2.2): into low stock only from in stock (out of stock →
 * low is a restock), out of stock from anywhere, restocked out of it; low → in stock publishes
 * nothing but re-arms `low_stock` for the next dip.
 */
export const crossingEvent = (
  from: StockLevel,
  to: StockLevel
): "inventory.low_stock" | "inventory.out_of_stock" | "inventory.restocked" | undefined => {
  if (from === to) return undefined
  if (to === "out_of_stock") return "inventory.out_of_stock"
  if (from === "out_of_stock") return "inventory.restocked"
  return to === "low_stock" ? "inventory.low_stock" : undefined
}

// --- Commands -----------------------------------------------------------------------------------------

export interface NewProduct {
  readonly productId: string
  readonly name: string
  readonly description: string | null
  readonly sku: string | null
  readonly status: "draft" | "active"
  readonly price: PriceData
  readonly images: ReadonlyArray<string>
  readonly metadata: Metadata
  readonly inventory: {
    readonly tracked: boolean
    readonly stockedQuantity: number
    readonly lowStockThreshold: number
    readonly allowBackorder: boolean
  }
}

export interface ProductChanges {
  readonly name?: string
  readonly description?: string | null
  readonly sku?: string | null
  readonly status?: ProductStatus
  readonly price?: PriceData
  readonly images?: ReadonlyArray<string>
  readonly metadata?: MetadataPatch
  readonly tracked?: boolean
  readonly lowStockThreshold?: number
  readonly allowBackorder?: boolean
  /** Set the stock to this (mutually exclusive with `adjustBy`, checked by the request schema). */
  readonly stockedQuantity?: number
  /** Move the stock by this, against the latest state: never a read-modify-write by the client. */
  readonly adjustBy?: number
}

export type ProductCommand =
  | ({ readonly _tag: "Create" } & NewProduct)
  | { readonly _tag: "Update"; readonly changes: ProductChanges }
  | { readonly _tag: "Archive" }
  | { readonly _tag: "Reserve"; readonly ownerId: string; readonly quantity: number }
  | { readonly _tag: "Release"; readonly ownerId: string }
  | { readonly _tag: "Transfer"; readonly fromOwnerId: string; readonly toOwnerId: string }
  | {
      readonly _tag: "Consume"
      readonly ownerId: string
      readonly key: string
      /** Units shipped; the whole hold when absent. */
      readonly quantity?: number
    }
  | { readonly _tag: "Return"; readonly ownerId: string; readonly key: string; readonly quantity: number }

// --- Evolve -------------------------------------------------------------------------------------------

const withHold = (holds: HashMap.HashMap<string, number>, ownerId: string, quantity: number) =>
  quantity > 0 ? HashMap.set(holds, ownerId, quantity) : HashMap.remove(holds, ownerId)

/** The units `ownerId` holds, if it holds any. */
export const heldBy = (state: Pick<ProductState, "holds">, ownerId: string): number | undefined =>
  Option.getOrUndefined(HashMap.get(state.holds, ownerId))

const remember = (keys: ReadonlyArray<string>, key: string) =>
  keys.length < RECENT_KEYS ? [...keys, key] : [...keys.slice(keys.length - RECENT_KEYS + 1), key]

const withInventory = (state: ProductState, change: Partial<Inventory>): ProductState => ({
  ...state,
  inventory: { ...state.inventory, ...change }
})

const evolve = (state: ProductState, event: Recorded<ProductEvent> | ProductEvent): ProductState => {
  // Events being decided have no `recordedAt` yet; the runner folds recorded ones.
  const at = "recordedAt" in event ? event.recordedAt : state.updatedAt
  const inv = state.inventory
  switch (event.type) {
    case "product.created": {
      const d = event.data
      return {
        ...initial,
        status: d.status,
        productId: d.productId,
        name: d.name,
        description: d.description,
        sku: d.sku,
        price: d.price,
        priceVersion: 1,
        images: d.images,
        metadata: d.metadata,
        inventory: { ...d.inventory, reservedQuantity: 0 },
        createdAt: at,
        updatedAt: at
      }
    }
    case "product.updated": {
      const d = event.data
      const reopened = d.status !== undefined && d.status !== "archived"
      return {
        ...state,
        ...(d.name === undefined ? {} : { name: d.name }),
        ...(d.description === undefined ? {} : { description: d.description }),
        ...(d.sku === undefined ? {} : { sku: d.sku }),
        ...(d.status === undefined ? {} : { status: d.status }),
        ...(d.price === undefined ? {} : { price: d.price, priceVersion: state.priceVersion + 1 }),
        ...(d.images === undefined ? {} : { images: d.images }),
        ...(d.metadata === undefined ? {} : { metadata: d.metadata }),
        inventory: {
          ...inv,
          ...(d.tracked === undefined ? {} : { tracked: d.tracked }),
          ...(d.lowStockThreshold === undefined ? {} : { lowStockThreshold: d.lowStockThreshold }),
          ...(d.allowBackorder === undefined ? {} : { allowBackorder: d.allowBackorder }),
          ...(d.stockedQuantity === undefined ? {} : { stockedQuantity: d.stockedQuantity })
        },
        archivedAt: d.status === "archived" ? at : reopened ? null : state.archivedAt,
        updatedAt: at
      }
    }
    case "product.archived":
      return { ...state, status: "archived", archivedAt: at, updatedAt: at }
    case "product.stock_reserved":
      return {
        ...withInventory(state, { reservedQuantity: inv.reservedQuantity + event.data.quantity }),
        holds: withHold(
          state.holds,
          event.data.ownerId,
          (heldBy(state, event.data.ownerId) ?? 0) + event.data.quantity
        )
      }
    case "product.reservation_released":
      return {
        ...withInventory(state, { reservedQuantity: inv.reservedQuantity - event.data.quantity }),
        holds: withHold(state.holds, event.data.ownerId, 0)
      }
    case "product.reservation_transferred": {
      const d = event.data
      const moved = withHold(state.holds, d.fromOwnerId, 0)
      return {
        ...state,
        holds: withHold(moved, d.toOwnerId, (heldBy({ holds: moved }, d.toOwnerId) ?? 0) + d.quantity)
      }
    }
    case "product.stock_consumed": {
      const d = event.data
      return {
        ...withInventory(state, {
          stockedQuantity: Math.max(0, inv.stockedQuantity - d.quantity),
          reservedQuantity: inv.reservedQuantity - d.fromHold
        }),
        holds: withHold(state.holds, d.ownerId, (heldBy(state, d.ownerId) ?? 0) - d.fromHold),
        recentKeys: remember(state.recentKeys, `${d.ownerId}:${d.key}`)
      }
    }
    case "product.stock_returned": {
      const d = event.data
      return {
        ...withInventory(state, { stockedQuantity: inv.stockedQuantity + d.quantity }),
        recentKeys: remember(state.recentKeys, `${d.ownerId}:${d.key}`)
      }
    }
    case "product.stock_level_changed":
      return state
  }
}

// --- Decide -------------------------------------------------------------------------------------------

const sameJson = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b)

const invalid = (field: string, message: string) => Effect.fail(new ProductChangeInvalid({ field, message }))

/** Appends the level crossing, if the events cross one (decided against the state they start from). */
const withCrossing = (
  state: ProductState,
  events: ReadonlyArray<ProductEvent>
): ReadonlyArray<ProductEvent> => {
  if (events.length === 0) return events
  const before = stockLevel(state.inventory)
  const after = stockLevel(events.reduce(evolve, state).inventory)
  if (before === undefined || after === undefined || before === after) return events
  return [
    ...events,
    StockLevelChanged.make({ productId: state.productId, previousLevel: before, level: after })
  ]
}

const update = (
  state: ProductState,
  changes: ProductChanges
): Effect.Effect<ReadonlyArray<ProductEvent>, ProductChangeInvalid | ProductInUse> => {
  const changed: {
    -readonly [K in keyof typeof ProductUpdated.schema.Type]?: (typeof ProductUpdated.schema.Type)[K]
  } = {}
  if (changes.name !== undefined && changes.name !== state.name) changed.name = changes.name
  if (changes.description !== undefined && changes.description !== state.description)
    changed.description = changes.description
  if (changes.sku !== undefined && changes.sku !== state.sku) changed.sku = changes.sku
  if (changes.status !== undefined && changes.status !== state.status) {
    if (changes.status === "archived" && HashMap.size(state.holds) > 0)
      return Effect.fail(
        new ProductInUse({ productId: state.productId, reservedQuantity: state.inventory.reservedQuantity })
      )
    changed.status = changes.status
  }
  if (changes.price !== undefined && !sameJson(changes.price, state.price)) changed.price = changes.price
  if (changes.images !== undefined && !sameJson(changes.images, state.images)) changed.images = changes.images
  if (changes.metadata !== undefined) {
    const metadata = applyMetadataPatch(state.metadata, changes.metadata)
    const problem = metadataProblem(metadata)
    if (problem) return invalid("metadata", problem)
    if (!sameJson(metadata, state.metadata)) changed.metadata = metadata
  }
  const inv = state.inventory
  if (changes.tracked !== undefined && changes.tracked !== inv.tracked) changed.tracked = changes.tracked
  if (changes.lowStockThreshold !== undefined && changes.lowStockThreshold !== inv.lowStockThreshold)
    changed.lowStockThreshold = changes.lowStockThreshold
  if (changes.allowBackorder !== undefined && changes.allowBackorder !== inv.allowBackorder)
    changed.allowBackorder = changes.allowBackorder
  const stockField = changes.adjustBy !== undefined ? "inventory.adjustBy" : "inventory.stockedQuantity"
  const stocked =
    changes.adjustBy !== undefined ? inv.stockedQuantity + changes.adjustBy : changes.stockedQuantity
  if (stocked !== undefined) {
    if (stocked < 0) return invalid(stockField, `stock cannot go below 0 (it is ${inv.stockedQuantity})`)
    // The limit a stock set or created is held to holds for one reached by adjustments too.
    if (stocked > MAX_QUANTITY)
      return invalid(stockField, `stock cannot exceed ${MAX_QUANTITY} (it would be ${stocked})`)
    const backorders = changes.allowBackorder ?? inv.allowBackorder
    if (stocked < inv.reservedQuantity && !backorders)
      return invalid(
        stockField,
        `stock cannot go below the ${inv.reservedQuantity} units reserved unless backorders are allowed (it would be ${stocked})`
      )
    if (stocked !== inv.stockedQuantity) {
      changed.stockedQuantity = stocked
      changed.stockDelta = stocked - inv.stockedQuantity
    }
  }
  // Turning backorders off with more reserved than stocked would leave available below 0 for good.
  if (
    changed.allowBackorder === false &&
    (changed.stockedQuantity ?? inv.stockedQuantity) < inv.reservedQuantity
  )
    return invalid(
      "inventory.allowBackorder",
      "more units are reserved than stocked: backorders cannot be turned off"
    )
  if (Object.keys(changed).length === 0) return Effect.succeed([])
  return Effect.succeed(
    withCrossing(state, [ProductUpdated.make({ productId: state.productId, ...changed })])
  )
}

const decide = (
  command: ProductCommand,
  state: ProductState
): Effect.Effect<ReadonlyArray<ProductEvent>, ProductError> => {
  if (command._tag === "Create") {
    if (state.status !== "none") return Effect.succeed([])
    const metadata = applyMetadataPatch({}, command.metadata)
    const problem = metadataProblem(metadata)
    if (problem) return invalid("metadata", problem)
    const { _tag, ...product } = command
    return Effect.succeed([ProductCreated.make({ ...product, metadata })])
  }
  if (state.status === "none") return Effect.fail(new ProductNotFound({ productId: state.productId }))
  const productId = state.productId
  const inv = state.inventory
  switch (command._tag) {
    case "Update":
      return update(state, command.changes)
    case "Archive":
      if (state.status === "archived") return Effect.succeed([])
      if (HashMap.size(state.holds) > 0)
        return Effect.fail(new ProductInUse({ productId, reservedQuantity: inv.reservedQuantity }))
      return Effect.succeed([ProductArchived.make({ productId })])
    case "Reserve": {
      if (state.status !== "active")
        return Effect.fail(new ProductUnavailable({ productId, status: state.status }))
      // Idempotent per owner: a retried reservation holds nothing more.
      if (heldBy(state, command.ownerId) !== undefined) return Effect.succeed([])
      // Untracked products are unlimited (Medusa's manage_inventory off): nothing to hold.
      if (!inv.tracked) return Effect.succeed([])
      const available = availableQuantity(inv)
      if (!inv.allowBackorder && command.quantity > available)
        return Effect.fail(
          new InsufficientStock({ productId, requested: command.quantity, available: Math.max(0, available) })
        )
      return Effect.succeed(
        withCrossing(state, [
          StockReserved.make({ productId, ownerId: command.ownerId, quantity: command.quantity })
        ])
      )
    }
    case "Release": {
      const held = heldBy(state, command.ownerId)
      if (held === undefined) return Effect.succeed([])
      return Effect.succeed(
        withCrossing(state, [
          ReservationReleased.make({ productId, ownerId: command.ownerId, quantity: held })
        ])
      )
    }
    case "Transfer": {
      const held = heldBy(state, command.fromOwnerId)
      if (held === undefined || command.fromOwnerId === command.toOwnerId) return Effect.succeed([])
      return Effect.succeed([
        ReservationTransferred.make({
          productId,
          fromOwnerId: command.fromOwnerId,
          toOwnerId: command.toOwnerId,
          quantity: held
        })
      ])
    }
    case "Consume": {
      if (state.recentKeys.includes(`${command.ownerId}:${command.key}`)) return Effect.succeed([])
      const held = heldBy(state, command.ownerId) ?? 0
      // Untracked stock is not counted: shipping it (unheld) changes nothing.
      if (!inv.tracked && held === 0) return Effect.succeed([])
      const quantity = command.quantity ?? held
      if (quantity <= 0) return Effect.succeed([])
      const fromHold = Math.min(quantity, held)
      // Units beyond the hold come out of what is available: never out of other owners' holds.
      const beyond = quantity - fromHold
      const available = availableQuantity(inv)
      if (inv.tracked && !inv.allowBackorder && beyond > Math.max(0, available))
        return Effect.fail(
          new InsufficientStock({ productId, requested: quantity, available: held + Math.max(0, available) })
        )
      return Effect.succeed(
        withCrossing(state, [
          StockConsumed.make({ productId, ownerId: command.ownerId, key: command.key, quantity, fromHold })
        ])
      )
    }
    case "Return": {
      if (state.recentKeys.includes(`${command.ownerId}:${command.key}`)) return Effect.succeed([])
      if (command.quantity <= 0 || !inv.tracked) return Effect.succeed([])
      return Effect.succeed(
        withCrossing(state, [
          StockReturned.make({
            productId,
            ownerId: command.ownerId,
            key: command.key,
            quantity: command.quantity
          })
        ])
      )
    }
  }
}

// --- Public snapshots -------------------------------------------------------------------------------

/** The `/v1` product object (and every `product.*` event's data): the state as of an event. */
export const productSnapshot = (state: ProductState) => ({
  object: "product" as const,
  id: state.productId,
  name: state.name,
  description: state.description,
  sku: state.sku,
  status: state.status === "none" ? ("draft" as const) : state.status,
  price: { ...state.price, version: state.priceVersion },
  inventory: {
    tracked: state.inventory.tracked,
    stockedQuantity: state.inventory.stockedQuantity,
    reservedQuantity: state.inventory.reservedQuantity,
    availableQuantity: availableQuantity(state.inventory),
    lowStockThreshold: state.inventory.lowStockThreshold,
    allowBackorder: state.inventory.allowBackorder
  },
  images: state.images,
  metadata: state.metadata,
  deletedAt: state.archivedAt === null ? null : state.archivedAt.toISOString(),
  createdAt: state.createdAt.toISOString(),
  updatedAt: state.updatedAt.toISOString()
})

/** The payload of `inventory.*` events (research §2.2). */
export const inventorySnapshot = (state: ProductState, previousState: StockLevel, level: StockLevel) => ({
  productId: state.productId,
  sku: state.sku,
  stockedQuantity: state.inventory.stockedQuantity,
  reservedQuantity: state.inventory.reservedQuantity,
  availableQuantity: availableQuantity(state.inventory),
  lowStockThreshold: state.inventory.lowStockThreshold,
  previousState,
  state: level
})

// --- Snapshots of long streams ---------------------------------------------------------------------

/**
 * A hot product's stream grows by two events per checkout (reserve, then release or transfer and
 * consume): loading it is kept short by a snapshot every 100 events.
 */
const StateSchema = Schema.Struct({
  status: Schema.Literal("none", "draft", "active", "archived"),
  productId: Schema.String,
  name: Schema.String,
  description: Schema.NullOr(Schema.String),
  sku: Schema.NullOr(Schema.String),
  price: PriceData,
  priceVersion: Schema.Number,
  images: Schema.Array(Schema.String),
  metadata: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  inventory: Schema.Struct({
    tracked: Schema.Boolean,
    stockedQuantity: Schema.Number,
    reservedQuantity: Schema.Number,
    lowStockThreshold: Schema.Number,
    allowBackorder: Schema.Boolean
  }),
  holds: Schema.HashMap({ key: Schema.String, value: Schema.Number }),
  recentKeys: Schema.Array(Schema.String),
  archivedAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
})

export const ProductDecider = defineDecider({
  streamType: "product",
  events: productEventTypes,
  initialState: initial,
  evolve,
  decide,
  snapshot: snapshotPolicy(StateSchema, { every: 100, version: 2 }),
  publicEvents: (event, state) => {
    switch (event.type) {
      case "product.created":
        return [{ type: "product.created", data: productSnapshot(state) }]
      case "product.updated":
        return [{ type: "product.updated", data: productSnapshot(state) }]
      case "product.archived":
        return [{ type: "product.deleted", data: productSnapshot(state) }]
      case "product.stock_level_changed": {
        const type = crossingEvent(event.data.previousLevel, event.data.level)
        return type === undefined
          ? []
          : [{ type, data: inventorySnapshot(state, event.data.previousLevel, event.data.level) }]
      }
      default:
        // Reservation movements are not product changes: only their crossings publish.
        return []
    }
  }
})
