/**
 * The whole app with the notification processors running (automatic triggers and the sender),
 * wired to real local peers started with it: an SMTP sink, a Twilio-shaped SMS fake and an
 * FCM-shaped push fake. `Peers` gives tests the peers; the clock (e.g. `makeShiftedClock().clock`)
 * is the time the server and its processors run on.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { type Clock, Context, Effect, Layer, Logger, LogLevel, Option, Redacted } from "effect"
import { type AppConfigShape, makeAppConfig } from "../../src/config.js"
import { automaticNotifications } from "../../src/notifications/automatic.js"
import { notificationSender } from "../../src/notifications/sender.js"
import { type Processor, processorsLayer } from "../../src/processors/Supervisor.js"
import { projections } from "../../src/registry.js"
import { HttpAppLive } from "../../src/server.js"
import { type ProcessorServices, servicesLayer } from "../../src/services.js"
import { testConfig } from "./database.js"
import { apiKeyWith, call } from "./identity.js"
import {
  type FakeProvider,
  FCM_TEST_PROJECT,
  FCM_TEST_TOKEN,
  fcmFake,
  TWILIO_TEST_SID,
  TWILIO_TEST_TOKEN,
  twilioFake
} from "./providers.js"
import { type SmtpSink, smtpSink } from "./smtp.js"

export interface PeersShape {
  readonly smtp: SmtpSink
  readonly sms: FakeProvider
  readonly push: FakeProvider
}

export class Peers extends Context.Tag("test/NotificationPeers")<Peers, PeersShape>() {}

export const PeersLive = Layer.scoped(
  Peers,
  Effect.all({ smtp: smtpSink(), sms: twilioFake(), push: fcmFake() }, { concurrency: "unbounded" })
)

export const NOTIFICATION_PROCESSORS = [automaticNotifications(), notificationSender()]

/** The notification settings pointing at the peers (1 s provider time-out, so hangs fail fast). */
export const peerSettings = (peers: PeersShape): AppConfigShape["notifications"] => ({
  ...makeAppConfig().notifications,
  smtpUrl: Option.some(Redacted.make(peers.smtp.url)),
  emailFrom: "Test Store <store@example.com>",
  smsProviderUrl: Option.some(peers.sms.url),
  smsAccountSid: TWILIO_TEST_SID,
  smsAuthToken: Option.some(Redacted.make(TWILIO_TEST_TOKEN)),
  smsFrom: "+15005550006",
  pushProviderUrl: Option.some(peers.push.url),
  pushProjectId: FCM_TEST_PROJECT,
  pushAccessToken: Option.some(Redacted.make(FCM_TEST_TOKEN)),
  sendTimeoutSeconds: 1,
  storeName: "Test Store",
  storeUrl: "https://shop.example"
})

export interface NotificationsHttpOptions {
  readonly clock?: Clock.Clock
  /** Run the trigger and sender processors (default true), or exactly these. */
  readonly processors?: boolean | ReadonlyArray<Processor<ProcessorServices>>
  readonly overrides?: Partial<AppConfigShape>
}

/** App + processors + peers over a fresh database. */
export const notificationsHttp = (options: NotificationsHttpOptions = {}) => {
  const processors =
    options.processors === false
      ? []
      : options.processors === true || options.processors === undefined
        ? NOTIFICATION_PROCESSORS
        : options.processors
  const config = Layer.unwrapEffect(
    Effect.map(Peers, (peers) => testConfig({ notifications: peerSettings(peers), ...options.overrides }))
  )
  const services = servicesLayer({ processors, projections }).pipe(Layer.provideMerge(config))
  const app = Layer.mergeAll(HttpAppLive, processorsLayer(processors)).pipe(
    Layer.provideMerge(NodeHttpServer.layerTest),
    Layer.provideMerge(services),
    Layer.provideMerge(PeersLive),
    // Quiet unless TEST_LOG_LEVEL=debug, like TestConfig.
    Layer.provideMerge(
      Logger.minimumLogLevel(process.env.TEST_LOG_LEVEL === "debug" ? LogLevel.Debug : LogLevel.Warning)
    )
  )
  return options.clock === undefined ? app : app.pipe(Layer.provide(Layer.setClock(options.clock)))
}

/** Polls `check` every 25 ms until it returns a value (not undefined); fails after `timeoutMs`. */
export const eventually = <A, E, R>(
  check: Effect.Effect<A | undefined, E, R>,
  timeoutMs = 5_000
): Effect.Effect<A, E | Error, R> =>
  Effect.gen(function* () {
    const deadline = Date.now() + timeoutMs
    while (true) {
      const value = yield* check
      if (value !== undefined) return value
      if (Date.now() > deadline)
        return yield* Effect.fail(new Error(`condition not met within ${timeoutMs} ms`))
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 25)))
    }
  })

/** One staff API key per app (keyed by its peers): API keys do not expire, however far the clock moves. */
const staffKeys = new WeakMap<PeersShape, string>()

export const staffKey = Effect.flatMap(Peers, (peers) => {
  const known = staffKeys.get(peers)
  if (known !== undefined) return Effect.succeed(known)
  return Effect.map(
    apiKeyWith(["read:notifications", "write:notifications", "read:customers", "write:customers"]),
    (k) => {
      staffKeys.set(peers, k.key)
      return k.key
    }
  )
})

/** A request with the app's staff key. */
export const staffRequest = (method: "GET" | "POST" | "PUT" | "DELETE", path: string, json?: unknown) =>
  Effect.flatMap(staffKey, (token) => call(method, path, json === undefined ? { token } : { token, json }))
