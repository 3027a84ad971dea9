/**
 * `/rpc` through a real RpcClient (HTTP protocol, ndjson, FetchHttpClient) against the whole HTTP
 * app on a socket: the audit feed (all, one stream, from a checkpoint, by type, resume, follow,
 * decrypted and shredded personal data), the ops status, typed errors for bad input and auth.
 */
import { FetchHttpClient, HttpClient, HttpClientRequest, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { RpcClient, RpcSerialization } from "@effect/rpc"
import { layer } from "@effect/vitest"
import { Chunk, Clock, Effect, Fiber, Layer, Stream } from "effect"
import { expect } from "vitest"
import type { EventLogItem } from "../../src/audit/EventLog.js"
import { OpsStatusLive } from "../../src/audit/OpsStatus.js"
import * as Checkpoint from "../../src/eventstore/Checkpoint.js"
import { EventStore, newEvent } from "../../src/eventstore/EventStore.js"
import { AuditRpcs } from "../../src/http/Rpc.js"
import { DueWork } from "../../src/processors/DueWork.js"
import { acquire } from "../../src/processors/Lease.js"
import { processor, Supervisor } from "../../src/processors/Supervisor.js"
import { HttpAppLive } from "../../src/server.js"
import { TestServices } from "../support/http.js"
import { AccountDeposited, AccountOpened, appendDeposits, appendOpened } from "../support/sample.js"

const SUBSCRIPTION = "audit-test-subscription"

const Seed = Layer.effectDiscard(
  Effect.gen(function* () {
    const store = yield* EventStore
    const open = (id: string, owner: string) =>
      appendOpened(id, owner, { correlationId: `corr-${id}`, actor: { type: "system", id: "seed" } })
    yield* open("acct-1", "Ada Lovelace")
    yield* open("acct-2", "Bob")
    yield* appendDeposits("acct-1", [10, 20])
    yield* open("acct-3", "Eve")
    yield* appendDeposits("acct-2", [5])
    yield* store.forgetSubject("acct-3")
  })
)
const SEEDED = 6

const ClientProtocol = Layer.unwrapEffect(
  HttpServer.addressFormattedWith((address) =>
    Effect.succeed(
      RpcClient.layerProtocolHttp({ url: `${address}/rpc` }).pipe(
        Layer.provide([RpcSerialization.layerNdjson, FetchHttpClient.layer])
      )
    )
  )
)

const RpcTestHttp = ClientProtocol.pipe(
  Layer.provideMerge(HttpAppLive),
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(Seed),
  Layer.provideMerge(OpsStatusLive([{ name: SUBSCRIPTION, source: "events" }])),
  Layer.provideMerge(TestServices)
)

const auth = (token: string) => ({ headers: { authorization: `Bearer ${token}` } })

const stream = (payload: Parameters<Client["EventLog"]["Stream"]>[0], token = "test-reader") =>
  Effect.gen(function* () {
    const client = yield* RpcClient.make(AuditRpcs)
    const items = yield* Stream.runCollect(client.EventLog.Stream(payload, auth(token)))
    return Chunk.toReadonlyArray(items)
  }).pipe(Effect.scoped)

type Client = RpcClient.FromGroup<typeof AuditRpcs>

const status = (token = "test-reader") =>
  Effect.gen(function* () {
    const client = yield* RpcClient.make(AuditRpcs)
    return yield* client.Ops.Status(undefined, auth(token))
  }).pipe(Effect.scoped)

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/

layer(RpcTestHttp, { excludeTestServices: true, timeout: 60_000 })("/rpc", (it) => {
  it.effect("EventLog.Stream: the whole history in order, decrypted and shredded as stored", () =>
    Effect.gen(function* () {
      const items = (yield* stream({})).slice(0, SEEDED)
      expect(items.map((i) => `${i.streamId}@${i.streamVersion}:${i.type}`)).toEqual([
        "acct-1@1:account.opened",
        "acct-2@1:account.opened",
        "acct-1@2:account.deposited",
        "acct-1@3:account.deposited",
        "acct-3@1:account.opened",
        "acct-2@2:account.deposited"
      ])
      const positions = items.map((i) => i.position)
      expect([...positions].sort((a, b) => a - b)).toEqual(positions)
      for (const item of items) {
        expect(item.checkpoint).toMatch(/^\d{20}:\d{20}$/)
        expect(Number(item.checkpoint.split(":")[1])).toBe(item.position)
        expect(item.eventId).toMatch(/^[0-9a-f-]{36}$/)
        expect(item.schemaVersion).toBe(1)
        expect(item.recordedAt).toMatch(ISO)
      }
      const [first] = items
      expect(first?.data).toEqual({ accountId: "acct-1", owner: "Ada Lovelace", currency: "EUR" })
      expect(first?.metadata).toMatchObject({ correlationId: "corr-acct-1", actor: { type: "system" } })
      expect(items[4]?.data).toEqual({ accountId: "acct-3", owner: { _tag: "Shredded" }, currency: "EUR" })
      expect(items[2]?.data).toEqual({ accountId: "acct-1", amount: 10 })
    })
  )

  it.effect("EventLog.Stream: one stream, by type, from a checkpoint, with a limit", () =>
    Effect.gen(function* () {
      const one = yield* stream({ streamId: "acct-1" })
      expect(one.map((i) => i.streamVersion)).toEqual([1, 2, 3])
      expect(new Set(one.map((i) => i.streamId))).toEqual(new Set(["acct-1"]))

      const opened = yield* stream({ types: ["account.opened"] })
      expect(opened.slice(0, 3).map((i) => i.streamId)).toEqual(["acct-1", "acct-2", "acct-3"])
      expect(new Set(opened.map((i) => i.type))).toEqual(new Set(["account.opened"]))

      const both = yield* stream({ streamId: "acct-2", types: ["account.deposited"] })
      expect(both.map((i) => `${i.streamId}@${i.streamVersion}`)).toEqual(["acct-2@2"])

      const all = (yield* stream({})).slice(0, SEEDED)
      const from = all[2]?.checkpoint
      const rest = (yield* stream({ after: from })).slice(0, SEEDED - 3)
      expect(rest.map((i) => i.eventId)).toEqual(all.slice(3).map((i) => i.eventId))

      const two = yield* stream({ limit: 2 })
      expect(two.map((i) => i.eventId)).toEqual(all.slice(0, 2).map((i) => i.eventId))
      const next = yield* stream({ limit: 2, after: two[1]?.checkpoint })
      expect(next.map((i) => i.eventId)).toEqual(all.slice(2, 4).map((i) => i.eventId))
    })
  )

  it.effect("EventLog.Stream: resuming from the last item's checkpoint sees only newer events", () =>
    Effect.gen(function* () {
      const before = yield* stream({})
      const last = before[before.length - 1] as EventLogItem
      expect(yield* stream({ after: last.checkpoint })).toEqual([])
      const store = yield* EventStore
      yield* store.append({
        streamId: "acct-9",
        streamType: "account",
        expectedVersion: "no_stream",
        events: [
          newEvent(AccountOpened, { accountId: "acct-9", owner: "Zed", currency: "USD" }),
          newEvent(AccountDeposited, { accountId: "acct-9", amount: 1 })
        ]
      })
      const newer = yield* stream({ after: last.checkpoint })
      expect(newer.map((i) => `${i.streamId}@${i.streamVersion}`)).toEqual(["acct-9@1", "acct-9@2"])
      expect(newer[0]?.data).toMatchObject({ owner: "Zed" })
      const resumed = yield* stream({ after: newer[1]?.checkpoint })
      expect(resumed).toEqual([])
    })
  )

  it.effect("EventLog.Stream: follow waits for new events, bounded by time and limit", () =>
    Effect.gen(function* () {
      const all = yield* stream({})
      const tail = (all[all.length - 1] as EventLogItem).checkpoint
      // Nothing new: the stream ends after followSeconds.
      const t0 = yield* Clock.currentTimeMillis
      expect(yield* stream({ after: tail, follow: true, followSeconds: 0.5 })).toEqual([])
      expect((yield* Clock.currentTimeMillis) - t0).toBeGreaterThanOrEqual(400)

      const follower = yield* Effect.fork(stream({ after: tail, follow: true, followSeconds: 20, limit: 1 }))
      yield* Effect.sleep("300 millis")
      yield* appendDeposits("acct-1", [7])
      const t1 = yield* Clock.currentTimeMillis
      const got = yield* Fiber.join(follower)
      expect((yield* Clock.currentTimeMillis) - t1).toBeLessThan(5_000)
      expect(got.map((i) => i.data)).toEqual([{ accountId: "acct-1", amount: 7 }])
    })
  )

  it.effect("invalid input is a typed BadRequest, never a defect", () =>
    Effect.gen(function* () {
      const cases = [
        [{ after: "not-a-checkpoint" }, "after", "invalid_checkpoint"],
        [{ after: "12:x" }, "after", "invalid_checkpoint"],
        [{ limit: 0 }, "limit", "parameter_invalid"],
        [{ limit: 10_001 }, "limit", "parameter_invalid"],
        [{ limit: 2.5 }, "limit", "parameter_invalid"],
        [{ streamId: "" }, "streamId", "parameter_invalid"],
        [{ types: ["has space"] }, "types", "parameter_invalid"],
        [{ follow: true, followSeconds: 10_000 }, "followSeconds", "parameter_invalid"]
      ] as const
      for (const [payload, param, code] of cases) {
        const error = yield* Effect.flip(stream(payload))
        expect(error._tag, JSON.stringify(payload)).toBe("BadRequest")
        if (error._tag !== "BadRequest") continue
        expect(error.error.param).toBe(param)
        expect(error.error.code).toBe(code)
        expect(error.error.type).toBe("invalid_request_error")
      }
      // The server is still fine afterwards.
      expect((yield* stream({ limit: 1 })).length).toBe(1)
    })
  )

  it.effect("authentication: the REST credentials, scope read:events", () =>
    Effect.gen(function* () {
      const unauthenticated = yield* Effect.gen(function* () {
        const client = yield* RpcClient.make(AuditRpcs)
        return yield* Stream.runCollect(client.EventLog.Stream({}))
      }).pipe(Effect.scoped, Effect.flip)
      expect(unauthenticated._tag).toBe("Unauthorized")
      if (unauthenticated._tag === "Unauthorized")
        expect(unauthenticated.error.code).toBe("missing_credentials")

      const invalid = yield* Effect.flip(stream({}, "wrong"))
      expect(invalid._tag).toBe("Unauthorized")
      if (invalid._tag === "Unauthorized") expect(invalid.error.code).toBe("invalid_token")

      const nobody = yield* Effect.flip(stream({}, "test-nobody"))
      expect(nobody._tag).toBe("Forbidden")
      if (nobody._tag === "Forbidden") {
        expect(nobody.error.code).toBe("insufficient_scope")
        expect(nobody.error.type).toBe("permission_error")
      }
      expect((yield* Effect.flip(status("test-nobody")))._tag).toBe("Forbidden")
      expect((yield* Effect.flip(status("")))._tag).toBe("Unauthorized")
      expect((yield* stream({ limit: 1 }, "test-admin")).length).toBe(1)

      // A Basic header is not a bearer credential.
      const basic = yield* Effect.gen(function* () {
        const client = yield* RpcClient.make(AuditRpcs)
        return yield* Stream.runCollect(
          client.EventLog.Stream({}, { headers: { authorization: "Basic test-admin" } })
        )
      }).pipe(Effect.scoped, Effect.flip)
      expect(basic._tag).toBe("Unauthorized")
    })
  )

  it.scoped("Ops.Status: subscriptions with checkpoint, lag and lease; processors; due-work backlog", () =>
    Effect.gen(function* () {
      const lease = yield* acquire(SUBSCRIPTION, { owner: "owner-1", ttl: "30 seconds" })
      expect(lease._tag).toBe("Some")
      const work = yield* DueWork
      const now = yield* Clock.currentTimeMillis
      yield* work.schedule({ kind: "test.reminder", key: "k1", dueAt: new Date(now - 5_000) })
      yield* work.schedule({ kind: "test.reminder", key: "k2", dueAt: new Date(now + 60_000) })
      const supervisor = yield* Supervisor
      yield* supervisor.start([processor("test-idle", Effect.never)])
      yield* Effect.sleep("20 millis")

      const all = yield* stream({})
      const report = yield* status()
      expect(report.at).toMatch(ISO)
      expect(report.head.position).toBe(all[all.length - 1]?.position)
      expect(report.head.recordedAt).toMatch(ISO)

      const sub = report.subscriptions.find((s) => s.subscriptionId === SUBSCRIPTION)
      expect(sub).toMatchObject({
        source: "events",
        checkpoint: Checkpoint.format(Checkpoint.origin),
        lagEvents: all.length,
        owner: "owner-1",
        status: "running",
        error: null
      })
      expect(sub?.lagSeconds).toBeGreaterThanOrEqual(0)
      expect(sub?.leaseUntil).toMatch(ISO)
      expect(sub?.generation).toBeGreaterThanOrEqual(1)

      const idle = report.processors.find((p) => p.name === "test-idle")
      expect(idle).toMatchObject({ state: "running", restarts: 0, lastError: null })

      const due = report.dueWork.find((d) => d.kind === "test.reminder")
      expect(due).toMatchObject({ pending: 2, due: 1, claimed: 0, failed: 0 })
      expect(due?.oldestDueAgeSeconds).toBeGreaterThanOrEqual(4)
      expect(due?.oldestDueAt).toMatch(ISO)
    })
  )

  it.effect("the endpoint takes ndjson and is not in the way of the REST error model", () =>
    Effect.gen(function* () {
      const http = yield* HttpClient.HttpClient
      const res = yield* http.execute(
        HttpClientRequest.post("/rpc").pipe(
          HttpClientRequest.bearerToken("test-reader"),
          HttpClientRequest.bodyText(
            `${JSON.stringify({ _tag: "Request", id: "1", tag: "EventLog.Stream", payload: { limit: 1 }, headers: [] })}\n`,
            "application/ndjson"
          )
        )
      )
      expect(res.status).toBe(200)
      expect(res.headers["request-id"]).toMatch(/^req_/)
      const lines = (yield* res.text).trim().split("\n")
      const messages = lines.map((l) => JSON.parse(l) as { _tag: string })
      expect(messages.map((m) => m._tag)).toContain("Chunk")
      expect(messages[messages.length - 1]?._tag).toBe("Exit")
    })
  )
})
