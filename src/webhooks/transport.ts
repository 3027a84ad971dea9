/**
 * One outgoing webhook HTTP attempt, and the SSRF guard around it.
 *
 * `attempt` POSTs a body to a subscriber's URL on `node:http`/`node:https` (not fetch: the guard
 * needs the socket's `lookup` hook) and always succeeds with an `AttemptResult` that says what
 * happened: a status, or why there was none, classified for the retry policy. It has one real-time
 * deadline over connecting, TLS, the headers and the body, reads at most `maxResponseBytes` of the
 * answer, and follows no redirect.
 *
 * Connections are kept alive and reused (a receiver taking hundreds of deliveries a second is not
 * made to accept a new TCP/TLS connection for each). Guarded and unguarded attempts have separate
 * pools, so a pooled socket was always opened under the same policy as the attempt that reuses it.
 * A pooled socket the peer closed while it sat idle fails before any answer: such an attempt is
 * sent once more on a fresh connection, inside the same deadline.
 *
 * The guard refuses non-public addresses (loopback, private, link-local, cloud metadata, …) unless
 * `allowPrivate` is set. It checks the addresses the socket actually connects to (an IP literal
 * directly; a name through the `lookup` hook), so a name that resolves to a public address at
 * registration and to 127.0.0.1 at delivery (DNS rebinding) is still refused. `urlProblem` is the
 * same policy up front, for registration: a friendly early answer, not the authoritative check.
 */
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from "node:dns"
import {
  type ClientRequest,
  Agent as HttpAgent,
  request as httpRequest,
  type IncomingMessage,
  type RequestOptions
} from "node:http"
import { Agent as HttpsAgent, request as httpsRequest } from "node:https"
import { isIP, type LookupFunction } from "node:net"
import { performance } from "node:perf_hooks"
import { Effect } from "effect"

export type AttemptErrorClass = "dns" | "connect" | "tls" | "timeout" | "http" | "redirect" | "blocked_ip"

export interface AttemptRequest {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  /** Raw JSON, sent as is (UTF-8). */
  readonly body: string
  /** One total deadline: connect + TLS + headers + the whole body read. */
  readonly timeoutMs: number
  /** At most this many bytes of the answer are read; then the socket is destroyed. */
  readonly maxResponseBytes: number
  /** Lifts the SSRF guard (local receivers, the test suite). */
  readonly allowPrivate: boolean
}

export interface AttemptResult {
  /** A 2xx status, with the body read (up to the cap) within the deadline. */
  readonly ok: boolean
  /** `null` when no response arrived. */
  readonly statusCode: number | null
  /** Real time (`performance.now()`), not the Effect Clock. */
  readonly durationMs: number
  /** `null` when ok. */
  readonly errorClass: AttemptErrorClass | null
  /** One line, human readable, never a secret (no header value, no URL path or query). */
  readonly error: string | null
  /** At most `maxResponseBytes` of the body as UTF-8 (lossy); `null` when there was none. */
  readonly responseExcerpt: string | null
  /** From `Retry-After` (delay-seconds or an HTTP-date) on any response; `null` if absent or invalid. */
  readonly retryAfterSeconds: number | null
  /** The `Location` of a 3xx, as sent. */
  readonly location: string | null
  /** Status 410. */
  readonly gone: boolean
}

const MAX_ERROR_CHARS = 300
export const MAX_URL_CHARS = 2048
/** `urlProblem` gives up on a slow resolver after this long (real time) and accepts the URL. */
export const URL_DNS_TIMEOUT_MS = 2_000
/** setTimeout's largest delay; a longer one would fire at once. */
const MAX_TIMER_MS = 2_147_483_647

const oneLine = (text: string): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > MAX_ERROR_CHARS ? `${flat.slice(0, MAX_ERROR_CHARS - 1)}…` : flat
}

// --- Addresses -------------------------------------------------------------------------------------

