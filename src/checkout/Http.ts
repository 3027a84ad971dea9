/** Handlers of `/v1/checkouts…`: each hands the request to `Checkouts` with the current actor. */
import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Effect } from "effect"
import { CurrentActor } from "../http/Auth.js"
import { CheckoutRoutes } from "./Api.js"
import { Checkouts } from "./Checkouts.js"

const withActor = <A, E, R>(f: (actor: typeof CurrentActor.Service) => Effect.Effect<A, E, R>) =>
  Effect.flatMap(CurrentActor, f)

/** The request's `Idempotency-Key`: the checkout's processor keys derive from it. */
const requestKey = Effect.map(HttpServerRequest.HttpServerRequest, (request) => {
  const key = request.headers["idempotency-key"]?.trim()
  return key === undefined || key === "" ? undefined : key
})

export const CheckoutHttpLive = HttpApiBuilder.group(CheckoutRoutes, "checkouts", (handlers) =>
  Effect.gen(function* () {
    const checkouts = yield* Checkouts
    return handlers
      .handle("create", ({ payload }) =>
        withActor((actor) => Effect.flatMap(requestKey, (key) => checkouts.create(actor, payload, key)))
      )
      .handle("get", ({ path }) => withActor((actor) => checkouts.get(actor, path.id)))
      .handle("confirm", ({ path, payload }) =>
        withActor((actor) => checkouts.confirm(actor, path.id, payload))
      )
      .handle("expire", ({ path }) => withActor((actor) => checkouts.expire(actor, path.id)))
  })
)
