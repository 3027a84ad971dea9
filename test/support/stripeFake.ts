/**
 * A local Stripe-shaped HTTP fake (`node:http`, 127.0.0.1, random port) for the Stripe adapter
 * (src/payments/stripeProcessor.ts): the endpoints the official SDK calls for it — PaymentMethods
 * retrieve, PaymentIntents create (+confirm) / capture / cancel, Refunds create — with Stripe's
 * form-encoded requests, its objects and error bodies, and its idempotency: a key asked again gets
 * the first answer (a key reused with other parameters → 400 `idempotency_error`), so the money a
 * key moves moves once; `charges()` counts what was really charged.
 *
 * Scriptable: answer the next requests 500 (before or after doing the work), delay an answer,
 * send the event of a confirmation BEFORE answering it, complete a 3-D Secure authentication;
 * events go to the service signed with the webhook secret (`generateTestHeaderString`).
 *
 * Payment methods: Stripe's test tokens — `pm_card_visa`, `pm_card_mastercard` succeed,
 * `pm_card_visa_chargeDeclined` (generic_decline), `pm_card_visa_chargeDeclinedInsufficientFunds`,
 * `pm_card_threeDSecure2Required` / `pm_card_authenticationRequired` want 3-D Secure; any other
 * `pm_…` is unknown (404 `resource_missing`).
 */
import { randomBytes } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import { Context, Effect, Layer, Option, Redacted, type Scope } from "effect"
import Stripe from "stripe"
import { type AppConfigShape, makeAppConfig } from "../../src/config.js"

export const STRIPE_TEST_KEY = "sk_test_fake_0123456789abcdefghijklmnop"
export const STRIPE_WEBHOOK_SECRET = "whsec_fake_0123456789abcdefghijklmnop"

type Json = Record<string, unknown>

interface Card {
  readonly brand: string
  readonly last4: string
  readonly outcome:
    | { readonly _tag: "approve" }
    | {
        readonly _tag: "decline"
        readonly code: string
        readonly declineCode: string
        readonly message: string
      }
    | { readonly _tag: "authenticate" }
}

const CARDS: Readonly<Record<string, Card>> = {
  pm_card_visa: { brand: "visa", last4: "4242", outcome: { _tag: "approve" } },
  pm_card_mastercard: { brand: "mastercard", last4: "4444", outcome: { _tag: "approve" } },
  pm_card_visa_chargeDeclined: {
    brand: "visa",
    last4: "0002",
    outcome: {
      _tag: "decline",
      code: "card_declined",
      declineCode: "generic_decline",
      message: "Your card was declined."
    }
  },
  pm_card_visa_chargeDeclinedInsufficientFunds: {
    brand: "visa",
    last4: "9995",
    outcome: {
      _tag: "decline",
      code: "card_declined",
      declineCode: "insufficient_funds",
      message: "Your card has insufficient funds."
    }
  },
  pm_card_threeDSecure2Required: { brand: "visa", last4: "3220", outcome: { _tag: "authenticate" } },
  pm_card_authenticationRequired: { brand: "visa", last4: "3184", outcome: { _tag: "authenticate" } }
}

/** What the fake holds for one Stripe PaymentIntent. */
export interface FakeIntent {
  readonly id: string
  readonly amount: number
  readonly currency: string
  readonly captureMethod: string
  readonly paymentMethod: string
  readonly metadata: Readonly<Record<string, string>>
  readonly clientSecret: string
  status: string
  amountReceived: number
  amountRefunded: number
  lastPaymentError: Json | null
  readonly refunds: Array<Json>
}

export interface RecordedCall {
  readonly method: string
  readonly path: string
  readonly idempotencyKey: string | undefined
}

interface Answer {
  readonly status: number
  readonly body: Json
}

