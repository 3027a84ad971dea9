/**
 * The whole HTTP app on a real socket (random port) over a fresh database, with an HttpClient
 * pointed at it. Credentials: a test verifier that accepts `test-admin` and `test-reader` tokens.
 */
import { HttpApiBuilder } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { CredentialVerifier } from "../../src/http/Auth.js"
import { Unauthorized } from "../../src/http/errors.js"
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

export const TestHttp = HttpAppLive.pipe(
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provideMerge(TestServices)
)

export { HttpApiBuilder }
