/**
 * The products `GET /v1/products/:id` answers from memory (kernel/ReadCache.ts): each as its JSON
 * bytes and its status (shoppers see only active ones). Every append to a product's stream drops
 * its entry (the event store tells the cache, in the appending transaction: the catalog's use cases,
 * the reservations of checkouts); other processes' changes arrive through the cache's event-store
 * poll.
 */
import { Context, Layer } from "effect"
import { makeReadCache, type ReadCache } from "../kernel/ReadCache.js"
import type { ProductRow } from "./queries.js"

export interface CachedProduct {
  readonly status: ProductRow["status"]
  /** The product object as `GET /v1/products/:id` sends it. */
  readonly bytes: Uint8Array
}

export class ProductCache extends Context.Tag("catalog/ProductCache")<
  ProductCache,
  ReadCache<CachedProduct>
>() {}

/** Room for every product of a large store (about 1–2 kB each). */
const CAPACITY = 50_000

/** The streams it watches are indexed for its poll (migration 0029). */
export const productCacheOptions = { name: "products", capacity: CAPACITY, streamPrefix: "product-" }

export const ProductCacheLive = Layer.scoped(ProductCache, makeReadCache<CachedProduct>(productCacheOptions))
