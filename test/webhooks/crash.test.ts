/**
 * No loss (issue 7 §5), with real processes: worker processes (`ROLE=worker`, `src/main.ts`) deliver
 * to a local receiver from the test's database. One is killed with SIGKILL mid-delivery: every event
 * is still delivered, and repeats are only deliveries that were in flight when it died (the
 * documented at-least-once window). Two processes share the work without sending anything twice.
 * PostgreSQL only: child processes cannot share an embedded database.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Webhooks } from "../../src/webhooks/Webhooks.js"
import { usingRealPostgres } from "../support/database.js"
import { eventually } from "../support/notifications.js"
import { Behaviour } from "../support/receiver.js"
import { publish, STAFF, TestReceiver, webhooksHttp } from "../support/webhooks.js"
import { killed, startWorker as startAnyWorker } from "../support/workers.js"

const startWorker = (instanceId: string) =>
  startAnyWorker(instanceId, { env: { WEBHOOK_ALLOW_PRIVATE: "true" } })

const deliveryIds = (path: string) =>
  Effect.map(TestReceiver, (r) =>
    r
      .requests()
      .filter((q) => q.path === path)
      .map((q) => q.headers["x-service-delivery"] ?? "")
  )

const endpointFor = (path: string) =>
  Effect.gen(function* () {
    const receiver = yield* TestReceiver
    // Each answer takes ~200 ms, so a kill always finds attempts in flight.
    receiver.on(path, Behaviour.drip({ chunk: "ok", everyMs: 50, times: 4 }))
    return yield* Effect.flatMap(Webhooks, (w) =>
      w.create(STAFF, { url: receiver.url(path), events: ["order.created"] })
    )
  })

describe.skipIf(!usingRealPostgres)("webhook delivery across processes (PostgreSQL)", () => {
  layer(webhooksHttp({ processors: false }), { excludeTestServices: true, timeout: 180_000 })("", (it) => {
    it.scoped(
      "a worker killed mid-delivery: every event delivered, repeats only of attempts in flight at the kill",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const hook = yield* endpointFor("/crash")
          const events = yield* Effect.forEach(
            Array.from({ length: 60 }, (_, i) => i),
            (i) => publish("order.created", { id: `ord_crash_${i}` })
          )
          const first = yield* startWorker("crash-a")
          yield* eventually(
            Effect.map(deliveryIds("/crash"), (ids) => (ids.length >= 15 ? true : undefined)),
            60_000
          )
          yield* killed(first)
          const beforeKill = new Set(yield* deliveryIds("/crash"))
          // What the dead worker held: claimed attempts, the dispatcher's lease.
          const held = yield* sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM processors.due_work
            WHERE claimed_by = 'crash-a' AND status = 'claimed'`
          // It died mid-delivery: attempts were in flight.
          expect(held[0]?.n ?? 0).toBeGreaterThan(0)
          // Its leases would run out after 90 s (attempts) / 15 s (dispatcher): let them have run out.
          yield* sql`UPDATE processors.due_work SET lease_until = now() - interval '1 second'
            WHERE claimed_by = 'crash-a' AND status = 'claimed'`
          yield* sql`UPDATE event_store.subscriptions SET lease_until = now() - interval '1 second'
            WHERE owner = 'crash-a'`
          yield* startWorker("crash-b")
          yield* eventually(
            Effect.map(deliveryIds("/crash"), (ids) =>
              new Set(ids).size >= events.length ? true : undefined
            ),
            90_000
          )
          const all = yield* deliveryIds("/crash")
          const distinct = new Set(all)
          expect(distinct.size).toBe(events.length)
          const repeats = all.length - distinct.size
          // Only what was in flight when the worker died is sent again, and only those.
          expect(repeats).toBeLessThanOrEqual(held[0]?.n ?? 0)
          const repeated = all.filter((id, i) => all.indexOf(id) !== i)
          for (const id of repeated) expect(beforeKill.has(id)).toBe(true)
          // The log agrees: every delivery succeeded (once the last outcome is recorded).
          const log = yield* eventually(
            Effect.map(
              Effect.flatMap(Webhooks, (w) => w.deliveries(hook.id, { page: 1, display: 100 })),
              (page) => (page.models.every((d) => d.status === "succeeded") ? page : undefined)
            ),
            30_000
          )
          expect(log.count).toBe(events.length)
        }),
      180_000
    )

    it.scoped(
      "two workers share the work: everything delivered exactly once, by both",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          yield* endpointFor("/pair")
          const events = yield* Effect.forEach(
            Array.from({ length: 80 }, (_, i) => i),
            (i) => publish("order.created", { id: `ord_pair_${i}` })
          )
          yield* Effect.all([startWorker("pair-c"), startWorker("pair-d")])
          yield* eventually(
            Effect.map(deliveryIds("/pair"), (ids) =>
              new Set(ids).size >= events.length ? true : undefined
            ),
            90_000
          )
          yield* Effect.sleep("500 millis")
          const all = yield* deliveryIds("/pair")
          expect(all).toHaveLength(events.length)
          expect(new Set(all).size).toBe(events.length)
          const byWorker = yield* sql<{ readonly owner: string; readonly n: number }>`
          SELECT claimed_by AS owner, count(*)::int AS n FROM processors.due_work
           WHERE kind = 'webhook.delivery' AND status = 'done' AND claimed_by LIKE 'pair-%'
           GROUP BY claimed_by ORDER BY claimed_by`
          expect(byWorker.map((r) => r.owner)).toEqual(["pair-c", "pair-d"])
        }),
      180_000
    )
  })
})
