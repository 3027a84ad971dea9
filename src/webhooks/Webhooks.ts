/**
 * The webhooks use cases behind `/webhook` and `/v1/webhooks`: the endpoint registry (validated
 * event types, the SSRF guard on URLs, secrets shown only at creation and rotation), test sends, the
 * delivery log, redelivery and recovery. Each command runs in ONE transaction with the due-work rows
 * it arms or disarms.
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer, Option } from "effect"
import { AppConfig } from "../config.js"
import { provideSqlClient } from "../db/Sql.js"
import { EventStore } from "../eventstore/EventStore.js"
import type { AuthenticatedActor } from "../http/Auth.js"
import { BadRequest, Conflict, NotFound, orDieUnlessHttp } from "../http/errors.js"
import { type V1ListParams, v1Page } from "../http/Lists.js"
import { CommandRunner } from "../kernel/CommandRunner.js"
import * as Ids from "../kernel/Ids.js"
import type { MetadataPatch } from "../kernel/Metadata.js"
import * as Time from "../kernel/Time.js"
import { commandMetadata, makeTransact } from "../kernel/UseCase.js"
import { DueWork } from "../processors/DueWork.js"
import { isWebhookEventType, SAMPLE_DATA, WEBHOOK_EVENT_TYPES } from "./catalogue.js"
import {
  type DeliveryCommand,
  DeliveryDecider,
  type DeliveryStatus,
  deliveryStream,
  signingSecrets,
  type WebhookCommand,
  WebhookDecider,
  WebhookMetadataInvalid,
  WebhookNotFound,
  WebhookRotationInProgress,
  webhookStream
} from "./decider.js"
import { DELIVERY_KIND, DISABLE_CHECK_KIND, deliveryWork, postSigned } from "./delivery.js"
import { ENDPOINTS } from "./projection.js"
import {
  type DeliveryView,
  ENDPOINT_COLUMNS,
  failedDeliveriesSince,
  findDelivery,
  findWebhook,
  listDeliveries,
  listWebhooks,
  type WebhookRow
} from "./queries.js"
import { deliveryBody, newSecret } from "./signature.js"
import { urlProblem } from "./transport.js"

/** Recovery re-sends at most this many failed deliveries per call (call again for more). */
export const MAX_RECOVER = 1000
/** How far back `recover` may reach (Svix's bound). */
export const RECOVER_WINDOW_MS = 14 * 24 * 3_600_000

export interface WebhookInput {
  readonly url: string
  readonly events: ReadonlyArray<string>
  readonly metadata?: Readonly<Record<string, unknown>> | undefined
}

export interface WebhookPatchInput {
  readonly url?: string | undefined
  readonly events?: ReadonlyArray<string> | undefined
  readonly metadata?: MetadataPatch | undefined
  readonly status?: "active" | "failing" | "disabled" | undefined
}