/** A dotted quad as an unsigned 32-bit number; strict (four decimal parts, no leading zeros). */
const parseIpv4 = (text: string): number | undefined => {
  const parts = text.split(".")
  if (parts.length !== 4 || !parts.every((p) => /^(0|[1-9]\d{0,2})$/.test(p))) return undefined
  const octets = parts.map(Number)
  if (octets.some((o) => o > 255)) return undefined
  return octets.reduce((acc, o) => acc * 256 + o, 0)
}

const formatIpv4 = (value: number): string =>
  [value >>> 24, (value >>> 16) & 0xff, (value >>> 8) & 0xff, value & 0xff].join(".")

interface Ipv4Range {
  readonly base: number
  readonly bits: number
  readonly what: string
}

const v4 = (text: string, bits: number, what: string): Ipv4Range => ({
  base: parseIpv4(text) ?? 0,
  bits,
  what
})

/** Most specific first: the first match names the class. */
const IPV4_BLOCKED: ReadonlyArray<Ipv4Range> = [
  v4("255.255.255.255", 32, "the broadcast address"),
  v4("169.254.169.254", 32, "the cloud metadata address"),
  v4("168.63.129.16", 32, "a cloud metadata address (Azure)"),
  v4("0.0.0.0", 8, 'a "this network" address'),
  v4("10.0.0.0", 8, "a private address"),
  v4("100.64.0.0", 10, "a shared (CGNAT) address"),
  v4("127.0.0.0", 8, "a loopback address"),
  v4("169.254.0.0", 16, "a link-local address"),
  v4("172.16.0.0", 12, "a private address"),
  v4("192.0.0.0", 24, "an IETF protocol assignment address"),
  v4("192.0.2.0", 24, "a documentation address"),
  v4("192.88.99.0", 24, "a 6to4 relay anycast address"),
  v4("192.168.0.0", 16, "a private address"),
  v4("198.18.0.0", 15, "a benchmarking address"),
  v4("198.51.100.0", 24, "a documentation address"),
  v4("203.0.113.0", 24, "a documentation address"),
  v4("224.0.0.0", 4, "a multicast address"),
  v4("240.0.0.0", 4, "a reserved address")
]

const inRange = (value: number, range: Ipv4Range): boolean => {
  const shift = 32 - range.bits
  return Math.floor(value / 2 ** shift) === Math.floor(range.base / 2 ** shift)
}

const ipv4Class = (value: number): string | undefined => IPV4_BLOCKED.find((r) => inRange(value, r))?.what

/**
 * The eight 16-bit groups of an IPv6 address: `::` expanded, a dotted quad in the last 32 bits
 * allowed, a `%zone` ignored.
 */
const parseIpv6 = (text: string): ReadonlyArray<number> | undefined => {
  const zone = text.indexOf("%")
  let rest = zone >= 0 ? text.slice(0, zone) : text
  let quad: ReadonlyArray<number> = []
  const lastColon = rest.lastIndexOf(":")
  if (lastColon < 0) return undefined
  if (rest.includes(".", lastColon)) {
    const embedded = parseIpv4(rest.slice(lastColon + 1))
    if (embedded === undefined) return undefined
    quad = [embedded >>> 16, embedded & 0xffff]
    rest = rest.slice(0, lastColon + 1)
    if (!rest.endsWith("::")) rest = rest.slice(0, -1)
  }
  const halves = rest.split("::")
  if (halves.length > 2) return undefined
  const groups = (part: string): Array<number> =>
    part === "" ? [] : part.split(":").map((g) => (/^[0-9a-f]{1,4}$/i.test(g) ? Number.parseInt(g, 16) : NaN))
  const head = groups(halves[0] ?? "")
  let all: Array<number>
  if (halves.length === 2) {
    const tail = groups(halves[1] ?? "")
    const missing = 8 - head.length - tail.length - quad.length
    if (missing < 1) return undefined
    all = [...head, ...new Array<number>(missing).fill(0), ...tail, ...quad]
  } else {
    all = [...head, ...quad]
  }
  return all.length === 8 && all.every((g) => !Number.isNaN(g)) ? all : undefined
}

