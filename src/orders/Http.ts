/** Handlers of `/v1/orders`: each hands the request to `Orders` with the current actor. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { CurrentActor } from "../http/Auth.js"
import { encodeJson, fastGet } from "../http/FastRoutes.js"
import { OrdersRoutes } from "./Api.js"
import { Orders } from "./Orders.js"
import { OrderObject } from "./objects.js"

export const OrdersHttpLive = HttpApiBuilder.group(OrdersRoutes, "orders", (handlers) =>
  Effect.gen(function* () {
    const orders = yield* Orders
    const withActor = <A, E, R>(f: (actor: typeof CurrentActor.Service) => Effect.Effect<A, E, R>) =>
      Effect.flatMap(CurrentActor, f)
    return handlers
      .handle("list", ({ urlParams }) => withActor((actor) => orders.list(actor, urlParams)))
      .handle("get", ({ path }) => withActor((actor) => orders.get(actor, path.id)))
      .handle("fulfill", ({ path, payload }) => withActor((actor) => orders.fulfill(actor, path.id, payload)))
      .handle("updateFulfillment", ({ path }) =>
        withActor((actor) => orders.updateFulfillment(actor, path.id, path.fid))
      )
      .handle("cancel", ({ path, payload }) => withActor((actor) => orders.cancel(actor, path.id, payload)))
      .handle("refund", ({ path, payload }) => withActor((actor) => orders.refund(actor, path.id, payload)))
  })
)

/** `GET /v1/orders/:id` before the router (http/FastRoutes.ts): the `get` handler's lookup, its encoding. */
export const OrdersFastRoutes = Effect.gen(function* () {
  const orders = yield* Orders
  const encode = encodeJson(OrderObject)
  return [yield* fastGet("/v1/orders/:id", (actor, id) => orders.getEncoded(actor, id, encode))]
})
