/** Handlers of `/notification…`: each hands the request to `Notifications` with the current actor. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { CurrentActor } from "../http/Auth.js"
import { NotificationsRoutes } from "./Api.js"
import { Notifications } from "./Notifications.js"

export const NotificationsHttpLive = HttpApiBuilder.group(NotificationsRoutes, "notifications", (handlers) =>
  Effect.gen(function* () {
    const notifications = yield* Notifications
    const withActor = <A, E, R>(f: (actor: typeof CurrentActor.Service) => Effect.Effect<A, E, R>) =>
      Effect.flatMap(CurrentActor, f)
    return handlers
      .handle("list", ({ urlParams }) => notifications.list(urlParams))
      .handle("get", ({ path }) => notifications.get(path.id))
      .handle("create", ({ payload }) => withActor((actor) => notifications.create(actor, payload)))
      .handle("update", ({ path, payload }) =>
        withActor((actor) => notifications.update(actor, path.id, payload))
      )
      .handle("cancel", ({ path }) => withActor((actor) => notifications.cancel(actor, path.id)))
      .handle("resend", ({ path, payload }) =>
        withActor((actor) => notifications.resend(actor, path.id, payload ?? {}))
      )
      .handle("getSettings", () => notifications.getSettings)
      .handle("changeSettings", ({ payload }) =>
        withActor((actor) => notifications.changeSettings(actor, payload))
      )
      .handle("listTemplates", ({ urlParams }) => notifications.listTemplates(urlParams.channel))
      .handle("getTemplate", ({ path }) => notifications.getTemplate(path.id))
      .handle("createTemplate", ({ payload }) =>
        withActor((actor) => notifications.createTemplate(actor, payload))
      )
      .handle("updateTemplate", ({ path, payload }) =>
        withActor((actor) => notifications.updateTemplate(actor, path.id, payload))
      )
      .handle("deleteTemplate", ({ path }) =>
        withActor((actor) => notifications.deleteTemplate(actor, path.id))
      )
  })
)
