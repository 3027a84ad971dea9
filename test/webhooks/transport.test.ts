/**
 * One webhook attempt against a real local receiver over real sockets: what reaches the receiver,
 * how each outcome is classified (http, redirect, timeout, connect, tls, blocked_ip), the real-time
 * deadline (under the TestClock of `it.scoped`), the response cap, interruption, and the SSRF guard
 * (`addressProblem`, `urlProblem`, and the connect-time check).
 */

import {
  createServer as createHttpServer,
  type Server as HttpServer,
  type IncomingMessage,
  type ServerResponse
} from "node:http"
import {
  createServer,
  getDefaultAutoSelectFamily,
  type Server,
  type Socket,
  setDefaultAutoSelectFamily
} from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import {
  type AttemptRequest,
  type AttemptResult,
  addressProblem,
  attempt,
  parseRetryAfter,
  urlProblem
} from "../../src/webhooks/transport.js"
import { unusedPort } from "../support/providers.js"
import { Behaviour, makeReceiver } from "../support/receiver.js"

const BODY = '{"id":"evt_1","type":"order.confirmed","data":{"customer":"Zoë ✓ ご注文"}}'

const request = (url: string, overrides: Partial<AttemptRequest> = {}): AttemptRequest => ({
  url,
  headers: { "content-type": "application/json", "webhook-id": "msg_1", "webhook-signature": "v1,abc=" },
  body: BODY,
  timeoutMs: 2_000,
  maxResponseBytes: 16_384,
  allowPrivate: true,
  ...overrides
})

/** Real time, whatever the (test) Clock says. */
const realSleep = (ms: number) =>
  Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

/** Listens on a loopback port for the test's scope; at its end, `sockets` are destroyed. */
const listening = (server: Server | HttpServer, sockets: ReadonlySet<Socket>) =>
  Effect.gen(function* () {
    yield* Effect.acquireRelease(
      Effect.promise(() => new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))),
      () =>
        Effect.promise(
          () =>
            new Promise<void>((resolve) => {
              for (const socket of sockets) socket.destroy()
              server.close(() => resolve())
            })
        )
    )
    const address = server.address()
    return address !== null && typeof address !== "string" ? address.port : 0
  })

const expectFailure = (result: AttemptResult, errorClass: AttemptResult["errorClass"]) => {
  expect(result.ok).toBe(false)
  expect(result.errorClass).toBe(errorClass)
  expect(result.error).toEqual(expect.any(String))
  expect(result.error).not.toMatch(/\n/)
}

