/**
 * The whole HTTP app on a real socket (random port) over a fresh database, with an HttpClient
 * pointed at it. Credentials: a test verifier that accepts `test-admin` and `test-reader` tokens.
 */
import { connect } from "node:net"
import { HttpApiBuilder, HttpServer } from "@effect/platform"
import { NodeHttpClient, NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { CredentialVerifier } from "../../src/http/Auth.js"
import { Unauthorized } from "../../src/http/errors.js"
import { makeNodeServer } from "../../src/http/Server.js"
import { HttpAppLive } from "../../src/server.js"
import { servicesLayer } from "../../src/services.js"
import { TestConfig } from "./database.js"

export const TestCredentials = Layer.succeed(CredentialVerifier, {
  verify: (credential) => {
    switch (credential) {
      case "test-admin":
        return Effect.succeed({
          type: "user" as const,
          id: "usr_test_admin",
          role: "admin" as const,
          scopes: new Set(["*"])
        })
      case "test-reader":
        return Effect.succeed({
          type: "api_key" as const,
          id: "key_test_reader",
          scopes: new Set(["read:events"])
        })
      case "test-nobody":
        return Effect.succeed({ type: "api_key" as const, id: "key_test_nobody", scopes: new Set<string>() })
      default:
        return Effect.fail(Unauthorized.of({ code: "invalid_token", message: "the credential is not valid" }))
    }
  }
})

export const TestServices = servicesLayer({
  processors: [],
  projections: [],
  credentials: TestCredentials
}).pipe(Layer.provideMerge(TestConfig))

/**
 * The service's own Node server (src/http/Server.ts) on a random port, with an HttpClient pointed
 * at it (like NodeHttpServer.layerTest, which listens with a bare `createServer()`).
 */
export const NodeServerTest = HttpServer.layerTestClient.pipe(
  Layer.provide(NodeHttpClient.layerWithoutAgent),
  Layer.provide(NodeHttpClient.makeAgentLayer({ keepAlive: false })),
  Layer.provideMerge(NodeHttpServer.layer(makeNodeServer, { port: 0 }))
)

/** The port the test server listens on. */
export const serverPort = Effect.map(HttpServer.HttpServer, (server) =>
  server.address._tag === "TcpAddress" ? server.address.port : 0
)

/**
 * Writes `request` as is to a new connection to the test server and reads until it closes (or
 * `timeoutMs` passes: then what arrived, with `timedOut`) — for requests no HTTP client would send.
 */
export const rawRequest = (request: string, timeoutMs = 5_000) =>
  Effect.flatMap(serverPort, (port) =>
    Effect.async<{ readonly text: string; readonly timedOut: boolean }>((resume) => {
      const socket = connect(port, "127.0.0.1")
      let text = ""
      let done = false
      const finish = (timedOut: boolean) => {
        if (done) return
        done = true
        clearTimeout(timer)
        socket.destroy()
        resume(Effect.succeed({ text, timedOut }))
      }
      const timer = setTimeout(() => finish(true), timeoutMs)
      socket.setEncoding("utf8")
      socket.on("data", (chunk: string) => {
        text += chunk
      })
      socket.on("close", () => finish(false))
      socket.on("error", () => finish(false))
      socket.on("connect", () => socket.write(request))
      return Effect.sync(() => {
        done = true
        clearTimeout(timer)
        socket.destroy()
      })
    })
  )

export const TestHttp = HttpAppLive.pipe(Layer.provideMerge(NodeServerTest), Layer.provideMerge(TestServices))

export { HttpApiBuilder }
