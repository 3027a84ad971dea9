/**
 * Test clocks on `/v1/test/clocks` (Stripe's test clocks, camelCase, `object: "test_clock"`): a
 * frozen time that customers created with `testClockId` live on, moved forward on request; advancing
 * runs every piece of billing's due work of those customers that falls due up to the new time, in time
 * order, and answers when it is done. Only with the test processor (`PAYMENT_PROCESSOR=test`;
 * otherwise every route answers 404). Staff only.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { ApiBase } from "../../http/ApiBase.js"
import { Authentication, StaffOnly } from "../../http/Auth.js"
import { byId, scoped } from "../../http/Endpoints.js"
import { Conflict, NotFound } from "../../http/errors.js"
import { Instant, Text } from "../../http/Fields.js"
import { V1List, v1ListParams } from "../../http/Lists.js"
import { TestClockStatus } from "./events.js"

/** At most this many due items run in one advance (a runaway guard): beyond → 409 `test_clock_advance_limit`. */
export const MAX_ITEMS_PER_ADVANCE = 10_000

export const TestClockObject = Schema.Struct({
  object: Schema.Literal("test_clock"),
  id: Schema.String,
  /** The time the clock's customers live on. */
  frozenTime: Schema.Date,
  name: Schema.NullOr(Schema.String),
  status: TestClockStatus,
  createdAt: Schema.Date
}).annotations({ identifier: "TestClock" })
export type TestClockObject = typeof TestClockObject.Type

/** Stripe's deleted-object shape. */
export const DeletedTestClock = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("test_clock"),
  deleted: Schema.Literal(true)
}).annotations({ identifier: "DeletedTestClock" })

/**
 * A clock's time stops short of year 9900: its subscriptions' periods and trials run up to a few years
 * ahead of it, and timestamps end at 9999 (a period ending in year 10000 has no ISO 8601 form here).
 */
const LATEST_FROZEN_TIME = new Date("9900-01-01T00:00:00.000Z")

const FrozenTime = Instant("frozenTime").pipe(
  Schema.filter((time) =>
    time.getTime() < LATEST_FROZEN_TIME.getTime()
      ? undefined
      : "frozenTime must be before 9900-01-01 (a clock's subscriptions run years ahead of it; timestamps end at 9999)"
  )
)

export const NewTestClock = Schema.Struct({
  frozenTime: FrozenTime,
  name: Schema.optional(Schema.NullOr(Text("name", 300)))
})
export type NewTestClockInput = typeof NewTestClock.Type

export const AdvanceTestClock = Schema.Struct({ frozenTime: FrozenTime })

export const TestClockListParams = v1ListParams("clock")

const ONLY_TEST = "Only while `PAYMENT_PROCESSOR=test` (otherwise 404). Staff only."

export class V1TestClocksApi extends HttpApiGroup.make("v1TestClocks")
  .add(
    HttpApiEndpoint.post("create", "/v1/test/clocks")
      .setPayload(NewTestClock)
      .addSuccess(TestClockObject, { status: 201 })
      .addError(NotFound)
      .pipe(scoped("write:subscriptions"))
      .annotate(StaffOnly, true)
      .annotate(OpenApi.Summary, "Create a test clock frozen at `frozenTime`")
      .annotate(
        OpenApi.Description,
        "`frozenTime` (ISO 8601): the clock's time; `name` optional (1–300 characters). Customers created " +
          `with \`testClockId\` (\`POST /user\`) then live on it. ${ONLY_TEST}`
      )
  )
  .add(
    HttpApiEndpoint.get("list", "/v1/test/clocks")
      .setUrlParams(TestClockListParams)
      .addSuccess(V1List(TestClockObject, "TestClockList"))
      .addError(NotFound)
      .pipe(scoped("read:subscriptions"))
      .annotate(StaffOnly, true)
      .annotate(OpenApi.Summary, "List test clocks, newest first")
      .annotate(OpenApi.Description, ONLY_TEST)
  )
  .add(
    HttpApiEndpoint.get("get", "/v1/test/clocks/:id")
      .addSuccess(TestClockObject)
      .pipe(scoped("read:subscriptions"), byId)
      .annotate(StaffOnly, true)
      .annotate(OpenApi.Summary, "A test clock")
      .annotate(OpenApi.Description, ONLY_TEST)
  )
  .add(
    HttpApiEndpoint.del("delete", "/v1/test/clocks/:id")
      .addSuccess(DeletedTestClock)
      .addError(Conflict)
      .pipe(scoped("write:subscriptions"), byId)
      .annotate(StaffOnly, true)
      .annotate(OpenApi.Summary, "Delete a test clock: its customers' pending due work is cancelled")
      .annotate(
        OpenApi.Description,
        "Answers `{id, object, deleted: true}`. While it advances → 409 `test_clock_advancing`. " +
          `Customers created on it keep their \`testClockId\`; nothing of theirs falls due any more. ${ONLY_TEST}`
      )
  )
  .add(
    HttpApiEndpoint.post("advance", "/v1/test/clocks/:id/advance")
      .setPayload(AdvanceTestClock)
      .addSuccess(TestClockObject)
      .addError(Conflict)
      .pipe(scoped("write:subscriptions"), byId)
      .annotate(StaffOnly, true)
      .annotate(OpenApi.Summary, "Advance a test clock: run everything that falls due up to `frozenTime`")
      .annotate(
        OpenApi.Description,
        "`frozenTime` must be later than the clock's (else 400 `parameter_invalid` on `frozenTime`). Runs " +
          "the due work of the clock's customers (trial ends, renewals, dunning retries, cancellations) " +
          "due up to `frozenTime` one item at a time, in time order, each as at its due time — including " +
          "work those items schedule within the range — then answers 200 with the clock `ready` at " +
          "`frozenTime`. Real time and other clocks' customers are untouched. Another advance of the same " +
          "clock meanwhile → 409 `test_clock_advancing`. More than " +
          `${MAX_ITEMS_PER_ADVANCE.toLocaleString("en-US")} items in one advance → 409 ` +
          "`test_clock_advance_limit` (the clock stops at the last item run; advance again). " +
          ONLY_TEST
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Test clocks")
  .annotate(
    OpenApi.Description,
    "Stripe's test clocks: simulate the passing of time for customers created on a clock (test processor only)."
  ) {}

export const TestClocksRoutes = ApiBase.add(V1TestClocksApi)
