import { layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { expect } from "vitest"
import { EventStore } from "../src/eventstore/EventStore.js"
import { defineEvent } from "../src/eventstore/EventType.js"
import { TestPersistence } from "./support/database.js"

const Opened = defineEvent("account.opened", { schema: Schema.Struct({ owner: Schema.String }) })

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })("smoke", (it) => {
  it.effect("append and read", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const r = yield* store.append({
        streamId: "account-1",
        streamType: "account",
        expectedVersion: "no_stream",
        events: [{ eventType: Opened, data: { owner: "ann" } }]
      })
      expect(r.version).toBe(1)
      const events = yield* store.readStream("account-1")
      expect(events[0]?.data).toEqual({ owner: "ann" })
      const all = yield* store.readAll({ after: { xid: "0", position: 0 }, limit: 10 })
      expect(all.events.length).toBe(1)
    })
  )
})
