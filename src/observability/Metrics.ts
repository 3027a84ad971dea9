/**
 * `/metrics` in the Prometheus text exposition format (version 0.0.4). A small registry of our own
 * for the request metrics (counter + duration histogram, recorded by the `onResponse` hook of
 * `apiMiddleware`), plus gauges read at scrape time from the ops snapshot (processor lag, processor
 * up/restarts, due-work backlog, event store head).
 *
 * Cardinality stays bounded: `route` is the endpoint's path template (`/v1/orders/:id`), one of the
 * fixed non-API routes, or `unmatched` — never a raw path; `method` is one of the standard methods
 * or `OTHER`.
 *
 * Access: open by default (scrapers usually reach it over a private network; restrict it there),
 * or `METRICS_TOKEN` to require `Authorization: Bearer <METRICS_TOKEN>`.
 */
import { createHash, timingSafeEqual } from "node:crypto"
import { type HttpApi, HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Context, Effect, Layer, Option, Redacted } from "effect"
import { type OpsReport, OpsStatus, oldestDueAgeSeconds } from "../audit/OpsStatus.js"
import { AppConfig } from "../config.js"

export const METRICS_PATH = "/metrics"
export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

// --- exposition format -------------------------------------------------------------------------

export type Labels = Readonly<Record<string, string>>

export interface Sample {
  /** Appended to the family name (`_bucket`, `_sum`, `_count`). */
  readonly suffix?: string
  readonly labels: Labels
  readonly value: number
}

export interface MetricFamily {
  readonly name: string
  readonly help: string
  readonly type: "counter" | "gauge" | "histogram"
  readonly samples: ReadonlyArray<Sample>
}

const escapeLabel = (v: string) => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"')
const escapeHelp = (v: string) => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")

export const formatValue = (n: number): string =>
  Number.isNaN(n) ? "NaN" : n === Number.POSITIVE_INFINITY ? "+Inf" : n === -Infinity ? "-Inf" : String(n)

const formatLabels = (labels: Labels): string => {
  const entries = Object.entries(labels)
  if (entries.length === 0) return ""
  return `{${entries.map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(",")}}`
}

/** Renders families as Prometheus text: `# HELP`, `# TYPE`, then one line per sample. */
export const renderPrometheus = (families: ReadonlyArray<MetricFamily>): string => {
  let out = ""
  for (const f of families) {
    out += `# HELP ${f.name} ${escapeHelp(f.help)}\n# TYPE ${f.name} ${f.type}\n`
    for (const s of f.samples)
      out += `${f.name}${s.suffix ?? ""}${formatLabels(s.labels)} ${formatValue(s.value)}\n`
  }
  return out
}

// --- route templates ---------------------------------------------------------------------------

const KNOWN_METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])

export const metricMethod = (method: string): string => {
  const m = method.toUpperCase()
  return KNOWN_METHODS.has(m) ? m : "OTHER"
}

/** Path templates of every endpoint of an HttpApi (`/v1/orders/:id`). */
export const apiRouteTemplates = (api: HttpApi.HttpApi.Any): ReadonlyArray<string> => {
  const groups = Object.values((api as unknown as HttpApi.HttpApi.AnyWithProps).groups)
  const paths = new Set<string>()
  for (const group of groups) for (const endpoint of Object.values(group.endpoints)) paths.add(endpoint.path)
  return [...paths]
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/**
 * Maps a request path to its route template; static templates win over parameterised ones
 * (`/v1/orders/search` before `/v1/orders/:id`). Anything else is `unmatched`.
 */
export const routeMatcher = (templates: ReadonlyArray<string>): ((path: string) => string) => {
  const compiled = [...new Set(templates)]
    .map((template) => {
      const segments = template.split("/")
      const params = segments.filter((s) => s.startsWith(":") || s === "*").length
      const pattern = segments
        .map((s) => (s === "*" ? ".*" : s.startsWith(":") ? "[^/]+" : escapeRegExp(s)))
        .join("/")
      return {
        template,
        params,
        // A template without `*` only matches paths of its own segment count (a trailing slash aside).
        segments: segments.includes("*") ? undefined : segments.length,
        // Its first segment is a parameter (or `*`): it can match any first segment.
        firstParam: (segments[1] ?? "").startsWith(":") || segments[1] === "*",
        regex: new RegExp(`^${pattern}/?$`)
      }
    })
    .sort((a, b) => a.params - b.params)
  const exact = new Map(compiled.filter((c) => c.params === 0).map((c) => [c.template, c.template]))
  // Per segment count and first segment (`/user/…` with 3 segments), the templates a path can match,
  // in the order above: a request tests one or two regexes, not every route's.
  const byShape = new Map<string, ReadonlyArray<(typeof compiled)[number]>>()
  const candidates = (count: number, first: string) => {
    const key = `${count}/${first}`
    let list = byShape.get(key)
    if (list === undefined) {
      list = compiled.filter(
        (c) =>
          c.segments === undefined ||
          (c.segments === count && (c.firstParam || firstSegment(c.template) === first))
      )
      // Bounded: a client inventing first segments must not grow this map without end.
      if (count <= 64 && byShape.size < 1024) byShape.set(key, list)
    }
    return list
  }
  return (path) => {
    const hit = exact.get(path)
    if (hit !== undefined) return hit
    let count = 1
    for (let i = 0; i < path.length; i++) if (path.charCodeAt(i) === 47 /* / */) count++
    if (path.length > 1 && path.endsWith("/")) count--
    return candidates(count, firstSegment(path)).find((c) => c.regex.test(path))?.template ?? "unmatched"
  }
}

/** `/user/…` → `user`. */
const firstSegment = (path: string) => {
  const end = path.indexOf("/", 1)
  return end === -1 ? path.slice(1) : path.slice(1, end)
}

// --- request metrics ---------------------------------------------------------------------------

export const DURATION_BUCKETS: ReadonlyArray<number> = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
]

