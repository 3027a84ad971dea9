/**
 * No secret leaves the process through the audit trail (issue 16, item 3): after the suite creates a
 * user with a password, a session and a refreshed token, an API key, an OAuth client, a webhook
 * endpoint (and rotates its secret) and a completed password reset, the export (`exportEventLog`, as
 * `npm run events:export` runs it) and the `EventLog.Stream` RPC feed hold none of the secrets it
 * knows — the raw ones it was shown and every `Secret` field it reads inside the process — while
 * "[secret]" stands in their place; nor do the public snapshots that webhooks deliver, nor the events
 * feed (`GET /v1/events`), nor the logs. And the
 * export redirected from npm is NDJSON: the README runs it with `npm run -s`.
 */
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { FetchHttpClient, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { RpcClient, RpcSerialization } from "@effect/rpc"
import { SqlClient } from "@effect/sql"
import { describe, layer } from "@effect/vitest"
import { Chunk, Effect, Either, Layer, Logger, LogLevel, Schema, Stream } from "effect"
import { expect, it as vitest } from "vitest"
import { exportEventLog, parseEventLogRequest } from "../../src/audit/EventLog.js"
import * as Checkpoint from "../../src/eventstore/Checkpoint.js"
import { EventStore, type StoredEvent } from "../../src/eventstore/EventStore.js"
import {
  decodeEventDataEither,
  defineEvent,
  EventTypes,
  encodeEventData,
  Personal,
  REDACTED_SECRET,
  redactSecrets,
  Secret,
  shredded
} from "../../src/eventstore/EventType.js"
import { AuditRpcs } from "../../src/http/Rpc.js"
import { eventTypes } from "../../src/registry.js"
import { HttpAppLive } from "../../src/server.js"
import { isWebhookEventType } from "../../src/webhooks/catalogue.js"
import { testConfig } from "../support/database.js"
import { adminLogin, call, identityServices, registerShopper, uniqueEmail } from "../support/identity.js"

const NEW_PASSWORD = "a brand new passphrase"

const ClientProtocol = Layer.unwrapEffect(
  HttpServer.addressFormattedWith((address) =>
    Effect.succeed(
      RpcClient.layerProtocolHttp({ url: `${address}/rpc` }).pipe(
        Layer.provide([RpcSerialization.layerNdjson, FetchHttpClient.layer])
      )
    )
  )
)

/** Every log line the app writes while the suite runs, at every level (as logfmt, instead of stdout). */
const logged: Array<string> = []
const CaptureLogs = Layer.merge(
  Logger.replace(
    Logger.defaultLogger,
    Logger.map(Logger.logfmtLogger, (line) => void logged.push(line))
  ),
  Logger.minimumLogLevel(LogLevel.All)
)

const AuditHttp = ClientProtocol.pipe(
  Layer.provideMerge(HttpAppLive),
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(identityServices(testConfig().pipe(Layer.provideMerge(CaptureLogs))))
)

const expectStatus = (r: { readonly status: number; readonly text: string }, status: number) =>
  expect(r.status, r.text).toBe(status)

/** Everything the suite creates; answers the raw secrets it was shown. */
const createEverything = Effect.gen(function* () {
  const admin = yield* adminLogin()
  const email = uniqueEmail()
  const shopper = yield* registerShopper(email)
  const refreshed = yield* call("POST", "/auth/refresh", { json: { refreshToken: shopper.refreshToken } })
  expectStatus(refreshed, 200)

  const key = yield* call("POST", "/apikey", {
    token: admin.accessToken,
    json: { name: "audit key", scopes: ["read:events"] }
  })
  expectStatus(key, 201)
  const client = yield* call("POST", "/oauth/clients", {
    token: admin.accessToken,
    json: { name: "audit client", scopes: ["read:events"] }
  })
  expectStatus(client, 201)
  const granted = yield* call("POST", "/auth/token", {
    form: {
      grant_type: "client_credentials",
      client_id: client.body.clientId,
      client_secret: client.body.clientSecret
    }
  })
  expectStatus(granted, 200)

  const webhook = yield* call("POST", "/webhook", {
    token: admin.accessToken,
    json: { url: `https://hooks.example.com/audit/${Date.now().toString(36)}`, events: ["customer.created"] }
  })
  expectStatus(webhook, 201)
  const rotated = yield* call("POST", `/webhook/${webhook.body.id}/rotate-secret`, {
    token: admin.accessToken
  })
  expectStatus(rotated, 200)

  // Password reset: the token is mailed (a public event read by notifications, inside the process).
  expectStatus(yield* call("POST", "/auth/password-reset", { json: { email } }), 202)
  const sql = yield* SqlClient.SqlClient
  let resetToken: string | undefined
  for (let attempt = 0; attempt < 100 && resetToken === undefined; attempt++) {
    const rows = yield* sql<{ token: string | null }>`
      SELECT data->>'resetToken' AS token FROM event_store.public_events
       WHERE type = 'customer.password_reset' AND subject_id = ${shopper.userId}`
    resetToken = rows[0]?.token ?? undefined
    if (resetToken === undefined) yield* Effect.sleep("50 millis")
  }
  if (resetToken === undefined) return yield* Effect.dieMessage("no password reset token within 5 s")
  const confirmed = yield* call("POST", "/auth/password-reset/confirm", {
    json: { token: resetToken, password: NEW_PASSWORD }
  })
  expectStatus(confirmed, 204)

  const raw: Record<string, string> = {
    "shopper refresh token": shopper.refreshToken,
    "rotated refresh token": refreshed.body.refreshToken,
    "admin refresh token": admin.refreshToken,
    "API key": key.body.key,
    "OAuth client secret": client.body.clientSecret,
    "webhook secret": webhook.body.secret,
    "rotated webhook secret": rotated.body.secret,
    "password reset token": resetToken,
    "new password": NEW_PASSWORD
  }
  for (const [what, value] of Object.entries(raw))
    expect(typeof value === "string" && value.length >= 16, what).toBe(true)
  return raw
}).pipe(Effect.orDie)

/** The whole history, read inside the process (secrets readable), by the store itself. */
const wholeHistory = Effect.gen(function* () {
  const store = yield* EventStore
  const events: Array<StoredEvent> = []
  let after = Checkpoint.origin
  while (true) {
    const page = yield* store.readAll({ after, limit: 1000 })
    events.push(...page.events)
    if (page.events.length === 0) return events
    after = page.checkpoint
  }
}).pipe(Effect.orDie)

/** Every value of a `Secret` field the store holds, by "<event type>.<field>". */
const storedSecrets = (events: ReadonlyArray<StoredEvent>) => {
  const types = new EventTypes(eventTypes)
  const found: Array<{ readonly field: string; readonly value: string }> = []
  for (const event of events) {
    const type = types.get(event.type)
    const data = event.data
    if (!type || typeof data !== "object" || data === null) continue
    for (const key of type.secretKeys) {
      const value: unknown = Reflect.get(data, key)
      if (typeof value === "string") found.push({ field: `${event.type}.${key}`, value })
    }
  }
  return found
}

const leaked = (text: string, secrets: ReadonlyArray<{ readonly field: string; readonly value: string }>) =>
  secrets.filter((s) => text.includes(s.value)).map((s) => s.field)

layer(AuditHttp, { excludeTestServices: true, timeout: 120_000 })("secrets in the audit trail", (it) => {
  it.effect(
    "the export and the RPC feed of everything the suite created hold none of its secrets, only [secret]",
    () =>
      Effect.gen(function* () {
        const raw = yield* createEverything
        const history = yield* wholeHistory
        const stored = storedSecrets(history)
        // Inside the process the secrets stay readable: the hashes and secrets are all there.
        const fields = new Set(stored.map((s) => s.field))
        for (const field of [
          "user.registered.passwordHash",
          "user.password_reset_requested.tokenHash",
          "user.password_reset_requested.token",
          "user.password_reset.passwordHash",
          "session.started.refreshTokenHash",
          "token.refreshed.previousTokenHash",
          "token.refreshed.refreshTokenHash",
          "apikey.created.keyHash",
          "oauth_client.created.secretHash",
          "webhook.created.secret",
          "webhook.secret_rotated.secret"
        ])
          expect(fields, field).toContain(field)
        expect(stored.map((s) => s.value)).toContain(raw["webhook secret"])
        expect(stored.map((s) => s.value)).toContain(raw["password reset token"])
        const known = [...stored, ...Object.entries(raw).map(([field, value]) => ({ field, value }))]

        // The export, exactly as `npm run events:export` writes it.
        const store = yield* EventStore
        const query = yield* Effect.orDie(
          parseEventLogRequest({}, { maxLimit: Number.POSITIVE_INFINITY, defaultLimit: Infinity })
        )
        const chunks: Array<string> = []
        const summary = yield* exportEventLog(store, query, (chunk) =>
          Effect.sync(() => void chunks.push(chunk))
        ).pipe(Effect.orDie)
        const exported = chunks.join("")
        expect(summary.events).toBe(history.length)
        const lines = exported.trimEnd().split("\n")
        expect(lines.length).toBe(history.length)
        for (const line of lines) expect(() => JSON.parse(line)).not.toThrow()
        expect(leaked(exported, known)).toEqual([])
        expect(exported).toContain(`"passwordHash":"${REDACTED_SECRET}"`)
        expect(exported).toContain(`"keyHash":"${REDACTED_SECRET}"`)
        expect(exported).toContain(`"secret":"${REDACTED_SECRET}"`)
        // Redaction replaces values, nothing else: the same events, the same keys.
        const webhookCreated = lines
          .map((l) => JSON.parse(l))
          .find((i) => i.type === "webhook.created" && i.data.webhookId !== undefined)
        expect(webhookCreated?.data.secret).toBe(REDACTED_SECRET)
        expect(webhookCreated?.data.url).toMatch(/^https:\/\/hooks\.example\.com\//)

        // The RPC feed, page by page.
        const rpc = yield* RpcClient.make(AuditRpcs)
        let fed = ""
        let items = 0
        let after: string | undefined
        while (true) {
          const page = Chunk.toReadonlyArray(
            yield* Stream.runCollect(
              rpc.EventLog.Stream(
                { limit: 10_000, ...(after === undefined ? {} : { after }) },
                { headers: { authorization: `Bearer ${raw["API key"]}` } }
              )
            )
          )
          if (page.length === 0) break
          items += page.length
          fed += page.map((i) => JSON.stringify(i)).join("\n")
          after = page[page.length - 1]?.checkpoint
        }
        expect(items).toBeGreaterThanOrEqual(history.length)
        expect(leaked(fed, known)).toEqual([])
        expect(fed).toContain(REDACTED_SECRET)

        // What webhooks deliver: no public snapshot of a deliverable type carries a secret.
        const sql = yield* SqlClient.SqlClient
        const snapshots = yield* sql<{ type: string; data: string }>`
          SELECT type, data::text AS data FROM event_store.public_events`.pipe(Effect.orDie)
        const deliverable = snapshots.filter((s) => isWebhookEventType(s.type))
        expect(deliverable.length).toBeGreaterThan(0)
        expect(leaked(deliverable.map((s) => s.data).join("\n"), known)).toEqual([])
        // The reset token is public-event data only for the email, a type no webhook can subscribe to.
        expect(isWebhookEventType("customer.password_reset")).toBe(false)

        // The events feed (`GET /v1/events`), every page: every public event, the reset's included
        // (read again until it is listed: on a shared server the feed's horizon waits for every older
        // transaction in the cluster).
        const readFeed = Effect.gen(function* () {
          let text = ""
          let count = 0
          let startingAfter: string | undefined
          while (true) {
            const page = yield* call(
              "GET",
              `/v1/events?limit=100${startingAfter === undefined ? "" : `&startingAfter=${startingAfter}`}`,
              { token: String(raw["API key"]) }
            )
            expectStatus(page, 200)
            text += page.text
            count += page.body.data.length
            if (!page.body.hasMore) return { text, count }
            startingAfter = page.body.data[page.body.data.length - 1].id
          }
        })
        let listed = yield* readFeed
        for (
          let attempt = 0;
          attempt < 300 && !listed.text.includes('"type":"customer.password_reset"');
          attempt++
        ) {
          yield* Effect.sleep("100 millis")
          listed = yield* readFeed
        }
        expect(listed.text).toContain('"type":"customer.password_reset"')
        expect(listed.count).toBeLessThanOrEqual(snapshots.length)
        expect(leaked(listed.text, known)).toEqual([])

        // Nor do the logs (one access-log line per request at least).
        expect(logged.filter((l) => l.includes('message="http request"')).length).toBeGreaterThan(10)
        expect(leaked(logged.join("\n"), known)).toEqual([])
      }).pipe(Effect.scoped)
  )
})

describe("Secret", () => {
  const Event = defineEvent("thing.created", {
    schema: Schema.Struct({
      thingId: Schema.String,
      plain: Schema.String,
      hash: Secret(Schema.String),
      both: Secret(Personal(Schema.String)),
      other: Personal(Secret(Schema.String)),
      maybe: Schema.optional(Secret(Schema.String))
    }),
    subject: (d) => d.thingId
  })

  vitest("marks top-level fields; composes with Personal either way round", () => {
    expect([...Event.secretKeys].sort()).toEqual(["both", "hash", "maybe", "other"])
    expect([...Event.personalKeys].sort()).toEqual(["both", "other"])
  })

  vitest("redacts present values, keeps shredded and absent ones, copies instead of mutating", () => {
    const data = { thingId: "t", plain: "p", hash: "h", both: "b", other: shredded }
    const redacted = redactSecrets(Event.secretKeys, data)
    expect(redacted).toEqual({
      thingId: "t",
      plain: "p",
      hash: "[secret]",
      both: "[secret]",
      other: shredded
    })
    expect(data.hash).toBe("h")
    expect(new EventTypes([Event]).redact("thing.created", data)).toEqual(redacted)
    expect(new EventTypes([Event]).redact("other.type", data)).toBe(data)
    expect(redactSecrets(Event.secretKeys, "text")).toBe("text")
  })

  vitest("a malformed secret is reported without its value (parse errors reach the logs)", () => {
    const Hook = defineEvent("thing.hooked", {
      schema: Schema.Struct({
        thingId: Schema.String,
        secret: Secret(Schema.String.pipe(Schema.startsWith("whsec_")))
      })
    })
    const failed = Effect.runSync(
      Effect.flip(encodeEventData(Hook, { thingId: "t", secret: "leaked-value-1234" }))
    )
    expect(failed.message).toContain("a secret (its value is not shown)")
    expect(failed.message).not.toContain("leaked-value-1234")
    const decoded = decodeEventDataEither(Hook, {
      eventId: "e",
      schemaVersion: 1,
      data: { thingId: "t", secret: "leaked-value-5678" }
    })
    expect(Either.isLeft(decoded) && decoded.left.message).toContain("a secret (its value is not shown)")
    expect(JSON.stringify(decoded)).not.toContain("leaked-value-5678")
  })

  vitest("a nested Secret is refused (redaction reaches only top-level fields)", () => {
    expect(() =>
      defineEvent("thing.nested", {
        schema: Schema.Struct({ inner: Schema.Struct({ hash: Secret(Schema.String) }) })
      })
    ).toThrow(/nested field Secret/)
  })

  vitest("the service's secret fields", () => {
    const marked = eventTypes.flatMap((t) => t.secretKeys.map((k) => `${t.type}.${k}`))
    expect(marked.sort()).toEqual(
      [
        "apikey.created.keyHash",
        "oauth_client.created.secretHash",
        "payment_intent.created.clientSecretHash",
        "session.started.refreshTokenHash",
        "token.refreshed.previousTokenHash",
        "token.refreshed.refreshTokenHash",
        "user.password_reset.passwordHash",
        "user.password_reset_requested.token",
        "user.password_reset_requested.tokenHash",
        "user.registered.passwordHash",
        "webhook.created.secret",
        "webhook.secret_rotated.secret"
      ].sort()
    )
  })
})

describe("npm run -s events:export > file", () => {
  const root = new URL("../../", import.meta.url)
  const npm = (args: ReadonlyArray<string>) =>
    execFileSync("npm", [...args], { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })

  vitest(
    "npm's banner goes to stdout without -s, so the README redirects only with -s",
    () => {
      expect(npm(["run", "events:export", "--", "--help"])).toMatch(/^\s*> commerce-platform@/)
      expect(npm(["run", "-s", "events:export", "--", "--help"])).toMatch(/^usage: npm run -s events:export/)
      const readme = readFileSync(new URL("README.md", root), "utf8")
      const runs = readme.split("\n").filter((line) => /npm run\b[^`]*events:export/.test(line))
      expect(runs.length).toBeGreaterThan(0)
      for (const line of runs.filter((l) => /events:export[^`]*>/.test(l)))
        expect(line, "a redirected export").toMatch(/npm run -s events:export/)
      expect(readme).toContain("npm run -s events:export > history.ndjson")
    },
    60_000
  )
})
