/**
 * The events feed's HTTP contract (COMMERCE.md decision 10; Stripe's Events API in the `/v1`
 * conventions of design/API.md): `GET /v1/events` and `GET /v1/events/:id`, the public events every
 * webhook endpoint is sent, for pull-based consumers and auditors. Scope `read:events`; staff only.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ApiBase } from "../http/ApiBase.js"
import { Authentication, StaffOnly } from "../http/Auth.js"
import { byId, scoped } from "../http/Endpoints.js"
import { Instant } from "../http/Fields.js"
import { V1List, v1ListParams } from "../http/Lists.js"

// --- Shapes ----------------------------------------------------------------------------------------

/**
 * One public event: the webhook delivery body (`id`, `type`, `timestamp`, `data`; spec §2.6) with
 * the `/v1` object name and `createdAt`, so a handler written for deliveries takes feed items as
 * they are.
 */
export const V1Event = Schema.Struct({
  object: Schema.Literal("event"),
  /** `evt_…`: the id the webhook body carries too (receivers dedupe on it). */
  id: Schema.String,
  /** `customer.created`, `order.created`, … */
  type: Schema.String,
  /** When the event happened (the `/v1` name; what `createdAfter`/`createdBefore` compare). */
  createdAt: Schema.Date,
  /** The same instant under the webhook body's name. */
  timestamp: Schema.Date,
  /** The resource's snapshot as of the event, secret fields left out (see the route's description). */
  data: Schema.Unknown.annotations({
    jsonSchema: { type: "object", description: "The resource snapshot as of the event" }
  })
}).annotations({ identifier: "V1Event" })

// --- Requests --------------------------------------------------------------------------------------

/** `customer.created` (exact) or `customer.*` (a prefix wildcard): dotted lower-case names. */
export const TYPE_FILTER_PATTERN = "^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)*\\.([a-z][a-z0-9_]*|\\*)$"

const TypeFilter = Schema.String.pipe(
  Schema.maxLength(100, { message: () => "type must be at most 100 characters" }),
  Schema.pattern(new RegExp(TYPE_FILTER_PATTERN), {
    message: () => "type must be an event type (order.created) or a prefix wildcard (order.*)"
  })
).annotations({
  jsonSchema: { type: "string", pattern: TYPE_FILTER_PATTERN, maxLength: 100 },
  arbitrary: () => (fc) => fc.constantFrom("customer.created", "customer.*", "order.*", "inventory.low_stock")
})

export const EventListParams = Schema.Struct({
  ...v1ListParams("evt").fields,
  type: Schema.optional(TypeFilter),
  createdAfter: Schema.optional(Instant("createdAfter")),
  createdBefore: Schema.optional(Instant("createdBefore"))
})

// --- Endpoints ---------------------------------------------------------------------------------------

export const REDACTION_RULE =
  "Secret material is never shown: a `data` field whose name ends in `token`, `secret`, `password` or " +
  "`hash` (any case, at any depth) is left out — `customer.password_reset`'s `resetToken` today. " +
  "Snapshots of an erased customer read `{ id, shredded: true }`."

export class V1EventsApi extends HttpApiGroup.make("v1Events")
  .add(
    HttpApiEndpoint.get("list", "/v1/events")
      .setUrlParams(EventListParams)
      .addSuccess(V1List(V1Event, "V1EventList"))
      .pipe(scoped("read:events"))
      .annotate(StaffOnly, true)
      .annotate(OpenApi.Summary, "List public events, newest first")
      .annotate(
        OpenApi.Description,
        "The public events (what webhook endpoints are sent, and the notification triggers such as " +
          "`customer.password_reset`), each as it was when it happened. `type`: an exact type " +
          "(`customer.created`) or a prefix wildcard (`customer.*`); a well-formed type nothing has published " +
          "lists nothing. `createdAfter` / `createdBefore`: ISO 8601 instants (`2026-01-31` or " +
          "`2026-01-31T12:00:00Z`), strictly after / strictly before; `createdBefore` must be later than " +
          "`createdAfter`. `limit` 1–100 (default 10); `startingAfter` (an event id: the next, older page) or " +
          "`endingBefore` (the previous, newer page), not both; an id of no event → 400 `resource_missing`. " +
          "An event is listed once every transaction that started before it has ended (usually milliseconds), " +
          "so pages never change and polling with `endingBefore=<newest seen>` misses nothing. " +
          REDACTION_RULE
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/events/:id")
      .addSuccess(V1Event)
      .pipe(scoped("read:events"), byId)
      .annotate(StaffOnly, true)
      .annotate(OpenApi.Summary, "One public event (`evt_…`); any other id → 404")
      .annotate(OpenApi.Description, REDACTION_RULE)
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Events (v1)")
  .annotate(
    OpenApi.Description,
    "The public events every webhook receives (Stripe's Events API), for pull-based consumers and " +
      "auditors. Staff credentials with `read:events`."
  ) {}

/** This context's routes on the service's API (`ApiBase`): what its handlers are built against. */
export const EventsRoutes = ApiBase.add(V1EventsApi)
