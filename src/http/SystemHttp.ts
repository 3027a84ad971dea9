import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { ApiBase, SystemApi } from "./ApiBase.js"
import { errorBody, ServiceUnavailable } from "./errors.js"
import { Readiness } from "./Readiness.js"

export const SystemHttpLive = HttpApiBuilder.group(ApiBase.add(SystemApi), "system", (handlers) =>
  Effect.gen(function* () {
    const readiness = yield* Readiness
    return handlers
      .handle("health", () => Effect.succeed({ status: "ok" as const }))
      .handle("ready", () =>
        Effect.flatMap(readiness.check, (body) =>
          body.status === "ready"
            ? Effect.succeed(body)
            : Effect.fail(
                new ServiceUnavailable(
                  errorBody("api_error", {
                    code: "not_ready",
                    message: Object.entries(body.checks)
                      .flatMap(([name, c]) => (c === undefined || c.ok ? [] : [`${name}: ${c.detail}`]))
                      .join("; ")
                  })
                )
              )
        )
      )
  })
)
