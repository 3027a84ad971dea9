/**
 * Handlers of `/webhook…` and `/v1/webhooks…`: each hands the request to `Webhooks` with the current
 * actor; the `/v1` ones reshape the answers into Stripe's objects.
 */
import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { CurrentActor } from "../http/Auth.js"
import { WebhooksRoutes } from "./Api.js"
import { Webhooks, type WebhookView } from "./Webhooks.js"

const withActor = <A, E, R>(f: (actor: typeof CurrentActor.Service) => Effect.Effect<A, E, R>) =>
  Effect.flatMap(CurrentActor, f)

const create = (webhooks: typeof Webhooks.Service, payload: Parameters<typeof Webhooks.Service.create>[1]) =>
  withActor((actor) => webhooks.create(actor, payload))

export const BaseWebhooksHttpLive = HttpApiBuilder.group(WebhooksRoutes, "webhooks", (handlers) =>
  Effect.gen(function* () {
    const webhooks = yield* Webhooks
    return handlers
      .handle("list", ({ urlParams }) => webhooks.list(urlParams))
      .handle("get", ({ path }) => webhooks.get(path.id))
      .handle("create", ({ payload }) => create(webhooks, payload))
      .handle("update", ({ path, payload }) => withActor((actor) => webhooks.update(actor, path.id, payload)))
      .handle("remove", ({ path }) => withActor((actor) => webhooks.remove(actor, path.id)))
      .handle("rotateSecret", ({ path, urlParams }) =>
        withActor((actor) => webhooks.rotateSecret(actor, path.id, { force: urlParams.force === "true" }))
      )
      .handle("test", ({ path, payload }) => webhooks.test(path.id, payload))
      .handle("deliveries", ({ path, urlParams }) => webhooks.deliveries(path.id, urlParams))
      .handle("redeliver", ({ path }) =>
        withActor((actor) => webhooks.redeliver(actor, path.id, path.delivery_id))
      )
      .handle("recover", ({ path, payload }) =>
        withActor((actor) => webhooks.recover(actor, path.id, payload))
      )
  })
)

/** A webhook as `/v1` shows it (Stripe's `webhook_endpoint` object). */
const v1Endpoint = (view: WebhookView) => ({
  object: "webhook_endpoint" as const,
  id: view.id,
  url: view.url,
  events: view.events,
  status: view.status,
  metadata: view.metadata,
  createdAt: view.createdAt,
  updatedAt: view.updatedAt
})

export const V1WebhooksHttpLive = HttpApiBuilder.group(WebhooksRoutes, "v1Webhooks", (handlers) =>
  Effect.gen(function* () {
    const webhooks = yield* Webhooks
    return handlers
      .handle("create", ({ payload }) =>
        Effect.map(create(webhooks, payload), (created) => ({
          ...v1Endpoint(created),
          secret: created.secret
        }))
      )
      .handle("list", ({ urlParams }) =>
        Effect.map(webhooks.listV1(urlParams), (page) => ({ ...page, data: page.data.map(v1Endpoint) }))
      )
      .handle("get", ({ path }) => Effect.map(webhooks.get(path.id), v1Endpoint))
      .handle("remove", ({ path }) =>
        withActor((actor) =>
          Effect.as(webhooks.remove(actor, path.id), {
            id: path.id,
            object: "webhook_endpoint" as const,
            deleted: true as const
          })
        )
      )
  })
)

/** Both surfaces' handlers. */
export const WebhooksHttpLive = Layer.mergeAll(BaseWebhooksHttpLive, V1WebhooksHttpLive)
