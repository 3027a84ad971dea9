/**
 * Makes the generated OpenAPI document describe what clients really receive: error bodies are
 * `{ "error": {…} }` without the internal `_tag`, and schema-decode failures arrive as the
 * documented 400 `BadRequest` body (the middleware rewrites them), not as `HttpApiDecodeError`.
 * Free-form values (metadata) lose the `$id` Effect gives every `Schema.Unknown`. What HttpApi cannot
 * express — the headers the middleware reads and writes, the 429s and idempotency answers it adds,
 * which other methods a path refuses — is added by `documentHttpConventions`.
 */
import type { RouteRule } from "./Auth.js"
import { isStoredStatus, UNSAFE_METHODS } from "./Idempotency.js"
import type { AllowedMethods } from "./middleware.js"
import { API_RATE_LIMITED_PREFIX, AUTH_RATE_LIMITED_PREFIXES } from "./RateLimit.js"

type Json = unknown

const DECODE_REF = "#/components/schemas/HttpApiDecodeError"

const rewrite = (node: Json): Json => {
  if (Array.isArray(node)) return node.map(rewrite)
  if (typeof node !== "object" || node === null) return node
  const obj = node as Record<string, Json>
  const out: Record<string, Json> = {}
  for (const [key, value] of Object.entries(obj)) {
    // Effect marks every `Schema.Unknown` with the same `$id`, which must be unique in a document.
    if (key === "$id" && value === "/schemas/unknown") continue
    out[key] = rewrite(value)
  }
  const anyOf = out.anyOf
  if (Array.isArray(anyOf) && anyOf.length > 1) {
    const kept = anyOf.filter((s) => (s as { $ref?: unknown }).$ref !== DECODE_REF)
    if (kept.length === 1 && Object.keys(out).length === 1) return kept[0]
    out.anyOf = kept
  }
  const props = out.properties as Record<string, Json> | undefined
  if (props && "error" in props && "_tag" in props) {
    const { _tag: _, ...rest } = props
    out.properties = rest
    if (Array.isArray(out.required)) out.required = out.required.filter((r) => r !== "_tag")
  }
  return out
}

/** Groups that share a title (public and authenticated routes of one subject) are one tag. */
const mergeTags = (tags: unknown): unknown => {
  if (!Array.isArray(tags)) return tags
  const byName = new Map<unknown, Record<string, unknown>>()
  for (const tag of tags) {
    if (typeof tag !== "object" || tag === null) continue
    const entry = tag as Record<string, unknown>
    const seen = byName.get(entry.name)
    if (seen === undefined) byName.set(entry.name, { ...entry })
    else for (const [key, value] of Object.entries(entry)) seen[key] ??= value
  }
  return [...byName.values()]
}

/** Every `Schema.Date` in a response is written with `toISOString()`. */
const TIMESTAMP = {
  type: "string",
  format: "date-time",
  description: "A UTC timestamp (ISO 8601 / RFC 3339), e.g. 2026-01-31T12:00:00.000Z"
}

