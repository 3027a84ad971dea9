/**
 * Crypto-shredding: personal fields are encrypted per data subject at rest, decrypted on read, and
 * read back as `Shredded` once the subject is forgotten — the log stays append-only and replayable.
 */
import { randomBytes, randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect, Option, Schema, TestClock, TestContext } from "effect"
import { expect } from "vitest"
import { AppConfig } from "../../src/config.js"
import * as Checkpoint from "../../src/eventstore/Checkpoint.js"
import { EventStore, makeEventStore, type StoredEvent } from "../../src/eventstore/EventStore.js"
import {
  type AnyEventType,
  decodeEventData,
  defineEvent,
  EventTypes,
  isShredded,
  Personal,
  personalKeys,
  revealOr
} from "../../src/eventstore/EventType.js"
import {
  type Envelope,
  isEnvelope,
  Keyring,
  loadMasterKey,
  makeKeyring
} from "../../src/eventstore/Keyring.js"
import { TestPersistence } from "../support/database.js"
import { countStatements } from "../support/statements.js"

const Address = Schema.Struct({ line1: Schema.String, city: Schema.String, country: Schema.String })

const Registered = defineEvent("customer.registered", {
  schema: Schema.Struct({
    customerId: Schema.String,
    email: Personal(Schema.String),
    name: Personal(Schema.String),
    phone: Schema.optional(Personal(Schema.String)),
    address: Personal(Address),
    plan: Schema.Literal("free", "pro")
  }),
  subject: (d) => d.customerId
})
const EmailChanged = defineEvent("customer.email_changed", {
  schema: Schema.Struct({
    customerId: Schema.String,
    email: Personal(Schema.String),
    verified: Schema.Boolean
  }),
  subject: (d) => d.customerId
})
const PlanChanged = defineEvent("customer.plan_changed", {
  schema: Schema.Struct({ customerId: Schema.String, plan: Schema.Literal("free", "pro") })
})
const registry = new EventTypes([Registered, EmailChanged, PlanChanged])

interface Customer {
  readonly id: string
  readonly stream: string
  readonly email: string
  readonly name: string
  readonly phone: string
  readonly city: string
}

const newCustomer = (): Customer => {
  const id = `cus_${randomUUID().replaceAll("-", "")}`
  const tag = randomBytes(4).toString("hex")
  return {
    id,
    stream: `customer-${id}`,
    email: `ann.${tag}@example.com`,
    name: `Ann Example ${tag}`,
    phone: `+4930${Number.parseInt(tag, 16)}`,
    city: `Springfield-${tag}`
  }
}

/** What `register` records of the customer, and what reading it back gives. */
const registeredData = (c: Customer) => ({
  customerId: c.id,
  email: c.email,
  name: c.name,
  phone: c.phone,
  address: { line1: "1 Main St", city: c.city, country: "DE" },
  plan: "pro" as const
})

const register = (c: Customer) =>
  Effect.flatMap(EventStore, (store) =>
    store.append({
      streamId: c.stream,
      streamType: "customer",
      expectedVersion: "no_stream",
      events: [
        { eventType: Registered, data: registeredData(c) },
        { eventType: PlanChanged, data: { customerId: c.id, plan: "free" } }
      ]
    })
  )

const rawRows = (streamId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ text: string; data: Record<string, unknown> }>`SELECT data::text AS text, data
      FROM event_store.events WHERE stream_id = ${streamId} ORDER BY stream_version`
  )

const keyRow = (subject: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{
        hasKey: boolean
        shreddedAt: Date | null
        kekId: string
      }>`SELECT wrapped_dek IS NOT NULL AS "hasKey",
        shredded_at AS "shreddedAt", kek_id AS "kekId" FROM event_store.subject_keys WHERE subject_id = ${subject}`,
      (rows) => Option.fromNullable(rows[0])
    )
  )

const keyRows = (subject: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`SELECT subject_id FROM event_store.subject_keys WHERE subject_id = ${subject}`
  )

const decodeAll = (events: ReadonlyArray<StoredEvent>) =>
  Effect.forEach(events, (e) => {
    const type: AnyEventType | undefined = registry.get(e.type)
    return type
      ? Effect.map(decodeEventData(type, e), (data) => ({ type: e.type, streamId: e.streamId, data }))
      : Effect.dieMessage(`unknown event type ${e.type}`)
  })

