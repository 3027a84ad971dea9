/**
 * Local fakes of the SMS and push provider APIs on `node:http` (127.0.0.1, random port): a
 * Twilio-Messages-shaped one and an FCM-HTTP-v1-shaped one. Both check credentials the way the real
 * ones do, record every request, and can be scripted to answer a given status and body, or to hang,
 * for the next N requests.
 */
import { randomBytes } from "node:crypto"
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http"
import { createServer as createNetServer } from "node:net"
import { Effect, type Scope } from "effect"

export interface RecordedRequest {
  readonly method: string
  /** Path and query, as sent. */
  readonly path: string
  readonly headers: IncomingHttpHeaders
  readonly rawBody: string
  /** Form fields (Twilio) or the parsed JSON (FCM); `undefined` when the body did not parse. */
  readonly body: unknown
}

export type ScriptedAnswer =
  | {
      readonly status: number
      /** A string is sent as is; anything else as JSON. */
      readonly body?: unknown
      readonly headers?: Readonly<Record<string, string>> | undefined
    }
  | { readonly hang: true }

export interface FakeProvider {
  /** Base URL, e.g. `http://127.0.0.1:51234` (what SMS_PROVIDER_URL / PUSH_PROVIDER_URL hold). */
  readonly url: string
  readonly requests: Array<RecordedRequest>
  /** The next `times` requests (default 1) get this answer instead of the normal one. */
  readonly answerNext: (answer: ScriptedAnswer, times?: number) => void
  /** The next `times` requests (default 1) get no answer at all (until `close`). */
  readonly hangNext: (times?: number) => void
  /** Resolves once `count` requests were recorded; rejects after `timeoutMs` (default 2 s). */
  readonly waitFor: (count: number, timeoutMs?: number) => Promise<Array<RecordedRequest>>
  /** Forgets the recorded requests and any scripted answers not used yet. */
  readonly reset: () => void
  readonly close: () => Promise<void>
}

interface Answer {
  readonly status: number
  readonly body: unknown
  readonly headers?: Readonly<Record<string, string>> | undefined
}

type Handler = (request: RecordedRequest) => Answer

const readBody = (req: IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    req.on("error", reject)
  })

const parseBody = (contentType: string | undefined, raw: string): unknown => {
  if (contentType?.startsWith("application/x-www-form-urlencoded")) {
    return Object.fromEntries(new URLSearchParams(raw))
  }
  try {
    return JSON.parse(raw)
  } catch {
    return undefined
  }
}

const startFake = async (parseFor: "form" | "json", handle: Handler): Promise<FakeProvider> => {
  const requests: Array<RecordedRequest> = []
  const scripted: Array<{ answer: ScriptedAnswer; left: number }> = []
  const waiters = new Set<() => void>()

  const respond = (res: ServerResponse, answer: Answer) => {
    const text = typeof answer.body === "string" ? answer.body : JSON.stringify(answer.body)
    res.writeHead(answer.status, {
      "content-type": typeof answer.body === "string" ? "text/plain; charset=utf-8" : "application/json",
      ...answer.headers
    })
    res.end(text)
  }

  const server = createServer((req, res) => {
    readBody(req).then(
      (rawBody) => {
        const contentType = req.headers["content-type"]
        const body =
          parseFor === "form" || contentType?.startsWith("application/json")
            ? parseBody(contentType, rawBody)
            : undefined
        const recorded: RecordedRequest = {
          method: req.method ?? "",
          path: req.url ?? "",
          headers: req.headers,
          rawBody,
          body
        }
        requests.push(recorded)
        for (const wake of waiters) wake()
        const next = scripted[0]
        if (next !== undefined) {
          next.left -= 1
          if (next.left <= 0) scripted.shift()
          if ("hang" in next.answer) return // never answered; `close` drops the socket
          return respond(res, {
            status: next.answer.status,
            body: next.answer.body ?? "",
            headers: next.answer.headers
          })
        }
        respond(res, handle(recorded))
      },
      () => res.destroy()
    )
  })

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => resolve())
  })
  const address = server.address()
  if (address === null || typeof address === "string") throw new Error("fake provider: no TCP address")

  return {
    url: `http://127.0.0.1:${address.port}`,
    requests,
    answerNext: (answer, times = 1) => {
      scripted.push({ answer, left: times })
    },
    hangNext: (times = 1) => {
      scripted.push({ answer: { hang: true }, left: times })
    },
    waitFor: (count, timeoutMs = 2000) =>
      new Promise((resolve, reject) => {
        const check = () => {
          if (requests.length < count) return
          clearTimeout(timer)
          waiters.delete(check)
          resolve(requests)
        }
        const timer = setTimeout(() => {
          waiters.delete(check)
          reject(new Error(`fake provider: ${requests.length} of ${count} requests after ${timeoutMs} ms`))
        }, timeoutMs)
        waiters.add(check)
        check()
      }),
    reset: () => {
      requests.length = 0
      scripted.length = 0
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      })
  }
}

const basicAuth = (header: string | undefined): { user: string; pass: string } | undefined => {
  const match = /^Basic\s+(\S+)$/i.exec(header ?? "")
  if (match?.[1] === undefined) return undefined
  const decoded = Buffer.from(match[1], "base64").toString("utf8")
  const colon = decoded.indexOf(":")
  return colon === -1 ? undefined : { user: decoded.slice(0, colon), pass: decoded.slice(colon + 1) }
}

