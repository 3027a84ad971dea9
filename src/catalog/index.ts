/**
 * The catalog context's public face: the stock reservations other contexts run inside their own
 * transaction (`CatalogPort`: checkout reserves at creation, orders convert, fulfil and restock),
 * the product lookup they snapshot prices from, and the public event schemas. Nothing else of
 * `catalog/` is imported from outside it. The port is implemented in `port.ts`.
 */
import { Context, Data, type Effect, type Option } from "effect"
import type { EventMetadata } from "../eventstore/EventStore.js"
import type { CommandError } from "../kernel/CommandRunner.js"
import type { ProductView } from "./queries.js"

export * from "./events.js"
export type { ProductView } from "./queries.js"

/** One line of a reservation: `quantity` (an integer ≥ 1) units of a product. */
export interface ReservationLine {
  readonly productId: string
  readonly quantity: number
}

/** What an owner holds of a product after `reserve`, with the product as that reservation left it. */
export interface ReservedLine extends ReservationLine {
  readonly product: ProductView
}

/**
 * The line at `line` (index in the lines given; the first line of that product when several name
 * it) asks for more than is available, after summing that product's lines. Nothing was reserved.
 * Checkout answers 409 `insufficient_stock` with `param` `lineItems[<line>].quantity`.
 */
export class InsufficientStock extends Data.TaggedError("InsufficientStock")<{
  readonly line: number
  readonly productId: string
  readonly requested: number
  readonly available: number
}> {}

/** The line's product does not exist, or is a draft or archived. Nothing was reserved. */
export class ProductUnavailable extends Data.TaggedError("ProductUnavailable")<{
  readonly line: number
  readonly productId: string
  readonly reason: "not_found" | "draft" | "archived"
}> {}

/** The line itself is malformed (quantity not an integer ≥ 1). Nothing was reserved. */
export class ReservationLineInvalid extends Data.TaggedError("ReservationLineInvalid")<{
  readonly line: number
  readonly message: string
}> {}

export type ReservationError = InsufficientStock | ProductUnavailable | ReservationLineInvalid

/** Infrastructure failures of a port call (event store, SQL): the caller's transaction rolls back. */
export type CatalogPortError = CommandError<never>

/**
 * Stock operations for other contexts. Each joins the caller's transaction (or runs in its own), so
 * the reservation commits or rolls back with the checkout or order that asked for it, and each is
 * idempotent per owner: repeating it changes nothing.
 */
export interface CatalogPortShape {
  /**
   * Holds stock for `ownerId` (a checkout id), all lines or none: quantities of one product are
   * summed first, then every product is checked before anything is held. Untracked products
   * always succeed (nothing is held); backorder products always succeed. A repeated call for the
   * same owner holds nothing more. Answers what the owner now holds per product of the lines, with
   * each product as it now stands (under its row lock until the caller's transaction ends).
   */
  readonly reserve: (
    ownerId: string,
    lines: ReadonlyArray<ReservationLine>,
    metadata: EventMetadata
  ) => Effect.Effect<ReadonlyArray<ReservedLine>, ReservationError | CatalogPortError>
  /** Gives back everything `ownerId` holds (checkout expired or cancelled, order cancelled). */
  readonly release: (ownerId: string, metadata: EventMetadata) => Effect.Effect<void, CatalogPortError>
  /** Moves what checkout `ownerId` holds to order `orderId` (the hold no longer expires). */
  readonly convertToOrder: (
    ownerId: string,
    orderId: string,
    metadata: EventMetadata
  ) => Effect.Effect<void, CatalogPortError>
  /**
   * Fulfilment of `ownerId` (an order): the units leave, so stocked and reserved both drop. `lines`
   * absent = everything it holds. `key` (the fulfilment id) makes a repeat a no-op. Units beyond the
   * hold come out of available stock; more than that (without backorders) → `InsufficientStock`.
   * Untracked products (not held) change nothing.
   */
  readonly consume: (
    ownerId: string,
    input: { readonly key: string; readonly lines?: ReadonlyArray<ReservationLine> },
    metadata: EventMetadata
  ) => Effect.Effect<void, ReservationLineInvalid | InsufficientStock | CatalogPortError>
  /**
   * A refund with restock: the units are back in stock (tracked products). `key` (the refund id)
   * makes a repeat a no-op.
   */
  readonly restock: (
    ownerId: string,
    input: { readonly key: string; readonly lines: ReadonlyArray<ReservationLine> },
    metadata: EventMetadata
  ) => Effect.Effect<void, ReservationLineInvalid | InsufficientStock | CatalogPortError>
  /** A product as `GET /v1/products/:id` shows it (checkout snapshots its price and `price.version`). */
  readonly findProduct: (productId: string) => Effect.Effect<Option.Option<ProductView>, CatalogPortError>
}

export class CatalogPort extends Context.Tag("catalog/CatalogPort")<CatalogPort, CatalogPortShape>() {}