describe("attempt", () => {
  it.scoped("2xx: ok, status and excerpt; the receiver gets a POST with the exact body and headers", () =>
    Effect.gen(function* () {
      const receiver = yield* makeReceiver
      receiver.on("/hook", Behaviour.status(202, { "content-type": "text/plain" }, "accepted ✓"))
      const result = yield* attempt(
        request(receiver.url("/hook?x=1"), {
          headers: { "content-type": "application/json", "X-Custom": "yes", "Content-Length": "999" }
        })
      )
      expect(result).toEqual({
        ok: true,
        statusCode: 202,
        durationMs: expect.any(Number),
        errorClass: null,
        error: null,
        responseExcerpt: "accepted ✓",
        retryAfterSeconds: null,
        location: null,
        gone: false
      })
      expect(result.durationMs).toBeGreaterThan(0)
      const [received, ...more] = receiver.requests()
      expect(more).toEqual([])
      expect(received?.method).toBe("POST")
      expect(received?.path).toBe("/hook?x=1")
      expect(received?.body).toBe(BODY)
      expect(received?.headers["content-type"]).toBe("application/json")
      expect(received?.headers["x-custom"]).toBe("yes")
      // Ours, computed from the UTF-8 bytes, not the caller's.
      expect(received?.headers["content-length"]).toBe(String(Buffer.byteLength(BODY)))
    })
  )

  it.scoped("default answer: 200 with the receiver's JSON", () =>
    Effect.gen(function* () {
      const receiver = yield* makeReceiver
      const result = yield* attempt(request(receiver.url()))
      expect(result.ok).toBe(true)
      expect(result.statusCode).toBe(200)
      expect(result.responseExcerpt).toBe('{"ok":true}')
    })
  )

  it.scoped("non-2xx: errorClass http, the excerpt kept; 410 is gone", () =>
    Effect.gen(function* () {
      const receiver = yield* makeReceiver
      receiver.on("/500", Behaviour.status(500, {}, "boom"))
      receiver.on("/404", Behaviour.status(404, {}, "no such hook"))
      receiver.on("/410", Behaviour.status(410, {}, "gone for good"))
      const r500 = yield* attempt(request(receiver.url("/500")))
      expectFailure(r500, "http")
      expect(r500).toMatchObject({ statusCode: 500, error: "HTTP 500", responseExcerpt: "boom", gone: false })
      const r404 = yield* attempt(request(receiver.url("/404")))
      expectFailure(r404, "http")
      expect(r404).toMatchObject({ statusCode: 404, responseExcerpt: "no such hook", gone: false })
      const r410 = yield* attempt(request(receiver.url("/410")))
      expectFailure(r410, "http")
      expect(r410).toMatchObject({ statusCode: 410, gone: true })
    })
  )

  it.scoped("Retry-After: delay-seconds and HTTP-date, on any response; invalid is null", () =>
    Effect.gen(function* () {
      const receiver = yield* makeReceiver
      receiver.on("/429", Behaviour.status(429, { "retry-after": "120" }))
      const inNinety = new Date(Date.now() + 90_000).toUTCString()
      receiver.on("/503", Behaviour.status(503, { "retry-after": inNinety }))
      receiver.on("/bad", Behaviour.status(503, { "retry-after": "soon" }))
      receiver.on("/ok", Behaviour.status(200, { "retry-after": "5" }))
      const r429 = yield* attempt(request(receiver.url("/429")))
      expectFailure(r429, "http")
      expect(r429.retryAfterSeconds).toBe(120)
      expect(r429.responseExcerpt).toBeNull()
      const r503 = yield* attempt(request(receiver.url("/503")))
      expect(r503.retryAfterSeconds).toBeGreaterThanOrEqual(85)
      expect(r503.retryAfterSeconds).toBeLessThanOrEqual(90)
      expect((yield* attempt(request(receiver.url("/bad")))).retryAfterSeconds).toBeNull()
      expect((yield* attempt(request(receiver.url("/ok")))).retryAfterSeconds).toBe(5)
    })
  )

  it("parseRetryAfter", () => {
    const now = Date.parse("2025-01-01T00:00:00Z")
    expect(parseRetryAfter(undefined, now)).toBeNull()
    expect(parseRetryAfter(" 0 ", now)).toBe(0)
    expect(parseRetryAfter("Wed, 01 Jan 2025 00:01:00 GMT", now)).toBe(60)
    expect(parseRetryAfter("Tue, 31 Dec 2024 00:00:00 GMT", now)).toBe(0)
    expect(parseRetryAfter("-5", now)).toBeNull()
    expect(parseRetryAfter("1.5", now)).toBeNull()
    expect(parseRetryAfter("1 2", now)).toBeNull()
    expect(parseRetryAfter("99999999999999999999", now)).toBeNull()
  })

  it.scoped(
    "a redirect is not followed (even with allowPrivate): errorClass redirect, location reported",
    () =>
      Effect.gen(function* () {
        const receiver = yield* makeReceiver
        const metadata = "http://169.254.169.254/latest/meta-data?token=secret"
        receiver.on("/hook", Behaviour.redirect(metadata, 302))
        const result = yield* attempt(request(receiver.url("/hook"), { allowPrivate: true }))
        expectFailure(result, "redirect")
        expect(result.statusCode).toBe(302)
        expect(result.location).toBe(metadata)
        expect(result.error).toBe("redirect (302) to http://169.254.169.254/latest/meta-data not followed")
        expect(receiver.requests()).toHaveLength(1)
      })
  )

  it.scoped("a peer that never answers: timeout after timeoutMs (real time, under the TestClock)", () =>
    Effect.gen(function* () {
      const receiver = yield* makeReceiver
      receiver.on("/hook", Behaviour.hang)
      const result = yield* attempt(request(receiver.url("/hook"), { timeoutMs: 300 }))
      expectFailure(result, "timeout")
      expect(result.statusCode).toBeNull()
      expect(result.error).toBe("timed out after 300 ms")
      expect(result.durationMs).toBeGreaterThanOrEqual(290)
      expect(result.durationMs).toBeLessThan(1_500)
      expect(receiver.requests()).toHaveLength(1)
    })
  )

  it.scoped("a body drip-fed past the deadline: timeout, with the status that did arrive", () =>
    Effect.gen(function* () {
      const receiver = yield* makeReceiver
      receiver.on("/hook", Behaviour.drip({ chunk: "x", everyMs: 100, times: 50 }))
      const result = yield* attempt(request(receiver.url("/hook"), { timeoutMs: 500 }))
      expectFailure(result, "timeout")
      expect(result.statusCode).toBe(200)
      expect(result.error).toContain("timed out after 500 ms")
      expect(result.responseExcerpt?.length ?? 0).toBeLessThan(10)
      expect(result.durationMs).toBeGreaterThanOrEqual(490)
      expect(result.durationMs).toBeLessThan(1_500)
    })
  )

  it.scoped("a large body is read up to maxResponseBytes only, and is not an error", () =>
    Effect.gen(function* () {
      const receiver = yield* makeReceiver
      receiver.on("/hook", Behaviour.large(1024 * 1024))
      const result = yield* attempt(request(receiver.url("/hook"), { maxResponseBytes: 16_384 }))
      expect(result.ok).toBe(true)
      expect(result.statusCode).toBe(200)
      expect(result.responseExcerpt?.length).toBe(16_384)
      const none = yield* attempt(request(receiver.url("/hook"), { maxResponseBytes: 0 }))
      expect(none.ok).toBe(true)
      expect(none.responseExcerpt).toBeNull()
    })
  )

  it.scoped("connection refused: errorClass connect, naming the peer", () =>
    Effect.gen(function* () {
      const port = yield* Effect.promise(unusedPort)
      const result = yield* attempt(request(`http://127.0.0.1:${port}/hook`))
      expectFailure(result, "connect")
      expect(result.statusCode).toBeNull()
      expect(result.error).toBe(`connection refused (127.0.0.1:${port})`)
    })
  )

  it.scoped("https to a plain HTTP peer: errorClass tls", () =>
    Effect.gen(function* () {
      const receiver = yield* makeReceiver
      const result = yield* attempt(request(`https://127.0.0.1:${receiver.port}/hook`))
      expectFailure(result, "tls")
      expect(result.statusCode).toBeNull()
      expect(result.error).toMatch(/^TLS failed \(\w+\): wrong version number$/)
    })
  )

  it.scoped("an unknown name: errorClass dns", () =>
    Effect.gen(function* () {
      const result = yield* attempt(request("http://does-not-exist.invalid/hook", { allowPrivate: false }))
      expectFailure(result, "dns")
      expect(result.error).toContain("does-not-exist.invalid")
    })
  )

  it.scoped("never fails: an unusable URL or header is reported, not thrown, without the header value", () =>
    Effect.gen(function* () {
      const ftp = yield* attempt(request("ftp://example.com/hook"))
      expectFailure(ftp, "connect")
      expect(ftp.error).toBe("not sent: url must use http or https")
      const receiver = yield* makeReceiver
      const bad = yield* attempt(request(receiver.url(), { headers: { "x-secret": "s3cr3t\r\nx: y" } }))
      expectFailure(bad, "connect")
      expect(bad.error).not.toContain("s3cr3t")
      expect(receiver.requests()).toHaveLength(0)
    })
  )

  it.scoped("interrupting the fiber aborts the request and closes the socket", () =>
    Effect.gen(function* () {
      const sockets = new Set<Socket>()
      let closed = 0
      const server: Server = createServer((socket) => {
        sockets.add(socket)
        // Read (and drop) the request, so the client's FIN is seen as an end, then a close.
        socket.resume()
        socket.on("close", () => closed++)
      })
      const port = yield* listening(server, sockets)
      const fiber = yield* Effect.fork(attempt(request(`http://127.0.0.1:${port}/`, { timeoutMs: 60_000 })))
      while (sockets.size === 0) yield* realSleep(10)
      yield* Fiber.interrupt(fiber)
      for (let i = 0; i < 100 && closed === 0; i++) yield* realSleep(10)
      expect(closed).toBe(1)
    })
  )
})

