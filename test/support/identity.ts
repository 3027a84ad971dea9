/**
 * The whole HTTP app with the real identity context (JWTs, API keys, revocations) over a fresh
 * database, plus small helpers: a JSON/form request function and ready-made credentials.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { type Clock, Effect, Layer } from "effect"
import { expect } from "vitest"
import type { AppConfig, AppConfigShape } from "../../src/config.js"
import { typeForStatus } from "../../src/http/errors.js"
import { Identity } from "../../src/identity/Identity.js"
import { projections } from "../../src/registry.js"
import { HttpAppLive } from "../../src/server.js"
import { servicesLayer } from "../../src/services.js"
import { TestConfig, testConfig } from "./database.js"

export const identityServices = (config: Layer.Layer<AppConfig, never, never> = TestConfig) =>
  servicesLayer({ processors: [], projections }).pipe(Layer.provideMerge(config))

/**
 * The app on a real socket with real credentials; `overrides` change the config, and `clock`
 * (e.g. `makeShiftedClock().clock`) is the time the whole server runs on.
 */
export const identityHttp = (overrides: Partial<AppConfigShape> = {}, clock?: Clock.Clock) => {
  const app = HttpAppLive.pipe(
    Layer.provideMerge(NodeHttpServer.layerTest),
    Layer.provideMerge(
      identityServices(Object.keys(overrides).length === 0 ? TestConfig : testConfig(overrides))
    )
  )
  return clock === undefined ? app : app.pipe(Layer.provide(Layer.setClock(clock)))
}

export const IdentityHttp = identityHttp()

export interface Reply {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly text: string
  // biome-ignore lint/suspicious/noExplicitAny: test bodies are inspected field by field
  readonly body: any
}

/** The reply is the service's error body: status, code, the type of that status, a request id. */
export const expectError = (r: Reply, status: number, code: string, param?: string) => {
  expect(r.status, r.text).toBe(status)
  expect(r.body?.error?.code, r.text).toBe(code)
  expect(r.body.error.type, r.text).toBe(typeForStatus(status))
  expect(typeof r.body.error.message).toBe("string")
  expect(r.body.error.requestId).toMatch(/^req_/)
  if (param !== undefined) expect(r.body.error.param, r.text).toBe(param)
}

export interface RequestOptions {
  readonly token?: string
  readonly json?: unknown
  readonly form?: Record<string, string>
  readonly headers?: Record<string, string>
}

/** One request; never fails on a 4xx/5xx (the status is asserted by the test). */
export const call = (
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE",
  path: string,
  options: RequestOptions = {}
) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    let request = HttpClientRequest.make(method)(path)
    if (options.token !== undefined)
      request = HttpClientRequest.setHeader(request, "authorization", `Bearer ${options.token}`)
    if (options.headers) request = HttpClientRequest.setHeaders(request, options.headers)
    if (options.json !== undefined) request = HttpClientRequest.bodyUnsafeJson(request, options.json)
    if (options.form !== undefined) request = HttpClientRequest.bodyUrlParams(request, options.form)
    const response = yield* client.execute(request)
    const text = yield* response.text
    let body: unknown
    try {
      body = text === "" ? undefined : JSON.parse(text)
    } catch {
      body = undefined
    }
    const reply: Reply = { status: response.status, headers: response.headers, text, body }
    return reply
  }).pipe(Effect.scoped, Effect.orDie)

let counter = 0
/** A fresh, unique address per call. */
export const uniqueEmail = (label = "shopper") =>
  `${label}.${process.pid}.${Date.now()}.${counter++}@example.com`

export const PASSWORD = "correct horse battery"

/** Registers a shopper over HTTP; answers the registration body (tokens + user). */
export const registerShopper = (email = uniqueEmail()) =>
  Effect.map(
    call("POST", "/auth/register", {
      json: { email, password: PASSWORD, firstName: "Ann", lastName: "Lee" }
    }),
    (r) => {
      if (r.status !== 201) throw new Error(`register answered ${r.status}: ${r.text}`)
      return r.body as {
        accessToken: string
        refreshToken: string
        userId: string
        user: { id: string; email: string }
      }
    }
  )

/** Creates an admin through the service (as ADMIN_EMAIL does) and logs in over HTTP. */
export const adminLogin = (email = uniqueEmail("admin")) =>
  Effect.gen(function* () {
    const identity = yield* Identity
    yield* identity.ensureAdmin({ email, password: PASSWORD, firstName: "Store", lastName: "Admin" })
    const r = yield* call("POST", "/auth/login", { json: { email, password: PASSWORD } })
    if (r.status !== 200) throw new Error(`admin login answered ${r.status}: ${r.text}`)
    return r.body as { accessToken: string; refreshToken: string; userId: string }
  })

/** An API key with exactly `scopes`, created by a fresh admin. */
export const apiKeyWith = (scopes: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const admin = yield* adminLogin()
    const r = yield* call("POST", "/apikey", { token: admin.accessToken, json: { name: "test key", scopes } })
    if (r.status !== 201) throw new Error(`apikey answered ${r.status}: ${r.text}`)
    return r.body as { id: string; key: string; scopes: ReadonlyArray<string> }
  })