/** A webhook as `GET`/`PUT` show it: everything but the secret. */
export interface WebhookView {
  readonly id: string
  readonly url: string
  readonly events: ReadonlyArray<string>
  readonly status: WebhookRow["status"]
  readonly metadata: Readonly<Record<string, unknown>>
  readonly failingSince: Date | null
  readonly disabledReason: string | null
  readonly previousSecretExpiresAt: Date | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

export const webhookView = (row: WebhookRow): WebhookView => ({
  id: row.id,
  url: row.url,
  events: row.events,
  status: row.status,
  metadata: row.metadata,
  failingSince: row.failingSince,
  disabledReason: row.disabledReason,
  previousSecretExpiresAt: row.previousSecretExpiresAt,
  createdAt: row.createdAt,
  updatedAt: row.updatedAt
})

export interface TestResult {
  readonly delivered: boolean
  readonly statusCode: number | null
  readonly durationMs: number
  readonly error?: string
  readonly errorClass?: string
  readonly deliveryId: string
  readonly eventId: string
}

const notFound = NotFound.of({ message: "No such webhook", param: "id" })
const deliveryNotFound = NotFound.of({ message: "No such delivery", param: "delivery_id" })
const invalid = (param: string, message: string, code = "parameter_invalid") =>
  BadRequest.of({ code, message, param })

/** Checks an `events` list against the catalogue (spec §6.1); duplicates are dropped, order kept. */
export const checkEvents = (events: ReadonlyArray<string>) => {
  if (events.length === 0) return Effect.fail(invalid("events", "events must list at least one event type"))
  const unknown = events.filter((e) => !isWebhookEventType(e))
  if (unknown.length > 0) {
    return Effect.fail(
      invalid(
        "events",
        `unknown event type${unknown.length > 1 ? "s" : ""} ${unknown.map((e) => JSON.stringify(e)).join(", ")}; ` +
          `one of ${WEBHOOK_EVENT_TYPES.join(", ")}`
      )
    )
  }
  return Effect.succeed([...new Set(events)])
}

export const makeWebhooks = Effect.gen(function* () {
  const runner = yield* CommandRunner
  const store = yield* EventStore
  const work = yield* DueWork
  const config = yield* AppConfig
  const transact = yield* makeTransact
  const sql = yield* SqlClient.SqlClient
  const withSql = provideSqlClient(sql)
  const allowPrivate = config.webhooks.allowPrivate

  const execute = (webhookId: string, command: WebhookCommand, actor: AuthenticatedActor) =>
    Effect.flatMap(commandMetadata(actor), (metadata) =>
      runner.execute(WebhookDecider, webhookStream(webhookId), command, { metadata })
    )
  const executeDelivery = (deliveryId: string, command: DeliveryCommand, actor: AuthenticatedActor) =>
    Effect.flatMap(commandMetadata(actor), (metadata) =>
      runner.execute(DeliveryDecider, deliveryStream(deliveryId), command, { metadata })
    )

  const row = (webhookId: string) =>
    Effect.flatMap(withSql(findWebhook(webhookId)).pipe(Effect.orDie), (found) =>
      Option.match(found, { onNone: () => Effect.fail(notFound), onSome: Effect.succeed })
    )
  const validId = (id: string) => (Ids.isValid("wh", id) ? Effect.succeed(id) : Effect.fail(notFound))
  const view = (webhookId: string) => Effect.map(row(webhookId), webhookView)

  const checkUrl = (url: string) =>
    Effect.gen(function* () {
      const problem = yield* urlProblem(url, { allowPrivate })
      if (problem !== undefined) return yield* Effect.fail(invalid("url", problem))
      return new URL(url).href
    })

  /** The deciders' errors as HTTP errors; everything else passes through. */
  const domainErrors = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.mapError(effect, (e): E | NotFound | BadRequest | Conflict => {
      if (e instanceof WebhookNotFound) return notFound
      if (e instanceof WebhookMetadataInvalid) return invalid("metadata", e.message)
      if (e instanceof WebhookRotationInProgress) {
        return Conflict.of({
          code: "rotation_in_progress",
          message: `the previous secret is valid until ${e.previousSecretExpiresAt.toISOString()}; rotating again now would invalidate it early: wait, or pass ?force=true`
        })
      }
      return e
    })

  /** Stops the disable clock of an endpoint that is no longer failing. */
  const disarm = (webhookId: string) => work.cancel(DISABLE_CHECK_KIND, webhookId)

  const list = (input: { readonly page: number; readonly display: number }) =>
    withSql(listWebhooks(input)).pipe(Effect.orDie)

  /** `/v1/webhooks`: newest first, keyset-paged. */
  const listV1 = (params: V1ListParams) =>
    v1Page(sql, {
      table: ENDPOINTS,
      idColumn: "webhook_id",
      idPrefix: "wh",
      columns: ENDPOINT_COLUMNS,
      params,
      toItem: webhookView
    })

  const get = (id: string) => Effect.flatMap(validId(id), view).pipe(orDieUnlessHttp)

  const create = (actor: AuthenticatedActor, input: WebhookInput) =>
    Effect.gen(function* () {
      const url = yield* checkUrl(input.url)
      const events = yield* checkEvents(input.events)
      const webhookId = yield* Ids.make("wh")
      const secret = newSecret()
      yield* transact(
        execute(
          webhookId,
          {
            _tag: "Create",
            webhookId,
            url,
            events,
            metadata: input.metadata ?? {},
            secret,
            createdBy: { type: actor.type, id: actor.id }
          },
          actor
        )
      ).pipe(
        // A new endpoint can only have bad metadata; other decider errors would be bugs (defects).
        Effect.catchTag("WebhookMetadataInvalid", (e) => Effect.fail(invalid("metadata", e.message)))
      )
      // Written by this very transaction: not finding it would be a bug, not a 404.
      const created = yield* Effect.catchTag(view(webhookId), "NotFound", () =>
        Effect.dieMessage(`webhook ${webhookId} missing from the read model after its creation`)
      )
      return { ...created, secret }
    }).pipe(orDieUnlessHttp)

  const update = (actor: AuthenticatedActor, id: string, patch: WebhookPatchInput) =>
    Effect.gen(function* () {
      const webhookId = yield* validId(id)
      if (
        patch.url === undefined &&
        patch.events === undefined &&
        patch.metadata === undefined &&
        patch.status === undefined
      ) {
        return yield* Effect.fail(
          BadRequest.of({
            code: "parameter_missing",
            message: "send at least one of url, events, metadata, status"
          })
        )
      }
      const status = patch.status
      if (status === "failing")
        return yield* Effect.fail(
          invalid(
            "status",
            "status can be set to active (re-enable) or disabled; failing is set by deliveries"
          )
        )
      const url = patch.url === undefined ? undefined : yield* checkUrl(patch.url)
      const events = patch.events === undefined ? undefined : yield* checkEvents(patch.events)
      yield* transact(
        Effect.gen(function* () {
          const result = yield* execute(
            webhookId,
            { _tag: "Update", changes: { url, events, metadata: patch.metadata, status } },
            actor
          )
          // No longer failing (re-enabled, recovered or disabled by hand): its disable clock stops.
          const health = ["webhook.enabled", "webhook.recovered", "webhook.disabled"]
          if (result.events.some((e) => health.includes(e.type))) yield* disarm(webhookId)
        })
      ).pipe(domainErrors)
      return yield* view(webhookId)
    }).pipe(orDieUnlessHttp)

  const remove = (actor: AuthenticatedActor, id: string) =>
    Effect.gen(function* () {
      const webhookId = yield* validId(id)
      yield* transact(
        Effect.gen(function* () {
          yield* execute(webhookId, { _tag: "Delete" }, actor)
          yield* disarm(webhookId)
          // Its secrets rest encrypted under its own key: destroying the key shreds them for good.
          yield* store.forgetSubject(webhookId)
        })
      ).pipe(domainErrors)
    }).pipe(orDieUnlessHttp)

  const rotateSecret = (actor: AuthenticatedActor, id: string, options: { readonly force: boolean }) =>
    Effect.gen(function* () {
      const webhookId = yield* validId(id)
      const secret = newSecret()
      const at = yield* Time.now
      const result = yield* transact(
        execute(webhookId, { _tag: "RotateSecret", secret, at, force: options.force }, actor)
      ).pipe(domainErrors)
      const expires = result.state.previousSecretExpiresAt
      if (expires === undefined) return yield* Effect.dieMessage("rotation recorded no expiry")
      return { secret, previousSecretExpiresAt: expires }
    }).pipe(orDieUnlessHttp)

  /** One synchronous attempt with a sample event: never retried, never counted towards health. */
  const test = (id: string, input: { readonly event: string }) =>
    Effect.gen(function* () {
      const webhookId = yield* validId(id)
      if (!isWebhookEventType(input.event)) {
        return yield* Effect.fail(
          invalid(
            "event",
            `unknown event type ${JSON.stringify(input.event)}; one of ${WEBHOOK_EVENT_TYPES.join(", ")}`
          )
        )
      }
      // The endpoint's own stream: its URL and secrets as of now (a deleted one has none).
      const { state } = yield* runner.load(WebhookDecider, webhookStream(webhookId))
      const now = yield* Time.now
      const secrets = signingSecrets(state, now)
      if (!state.exists || state.deleted || secrets.current === undefined) return yield* Effect.fail(notFound)
      const eventId = yield* Ids.make("evt")
      const deliveryId = yield* Ids.make("dlv")
      const result = yield* postSigned({
        url: state.url,
        deliveryId,
        eventType: input.event,
        body: deliveryBody({
          id: eventId,
          type: input.event,
          occurredAt: now,
          data: SAMPLE_DATA[input.event]
        }),
        at: now,
        secret: secrets.current,
        previousSecret: secrets.previous,
        allowPrivate
      })
      const out: TestResult = {
        delivered: result.ok,
        statusCode: result.statusCode,
        durationMs: Math.round(result.durationMs),
        ...(result.error === null ? {} : { error: result.error }),
        ...(result.errorClass === null ? {} : { errorClass: result.errorClass }),
        deliveryId,
        eventId
      }
      return out
    }).pipe(orDieUnlessHttp)

  const deliveries = (
    id: string,
    input: {
      readonly page: number
      readonly display: number
      readonly status?: DeliveryStatus | undefined
      readonly eventId?: string | undefined
    }
  ) =>
    Effect.gen(function* () {
      const webhookId = yield* validId(id)
      yield* row(webhookId)
      return yield* withSql(listDeliveries({ webhookId, ...input })).pipe(Effect.orDie)
    }).pipe(orDieUnlessHttp)

  const delivery = (webhookId: string, deliveryId: string) =>
    Effect.gen(function* () {
      if (!Ids.isValid("dlv", deliveryId)) return yield* Effect.fail(deliveryNotFound)
      const found = yield* withSql(findDelivery(deliveryId)).pipe(Effect.orDie)
      if (Option.isNone(found) || found.value.webhookId !== webhookId)
        return yield* Effect.fail(deliveryNotFound)
      return found.value
    })

  /** Queues one more attempt of a finished delivery (same delivery id); a pending one is tried now. */
  const requeue = (
    actor: AuthenticatedActor,
    webhookId: string,
    deliveryId: string,
    source: "redeliver" | "recover"
  ) =>
    Effect.gen(function* () {
      const now = yield* Time.now
      const result = yield* executeDelivery(deliveryId, { _tag: "RequestRedelivery", source }, actor)
      if (result.events.length === 0 && result.state.status === "pending") {
        // Already queued: bring a scheduled retry forward (a claimed one is already being tried).
        yield* work.schedule({ kind: DELIVERY_KIND, key: deliveryId, dueAt: now, group: webhookId })
        return
      }
      yield* work.schedule({ ...deliveryWork(deliveryId, webhookId, now), replace: true })
    })

  const checkNotDisabled = (found: WebhookRow) =>
    found.status === "disabled"
      ? Effect.fail(
          Conflict.of({
            code: "webhook_disabled",
            message: 'the webhook is disabled: re-enable it first with PUT /webhook/:id {"status":"active"}'
          })
        )
      : Effect.void

  const redeliver = (actor: AuthenticatedActor, id: string, deliveryId: string) =>
    Effect.gen(function* () {
      const webhookId = yield* validId(id)
      yield* checkNotDisabled(yield* row(webhookId))
      yield* delivery(webhookId, deliveryId)
      yield* transact(requeue(actor, webhookId, deliveryId, "redeliver"))
      yield* work.wake
      return yield* delivery(webhookId, deliveryId)
    }).pipe(orDieUnlessHttp)

  const recover = (actor: AuthenticatedActor, id: string, input: { readonly since: Date }) =>
    Effect.gen(function* () {
      const webhookId = yield* validId(id)
      yield* checkNotDisabled(yield* row(webhookId))
      const now = yield* Time.nowMillis
      if (input.since.getTime() > now)
        return yield* Effect.fail(invalid("since", "since must not be in the future"))
      if (now - input.since.getTime() > RECOVER_WINDOW_MS)
        return yield* Effect.fail(invalid("since", "since must be within the last 14 days"))
      const ids = yield* withSql(failedDeliveriesSince(webhookId, input.since, MAX_RECOVER)).pipe(
        Effect.orDie
      )
      yield* transact(Effect.forEach(ids, (deliveryId) => requeue(actor, webhookId, deliveryId, "recover")))
      yield* work.wake
      return { recovered: ids.length, deliveryIds: ids, hasMore: ids.length === MAX_RECOVER }
    }).pipe(orDieUnlessHttp)

  return {
    list,
    listV1,
    get,
    create,
    update,
    remove,
    rotateSecret,
    test,
    deliveries,
    redeliver,
    recover
  }
})

export type WebhooksShape = Effect.Effect.Success<typeof makeWebhooks>
export type { DeliveryView }

export class Webhooks extends Context.Tag("webhooks/Webhooks")<Webhooks, WebhooksShape>() {}

export const WebhooksLive = Layer.effect(Webhooks, makeWebhooks)
