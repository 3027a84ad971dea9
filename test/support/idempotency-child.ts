/**
 * A service process for test/http/idempotency-crash.test.ts: the real idempotency middleware over
 * one probe endpoint that writes a row (`probe_writes`) on the test's database. With `DIE` set, the
 * process SIGKILLs itself in the middle of a request: `after-write` once the handler wrote (before
 * the request's COMMIT), `after-commit` between the COMMIT and the response.
 */
import { createServer } from "node:http"
import { HttpApi, HttpApiBuilder, HttpApiEndpoint, HttpApiGroup, HttpApp } from "@effect/platform"
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Logger, LogLevel, Option, Redacted, Schema } from "effect"
import { AppConfig, makeAppConfig } from "../../src/config.js"
import { PersistenceLive } from "../../src/eventstore/layers.js"
import { InternalError } from "../../src/http/errors.js"
import { idempotencyMiddleware } from "../../src/http/Idempotency.js"
import { apiMiddleware } from "../../src/http/middleware.js"
import { CommandRunnerLive } from "../../src/kernel/CommandRunner.js"
import { ProjectionsLive } from "../../src/kernel/Projection.js"

const die = process.env.DIE ?? ""
const kill = () => process.kill(process.pid, "SIGKILL")

class Writes extends HttpApiGroup.make("writes").add(
  HttpApiEndpoint.post("write", "/probe/writes")
    .setPayload(Schema.Struct({ item: Schema.String }))
    .addSuccess(Schema.Struct({ item: Schema.String, row: Schema.Int }), { status: 201 })
) {}

class ChildApi extends HttpApi.make("child").add(Writes).addError(InternalError) {}

const Handlers = HttpApiBuilder.group(ChildApi, "writes", (h) =>
  h.handle("write", ({ payload }) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ row: number }>`
        INSERT INTO probe_writes (item) VALUES (${payload.item}) RETURNING row_id AS row`
      if (die === "after-write") kill()
      if (die === "after-commit") {
        // Runs after the idempotency middleware's pre-response handler (it was appended later).
        yield* HttpApp.appendPreResponseHandler((_request, response) =>
          Effect.sync(() => {
            kill()
            return response
          })
        )
      }
      return { item: payload.item, row: rows[0]?.row ?? 0 }
    }).pipe(Effect.orDie)
  )
)

const ConfigLive = Layer.succeed(
  AppConfig,
  makeAppConfig({
    databaseUrl: Option.some(Redacted.make(process.env.DATABASE_URL ?? "")),
    dataEncryptionKey: Option.some(Redacted.make(process.env.DATA_ENCRYPTION_KEY ?? ""))
  })
)

const ServerLive = HttpApiBuilder.serve((app) =>
  apiMiddleware({ accessLog: false })(idempotencyMiddleware()(app))
).pipe(
  Layer.provide(HttpApiBuilder.api(ChildApi).pipe(Layer.provide(Handlers))),
  Layer.provide(NodeHttpServer.layer(createServer, { port: Number(process.env.PORT), host: "127.0.0.1" })),
  Layer.provide(CommandRunnerLive.pipe(Layer.provide(ProjectionsLive([])))),
  Layer.provide(PersistenceLive.pipe(Layer.provideMerge(ConfigLive))),
  Layer.provide(Logger.minimumLogLevel(LogLevel.Warning))
)

NodeRuntime.runMain(Layer.launch(ServerLive))