/** A node:http peer that counts connections and, per connection, the requests on it. */
const countingPeer = (answer: (requestOnSocket: number, res: ServerResponse, req: IncomingMessage) => void) =>
  Effect.gen(function* () {
    const sockets = new Set<Socket>()
    const perSocket = new Map<Socket, number>()
    let requests = 0
    const server = createHttpServer((req, res) => {
      requests++
      const n = (perSocket.get(req.socket) ?? 0) + 1
      perSocket.set(req.socket, n)
      req.resume()
      req.on("end", () => answer(n, res, req))
    })
    server.on("connection", (socket) => {
      sockets.add(socket)
      socket.once("close", () => sockets.delete(socket))
    })
    const port = yield* listening(server, sockets)
    return {
      url: `http://127.0.0.1:${port}/hook`,
      connections: () => perSocket.size,
      requests: () => requests
    }
  })

describe("attempt: kept-alive connections", () => {
  it.scoped("consecutive attempts to one peer reuse one connection", () =>
    Effect.gen(function* () {
      const peer = yield* countingPeer((_, res) => res.writeHead(200).end("ok"))
      for (let i = 0; i < 3; i++) expect((yield* attempt(request(peer.url))).ok).toBe(true)
      expect(peer.requests()).toBe(3)
      expect(peer.connections()).toBe(1)
    })
  )

  it.scoped("a pooled connection the peer drops is not an error: the attempt goes again on a fresh one", () =>
    Effect.gen(function* () {
      // The second request on any connection is cut off without an answer (a peer that had closed
      // its idle keep-alive socket as the request went out).
      const peer = yield* countingPeer((n, res, req) =>
        n === 1 ? res.writeHead(200).end("ok") : req.socket.destroy()
      )
      expect((yield* attempt(request(peer.url))).ok).toBe(true)
      const again = yield* attempt(request(peer.url))
      expect(again).toMatchObject({ ok: true, statusCode: 200 })
      expect(peer.requests()).toBe(3)
      expect(peer.connections()).toBe(2)
    })
  )

  it.scoped("a connection whose answer was cut short by the cap is not reused", () =>
    Effect.gen(function* () {
      const peer = yield* countingPeer((_, res) => res.writeHead(200).end("x".repeat(64 * 1024)))
      expect((yield* attempt(request(peer.url, { maxResponseBytes: 1024 }))).ok).toBe(true)
      expect((yield* attempt(request(peer.url, { maxResponseBytes: 1024 }))).ok).toBe(true)
      expect(peer.connections()).toBe(2)
    })
  )
})

