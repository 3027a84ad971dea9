/**
 * The events feed over real HTTP (COMMERCE.md decision 10; design/API.md lists, errors and ids):
 * `GET /v1/events` (newest first, `type` exact or `prefix.*`, `createdAfter` / `createdBefore`,
 * keyset pages both ways with `hasMore`) and `GET /v1/events/:id`; the item is the webhook delivery
 * body plus `object` and `createdAt`; 404s for malformed, foreign and unknown ids; 400s with
 * `param`; 401/403 (shoppers and keys without `read:events`); secrets left out
 * (`customer.password_reset`'s `resetToken`); erased customers' snapshots stay shredded. On
 * PostgreSQL also: an event of a transaction still open is not listed, and once it commits it sorts
 * below the events listed meanwhile, so a poller with `endingBefore` misses nothing.
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { uuidv7FromMillis } from "../../src/base/Uuid.js"
import { redactSecrets } from "../../src/events/redaction.js"
import { insertPublicEvents } from "../../src/eventstore/PublicEvents.js"
import * as Ids from "../../src/kernel/Ids.js"
import { publicEventById } from "../../src/webhooks/queries.js"
import { deliveryBody } from "../../src/webhooks/signature.js"
import { adminToken, type CreatedCustomer, createCustomer, registeredShopper } from "../support/customers.js"
import { usingRealPostgres } from "../support/database.js"
import { apiKeyWith, call, expectError, IdentityHttp } from "../support/identity.js"
import { eventually } from "../support/notifications.js"

// biome-ignore lint/suspicious/noExplicitAny: feed items are inspected field by field
type Item = any

const OPTIONS = { excludeTestServices: true, timeout: 120_000 } as const
/**
 * How long a list waits for an event to pass the feed's horizon. Generous: on a shared PostgreSQL
 * server the horizon waits for every older transaction in the cluster, other suites' included.
 */
const SETTLE_MS = 30_000
const ITEM_KEYS = ["createdAt", "data", "id", "object", "timestamp", "type"]
const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
const EVT_ID = /^evt_[0-7][0-9a-z]{25}$/

const query = (params: Record<string, string | number | undefined>) => {
  const text = new URLSearchParams(
    Object.entries(params).flatMap(
      ([k, v]): Array<[string, string]> => (v === undefined ? [] : [[k, String(v)]])
    )
  ).toString()
  return text === "" ? "" : `?${text}`
}

const list = (token: string, params: Record<string, string | number | undefined> = {}) =>
  call("GET", `/v1/events${query(params)}`, { token })

/** `GET /v1/events`, asserting 200 and the list envelope. */
const page = (token: string, params: Record<string, string | number | undefined> = {}) =>
  Effect.map(list(token, params), (r) => {
    expect(r.status, r.text).toBe(200)
    expect(Object.keys(r.body).sort()).toEqual(["data", "hasMore", "object"])
    expect(r.body.object).toBe("list")
    return r.body as { object: "list"; data: Array<Item>; hasMore: boolean }
  })

/** Waits until a page with `params` lists every one of `dataIds` (matched on `data.id`). */
const pageWith = (
  token: string,
  params: Record<string, string | number | undefined>,
  dataIds: ReadonlyArray<string>
) =>
  eventually(
    Effect.map(page(token, params), (p) =>
      dataIds.every((id) => p.data.some((item) => item.data?.id === id)) ? p : undefined
    ),
    SETTLE_MS
  )

/** Every event of `params` (all pages, following `startingAfter`), with each page's size. */
const walkOlder = (token: string, params: Record<string, string | number | undefined>) =>
  Effect.gen(function* () {
    const items: Array<Item> = []
    const pages: Array<{ size: number; hasMore: boolean }> = []
    let after: string | undefined
    while (true) {
      const p = yield* page(token, { ...params, startingAfter: after })
      items.push(...p.data)
      pages.push({ size: p.data.length, hasMore: p.hasMore })
      if (!p.hasMore) return { items, pages }
      after = p.data[p.data.length - 1].id
    }
  })

const ids = (items: ReadonlyArray<Item>) => items.map((item) => item.id as string)

const sleepMs = (ms: number) => Effect.promise(() => new Promise((resolve) => setTimeout(resolve, ms)))

/** The raw stored row of a public event (its data as stored, secrets included). */
const storedData = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ data: string }>`SELECT data::text AS data FROM event_store.public_events WHERE id = ${id}`,
      (rows) => (rows[0] === undefined ? undefined : JSON.parse(rows[0].data))
    )
  ).pipe(Effect.orDie)