const masterKeyFromConfig = Effect.flatMap(AppConfig, () => loadMasterKey)

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })(
  "EventStore crypto-shredding",
  (it) => {
    it("Personal fields are found at the top level of the schema, also when optional", () => {
      expect(Registered.personalKeys).toEqual(["email", "name", "phone", "address"])
      expect(personalKeys(PlanChanged.schema)).toEqual([])
      expect(() =>
        defineEvent("customer.noted", { schema: Schema.Struct({ note: Personal(Schema.String) }) })
      ).toThrow(/no subject/)
    })

    it.effect("personal fields are encrypted at rest and decrypted by readStream", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const c = newCustomer()
        yield* register(c)

        const rows = yield* rawRows(c.stream)
        for (const row of rows) {
          for (const secret of [c.email, c.name, c.phone, c.city, "1 Main St"])
            expect(row.text).not.toContain(secret)
        }
        const stored = rows[0]?.data ?? {}
        for (const key of ["email", "name", "phone", "address"]) {
          expect(isEnvelope(stored[key])).toBe(true)
          expect((stored[key] as Envelope).$pii).toBe(c.id)
        }
        expect(stored.plan).toBe("pro")
        expect(stored.customerId).toBe(c.id)
        // Two encryptions of one value differ (random IV).
        expect((stored.email as Envelope).v).not.toBe((stored.name as Envelope).v)

        const key = yield* keyRow(c.id)
        expect(Option.map(key, (k) => k.hasKey)).toEqual(Option.some(true))

        const events = yield* store.readStream(c.stream)
        expect(events[0]?.data).toEqual(registeredData(c))
        const [decoded] = yield* decodeAll(events)
        expect(decoded?.data).toMatchObject({ email: c.email, name: c.name })
      })
    )

    it.effect("forgetSubject shreds the subject: reads, decoding, replay, new writes, public events", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const sql = yield* SqlClient.SqlClient
        const ann = newCustomer()
        const bob = newCustomer()
        yield* register(ann)
        yield* register(bob)
        yield* store.append({
          streamId: ann.stream,
          streamType: "customer",
          expectedVersion: 2,
          events: [
            {
              eventType: EmailChanged,
              data: { customerId: ann.id, email: `new.${ann.email}`, verified: true }
            }
          ]
        })
        const evtIds = [
          `evt_${randomUUID()}`,
          `evt_${randomUUID()}`,
          `evt_${randomUUID()}`,
          `evt_${randomUUID()}`
        ]
        const publicRow = (id: string, subject: string | null, email: string) =>
          sql`INSERT INTO event_store.public_events (id, type, data, occurred_at, source_event_id, stream_id, subject_id)
            VALUES (${id}, 'customer.created', ${JSON.stringify({ id, object: "event", data: { email } })}::jsonb,
                    ${new Date()}, ${randomUUID()}, ${subject ?? "none"}, ${subject})`
        yield* publicRow(evtIds[0] ?? "", ann.id, ann.email)
        yield* publicRow(evtIds[1] ?? "", ann.id, `new.${ann.email}`)
        yield* publicRow(evtIds[2] ?? "", bob.id, bob.email)
        yield* publicRow(evtIds[3] ?? "", null, "shop@example.com")
        const rawBefore = yield* rawRows(ann.stream)

        expect(yield* store.forgetSubject(ann.id)).toBe(true)
        // Idempotent: a second erasure finds no key.
        expect(yield* store.forgetSubject(ann.id)).toBe(false)

        // The key is gone; a tombstone remains.
        const key = yield* keyRow(ann.id)
        expect(Option.map(key, (k) => [k.hasKey, k.shreddedAt !== null])).toEqual(Option.some([false, true]))
        // The log itself was not rewritten.
        expect(yield* rawRows(ann.stream)).toEqual(rawBefore)

        // Reads: personal fields are Shredded, everything else intact, and the schema still decodes.
        const events = yield* store.readStream(ann.stream)
        const [registered, planChanged, emailChanged] = yield* decodeAll(events)
        const reg = registered?.data as typeof Registered.schema.Type
        expect(isShredded(reg.email)).toBe(true)
        expect(isShredded(reg.name)).toBe(true)
        expect(reg.phone !== undefined && isShredded(reg.phone)).toBe(true)
        expect(isShredded(reg.address)).toBe(true)
        expect(revealOr(reg.email, "[erased]")).toBe("[erased]")
        expect(reg.customerId).toBe(ann.id)
        expect(reg.plan).toBe("pro")
        expect(planChanged?.data).toEqual({ customerId: ann.id, plan: "free" })
        const changed = emailChanged?.data as typeof EmailChanged.schema.Type
        expect(isShredded(changed.email)).toBe(true)
        expect(changed.verified).toBe(true)
        for (const secret of [ann.email, ann.name, ann.city])
          expect(JSON.stringify(events)).not.toContain(secret)

        // Bob is untouched.
        const bobEvents = yield* decodeAll(yield* store.readStream(bob.stream))
        expect(bobEvents[0]?.data).toMatchObject({ email: bob.email, name: bob.name })

        // A replay of the whole feed from the origin still decodes every event.
        const feed: StoredEvent[] = []
        let checkpoint = Checkpoint.origin
        for (;;) {
          const batch = yield* store.readAll({ after: checkpoint, limit: 2 })
          feed.push(...batch.events)
          checkpoint = batch.checkpoint
          if (batch.events.length === 0) break
        }
        const replayed = yield* decodeAll(feed)
        expect(replayed.filter((e) => e.streamId === ann.stream)).toHaveLength(3)
        expect(
          replayed.find((e) => e.streamId === ann.stream && e.type === "customer.registered")?.data
        ).toMatchObject({
          email: { _tag: "Shredded" },
          plan: "pro"
        })
        expect(
          replayed.find((e) => e.streamId === bob.stream && e.type === "customer.registered")?.data
        ).toMatchObject({
          email: bob.email
        })

        // No new personal data can be written for a forgotten subject; nothing is written.
        for (const write of [
          store.append({
            streamId: ann.stream,
            streamType: "customer",
            expectedVersion: 3,
            events: [
              {
                eventType: EmailChanged,
                data: { customerId: ann.id, email: "again@example.com", verified: false }
              }
            ]
          }),
          store.append({
            streamId: `customer-${ann.id}-2`,
            streamType: "customer",
            expectedVersion: "no_stream",
            events: [
              {
                eventType: Registered,
                data: {
                  customerId: ann.id,
                  email: "again@example.com",
                  name: "Ann",
                  address: { line1: "x", city: "y", country: "DE" },
                  plan: "free"
                }
              }
            ]
          })
        ]) {
          const error = yield* Effect.flip(write)
          expect(error).toMatchObject({ _tag: "SubjectForgotten", subjectId: ann.id })
        }
        expect(Option.map(yield* store.streamInfo(ann.stream), (i) => i.version)).toEqual(Option.some(3))
        expect(yield* store.streamInfo(`customer-${ann.id}-2`)).toEqual(Option.none())
        // Events without personal data still append to the stream.
        expect(
          (yield* store.append({
            streamId: ann.stream,
            streamType: "customer",
            expectedVersion: 3,
            events: [{ eventType: PlanChanged, data: { customerId: ann.id, plan: "pro" } }]
          })).version
        ).toBe(4)

        // Public-event snapshots about Ann are reduced to their id; the others are untouched.
        const publics = yield* sql<{
          id: string
          data: unknown
        }>`SELECT id, data FROM event_store.public_events
        WHERE id IN ${sql.in(evtIds)}`
        const byId = new Map(publics.map((p) => [p.id, p.data]))
        expect(byId.get(evtIds[0] ?? "")).toEqual({ id: evtIds[0], shredded: true })
        expect(byId.get(evtIds[1] ?? "")).toEqual({ id: evtIds[1], shredded: true })
        expect(byId.get(evtIds[2] ?? "")).toMatchObject({ data: { email: bob.email } })
        expect(byId.get(evtIds[3] ?? "")).toMatchObject({ data: { email: "shop@example.com" } })
      })
    )

    it.effect("a failed append may leave a new subject key behind; the next append reuses it", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const c = newCustomer()
        const attempt = (expectedVersion: 0 | 5) =>
          store.append({
            streamId: c.stream,
            streamType: "customer",
            expectedVersion,
            events: [
              {
                eventType: EmailChanged,
                data: { customerId: c.id, email: c.email, verified: false }
              }
            ]
          })
        expect((yield* Effect.flip(attempt(5)))._tag).toBe("WrongExpectedVersion")
        expect(yield* store.streamInfo(c.stream)).toEqual(Option.none())
        expect(Option.map(yield* keyRow(c.id), (k) => k.hasKey)).toEqual(Option.some(true))
        yield* attempt(0)
        const [written] = yield* store.readStream(c.stream)
        expect((written?.data as { email?: unknown } | undefined)?.email).toBe(c.email)
      })
    )

    it.effect("forgetting a subject that never had personal data still blocks it for the future", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const c = newCustomer()
        expect(yield* store.forgetSubject(c.id)).toBe(false)
        expect(Option.map(yield* keyRow(c.id), (k) => k.hasKey)).toEqual(Option.some(false))
        const error = yield* Effect.flip(register(c))
        expect(error).toMatchObject({ _tag: "SubjectForgotten", subjectId: c.id })
        expect(yield* store.streamInfo(c.stream)).toEqual(Option.none())
      })
    )

    it.effect(
      "another process with the same master key decrypts; a tampered or relabelled envelope does not",
      () =>
        Effect.gen(function* () {
          const ann = newCustomer()
          const bob = newCustomer()
          yield* register(ann)
          yield* register(bob)
          const annEmail = (yield* rawRows(ann.stream))[0]?.data.email as Envelope
          const bobEmail = (yield* rawRows(bob.stream))[0]?.data.email as Envelope
          const master = yield* masterKeyFromConfig
          const other = yield* makeKeyring(master)
          const flipped = `${annEmail.v.slice(0, 20)}${annEmail.v[20] === "A" ? "B" : "A"}${annEmail.v.slice(21)}`
          const opened = yield* other.open([
            annEmail,
            bobEmail,
            { $pii: ann.id, v: flipped },
            { $pii: ann.id, v: bobEmail.v }
          ])
          expect(opened[0]).toBe(ann.email)
          expect(opened[1]).toBe(bob.email)
          expect(isShredded(opened[2])).toBe(true)
          expect(isShredded(opened[3])).toBe(true)
          expect(yield* other.isForgotten(ann.id)).toBe(false)
        })
    )

    it.effect("a key cached by another process is dropped after its TTL once the subject is forgotten", () =>
      Effect.gen(function* () {
        const store = yield* EventStore
        const c = newCustomer()
        yield* register(c)
        const envelope = (yield* rawRows(c.stream))[0]?.data.email as Envelope
        const other = yield* makeKeyring(yield* masterKeyFromConfig)
        expect(yield* other.open([envelope])).toEqual([c.email])
        yield* store.forgetSubject(c.id)
        // This process's own keyring knows at once.
        const [own] = yield* store.readStream(c.stream)
        expect(isShredded((own?.data as { email?: unknown } | undefined)?.email)).toBe(true)
        // The other one re-reads the key row after the cache TTL (60 s).
        yield* TestClock.adjust("61 seconds")
        expect(isShredded((yield* other.open([envelope]))[0])).toBe(true)
        expect(yield* other.isForgotten(c.id)).toBe(true)
        // Writing through the other keyring is refused at once: writes always check the key row.
        expect((yield* Effect.flip(other.sealAll(c.id, ["x"])))._tag).toBe("SubjectForgotten")
      }).pipe(Effect.provide(TestContext.TestContext))
    )

    it.effect(
      "an append seals with no key statement of its own; a key this process does not hold, or holds stale, is looked up",
      () =>
        Effect.gen(function* () {
          const store = yield* EventStore
          const sql = yield* SqlClient.SqlClient
          const c = newCustomer()
          // A new subject: its key is created by the append's own statement.
          expect((yield* countStatements(register(c))).statements).toBe(1)
          const changeEmail = (s: typeof store, email: string, expectedVersion: number) =>
            s.append({
              streamId: c.stream,
              streamType: "customer",
              expectedVersion,
              events: [{ eventType: EmailChanged, data: { customerId: c.id, email, verified: false } }]
            })
          // Another process (its own keyring) knows no key of the subject: its append finds the
          // subject's key row, writes nothing, reads the key, seals again and appends.
          const other = yield* makeEventStore.pipe(
            Effect.provideService(Keyring, yield* makeKeyring(yield* masterKeyFromConfig))
          )
          expect((yield* countStatements(changeEmail(other, "b@example.com", 2))).statements).toBe(3)
          // From then on it holds the key: one statement again.
          expect((yield* countStatements(changeEmail(other, "c@example.com", 3))).statements).toBe(1)
          expect((yield* keyRows(c.id)).length).toBe(1)
          const read = yield* store.readStream(c.stream)
          expect(read.map((e) => (e.data as { email?: unknown }).email)).toEqual([
            c.email,
            undefined,
            "b@example.com",
            "c@example.com"
          ])
          // A key held for writing whose transaction rolled back is not the subject's key: not used.
          const d = newCustomer()
          yield* Effect.flip(sql.withTransaction(Effect.zipRight(register(d), Effect.fail("roll back"))))
          expect((yield* keyRows(d.id)).length).toBe(0)
          yield* register(d)
          const [registered] = yield* store.readStream(d.stream)
          expect((registered?.data as { email?: unknown } | undefined)?.email).toBe(d.email)
          // A held key whose subject another process forgot: the append is refused, nothing written.
          expect(yield* (yield* makeKeyring(yield* masterKeyFromConfig)).forget(c.id)).toBe(true)
          expect((yield* Effect.flip(changeEmail(other, "d@example.com", 4)))._tag).toBe("SubjectForgotten")
          expect((yield* rawRows(c.stream)).length).toBe(4)
        })
    )
  }
)