export interface StripeFake {
  /** What `STRIPE_API_BASE` holds, e.g. `http://127.0.0.1:51234`. */
  readonly url: string
  /** Every request, in order (retries included). */
  readonly calls: Array<RecordedCall>
  /** The service's answers to the events sent, in order. */
  readonly webhookReplies: Array<WebhookReply>
  readonly intents: Map<string, FakeIntent>
  /** Money moved: payment intents authorized or captured (each once, whatever the retries). */
  readonly charges: () => ReadonlyArray<FakeIntent>
  /** Where events go: the service's `/v1/processor-events/stripe`. */
  webhookUrl: string | undefined
  /**
   * The next `times` requests whose `METHOD /path` starts with `on` (default: any POST) answer
   * `status`; `afterWork`: the work is done (and its answer kept for the key) first.
   */
  readonly failNext: (options: { status?: number; afterWork?: boolean; times?: number; on?: string }) => void
  /** The next confirmation is answered `ms` later (the work itself is done at once). */
  readonly delayNext: (ms: number) => void
  /** The next confirmation's event is sent (and its answer awaited) before the API answer. */
  readonly eventBeforeAnswerNext: () => void
  /** The next confirmation's event is sent at the same time as the API answer (they race). */
  readonly eventWithAnswerNext: () => void
  /** A 3-D Secure intent: the customer passes (or fails) authentication; the event is sent. */
  readonly authenticate: (id: string, outcome: "approve" | "fail") => Promise<WebhookReply>
  /** Sends an event for `object` (signed with `secret`, the webhook secret by default). */
  readonly sendEvent: (type: string, object: Json, secret?: string) => Promise<WebhookReply>
  /** The last event sent, as sent (payload and signature): replay it with `resend`. */
  readonly lastEvent: () => { readonly payload: string; readonly signature: string } | undefined
  readonly resend: (event: { readonly payload: string; readonly signature: string }) => Promise<WebhookReply>
  readonly intentObject: (intent: FakeIntent) => Json
  readonly chargeObject: (intent: FakeIntent) => Json
  readonly close: () => Promise<void>
}

export interface WebhookReply {
  readonly status: number
  readonly body: Json
}

const id = (prefix: string) => `${prefix}_${randomBytes(12).toString("hex")}`

const readBody = (req: IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    req.on("error", reject)
  })

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const stripeError = (status: number, error: Json): Answer => ({ status, body: { error } })

