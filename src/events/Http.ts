/** Handlers of `/v1/events…`: each hands the request to `EventFeed`. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { EventsRoutes } from "./Api.js"
import { EventFeed } from "./EventFeed.js"

export const EventsHttpLive = HttpApiBuilder.group(EventsRoutes, "v1Events", (handlers) =>
  Effect.gen(function* () {
    const feed = yield* EventFeed
    return handlers
      .handle("list", ({ urlParams }) => feed.list(urlParams))
      .handle("get", ({ path }) => feed.get(path.id))
  })
)
