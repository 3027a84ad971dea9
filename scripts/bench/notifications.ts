/**
 * `npm run bench:notifications` — the notification sender against real local peers and a real
 * database: how fast a backlog drains, and how long a notification waits between being queued and
 * being sent.
 *
 * It starts, in this process, the SMTP sink of test/support/smtp.ts (a real SMTP conversation over
 * TCP, through the app's pooled nodemailer transport) and the Twilio-shaped SMS fake of
 * test/support/providers.ts (HTTP, Basic auth), and the services of src/services.ts over a scratch
 * database `cp_bench_<random>` of the DATABASE_URL server (this machine only; dropped at the end) or,
 * without DATABASE_URL, embedded PGlite in memory. Then, for email and then for SMS:
 *
 *   1. backlog: with the sender NOT running, `BENCH_COUNT` notifications (default 10,000) queued
 *      through the real use case `Notifications.create`, 16 at a time, with a custom template made by
 *      `Notifications.createTemplate` (the read model's `created_at` is each one's queue time):
 *      reported as enqueue/s;
 *   2. the sender (`notificationSender()` under the Supervisor, `NOTIFICATION_CONCURRENCY` sends at
 *      once) is started, and the read model is polled every 100 ms until all of them are `sent`: the
 *      wall time from the start gives sent/s; `sent_at - created_at` of each gives the backlog
 *      latency p50/p99 (dominated by the wait in the queue: the last one waited for the whole drain);
 *   3. steady: with the sender still running, 200 more notifications created one by one at 20/s; the
 *      latency p50/p99 of those is what one notification waits when nothing is queued ahead of it.
 *
 * and prints one table (nothing is asserted). `BENCH_COUNT=300` makes a quick smoke run;
 * `BENCH_CONCURRENCY` overrides `NOTIFICATION_CONCURRENCY` (default 16, as in src/config.ts). Numbers
 * are only comparable on the same machine: the peers, the sender and the database share its CPUs.
 */
import { cpus } from "node:os"
import { performance } from "node:perf_hooks"
import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Console, Duration, Effect, Layer, Logger, LogLevel, Option, Redacted } from "effect"
import { AppConfig, makeAppConfig } from "../../src/config.js"
import { DatabaseInfo } from "../../src/db/Database.js"
import type { AuthenticatedActor } from "../../src/http/Auth.js"
import type { Channel } from "../../src/notifications/channels.js"
import { Notifications } from "../../src/notifications/Notifications.js"
import { DEFAULT_SMTP_CONNECTIONS } from "../../src/notifications/providers.js"
import { notificationSender } from "../../src/notifications/sender.js"
import { Supervisor } from "../../src/processors/Supervisor.js"
import { projections } from "../../src/registry.js"
import { servicesLayer } from "../../src/services.js"
import {
  type FakeProvider,
  startTwilioFake,
  TWILIO_TEST_SID,
  TWILIO_TEST_TOKEN
} from "../../test/support/providers.js"
import { type SmtpSink, startSmtpSink } from "../../test/support/smtp.js"
import { fmt, loadAverage, ms, printFootnotes, printTable, quantile, scratchConfig } from "./support.js"

// ---------------------------------------------------------------------------------------------------
// Settings

const positiveEnv = (name: string, fallback: number, max: number): number => {
  const raw = process.env[name]?.trim()
  if (raw === undefined || raw === "") return fallback
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 1 || n > max) {
    console.error(`${name} must be an integer between 1 and ${max} (got ${raw})`)
    process.exit(2)
  }
  return n
}

/** Notifications queued per channel for the backlog. */
const COUNT = positiveEnv("BENCH_COUNT", 10_000, 1_000_000)
/** `NOTIFICATION_CONCURRENCY` of the sender. */
const SENDER_CONCURRENCY = positiveEnv(
  "BENCH_CONCURRENCY",
  makeAppConfig().notifications.senderConcurrency,
  256
)
/** `Notifications.create` calls at once while queueing the backlog. */
const ENQUEUE_CONCURRENCY = 16
/** The steady phase: one create every `STEADY_INTERVAL_MS` while the sender runs. */
const STEADY_COUNT = 200
const STEADY_INTERVAL_MS = 50
/** How often the read model is asked how many are sent. */
const POLL_MS = 100
/** Give up when nothing was sent or failed for this long (longer than the first retry back-off). */
const STALL_MS = 60_000
const PROGRESS_MS = 5_000
/** The SMTP provider's pool. */
const SMTP_POOL = DEFAULT_SMTP_CONNECTIONS

const ADMIN: AuthenticatedActor = {
  type: "user",
  id: "usr_bench",
  role: "admin",
  scopes: new Set(["*"])
}