/** The IPv4 address in the last 32 bits, for the forms that embed one (mapped, NAT64). */
const embeddedIpv4 = (groups: ReadonlyArray<number>): number => (groups[6] ?? 0) * 0x10000 + (groups[7] ?? 0)

const ipv6Class = (g: ReadonlyArray<number>): string | undefined => {
  const at = (i: number): number => g[i] ?? 0
  const zeroBefore = (n: number): boolean => g.slice(0, n).every((x) => x === 0)
  const viaIpv4 = (label: string): string | undefined => {
    const inner = embeddedIpv4(g)
    const what = ipv4Class(inner)
    return what === undefined ? undefined : `${what} (${label} ${formatIpv4(inner)})`
  }
  if (zeroBefore(8)) return "the unspecified address"
  if (zeroBefore(7) && at(7) === 1) return "a loopback address"
  // ::ffff:a.b.c.d reaches a.b.c.d: only the IPv4 address counts.
  if (zeroBefore(5) && at(5) === 0xffff) return viaIpv4("IPv4-mapped")
  if (zeroBefore(6)) return "an IPv4-compatible address (deprecated)"
  // The well-known NAT64 prefix reaches the embedded IPv4 address through the translator.
  if (at(0) === 0x64 && at(1) === 0xff9b && at(2) === 0 && at(3) === 0 && at(4) === 0 && at(5) === 0) {
    return viaIpv4("NAT64 of")
  }
  if (at(0) === 0x64 && at(1) === 0xff9b && at(2) === 1) return "a local-use NAT64 address"
  if (at(0) === 0x100 && at(1) === 0 && at(2) === 0 && at(3) === 0) return "a discard-only address"
  if (at(0) === 0x2001 && at(1) === 0xdb8) return "a documentation address"
  if (at(0) === 0x3fff && at(1) < 0x1000) return "a documentation address"
  if (at(0) === 0x2001 && at(1) === 0) return "a Teredo address"
  if (at(0) === 0x2001 && at(1) < 0x200) return "an IETF special-purpose address"
  // 6to4 embeds an IPv4 address the relay would reach; simplest and safest is to refuse it all.
  if (at(0) === 0x2002) return "a 6to4 address"
  if ((at(0) & 0xfe00) === 0xfc00) return "a unique local (private) address"
  if ((at(0) & 0xffc0) === 0xfe80) return "a link-local address"
  if ((at(0) & 0xffc0) === 0xfec0) return "a site-local address"
  if ((at(0) & 0xff00) === 0xff00) return "a multicast address"
  // Only 2000::/3 is allocated as global unicast; anything else is reserved.
  if ((at(0) & 0xe000) !== 0x2000) return "a reserved address (not global unicast)"
  return undefined
}

const stripBrackets = (ip: string): string => (ip.startsWith("[") && ip.endsWith("]") ? ip.slice(1, -1) : ip)

/** The class of a non-public address ("a loopback address"), or undefined for a public unicast one. */
const addressClass = (ip: string): string | undefined => {
  const text = stripBrackets(ip.trim())
  if (text.includes(":")) {
    const groups = parseIpv6(text)
    return groups === undefined ? "not an IP address" : ipv6Class(groups)
  }
  const value = parseIpv4(text)
  return value === undefined ? "not an IP address" : ipv4Class(value)
}

/** Why an IP address (v4 or v6 text) may not be called, or undefined when it is public unicast. */
export const addressProblem = (ip: string): string | undefined => {
  const what = addressClass(ip)
  return what === undefined ? undefined : `${stripBrackets(ip.trim())} is ${what}`
}

// --- URLs ------------------------------------------------------------------------------------------

/** Names the setting a newcomer with a receiver on their own machine is looking for. */
const publicMessage = (host: string, what: string): string =>
  `url points to ${host}, ${what}: webhook targets must be public (for a local receiver in development, set WEBHOOK_ALLOW_PRIVATE=true)`

/** Names that are local by definition (RFC 6761, RFC 6762, the cloud providers' `.internal`). */
const isLocalName = (name: string): boolean =>
  name === "localhost" ||
  name.endsWith(".localhost") ||
  name.endsWith(".internal") ||
  name === "internal" ||
  name.endsWith(".local")

