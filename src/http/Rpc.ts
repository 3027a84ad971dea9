/**
 * Audit and ops calls over `/rpc` (`@effect/rpc`, ndjson framing over HTTP POST), on the same server
 * as the REST API:
 *
 * - `EventLog.Stream` — the event history (all events or one stream, from a checkpoint, filtered by
 *   type, bounded by `limit`, optionally following new events for a bounded time);
 * - `Ops.Status` — subscriptions (checkpoint, lag, lease, status), processors, due-work backlog.
 *
 * Items are the audit feed's: `Secret` fields of the event schemas read `"[secret]"`.
 *
 * Same credentials as REST (`Authorization: Bearer …` through the `CredentialVerifier`); every call
 * needs the `read:events` scope (an `RpcScope` annotation can ask for another). Failures are typed
 * and carry the REST error body: `Unauthorized` (401-style), `Forbidden` (403), `BadRequest` (invalid
 * checkpoint, limit out of range…), `ServiceUnavailable` (the database cannot be reached: retry),
 * `InternalError` (any other database failure, logged).
 *
 * HTTP RPC has no backpressure and the server never learns that a client stopped reading, so every
 * stream is bounded: at most `MAX_LIMIT` events and `MAX_FOLLOW_SECONDS` of following per call.
 */
import { HttpApiBuilder } from "@effect/platform"
import { Rpc, RpcGroup, RpcMiddleware, RpcSerialization, RpcServer } from "@effect/rpc"
import type { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Layer, Schema, Stream } from "effect"
import {
  type InvalidEventLogRequest,
  EventLogItem as Item,
  parseEventLogRequest,
  readEventLog,
  toEventLogItem
} from "../audit/EventLog.js"
import { type OpsReport, OpsStatus, oldestDueAgeSeconds } from "../audit/OpsStatus.js"
import { isDatabaseUnreachable, unreachableReason } from "../db/Reachability.js"
import { AppendSignal } from "../eventstore/AppendSignal.js"
import * as Checkpoint from "../eventstore/Checkpoint.js"
import { EventStore } from "../eventstore/EventStore.js"
import { KnownEventTypes } from "../eventstore/EventType.js"
import { authenticate, CredentialVerifier, CurrentActor, requireScope } from "./Auth.js"
import {
  BadRequest,
  errorBody,
  Forbidden,
  InternalError,
  ServiceUnavailable,
  Unauthorized,
  unavailableBody
} from "./errors.js"

export const RPC_PATH = "/rpc"

/** The scope an RPC requires (annotation; `read:events` when absent). */
export class RpcScope extends Context.Reference<RpcScope>()("RpcScope", {
  defaultValue: () => "read:events"
}) {}

/** Authenticates every RPC with the REST credentials and checks its scope. */
export class RpcAuthentication extends RpcMiddleware.Tag<RpcAuthentication>()("RpcAuthentication", {
  failure: Schema.Union(Unauthorized, Forbidden, ServiceUnavailable),
  provides: CurrentActor
}) {}

export const EventLogStreamPayload = Schema.Struct({
  /** One stream only. */
  streamId: Schema.optional(Schema.String),
  /** Start after this checkpoint ("<xid>:<position>", as in each item's `checkpoint`); origin by default. */
  after: Schema.optional(Schema.String),
  /** Only these event types. */
  types: Schema.optional(Schema.Array(Schema.String)),
  /** At most this many events (default 1000, 1–10000). */
  limit: Schema.optional(Schema.Number),
  /** After catching up, wait for new events for `followSeconds` (default 30, at most 300). */
  follow: Schema.optional(Schema.Boolean),
  followSeconds: Schema.optional(Schema.Number)
})

const Iso = Schema.String
const NullableIso = Schema.NullOr(Schema.String)

export const SubscriptionStatusItem = Schema.Struct({
  subscriptionId: Schema.String,
  source: Schema.Literal("events", "public_events"),
  checkpoint: Schema.String,
  lagEvents: Schema.Number,
  lagSeconds: Schema.Number,
  owner: Schema.NullOr(Schema.String),
  generation: Schema.Number,
  leaseUntil: NullableIso,
  status: Schema.String,
  error: Schema.NullOr(Schema.String),
  lastEventAt: NullableIso,
  updatedAt: NullableIso
}).annotations({ identifier: "SubscriptionStatus" })

export const ProcessorStatusItem = Schema.Struct({
  name: Schema.String,
  state: Schema.Literal("running", "backing-off", "stopped"),
  restarts: Schema.Number,
  lastError: Schema.NullOr(Schema.String),
  lastStartedAt: NullableIso,
  lastFailedAt: NullableIso,
  nextStartAt: NullableIso
}).annotations({ identifier: "ProcessorStatus" })

export const DueWorkBacklogItem = Schema.Struct({
  kind: Schema.String,
  pending: Schema.Number,
  /** Pending and already due. */
  due: Schema.Number,
  claimed: Schema.Number,
  expiredClaims: Schema.Number,
  failed: Schema.Number,
  oldestDueAt: NullableIso,
  /** How long the oldest due item has been waiting (0 when none). */
  oldestDueAgeSeconds: Schema.Number
}).annotations({ identifier: "DueWorkBacklog" })

