/** Handlers of `/v1/usage`: each hands the request to `Usage` with the current actor. */
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { CurrentActor } from "../../http/Auth.js"
import { encodeJson, fastQueryGet } from "../../http/FastRoutes.js"
import { IDEMPOTENT_REPLAYED_HEADER } from "../../http/Idempotency.js"
import {
  encodeUsageBatchResult,
  encodeUsageRecord,
  type UsageBatchResult,
  type UsageRecordObject,
  UsageRoutes,
  UsageSummary,
  UsageSummaryParams
} from "./Api.js"
import { Usage } from "./Usage.js"

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
                    HttpServerResponse.json(encodeUsageRecord(outcome.record), {
                      status: 200,
                      headers: { [IDEMPOTENT_REPLAYED_HEADER]: "true" }
                    })
                  )
                : Effect.succeed(outcome.record)
          )
        )
      )
      .handle("recordBatch", ({ payload }) =>
        Effect.flatMap(CurrentActor, (actor) =>
          Effect.map(
            usage.recordBatch(actor, payload),
            // The documented UsageBatchResult, encoded by hand (up to 1,000 records: see Api.ts).
            (result): UsageBatchResult | HttpServerResponse.HttpServerResponse =>
              HttpServerResponse.unsafeJson(encodeUsageBatchResult(result))
          )
        )
      )
      .handle("summary", ({ urlParams }) =>
        Effect.flatMap(CurrentActor, (actor) => usage.summary(actor, urlParams))
      )
  })
)

/**
 * `GET /v1/usage?…` before the router (http/FastRoutes.ts): the `summary` handler's answer, its
 * encoding. A summary is read on every dashboard refresh: the router's share of it (matching, the
 * handler's middleware chain, the success schema's encoding through the platform) was about a
 * fifth of its CPU.
 */
export const UsageFastRoutes = Effect.gen(function* () {
  const usage = yield* Usage
  const encode = encodeJson(UsageSummary)
  return [
    yield* fastQueryGet("/v1/usage", UsageSummaryParams, (actor, params) =>
      Effect.map(usage.summary(actor, params), encode)
    )
  ]
})