/** The host of a parsed URL without IPv6 brackets (what sockets and `isIP` take). */
const hostOf = (url: URL): string => stripBrackets(url.hostname)

/** The checks that need no DNS: a URL we are willing to POST to at all. */
const shapeProblem = (raw: string): { readonly url: URL } | { readonly problem: string } => {
  if (raw.length > MAX_URL_CHARS) return { problem: `url must be at most ${MAX_URL_CHARS} characters` }
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return { problem: "url is not a valid absolute URL" }
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return { problem: "url must use http or https" }
  if (url.username !== "" || url.password !== "") {
    return { problem: "url must not contain a username or password" }
  }
  if (url.hostname === "") return { problem: "url must have a host" }
  return { url }
}

/** Every address of a name; empty when resolution fails or takes longer than `URL_DNS_TIMEOUT_MS`. */
const resolveAll = (name: string): Effect.Effect<ReadonlyArray<LookupAddress>> =>
  Effect.async<ReadonlyArray<LookupAddress>>((resume) => {
    let done = false
    const finish = (addresses: ReadonlyArray<LookupAddress>) => {
      if (done) return
      done = true
      clearTimeout(timer)
      resume(Effect.succeed(addresses))
    }
    // Real time on purpose: registration must not hang on a dead resolver, whatever the Clock says.
    const timer = setTimeout(() => finish([]), URL_DNS_TIMEOUT_MS)
    dnsLookup(name, { all: true }, (error, addresses) => finish(error ? [] : addresses))
    return Effect.sync(() => {
      done = true
      clearTimeout(timer)
    })
  })

/**
 * Why a webhook URL is refused, as a one-line message for a 400 body, or undefined. Without
 * `allowPrivate`, the host must be public: an IP literal is checked as is, local names are refused
 * without DNS, other names are resolved and every address must be public. A failed resolution
 * (offline, NXDOMAIN) is accepted: the check at connect time is the authoritative one, and
 * registration must not depend on the resolver's mood.
 */
export const urlProblem = (
  url: string,
  options: { readonly allowPrivate: boolean }
): Effect.Effect<string | undefined> =>
  Effect.suspend(() => {
    const shape = shapeProblem(url)
    if ("problem" in shape) return Effect.succeed(shape.problem)
    if (options.allowPrivate) return Effect.succeed(undefined)
    const host = hostOf(shape.url)
    if (isIP(host) !== 0) {
      const what = addressClass(host)
      return Effect.succeed(what === undefined ? undefined : publicMessage(host, what))
    }
    // A trailing dot (`localhost.`) is the same name, fully qualified.
    const name = host.toLowerCase().replace(/\.$/, "")
    if (isLocalName(name)) return Effect.succeed(publicMessage(name, "a local name"))
    return Effect.map(resolveAll(name), (addresses) => {
      for (const { address } of addresses) {
        const what = addressClass(address)
        if (what !== undefined) return publicMessage(`${name} (${address})`, what)
      }
      return undefined
    })
  })

// --- The attempt -----------------------------------------------------------------------------------

/**
 * The socket's `lookup` with the guard: resolves every address of the name and refuses the
 * connection (code `EBLOCKED`) if any is not public, so the addresses checked are the very ones
 * connected to. Answers in both forms Node asks for: `all: true` (autoSelectFamily, the default on
 * Node 20) wants the array, otherwise a single address.
 */
const guardedLookup: LookupFunction = (hostname, options: LookupOptions, callback) => {
  dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
    if (error) return callback(error, [])
    for (const { address } of addresses) {
      const what = addressClass(address)
      if (what !== undefined) {
        const blocked: NodeJS.ErrnoException = new Error(
          `blocked: ${hostname} resolves to ${address}, ${what}`
        )
        blocked.code = "EBLOCKED"
        return callback(blocked, [])
      }
    }
    const first = addresses[0]
    if (first === undefined) {
      const none: NodeJS.ErrnoException = new Error(`getaddrinfo ENOTFOUND ${hostname}`)
      none.code = "ENOTFOUND"
      return callback(none, [])
    }
    if (options.all === true) return callback(null, addresses)
    return callback(null, first.address, first.family)
  })
}

