/** Handlers of `/user`: each hands the request to `Customers` with the current actor. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { CurrentActor } from "../http/Auth.js"
import { encodeJson, fastGet, fastPost } from "../http/FastRoutes.js"
import { CreatedCustomer, Customer, CustomersRoutes, NewCustomer } from "./Api.js"
import { Customers } from "./Customers.js"

export const CustomersHttpLive = HttpApiBuilder.group(CustomersRoutes, "customers", (handlers) =>
  Effect.gen(function* () {
    const customers = yield* Customers
    const withActor = <A, E, R>(f: (actor: typeof CurrentActor.Service) => Effect.Effect<A, E, R>) =>
      Effect.flatMap(CurrentActor, f)
    return handlers
      .handle("list", ({ urlParams }) => withActor((actor) => customers.list(actor, urlParams)))
      .handle("create", ({ payload }) => withActor((actor) => customers.create(actor, payload)))
      .handle("get", ({ path }) => withActor((actor) => customers.get(actor, path.id)))
      .handle("update", ({ path, payload }) =>
        withActor((actor) => customers.update(actor, path.id, payload))
      )
      .handle("erase", ({ path }) => withActor((actor) => customers.erase(actor, path.id)))
      .handle("addAddress", ({ path, payload }) =>
        withActor((actor) => customers.addAddress(actor, path.id, payload))
      )
      .handle("removeAddress", ({ path }) =>
        withActor((actor) => customers.removeAddress(actor, path.id, path.address_id))
      )
      .handle("tag", ({ path, payload }) => withActor((actor) => customers.tag(actor, path.id, payload.tags)))
  })
)

/**
 * Before the router (http/FastRoutes.ts): `GET /user/:id` (the `get` handler's lookup, its encoding)
 * and `POST /user` (the `create` handler's command, its payload and success schemas, its 201).
 */
export const CustomersFastRoutes = Effect.gen(function* () {
  const customers = yield* Customers
  const encode = encodeJson(Customer)
  const encodeCreated = encodeJson(CreatedCustomer)
  return [
    yield* fastGet("/user/:id", (actor, id) => Effect.map(customers.get(actor, id), encode)),
    yield* fastPost("/user", NewCustomer, 201, (actor, input) =>
      Effect.map(customers.create(actor, input), encodeCreated)
    )
  ]
})
