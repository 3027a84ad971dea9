/**
 * `npm run lint:openapi`: writes the published OpenAPI document (scripts/openapi.ts) to
 * `tmp/openapi.json` and lints it with Redocly CLI (`redocly.yaml`: `recommended-strict`). Fails on
 * any problem, error or warning; the accepted exceptions are in `.redocly.lint-ignore.yaml`.
 */
import { spawnSync } from "node:child_process"
import { mkdirSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { OpenApi } from "@effect/platform"
import { Either, Schema } from "effect"
import { Api } from "../src/Api.js"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const target = "tmp/openapi.json"
mkdirSync(join(root, "tmp"), { recursive: true })
writeFileSync(join(root, target), `${JSON.stringify(OpenApi.fromApi(Api), null, 2)}\n`)

const run = spawnSync(join(root, "node_modules", ".bin", "redocly"), ["lint", target, "--format=json"], {
  cwd: root,
  encoding: "utf8",
  // No telemetry or update check: CI reaches no network but the package registries.
  env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" }
})

const Report = Schema.Struct({
  totals: Schema.Struct({ errors: Schema.Number, warnings: Schema.Number, ignored: Schema.Number }),
  problems: Schema.Array(
    Schema.Struct({
      ruleId: Schema.String,
      severity: Schema.String,
      message: Schema.String,
      location: Schema.Array(Schema.Struct({ pointer: Schema.optional(Schema.String) }))
    })
  )
})

/** The JSON report on stdout (after any banner the CLI prints first). */
const parse = (text: string) =>
  Either.getOrUndefined(Schema.decodeUnknownEither(Schema.parseJson(Report))(text.slice(text.indexOf("{"))))

const report = parse(run.stdout ?? "")
if (report === undefined) {
  process.stderr.write(`redocly lint gave no report (exit ${run.status}):\n${run.stdout}\n${run.stderr}\n`)
  process.exit(1)
}
for (const p of report.problems) {
  const where = p.location.map((l) => l.pointer ?? "").join(" ")
  process.stdout.write(`${p.severity} ${p.ruleId}: ${p.message} ${where}\n`)
}
const { errors, warnings, ignored } = report.totals
process.stdout.write(
  `openapi (redocly recommended-strict): ${errors} errors, ${warnings} warnings, ${ignored} ignored\n`
)
process.exit(errors + warnings === 0 && run.status === 0 ? 0 : 1)
