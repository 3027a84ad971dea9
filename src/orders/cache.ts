/**
 * The orders `GET /v1/orders/:id` answers from memory (kernel/ReadCache.ts): each as its JSON bytes
 * and its customer (a shopper sees only their own). Every append to an order's stream drops its
 * entry (the event store tells the cache, whoever appended: a use case, the checkout's completion, a
 * refund's recovery); a customer's erasure, which anonymizes all their orders in the read model,
 * drops every entry. Other processes' changes arrive through the cache's event-store poll.
 */
import { Context, Layer } from "effect"
import { CustomerErased, customerStream } from "../customers/index.js"
import { makeReadCache, type ReadCache } from "../kernel/ReadCache.js"
import { orderStream } from "./decider.js"

export interface CachedOrder {
  /** null for a guest order (and once the customer was erased). */
  readonly customerId: string | null
  /** The order object as `GET /v1/orders/:id` sends it. */
  readonly bytes: Uint8Array
}

export class OrderCache extends Context.Tag("orders/OrderCache")<OrderCache, ReadCache<CachedOrder>>() {}

/** The recent orders a store is asked about (a few kB each). */
const CAPACITY = 10_000

/** The streams and events it watches are indexed for its poll (migration 0029). */
export const orderCacheOptions = {
  name: "orders",
  capacity: CAPACITY,
  streamPrefix: orderStream(""),
  clearOn: [{ streamPrefix: customerStream(""), eventType: CustomerErased.type }]
}

export const OrderCacheLive = Layer.scoped(OrderCache, makeReadCache<CachedOrder>(orderCacheOptions))
