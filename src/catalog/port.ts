/**
 * The catalog's port (`CatalogPort` in `index.ts`): stock reservations other contexts run inside
 * their transaction. Every operation locks the products' read-model rows in id order first, so
 * concurrent writers of one product queue in PostgreSQL and each decides on the latest version (no
 * storm of version conflicts, no deadlock between multi-product reservations), then decides per
 * product with the product decider, which alone knows whether stock suffices.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Either, Layer, Option } from "effect"
import type { EventMetadata } from "../eventstore/EventStore.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import { heldBy, type ProductCommand, ProductDecider, type ProductError, productStream } from "./decider.js"
import {
  CatalogPort,
  InsufficientStock,
  ProductUnavailable,
  type ReservationLine,
  ReservationLineInvalid,
  type ReservedLine
} from "./index.js"
import { lockedHoldsOf, lockProducts, productView, selectProduct, stateView } from "./queries.js"

/** Lines summed per product, in product-id order, each with the index of its first line. */
interface SummedLine extends ReservationLine {
  readonly line: number
}

const sumLines = (
  lines: ReadonlyArray<ReservationLine>
): Either.Either<ReadonlyArray<SummedLine>, ReservationLineInvalid> => {
  const byProduct = new Map<string, SummedLine>()
  for (const [line, l] of lines.entries()) {
    if (!Number.isSafeInteger(l.quantity) || l.quantity < 1)
      return Either.left(
        new ReservationLineInvalid({ line, message: "quantity must be an integer of at least 1" })
      )
    const seen = byProduct.get(l.productId)
    byProduct.set(l.productId, {
      productId: l.productId,
      quantity: (seen?.quantity ?? 0) + l.quantity,
      line: seen?.line ?? line
    })
  }
  return Either.right(
    [...byProduct.values()].sort((a, b) =>
      a.productId < b.productId ? -1 : a.productId > b.productId ? 1 : 0
    )
  )
}

const unavailable = (line: number, productId: string, status: string) =>
  new ProductUnavailable({
    line,
    productId,
    reason: status === "draft" ? "draft" : status === "archived" ? "archived" : "not_found"
  })

/** The decider's refusal of one summed line, as the port's typed error naming that line. */
const lineError = (line: SummedLine, error: ProductError) => {
  switch (error._tag) {
    case "InsufficientStock":
      return new InsufficientStock({
        line: line.line,
        productId: line.productId,
        requested: line.quantity,
        available: error.available
      })
    case "ProductUnavailable":
      return unavailable(line.line, line.productId, error.status)
    default:
      return unavailable(line.line, line.productId, "none")
  }
}

