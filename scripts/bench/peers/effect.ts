/**
 * The minimal Effect peer of `npm run bench:http`: an HttpApi on NodeHttpServer with @effect/sql-pg,
 * on the versions this project pins, with the platform's HTTP tracer off and no middleware — what
 * the framework itself costs. Started by the bench as a child process; it prints `{"port":N}` on
 * stdout once it listens. Environment: DATABASE_URL, POOL_SIZE, PORT (0 = any free port).
 *
 *   GET  /health     → 200 {"status":"ok"}
 *   GET  /users/:id  → 200 the row of bench_peer.users by primary key, or 404
 *   POST /users      → 201 the row inserted from {email, firstName, lastName}
 */
import { createServer } from "node:http"
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiEndpoint,
  HttpApiError,
  HttpApiGroup,
  HttpMiddleware,
  HttpServer
} from "@effect/platform"
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Config, Effect, Layer, Schema } from "effect"

class User extends Schema.Class<User>("User")({
  id: Schema.UUID,
  email: Schema.String,
  firstName: Schema.String,
  lastName: Schema.String,
  createdAt: Schema.Date
}) {}

const NewUser = Schema.Struct({ email: Schema.String, firstName: Schema.String, lastName: Schema.String })

/** A row as the pg driver returns it (timestamptz already a Date). */
const UserRow = Schema.Struct({ ...User.fields, createdAt: Schema.DateFromSelf })
const decodeRow = Schema.decodeUnknown(UserRow)

class Peer extends HttpApiGroup.make("peer")
  .add(HttpApiEndpoint.get("health", "/health").addSuccess(Schema.Struct({ status: Schema.Literal("ok") })))
  .add(
    HttpApiEndpoint.get("user", "/users/:id")
      .setPath(Schema.Struct({ id: Schema.UUID }))
      .addSuccess(User)
      .addError(HttpApiError.NotFound)
  )
  .add(HttpApiEndpoint.post("create", "/users").setPayload(NewUser).addSuccess(User, { status: 201 })) {}

class PeerApi extends HttpApi.make("peer").add(Peer) {}

const COLUMNS = 'id, email, first_name AS "firstName", last_name AS "lastName", created_at AS "createdAt"'

const PeerLive = HttpApiBuilder.group(PeerApi, "peer", (handlers) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const toUser = (row: unknown) => Effect.map(decodeRow(row), (fields) => new User(fields))
    return handlers
      .handle("health", () => Effect.succeed({ status: "ok" as const }))
      .handle("user", ({ path }) =>
        Effect.gen(function* () {
          const rows = yield* sql.unsafe(`SELECT ${COLUMNS} FROM bench_peer.users WHERE id = $1`, [path.id])
          if (rows[0] === undefined) return yield* new HttpApiError.NotFound()
          return yield* toUser(rows[0])
        }).pipe(Effect.catchTags({ SqlError: Effect.die, ParseError: Effect.die }))
      )
      .handle("create", ({ payload }) =>
        sql
          .unsafe(
            `INSERT INTO bench_peer.users (email, first_name, last_name) VALUES ($1, $2, $3) RETURNING ${COLUMNS}`,
            [payload.email, payload.firstName, payload.lastName]
          )
          .pipe(
            Effect.flatMap((rows) => toUser(rows[0])),
            Effect.orDie
          )
      )
  })
)

const ServerLive = HttpApiBuilder.serve().pipe(
  // The platform's tracer off, as in the measurement: no URL parsing or span per request.
  HttpMiddleware.withTracerDisabledWhen(() => true),
  Layer.provide(HttpApiBuilder.api(PeerApi).pipe(Layer.provide(PeerLive))),
  Layer.provide(
    PgClient.layerConfig({
      url: Config.redacted("DATABASE_URL"),
      maxConnections: Config.integer("POOL_SIZE").pipe(Config.withDefault(10)),
      idleTimeout: Config.succeed("60 seconds"),
      applicationName: Config.succeed("bench-effect")
    })
  ),
  Layer.provideMerge(
    NodeHttpServer.layerConfig(createServer, {
      host: Config.succeed("127.0.0.1"),
      port: Config.integer("PORT").pipe(Config.withDefault(0))
    })
  )
)

const AnnouncePort = Layer.effectDiscard(
  Effect.flatMap(HttpServer.HttpServer, ({ address }) =>
    address._tag === "TcpAddress"
      ? Effect.sync(() => process.stdout.write(`${JSON.stringify({ port: address.port })}\n`))
      : Effect.dieMessage("not on TCP")
  )
)

ServerLive.pipe(Layer.merge(AnnouncePort.pipe(Layer.provide(ServerLive))), Layer.launch, NodeRuntime.runMain)