export const startStripeFake = async (): Promise<StripeFake> => {
  const signer = new Stripe(STRIPE_TEST_KEY)
  const calls: Array<RecordedCall> = []
  const webhookReplies: Array<WebhookReply> = []
  const intents = new Map<string, FakeIntent>()
  /** Idempotency-Key → the request's body and its first answer. */
  const remembered = new Map<string, { readonly body: string; readonly answer: Answer }>()
  const failures: Array<{ status: number; afterWork: boolean; on: string }> = []
  let delay = 0
  let eventFirst = false
  let eventRacing = false
  let last: { payload: string; signature: string } | undefined
  let lastCreated: FakeIntent | undefined

  const intentObject = (pi: FakeIntent): Json => ({
    id: pi.id,
    object: "payment_intent",
    amount: pi.amount,
    amount_capturable: pi.status === "requires_capture" ? pi.amount : 0,
    amount_received: pi.amountReceived,
    capture_method: pi.captureMethod,
    client_secret: pi.clientSecret,
    currency: pi.currency,
    last_payment_error: pi.lastPaymentError,
    latest_charge:
      pi.status === "succeeded" || pi.status === "requires_capture" ? `ch_${pi.id.slice(3)}` : null,
    livemode: false,
    metadata: pi.metadata,
    next_action:
      pi.status === "requires_action"
        ? { type: "use_stripe_sdk", use_stripe_sdk: { type: "three_d_secure_redirect" } }
        : null,
    payment_method: pi.paymentMethod,
    status: pi.status
  })

  const chargeObject = (pi: FakeIntent): Json => ({
    id: `ch_${pi.id.slice(3)}`,
    object: "charge",
    amount: pi.amount,
    amount_captured: pi.amountReceived,
    amount_refunded: pi.amountRefunded,
    currency: pi.currency,
    payment_intent: pi.id,
    refunded: pi.amountRefunded >= pi.amountReceived && pi.amountReceived > 0,
    refunds: { object: "list", data: pi.refunds, has_more: false, url: "/v1/refunds" },
    status: "succeeded"
  })

  const send = async (payload: string, signature: string): Promise<WebhookReply> => {
    if (fake.webhookUrl === undefined) throw new Error("stripe fake: no webhookUrl to send events to")
    last = { payload, signature }
    const response = await fetch(fake.webhookUrl, {
      method: "POST",
      headers: { "content-type": "application/json; charset=utf-8", "stripe-signature": signature },
      body: payload
    })
    const text = await response.text()
    let body: Json = {}
    try {
      body = JSON.parse(text)
    } catch {
      body = { raw: text }
    }
    const reply = { status: response.status, body }
    webhookReplies.push(reply)
    return reply
  }

  const sendEvent = (type: string, object: Json, secret = STRIPE_WEBHOOK_SECRET) => {
    const payload = JSON.stringify(
      {
        id: id("evt"),
        object: "event",
        api_version: "2026-10-28.endive",
        created: Math.floor(Date.now() / 1000),
        data: { object },
        livemode: false,
        pending_webhooks: 1,
        request: { id: null, idempotency_key: null },
        type
      },
      null,
      2
    )
    return send(payload, signer.webhooks.generateTestHeaderString({ payload, secret }))
  }

  const eventOf = (pi: FakeIntent) =>
    pi.status === "succeeded"
      ? "payment_intent.succeeded"
      : pi.status === "requires_capture"
        ? "payment_intent.amount_capturable_updated"
        : pi.status === "requires_action"
          ? "payment_intent.requires_action"
          : "payment_intent.payment_failed"

  const declineOf = (pi: FakeIntent, outcome: { code: string; declineCode: string; message: string }) => {
    pi.status = "requires_payment_method"
    pi.lastPaymentError = {
      type: "card_error",
      code: outcome.code,
      decline_code: outcome.declineCode,
      message: outcome.message
    }
  }

  const authorized = (pi: FakeIntent) => {
    pi.status = pi.captureMethod === "manual" ? "requires_capture" : "succeeded"
    if (pi.status === "succeeded") pi.amountReceived = pi.amount
  }

  /** The work of a request: what Stripe would do, and its answer. */
  const work = (method: string, path: string, form: URLSearchParams): Answer => {
    const segments =
      path
        .split("?")[0]
        ?.split("/")
        .filter((s) => s !== "") ?? []
    const [version, resource, objectId, action] = segments
    if (version !== "v1")
      return stripeError(404, { type: "invalid_request_error", message: "Unrecognized request URL" })
    if (method === "GET" && resource === "payment_methods" && objectId !== undefined) {
      const card = CARDS[objectId]
      if (card === undefined)
        return stripeError(404, {
          type: "invalid_request_error",
          code: "resource_missing",
          message: `No such PaymentMethod: '${objectId}'`,
          param: "payment_method"
        })
      return {
        status: 200,
        body: {
          id: objectId,
          object: "payment_method",
          type: "card",
          card: { brand: card.brand, last4: card.last4, exp_month: 12, exp_year: 2034 }
        }
      }
    }
    if (method === "POST" && resource === "payment_intents" && objectId === undefined) {
      const paymentMethod = form.get("payment_method") ?? ""
      const card = CARDS[paymentMethod]
      const metadata: Record<string, string> = {}
      for (const [k, v] of form) {
        const m = /^metadata\[(.+)\]$/.exec(k)
        if (m?.[1] !== undefined) metadata[m[1]] = v
      }
      const piId = id("pi")
      const pi: FakeIntent = {
        id: piId,
        amount: Number(form.get("amount")),
        currency: form.get("currency") ?? "",
        captureMethod: form.get("capture_method") ?? "automatic",
        paymentMethod,
        metadata,
        clientSecret: `${piId}_secret_${randomBytes(8).toString("hex")}`,
        status: "requires_confirmation",
        amountReceived: 0,
        amountRefunded: 0,
        lastPaymentError: null,
        refunds: []
      }
      intents.set(pi.id, pi)
      lastCreated = pi
      if (form.get("confirm") !== "true") return { status: 200, body: intentObject(pi) }
      if (card === undefined)
        return stripeError(400, {
          type: "invalid_request_error",
          code: "resource_missing",
          message: `No such PaymentMethod: '${paymentMethod}'`
        })
      switch (card.outcome._tag) {
        case "approve":
          authorized(pi)
          return { status: 200, body: intentObject(pi) }
        case "authenticate":
          pi.status = "requires_action"
          return { status: 200, body: intentObject(pi) }
        case "decline":
          declineOf(pi, card.outcome)
          return stripeError(402, {
            type: "card_error",
            code: card.outcome.code,
            decline_code: card.outcome.declineCode,
            message: card.outcome.message,
            payment_intent: intentObject(pi)
          })
      }
    }
    if (method === "POST" && resource === "payment_intents" && objectId !== undefined) {
      const pi = intents.get(objectId)
      if (pi === undefined)
        return stripeError(404, {
          type: "invalid_request_error",
          code: "resource_missing",
          message: `No such payment_intent: '${objectId}'`
        })
      const unexpected = () =>
        stripeError(400, {
          type: "invalid_request_error",
          code: "payment_intent_unexpected_state",
          message: `This PaymentIntent's status is ${pi.status}.`
        })
      if (action === "capture") {
        if (pi.status !== "requires_capture") return unexpected()
        const amount = Number(form.get("amount_to_capture") ?? pi.amount)
        pi.status = "succeeded"
        pi.amountReceived = amount
        return { status: 200, body: intentObject(pi) }
      }
      if (action === "cancel") {
        if (pi.status === "succeeded" || pi.status === "canceled") return unexpected()
        pi.status = "canceled"
        return { status: 200, body: intentObject(pi) }
      }
    }
    if (method === "POST" && resource === "refunds" && objectId === undefined) {
      const pi = intents.get(form.get("payment_intent") ?? "")
      if (pi === undefined || pi.status !== "succeeded")
        return stripeError(400, {
          type: "invalid_request_error",
          code: "charge_not_refundable",
          message: "This payment cannot be refunded."
        })
      const amount = Number(form.get("amount") ?? pi.amountReceived - pi.amountRefunded)
      if (pi.amountRefunded >= pi.amountReceived)
        return stripeError(400, {
          type: "invalid_request_error",
          code: "charge_already_refunded",
          message: "Charge has already been refunded."
        })
      if (pi.amountRefunded + amount > pi.amountReceived)
        return stripeError(400, {
          type: "invalid_request_error",
          code: "amount_too_large",
          message: "Refund amount is greater than unrefunded amount on charge."
        })
      pi.amountRefunded += amount
      const metadata: Record<string, string> = {}
      for (const [k, v] of form) {
        const m = /^metadata\[(.+)\]$/.exec(k)
        if (m?.[1] !== undefined) metadata[m[1]] = v
      }
      const refund = {
        id: id("re"),
        object: "refund",
        amount,
        currency: pi.currency,
        payment_intent: pi.id,
        charge: `ch_${pi.id.slice(3)}`,
        metadata,
        reason: form.get("reason"),
        status: "succeeded"
      }
      pi.refunds.unshift(refund)
      return { status: 200, body: refund }
    }
    return stripeError(404, {
      type: "invalid_request_error",
      message: `Unrecognized request URL (${method}: ${path})`
    })
  }

  const respond = (res: ServerResponse, answer: Answer) => {
    res.writeHead(answer.status, { "content-type": "application/json", "request-id": id("req") })
    res.end(JSON.stringify(answer.body))
  }

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const raw = await readBody(req)
    const method = req.method ?? ""
    const path = req.url ?? ""
    const key =
      typeof req.headers["idempotency-key"] === "string" ? req.headers["idempotency-key"] : undefined
    calls.push({ method, path, idempotencyKey: key })
    if (req.headers.authorization !== `Bearer ${STRIPE_TEST_KEY}`)
      return respond(
        res,
        stripeError(401, { type: "invalid_request_error", message: "Invalid API Key provided" })
      )
    const failing = failures.findIndex((f) => `${method} ${path}`.startsWith(f.on))
    const failure = failing === -1 ? undefined : failures.splice(failing, 1)[0]
    if (failure !== undefined && !failure.afterWork)
      return respond(
        res,
        stripeError(failure.status, { type: "api_error", message: "An unknown error occurred" })
      )
    const known = key === undefined ? undefined : remembered.get(`${method} ${path} ${key}`)
    let answer: Answer
    let fresh = false
    if (known !== undefined) {
      answer =
        known.body === raw
          ? known.answer
          : stripeError(400, {
              type: "idempotency_error",
              message:
                "Keys for idempotent requests can only be used with the same parameters they were first used with."
            })
    } else {
      answer = work(method, path, new URLSearchParams(raw))
      fresh = true
      if (key !== undefined && method === "POST")
        remembered.set(`${method} ${path} ${key}`, { body: raw, answer })
    }
    const isConfirmation = fresh && method === "POST" && path === "/v1/payment_intents"
    if (isConfirmation && (eventFirst || eventRacing)) {
      const pi = lastCreated
      const sent = pi === undefined ? Promise.resolve() : sendEvent(eventOf(pi), intentObject(pi))
      if (eventFirst) await sent
      else sent.catch(() => undefined)
      eventFirst = false
      eventRacing = false
    }
    if (isConfirmation && delay > 0) {
      const ms = delay
      delay = 0
      await sleep(ms)
    }
    if (failure !== undefined)
      return respond(
        res,
        stripeError(failure.status, { type: "api_error", message: "An unknown error occurred" })
      )
    respond(res, answer)
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy())
  })
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => resolve())
  })
  const address = server.address()
  if (address === null || typeof address === "string") throw new Error("stripe fake: no TCP address")

  const fake: StripeFake = {
    url: `http://127.0.0.1:${address.port}`,
    calls,
    webhookReplies,
    intents,
    charges: () =>
      [...intents.values()].filter((pi) => pi.status === "succeeded" || pi.status === "requires_capture"),
    webhookUrl: undefined,
    failNext: ({ status = 500, afterWork = false, times = 1, on = "POST " }) => {
      for (let i = 0; i < times; i++) failures.push({ status, afterWork, on })
    },
    delayNext: (ms) => {
      delay = ms
    },
    eventWithAnswerNext: () => {
      eventRacing = true
    },
    eventBeforeAnswerNext: () => {
      eventFirst = true
    },
    authenticate: (piId, outcome) => {
      const pi = intents.get(piId)
      if (pi === undefined || pi.status !== "requires_action")
        throw new Error(`stripe fake: ${piId} is not waiting for authentication`)
      if (outcome === "approve") authorized(pi)
      else
        declineOf(pi, {
          code: "payment_intent_authentication_failure",
          declineCode: "",
          message: "The provided PaymentMethod has failed authentication."
        })
      return sendEvent(eventOf(pi), intentObject(pi))
    },
    sendEvent,
    lastEvent: () => last,
    resend: (event) => send(event.payload, event.signature),
    intentObject,
    chargeObject,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      })
  }
  return fake
}

export class StripePeer extends Context.Tag("test/StripePeer")<StripePeer, StripeFake>() {}

export const stripeFake = (): Effect.Effect<StripeFake, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => startStripeFake()),
    (fake) => Effect.promise(() => fake.close())
  )

export const StripePeerLive = Layer.scoped(StripePeer, stripeFake())

/** The payment settings of a service on the fake (`PAYMENT_PROCESSOR=stripe`). */
export const stripeSettings = (fake: StripeFake, recoveryAfterSeconds = 30): AppConfigShape["payments"] => ({
  ...makeAppConfig().payments,
  processor: "stripe",
  recoveryAfterSeconds,
  stripe: Option.some({
    secretKey: Redacted.make(STRIPE_TEST_KEY),
    webhookSecret: Option.some(Redacted.make(STRIPE_WEBHOOK_SECRET)),
    apiBase: Option.some(new URL(fake.url))
  })
})
