/** Handlers of `/v1/subscriptions…` and `/v1/invoices…`: each hands the request to `Billing` with the actor. */
import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Effect, Layer } from "effect"
import { CurrentActor } from "../http/Auth.js"
import { BillingRoutes } from "./Api.js"
import { Billing } from "./Billing.js"

const withActor = <A, E, R>(f: (actor: typeof CurrentActor.Service) => Effect.Effect<A, E, R>) =>
  Effect.flatMap(CurrentActor, f)

/** The request's `Idempotency-Key`: the first charge's processor keys derive from it. */
const requestKey = Effect.map(HttpServerRequest.HttpServerRequest, (request) => {
  const key = request.headers["idempotency-key"]?.trim()
  return key === undefined || key === "" ? undefined : key
})

const SubscriptionsHttpLive = HttpApiBuilder.group(BillingRoutes, "subscriptions", (handlers) =>
  Effect.gen(function* () {
    const billing = yield* Billing
    return handlers
      .handle("create", ({ payload }) =>
        withActor((actor) => Effect.flatMap(requestKey, (key) => billing.create(actor, payload, key)))
      )
      .handle("list", ({ urlParams }) => withActor((actor) => billing.list(actor, urlParams)))
      .handle("get", ({ path }) => withActor((actor) => billing.get(actor, path.id)))
      .handle("update", ({ path, payload }) => withActor((actor) => billing.update(actor, path.id, payload)))
      .handle("cancel", ({ path, urlParams }) =>
        withActor((actor) => billing.cancel(actor, path.id, urlParams))
      )
  })
)

const InvoicesHttpLive = HttpApiBuilder.group(BillingRoutes, "invoices", (handlers) =>
  Effect.gen(function* () {
    const billing = yield* Billing
    return handlers
      .handle("list", ({ urlParams }) => withActor((actor) => billing.listInvoices(actor, urlParams)))
      .handle("get", ({ path }) => withActor((actor) => billing.getInvoice(actor, path.id)))
  })
)

export const BillingHttpLive = Layer.merge(SubscriptionsHttpLive, InvoicesHttpLive)