const FIRST_NAMES = ["Ada", "Grace", "Zofia", "Jürgen", "Amélie", "Kenji", "Olu", "María", "Ines", "Lars"]

// ---------------------------------------------------------------------------------------------------
// Peers and services

interface Peers {
  readonly smtp: SmtpSink
  readonly sms: FakeProvider
}

const peers = Effect.acquireRelease(
  Effect.promise(async () => {
    const [smtp, sms] = await Promise.all([startSmtpSink(), startTwilioFake()])
    return { smtp, sms } satisfies Peers
  }),
  ({ smtp, sms }) => Effect.promise(() => Promise.all([smtp.close(), sms.close()]))
)

/** The services (no HTTP server, no processors started) over the scratch database, wired to the peers. */
const servicesOver = (p: Peers) =>
  servicesLayer({ processors: [notificationSender()], projections }).pipe(
    Layer.provideMerge(
      scratchConfig((base) => ({
        notifications: {
          ...base.notifications,
          smtpUrl: Option.some(Redacted.make(p.smtp.url)),
          emailFrom: "Bench Store <store@example.com>",
          smsProviderUrl: Option.some(p.sms.url),
          smsAccountSid: TWILIO_TEST_SID,
          smsAuthToken: Option.some(Redacted.make(TWILIO_TEST_TOKEN)),
          smsFrom: "+15005550006",
          senderConcurrency: SENDER_CONCURRENCY,
          storeName: "Bench Store",
          storeUrl: "https://shop.example"
        }
      }))
    )
  )

// ---------------------------------------------------------------------------------------------------
// Helpers

/** Milliseconds, or seconds from 10 s up. */
const duration = (n: number) => (n >= 10_000 ? `${(n / 1000).toFixed(1)} s` : ms(n))

/** An upper bound past anything this run creates. */
const farFuture = () => new Date(Date.now() + 24 * 3_600_000)

const sleepMs = (millis: number) => Effect.sleep(Duration.millis(Math.max(0, millis)))

interface ChannelSpec {
  readonly label: string
  readonly channel: Channel
  readonly template: { readonly subject?: string; readonly body: string }
  readonly to: (i: number) => string
  readonly peerCount: () => number
  readonly peerName: string
}

interface Latencies {
  readonly count: number
  readonly p50: number
  readonly p99: number
}

interface ChannelResult {
  readonly spec: ChannelSpec
  readonly enqueuePerSecond: number
  readonly enqueueSeconds: number
  readonly sentPerSecond: number
  readonly drainSeconds: number
  readonly backlogFailed: number
  readonly backlog: Latencies
  readonly steadyFailed: number
  readonly steady: Latencies
  readonly received: number
}

// ---------------------------------------------------------------------------------------------------
// The run

const program = Effect.gen(function* () {
  const p = yield* peers
  yield* bench(p).pipe(Effect.provide(servicesOver(p)))
})

