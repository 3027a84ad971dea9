/** Handlers of `/v1/test/clocks…`: each hands the request to `TestClocks` with the current actor. */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { CurrentActor } from "../../http/Auth.js"
import { BillingDueWork } from "../contract.js"
import { TestClocksRoutes } from "./Api.js"
import { TestClocks } from "./TestClocks.js"

export const TestClocksHttpLive = HttpApiBuilder.group(TestClocksRoutes, "v1TestClocks", (handlers) =>
  Effect.gen(function* () {
    const clocks = yield* TestClocks
    // Billing's due work (the subscriptions part), whichever floor of the composition provides it.
    const dueWork = yield* BillingDueWork
    const withActor = <A, E, R>(f: (actor: typeof CurrentActor.Service) => Effect.Effect<A, E, R>) =>
      Effect.flatMap(CurrentActor, f)
    const withDueWork = <A, E>(effect: Effect.Effect<A, E, BillingDueWork>) =>
      Effect.provideService(effect, BillingDueWork, dueWork)
    return handlers
      .handle("create", ({ payload }) => withActor((actor) => clocks.create(actor, payload)))
      .handle("list", ({ urlParams }) => clocks.list(urlParams))
      .handle("get", ({ path }) => clocks.get(path.id))
      .handle("delete", ({ path }) => withActor((actor) => withDueWork(clocks.remove(actor, path.id))))
      .handle("advance", ({ path, payload }) =>
        withActor((actor) => withDueWork(clocks.advance(actor, path.id, payload.frozenTime)))
      )
  })
)
