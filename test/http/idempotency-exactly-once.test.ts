/**
 * Idempotency-Key is exactly once (issue 16 §1), on the real app over a real socket: clients that
 * abort their socket right after sending, then retry with the same key, get one execution per key
 * and a faithful replay; a retry after a first run that committed is replayed, never run into a
 * uniqueness rule whose 409 would then be stored.
 */
import { request as httpRequest } from "node:http"
import { HttpServer } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { layer } from "@effect/vitest"
import { Effect } from "effect"
import { expect } from "vitest"
import { adminToken, createCustomer, getCustomer } from "../support/customers.js"
import { call, IdentityHttp, uniqueEmail } from "../support/identity.js"

/** Sends a request over its own socket and destroys the socket `afterMs` after writing it. */
const sendAndAbort = (
  port: number,
  method: string,
  path: string,
  headers: Record<string, string>,
  json: unknown,
  afterMs: number
) =>
  Effect.async<void>((resume) => {
    const body = Buffer.from(JSON.stringify(json))
    const controller = new AbortController()
    const req = httpRequest(
      {
        host: "127.0.0.1",
        port,
        method,
        path,
        agent: false,
        signal: controller.signal,
        headers: { ...headers, "content-type": "application/json", "content-length": String(body.length) }
      },
      (res) => res.resume()
    )
    req.on("error", () => {})
    req.on("close", () => resume(Effect.void))
    req.end(body, () => {
      if (afterMs === 0) controller.abort()
      else setTimeout(() => controller.abort(), afterMs)
    })
  })

const serverPort = Effect.map(HttpServer.HttpServer, (server) =>
  server.address._tag === "TcpAddress" ? server.address.port : 0
)

/** `call`, again while the first request with the key is still running (409), as a client would. */
const retryWhileInProgress = (...args: Parameters<typeof call>) =>
  Effect.gen(function* () {
    let reply = yield* call(...args)
    for (
      let i = 0;
      i < 100 && reply.status === 409 && reply.body?.error?.code === "idempotency_request_in_progress";
      i++
    ) {
      yield* Effect.sleep("20 millis")
      reply = yield* call(...args)
    }
    return reply
  })

const address = (n: number) => ({ line1: `${n} Retry Lane`, city: "Springfield", country: "US" })

layer(IdentityHttp, { excludeTestServices: true, timeout: 180_000 })(
  "Idempotency-Key, exactly once",
  (it) => {
    it.effect("the disconnect loop: aborted creates retried with their key execute once each", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const port = yield* serverPort
        const customer = yield* createCustomer(token)
        const rounds = 45 // a customer holds at most 50 addresses
        const retried: Array<{ readonly id: string; readonly replayed: boolean }> = []
        for (let i = 0; i < rounds; i++) {
          const headers = { authorization: `Bearer ${token}`, "idempotency-key": `adr-${customer.id}-${i}` }
          // Abort at once or after up to 24 ms: before, during and after the request's commit.
          yield* sendAndAbort(port, "POST", `/user/${customer.id}/address`, headers, address(i), (i * 7) % 25)
          const again = yield* retryWhileInProgress("POST", `/user/${customer.id}/address`, {
            token,
            json: address(i),
            headers
          })
          expect(again.status, again.text).toBe(201)
          retried.push({ id: again.body.id, replayed: again.headers["idempotent-replayed"] === "true" })
          // A third time: always the replay of what the second answered.
          const third = yield* call("POST", `/user/${customer.id}/address`, {
            token,
            json: address(i),
            headers
          })
          expect(third.status).toBe(201)
          expect(third.headers["idempotent-replayed"]).toBe("true")
          expect(third.text).toBe(again.text)
        }
        const got = yield* getCustomer(token, customer.id)
        const ids = got.addresses.map((a: { id: string }) => a.id)
        // One address per key (no duplicate executions), and the answers name exactly those.
        expect(ids).toHaveLength(rounds)
        expect(new Set(ids)).toEqual(new Set(retried.map((r) => r.id)))
        const sql = yield* SqlClient.SqlClient
        const events = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM event_store.events
         WHERE stream_id = ${`customer-${customer.id}`} AND event_type = 'customer.address_added'`
        expect(events[0]?.n).toBe(rounds)
        console.info(
          `disconnect loop: ${retried.filter((r) => r.replayed).length} of ${rounds} retries replayed a committed first run`
        )
      })
    )

    it.effect("a first run that committed is replayed to the retry, never run into the duplicate email", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const port = yield* serverPort
        const sql = yield* SqlClient.SqlClient
        let replays = 0
        for (let i = 0; i < 40; i++) {
          const email = uniqueEmail("once")
          const json = { email, firstName: "Ada", lastName: "Lovelace" }
          const headers = { authorization: `Bearer ${token}`, "idempotency-key": `create-${email}` }
          yield* sendAndAbort(port, "POST", "/user", headers, json, (i * 7) % 25)
          // Give the first run time to finish (commit or roll back) before the retry.
          yield* Effect.sleep("100 millis")
          const before = yield* sql<{ id: string }>`
          SELECT customer_id AS id FROM customers.customers WHERE email_normalized = lower(${email})`
          const retry = yield* retryWhileInProgress("POST", "/user", { token, json, headers })
          expect(retry.status, retry.text).toBe(201)
          const first = before[0]
          if (first) {
            replays++
            expect(retry.headers["idempotent-replayed"]).toBe("true")
            expect(retry.body.id).toBe(first.id)
          }
          const after = yield* sql<{ id: string }>`
          SELECT customer_id AS id FROM customers.customers WHERE email_normalized = lower(${email})`
          expect(after.map((r) => r.id)).toEqual([retry.body.id])
        }
        // Most first runs commit before the retry arrives: the case this test is about happened.
        expect(replays).toBeGreaterThan(0)
      })
    )

    it.effect("keyed requests that lose a race on one stream run again, whole: every one lands once", () =>
      Effect.gen(function* () {
        const token = yield* adminToken
        const customer = yield* createCustomer(token)
        const tags = Array.from({ length: 10 }, (_, i) => `race-${i}`)
        const tagOnce = (tag: string) =>
          call("POST", `/user/${customer.id}/tag`, {
            token,
            json: { tags: [tag] },
            headers: { "idempotency-key": `tag-${customer.id}-${tag}` }
          })
        const answers = yield* Effect.all(tags.map(tagOnce), { concurrency: "unbounded" })
        expect(answers.map((a) => a.status)).toEqual(tags.map(() => 200))
        const got = yield* getCustomer(token, customer.id)
        expect([...got.tags].sort()).toEqual([...tags].sort())
        // Each stored answer is the one its request got.
        for (const [i, tag] of tags.entries()) {
          const replay = yield* tagOnce(tag)
          expect(replay.headers["idempotent-replayed"]).toBe("true")
          expect(replay.text).toBe(answers[i]?.text)
        }
      })
    )
  }
)