// --- Twilio ------------------------------------------------------------------------------------------

export interface TwilioFakeOptions {
  readonly accountSid?: string | undefined
  readonly authToken?: string | undefined
}

export const TWILIO_TEST_SID = "AC00000000000000000000000000000001"
export const TWILIO_TEST_TOKEN = "twilio-test-auth-token-0123456789"

/** Twilio's error body (`{code, message, more_info, status}`). */
export const twilioError = (status: number, code: number, message: string) => ({
  code,
  message,
  more_info: `https://www.twilio.com/docs/errors/${code}`,
  status
})

const isStringRecord = (u: unknown): u is Record<string, string> =>
  typeof u === "object" && u !== null && Object.values(u).every((v) => typeof v === "string")

export const startTwilioFake = (options: TwilioFakeOptions = {}): Promise<FakeProvider> => {
  const sid = options.accountSid ?? TWILIO_TEST_SID
  const token = options.authToken ?? TWILIO_TEST_TOKEN
  const path = `/2010-04-01/Accounts/${sid}/Messages.json`
  return startFake("form", (request) => {
    if (request.method !== "POST" || request.path !== path) {
      return {
        status: 404,
        body: twilioError(404, 20404, `The requested resource ${request.path} was not found`)
      }
    }
    const credentials = basicAuth(request.headers.authorization)
    if (credentials?.user !== sid || credentials.pass !== token) {
      return { status: 401, body: twilioError(401, 20003, "Authenticate") }
    }
    const form = isStringRecord(request.body) ? request.body : {}
    if (form.To === undefined) {
      return { status: 400, body: twilioError(400, 21604, "A 'To' phone number is required.") }
    }
    if (form.From === undefined && form.MessagingServiceSid === undefined) {
      return { status: 400, body: twilioError(400, 21603, "A 'From' phone number is required.") }
    }
    const messageSid = `SM${randomBytes(16).toString("hex")}`
    const now = new Date().toUTCString()
    return {
      status: 201,
      body: {
        sid: messageSid,
        account_sid: sid,
        status: "queued",
        to: form.To,
        from: form.From ?? null,
        messaging_service_sid: form.MessagingServiceSid ?? null,
        body: form.Body ?? "",
        num_segments: "1",
        direction: "outbound-api",
        error_code: null,
        error_message: null,
        date_created: now,
        date_updated: now,
        api_version: "2010-04-01",
        uri: `/2010-04-01/Accounts/${sid}/Messages/${messageSid}.json`
      }
    }
  })
}

// --- FCM ---------------------------------------------------------------------------------------------

export interface FcmFakeOptions {
  readonly projectId?: string | undefined
  readonly accessToken?: string | undefined
}

export const FCM_TEST_PROJECT = "test-project"
export const FCM_TEST_TOKEN = "ya29.fcm-test-access-token-0123456789"

/** Google's error body; `errorCode` goes into `details` as FCM's `FcmError` does. */
export const fcmError = (code: number, status: string, message: string, errorCode?: string) => ({
  error: {
    code,
    message,
    status,
    ...(errorCode === undefined
      ? {}
      : { details: [{ "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", errorCode }] })
  }
})

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

export const startFcmFake = (options: FcmFakeOptions = {}): Promise<FakeProvider> => {
  const projectId = options.projectId ?? FCM_TEST_PROJECT
  const token = options.accessToken ?? FCM_TEST_TOKEN
  const path = `/v1/projects/${projectId}/messages:send`
  let counter = 0
  return startFake("json", (request) => {
    if (request.method !== "POST" || request.path !== path) {
      return { status: 404, body: fcmError(404, "NOT_FOUND", `Not found: ${request.path}`) }
    }
    if (request.headers.authorization !== `Bearer ${token}`) {
      return {
        status: 401,
        body: fcmError(
          401,
          "UNAUTHENTICATED",
          "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."
        )
      }
    }
    const message = isRecord(request.body) ? request.body.message : undefined
    if (!isRecord(message) || typeof message.token !== "string") {
      return {
        status: 400,
        body: fcmError(400, "INVALID_ARGUMENT", "Request contains an invalid argument.", "INVALID_ARGUMENT")
      }
    }
    if (message.data !== undefined && !isStringRecord(message.data)) {
      return {
        status: 400,
        body: fcmError(
          400,
          "INVALID_ARGUMENT",
          "Invalid value at 'message.data' (TYPE_STRING)",
          "INVALID_ARGUMENT"
        )
      }
    }
    counter += 1
    return { status: 200, body: { name: `projects/${projectId}/messages/${counter}` } }
  })
}

/** Both fakes as scoped resources: closed with the scope. */
export const twilioFake = (
  options: TwilioFakeOptions = {}
): Effect.Effect<FakeProvider, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => startTwilioFake(options)),
    (fake) => Effect.promise(() => fake.close())
  )

export const fcmFake = (options: FcmFakeOptions = {}): Effect.Effect<FakeProvider, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => startFcmFake(options)),
    (fake) => Effect.promise(() => fake.close())
  )

/** A port nothing listens on (bound, read, released), for "connection refused" tests. */
export const unusedPort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const probe = createNetServer()
    probe.once("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address()
      const port = address !== null && typeof address !== "string" ? address.port : 0
      probe.close(() => resolve(port))
    })
  })