export const cleanOpenApi = (spec: Record<string, unknown>): Record<string, unknown> => {
  const cleaned = rewrite(spec) as Record<string, unknown>
  const components = (cleaned.components ?? {}) as { schemas?: Record<string, unknown> }
  const schemas = components.schemas ?? {}
  const text = JSON.stringify({ ...cleaned, components: { ...components, schemas: {} } })
  for (const name of ["HttpApiDecodeError", "Issue", "PropertyKey"]) {
    if (!text.includes(`#/components/schemas/${name}"`)) delete schemas[name]
  }
  if (schemas.Date !== undefined) schemas.Date = TIMESTAMP
  cleaned.tags = mergeTags(cleaned.tags)
  return cleaned
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * States each operation's required scope (from the route table) where clients look for it: in its
 * security requirement (OpenAPI 3.1 allows role names for non-OAuth schemes) and its description.
 */
export const documentScopes = (
  spec: Record<string, unknown>,
  scopes: ReadonlyMap<string, RouteRule>
): Record<string, unknown> => {
  const paths = spec.paths
  if (!isRecord(paths)) return spec
  for (const [path, item] of Object.entries(paths)) {
    if (!isRecord(item)) continue
    const routePath = path.replace(/\{([^}]+)\}/g, ":$1")
    for (const [method, operation] of Object.entries(item)) {
      if (!isRecord(operation) || !Array.isArray(operation.security)) continue
      const rule = scopes.get(`${method.toUpperCase()} ${routePath}`)
      if (rule === undefined) continue
      operation.security = operation.security.map((requirement) =>
        isRecord(requirement)
          ? Object.fromEntries(Object.keys(requirement).map((name) => [name, [rule.scope]]))
          : requirement
      )
      const note = rule.staffOnly
        ? `Requires the \`${rule.scope}\` scope, on a staff credential: shoppers get 403.`
        : `Requires the \`${rule.scope}\` scope.`
      operation.description =
        typeof operation.description === "string" ? `${operation.description}\n\n${note}` : note
    }
  }
  const schemes = isRecord(spec.components) ? spec.components.securitySchemes : undefined
  if (isRecord(schemes)) {
    const list = [...new Set([...scopes.values()].map((rule) => rule.scope))].sort()
    for (const scheme of Object.values(schemes)) {
      if (!isRecord(scheme)) continue
      const lead = typeof scheme.description === "string" ? `${scheme.description}. ` : ""
      scheme.description =
        `${lead}Each operation states the scope it requires; \`admin\` (or \`*\`) grants every scope. ` +
        `Scopes: ${list.map((scope) => `\`${scope}\``).join(", ")}.`
    }
  }
  return spec
}

// --- What the middleware adds to every operation -------------------------------------------------

const HTTP_METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"] as const

const header = (description: string, schema: Record<string, unknown>) => ({ description, schema })

/** Response headers, defined once and referred to from each response. */
const HEADERS = {
  RequestId: header(
    "This request's id (`req_…`), also in every error body as `requestId`: quote it when reporting a problem.",
    { type: "string" }
  ),
  RateLimitLimit: header("The bucket size: how many requests may be made at once.", {
    type: "integer",
    minimum: 1
  }),
  RateLimitRemaining: header("Requests left in the bucket after this one.", { type: "integer", minimum: 0 }),
  RateLimitReset: header("Seconds until the bucket is full again (0: it is full).", {
    type: "integer",
    minimum: 0
  }),
  RetryAfter: header("Seconds to wait before trying again.", { type: "integer", minimum: 1 }),
  IdempotentReplayed: header(
    "`true` when this is the stored response of an earlier request with the same `Idempotency-Key` " +
      "(its body keeps the original `requestId`).",
    { type: "string", enum: ["true"] }
  )
} as const

const ref = (kind: "headers" | "parameters" | "schemas", name: string) => ({
  $ref: `#/components/${kind}/${name}`
})

const IDEMPOTENCY_KEY = {
  name: "Idempotency-Key",
  in: "header",
  required: false,
  description:
    "Makes a retry safe: 1–255 printable ASCII characters, unique per request, kept 24 hours per " +
    "credential. The same key with the same request answers the stored response again (with " +
    "`Idempotent-Replayed: true`); with another request → 422 `idempotency_key_reused`; while the first " +
    "still runs → 409 `idempotency_request_in_progress`. Rejections before any side effect (400, 401, " +
    "403, 404, 405, 408, 413, 415, 429) and 5xx are not stored: retry them with the same key.",
  // Trimmed, and the quoted form `"…"` means its content: at least one visible character, not `""`.
  schema: {
    type: "string",
    minLength: 1,
    maxLength: 255,
    pattern: '^(?!\\s*""\\s*$)[\\x20-\\x7E]*[\\x21-\\x7E][\\x20-\\x7E]*$'
  }
}

const errorResponse = (description: string, schema: string) => ({
  description,
  content: { "application/json": { schema: ref("schemas", schema) } }
})

const isRateLimited = (path: string) =>
  [API_RATE_LIMITED_PREFIX, ...AUTH_RATE_LIMITED_PREFIXES].some(
    (prefix) => path === prefix || path.startsWith(`${prefix}/`)
  )

