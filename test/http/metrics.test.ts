/**
 * `/metrics`: Prometheus text exposition (every line parses; HELP/TYPE before samples; histograms
 * cumulative), request counters and durations by route template (bounded labels), processor lag,
 * processor up/restarts, due-work backlog, event store head; optional METRICS_TOKEN.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { describe, layer } from "@effect/vitest"
import { Clock, Effect, Layer, Option, Redacted } from "effect"
import { expect, it as vitest } from "vitest"
import { Api } from "../../src/Api.js"
import { OpsStatusLive } from "../../src/audit/OpsStatus.js"
import { AppConfig } from "../../src/config.js"
import { EventStore, newEvent } from "../../src/eventstore/EventStore.js"
import {
  apiRouteTemplates,
  makeHttpMetrics,
  renderPrometheus,
  routeMatcher
} from "../../src/observability/Metrics.js"
import { DueWork } from "../../src/processors/DueWork.js"
import { processor, Supervisor } from "../../src/processors/Supervisor.js"
import { HttpAppLive } from "../../src/server.js"
import { TestServices } from "../support/http.js"
import { AccountDeposited, AccountOpened } from "../support/sample.js"

const SUBSCRIPTION = "metrics-test-subscription"

const Seed = Layer.effectDiscard(
  Effect.gen(function* () {
    const store = yield* EventStore
    yield* store.append({
      streamId: "acct-m1",
      streamType: "account",
      expectedVersion: "no_stream",
      events: [
        newEvent(AccountOpened, { accountId: "acct-m1", owner: "Ada", currency: "EUR" }),
        newEvent(AccountDeposited, { accountId: "acct-m1", amount: 3 }),
        newEvent(AccountDeposited, { accountId: "acct-m1", amount: 4 })
      ]
    })
  })
)

const MetricsHttp = HttpAppLive.pipe(
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(Seed),
  Layer.provideMerge(OpsStatusLive([{ name: SUBSCRIPTION, source: "events" }])),
  Layer.provideMerge(TestServices)
)

// --- exposition grammar (text format 0.0.4) ----------------------------------------------------

const NAME = "[a-zA-Z_:][a-zA-Z0-9_:]*"
const LABEL = `[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\\\\n]|\\\\[\\\\"n])*"`
const VALUE = "(?:[+-]?(?:\\d+\\.?\\d*(?:[eE][+-]?\\d+)?|\\.\\d+(?:[eE][+-]?\\d+)?)|NaN|[+-]Inf)"
const SAMPLE = new RegExp(`^(${NAME})(\\{(?:${LABEL}(?:,${LABEL})*)?,?\\})? (${VALUE})(?: -?\\d+)?$`)
const HELP = new RegExp(`^# HELP (${NAME}) .*$`)
const TYPE = new RegExp(`^# TYPE (${NAME}) (counter|gauge|histogram|summary|untyped)$`)

interface Parsed {
  readonly types: Map<string, string>
  readonly samples: Array<{ name: string; labels: Record<string, string>; value: number }>
}

/** Parses the exposition text, failing the test on any line outside the grammar. */
const parseExposition = (text: string): Parsed => {
  const types = new Map<string, string>()
  const helps = new Set<string>()
  const samples: Parsed["samples"] = []
  expect(text.endsWith("\n")).toBe(true)
  for (const line of text.split("\n").slice(0, -1)) {
    const help = HELP.exec(line)
    if (help?.[1]) {
      expect(helps.has(help[1]), `duplicate HELP ${help[1]}`).toBe(false)
      helps.add(help[1])
      continue
    }
    const type = TYPE.exec(line)
    if (type?.[1] && type[2]) {
      expect(types.has(type[1]), `duplicate TYPE ${type[1]}`).toBe(false)
      types.set(type[1], type[2])
      continue
    }
    const sample = SAMPLE.exec(line)
    expect(sample, `not a valid exposition line: ${JSON.stringify(line)}`).not.toBeNull()
    if (!sample?.[1] || sample[3] === undefined) continue
    const name = sample[1]
    const family = [...types.keys()].find(
      (f) =>
        name === f ||
        (types.get(f) === "histogram" &&
          /^(_bucket|_sum|_count)$/.test(name.slice(f.length)) &&
          name.startsWith(f))
    )
    expect(family, `sample ${name} before its # TYPE`).toBeDefined()
    const labels: Record<string, string> = {}
    for (const m of (sample[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      if (m[1] && m[2] !== undefined) labels[m[1]] = m[2].replace(/\\n/g, "\n").replace(/\\(["\\])/g, "$1")
    }
    const raw = sample[3]
    samples.push({
      name,
      labels,
      value: raw === "+Inf" ? Infinity : raw === "-Inf" ? -Infinity : Number(raw)
    })
  }
  return { types, samples }
}

const find = (p: Parsed, name: string, labels: Record<string, string> = {}) =>
  p.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))

const get = (path: string, token?: string) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const request = HttpClientRequest.get(path)
    const res = yield* client.execute(token ? HttpClientRequest.bearerToken(request, token) : request)
    return { status: res.status, headers: res.headers, text: yield* res.text }
  })

describe("/metrics", () => {
  layer(MetricsHttp, { excludeTestServices: true, timeout: 60_000 })("on the service", (it) => {
    it.scoped("Prometheus text with request, processor, due-work and event store metrics", () =>
      Effect.gen(function* () {
        const work = yield* DueWork
        const now = yield* Clock.currentTimeMillis
        yield* work.schedule({ kind: "test.expiry", key: "x1", dueAt: new Date(now - 3_000) })
        yield* work.schedule({ kind: "test.expiry", key: "x2", dueAt: new Date(now + 60_000) })
        const supervisor = yield* Supervisor
        yield* supervisor.start([processor("test-metrics-idle", Effect.never)])

        for (let i = 0; i < 3; i++) expect((yield* get("/health")).status).toBe(200)
        expect((yield* get("/v1/no-such-resource/ord_123456")).status).toBe(404)
        expect((yield* get("/health?probe=1")).status).toBe(200)

        const res = yield* get("/metrics")
        expect(res.status).toBe(200)
        expect(res.headers["content-type"]).toBe("text/plain; version=0.0.4; charset=utf-8")
        const parsed = parseExposition(res.text)

        expect(parsed.types.get("http_requests_total")).toBe("counter")
        expect(parsed.types.get("http_request_duration_seconds")).toBe("histogram")
        const health = find(parsed, "http_requests_total", { method: "GET", route: "/health", status: "200" })
        expect(health[0]?.value).toBe(4)
        expect(find(parsed, "http_requests_total", { route: "unmatched", status: "404" })[0]?.value).toBe(1)
        // Raw paths never become label values.
        expect(res.text).not.toContain("ord_123456")
        expect(res.text).not.toContain("probe=1")

        const buckets = find(parsed, "http_request_duration_seconds_bucket", {
          method: "GET",
          route: "/health"
        })
        expect(buckets.length).toBeGreaterThan(2)
        for (let i = 1; i < buckets.length; i++)
          expect(buckets[i]?.value ?? 0).toBeGreaterThanOrEqual(buckets[i - 1]?.value ?? 0)
        expect(buckets[buckets.length - 1]?.labels.le).toBe("+Inf")
        expect(buckets[buckets.length - 1]?.value).toBe(4)
        expect(find(parsed, "http_request_duration_seconds_count", { route: "/health" })[0]?.value).toBe(4)
        expect(
          find(parsed, "http_request_duration_seconds_sum", { route: "/health" })[0]?.value
        ).toBeGreaterThan(0)

        const store = yield* EventStore
        const head = yield* store.head
        expect(find(parsed, "eventstore_head_position")[0]?.value).toBe(head.position)
        expect(find(parsed, "processor_lag_events", { subscription: SUBSCRIPTION })[0]?.value).toBe(3)
        expect(
          find(parsed, "processor_lag_seconds", { subscription: SUBSCRIPTION })[0]?.value
        ).toBeGreaterThanOrEqual(0)
        expect(find(parsed, "processor_lease_held", { subscription: SUBSCRIPTION })[0]?.value).toBe(0)
        expect(find(parsed, "processor_up", { processor: "test-metrics-idle" })[0]?.value).toBe(1)
        expect(find(parsed, "processor_restarts_total", { processor: "test-metrics-idle" })[0]?.value).toBe(0)
        expect(find(parsed, "due_work_pending", { kind: "test.expiry" })[0]?.value).toBe(2)
        expect(find(parsed, "due_work_due", { kind: "test.expiry" })[0]?.value).toBe(1)
        expect(
          find(parsed, "due_work_oldest_due_age_seconds", { kind: "test.expiry" })[0]?.value
        ).toBeGreaterThanOrEqual(2.5)
        expect(find(parsed, "ops_status_scrape_success")[0]?.value).toBe(1)

        // The scrape itself is counted by the next one, under its own route.
        const again = parseExposition((yield* get("/metrics")).text)
        expect(find(again, "http_requests_total", { route: "/metrics", status: "200" })[0]?.value).toBe(1)
      })
    )
  })

  const WithToken = HttpAppLive.pipe(
    Layer.provide(
      Layer.effect(
        AppConfig,
        Effect.map(AppConfig, (c) => ({ ...c, metricsToken: Option.some(Redacted.make("s3cret-scrape")) }))
      )
    ),
    Layer.provideMerge(NodeHttpServer.layerTest),
    Layer.provideMerge(TestServices)
  )

  layer(WithToken, { excludeTestServices: true, timeout: 60_000 })("with METRICS_TOKEN", (it) => {
    it.effect("requires the bearer token", () =>
      Effect.gen(function* () {
        const missing = yield* get("/metrics")
        expect(missing.status).toBe(401)
        expect(JSON.parse(missing.text)).toMatchObject({ error: { type: "authentication_error" } })
        expect((yield* get("/metrics", "wrong")).status).toBe(401)
        const ok = yield* get("/metrics", "s3cret-scrape")
        expect(ok.status).toBe(200)
        expect(ok.text).toContain("# TYPE http_requests_total counter")
      })
    )
  })
})

describe("metrics building blocks", () => {
  vitest("route templates: static before parameterised, unknown paths are unmatched", () => {
    const match = routeMatcher(["/v1/orders/:id", "/v1/orders/search", "/v1/orders", "/rpc"])
    expect(match("/v1/orders/ord_1")).toBe("/v1/orders/:id")
    expect(match("/v1/orders/search")).toBe("/v1/orders/search")
    expect(match("/v1/orders")).toBe("/v1/orders")
    expect(match("/v1/orders/")).toBe("/v1/orders")
    expect(match("/v1/orders/a/b")).toBe("unmatched")
    expect(match("/rpc")).toBe("/rpc")
    expect(match("/../etc")).toBe("unmatched")
    expect(apiRouteTemplates(Api)).toEqual(expect.arrayContaining(["/health", "/ready"]))
  })

  vitest(
    "route templates are looked up by segment count: trailing slashes, roots and wildcards still match",
    () => {
      const match = routeMatcher([
        "/",
        "/v1/orders/:id",
        "/v1/orders/:id/lines/:line",
        "/docs/*",
        "/user/:id"
      ])
      expect(match("/")).toBe("/")
      expect(match("/user/cus_1/")).toBe("/user/:id")
      expect(match("/v1/orders/ord_1/lines/2")).toBe("/v1/orders/:id/lines/:line")
      expect(match("/v1/orders/ord_1/lines/2/")).toBe("/v1/orders/:id/lines/:line")
      expect(match("/v1/orders/ord_1/lines")).toBe("unmatched")
      expect(match("/docs/a/b/c")).toBe("/docs/*")
      expect(match("/docs/")).toBe("/docs/*")
      expect(match(`/${"x/".repeat(100)}`)).toBe("unmatched")
    }
  )

  vitest("label values are escaped; odd methods are bounded", () =>
    Effect.runPromise(
      Effect.gen(function* () {
        const metrics = makeHttpMetrics(() => 'we"ird\\route\nx')
        yield* metrics.record({ method: "BREW", route: "/x", status: 418, seconds: 0.2 })
        const text = renderPrometheus(yield* metrics.families)
        const parsed = parseExposition(text)
        const sample = find(parsed, "http_requests_total")[0]
        expect(sample?.labels).toEqual({ method: "OTHER", route: 'we"ird\\route\nx', status: "418" })
      })
    )
  )
})