/** An `evt_` id no event has (well-formed). */
const unknownEventId = () => Ids.fromUuid("evt", uuidv7FromMillis(Date.now()))

describe("GET /v1/events", () => {
  layer(IdentityHttp, OPTIONS)("the feed", (it) => {
    it.effect("lists public events newest first, each the webhook body plus object and createdAt", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created = [
          yield* createCustomer(token),
          yield* createCustomer(token),
          yield* createCustomer(token)
        ]
        const p = yield* pageWith(token, { type: "customer.created", limit: 100 }, ids(created))
        const mine = p.data.filter((item) => created.some((c) => c.id === item.data.id))
        // Newest first: the last customer created comes first.
        expect(mine.map((item) => item.data.id)).toEqual(created.map((c) => c.id).reverse())
        for (const item of mine) {
          expect(Object.keys(item).sort()).toEqual(ITEM_KEYS)
          expect(item.object).toBe("event")
          expect(item.id).toMatch(EVT_ID)
          expect(item.type).toBe("customer.created")
          expect(item.createdAt).toMatch(ISO_MS)
          expect(item.timestamp).toBe(item.createdAt)
          // Exactly what a webhook delivery of this event carries as its body.
          const stored = yield* publicEventById(item.id).pipe(Effect.orDie)
          expect(stored._tag).toBe("Some")
          if (stored._tag === "Some") {
            const { object: _object, createdAt: _createdAt, ...body } = item
            expect(body).toEqual(JSON.parse(deliveryBody(stored.value)))
          }
        }
        const customer = created[0]
        expect(mine.at(-1).data).toMatchObject({ id: customer?.id, email: customer?.email })
      })
    )

    it.effect("GET /v1/events/:id answers the listed item; malformed, foreign and unknown ids → 404", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const customer = yield* createCustomer(token)
        const p = yield* pageWith(token, { type: "customer.created", limit: 100 }, [customer.id])
        const listed = p.data.find((item) => item.data.id === customer.id)
        const r = yield* call("GET", `/v1/events/${listed.id}`, { token })
        expect(r.status, r.text).toBe(200)
        expect(r.body).toEqual(listed)
        for (const id of [
          unknownEventId(),
          "evt_nope",
          "evt_8zzzzzzzzzzzzzzzzzzzzzzzzz",
          customer.id,
          listed.id.replace("evt_", "cus_"),
          listed.id.toUpperCase(),
          "%20"
        ]) {
          const missing = yield* call("GET", `/v1/events/${id}`, { token })
          expectError(missing, 404, "resource_missing")
        }
      })
    )

    it.effect("type filters: exact, a prefix wildcard, and a type nothing published", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const customer = yield* createCustomer(token)
        const updated = yield* call("PUT", `/user/${customer.id}`, { token, json: { firstName: "Ada" } })
        expect(updated.status, updated.text).toBe(200)
        const wildcard = yield* eventually(
          Effect.map(page(token, { type: "customer.*", limit: 100 }), (p) => {
            const mine = p.data.filter((item) => item.data.id === customer.id)
            return mine.length === 2 ? mine : undefined
          }),
          SETTLE_MS
        )
        expect(wildcard.map((item) => item.type)).toEqual(["customer.updated", "customer.created"])
        expect(wildcard[0].data.firstName).toBe("Ada")
        expect(wildcard[1].data.firstName).toBe("Grace")
        const exact = yield* page(token, { type: "customer.updated", limit: 100 })
        expect(exact.data.length).toBeGreaterThan(0)
        expect(new Set(exact.data.map((item) => item.type))).toEqual(new Set(["customer.updated"]))
        expect(exact.data.some((item) => item.id === wildcard[0].id)).toBe(true)
        const all = yield* walkOlder(token, { type: "customer.*", limit: 100 })
        expect(all.items.every((item) => item.type.startsWith("customer."))).toBe(true)
        expect(yield* page(token, { type: "order.*" })).toEqual({ object: "list", data: [], hasMore: false })
        expect(yield* page(token, { type: "order.created" })).toEqual({
          object: "list",
          data: [],
          hasMore: false
        })
        // `customer.*` is a prefix of whole segments: `customer` alone is not matched by `cust.*`.
        expect((yield* page(token, { type: "cust.*" })).data).toEqual([])
      })
    )

    it.effect("createdAfter / createdBefore: strictly after, strictly before, and both", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const created: Array<CreatedCustomer> = []
        for (let i = 0; i < 3; i++) {
          created.push(yield* createCustomer(token))
          // Distinct milliseconds, so each boundary splits the three.
          yield* sleepMs(5)
        }
        const p = yield* pageWith(token, { type: "customer.created", limit: 100 }, ids(created))
        const [third, second, first] = created
          .map((c) => p.data.find((item) => item.data.id === c.id))
          .reverse()
        const dataIds = (items: ReadonlyArray<Item>) =>
          items.map((item) => item.data.id).filter((id) => created.some((c) => c.id === id))
        const after = yield* page(token, {
          type: "customer.created",
          limit: 100,
          createdAfter: first.createdAt
        })
        expect(dataIds(after.data)).toEqual([third.data.id, second.data.id])
        expect(after.data.every((item) => item.createdAt > first.createdAt)).toBe(true)
        const before = yield* page(token, {
          type: "customer.created",
          limit: 100,
          createdBefore: third.createdAt
        })
        expect(dataIds(before.data)).toEqual([second.data.id, first.data.id])
        expect(before.data.every((item) => item.createdAt < third.createdAt)).toBe(true)
        const between = yield* page(token, {
          type: "customer.created",
          createdAfter: first.createdAt,
          createdBefore: third.createdAt
        })
        expect(ids(between.data)).toEqual([second.id])
        // A date alone is midnight UTC; an offset is honoured.
        const future = yield* page(token, { createdAfter: "9999-12-31" })
        expect(future.data).toEqual([])
        const offset = new Date(new Date(second.createdAt).getTime() + 2 * 3_600_000)
          .toISOString()
          .replace("Z", "+02:00")
        const viaOffset = yield* page(token, { type: "customer.created", limit: 100, createdBefore: offset })
        expect(dataIds(viaOffset.data)).toEqual([first.data.id])
      })
    )

    it.effect(
      "keyset pages both ways: startingAfter to older pages, endingBefore back, hasMore each way",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const since = new Date(Date.now() - 1).toISOString()
          const created: Array<CreatedCustomer> = []
          for (let i = 0; i < 7; i++) created.push(yield* createCustomer(token))
          yield* pageWith(token, { type: "customer.created", limit: 100, createdAfter: since }, ids(created))
          const filter = { type: "customer.created", createdAfter: since }
          const whole = yield* page(token, { ...filter, limit: 100 })
          expect(whole.data.map((item) => item.data.id)).toEqual(created.map((c) => c.id).reverse())
          expect(whole.hasMore).toBe(false)
          // Forwards (older): 3 + 3 + 1.
          const forwards = yield* walkOlder(token, { ...filter, limit: 3 })
          expect(forwards.pages).toEqual([
            { size: 3, hasMore: true },
            { size: 3, hasMore: true },
            { size: 1, hasMore: false }
          ])
          expect(ids(forwards.items)).toEqual(ids(whole.data))
          // Backwards (newer) from the oldest: pages keep the newest-first order inside.
          const oldest = whole.data[6]
          const back1 = yield* page(token, { ...filter, limit: 3, endingBefore: oldest.id })
          expect(ids(back1.data)).toEqual(ids(whole.data.slice(3, 6)))
          expect(back1.hasMore).toBe(true)
          const back2 = yield* page(token, { ...filter, limit: 3, endingBefore: back1.data[0].id })
          expect(ids(back2.data)).toEqual(ids(whole.data.slice(0, 3)))
          expect(back2.hasMore).toBe(false)
          const none = yield* page(token, { ...filter, endingBefore: whole.data[0].id })
          expect(none).toEqual({ object: "list", data: [], hasMore: false })
          // A cursor filtered out (another type) still places the page.
          const updated = yield* call("PUT", `/user/${created[3]?.id}`, {
            token,
            json: { lastName: "Lovelace" }
          })
          expect(updated.status, updated.text).toBe(200)
          const updateEvent = yield* eventually(
            Effect.map(
              page(token, { type: "customer.updated", limit: 100, createdAfter: since }),
              (p) => p.data[0]
            ),
            SETTLE_MS
          )
          const afterUpdate = yield* page(token, { ...filter, limit: 100, startingAfter: updateEvent.id })
          expect(ids(afterUpdate.data)).toEqual(ids(whole.data))
          // The default limit is 10.
          expect((yield* page(token)).data.length).toBeLessThanOrEqual(10)
        })
    )

    it.effect("bad parameters → 400 with param", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const customer = yield* createCustomer(token)
        const p = yield* pageWith(token, { type: "customer.created", limit: 100 }, [customer.id])
        const some = p.data[0].id
        const cases: ReadonlyArray<[Record<string, string>, string, string]> = [
          [{ limit: "0" }, "parameter_invalid", "limit"],
          [{ limit: "101" }, "parameter_invalid", "limit"],
          [{ limit: "2.5" }, "parameter_invalid", "limit"],
          [{ limit: "ten" }, "parameter_invalid", "limit"],
          [{ type: "order" }, "parameter_invalid", "type"],
          [{ type: "Order.created" }, "parameter_invalid", "type"],
          [{ type: "order.**" }, "parameter_invalid", "type"],
          [{ type: "*" }, "parameter_invalid", "type"],
          [{ type: "order.*.created" }, "parameter_invalid", "type"],
          [{ type: "order.created%" }, "parameter_invalid", "type"],
          [{ type: `a.${"b".repeat(200)}` }, "parameter_invalid", "type"],
          [{ type: "" }, "parameter_invalid", "type"],
          [{ createdAfter: "yesterday" }, "parameter_invalid", "createdAfter"],
          [{ createdAfter: "1700000000" }, "parameter_invalid", "createdAfter"],
          [{ createdBefore: "2026-02-30" }, "parameter_invalid", "createdBefore"],
          [
            { createdAfter: "2026-01-02T00:00:00Z", createdBefore: "2026-01-02T00:00:00Z" },
            "parameter_invalid",
            "createdBefore"
          ],
          [{ createdAfter: "2026-01-03", createdBefore: "2026-01-02" }, "parameter_invalid", "createdBefore"],
          [{ startingAfter: customer.id }, "parameter_invalid", "startingAfter"],
          [{ endingBefore: "evt_nope" }, "parameter_invalid", "endingBefore"],
          [{ startingAfter: some, endingBefore: some }, "parameter_invalid", "endingBefore"],
          [{ startingAfter: unknownEventId() }, "resource_missing", "startingAfter"],
          [{ endingBefore: unknownEventId() }, "resource_missing", "endingBefore"]
        ]
        for (const [params, code, param] of cases) {
          const r = yield* list(token, params)
          expectError(r, 400, code, param)
        }
      })
    )

    it.effect(
      "credentials: none → 401; a shopper or a key without read:events → 403; read:events → 200",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const customer = yield* createCustomer(token)
          const p = yield* pageWith(token, { type: "customer.created", limit: 100 }, [customer.id])
          const eventId = p.data[0].id
          const shopper = yield* registeredShopper()
          const readCustomers = yield* apiKeyWith(["read:customers", "read:webhooks"])
          const readEvents = yield* apiKeyWith(["read:events"])
          for (const path of ["/v1/events", `/v1/events/${eventId}`]) {
            expectError(yield* call("GET", path), 401, "missing_credentials")
            expectError(yield* call("GET", path, { token: shopper.accessToken }), 403, "insufficient_scope")
            expectError(yield* call("GET", path, { token: readCustomers.key }), 403, "insufficient_scope")
            const allowed = yield* call("GET", path, { token: readEvents.key })
            expect(allowed.status, allowed.text).toBe(200)
          }
          // 403 before anything else: a shopper's malformed request is refused for its scope, not its input.
          expectError(
            yield* call("GET", "/v1/events?limit=0", { token: shopper.accessToken }),
            403,
            "insufficient_scope"
          )
        })
    )

    it.effect("customer.password_reset: listed without its reset token (which the stored row keeps)", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const shopper = yield* registeredShopper()
        const reset = yield* call("POST", "/auth/password-reset", { json: { email: shopper.email } })
        expect(reset.status, reset.text).toBe(202)
        const r = yield* eventually(
          Effect.map(list(token, { type: "customer.password_reset", limit: 100 }), (reply) =>
            reply.body?.data?.some((item: Item) => item.data.userId === shopper.userId) ? reply : undefined
          ),
          SETTLE_MS
        )
        const item = r.body.data.find((i: Item) => i.data.userId === shopper.userId)
        const stored = yield* storedData(item.id)
        expect(typeof stored.resetToken).toBe("string")
        expect(stored.resetToken.length).toBeGreaterThan(10)
        expect(item.data).not.toHaveProperty("resetToken")
        expect(item.data).toMatchObject({ userId: shopper.userId, email: shopper.email })
        expect(item.data.expiresAt).toMatch(ISO_MS)
        expect(r.text).not.toContain(stored.resetToken)
        const { resetToken: _token, ...rest } = stored
        expect(item.data).toEqual(rest)
        const one = yield* call("GET", `/v1/events/${item.id}`, { token })
        expect(one.status, one.text).toBe(200)
        expect(one.text).not.toContain(stored.resetToken)
        expect(one.body).toEqual(item)
        // Wildcards and the unfiltered feed go through the same rule.
        const everything = yield* walkOlder(token, { limit: 100 })
        expect(JSON.stringify(everything.items)).not.toContain(stored.resetToken)
      })
    )

    it.effect("an erased customer's snapshots stay shredded in the feed; customer.deleted is listed", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const shopper = yield* registeredShopper()
        const updated = yield* call("PUT", `/user/${shopper.customerId}`, {
          token,
          json: { lastName: "Gone" }
        })
        expect(updated.status, updated.text).toBe(200)
        const reset = yield* call("POST", "/auth/password-reset", { json: { email: shopper.email } })
        expect(reset.status, reset.text).toBe(202)
        yield* eventually(
          Effect.map(page(token, { type: "customer.password_reset", limit: 100 }), (p) =>
            p.data.some((item) => item.data.userId === shopper.userId) ? true : undefined
          ),
          SETTLE_MS
        )
        const erased = yield* call("DELETE", `/user/${shopper.customerId}`, { token })
        expect(erased.status, erased.text).toBe(204)
        const deleted = yield* pageWith(token, { type: "customer.deleted", limit: 100 }, [shopper.customerId])
        expect(deleted.data.find((item) => item.data.id === shopper.customerId).data).toEqual({
          id: shopper.customerId,
          deleted: true
        })
        const everything = yield* walkOlder(token, { limit: 100 })
        expect(JSON.stringify(everything.items)).not.toContain(shopper.email)
        const about = everything.items.filter(
          (item) => item.data.id === shopper.customerId && item.type !== "customer.deleted"
        )
        expect(about.map((item) => item.type).sort()).toEqual(["customer.created", "customer.updated"])
        for (const item of about) expect(item.data).toEqual({ id: shopper.customerId, shredded: true })
      })
    )

    it.effect("the redaction rule: secret-named fields at any depth, nothing else", () =>
      Effect.sync(() => {
        expect(
          redactSecrets({
            id: "x",
            resetToken: "t",
            nested: { clientSecret: "s", password: "p", passwordHash: "h", keep: 1, tokens: 2 },
            list: [{ accessToken: "a", name: "n" }],
            Token: "T"
          })
        ).toEqual({ id: "x", nested: { keep: 1, tokens: 2 }, list: [{ name: "n" }] })
        expect(redactSecrets({ id: "cus_1", shredded: true })).toEqual({ id: "cus_1", shredded: true })
        expect(redactSecrets(null)).toBe(null)
      })
    )

    it.effect.runIf(usingRealPostgres)(
      "an event of an open transaction is not listed; once committed it sorts below what was listed",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const sql = yield* SqlClient.SqlClient
          const heldId = Ids.fromUuid("evt", uuidv7FromMillis(Date.now()))
          const inserted = yield* Effect.makeLatch(false)
          const release = yield* Effect.makeLatch(false)
          // A slow writer: its transaction (and xid) starts first, commits last.
          const writer = yield* sql
            .withTransaction(
              Effect.gen(function* () {
                yield* insertPublicEvents([
                  {
                    id: heldId,
                    type: "test.held",
                    data: { id: "held" },
                    occurredAt: new Date(),
                    sourceEventId: randomUUID(),
                    streamId: "test-held"
                  }
                ])
                yield* inserted.open
                yield* release.await
              })
            )
            .pipe(Effect.orDie, Effect.fork)
          yield* inserted.await
          const customer = yield* createCustomer(token)
          // The customer's event committed, but sorts after the held one: not listed until it commits.
          yield* sleepMs(300)
          const meanwhile = yield* page(token, { limit: 100 })
          expect(meanwhile.data.some((item) => item.data.id === customer.id)).toBe(false)
          expect(meanwhile.data.some((item) => item.id === heldId)).toBe(false)
          const newestSeen = meanwhile.data[0]?.id
          yield* release.open
          yield* writer.await
          const after = yield* pageWith(token, { limit: 100, endingBefore: newestSeen }, [
            customer.id,
            "held"
          ])
          const held = after.data.findIndex((item) => item.id === heldId)
          const created = after.data.findIndex((item) => item.data.id === customer.id)
          // Newest first: the customer's event above the held one (started earlier), both new to the poller.
          expect(held).toBeGreaterThan(created)
        })
    )
  })
})
