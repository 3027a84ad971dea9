/**
 * The read cache (kernel/ReadCache.ts): hits cost no lookup; this process's changes drop an entry
 * when their transaction commits (never kept across a rollback's old value either): the event store
 * tells the cache of every append, whoever made it; a lookup racing a change
 * does not store what it read; other processes' appends to the cached streams drop entries through
 * the event store poll; a `clearOn` event drops every entry, here and from another process;
 * concurrent misses share one lookup; capacity bounds it.
 */
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber, Option, Schema, TestClock } from "effect"
import { expect } from "vitest"
import { productCacheOptions } from "../../src/catalog/cache.js"
import { transactionWith } from "../../src/db/Transaction.js"
import { AppendWatchers, makeAppendWatchers } from "../../src/eventstore/AppendWatchers.js"
import { origin } from "../../src/eventstore/Checkpoint.js"
import { EventStore, makeEventStore } from "../../src/eventstore/EventStore.js"
import { defineEvent } from "../../src/eventstore/EventType.js"
import { makeReadCache, readChangesStatement } from "../../src/kernel/ReadCache.js"
import { orderCacheOptions } from "../../src/orders/cache.js"
import { TestPersistence } from "../support/database.js"

const ThingRenamed = defineEvent("thing.renamed", { schema: Schema.Struct({ name: Schema.String }) })
const OwnerForgotten = defineEvent("owner.forgotten", { schema: Schema.Struct({ ownerId: Schema.String }) })

/** A lookup that counts its calls and answers `thing <n>` (the n-th call). */
const countingLoad = () => {
  const calls = { count: 0 }
  const load = Effect.sync(() => Option.some(`thing ${++calls.count}`))
  return { calls, load }
}

/** A lookup that tells when it has started and answers `answer` only once let through (`proceed`). */
const gatedLookup = <A, E>(answer: Effect.Effect<A, E>) =>
  Effect.gen(function* () {
    const started = yield* Deferred.make<void>()
    const proceed = yield* Deferred.make<void>()
    const lookup = Deferred.succeed(started, undefined).pipe(
      Effect.zipRight(Deferred.await(proceed)),
      Effect.zipRight(answer)
    )
    return { started, proceed, lookup }
  })

const cacheOf = (capacity = 100) =>
  makeReadCache<string>({
    name: "things",
    capacity,
    streamPrefix: "thing-",
    clearOn: [{ streamPrefix: "owner-", eventType: OwnerForgotten.type }],
    pollInterval: Duration.millis(20)
  })

const renamed = (store: typeof EventStore.Service, id: string) =>
  store.append({
    streamId: `thing-${id}`,
    streamType: "thing",
    expectedVersion: "any",
    events: [{ eventType: ThingRenamed, data: { name: "renamed" } }],
    metadata: { actor: { type: "system", id: "test" } }
  })

const forgotten = (store: typeof EventStore.Service, ownerId: string) =>
  store.append({
    streamId: `owner-${ownerId}`,
    streamType: "owner",
    expectedVersion: "any",
    events: [{ eventType: OwnerForgotten, data: { ownerId } }],
    metadata: { actor: { type: "system", id: "test" } }
  })

/** The event store of another process: its appends are not told to this process's caches. */
const elsewhere = Effect.provideServiceEffect(makeEventStore, AppendWatchers, makeAppendWatchers)

/** Another process's write: an event appended to `thing-<id>`. */
const appendElsewhere = (id: string) => Effect.flatMap(elsewhere, (store) => renamed(store, id))