/**
 * Documents what the HTTP middleware does around every handler (src/http/Server.ts): the
 * `Request-Id` header on every response; on unsafe methods the `Idempotency-Key` request header, its
 * 409/422 answers and `Idempotent-Replayed`; on rate-limited routes the `RateLimit-*` headers and the
 * 429 with `Retry-After`; on every path, the 405 (with `Allow`, as `allowFor` computes it for the
 * middleware) any other method gets.
 */
export const documentHttpConventions = (
  spec: Record<string, unknown>,
  allowFor: AllowedMethods
): Record<string, unknown> => {
  const components = isRecord(spec.components) ? spec.components : {}
  spec.components = components
  components.headers = { ...(isRecord(components.headers) ? components.headers : {}), ...HEADERS }
  components.parameters = {
    ...(isRecord(components.parameters) ? components.parameters : {}),
    IdempotencyKey: IDEMPOTENCY_KEY
  }
  const paths = isRecord(spec.paths) ? spec.paths : {}
  for (const [path, item] of Object.entries(paths)) {
    if (!isRecord(item)) continue
    for (const method of HTTP_METHODS) {
      const operation = item[method]
      if (isRecord(operation)) documentOperation(path, method.toUpperCase(), operation)
    }
    // As the router matches: a static path may also be answered by a template (`/notification/{id}`).
    const allow = allowFor(path.toLowerCase())
    if (allow !== undefined)
      item.description = `A method not in \`Allow: ${allow}\` → 405 \`method_not_allowed\` with that header.`
  }
  return spec
}

/**
 * A JSON body that may be `null` is one the request may leave out (`OptionalFieldsBody`: no body at
 * all reads as `{}`): documented as an optional request body of the object alone.
 */
const documentOptionalBody = (operation: Record<string, unknown>) => {
  const body = operation.requestBody
  if (!isRecord(body) || !isRecord(body.content)) return
  const json = body.content["application/json"]
  if (!isRecord(json) || !isRecord(json.schema) || !Array.isArray(json.schema.anyOf)) return
  const members: ReadonlyArray<unknown> = json.schema.anyOf
  const objects = members.filter((m) => !(isRecord(m) && m.type === "null"))
  if (objects.length === members.length || objects.length !== 1) return
  json.schema = objects[0]
  body.required = false
}

const documentOperation = (path: string, method: string, operation: Record<string, unknown>) => {
  documentOptionalBody(operation)
  const responses = isRecord(operation.responses) ? operation.responses : {}
  operation.responses = responses
  const unsafe = UNSAFE_METHODS.has(method)
  const limited = isRateLimited(path)
  if (unsafe) {
    const parameters = Array.isArray(operation.parameters) ? operation.parameters : []
    operation.parameters = [...parameters, ref("parameters", "IdempotencyKey")]
    responses["409"] ??= errorResponse(
      "Another request with this `Idempotency-Key` is still running (`idempotency_request_in_progress`)",
      "Conflict"
    )
    responses["422"] ??= errorResponse(
      "This `Idempotency-Key` was used with another request (`idempotency_key_reused`)",
      "IdempotencyKeyReused"
    )
  }
  if (limited) responses["429"] ??= errorResponse("Rate limit exceeded (`rate_limited`)", "TooManyRequests")
  for (const [status, response] of Object.entries(responses)) {
    if (!isRecord(response)) continue
    const headers: Record<string, unknown> = {
      ...(isRecord(response.headers) ? response.headers : {}),
      "Request-Id": ref("headers", "RequestId")
    }
    if (limited) {
      headers["RateLimit-Limit"] = ref("headers", "RateLimitLimit")
      headers["RateLimit-Remaining"] = ref("headers", "RateLimitRemaining")
      headers["RateLimit-Reset"] = ref("headers", "RateLimitReset")
    }
    if (status === "429") headers["Retry-After"] = ref("headers", "RetryAfter")
    if (unsafe && isStoredStatus(Number(status)))
      headers["Idempotent-Replayed"] = ref("headers", "IdempotentReplayed")
    response.headers = headers
  }
}