/** `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3), relative to `nowMs`. */
export const parseRetryAfter = (value: string | undefined, nowMs: number): number | null => {
  if (value === undefined) return null
  const trimmed = value.trim()
  if (/^\d+$/.test(trimmed)) {
    const seconds = Number(trimmed)
    return Number.isSafeInteger(seconds) ? seconds : null
  }
  // The three HTTP-date forms all start with a day name; Date.parse alone accepts too much ("1 2").
  if (!/^(mon|tue|wed|thu|fri|sat|sun)[a-z]*,? /i.test(trimmed)) return null
  const at = Date.parse(trimmed)
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - nowMs) / 1000))
}

const TLS_CODES = new Set([
  "EPROTO",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "HOSTNAME_MISMATCH",
  "INVALID_PURPOSE",
  "INVALID_CA"
])

const isTlsCode = (code: string): boolean =>
  TLS_CODES.has(code) ||
  code.startsWith("ERR_TLS_") ||
  code.startsWith("ERR_SSL_") ||
  code.startsWith("ERR_OSSL_") ||
  code.startsWith("CERT_") ||
  code.startsWith("UNABLE_TO_")

const DNS_CODES = new Set(["ENOTFOUND", "EAI_AGAIN", "EAI_FAIL", "EAI_NONAME", "EAI_NODATA", "ENODATA"])

const CONNECT_WORDS: Readonly<Record<string, string>> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset",
  ECONNABORTED: "connection aborted",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  EHOSTDOWN: "host down",
  ENETDOWN: "network down",
  ETIMEDOUT: "connect timed out",
  EPIPE: "connection closed",
  EADDRNOTAVAIL: "address not available"
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

const stringField = (u: unknown, key: string): string | undefined => {
  const value = isRecord(u) ? u[key] : undefined
  return typeof value === "string" ? value : undefined
}

const endpoint = (address: string, port: unknown): string => {
  const host = address.includes(":") ? `[${address}]` : address
  return typeof port === "number" ? `${host}:${port}` : host
}

/**
 * `host:port` of the peers a socket error names; autoSelectFamily reports an AggregateError with
 * one error per address tried.
 */
const peersOf = (error: unknown, fallback: string): string => {
  const errors = isRecord(error) && Array.isArray(error.errors) ? error.errors : [error]
  const peers = errors.flatMap((e: unknown) => {
    const address = stringField(e, "address")
    return address === undefined ? [] : [endpoint(address, isRecord(e) ? e.port : undefined)]
  })
  return peers.length === 0 ? fallback : [...new Set(peers)].join(", ")
}

/** OpenSSL's reason ("wrong version number") out of its long error string, else the message. */
const tlsReason = (message: string): string => /SSL routines:[^:]*:([^:]+)/.exec(message)?.[1] ?? message

interface Failure {
  readonly errorClass: AttemptErrorClass
  readonly error: string
}

/** A socket, DNS or TLS error as a class and a line. Node's messages here hold no header value. */
const classifyError = (error: unknown, target: { host: string; port: string }): Failure => {
  const first = isRecord(error) && Array.isArray(error.errors) ? error.errors[0] : error
  const code = stringField(error, "code") ?? stringField(first, "code") ?? "UNKNOWN"
  const message = error instanceof Error ? error.message : String(error)
  const fallback = endpoint(target.host, Number(target.port))
  if (code === "EBLOCKED") return { errorClass: "blocked_ip", error: oneLine(message) }
  if (DNS_CODES.has(code))
    return { errorClass: "dns", error: `DNS lookup failed for ${target.host} (${code})` }
  if (isTlsCode(code))
    return { errorClass: "tls", error: oneLine(`TLS failed (${code}): ${tlsReason(message)}`) }
  const words = CONNECT_WORDS[code]
  if (words !== undefined) return { errorClass: "connect", error: `${words} (${peersOf(error, fallback)})` }
  return { errorClass: "connect", error: oneLine(`connection failed (${code}): ${message}`) }
}