describe("the SSRF guard in attempt", () => {
  const privateUrls = (port: number) => [
    `http://localhost:${port}/`,
    `http://127.0.0.1:${port}/`,
    `http://[::1]:${port}/`,
    `http://[::ffff:127.0.0.1]:${port}/`,
    `http://2130706433:${port}/`,
    `http://0x7f.0.0.1:${port}/`
  ]

  it.scoped("without allowPrivate: blocked_ip, and nothing reaches the receiver", () =>
    Effect.gen(function* () {
      const receiver = yield* makeReceiver
      for (const url of [...privateUrls(receiver.port), "http://169.254.169.254/latest/meta-data"]) {
        const result = yield* attempt(request(url, { allowPrivate: false }))
        expectFailure(result, "blocked_ip")
        expect(result.statusCode).toBeNull()
        expect(result.error).toMatch(/^blocked: /)
      }
      const metadata = yield* attempt(request("http://169.254.169.254/", { allowPrivate: false }))
      expect(metadata.error).toBe("blocked: 169.254.169.254 is the cloud metadata address")
      const local = yield* attempt(request(receiver.url(), { allowPrivate: false }))
      expect(local.error).toBe("blocked: 127.0.0.1 is a loopback address")
      const named = yield* attempt(request(`http://localhost:${receiver.port}/`, { allowPrivate: false }))
      expect(named.error).toMatch(/^blocked: localhost resolves to (127\.0\.0\.1|::1), a loopback address$/)
      expect(receiver.requests()).toEqual([])
    })
  )

  it.scoped("the lookup hook also guards the single-address form (autoSelectFamily off)", () =>
    Effect.gen(function* () {
      const receiver = yield* makeReceiver
      const before = getDefaultAutoSelectFamily()
      yield* Effect.acquireRelease(
        Effect.sync(() => setDefaultAutoSelectFamily(false)),
        () => Effect.sync(() => setDefaultAutoSelectFamily(before))
      )
      const url = `http://localhost:${receiver.port}/`
      const blocked = yield* attempt(request(url, { allowPrivate: false }))
      expectFailure(blocked, "blocked_ip")
      expect(receiver.requests()).toEqual([])
      const allowed = yield* attempt(request(url, { allowPrivate: true }))
      expect(allowed.ok).toBe(true)
    })
  )

  it.scoped("with allowPrivate: the same URLs reach the receiver", () =>
    Effect.gen(function* () {
      const receiver = yield* makeReceiver
      const urls = privateUrls(receiver.port).filter((url) => receiver.ipv6 || !url.includes("[::1]"))
      for (const url of urls) {
        const result = yield* attempt(request(url, { allowPrivate: true }))
        expect({ url, ok: result.ok, error: result.error }).toEqual({ url, ok: true, error: null })
      }
      expect(receiver.requests()).toHaveLength(urls.length)
    })
  )
})

