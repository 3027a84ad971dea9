/**
 * Concurrent batches over the same subscriptions and hours, their records in different orders, some
 * identifiers sent by every batch (issue #21 items 3 and 7: never a 5xx, exact summaries). Each write
 * takes its locks in one order — subscriptions by id, records' keys, rollup rows by
 * (subscription, meter, hour) — so two batches never wait on each other crosswise (a deadlock, which
 * PostgreSQL breaks by failing one of them). PostgreSQL only: PGlite has one connection.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { adminToken } from "../../support/customers.js"
import { usingRealPostgres } from "../../support/database.js"
import { call, IdentityHttp } from "../../support/identity.js"
import { getSummary, HOUR, subscriptionReadModelFixture, sumPrice, uniqueMeter } from "./fixtures.js"

const SUBSCRIPTIONS = 8
const BATCHES = 40
const SHARED = 12

const shuffled = <A>(values: ReadonlyArray<A>, seed: number): Array<A> => {
  const out = [...values]
  let x = seed * 2654435761 + 1
  for (let i = out.length - 1; i > 0; i--) {
    x = (x * 1103515245 + 12345) % 2147483648
    const j = x % (i + 1)
    const a = out[i] as A
    out[i] = out[j] as A
    out[j] = a
  }
  return out
}

describe.skipIf(!usingRealPostgres)("usage batches under concurrency (PostgreSQL)", () => {
  layer(IdentityHttp, { excludeTestServices: true, timeout: 180_000 })("", (it) => {
    it.effect(
      "40 concurrent batches over the same subscriptions and hours, in different orders: no 5xx, exact sums",
      () =>
        Effect.gen(function* () {
          const token = yield* adminToken
          const meter = uniqueMeter("storm")
          const subs = yield* Effect.forEach(Array.from({ length: SUBSCRIPTIONS }), () =>
            subscriptionReadModelFixture({ usage: sumPrice(meter, { includedUnits: 0 }) })
          )
          const now = Date.now()
          const hours = [now - 3 * HOUR, now - 2 * HOUR, now - HOUR]
          // Every batch: the shared identifiers (the same record each time) and its own, over every
          // subscription and hour, shuffled differently.
          const shared = Array.from({ length: SHARED }, (_, i) => ({
            subscriptionId: subs[i % SUBSCRIPTIONS]?.id,
            meter,
            identifier: `shared-${i}`,
            value: 1,
            timestamp: new Date((hours[i % hours.length] ?? now) + i * 1000).toISOString()
          }))
          const own = (b: number) =>
            subs.flatMap((s, si) =>
              hours.map((h, hi) => ({
                subscriptionId: s.id,
                meter,
                identifier: `own-${b}-${si}-${hi}`,
                value: 2,
                timestamp: new Date(h + b * 1000 + si).toISOString()
              }))
            )
          const replies = yield* Effect.forEach(
            Array.from({ length: BATCHES }, (_, b) => b),
            (b) =>
              call("POST", "/v1/usage/batch", {
                token,
                json: { records: shuffled([...shared, ...own(b)], b + 1) }
              }),
            { concurrency: "unbounded" }
          )
          for (const r of replies) {
            expect(r.status, r.text).toBe(200)
            expect(r.body.failed).toBe(0)
          }
          // Each shared record was created once and replayed by every other batch.
          const created = replies.reduce((n, r) => n + r.body.created, 0)
          expect(created).toBe(SHARED + BATCHES * SUBSCRIPTIONS * hours.length)
          for (const [si, s] of subs.entries()) {
            const summary = yield* getSummary(token, { subscriptionId: s.id })
            const sharedHere = shared.filter((_, i) => i % SUBSCRIPTIONS === si).length
            expect(summary.body).toMatchObject({
              quantity: sharedHere + BATCHES * hours.length * 2,
              eventCount: sharedHere + BATCHES * hours.length
            })
          }
        })
    )
  })
})