/** scheme://host/path of a Location, without credentials, query or fragment (it may hold a token). */
const describeLocation = (location: string, base: URL): string => {
  try {
    const url = new URL(location, base)
    return oneLine(`${url.protocol}//${url.host}${url.pathname}`)
  } catch {
    return "an invalid URL"
  }
}

/** What the response (if any) and the end of the attempt say, before it becomes an `AttemptResult`. */
interface Outcome {
  readonly statusCode: number | null
  readonly failure: Failure | null
  readonly body: Buffer | null
  readonly retryAfterSeconds: number | null
  readonly location: string | null
}

const toResult = (outcome: Outcome, durationMs: number): AttemptResult => ({
  ok: outcome.failure === null,
  statusCode: outcome.statusCode,
  durationMs,
  errorClass: outcome.failure?.errorClass ?? null,
  error: outcome.failure?.error ?? null,
  responseExcerpt: outcome.body === null || outcome.body.length === 0 ? null : outcome.body.toString("utf8"),
  retryAfterSeconds: outcome.retryAfterSeconds,
  location: outcome.location,
  gone: outcome.statusCode === 410
})

const noResponse = (failure: Failure): Outcome => ({
  statusCode: null,
  failure,
  body: null,
  retryAfterSeconds: null,
  location: null
})

/** The verdict on a complete (or capped) response. */
const statusFailure = (status: number, location: string | null, base: URL): Failure | null => {
  if (status >= 200 && status < 300) return null
  if (status >= 300 && status < 400) {
    const where = location === null ? "without a Location" : `to ${describeLocation(location, base)}`
    return { errorClass: "redirect", error: `redirect (${status}) ${where} not followed` }
  }
  return { errorClass: "http", error: `HTTP ${status}` }
}

const withoutContentLength = (headers: Readonly<Record<string, string>>): Record<string, string> =>
  Object.fromEntries(Object.entries(headers).filter(([name]) => name.toLowerCase() !== "content-length"))

/** Idle pooled sockets are dropped after this long (servers commonly close theirs after 5 s). */
const IDLE_SOCKET_MS = 4_000
const pool = { keepAlive: true, timeout: IDLE_SOCKET_MS, scheduling: "lifo" } as const
const agents = {
  guarded: { "http:": new HttpAgent(pool), "https:": new HttpsAgent(pool) },
  open: { "http:": new HttpAgent(pool), "https:": new HttpsAgent(pool) }
}

/** A reused socket that the peer had closed: nothing was answered, so sending again is safe. */
const staleSocket = (error: unknown) => {
  const code = stringField(error, "code")
  return code === "ECONNRESET" || code === "EPIPE" || code === "ECONNABORTED"
}

/**
 * One POST of `request.body` to `request.url`. Never fails: every outcome is an `AttemptResult`.
 * Interrupting the fiber aborts the request and destroys the socket.
 */