/** Reads `id` every 20 ms until it is looked up again (a generous bound for a loaded machine). */
const reloadedWithinPolls = (
  cache: Effect.Effect.Success<ReturnType<typeof cacheOf>>,
  id: string,
  load: Effect.Effect<Option.Option<string>>,
  calls: { readonly count: number }
) =>
  Effect.gen(function* () {
    for (let i = 0; i < 250; i++) {
      yield* Effect.sleep(Duration.millis(20))
      const before = calls.count
      yield* cache.get(id, load)
      if (calls.count > before) return true
    }
    return false
  })

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })("ReadCache", (it) => {
  it.scoped("answers from memory once looked up; an append to its stream drops the entry", () =>
    Effect.gen(function* () {
      const cache = yield* cacheOf()
      const { calls, load } = countingLoad()
      expect(yield* cache.get("a", load)).toEqual(Option.some("thing 1"))
      expect(yield* cache.get("a", load)).toEqual(Option.some("thing 1"))
      expect(calls.count).toBe(1)
      yield* renamed(yield* EventStore, "a")
      expect(yield* cache.get("a", load)).toEqual(Option.some("thing 2"))
      expect(calls.count).toBe(2)
      // Nothing is kept for a missing id.
      const missing = { count: 0 }
      const none = Effect.sync(() => {
        missing.count++
        return Option.none<string>()
      })
      yield* cache.get("b", none)
      yield* cache.get("b", none)
      expect(missing.count).toBe(2)
    })
  )

  it.scoped("an append inside a transaction drops the entry when it commits", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const cache = yield* cacheOf()
      const { calls, load } = countingLoad()
      yield* cache.get("c", load)
      yield* transactionWith(sql)(
        Effect.gen(function* () {
          yield* renamed(yield* EventStore, "c")
          // A read during the transaction may see the old row: it is not kept.
          yield* cache.get("c", load)
        })
      )
      expect(yield* cache.get("c", load)).toEqual(Option.some("thing 3"))
      expect(calls.count).toBe(3)
      expect(yield* cache.get("c", load)).toEqual(Option.some("thing 3"))
    })
  )

  it.scoped("a lookup that a change overtook does not store what it read", () =>
    Effect.gen(function* () {
      const cache = yield* cacheOf()
      const slow = yield* gatedLookup(Effect.succeed(Option.some("old row")))
      const fiber = yield* Effect.fork(cache.get("d", slow.lookup))
      yield* Deferred.await(slow.started)
      yield* renamed(yield* EventStore, "d")
      yield* Deferred.succeed(slow.proceed, undefined)
      expect(yield* Fiber.join(fiber)).toEqual(Option.some("old row"))
      const { calls, load } = countingLoad()
      expect(yield* cache.get("d", load)).toEqual(Option.some("thing 1"))
      expect(calls.count).toBe(1)
    })
  )

  it.scoped(
    "concurrent misses of one id share one lookup; after a change, or a failure, requests look up anew",
    () =>
      Effect.gen(function* () {
        const cache = yield* cacheOf()
        const calls = { count: 0 }
        const gated = yield* gatedLookup(Effect.sync(() => Option.some(`row ${++calls.count}`)))
        // 50 requests for one id at once: one lookup, everyone gets its answer.
        const herd = yield* Effect.fork(
          Effect.all(
            Array.from({ length: 50 }, () => cache.get("h", gated.lookup)),
            { concurrency: "unbounded" }
          )
        )
        yield* Deferred.await(gated.started)
        yield* Effect.yieldNow()
        yield* Deferred.succeed(gated.proceed, undefined)
        expect(new Set((yield* Fiber.join(herd)).map(Option.getOrNull))).toEqual(new Set(["row 1"]))
        expect(calls.count).toBe(1)

        // A change while a lookup runs: a request after it does not take the older answer.
        const slow = yield* gatedLookup(Effect.succeed(Option.some("before the change")))
        const first = yield* Effect.fork(cache.get("i", slow.lookup))
        yield* Deferred.await(slow.started)
        yield* renamed(yield* EventStore, "i")
        expect(yield* cache.get("i", Effect.succeed(Option.some("after the change")))).toEqual(
          Option.some("after the change")
        )
        yield* Deferred.succeed(slow.proceed, undefined)
        expect(yield* Fiber.join(first)).toEqual(Option.some("before the change"))

        // The first lookup fails: the request waiting on it looks up for itself.
        const broken = yield* gatedLookup(Effect.fail("database down" as const))
        const leader = yield* Effect.fork(Effect.either(cache.get("j", broken.lookup)))
        yield* Deferred.await(broken.started)
        const follower = yield* Effect.fork(cache.get("j", Effect.succeed(Option.some("looked up again"))))
        yield* Effect.yieldNow()
        yield* Deferred.succeed(broken.proceed, undefined)
        expect((yield* Fiber.join(leader))._tag).toBe("Left")
        expect(yield* Fiber.join(follower)).toEqual(Option.some("looked up again"))
      })
  )

  it.scoped("another process's append to a cached stream drops the entry within a poll", () =>
    Effect.gen(function* () {
      const cache = yield* cacheOf()
      const { calls, load } = countingLoad()
      yield* cache.get("e", load)
      yield* cache.get("f", load)
      yield* appendElsewhere("e")
      // Not told here: still cached until the poll sees the append.
      const before = calls.count
      yield* cache.get("e", load)
      expect(calls.count).toBe(before)
      expect(yield* reloadedWithinPolls(cache, "e", load, calls)).toBe(true)
      // `f` did not change: still cached.
      const after = calls.count
      yield* cache.get("f", load)
      expect(calls.count).toBe(after)
    })
  )

  // Many events from another process, then the change of a held entry: the poll reaches it, past
  // 2,500 events of streams it does not hold (the database leaves them out of its answer, and the
  // checkpoint moves past them) or 1,500 changes of cached streams it holds none of (more than one
  // poll statement returns: it reads batch after batch).
  for (const { title, count, stream, held } of [
    { title: "more than a poll's batch of other streams' events", count: 2_500, stream: "other", held: "g" },
    {
      title: "a full batch of the cached streams' own changes",
      count: 1_500,
      stream: "thing-uncached",
      held: "m"
    }
  ])
    it.scoped(`the poll reaches a change behind ${title}`, () =>
      Effect.gen(function* () {
        const cache = yield* cacheOf()
        const { calls, load } = countingLoad()
        const untouched = `${held}-untouched`
        yield* cache.get(held, load)
        yield* cache.get(untouched, load)
        const other = yield* elsewhere
        yield* other.appendMany(
          Array.from({ length: count }, (_, i) => ({
            streamId: `${stream}-${i}-${Date.now()}`,
            streamType: stream,
            expectedVersion: "any" as const,
            events: [{ eventType: ThingRenamed, data: { name: `${stream} ${i}` } }],
            metadata: { actor: { type: "system" as const, id: "test" } }
          }))
        )
        yield* appendElsewhere(held)
        expect(yield* reloadedWithinPolls(cache, held, load, calls)).toBe(true)
        const after = calls.count
        yield* cache.get(untouched, load)
        expect(calls.count).toBe(after)
      })
    )

  it.scoped("this process's appends drop the entry with no word from the writer, on commit too", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const store = yield* EventStore
      const cache = yield* cacheOf()
      const { load } = countingLoad()
      yield* cache.get("k", load)
      yield* cache.get("l", load)
      // A standalone append (its own commit): dropped before it returns.
      yield* renamed(store, "k")
      expect(yield* cache.get("k", load)).toEqual(Option.some("thing 3"))
      // Inside a transaction: a read after the append is not kept; the entry goes again on commit.
      yield* transactionWith(sql)(
        Effect.gen(function* () {
          yield* renamed(store, "k")
          expect(yield* cache.get("k", load)).toEqual(Option.some("thing 4"))
        })
      )
      expect(yield* cache.get("k", load)).toEqual(Option.some("thing 5"))
      expect(yield* cache.get("k", load)).toEqual(Option.some("thing 5"))
      // Another stream's append leaves `l` alone.
      expect(yield* cache.get("l", load)).toEqual(Option.some("thing 2"))
    })
  )

  it.scoped("a clearOn event drops every entry: appended here at once, elsewhere within a poll", () =>
    Effect.gen(function* () {
      const store = yield* EventStore
      const cache = yield* cacheOf()
      const { calls, load } = countingLoad()
      yield* cache.get("m", load)
      yield* cache.get("n", load)
      // Another event type of that stream family drops nothing.
      yield* store.append({
        streamId: "owner-o1",
        streamType: "owner",
        expectedVersion: "any",
        events: [{ eventType: ThingRenamed, data: { name: "not a forgetting" } }],
        metadata: { actor: { type: "system", id: "test" } }
      })
      expect(cache.size()).toBe(2)
      yield* forgotten(store, "o1")
      expect(cache.size()).toBe(0)
      expect(yield* cache.get("m", load)).toEqual(Option.some("thing 3"))
      yield* cache.get("n", load)
      expect(cache.size()).toBe(2)
      yield* Effect.flatMap(elsewhere, (other) => forgotten(other, "o2"))
      expect(yield* reloadedWithinPolls(cache, "m", load, calls)).toBe(true)
      const before = calls.count
      yield* cache.get("n", load)
      expect(calls.count).toBe(before + 1)
    })
  )

  it.scoped("holds at most its capacity, dropping the oldest entry", () =>
    Effect.gen(function* () {
      const cache = yield* cacheOf(3)
      const { calls, load } = countingLoad()
      for (const id of ["g1", "g2", "g3", "g4"]) yield* cache.get(id, load)
      expect(cache.size()).toBe(3)
      yield* cache.get("g4", load)
      expect(calls.count).toBe(4)
      yield* cache.get("g1", load)
      expect(calls.count).toBe(5)
    })
  )
})