export const makeCatalogPort = Effect.gen(function* () {
  const runner = yield* CommandRunner
  const sql = yield* SqlClient.SqlClient

  const run = (productId: string, command: ProductCommand, metadata: EventMetadata) =>
    runner.execute(ProductDecider, productStream(productId), command, { metadata })

  /**
   * Runs a command on each product, in id order. A decider refusal here cannot happen for the
   * commands that need no stock (release, transfer, consume, restock of a product the owner held):
   * it would be a bug, so it is a defect.
   */
  const each = (
    lines: ReadonlyArray<{ readonly productId: string; readonly line?: number }>,
    command: (productId: string) => ProductCommand,
    metadata: EventMetadata,
    options: { readonly locked?: boolean } = {}
  ) =>
    Effect.gen(function* () {
      const valid = lines.filter((l) => Ids.isValid("prod", l.productId))
      if (options.locked !== true)
        yield* lockProducts(
          sql,
          valid.map((l) => l.productId)
        )
      for (const [index, l] of valid.entries()) {
        yield* run(l.productId, command(l.productId), metadata).pipe(
          // Nothing to give back or ship of a product that does not exist.
          Effect.catchTag("ProductNotFound", () => Effect.void),
          Effect.catchTags({
            // Only a fulfilment beyond its hold can meet this (more than is available besides).
            InsufficientStock: (e) =>
              Effect.fail(
                new InsufficientStock({
                  line: l.line ?? index,
                  productId: l.productId,
                  requested: e.requested,
                  available: e.available
                })
              ),
            ProductUnavailable: Effect.die,
            ProductInUse: Effect.die,
            ProductChangeInvalid: Effect.die
          })
        )
      }
    })

  const reserve = (ownerId: string, lines: ReadonlyArray<ReservationLine>, metadata: EventMetadata) =>
    runner.transact(
      Effect.gen(function* () {
        const summed = yield* sumLines(lines)
        for (const l of summed) {
          if (!Ids.isValid("prod", l.productId)) return yield* unavailable(l.line, l.productId, "none")
        }
        yield* lockProducts(
          sql,
          summed.map((l) => l.productId)
        )
        // All or nothing, whatever the caller does with a refusal: every line is decided against its
        // product's state before anything is appended (rows locked, so that state stays current).
        if (summed.length > 1) {
          for (const l of summed) {
            const { state } = yield* runner.load(ProductDecider, productStream(l.productId))
            const decided = yield* Effect.either(
              ProductDecider.decide({ _tag: "Reserve", ownerId, quantity: l.quantity }, state)
            )
            if (Either.isLeft(decided)) return yield* lineError(l, decided.left)
          }
        }
        const held: Array<ReservedLine> = []
        for (const l of summed) {
          const result = yield* run(
            l.productId,
            { _tag: "Reserve", ownerId, quantity: l.quantity },
            metadata
          ).pipe(
            Effect.catchTags({
              ProductNotFound: (e) => Effect.fail(lineError(l, e)),
              ProductUnavailable: (e) => Effect.fail(lineError(l, e)),
              InsufficientStock: (e) => Effect.fail(lineError(l, e)),
              ProductInUse: Effect.die,
              ProductChangeInvalid: Effect.die
            })
          )
          held.push({
            productId: l.productId,
            quantity: heldBy(result.state, ownerId) ?? 0,
            product: stateView(result.state)
          })
        }
        return held
      })
    )

  const release = (ownerId: string, metadata: EventMetadata) =>
    runner
      .transact(
        Effect.flatMap(lockedHoldsOf(sql, ownerId), (holds) =>
          each(holds, () => ({ _tag: "Release", ownerId }), metadata, { locked: true })
        )
      )
      .pipe(Effect.catchTag("InsufficientStock", Effect.die))

  const convertToOrder = (ownerId: string, orderId: string, metadata: EventMetadata) =>
    runner
      .transact(
        Effect.flatMap(lockedHoldsOf(sql, ownerId), (holds) =>
          each(holds, () => ({ _tag: "Transfer", fromOwnerId: ownerId, toOwnerId: orderId }), metadata, {
            locked: true
          })
        )
      )
      .pipe(Effect.catchTag("InsufficientStock", Effect.die))

  const consume = (
    ownerId: string,
    input: { readonly key: string; readonly lines?: ReadonlyArray<ReservationLine> },
    metadata: EventMetadata
  ) =>
    runner.transact(
      Effect.gen(function* () {
        if (input.lines === undefined) {
          const holds = yield* lockedHoldsOf(sql, ownerId)
          return yield* each(holds, () => ({ _tag: "Consume", ownerId, key: input.key }), metadata, {
            locked: true
          })
        }
        const summed = yield* sumLines(input.lines)
        const quantities = new Map(summed.map((l) => [l.productId, l.quantity]))
        return yield* each(
          summed,
          (productId) => ({
            _tag: "Consume",
            ownerId,
            key: input.key,
            quantity: quantities.get(productId) ?? 0
          }),
          metadata
        )
      })
    )

  const restock = (
    ownerId: string,
    input: { readonly key: string; readonly lines: ReadonlyArray<ReservationLine> },
    metadata: EventMetadata
  ) =>
    runner.transact(
      Effect.gen(function* () {
        const summed = yield* sumLines(input.lines)
        const quantities = new Map(summed.map((l) => [l.productId, l.quantity]))
        yield* each(
          summed,
          (productId) => ({
            _tag: "Return",
            ownerId,
            key: input.key,
            quantity: quantities.get(productId) ?? 0
          }),
          metadata
        )
      })
    )

  const findProduct = (productId: string) =>
    Ids.isValid("prod", productId)
      ? Effect.map(selectProduct(sql, productId), Option.map(productView))
      : Effect.succeed(Option.none())

  return CatalogPort.of({ reserve, release, convertToOrder, consume, restock, findProduct })
})

export const CatalogPortLive = Layer.effect(CatalogPort, makeCatalogPort)
