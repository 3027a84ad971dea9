/**
 * A client generated from the published document with openapi-typescript + openapi-fetch (the
 * common TypeScript toolchain) compiles against natural types — numbers as numbers, required fields
 * required — and works against the service: test/openapi-client/client.ts, type-checked here with
 * the project's compiler options against freshly generated types, then run.
 */
import { writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { describe, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import openapiTS, { astToString } from "openapi-typescript"
import ts from "typescript"
import { expect } from "vitest"
import { projections } from "../../src/registry.js"
import { HttpAppLive } from "../../src/server.js"
import { servicesLayer } from "../../src/services.js"
import { TestConfig } from "../support/database.js"
import { NodeServerTest, serverPort, TestCredentials } from "../support/http.js"

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..")
const clientDir = join(root, "test", "openapi-client")
const clientFile = join(clientDir, "client.ts")

/** The project's compiler options (tsconfig.json), for a program of `files` alone. */
const typeCheck = (files: ReadonlyArray<string>): ReadonlyArray<string> => {
  const config = ts.readConfigFile(join(root, "tsconfig.json"), ts.sys.readFile)
  const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, root)
  const program = ts.createProgram([...files], parsed.options)
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const at =
      d.file && d.start !== undefined
        ? `${d.file.fileName}:${d.file.getLineAndCharacterOfPosition(d.start).line + 1}: `
        : ""
    return `${at}${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`
  })
}

/** The app with its read models kept (the client reads back what it created), test credentials. */
const ClientHttp = HttpAppLive.pipe(
  Layer.provideMerge(NodeServerTest),
  Layer.provideMerge(
    servicesLayer({ processors: [], projections, credentials: TestCredentials }).pipe(
      Layer.provideMerge(TestConfig)
    )
  )
)

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null

describe("OpenAPI", () => {
  layer(ClientHttp, { excludeTestServices: true, timeout: 120_000 })("a generated client", (it) => {
    it.effect(
      "compiles against natural types and works against the service",
      () =>
        Effect.gen(function* () {
          const client = yield* HttpClient.HttpClient
          const res = yield* client.execute(HttpClientRequest.get("/openapi.json"))
          const document = yield* res.text
          expect(res.status).toBe(200)

          const ast = yield* Effect.promise(() => openapiTS(document))
          writeFileSync(join(clientDir, "api.d.ts"), astToString(ast))
          expect(typeCheck([clientFile])).toEqual([])

          // Not a literal specifier, so the project's own type-check does not follow it to the
          // generated (uncommitted) types.
          const module: unknown = yield* Effect.promise(() => import(clientFile))
          const exercise = isRecord(module) ? module.exercise : undefined
          if (typeof exercise !== "function") throw new Error("client.ts exports no exercise()")
          const port = yield* serverPort
          const result: unknown = yield* Effect.promise(() =>
            Promise.resolve(exercise(`http://127.0.0.1:${port}`, "test-admin"))
          )
          expect(result).toMatchObject({
            customerId: expect.stringMatching(/^cus_/),
            customerEmail: "ada@example.com",
            customerCreatedAt: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/),
            customerCount: 1,
            webhookId: expect.stringMatching(/^wh_/),
            hasMore: false,
            replayed: "true",
            missingCode: "resource_missing"
          })
          expect(isRecord(result) ? result.webhookIds : undefined).toEqual([
            isRecord(result) ? result.webhookId : ""
          ])
        }),
      120_000
    )
  })
})
