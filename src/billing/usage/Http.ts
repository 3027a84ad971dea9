/** Handlers of `/v1/usage`: each hands the request to `Usage` with the current actor. */
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect, Schema } from "effect"
import { CurrentActor } from "../../http/Auth.js"
import { IDEMPOTENT_REPLAYED_HEADER } from "../../http/Idempotency.js"
import { UsageRecordObject, UsageRoutes } from "./Api.js"
import { Usage } from "./Usage.js"

const encodeRecord = Schema.encodeSync(UsageRecordObject)

export const UsageHttpLive = HttpApiBuilder.group(UsageRoutes, "usage", (handlers) =>
  Effect.gen(function* () {
    const usage = yield* Usage
    return handlers
      .handle("record", ({ payload }) =>
        Effect.flatMap(CurrentActor, (actor) =>
          Effect.flatMap(
            usage.record(actor, payload),
            (outcome): Effect.Effect<UsageRecordObject | HttpServerResponse.HttpServerResponse> =>
              outcome.replayed
                ? // The identifier was recorded before: the original record, 200, marked as a replay.
                  Effect.orDie(
                    HttpServerResponse.json(encodeRecord(outcome.record), {
                      status: 200,
                      headers: { [IDEMPOTENT_REPLAYED_HEADER]: "true" }
                    })
                  )
                : Effect.succeed(outcome.record)
          )
        )
      )
      .handle("recordBatch", ({ payload }) =>
        Effect.flatMap(CurrentActor, (actor) => usage.recordBatch(actor, payload))
      )
      .handle("summary", ({ urlParams }) =>
        Effect.flatMap(CurrentActor, (actor) => usage.summary(actor, urlParams))
      )
  })
)
