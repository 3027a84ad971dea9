/**
 * Makes the generated OpenAPI document describe what clients really receive: error bodies are
 * `{ "error": {…} }` without the internal `_tag`, and schema-decode failures arrive as the
 * documented 400 `BadRequest` body (the middleware rewrites them), not as `HttpApiDecodeError`.
 */
type Json = unknown

const DECODE_REF = "#/components/schemas/HttpApiDecodeError"

const rewrite = (node: Json): Json => {
  if (Array.isArray(node)) return node.map(rewrite)
  if (typeof node !== "object" || node === null) return node
  const obj = node as Record<string, Json>
  const out: Record<string, Json> = {}
  for (const [key, value] of Object.entries(obj)) out[key] = rewrite(value)
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