describe("urlProblem", () => {
  it.effect("refuses non-public, malformed and credentialed URLs; accepts public ones offline", () =>
    Effect.gen(function* () {
      const refused = [
        "http://localhost:8080/",
        "http://LOCALHOST./",
        "http://api.localhost/",
        "http://printer.local/",
        "http://127.0.0.1:8080/",
        "http://[::1]:8080/",
        "http://[::ffff:127.0.0.1]:8080/",
        "http://2130706433:8080/",
        "http://0x7f.0.0.1:8080/",
        "http://017700000001/",
        "http://169.254.169.254/",
        "http://10.0.0.1/",
        "http://192.168.1.1/",
        "http://[fd00::1]/",
        "http://[fe80::1]/",
        "http://100.64.0.1/",
        "ftp://example.com/",
        "http://user:pass@example.com/",
        "https://:pass@example.com/",
        "not a url",
        "/relative/path",
        "http://metadata.google.internal/",
        `https://example.com/${"a".repeat(2048)}`
      ]
      for (const url of refused) {
        const problem = yield* urlProblem(url, { allowPrivate: false })
        expect({ url, problem }).toEqual({ url, problem: expect.any(String) })
        expect(problem).not.toMatch(/\n/)
      }
      expect(yield* urlProblem("https://example.com/hook", { allowPrivate: false })).toBeUndefined()
      expect(yield* urlProblem("https://93.184.216.34/hook", { allowPrivate: false })).toBeUndefined()
      expect(yield* urlProblem("https://[2606:4700::1111]/hook", { allowPrivate: false })).toBeUndefined()
    })
  )

  it.effect("messages", () =>
    Effect.gen(function* () {
      const problem = (url: string, allowPrivate = false) => urlProblem(url, { allowPrivate })
      expect(yield* problem("http://127.0.0.1:8080/")).toBe(
        "url points to 127.0.0.1, a loopback address: webhook targets must be public (for a local receiver in development, set WEBHOOK_ALLOW_PRIVATE=true)"
      )
      expect(yield* problem("http://169.254.169.254/")).toBe(
        "url points to 169.254.169.254, the cloud metadata address: webhook targets must be public (for a local receiver in development, set WEBHOOK_ALLOW_PRIVATE=true)"
      )
      expect(yield* problem("http://[::ffff:127.0.0.1]/")).toContain("loopback")
      expect(yield* problem("http://metadata.google.internal/")).toBe(
        "url points to metadata.google.internal, a local name: webhook targets must be public (for a local receiver in development, set WEBHOOK_ALLOW_PRIVATE=true)"
      )
      expect(yield* problem("ftp://example.com/")).toBe("url must use http or https")
      expect(yield* problem("http://user:pass@example.com/")).toBe(
        "url must not contain a username or password"
      )
      expect(yield* problem("not a url")).toBe("url is not a valid absolute URL")
    })
  )

  it.effect("allowPrivate lifts the address checks only", () =>
    Effect.gen(function* () {
      const allow = { allowPrivate: true }
      expect(yield* urlProblem("http://127.0.0.1:1/", allow)).toBeUndefined()
      expect(yield* urlProblem("http://localhost:8080/hook", allow)).toBeUndefined()
      expect(yield* urlProblem("ftp://example.com/", allow)).toBe("url must use http or https")
      expect(yield* urlProblem("http://user:pass@127.0.0.1/", allow)).toEqual(expect.any(String))
    })
  )
})

