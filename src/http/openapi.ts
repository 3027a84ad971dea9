/**
 * Makes the generated OpenAPI document describe what clients really receive: error bodies are
 * `{ "error": {…} }` without the internal `_tag`, and schema-decode failures arrive as the
 * documented 400 `BadRequest` body (the middleware rewrites them), not as `HttpApiDecodeError`.
 * Free-form values (metadata) lose the `$id` Effect gives every `Schema.Unknown`.
 */
import type { RouteRule } from "./Auth.js"

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

export const cleanOpenApi = (spec: Record<string, unknown>): Record<string, unknown> => {
  const cleaned = rewrite(spec) as Record<string, unknown>
  const components = (cleaned.components ?? {}) as { schemas?: Record<string, unknown> }
  const schemas = components.schemas ?? {}
  const text = JSON.stringify({ ...cleaned, components: { ...components, schemas: {} } })
  for (const name of ["HttpApiDecodeError", "Issue", "PropertyKey"]) {
    if (!text.includes(`#/components/schemas/${name}"`)) delete schemas[name]
  }
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
  return spec
}