export const attempt = (request: AttemptRequest): Effect.Effect<AttemptResult> =>
  Effect.async<AttemptResult>((resume) => {
    const started = performance.now()
    let settled = false
    let timer: ReturnType<typeof setTimeout> | undefined
    let req: ClientRequest | undefined
    let response: IncomingMessage | undefined

    const settle = (outcome: Outcome) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      // Stops whatever is still in flight: an unread body beyond the cap, a hung peer. A response
      // read to its end leaves the socket to the pool.
      if (response?.complete !== true) req?.destroy()
      resume(Effect.succeed(toResult(outcome, performance.now() - started)))
    }

    const shape = shapeProblem(request.url)
    if ("problem" in shape) {
      // Registration refuses such URLs; reaching here is a caller's bug, reported, not thrown.
      settle(noResponse({ errorClass: "connect", error: `not sent: ${shape.problem}` }))
      return
    }
    const url = shape.url
    const host = hostOf(url)
    const target = { host, port: url.port === "" ? (url.protocol === "https:" ? "443" : "80") : url.port }
    // Node does not call `lookup` for an IP literal: the guard checks it here.
    if (!request.allowPrivate && isIP(host) !== 0) {
      const problem = addressProblem(host)
      if (problem !== undefined) {
        settle(noResponse({ errorClass: "blocked_ip", error: `blocked: ${problem}` }))
        return
      }
    }

    const options: RequestOptions = {
      method: "POST",
      protocol: url.protocol,
      hostname: host,
      port: target.port,
      path: `${url.pathname}${url.search}`,
      headers: {
        ...withoutContentLength(request.headers),
        "content-length": String(Buffer.byteLength(request.body, "utf8"))
      },
      ...(request.allowPrivate ? {} : { lookup: guardedLookup })
    }
    const agent = (request.allowPrivate ? agents.open : agents.guarded)[
      url.protocol === "https:" ? "https:" : "http:"
    ]

    const timeoutMs = Math.min(Math.max(1, Math.floor(request.timeoutMs)), MAX_TIMER_MS)
    const cap = Math.max(0, Math.floor(request.maxResponseBytes))
    let retryAfterSeconds: number | null = null
    let location: string | null = null
    const chunks: Array<Buffer> = []
    let size = 0

    const afterResponse = (failure: Failure | null): Outcome => ({
      statusCode: response?.statusCode ?? null,
      failure,
      body: Buffer.concat(chunks),
      retryAfterSeconds,
      location
    })
    const complete = () => {
      const status = response?.statusCode ?? 0
      settle(afterResponse(statusFailure(status, location, url)))
    }

    // Real time, not the Effect Clock: the deadline must hold under a TestClock too.
    timer = setTimeout(() => {
      const detail = response === undefined ? "" : ` (HTTP ${response.statusCode}, response body incomplete)`
      const failure: Failure = { errorClass: "timeout", error: `timed out after ${timeoutMs} ms${detail}` }
      settle(response === undefined ? noResponse(failure) : afterResponse(failure))
    }, timeoutMs)

    const send = (reuse: boolean) => {
      try {
        req = (url.protocol === "https:" ? httpsRequest : httpRequest)({
          ...options,
          agent: reuse ? agent : false
        })
      } catch (error) {
        // Invalid header names or values throw here; the message may quote a value, so only the code.
        const code = stringField(error, "code") ?? "invalid request"
        settle(noResponse({ errorClass: "connect", error: `not sent (${code})` }))
        return
      }
      const sent = req
      sent.on("error", (error) => {
        if (settled || sent !== req) return
        if (response === undefined && reuse && sent.reusedSocket && staleSocket(error)) return send(false)
        if (response === undefined) return settle(noResponse(classifyError(error, target)))
        settle(afterResponse(classifyError(error, target)))
      })
      sent.on("response", (res) => {
        response = res
        retryAfterSeconds = parseRetryAfter(res.headers["retry-after"], Date.now())
        const status = res.statusCode ?? 0
        location = status >= 300 && status < 400 ? (res.headers.location ?? null) : null
        if (cap === 0) return complete()
        res.on("data", (chunk: Buffer) => {
          if (settled) return
          const room = cap - size
          const kept = chunk.length > room ? chunk.subarray(0, room) : chunk
          chunks.push(kept)
          size += kept.length
          // Enough read: the rest is not waited for (settle destroys the socket).
          if (size >= cap && !res.complete) complete()
        })
        res.on("end", complete)
        res.on("error", (error) => settle(afterResponse(classifyError(error, target))))
        res.on("close", () => {
          if (!res.complete) {
            settle(
              afterResponse({
                errorClass: "connect",
                error: `connection closed before the response body was complete (${endpoint(host, Number(target.port))})`
              })
            )
          }
        })
      })
      sent.end(request.body, "utf8")
    }
    send(true)

    return Effect.sync(() => {
      settled = true
      clearTimeout(timer)
      req?.destroy()
    })
  })