describe("addressProblem", () => {
  const blocked: ReadonlyArray<readonly [string, string]> = [
    ["0.0.0.0", "this network"],
    ["0.1.2.3", "this network"],
    ["10.0.0.1", "private"],
    ["10.255.255.255", "private"],
    ["100.64.0.1", "CGNAT"],
    ["100.127.255.255", "CGNAT"],
    ["127.0.0.1", "loopback"],
    ["127.255.255.254", "loopback"],
    ["169.254.169.254", "cloud metadata"],
    ["169.254.1.1", "link-local"],
    ["168.63.129.16", "cloud metadata"],
    ["172.16.0.1", "private"],
    ["172.31.255.255", "private"],
    ["192.0.0.8", "IETF"],
    ["192.0.2.1", "documentation"],
    ["192.88.99.1", "6to4"],
    ["192.168.1.1", "private"],
    ["198.18.0.1", "benchmarking"],
    ["198.19.255.255", "benchmarking"],
    ["198.51.100.7", "documentation"],
    ["203.0.113.9", "documentation"],
    ["224.0.0.1", "multicast"],
    ["239.255.255.250", "multicast"],
    ["240.0.0.1", "reserved"],
    ["255.255.255.254", "reserved"],
    ["255.255.255.255", "broadcast"],
    ["::", "unspecified"],
    ["::1", "loopback"],
    ["[::1]", "loopback"],
    ["0:0:0:0:0:0:0:1", "loopback"],
    ["::ffff:7f00:1", "loopback"],
    ["::ffff:127.0.0.1", "loopback"],
    ["::FFFF:10.1.2.3", "private"],
    ["::ffff:169.254.169.254", "cloud metadata"],
    ["::127.0.0.1", "IPv4-compatible"],
    ["::808:808", "IPv4-compatible"],
    ["64:ff9b::7f00:1", "loopback"],
    ["64:ff9b::10.0.0.1", "private"],
    ["64:ff9b:1::1", "NAT64"],
    ["100::1", "discard"],
    ["2001:db8::1", "documentation"],
    ["3fff::1", "documentation"],
    ["2001::1", "Teredo"],
    ["2001:0:4136:e378::1", "Teredo"],
    ["2001:2::1", "IETF"],
    ["2001:1ff::1", "IETF"],
    ["2002:7f00:1::1", "6to4"],
    ["2002:808:808::1", "6to4"],
    ["fc00::1", "unique local"],
    ["fd00::1", "unique local"],
    ["fd00:ec2::254", "unique local"],
    ["fe80::1", "link-local"],
    ["fe80::1%eth0", "link-local"],
    ["febf::1", "link-local"],
    ["fec0::1", "site-local"],
    ["ff02::1", "multicast"],
    ["4000::1", "reserved"],
    ["not-an-ip", "not an IP address"],
    ["1.2.3", "not an IP address"],
    ["256.1.1.1", "not an IP address"],
    ["01.2.3.4", "not an IP address"],
    ["1:2:3:4:5:6:7:8:9", "not an IP address"],
    ["1::2::3", "not an IP address"],
    ["1:2:3:4:5:6:7:8::", "not an IP address"],
    ["::ffff:1.2.3.256", "not an IP address"],
    ["", "not an IP address"]
  ]

  it("refuses every non-public range, naming its class", () => {
    for (const [ip, what] of blocked) {
      const problem = addressProblem(ip)
      expect({ ip, problem }).toEqual({ ip, problem: expect.stringContaining(what) })
    }
    expect(addressProblem("127.0.0.1")).toBe("127.0.0.1 is a loopback address")
    expect(addressProblem("::ffff:7f00:1")).toBe(
      "::ffff:7f00:1 is a loopback address (IPv4-mapped 127.0.0.1)"
    )
  })

  it("accepts public unicast addresses", () => {
    for (const ip of [
      "8.8.8.8",
      "1.1.1.1",
      "93.184.216.34",
      "100.63.255.255",
      "100.128.0.1",
      "172.15.255.255",
      "172.32.0.1",
      "198.17.255.255",
      "198.20.0.1",
      "223.255.255.255",
      "2606:4700::1111",
      "[2606:4700::1111]",
      "2a00:1450:4001:82b::200e",
      "2001:4860:4860::8888",
      "2001:200::1",
      "::ffff:8.8.8.8",
      "64:ff9b::808:808"
    ]) {
      expect({ ip, problem: addressProblem(ip) }).toEqual({ ip, problem: undefined })
    }
  })
})