export interface RequestInfo {
  readonly method: string
  /** The raw path (or already a template); normalized here. */
  readonly route: string
  readonly status: number
  readonly seconds: number
}

export interface HttpMetricsShape {
  readonly record: (info: RequestInfo) => Effect.Effect<void>
  readonly families: Effect.Effect<ReadonlyArray<MetricFamily>>
}

export class HttpMetrics extends Context.Tag("HttpMetrics")<HttpMetrics, HttpMetricsShape>() {}

interface RequestCounter {
  readonly labels: Labels
  value: number
}

interface HistogramCell {
  readonly labels: Labels
  /** Per bucket, the requests that fell in it and no lower one (made cumulative when scraped). */
  readonly counts: Array<number>
  sum: number
  count: number
  /** This method and route's request counter per status. */
  readonly byStatus: Map<number, RequestCounter>
}

export const makeHttpMetrics = (matchRoute: (path: string) => string): HttpMetricsShape => {
  // Every request records here: one map lookup by method and route, one by status, one bucket
  // incremented; the cumulative bucket counts are summed when scraped.
  const requests: Array<RequestCounter> = []
  const durations = new Map<string, HistogramCell>()
  return {
    record: (info) =>
      Effect.sync(() => {
        const method = metricMethod(info.method)
        const route = matchRoute(info.route)
        const key = `${method} ${route}`
        let cell = durations.get(key)
        if (cell === undefined) {
          cell = {
            labels: { method, route },
            counts: DURATION_BUCKETS.map(() => 0),
            sum: 0,
            count: 0,
            byStatus: new Map()
          }
          durations.set(key, cell)
        }
        const counter = cell.byStatus.get(info.status)
        if (counter !== undefined) counter.value++
        else {
          const created = { labels: { method, route, status: String(info.status) }, value: 1 }
          cell.byStatus.set(info.status, created)
          requests.push(created)
        }
        const bucket = DURATION_BUCKETS.findIndex((le) => info.seconds <= le)
        if (bucket !== -1) cell.counts[bucket] = (cell.counts[bucket] ?? 0) + 1
        cell.sum += info.seconds
        cell.count++
      }),
    families: Effect.sync(() => [
      {
        name: "http_requests_total",
        help: "HTTP requests answered, by method, route template and status.",
        type: "counter",
        samples: requests.map((c) => ({ labels: c.labels, value: c.value }))
      },
      {
        name: "http_request_duration_seconds",
        help: "Time to the response head, by method and route template.",
        type: "histogram",
        samples: [...durations.values()].flatMap((cell): Array<Sample> => {
          let cumulative = 0
          return [
            ...DURATION_BUCKETS.map((le, i) => {
              cumulative += cell.counts[i] ?? 0
              return { suffix: "_bucket", labels: { ...cell.labels, le: String(le) }, value: cumulative }
            }),
            { suffix: "_bucket", labels: { ...cell.labels, le: "+Inf" }, value: cell.count },
            { suffix: "_sum", labels: cell.labels, value: cell.sum },
            { suffix: "_count", labels: cell.labels, value: cell.count }
          ]
        })
      }
    ])
  }
}

/** Request metrics for the routes of `api` plus `extraRoutes` (raw routes: `/rpc`, `/metrics`, …). */
export const HttpMetricsLive = (api: HttpApi.HttpApi.Any, extraRoutes: ReadonlyArray<string>) =>
  Layer.sync(HttpMetrics, () => makeHttpMetrics(routeMatcher([...apiRouteTemplates(api), ...extraRoutes])))

// --- scrape-time gauges ------------------------------------------------------------------------

