/**
 * `npm run build`: bundles src/main.ts and every package it imports, except PGlite (which loads its
 * WASM and data files from its own directory), into one ES module, dist/src/main.mjs, which
 * `npm start` (scripts/start.mjs) runs. Plain JavaScript, so it runs before anything is built.
 *
 * Why: through tsx's loader a start spends ~3 s of CPU loading modules (a worker thread transpiling
 * and resolving ~2,000 files, a message each way per file) and holds ~140 MB more RSS; the bundle
 * loads in ~0.5 s (issue #17 item 4, `npm run bench:start`).
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../", import.meta.url))
// dist/src/ mirrors src/: paths a module resolves relative to itself (`../../migrations/`) still hold.
export const bundle = `${root}dist/src/main.mjs`

/** Everything the bundle is built from (and this file, which says how). */
const INPUTS = [
  "src",
  "package.json",
  "package-lock.json",
  "node_modules/.package-lock.json",
  "scripts/build.mjs"
]

/** Newest modification time under `path` (a file or a directory tree), 0 when absent. */
const newest = (path) => {
  let stat
  try {
    stat = statSync(path)
  } catch {
    return 0
  }
  if (!stat.isDirectory()) return stat.mtimeMs
  let max = stat.mtimeMs
  for (const entry of readdirSync(path)) max = Math.max(max, newest(`${path}/${entry}`))
  return max
}

/** The bundle exists and is newer than every input. */
export const isFresh = () => {
  const built = newest(bundle)
  return built > 0 && Math.max(...INPUTS.map((input) => newest(`${root}${input}`))) < built
}

export const build = async () => {
  const esbuild = await import("esbuild")
  mkdirSync(`${root}dist/src`, { recursive: true })
  // Written aside and renamed: a concurrent start never imports a half-written file.
  const temporary = `${bundle}.${process.pid}.tmp`
  try {
    await esbuild.build({
      entryPoints: [`${root}src/main.ts`],
      outfile: temporary,
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      external: ["@electric-sql/pglite", "@electric-sql/pglite-socket"],
      // Bundled CommonJS packages require() Node's built-ins.
      banner: {
        js: 'import { createRequire as __bundleRequire } from "node:module"; const require = __bundleRequire(import.meta.url);'
      },
      logLevel: "error"
    })
    asciiOnly(temporary)
    renameSync(temporary, bundle)
  } finally {
    rmSync(temporary, { force: true })
  }
}

/**
 * Rewrites every non-ASCII character of the bundle as a `\uXXXX` escape. esbuild escapes them in
 * strings but keeps them in comments and regular expressions, and one character above U+00FF makes
 * V8 hold the module's whole source (which it keeps for lazy compilation) as a two-byte string:
 * 22 MB of the idle service's heap instead of 11. The escape means the same character in a string,
 * a template's cooked value, a regular expression or an identifier, and nothing in a comment.
 */
const asciiOnly = (file) => {
  const text = readFileSync(file, "utf8")
  let escaped = ""
  let from = 0
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i)
    if (unit < 0x80) continue
    escaped += `${text.slice(from, i)}\\u${unit.toString(16).padStart(4, "0")}`
    from = i + 1
  }
  if (from > 0) writeFileSync(file, escaped + text.slice(from))
}

/** Builds the bundle unless it is fresh. */
export const ensureBuilt = async () => {
  if (!isFresh()) await build()
}

if (import.meta.url === `file://${process.argv[1]}`) await build()
