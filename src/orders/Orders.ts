/**
 * The orders use cases behind `/v1/orders`. Each write is ONE transaction: the order's command and
 * what it causes in the catalog (fulfilment consumes the order's stock hold, cancellation releases
 * it) commit together or not at all. Shoppers (role `customer`) see their own orders only; another's
 * is 404, exactly like an unknown id.
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { CatalogPort } from "../catalog/index.js"
import type { AppConfig } from "../config.js"
import { withTransactionState } from "../db/Sql.js"
import type { AuthenticatedActor } from "../http/Auth.js"
import { BadRequest, Conflict, NotFound, orDieUnlessHttp } from "../http/errors.js"
import { cachedLookup } from "../http/FastRoutes.js"
import { CommandRunner, isConcurrencyConflict } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import { commandMetadata, makeTransact } from "../kernel/UseCase.js"
import type { PaymentsPort } from "../payments/index.js"
import { DueWork } from "../processors/DueWork.js"
import type { CancelRequest, FulfillRequest, OrderListParams, RefundRequest } from "./Api.js"
import { type CachedOrder, OrderCache } from "./cache.js"
import {
  FulfillmentNotFound,
  FulfillmentQuantityExceeded,
  type OrderCommand,
  OrderNotCancellable,
  OrderNotFound,
  OrderNotFulfillable,
  OrderNotRefundable,
  orderStream,
  RefundAmountTooLarge,
  UnknownLineItem
} from "./decider.js"
import { OrderDecider, type OrderObject, orderObject } from "./objects.js"
import { listOrders, selectOrder } from "./queries.js"
import { armRefund, catalogLines, payRefund, REFUND_KIND, recordRefundOutcome } from "./refunds.js"

const notFound = NotFound.of({ message: "No such order", param: "id" })

const isShopper = (actor: AuthenticatedActor) => actor.role === "customer"

/** Staff see every order; a shopper only their own (another's: 404). */
const visible = (actor: AuthenticatedActor, order: { readonly customerId: string | null }) =>
  !isShopper(actor) || (order.customerId !== null && order.customerId === actor.customerId)

/** One mapper for the decider's refusals. */
export const domainErrors = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.mapError(effect, (e): E | NotFound | BadRequest | Conflict => {
    if (e instanceof OrderNotFound) return notFound
    if (e instanceof FulfillmentNotFound)
      return NotFound.of({ message: `No such fulfilment: ${e.fulfillmentId}`, param: "fid" })
    if (e instanceof OrderNotFulfillable)
      return Conflict.of({
        code: "order_not_fulfillable",
        message: `the order cannot be fulfilled: ${e.reason} (status ${e.status})`
      })
    if (e instanceof FulfillmentQuantityExceeded)
      return BadRequest.of({
        code: "fulfillment_quantity_exceeded",
        message: `line ${e.lineItemId} has ${e.remaining} units left to fulfil; ${e.requested} were asked for`,
        param: `items[${e.index}].quantity`
      })
    if (e instanceof UnknownLineItem)
      return BadRequest.of({
        code: "parameter_invalid",
        message: `the order has no line ${e.reference}`,
        param: `items[${e.index}]`
      })
    if (e instanceof OrderNotCancellable)
      return Conflict.of({
        code: "order_not_cancellable",
        message: `the order cannot be cancelled: ${e.reason} (status ${e.status})`
      })
    if (e instanceof OrderNotRefundable)
      return Conflict.of({
        code: "order_not_refundable",
        message: `the order cannot be refunded: ${e.reason} (status ${e.status})`
      })
    if (e instanceof RefundAmountTooLarge)
      return BadRequest.of({
        code: "amount_too_large",
        message: `${e.requested} is more than remains refundable (${e.refundable})`,
        param: e.field
      })
    return e
  })

