/**
 * The OpenAPI document the running service publishes: valid OpenAPI 3.1 by an independent
 * validator, every error response documented as the one error body (`{ "error": ErrorDetail }`)
 * with none of the internal `_tag` / `HttpApiDecodeError` leaking through, and `/docs` showing the
 * same document, which is also the one `npm run lint:openapi` lints with Redocly. What the middleware
 * adds around the handlers is documented too: `Request-Id`, `Idempotency-Key` with its answers, the
 * rate limits' headers and 429s, and each path's 405 `Allow`.
 */
import { HttpClient, HttpClientRequest, OpenApi } from "@effect/platform"
import { describe, layer } from "@effect/vitest"
import { Validator } from "@seriousme/openapi-schema-validator"
import { Effect, Option } from "effect"
import fc from "fast-check"
import { expect } from "vitest"
import { Api } from "../../src/Api.js"
import { parseIdempotencyKey } from "../../src/http/Idempotency.js"
import { TestHttp } from "../support/http.js"

type JsonObject = Record<string, unknown>

const isObject = (value: unknown): value is JsonObject =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const send = (path: string) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const res = yield* client.execute(HttpClientRequest.get(path))
    return { status: res.status, headers: res.headers, text: yield* res.text }
  })

const fetchSpec = Effect.gen(function* () {
  const r = yield* send("/openapi.json")
  expect(r.status).toBe(200)
  expect(r.headers["content-type"]).toMatch(/application\/json/)
  const spec: unknown = JSON.parse(r.text)
  if (!isObject(spec)) throw new Error("/openapi.json is not a JSON object")
  return spec
})

const ERROR_DETAIL_REF = "#/components/schemas/ErrorDetail"
const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"] as const

/** Follows a local `$ref` (`#/a/b`) to what it names. */
const deref = (spec: JsonObject, node: unknown): unknown => {
  let current = node
  for (let hops = 0; isObject(current) && typeof current.$ref === "string"; hops++) {
    if (hops > 20) throw new Error(`$ref cycle at ${current.$ref}`)
    const ref: string = current.$ref
    if (!ref.startsWith("#/")) throw new Error(`non-local $ref ${ref}`)
    let target: unknown = spec
    for (const part of ref.slice(2).split("/")) {
      const key = part.replace(/~1/g, "/").replace(/~0/g, "~")
      target = isObject(target) ? target[key] : undefined
    }
    if (target === undefined) throw new Error(`dangling $ref ${ref}`)
    current = target
  }
  return current
}

/** Why `schema` is not the documented error body, or undefined when it is. */
const errorBodyProblem = (spec: JsonObject, schema: unknown): string | undefined => {
  const resolved = deref(spec, schema)
  if (!isObject(resolved)) return "no schema"
  const branches = resolved.anyOf ?? resolved.oneOf
  if (Array.isArray(branches)) {
    const problems = branches.map((b) => errorBodyProblem(spec, b)).filter((p) => p !== undefined)
    return problems.length === 0 ? undefined : problems.join("; ")
  }
  const properties = resolved.properties
  if (!isObject(properties)) return "not an object schema"
  const error = properties.error
  if (!isObject(error) || error.$ref !== ERROR_DETAIL_REF) return "no `error` property of ErrorDetail"
  if (!Array.isArray(resolved.required) || !resolved.required.includes("error")) return "`error` not required"
  const extra = Object.keys(properties).filter((k) => k !== "error")
  return extra.length === 0 ? undefined : `unexpected properties ${extra.join(", ")}`
}

interface ErrorResponse {
  readonly where: string
  readonly problem: string | undefined
}

/** Every response of every operation whose status matches, with its `application/json` content. */
const jsonResponses = (spec: JsonObject, status: RegExp) => {
  const out: Array<{ readonly where: string; readonly json: unknown }> = []
  const paths = isObject(spec.paths) ? spec.paths : {}
  for (const [path, item] of Object.entries(paths)) {
    if (!isObject(item)) continue
    for (const method of METHODS) {
      const operation = item[method]
      if (!isObject(operation)) continue
      const responses = isObject(operation.responses) ? operation.responses : {}
      for (const [code, raw] of Object.entries(responses)) {
        if (!status.test(code)) continue
        const response = deref(spec, raw)
        const content = isObject(response) && isObject(response.content) ? response.content : undefined
        out.push({ where: `${method.toUpperCase()} ${path} ${code}`, json: content?.["application/json"] })
      }
    }
  }
  return out
}

/** Every 4xx/5xx/default response of every operation, with what is wrong with its body. */
const errorResponses = (spec: JsonObject): ReadonlyArray<ErrorResponse> =>
  jsonResponses(spec, /^([45]\d\d|[45]XX|default)$/).map(({ where, json }) => ({
    where,
    problem: isObject(json) ? errorBodyProblem(spec, json.schema) : "no application/json body"
  }))

