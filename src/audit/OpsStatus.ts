/**
 * One ops snapshot for the `Ops.Status` RPC and `/metrics`: per subscription its checkpoint, lag
 * (events and seconds), lease and status; the supervisor's processor states; the due-work backlog by
 * kind; the event store head. Subscriptions are the ones this build knows (the registry), so their
 * source and event types are known; their rows in the database are shared by every process.
 */
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Context, Effect, Layer, Option } from "effect"
import { EventStore } from "../eventstore/EventStore.js"
import { DueWork, type DueWorkStats } from "../processors/DueWork.js"
import {
  type SubscriptionSpec,
  type SubscriptionStatus,
  subscriptionStatus
} from "../processors/Subscription.js"
import { type Processor, type ProcessorStatus, Supervisor } from "../processors/Supervisor.js"

export interface OpsReport {
  readonly at: Date
  readonly head: { readonly position: number; readonly recordedAt: Date | null }
  readonly subscriptions: ReadonlyArray<SubscriptionStatus>
  /** Processors supervised by this process (empty with ROLE=api). */
  readonly processors: ReadonlyArray<ProcessorStatus>
  readonly dueWork: ReadonlyArray<DueWorkStats>
}

/** How long the oldest due item of a backlog has been waiting at the report's time (0 when none). */
export const oldestDueAgeSeconds = (at: Date, stats: DueWorkStats): number =>
  stats.oldestDueAt ? Math.max(0, (at.getTime() - stats.oldestDueAt.getTime()) / 1000) : 0

export interface OpsStatusShape {
  readonly report: Effect.Effect<OpsReport, SqlError>
}

export class OpsStatus extends Context.Tag("OpsStatus")<OpsStatus, OpsStatusShape>() {}

/** The subscriptions among a list of processors (those built by `subscriptionProcessor`). */
export const subscriptionSpecs = (
  processors: ReadonlyArray<Processor<unknown>>
): ReadonlyArray<SubscriptionSpec> =>
  processors.flatMap((p) => {
    const spec = (p as { readonly subscription?: SubscriptionSpec }).subscription
    return spec ? [spec] : []
  })

export const makeOpsStatus = (subscriptions: ReadonlyArray<SubscriptionSpec>) =>
  Effect.gen(function* () {
    const store = yield* EventStore
    const dueWork = yield* DueWork
    const supervisor = yield* Effect.serviceOption(Supervisor)
    const sql = yield* Effect.context<SqlClient.SqlClient>()
    const service: OpsStatusShape = {
      report: Effect.gen(function* () {
        const at = new Date(yield* Clock.currentTimeMillis)
        // Sequential: the embedded database is a single connection anyway.
        const head = yield* store.head
        const subs = yield* Effect.forEach(subscriptions, (spec) =>
          Effect.provide(subscriptionStatus(spec), sql)
        )
        const processors = Option.isSome(supervisor) ? yield* supervisor.value.status : []
        const due = yield* dueWork.stats()
        return {
          at,
          head: { position: head.position, recordedAt: Option.getOrNull(head.recordedAt) },
          subscriptions: subs,
          processors,
          dueWork: due
        }
      })
    }
    return service
  })

export const OpsStatusLive = (subscriptions: ReadonlyArray<SubscriptionSpec>) =>
  Layer.effect(OpsStatus, makeOpsStatus(subscriptions))
