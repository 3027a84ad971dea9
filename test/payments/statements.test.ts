/**
 * What a confirmed payment costs in SQL statements, counted on the wire (test/support/wire.ts), so a
 * regression fails here before it shows in `npm run bench:payments`: `POST /v1/payments` (create +
 * confirm, captured at once) is TWO short transactions of five statements around the processor call
 * — the intent created and its call started in one decision (one append, one projection statement)
 * with the safety net armed, then the outcome recorded with the safety net disarmed — with no read
 * of the intent's stream (each command decides on the state the previous one left). The test
 * processor's own statements (its idempotency records, outside both transactions) are counted apart.
 */
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { apiKeyWith, call } from "../support/identity.js"
import { fewestStatements, WiredHttp } from "../support/wire.js"

const isProcessor = (s: string) => s.includes("test_processor")

layer(WiredHttp, { timeout: 120_000 })("payment statements", (it) => {
  it.effect("POST /v1/payments: two transactions, 10 statements, no stream read", () =>
    Effect.gen(function* () {
      const key = (yield* apiKeyWith(["read:payments", "write:payments"])).key
      const pay = call("POST", "/v1/payments", {
        token: key,
        json: { amount: 2000, currency: "USD", paymentMethod: "pm_card_visa" }
      }).pipe(Effect.tap((r) => expect(r.status, r.text).toBe(201)))
      yield* pay
      const all = yield* fewestStatements(3, pay)
      const service = all.filter((s) => !isProcessor(s))
      const listing = all.join("\n")
      expect(
        service.filter((s) => s === "BEGIN"),
        listing
      ).toHaveLength(2)
      expect(
        service.filter((s) => s === "COMMIT"),
        listing
      ).toHaveLength(2)
      // BEGIN, append (created + attempt started: one decision), INSERT intent + payment, arm the
      // safety net, COMMIT; BEGIN, disarm the safety net, append (authorized + captured), UPDATE
      // intent + payment, COMMIT.
      expect(service.length, listing).toBeLessThanOrEqual(10)
      expect(
        service.filter((s) => s.includes("FROM event_store.events")),
        listing
      ).toEqual([])
      expect(
        service.filter((s) => s.includes("event_store.append_command")),
        listing
      ).toHaveLength(2)
      // The test processor: at most one statement for a new authorization.
      expect(all.filter(isProcessor).length, listing).toBeLessThanOrEqual(1)
    })
  )
})
