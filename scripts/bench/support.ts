/**
 * What the benchmark scripts share: their database — a throw-away `cp_bench_<random>` database on
 * the DATABASE_URL server (this machine only), dropped when the scope closes, or none (embedded
 * PGlite) without DATABASE_URL — and how they print their results.
 */
import { randomBytes } from "node:crypto"
import { Console, Effect, Option } from "effect"
import pg from "pg"

const LOCAL_HOSTS = new Set(["127.0.0.1", "localhost", "::1", "[::1]"])

/** The server benchmarks run against, when DATABASE_URL is set. */
export const serverUrl = process.env.DATABASE_URL?.trim() || undefined

const withDatabase = (url: string, database: string) => {
  const u = new URL(url)
  u.pathname = `/${database}`
  return u.toString()
}

const admin = async <T>(url: string, f: (c: pg.Client) => Promise<T>) => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await f(client)
  } finally {
    await client.end()
  }
}

/** Creates `cp_bench_<random>` on the DATABASE_URL server (dropped when the scope closes). */
export const scratchDatabase = Effect.gen(function* () {
  if (!serverUrl) return Option.none<string>()
  const host = new URL(serverUrl).hostname
  if (!LOCAL_HOSTS.has(host)) {
    return yield* Effect.dieMessage(
      `the bench only runs against this machine; DATABASE_URL points at ${host}`
    )
  }
  const name = `cp_bench_${randomBytes(5).toString("hex")}`
  yield* Effect.acquireRelease(
    Effect.promise(() => admin(serverUrl, (c) => c.query(`CREATE DATABASE ${name}`))),
    () =>
      Effect.promise(() =>
        admin(serverUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
      ).pipe(
        Effect.tap(() => Console.log(`dropped scratch database ${name}`)),
        Effect.ignore
      )
  )
  yield* Console.log(`scratch database ${name} on ${host}`)
  return Option.some(withDatabase(serverUrl, name))
})

/** Prints rows (the first is the header) as a Markdown table with aligned columns. */
export const printTable = (rows: ReadonlyArray<ReadonlyArray<string>>) =>
  Effect.gen(function* () {
    const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length))) ?? []
    const line = (r: ReadonlyArray<string>) => `| ${r.map((c, i) => c.padEnd(widths[i] ?? 0)).join(" | ")} |`
    yield* Console.log("")
    yield* Console.log(line(rows[0] ?? []))
    yield* Console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`)
    for (const r of rows.slice(1)) yield* Console.log(line(r))
    yield* Console.log("")
  })
