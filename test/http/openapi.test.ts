/**
 * The OpenAPI document the running service publishes: valid OpenAPI 3.1 by an independent
 * validator, every error response documented as the one error body (`{ "error": ErrorDetail }`)
 * with none of the internal `_tag` / `HttpApiDecodeError` leaking through, and `/docs` showing the
 * same document.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { describe, layer } from "@effect/vitest"
import { Validator } from "@seriousme/openapi-schema-validator"
import { Effect } from "effect"
import { expect } from "vitest"
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