export const OpsStatusResult = Schema.Struct({
  at: Iso,
  head: Schema.Struct({ position: Schema.Number, recordedAt: NullableIso }),
  subscriptions: Schema.Array(SubscriptionStatusItem),
  processors: Schema.Array(ProcessorStatusItem),
  dueWork: Schema.Array(DueWorkBacklogItem)
}).annotations({ identifier: "OpsStatus" })
export type OpsStatusResult = typeof OpsStatusResult.Type

export class AuditRpcs extends RpcGroup.make(
  Rpc.make("EventLog.Stream", {
    payload: EventLogStreamPayload,
    success: Item,
    error: Schema.Union(BadRequest, ServiceUnavailable, InternalError),
    stream: true
  }),
  Rpc.make("Ops.Status", { success: OpsStatusResult, error: Schema.Union(ServiceUnavailable, InternalError) })
).middleware(RpcAuthentication) {}

const iso = (d: Date | null) => (d === null ? null : d.toISOString())

/** The report on the wire: dates as ISO strings, checkpoints as strings (fields not in the schema are dropped). */
export const toOpsStatusResult = (report: OpsReport): OpsStatusResult => ({
  at: report.at.toISOString(),
  head: { position: report.head.position, recordedAt: iso(report.head.recordedAt) },
  subscriptions: report.subscriptions.map((s) => ({
    ...s,
    checkpoint: Checkpoint.format(s.checkpoint),
    leaseUntil: iso(s.leaseUntil),
    lastEventAt: iso(s.lastEventAt),
    updatedAt: iso(s.updatedAt)
  })),
  processors: report.processors.map((p) => ({
    ...p,
    lastStartedAt: iso(p.lastStartedAt),
    lastFailedAt: iso(p.lastFailedAt),
    nextStartAt: iso(p.nextStartAt)
  })),
  dueWork: report.dueWork.map((d) => ({
    ...d,
    oldestDueAt: iso(d.oldestDueAt),
    oldestDueAgeSeconds: oldestDueAgeSeconds(report.at, d)
  }))
})

/** The database outage, as the RPC's typed failure (warned, not logged as an error). */
const unavailable = (what: string, error: unknown) =>
  Effect.zipRight(
    Effect.logWarning(`${what}: database unreachable (${unreachableReason(error)})`),
    Effect.fail(new ServiceUnavailable(unavailableBody()))
  )

const internal =
  (what: string) =>
  (error: SqlError): Effect.Effect<never, ServiceUnavailable | InternalError> =>
    isDatabaseUnreachable(error)
      ? unavailable(what, error)
      : Effect.zipRight(
          Effect.logError(`${what} failed`, error),
          Effect.fail(
            new InternalError(
              errorBody("api_error", {
                code: "internal_error",
                message: "An internal error occurred. It has been logged; retry later."
              })
            )
          )
        )

export const RpcAuthenticationLive = Layer.effect(
  RpcAuthentication,
  Effect.map(CredentialVerifier, (verifier) =>
    RpcAuthentication.of(({ headers, rpc }) =>
      Effect.gen(function* () {
        // The credential lookup dies when the database cannot be reached: that is the outage, typed.
        const actor = yield* authenticate(verifier, headers.authorization).pipe(
          Effect.catchAllDefect((defect) =>
            isDatabaseUnreachable(defect) ? unavailable("rpc authentication", defect) : Effect.die(defect)
          )
        )
        return yield* requireScope(Context.get(rpc.annotations, RpcScope)).pipe(
          Effect.provideService(CurrentActor, actor)
        )
      })
    )
  )
)

export const AuditRpcsHandlers = AuditRpcs.toLayer(
  Effect.gen(function* () {
    const store = yield* EventStore
    const ops = yield* OpsStatus
    const signal = yield* Effect.serviceOption(AppendSignal)
    const types = yield* KnownEventTypes
    return {
      "EventLog.Stream": (payload) =>
        Stream.unwrap(
          parseEventLogRequest(payload).pipe(
            Effect.mapError((e: InvalidEventLogRequest) =>
              BadRequest.of({ code: e.code, message: e.message, param: e.param })
            ),
            Effect.map((query) =>
              readEventLog(store, query, signal._tag === "Some" ? { signal: signal.value } : {}).pipe(
                Stream.map((event) => toEventLogItem(event, types)),
                Stream.catchAll((error) => Stream.fromEffect(internal("EventLog.Stream")(error)))
              )
            )
          )
        ),
      "Ops.Status": () =>
        ops.report.pipe(Effect.map(toOpsStatusResult), Effect.catchAll(internal("Ops.Status")))
    }
  })
)

/** `/rpc` on the HttpApi router. Needs EventStore, OpsStatus and the CredentialVerifier. */
export const RpcLive = RpcServer.layer(AuditRpcs, { spanPrefix: "rpc" }).pipe(
  Layer.provide([AuditRpcsHandlers, RpcAuthenticationLive]),
  Layer.provide(RpcServer.layerProtocolHttp({ path: RPC_PATH, routerTag: HttpApiBuilder.Router })),
  Layer.provide(RpcSerialization.layerNdjson)
)
