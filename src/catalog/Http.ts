/** Handlers of `/v1/products`: each hands the request to `Catalog` with the current actor. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { CurrentActor } from "../http/Auth.js"
import { encodeJson, fastGet } from "../http/FastRoutes.js"
import { CatalogRoutes, Product } from "./Api.js"
import { Catalog } from "./Catalog.js"

export const CatalogHttpLive = HttpApiBuilder.group(CatalogRoutes, "products", (handlers) =>
  Effect.gen(function* () {
    const catalog = yield* Catalog
    const withActor = <A, E, R>(f: (actor: typeof CurrentActor.Service) => Effect.Effect<A, E, R>) =>
      Effect.flatMap(CurrentActor, f)
    return handlers
      .handle("create", ({ payload }) => withActor((actor) => catalog.create(actor, payload)))
      .handle("list", ({ urlParams }) => withActor((actor) => catalog.list(actor, urlParams)))
      .handle("get", ({ path }) => withActor((actor) => catalog.get(actor, path.id)))
      .handle("update", ({ path, payload }) => withActor((actor) => catalog.update(actor, path.id, payload)))
      .handle("archive", ({ path }) => withActor((actor) => catalog.archive(actor, path.id)))
  })
)

/**
 * `GET /v1/products/:id` before the router (http/FastRoutes.ts): the `get` handler's answer, as bytes
 * kept in the product cache.
 */
export const CatalogFastRoutes = Effect.gen(function* () {
  const catalog = yield* Catalog
  const encode = encodeJson(Product)
  return [yield* fastGet("/v1/products/:id", (actor, id) => catalog.getEncoded(actor, id, encode))]
})