export const makeOrders = Effect.gen(function* () {
  const runner = yield* CommandRunner
  const transact = yield* makeTransact
  const sql = yield* SqlClient.SqlClient
  const catalog = yield* CatalogPort
  const work = yield* DueWork
  const services = yield* Effect.context<PaymentsPort | AppConfig>()
  const cache = yield* OrderCache

  /** Malformed and foreign-prefixed ids are unknown ids: 404. */
  const validId = (id: string) => (Ids.isValid("ord", id) ? Effect.succeed(id) : Effect.fail(notFound))

  const get = (actor: AuthenticatedActor, id: string) =>
    Effect.gen(function* () {
      const orderId = yield* validId(id)
      const found = yield* selectOrder(sql, orderId)
      if (Option.isNone(found) || !visible(actor, found.value)) return yield* notFound
      return found.value
    }).pipe(orDieUnlessHttp)

  /** `get`'s answer as `encode` writes it, from the order cache (orders/cache.ts). */
  const getEncoded = (actor: AuthenticatedActor, id: string, encode: (order: OrderObject) => Uint8Array) =>
    Effect.flatMap(validId(id), (orderId) =>
      cachedLookup({
        cache,
        id: orderId,
        load: selectOrder(sql, orderId),
        cached: (order): CachedOrder => ({ customerId: order.customerId, bytes: encode(order) }),
        visible: (order) => visible(actor, order),
        notFound
      })
    ).pipe(orDieUnlessHttp)

  const list = (actor: AuthenticatedActor, params: OrderListParams) => {
    const { status, customerId, email, createdAfter, createdBefore, ...page } = params
    // A shopper lists only their own orders, whatever filter they send.
    const owner = isShopper(actor) ? { owner: actor.customerId ?? "" } : { customerId }
    return listOrders(sql, { status, ...owner, email, createdAfter, createdBefore }, page).pipe(
      orDieUnlessHttp
    )
  }

  const execute = (orderId: string, command: OrderCommand, actor: AuthenticatedActor) =>
    Effect.flatMap(commandMetadata(actor), (metadata) =>
      runner.execute(OrderDecider, orderStream(orderId), command, { metadata })
    )

  const fulfill = (actor: AuthenticatedActor, id: string, body: FulfillRequest) =>
    Effect.gen(function* () {
      const orderId = yield* validId(id)
      const fulfillmentId = yield* Ids.make("ful")
      const metadata = yield* commandMetadata(actor)
      const result = yield* transact(
        Effect.gen(function* () {
          const result = yield* execute(
            orderId,
            {
              _tag: "Fulfill",
              fulfillmentId,
              items: body.items,
              trackingNumber: body.trackingNumber ?? null,
              trackingUrl: body.trackingUrl ?? null,
              carrier: body.carrier ?? null
            },
            actor
          )
          const created = result.events.find((e) => e.type === "order.fulfillment_created")
          if (created !== undefined && created.type === "order.fulfillment_created") {
            // The units leave the building: the order's hold (and, beyond it, available stock).
            yield* catalog.consume(
              orderId,
              { key: fulfillmentId, lines: catalogLines(result.state, created.data.items) },
              metadata
            )
          }
          return result
        })
      ).pipe(
        domainErrors,
        Effect.catchTags({
          InsufficientStock: (e) =>
            Effect.fail(
              Conflict.of({
                code: "insufficient_stock",
                message: `product ${e.productId} has ${e.available} units available; ${e.requested} are to ship`,
                param: `items[${e.line}].quantity`
              })
            ),
          ReservationLineInvalid: Effect.die
        })
      )
      return orderObject(result.state)
    }).pipe(orDieUnlessHttp)

  const updateFulfillment = (actor: AuthenticatedActor, id: string, fid: string) =>
    Effect.gen(function* () {
      const orderId = yield* validId(id)
      if (!Ids.isValid("ful", fid))
        return yield* NotFound.of({ message: `No such fulfilment: ${fid}`, param: "fid" })
      const result = yield* execute(orderId, { _tag: "Deliver", fulfillmentId: fid }, actor).pipe(
        Effect.catchTags({
          OrderNotFound: () => Effect.fail(notFound),
          FulfillmentNotFound: () =>
            Effect.fail(NotFound.of({ message: `No such fulfilment: ${fid}`, param: "fid" }))
        })
      )
      return orderObject(result.state)
    }).pipe(orDieUnlessHttp)

  /**
   * A command that may start a refund (cancel, refund): step 1 — the order's change (a cancelled
   * order's whole hold is released with it) and the refund's safety net, in one transaction — then
   * the payments call and its record, with the stock a successful refund moves (steps 2 and 3,
   * refunds.ts). Answers the order as it then stands.
   */
  const withRefund = (actor: AuthenticatedActor, orderId: string, command: OrderCommand) =>
    Effect.gen(function* () {
      const metadata = yield* commandMetadata(actor)
      const started = yield* hot(
        transact(
          Effect.gen(function* () {
            const result = yield* execute(orderId, command, actor)
            // Units refunded by line stay in the hold (counted as refunded: they will not ship)
            // until the money is back: a refund the payment refuses moves no stock (refunds.ts).
            if (result.events.some((e) => e.type === "order.cancelled"))
              yield* catalog.release(orderId, metadata)
            const startedRefund = result.events.find((e) => e.type === "order.refund_started")
            const refund =
              startedRefund === undefined || startedRefund.type !== "order.refund_started"
                ? undefined
                : result.state.refunds.find((r) => r.id === startedRefund.data.refundId)
            if (refund !== undefined) yield* armRefund(orderId, refund)
            return { state: result.state, refund }
          })
        )
      )
      const refund = started.refund
      if (refund === undefined) return orderObject(started.state)
      const outcome = yield* payRefund(started.state, refund).pipe(Effect.provide(services))
      // Unanswered: the refund stays pending and the worker asks again.
      if (Option.isNone(outcome)) return orderObject(started.state)
      const recorded = yield* hot(
        transact(
          Effect.gen(function* () {
            // The safety net's row before the order's stream, as the refund worker takes them
            // (DueWork.complete, then its writes): the opposite order deadlocked under a storm.
            yield* work.cancel(REFUND_KIND, refund.key)
            const result = yield* recordRefundOutcome(orderId, outcome.value, metadata)
            return result.state
          })
        )
      ).pipe(
        // Writers of the order kept winning the race (a storm of refunds): the payment is made and
        // the worker records it; the client gets the order as it stands (refund pending), not a 500.
        Effect.catchIf(isConcurrencyConflict, () =>
          Effect.as(
            Effect.logWarning(
              `orders: refund ${refund.key} answered but not recorded yet; the worker records it`
            ),
            started.state
          )
        )
      )
      return orderObject(recorded)
    })

  /**
   * A hot order (many concurrent refunds) may lose `transact`'s five attempts: when this use case owns
   * its transaction it runs it again a few more times (inside a caller's, the caller's owner retries).
   */
  const hot = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    withTransactionState((joined) =>
      joined ? effect : Effect.retry(effect, { while: isConcurrencyConflict, times: 10 })
    )

  const cancel = (actor: AuthenticatedActor, id: string, body: CancelRequest) =>
    Effect.gen(function* () {
      const orderId = yield* validId(id)
      const refundId = yield* Ids.make("re")
      return yield* withRefund(actor, orderId, {
        _tag: "Cancel",
        reason: body.reason ?? null,
        refundId
      }).pipe(domainErrors)
    }).pipe(orDieUnlessHttp)

  const refund = (actor: AuthenticatedActor, id: string, body: RefundRequest) =>
    Effect.gen(function* () {
      const orderId = yield* validId(id)
      const refundId = yield* Ids.make("re")
      return yield* withRefund(actor, orderId, {
        _tag: "Refund",
        refundId,
        amount: body.amount,
        reason: body.reason ?? null,
        items: body.items,
        restock: body.restock ?? false
      }).pipe(domainErrors)
    }).pipe(orDieUnlessHttp)

  return { get, getEncoded, list, fulfill, updateFulfillment, cancel, refund }
})

export type OrdersShape = Effect.Effect.Success<typeof makeOrders>

export class Orders extends Context.Tag("orders/Orders")<Orders, OrdersShape>() {}

export const OrdersLive = Layer.effect(Orders, makeOrders)