const bench = (p: Peers) =>
  Effect.gen(function* () {
    const info = yield* DatabaseInfo
    const config = yield* AppConfig
    const sql = yield* SqlClient.SqlClient
    const notifications = yield* Notifications
    const supervisor = yield* Supervisor
    const sender = notificationSender()
    const database =
      info.kind === "postgres"
        ? `PostgreSQL (pool of ${config.databaseMaxConnections})`
        : "embedded PGlite (one connection, in this process)"
    yield* Console.log(
      `bench: ${database}, ${cpus().length} CPUs, Node ${process.version}, ${fmt(COUNT)} notifications ` +
        `per channel, NOTIFICATION_CONCURRENCY ${config.notifications.senderConcurrency}, ` +
        `load average ${loadAverage()}`
    )

    /** Sent and failed notifications of `channel` queued in [since, until). */
    const settledCounts = (channel: Channel, since: Date, until: Date) =>
      Effect.map(
        sql<{ status: string; count: number }>`
          SELECT status, count(*)::int4 AS count FROM notifications.notifications
           WHERE status IN ('sent', 'failed') AND created_at >= ${since} AND created_at < ${until}
             AND channel = ${channel}
           GROUP BY status`,
        (rows) => ({
          sent: rows.find((r) => r.status === "sent")?.count ?? 0,
          failed: rows.find((r) => r.status === "failed")?.count ?? 0
        })
      )

    /** Polls every 100 ms until `expected` notifications are sent or failed. */
    const settle = (channel: Channel, since: Date, until: Date, expected: number, started: number) =>
      Effect.gen(function* () {
        let lastSettled = -1
        let lastChange = performance.now()
        let lastReport = started
        while (true) {
          const counts = yield* settledCounts(channel, since, until)
          const settled = counts.sent + counts.failed
          const now = performance.now()
          if (settled >= expected) return { ...counts, seconds: (now - started) / 1000 }
          if (settled !== lastSettled) {
            lastSettled = settled
            lastChange = now
          } else if (now - lastChange > STALL_MS) {
            return yield* Effect.dieMessage(
              `${channel}: stuck at ${counts.sent} sent and ${counts.failed} failed of ${expected} ` +
                `for ${STALL_MS / 1000} s`
            )
          }
          if (now - lastReport >= PROGRESS_MS) {
            lastReport = now
            const rate = counts.sent / ((now - started) / 1000)
            yield* Console.log(`  ${fmt(counts.sent)} of ${fmt(expected)} sent (${fmt(rate)}/s so far)`)
          }
          yield* sleepMs(POLL_MS)
        }
      })

    /** `sent_at - created_at` of the sent notifications of `channel` queued in [since, until). */
    const latencies = (channel: Channel, since: Date, until: Date) =>
      Effect.map(
        sql<{ ms: number }>`
          SELECT (extract(epoch FROM sent_at - created_at) * 1000)::float8 AS ms
            FROM notifications.notifications
           WHERE status = 'sent' AND created_at >= ${since} AND created_at < ${until}
             AND channel = ${channel}`,
        (rows): Latencies => {
          const sorted = Float64Array.from(rows, (r) => Number(r.ms)).sort()
          return { count: sorted.length, p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99) }
        }
      )

    const run = (spec: ChannelSpec) =>
      Effect.gen(function* () {
        const template = yield* notifications
          .createTemplate(ADMIN, {
            name: `Bench ${spec.channel}`,
            channel: spec.channel,
            ...spec.template
          })
          .pipe(Effect.catchAll((e) => Effect.dieMessage(`createTemplate failed: ${JSON.stringify(e)}`)))
        const create = (i: number) =>
          notifications
            .create(ADMIN, {
              channel: spec.channel,
              to: spec.to(i),
              templateId: template.id,
              data: {
                firstName: FIRST_NAMES[i % FIRST_NAMES.length],
                orderNumber: `#${100_000 + i}`,
                trackingUrl: `https://track.example/${i.toString(36)}`
              },
              metadata: { bench: spec.channel }
            })
            .pipe(
              Effect.catchAll((e) => Effect.dieMessage(`Notifications.create failed: ${JSON.stringify(e)}`))
            )

        // 1. The backlog, queued with no sender running.
        yield* Console.log(
          `… ${spec.label}: queueing ${fmt(COUNT)} with Notifications.create, ${ENQUEUE_CONCURRENCY} at a time`
        )
        const backlogSince = new Date()
        const enqueueStarted = performance.now()
        let queued = 0
        let lastReport = enqueueStarted
        yield* Effect.forEach(
          Array.from({ length: COUNT }, (_, i) => i),
          (i) =>
            Effect.flatMap(create(i), () => {
              queued++
              const now = performance.now()
              if (now - lastReport < PROGRESS_MS || queued === COUNT) return Effect.void
              lastReport = now
              const rate = queued / ((now - enqueueStarted) / 1000)
              return Console.log(`  ${fmt(queued)} of ${fmt(COUNT)} queued (${fmt(rate)}/s so far)`)
            }),
          { concurrency: ENQUEUE_CONCURRENCY, discard: true }
        )
        const enqueueSeconds = (performance.now() - enqueueStarted) / 1000
        const before = yield* settledCounts(spec.channel, backlogSince, farFuture())
        if (before.sent + before.failed > 0 || spec.peerCount() > 0) {
          return yield* Effect.dieMessage(`${spec.label}: something was sent before the sender started`)
        }

        // 2. The sender drains it; 3. then steady creates while it keeps running.
        return yield* Effect.scoped(
          Effect.gen(function* () {
            yield* Console.log(
              `… ${spec.label}: sender started (${config.notifications.senderConcurrency} at once)`
            )
            const drainStarted = performance.now()
            yield* supervisor.start([sender])
            const drained = yield* settle(spec.channel, backlogSince, farFuture(), COUNT, drainStarted)
            const steadySince = new Date()
            const backlog = yield* latencies(spec.channel, backlogSince, steadySince)

            yield* Console.log(
              `… ${spec.label}: ${STEADY_COUNT} more, one every ${STEADY_INTERVAL_MS} ms, sender running`
            )
            const steadyStarted = performance.now()
            for (let i = 0; i < STEADY_COUNT; i++) {
              yield* create(COUNT + i)
              yield* sleepMs(steadyStarted + (i + 1) * STEADY_INTERVAL_MS - performance.now())
            }
            const until = farFuture()
            const steadyDone = yield* settle(spec.channel, steadySince, until, STEADY_COUNT, steadyStarted)
            const steady = yield* latencies(spec.channel, steadySince, until)
            return {
              spec,
              enqueuePerSecond: COUNT / enqueueSeconds,
              enqueueSeconds,
              sentPerSecond: drained.sent / drained.seconds,
              drainSeconds: drained.seconds,
              backlogFailed: drained.failed,
              backlog,
              steadyFailed: steadyDone.failed,
              steady,
              received: spec.peerCount()
            } satisfies ChannelResult
          })
        )
      })

    const email = yield* run({
      label: "email via SMTP",
      channel: "email",
      template: {
        subject: "Your order {{ orderNumber }} is on its way",
        body: [
          "Hello {{ firstName }},",
          "",
          "Good news: order {{ orderNumber }} has shipped. Follow it here: {{ trackingUrl }}",
          "",
          "Thank you for shopping with {{ store.name }}.",
          "{{ store.url }}"
        ].join("\n")
      },
      to: (i) => `customer.${i}@example.com`,
      peerCount: () => p.smtp.messages.length,
      peerName: "SMTP sink"
    })
    // The sink keeps every mail (raw and parsed); the SMS phase does not need them.
    p.smtp.reset()
    const sms = yield* run({
      label: "sms via Twilio fake",
      channel: "sms",
      template: {
        body: "{{ store.name }}: hi {{ firstName }}, order {{ orderNumber }} has shipped. Track it: {{ trackingUrl }}"
      },
      to: (i) => `+1415${String(i).padStart(7, "0")}`,
      peerCount: () => p.sms.requests.length,
      peerName: "Twilio fake"
    })
    p.sms.reset()

    const results: ReadonlyArray<ChannelResult> = [email, sms]
    yield* printTable([
      ["channel", "queued", "enqueue/s", "sent/s", "p50 backlog", "p99 backlog", "p50 steady", "p99 steady"],
      ...results.map((r) => [
        r.spec.label,
        fmt(COUNT),
        fmt(r.enqueuePerSecond),
        fmt(r.sentPerSecond),
        duration(r.backlog.p50),
        duration(r.backlog.p99),
        duration(r.steady.p50),
        duration(r.steady.p99)
      ])
    ])
    yield* Console.log(
      `database: ${database}; NOTIFICATION_CONCURRENCY ${config.notifications.senderConcurrency}` +
        `${process.env.BENCH_CONCURRENCY ? " (BENCH_CONCURRENCY)" : " (default)"}; SMTP pool of ` +
        `${SMTP_POOL} connections (nodemailer, DEFAULT_SMTP_CONNECTIONS); provider time-out ` +
        `${config.notifications.sendTimeoutSeconds} s.`
    )
    yield* Console.log(
      `enqueue/s: Notifications.create × ${fmt(COUNT)}, ${ENQUEUE_CONCURRENCY} at a time, sender stopped ` +
        `(${results.map((r) => `${r.spec.channel} ${fmt(r.enqueueSeconds)} s`).join(", ")}).`
    )
    yield* Console.log(
      `sent/s: ${fmt(COUNT)} sent ÷ wall time from starting the sender until the read model showed all ` +
        `of them sent (polled every ${POLL_MS} ms; ${results.map((r) => `${r.spec.channel} ${r.drainSeconds.toFixed(1)} s`).join(", ")}).`
    )
    yield* Console.log(
      `backlog latency: sent_at - created_at of the ${fmt(COUNT)} queued at once before the sender ` +
        "started, so it is dominated by the wait in the queue (and by the queueing time itself), not by " +
        "the send: the p99 is close to the whole queueing + drain time."
    )
    yield* Console.log(
      `steady latency: sent_at - created_at of ${STEADY_COUNT} more, created one by one every ` +
        `${STEADY_INTERVAL_MS} ms (${fmt(1000 / STEADY_INTERVAL_MS)}/s) while the sender ran with an empty queue.`
    )
    for (const r of results) {
      const expected = COUNT + STEADY_COUNT
      const problems = [
        r.backlogFailed > 0 ? `${r.backlogFailed} of the backlog failed` : "",
        r.steadyFailed > 0 ? `${r.steadyFailed} of the steady ones failed` : "",
        r.received !== expected ? `the ${r.spec.peerName} got ${fmt(r.received)} of ${fmt(expected)}` : ""
      ].filter((s) => s !== "")
      yield* Console.log(
        problems.length === 0
          ? `${r.spec.label}: the ${r.spec.peerName} received all ${fmt(expected)}.`
          : `warning: ${r.spec.label}: ${problems.join("; ")}`
      )
    }
    yield* printFootnotes([])
  })

program.pipe(
  Effect.scoped,
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  Effect.timeoutFail({
    duration: `${600 + Math.ceil(COUNT / 10)} seconds`,
    onTimeout: () => new Error("bench took too long")
  }),
  NodeRuntime.runMain
)
