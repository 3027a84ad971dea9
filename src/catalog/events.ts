/**
 * Catalog events: one stream per product (`product-<id>`), inventory and its reservations included,
 * so every stock movement is decided against the product's whole state and ordered by its stream's
 * version (the optimistic-concurrency guard of the event store). Nothing here is personal data.
 */
import { Schema } from "effect"
import { defineEvent, type EventOf } from "../eventstore/EventType.js"
import { Metadata } from "../kernel/Metadata.js"

export const PRODUCT_STATUSES = ["draft", "active", "archived"] as const
export const ProductStatus = Schema.Literal(...PRODUCT_STATUSES)
export type ProductStatus = typeof ProductStatus.Type

export const PRICE_TYPES = ["one_time", "recurring"] as const
export const INTERVALS = ["day", "week", "month", "year"] as const
export const AGGREGATIONS = ["sum", "count", "max", "last", "unique_count"] as const

/** Quantities and amounts stay far inside a PostgreSQL bigint and a JS safe integer. */
export const MAX_QUANTITY = 1_000_000_000
export const MAX_AMOUNT = 99_999_999_999

/** Where `availableQuantity` stands against 0 and the threshold (research §2.2). */
export const STOCK_LEVELS = ["in_stock", "low_stock", "out_of_stock"] as const
export const StockLevel = Schema.Literal(...STOCK_LEVELS)
export type StockLevel = typeof StockLevel.Type

export const UsagePriceData = Schema.Struct({
  meter: Schema.String,
  aggregation: Schema.Literal(...AGGREGATIONS),
  unitAmount: Schema.Number,
  includedUnits: Schema.Number,
  /** The `properties` key `unique_count` counts distinct values of (absent in older events, and for other aggregations). */
  uniqueKey: Schema.optional(Schema.String)
})

export const RecurringData = Schema.Struct({
  interval: Schema.Literal(...INTERVALS),
  intervalCount: Schema.Number,
  trialPeriodDays: Schema.NullOr(Schema.Number),
  usage: Schema.NullOr(UsagePriceData)
})

/**
 * The product's price as recorded: every event that sets it carries the whole price (never a
 * delta), so what an order or subscription snapshots is exactly what a replay shows at that version.
 */
export const PriceData = Schema.Struct({
  amount: Schema.Number,
  currency: Schema.String,
  type: Schema.Literal(...PRICE_TYPES),
  recurring: Schema.NullOr(RecurringData)
})
export type PriceData = typeof PriceData.Type

/** Inventory settings (reserved and available quantities follow from the reservation events). */
export const InventorySettings = Schema.Struct({
  tracked: Schema.Boolean,
  stockedQuantity: Schema.Number,
  lowStockThreshold: Schema.Number,
  allowBackorder: Schema.Boolean
})

export const ProductCreated = defineEvent("product.created", {
  schema: Schema.Struct({
    productId: Schema.String,
    name: Schema.String,
    description: Schema.NullOr(Schema.String),
    sku: Schema.NullOr(Schema.String),
    status: Schema.Literal("draft", "active"),
    price: PriceData,
    images: Schema.Array(Schema.String),
    metadata: Metadata,
    inventory: InventorySettings
  })
})

/**
 * A PATCH: only the fields that changed, each with its whole new value (`metadata` merged, `price`
 * whole). A stock change records the resulting `stockedQuantity` and the `stockDelta` that led there.
 */
export const ProductUpdated = defineEvent("product.updated", {
  schema: Schema.Struct({
    productId: Schema.String,
    name: Schema.optional(Schema.String),
    description: Schema.optional(Schema.NullOr(Schema.String)),
    sku: Schema.optional(Schema.NullOr(Schema.String)),
    status: Schema.optional(ProductStatus),
    price: Schema.optional(PriceData),
    images: Schema.optional(Schema.Array(Schema.String)),
    metadata: Schema.optional(Metadata),
    tracked: Schema.optional(Schema.Boolean),
    lowStockThreshold: Schema.optional(Schema.Number),
    allowBackorder: Schema.optional(Schema.Boolean),
    stockedQuantity: Schema.optional(Schema.Number),
    stockDelta: Schema.optional(Schema.Number)
  })
})

/** `DELETE /v1/products/:id`: archived, still readable by id. */
export const ProductArchived = defineEvent("product.archived", {
  schema: Schema.Struct({ productId: Schema.String })
})

/** `quantity` units held for `ownerId` (a checkout, later an order). */
export const StockReserved = defineEvent("product.stock_reserved", {
  schema: Schema.Struct({ productId: Schema.String, ownerId: Schema.String, quantity: Schema.Number })
})

/** The owner's whole hold given back (checkout expired or cancelled, order cancelled). */
export const ReservationReleased = defineEvent("product.reservation_released", {
  schema: Schema.Struct({ productId: Schema.String, ownerId: Schema.String, quantity: Schema.Number })
})

/** A checkout's hold now belongs to its order (no expiry any more). */
export const ReservationTransferred = defineEvent("product.reservation_transferred", {
  schema: Schema.Struct({
    productId: Schema.String,
    fromOwnerId: Schema.String,
    toOwnerId: Schema.String,
    quantity: Schema.Number
  })
})

/**
 * Fulfilment: `quantity` units left the building. `fromHold` of them were held by the owner, so
 * stocked drops by `quantity` and reserved by `fromHold`. `key` (the fulfilment) makes it once-only.
 */
export const StockConsumed = defineEvent("product.stock_consumed", {
  schema: Schema.Struct({
    productId: Schema.String,
    ownerId: Schema.String,
    key: Schema.String,
    quantity: Schema.Number,
    fromHold: Schema.Number
  })
})

/** A refund with restock: `quantity` units back on the shelf. `key` (the refund) makes it once-only. */
export const StockReturned = defineEvent("product.stock_returned", {
  schema: Schema.Struct({
    productId: Schema.String,
    ownerId: Schema.String,
    key: Schema.String,
    quantity: Schema.Number
  })
})

/**
 * The stock level crossed a boundary (COMMERCE decision 8): recorded by the decision that caused
 * it, so the crossing is published exactly once however the log is replayed.
 */
export const StockLevelChanged = defineEvent("product.stock_level_changed", {
  schema: Schema.Struct({ productId: Schema.String, previousLevel: StockLevel, level: StockLevel })
})

export const productEventTypes = [
  ProductCreated,
  ProductUpdated,
  ProductArchived,
  StockReserved,
  ReservationReleased,
  ReservationTransferred,
  StockConsumed,
  StockReturned,
  StockLevelChanged
] as const

export type ProductEvent = EventOf<(typeof productEventTypes)[number]>