layer(TestPersistence, { timeout: 60_000 })("ReadCache without a recent poll", (it) => {
  it.scoped("is bypassed (every read looks up) until a poll succeeds again", () =>
    Effect.gen(function* () {
      const cache = yield* makeReadCache<string>({
        name: "stalled",
        capacity: 10,
        streamPrefix: "thing-",
        pollInterval: Duration.hours(1),
        maxPollAge: Duration.seconds(1)
      })
      const { calls, load } = countingLoad()
      yield* cache.get("h", load)
      yield* cache.get("h", load)
      expect(calls.count).toBe(1)
      // Two seconds without a poll: the entry may be stale, so the lookup runs every time.
      yield* TestClock.adjust(Duration.seconds(2))
      yield* cache.get("h", load)
      yield* cache.get("h", load)
      expect(calls.count).toBe(3)
      // A poll that succeeds makes the cache usable again: it dropped whatever changed meanwhile
      // (nothing here), so the entry kept from before answers.
      yield* cache.poll
      expect(yield* cache.get("h", load)).toEqual(Option.some("thing 1"))
      expect(calls.count).toBe(3)
    })
  )
})

layer(TestPersistence, { timeout: 60_000 })("ReadCache polls of the app's caches", (it) => {
  // Their polls read only their own streams' events through migration 0029's partial index, not
  // every event since the last poll (a usage batch appends 1,000): the planner must be able to prove
  // the index's predicate from the poll's, which a change of prefix or spelling on either side breaks.
  for (const options of [productCacheOptions, orderCacheOptions])
    it.effect(`${options.name}: the poll reads the cached streams' index`, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const plan = yield* sql<{
          "QUERY PLAN": string
        }>`EXPLAIN ${readChangesStatement(sql, options, origin)}`
        expect(plan.map((row) => row["QUERY PLAN"]).join("\n")).toContain("events_cached_streams_idx")
      })
    )
})
