/**
 * `/docs`: the Scalar API reference of the OpenAPI document, the page `HttpApiScalar.layer` of
 * @effect/platform serves, built on the first request instead of at start. That layer builds it
 * eagerly, and its inline Scalar script (3.4 MB of source, a 6.5 MB string once evaluated) then
 * sits in every idle service's heap (issue #17: the idle footprint). Here the script module is
 * imported from the platform's package when `/docs` is first asked for; should that fail, the page
 * loads Scalar from its CDN (what `HttpApiScalar.layerCdn` serves) rather than not at all.
 */
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { pathToFileURL } from "node:url"
import { HttpApi, HttpApiBuilder, type HttpRouter, HttpServerResponse, OpenApi } from "@effect/platform"
import { Effect } from "effect"

const escapeText = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
const escapeAttribute = (s: string) => escapeText(s).replace(/"/g, "&quot;").replace(/'/g, "&#39;")
/** JSON safe inside a `<script>` block (as the platform's `escapeJson`). */
const escapeJson = (value: unknown) =>
  JSON.stringify(value)
    .replace(/</g, "\\u003c")
    .replace(/[\u2028\u2029]/g, (c) => (c === "\u2028" ? "\\u2028" : "\\u2029"))

const CDN_SCRIPT = "https://cdn.jsdelivr.net/npm/@scalar/api-reference@latest/dist/browser/standalone.min.js"

/** The platform's inline Scalar script, read from its package (not bundled: loaded on demand). */
const inlineScalar = (): Promise<string | undefined> =>
  Promise.resolve()
    .then(() => {
      const manifest = createRequire(import.meta.url).resolve("@effect/platform/package.json")
      return import(pathToFileURL(join(dirname(manifest), "dist/esm/internal/httpApiScalar.js")).href)
    })
    .then(
      (module: unknown) =>
        typeof module === "object" &&
        module !== null &&
        "javascript" in module &&
        typeof module.javascript === "string"
          ? module.javascript
          : undefined,
      () => undefined
    )

/** The page, as the platform's `makeHandler` writes it. */
const page = (spec: OpenApi.OpenAPISpec, script: string | undefined) => `<!doctype html>
<html>
  <head>
    <meta charset="utf-8" />
    <title>${escapeText(spec.info.title)}</title>
    ${!spec.info.description ? "" : `<meta name="description" content="${escapeAttribute(spec.info.description)}"/>`}
    ${!spec.info.description ? "" : `<meta name="og:description" content="${escapeAttribute(spec.info.description)}"/>`}
    <meta
      name="viewport"
      content="width=device-width, initial-scale=1" />
  </head>
  <body>
    <script id="api-reference" type="application/json">
      ${escapeJson(spec)}
    </script>
    <script>
      document.getElementById('api-reference').dataset.configuration = JSON.stringify(${escapeJson({ _integration: "html" })})
    </script>
    ${script === undefined ? `<script src="${escapeAttribute(CDN_SCRIPT)}" crossorigin></script>` : `<script>${script}</script>`}
  </body>
</html>`

/** `GET <path>`: the API reference page, built once, on its first request. */
export const docsLayer = (path: HttpRouter.PathInput = "/docs") =>
  HttpApiBuilder.Router.use((router) =>
    Effect.gen(function* () {
      const { api } = yield* HttpApi.Api
      const built = yield* Effect.cached(
        Effect.promise(() => inlineScalar().then((script) => page(OpenApi.fromApi(api), script)))
      )
      yield* router.get(
        path,
        Effect.map(built, (html) => HttpServerResponse.html(html))
      )
    })
  )
