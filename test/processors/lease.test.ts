import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Option, Ref, TestClock } from "effect"
import { expect } from "vitest"
import { acquire, LeaseLost, release, renew, withLease } from "../../src/processors/Lease.js"
import { TestPersistence } from "../support/database.js"
import { eventually, parked, withTestClock } from "./helpers.js"

const ttl = "10 seconds"

const leaseRow = (id: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ owner: string | null; generation: number; leaseUntil: Date | null }>`
      SELECT owner, generation, lease_until AS "leaseUntil" FROM event_store.subscriptions
       WHERE subscription_id = ${id}`
  ).pipe(Effect.map((rows) => rows[0]))

const take = (id: string, owner: string) =>
  Effect.flatMap(acquire(id, { owner, ttl }), (lease) =>
    Option.isSome(lease) ? Effect.succeed(lease.value) : Effect.dieMessage(`${owner} could not take ${id}`)
  )

layer(TestPersistence, { excludeTestServices: true, timeout: 60_000 })("Lease", (it) => {
  it.effect("one owner at a time; takeover after expiry bumps the generation and fences the old owner", () =>
    withTestClock(
      Effect.gen(function* () {
        const a = yield* take("lease-1", "a")
        expect(a.generation).toBe(1)
        expect(a.checkpoint).toEqual({ xid: "0", position: 0 })
        expect(a.leaseUntil.getTime()).toBe(10_000)

        expect(Option.isNone(yield* acquire("lease-1", { owner: "b", ttl }))).toBe(true)
        yield* TestClock.adjust("5 seconds")
        const renewed = yield* renew(a, ttl)
        expect(renewed.leaseUntil.getTime()).toBe(15_000)
        yield* TestClock.adjust("10 seconds")
        expect(Option.isNone(yield* acquire("lease-1", { owner: "b", ttl }))).toBe(true)

        yield* TestClock.adjust("1 millis")
        const b = yield* take("lease-1", "b")
        expect(b.generation).toBe(2)

        const lost = yield* Effect.flip(renew(a, ttl))
        expect(lost).toEqual(new LeaseLost({ subscriptionId: "lease-1", owner: "a", generation: 1 }))
        expect(yield* release(a)).toBe(false)
        expect((yield* leaseRow("lease-1"))?.owner).toBe("b")

        expect(yield* release(b)).toBe(true)
        expect(yield* leaseRow("lease-1")).toMatchObject({ owner: null, leaseUntil: null, generation: 2 })
        const a2 = yield* take("lease-1", "a")
        expect(a2.generation).toBe(3)
        // Re-acquiring one's own live lease fences off any older incarnation with the same owner id.
        const a3 = yield* take("lease-1", "a")
        expect(a3.generation).toBe(4)
        expect(yield* Effect.flip(renew(a2, ttl))).toBeInstanceOf(LeaseLost)
      })
    )
  )

  it.effect("a paused subscription is never taken, and its holder loses it at the next heartbeat", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO event_store.subscriptions (subscription_id, status) VALUES ('lease-paused', 'paused')`
      expect(Option.isNone(yield* acquire("lease-paused", { owner: "a", ttl }))).toBe(true)

      const held = yield* take("lease-pausing", "a")
      yield* sql`UPDATE event_store.subscriptions SET status = 'paused' WHERE subscription_id = 'lease-pausing'`
      expect(yield* Effect.flip(renew(held, ttl))).toBeInstanceOf(LeaseLost)
    })
  )

  it.effect("withLease waits for the lease, heartbeats it, and releases it at the end", () =>
    withTestClock(
      Effect.gen(function* () {
        const held = yield* take("lease-2", "other")
        const started = yield* Deferred.make<number>()
        const finish = yield* Deferred.make<void>()
        const fiber = yield* Effect.fork(
          withLease("lease-2", { owner: "me", ttl, retryInterval: "1 second" }, (lease) =>
            Effect.zipRight(Deferred.succeed(started, lease.generation), Deferred.await(finish))
          )
        )
        // Its first attempt failed: it waits (on the TestClock) to try again.
        yield* parked()
        expect(yield* Deferred.isDone(started)).toBe(false)
        yield* release(held)
        yield* TestClock.adjust("1 second")
        yield* eventually(Deferred.isDone(started))
        expect(yield* Deferred.await(started)).toBe(2)
        const until = (yield* leaseRow("lease-2"))?.leaseUntil?.getTime() ?? 0
        // Heartbeats every third of the TTL keep pushing lease_until forward.
        for (let i = 0; i < 4; i++) {
          // The next heartbeat is scheduled before the clock moves past it.
          yield* parked()
          yield* TestClock.adjust("4 seconds")
          yield* eventually(
            Effect.map(leaseRow("lease-2"), (r) => (r?.leaseUntil?.getTime() ?? 0) > until + i * 4000)
          )
        }
        expect(Option.isNone(yield* acquire("lease-2", { owner: "other", ttl }))).toBe(true)
        yield* Deferred.succeed(finish, undefined)
        expect(yield* Fiber.join(fiber)).toBeUndefined()
        expect((yield* leaseRow("lease-2"))?.owner).toBeNull()
      })
    )
  )

  it.effect(
    "withLease fails with LeaseLost and interrupts its work when a heartbeat finds the lease taken",
    () =>
      withTestClock(
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const interrupted = yield* Ref.make(false)
          const started = yield* Deferred.make<void>()
          const fiber = yield* Effect.fork(
            withLease("lease-3", { owner: "me", ttl }, () =>
              Effect.zipRight(Deferred.succeed(started, undefined), Effect.never).pipe(
                Effect.onInterrupt(() => Ref.set(interrupted, true))
              )
            )
          )
          yield* Deferred.await(started)
          // Another owner takes over (as if our lease had expired during a pause).
          yield* sql`UPDATE event_store.subscriptions SET lease_until = ${new Date(-1)} WHERE subscription_id = 'lease-3'`
          yield* take("lease-3", "thief")
          // The heartbeat is scheduled before the clock moves past it.
          yield* parked()
          yield* TestClock.adjust("4 seconds")
          const exit = yield* Fiber.await(fiber)
          const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
          expect(Option.getOrNull(failure)).toBeInstanceOf(LeaseLost)
          expect(yield* Ref.get(interrupted)).toBe(true)
          expect((yield* leaseRow("lease-3"))?.owner).toBe("thief")
        })
      )
  )
})