export const opsFamilies = (report: OpsReport): ReadonlyArray<MetricFamily> => {
  const nowMs = report.at.getTime()
  const sub = (s: { subscriptionId: string }) => ({ subscription: s.subscriptionId })
  const kind = (d: { kind: string }) => ({ kind: d.kind })
  return [
    {
      name: "eventstore_head_position",
      help: "Newest global position every reader can see.",
      type: "gauge",
      samples: [{ labels: {}, value: report.head.position }]
    },
    {
      name: "processor_lag_events",
      help: "Events after the subscription's checkpoint.",
      type: "gauge",
      samples: report.subscriptions.map((s) => ({ labels: sub(s), value: s.lagEvents }))
    },
    {
      name: "processor_lag_seconds",
      help: "Age of the oldest event the subscription has not processed (0 when caught up).",
      type: "gauge",
      samples: report.subscriptions.map((s) => ({ labels: sub(s), value: s.lagSeconds }))
    },
    {
      name: "processor_lease_held",
      help: "1 when some instance holds a live lease on the subscription.",
      type: "gauge",
      samples: report.subscriptions.map((s) => ({
        labels: sub(s),
        value: s.owner !== null && s.leaseUntil !== null && s.leaseUntil.getTime() > nowMs ? 1 : 0
      }))
    },
    {
      name: "processor_up",
      help: "1 when the supervised processor is running in this process, 0 while backing off or stopped.",
      type: "gauge",
      samples: report.processors.map((p) => ({
        labels: { processor: p.name },
        value: p.state === "running" ? 1 : 0
      }))
    },
    {
      name: "processor_restarts_total",
      help: "Restarts of the processor after a failure since this process started it.",
      type: "counter",
      samples: report.processors.map((p) => ({ labels: { processor: p.name }, value: p.restarts }))
    },
    {
      name: "due_work_pending",
      help: "Pending due-work items (due or not yet due), by kind.",
      type: "gauge",
      samples: report.dueWork.map((d) => ({ labels: kind(d), value: d.pending }))
    },
    {
      name: "due_work_due",
      help: "Pending due-work items already due (the backlog), by kind.",
      type: "gauge",
      samples: report.dueWork.map((d) => ({ labels: kind(d), value: d.due }))
    },
    {
      name: "due_work_oldest_due_age_seconds",
      help: "How long the oldest due, unclaimed item has been waiting (0 when none), by kind.",
      type: "gauge",
      samples: report.dueWork.map((d) => ({
        labels: kind(d),
        value: oldestDueAgeSeconds(report.at, d)
      }))
    },
    {
      name: "due_work_expired_claims",
      help: "Claimed items whose lease ran out (a crashed or stuck worker), by kind.",
      type: "gauge",
      samples: report.dueWork.map((d) => ({ labels: kind(d), value: d.expiredClaims }))
    },
    {
      name: "due_work_failed",
      help: "Items that failed for good, by kind.",
      type: "gauge",
      samples: report.dueWork.map((d) => ({ labels: kind(d), value: d.failed }))
    }
  ]
}

const digest = (s: string) => createHash("sha256").update(s).digest()

/** The check of `Authorization` against `METRICS_TOKEN`, built once: the token is hashed at start-up. */
const authorizer = (
  token: Option.Option<Redacted.Redacted<string>>
): ((header: string | undefined) => boolean) => {
  if (Option.isNone(token)) return () => true
  const expected = digest(Redacted.value(token.value))
  return (header) => {
    const match = /^bearer\s+(\S+)\s*$/i.exec(header ?? "")
    return match?.[1] !== undefined && timingSafeEqual(digest(match[1]), expected)
  }
}

/** Everything `/metrics` shows, as text. */
export const renderMetrics = Effect.gen(function* () {
  const http = yield* HttpMetrics
  const ops = yield* OpsStatus
  const requestFamilies = yield* http.families
  // Scrapes are frequent: their SQL statements are not traced.
  const report = yield* ops.report.pipe(
    Effect.withTracerEnabled(false),
    Effect.tapError((error) => Effect.logWarning("metrics: the ops snapshot failed", error)),
    Effect.option
  )
  const families: Array<MetricFamily> = [
    ...requestFamilies,
    {
      name: "ops_status_scrape_success",
      help: "1 when the database-backed gauges below could be read.",
      type: "gauge",
      samples: [{ labels: {}, value: Option.isSome(report) ? 1 : 0 }]
    },
    ...(Option.isSome(report) ? opsFamilies(report.value) : [])
  ]
  return renderPrometheus(families)
})

/** `GET /metrics` as a raw route on the HttpApi router. */
export const MetricsRouteLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function* () {
    const authorized = authorizer((yield* AppConfig).metricsToken)
    const context = yield* Effect.context<HttpMetrics | OpsStatus>()
    yield* router.get(
      METRICS_PATH,
      Effect.gen(function* () {
        const request = yield* HttpServerRequest.HttpServerRequest
        if (!authorized(request.headers.authorization)) {
          return HttpServerResponse.empty({ status: 401, headers: { "www-authenticate": "Bearer" } })
        }
        const body = yield* Effect.provide(renderMetrics, context)
        return HttpServerResponse.text(body, { contentType: PROMETHEUS_CONTENT_TYPE })
      })
    )
  })
)
