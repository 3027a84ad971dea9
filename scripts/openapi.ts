/**
 * `npm run -s openapi [-- --out file]`: the OpenAPI document the service publishes at `/openapi.json`
 * (the root HttpApi with its transform), built without a database or a server, as JSON on stdout or
 * in `file`. `npm run lint:openapi` lints it with Redocly.
 */
import { writeFileSync } from "node:fs"
import { OpenApi } from "@effect/platform"
import { Api } from "../src/Api.js"

const args = process.argv.slice(2)
const outAt = args.indexOf("--out")
const text = `${JSON.stringify(OpenApi.fromApi(Api), null, 2)}\n`
const out = outAt === -1 ? undefined : args[outAt + 1]
if (outAt !== -1 && out === undefined) {
  process.stderr.write("usage: npm run -s openapi [-- --out file]\n")
  process.exit(2)
}
if (out === undefined) process.stdout.write(text)
else writeFileSync(out, text)