/** Every 2xx JSON response whose body is a bare array (a list must be `{count, models}` or `/v1`'s list object). */
const bareArrayResponses = (spec: JsonObject): ReadonlyArray<string> =>
  jsonResponses(spec, /^2\d\d$/).flatMap(({ where, json }) => {
    const schema = isObject(json) ? deref(spec, json.schema) : undefined
    return isObject(schema) && schema.type === "array" ? [where] : []
  })

/** Every operation of the document, with its path and (lower-case) method. */
const operations = (spec: JsonObject) => {
  const out: Array<{ readonly path: string; readonly method: string; readonly operation: JsonObject }> = []
  const paths = isObject(spec.paths) ? spec.paths : {}
  for (const [path, item] of Object.entries(paths)) {
    if (!isObject(item)) continue
    for (const method of METHODS) {
      const operation = item[method]
      if (isObject(operation)) out.push({ path, method, operation })
    }
  }
  return out
}

describe("OpenAPI", () => {
  layer(TestHttp, { excludeTestServices: true, timeout: 60_000 })("the published document", (it) => {
    it.effect("is valid OpenAPI 3.1", () =>
      Effect.gen(function* () {
        const spec = yield* fetchSpec
        expect(spec.openapi).toMatch(/^3\.1\.\d+$/)
        const validator = new Validator()
        const result = yield* Effect.promise(() => validator.validate(structuredClone(spec)))
        expect(result.errors ?? []).toEqual([])
        expect(result.valid).toBe(true)
        expect(validator.version).toBe("3.1")
        // Every local $ref resolves.
        const refs = JSON.stringify(spec).match(/"\$ref":"[^"]*"/g) ?? []
        for (const ref of refs) expect(() => deref(spec, JSON.parse(`{${ref}}`))).not.toThrow()
      })
    )

    it.effect("documents every error as the one error body, without internal tags", () =>
      Effect.gen(function* () {
        const spec = yield* fetchSpec
        const errors = errorResponses(spec)
        const where = errors.map((e) => e.where)
        // The errors every endpoint can answer are declared on the root API.
        for (const status of ["400", "413", "415", "500"]) {
          expect(where).toContain(`GET /health ${status}`)
        }
        expect(where).toContain("GET /ready 503")
        expect(errors.filter((e) => e.problem !== undefined)).toEqual([])

        const schemas =
          isObject(spec.components) && isObject(spec.components.schemas) ? spec.components.schemas : {}
        const detail = schemas.ErrorDetail
        expect(isObject(detail)).toBe(true)
        if (isObject(detail)) {
          expect(detail.required).toEqual(expect.arrayContaining(["type", "code", "message"]))
          expect(Object.keys(isObject(detail.properties) ? detail.properties : {})).toEqual(
            expect.arrayContaining(["type", "code", "message", "param", "requestId"])
          )
        }
        const text = JSON.stringify(spec)
        expect(text).not.toContain("_tag")
        expect(text).not.toContain("HttpApiDecodeError")
      })
    )

    it.effect(
      "answers every list as an object: {count, models} on the base surface, never a bare array",
      () =>
        Effect.gen(function* () {
          const spec = yield* fetchSpec
          expect(bareArrayResponses(spec)).toEqual([])
          const schemas =
            isObject(spec.components) && isObject(spec.components.schemas) ? spec.components.schemas : {}
          for (const list of ["NotificationList", "CustomerList", "TemplateList"]) {
            const schema = schemas[list]
            expect(isObject(schema) ? schema.required : undefined, list).toEqual(["count", "models"])
          }
        })
    )

    it.effect("states each protected operation's scope in its security requirement", () =>
      Effect.gen(function* () {
        const spec = yield* fetchSpec
        const paths = isObject(spec.paths) ? spec.paths : {}
        const operation = (path: string, method: string) => {
          const item = paths[path]
          const op = isObject(item) ? item[method] : undefined
          return isObject(op) ? op : {}
        }
        expect(operation("/apikey", "post").security).toEqual([{ bearer: ["write:apikeys"] }])
        expect(operation("/apikey/{id}", "delete").security).toEqual([{ bearer: ["write:apikeys"] }])
        expect(operation("/oauth/clients", "get").security).toEqual([{ bearer: ["admin"] }])
        expect(String(operation("/apikey", "get").description)).toContain("`read:apikeys`")
        // Any credential may call /auth/me; the public routes need none.
        expect(operation("/auth/me", "get").security).toEqual([{ bearer: [] }])
        expect(operation("/auth/login", "post").security ?? []).toEqual([])
      })
    )

    it.effect("is the document `npm run lint:openapi` lints", () =>
      Effect.gen(function* () {
        const spec = yield* fetchSpec
        expect(spec).toEqual(JSON.parse(JSON.stringify(OpenApi.fromApi(Api))))
      })
    )

    it.effect("names its server and license, and describes each tag once", () =>
      Effect.gen(function* () {
        const spec = yield* fetchSpec
        expect(spec.servers).toEqual([{ url: "/", description: expect.any(String) }])
        const info = isObject(spec.info) ? spec.info : {}
        expect(info.license).toMatchObject({ name: "MIT" })
        const tags = Array.isArray(spec.tags) ? spec.tags.filter(isObject) : []
        const names = tags.map((t) => t.name)
        expect(new Set(names).size).toBe(names.length)
        expect(names).toEqual(
          expect.arrayContaining(["System", "Authentication", "Customers", "Webhooks (v1)"])
        )
        for (const tag of tags) expect(String(tag.description ?? ""), String(tag.name)).not.toBe("")
        // Every operation's tag is one of them.
        for (const { operation } of operations(spec))
          for (const tag of Array.isArray(operation.tags) ? operation.tags : []) expect(names).toContain(tag)
        // The scheme lists the scopes the routes require.
        const schemes = isObject(spec.components) ? spec.components.securitySchemes : undefined
        const bearer = isObject(schemes) ? schemes.bearer : undefined
        const description = String(isObject(bearer) ? bearer.description : "")
        for (const scope of ["admin", "read:customers", "write:webhooks", "write:apikeys"])
          expect(description).toContain(`\`${scope}\``)
      })
    )

    it.effect("documents the headers and answers the middleware adds to every operation", () =>
      Effect.gen(function* () {
        const spec = yield* fetchSpec
        const rateLimited = (path: string) =>
          path.startsWith("/v1/") ||
          ["/auth/login", "/auth/register", "/auth/refresh", "/auth/token", "/auth/password-reset"].some(
            (p) => path === p || path.startsWith(`${p}/`)
          )
        const problems: Array<string> = []
        for (const { path, method, operation } of operations(spec)) {
          const where = `${method.toUpperCase()} ${path}`
          const responses = isObject(operation.responses) ? operation.responses : {}
          const headersOf = (status: string) => {
            const response = deref(spec, responses[status])
            const headers = isObject(response) && isObject(response.headers) ? response.headers : {}
            return Object.fromEntries(Object.entries(headers).map(([name, h]) => [name, deref(spec, h)]))
          }
          for (const status of Object.keys(responses)) {
            const headers = headersOf(status)
            if (!isObject(headers["Request-Id"])) problems.push(`${where} ${status}: no Request-Id`)
            for (const name of ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"])
              if (rateLimited(path) !== isObject(headers[name])) problems.push(`${where} ${status}: ${name}?`)
          }
          const unsafe = ["post", "put", "patch", "delete"].includes(method)
          const parameters = (Array.isArray(operation.parameters) ? operation.parameters : []).map((p) =>
            deref(spec, p)
          )
          const key = parameters.find((p) => isObject(p) && p.name === "Idempotency-Key" && p.in === "header")
          if (unsafe !== (key !== undefined)) problems.push(`${where}: Idempotency-Key?`)
          if (unsafe) {
            for (const status of ["409", "422"])
              if (!(status in responses)) problems.push(`${where}: no ${status}`)
            const success = Object.keys(responses).find((s) => s.startsWith("2")) ?? "2xx"
            if (!isObject(headersOf(success)["Idempotent-Replayed"]))
              problems.push(`${where}: Idempotent-Replayed?`)
          }
          if (rateLimited(path) && !("429" in responses)) problems.push(`${where}: no 429`)
          if ("429" in responses && !isObject(headersOf("429")["Retry-After"]))
            problems.push(`${where} 429: no Retry-After`)
        }
        expect(problems).toEqual([])
      })
    )

    it.effect("documents each path's 405 with the Allow header the service sends", () =>
      Effect.gen(function* () {
        const spec = yield* fetchSpec
        const paths = isObject(spec.paths) ? spec.paths : {}
        const client = yield* HttpClient.HttpClient
        for (const [path, item] of Object.entries(paths)) {
          if (!isObject(item)) continue
          const documented = /`Allow: ([A-Z, ]+)`/.exec(String(item.description ?? ""))?.[1] ?? ""
          expect(documented, path).not.toBe("")
          // A method the path does not answer, with made-up ids (no static path segment matches them).
          const other = (["PATCH", "PUT", "POST", "DELETE"] as const).find(
            (m) => !documented.split(", ").includes(m)
          )
          if (other === undefined) continue
          const res = yield* client.execute(HttpClientRequest.make(other)(path.replace(/\{[^}]+\}/g, "x_1")))
          expect(res.status, `${other} ${path}`).toBe(405)
          expect(res.headers.allow, `${other} ${path}`).toBe(documented)
        }
      })
    )

    it.effect(
      "types list parameters as integers with their bounds, timestamps and stored values with formats",
      () =>
        Effect.gen(function* () {
          const spec = yield* fetchSpec
          const parameter = (path: string, name: string) => {
            const op = operations(spec).find((o) => o.path === path && o.method === "get")?.operation
            const found = (Array.isArray(op?.parameters) ? op.parameters : []).find(
              (p) => isObject(p) && p.name === name
            )
            return isObject(found) ? found.schema : undefined
          }
          expect(parameter("/v1/webhooks", "limit")).toMatchObject({
            type: "integer",
            minimum: 1,
            maximum: 100
          })
          expect(parameter("/user", "display")).toMatchObject({ type: "integer", minimum: 1, maximum: 100 })
          expect(parameter("/user", "page")).toMatchObject({ type: "integer", minimum: 1 })
          const schemas =
            isObject(spec.components) && isObject(spec.components.schemas) ? spec.components.schemas : {}
          expect(schemas.Date).toMatchObject({ type: "string", format: "date-time" })
          const property = (schema: string, name: string) => {
            const s = schemas[schema]
            return isObject(s) && isObject(s.properties) ? s.properties[name] : undefined
          }
          expect(property("Customer", "email")).toMatchObject({ format: "email" })
          expect(property("AuthUser", "email")).toMatchObject({ format: "email" })
          expect(property("Webhook", "url")).toMatchObject({ format: "uri" })
          expect(property("V1WebhookEndpoint", "url")).toMatchObject({ format: "uri" })
        })
    )

    it.effect("documents the body of an action whose fields are all optional as optional", () =>
      Effect.gen(function* () {
        const spec = yield* fetchSpec
        const body = (path: string) => {
          const op = operations(spec).find((o) => o.path === path && o.method === "post")?.operation
          return isObject(op) && isObject(op.requestBody) ? op.requestBody : undefined
        }
        for (const path of [
          "/v1/orders/{id}/cancel",
          "/v1/checkouts/{id}/confirm",
          "/notification/{id}/resend"
        ]) {
          const b = body(path)
          expect(b?.required, path).toBe(false)
          expect(JSON.stringify(b), path).not.toContain('"null"')
          expect(JSON.stringify(b), path).toContain('"type":"object"')
        }
        expect(body("/v1/checkouts")?.required).toBe(true)
      })
    )

    it.effect("documents Idempotency-Key as the middleware parses it", () =>
      Effect.gen(function* () {
        const spec = yield* fetchSpec
        const parameters =
          isObject(spec.components) && isObject(spec.components.parameters) ? spec.components.parameters : {}
        const key = parameters.IdempotencyKey
        const schema = isObject(key) && isObject(key.schema) ? key.schema : {}
        expect(schema).toMatchObject({ type: "string", minLength: 1, maxLength: 255 })
        const pattern = new RegExp(String(schema.pattern))
        // Over printable ASCII (what a header value can carry), the document allows exactly the keys
        // the middleware accepts.
        fc.assert(
          fc.property(
            fc.oneof(
              fc.string({ maxLength: 255 }),
              fc.string({ unit: fc.constantFrom(" ", '"', "\\", "a", "~"), maxLength: 6 })
            ),
            (value) => {
              expect(pattern.test(value), JSON.stringify(value)).toBe(
                Option.isSome(parseIdempotencyKey(value))
              )
            }
          ),
          { numRuns: 2000 }
        )
        for (const refused of ["", "   ", '""', ' "" ']) expect(pattern.test(refused), refused).toBe(false)
        for (const accepted of ["a", '" "', '"\\""', "k-1 2"])
          expect(pattern.test(accepted), accepted).toBe(true)
      })
    )

    it.effect("/docs serves HTML built on the same document", () =>
      Effect.gen(function* () {
        const spec = yield* fetchSpec
        const docs = yield* send("/docs")
        expect(docs.status).toBe(200)
        expect(docs.headers["content-type"]).toMatch(/text\/html/)
        expect(docs.text).toMatch(/^<!doctype html>/i)
        const embedded = /<script id="api-reference" type="application\/json">([\s\S]*?)<\/script>/.exec(
          docs.text
        )
        expect(embedded, "the docs page embeds the OpenAPI document").not.toBeNull()
        expect(JSON.parse(embedded?.[1] ?? "null")).toEqual(spec)
      })
    )
  })
})
