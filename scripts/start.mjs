/**
 * `npm start`: the service from the prebuilt bundle dist/src/main.mjs (scripts/build.mjs says why),
 * rebuilt first when it is missing or older than anything it is built from, so
 * `npm install && npm start` needs no extra step and an edited source never runs stale. When it
 * cannot be built (a read-only checkout), the service runs through tsx as before. One process: the
 * service receives SIGTERM itself. `tsx src/main.ts` still runs the sources directly.
 */
import { pathToFileURL } from "node:url"
import { bundle, ensureBuilt } from "./build.mjs"

const load = async () => {
  try {
    await ensureBuilt()
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error)
    process.stderr.write(`could not build ${bundle} (${reason}); running src/main.ts through tsx\n`)
    const { tsImport } = await import("tsx/esm/api")
    return tsImport("../src/main.ts", import.meta.url)
  }
  return import(pathToFileURL(bundle).href)
}

const main = await load()
main.runService()
