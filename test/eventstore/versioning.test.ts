/**
 * schema_version and upcasting: events written by an older definition stay as they were stored and
 * are upcast on read by `decodeEventData`; nothing is ever rewritten.
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { expect } from "vitest"
import { EventStore } from "../../src/eventstore/EventStore.js"
import { decodeEventData, defineEvent, EventTypes } from "../../src/eventstore/EventType.js"
import { TestPersistence } from "../support/database.js"

/** v1 as the code looked when the first events were written. */
const RenamedV1 = defineEvent("product.renamed", {
  schema: Schema.Struct({ name: Schema.String })
})

/** v2 split the name into a title and an optional subtitle. */
const RenamedV2 = defineEvent("product.renamed", {
  version: 2,
  schema: Schema.Struct({ title: Schema.String, subtitle: Schema.optional(Schema.String) }),
  upcasters: {
    1: (data) => {
      const { name } = data as { name: string }
      const [title = "", subtitle] = name.split(" — ")
      return subtitle === undefined ? { title } : { title, subtitle }
    }
  }
})

/** v3 added a locale with a default for everything older. */
const RenamedV3 = defineEvent("product.renamed", {
  version: 3,
  schema: Schema.Struct({
    title: Schema.String,
    subtitle: Schema.optional(Schema.String),
    locale: Schema.String
  }),
  upcasters: {
    1: RenamedV2.upcasters[1] ?? ((d) => d),
    2: (data) => ({ ...(data as object), locale: "en" })
  }
})

const productId = () => `product-${randomUUID()}`

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })("EventStore schema versions", (it) => {
  it.effect("an event written as v1 is stored with schema_version 1 and upcast to v2 and v3 on read", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const sql = yield* SqlClient.SqlClient
      const id = productId()
      yield* store.append({
        streamId: id,
        streamType: "product",
        expectedVersion: "no_stream",
        events: [
          { eventType: RenamedV1, data: { name: "Kettle — stainless steel" } },
          { eventType: RenamedV1, data: { name: "Kettle" } }
        ]
      })
      const [stored1, stored2] = yield* store.readStream(id)
      expect(stored1?.schemaVersion).toBe(1)
      expect(stored1?.data).toEqual({ name: "Kettle — stainless steel" })
      if (!stored1 || !stored2) return expect.unreachable()

      expect(yield* decodeEventData(RenamedV1, stored1)).toEqual({ name: "Kettle — stainless steel" })
      expect(yield* decodeEventData(RenamedV2, stored1)).toEqual({
        title: "Kettle",
        subtitle: "stainless steel"
      })
      expect(yield* decodeEventData(RenamedV2, stored2)).toEqual({ title: "Kettle" })
      expect(yield* decodeEventData(RenamedV3, stored1)).toEqual({
        title: "Kettle",
        subtitle: "stainless steel",
        locale: "en"
      })

      // The stored row was not touched by reading.
      const rows = yield* sql<{
        schemaVersion: number
        data: unknown
      }>`SELECT schema_version AS "schemaVersion",
        data FROM event_store.events WHERE stream_id = ${id} ORDER BY stream_version`
      expect(rows).toEqual([
        { schemaVersion: 1, data: { name: "Kettle — stainless steel" } },
        { schemaVersion: 1, data: { name: "Kettle" } }
      ])
    })
  )

  it.effect("new events are written with the current version; mixed histories decode alike", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const id = productId()
      yield* store.append({
        streamId: id,
        streamType: "product",
        expectedVersion: "no_stream",
        events: [{ eventType: RenamedV1, data: { name: "Lamp — brass" } }]
      })
      yield* store.append({
        streamId: id,
        streamType: "product",
        expectedVersion: 1,
        events: [{ eventType: RenamedV2, data: { title: "Lamp", subtitle: "copper" } }]
      })
      yield* store.append({
        streamId: id,
        streamType: "product",
        expectedVersion: 2,
        events: [{ eventType: RenamedV3, data: { title: "Lampe", locale: "de" } }]
      })
      const events = yield* store.readStream(id)
      expect(events.map((e) => e.schemaVersion)).toEqual([1, 2, 3])
      const decoded = yield* Effect.forEach(events, (e) => decodeEventData(RenamedV3, e))
      expect(decoded).toEqual([
        { title: "Lamp", subtitle: "brass", locale: "en" },
        { title: "Lamp", subtitle: "copper", locale: "en" },
        { title: "Lampe", locale: "de" }
      ])
      // Old code cannot read newer events: a typed EventDecodeError, not garbage.
      const newer = events[2]
      if (!newer) return expect.unreachable()
      const error = yield* Effect.flip(decodeEventData(RenamedV2, newer))
      expect(error).toMatchObject({
        _tag: "EventDecodeError",
        eventId: newer.eventId,
        eventType: "product.renamed",
        schemaVersion: 3
      })
      expect(error.message).toContain("newer than this code")
    })
  )

  it.effect("a stored payload that no longer decodes is an EventDecodeError", () =>
    Effect.gen(function* () {
      const broken = { eventId: randomUUID(), schemaVersion: 2, data: { title: 42 } }
      const error = yield* Effect.flip(decodeEventData(RenamedV2, broken))
      expect(error).toMatchObject({ _tag: "EventDecodeError", eventId: broken.eventId, schemaVersion: 2 })
      const brokenV1 = { eventId: randomUUID(), schemaVersion: 1, data: { name: 7 } }
      // An upcaster that throws on bad data would be a defect; this one yields an undecodable value.
      const UpcastSafe = defineEvent("product.renamed", {
        version: 2,
        schema: RenamedV2.schema,
        upcasters: { 1: (d) => ({ title: (d as { name?: unknown }).name }) }
      })
      expect((yield* Effect.flip(decodeEventData(UpcastSafe, brokenV1)))._tag).toBe("EventDecodeError")
    })
  )

  it("defineEvent refuses a version without an upcaster from every older version, and bad names", () => {
    expect(() =>
      defineEvent("product.renamed", { version: 3, schema: RenamedV3.schema, upcasters: { 1: (d) => d } })
    ).toThrow(/no upcaster from v2/)
    expect(() => defineEvent("ProductRenamed", { schema: RenamedV1.schema })).toThrow(
      /<aggregate>.<past_tense>/
    )
    expect(() => defineEvent("product", { schema: RenamedV1.schema })).toThrow()
  })

  it("EventTypes finds types by name and refuses two definitions of one name", () => {
    const types = new EventTypes([RenamedV3])
    expect(types.get("product.renamed")).toBe(RenamedV3)
    expect(types.has("product.deleted")).toBe(false)
    expect(types.names).toEqual(["product.renamed"])
    expect(() => new EventTypes([RenamedV2, RenamedV3])).toThrow(/defined twice/)
  })
})
