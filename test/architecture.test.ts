/**
 * The layering of `src/`, read statically (no database): every relative import of every source file
 * (static, re-export and dynamic, as the TypeScript compiler finds them) is checked against
 *
 * (a) the context rule: a file of bounded context X imports nothing of context Y but `Y/index.ts`
 *     (its public face), and the composition at the top of `src/` only `Y/index.ts` or `Y/module.ts`;
 * (b) the floors: an import never goes from a lower floor to a higher one;
 * and every context has its `index.ts` and `module.ts`, and none imports `flows/` (design/FLOWS.md).
 *
 * No allowlist: a failure names the offending import. Tests and scripts may import internals.
 */
import { readdirSync, readFileSync } from "node:fs"
import { dirname, join, posix, relative, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), "../src")

/** The bounded contexts (same floor; they reach each other only through `<context>/index.ts`). */
const CONTEXTS = [
  "identity",
  "customers",
  "notifications",
  "webhooks",
  "events",
  "catalog",
  "checkout",
  "orders",
  "payments",
  "billing",
  "flows"
] as const

/**
 * The floors, bottom-up. A folder of `src/` is listed by name, a file at the top of `src/` by its
 * file name; every other file at the top of `src/` is the composition (the top floor).
 */
const FLOORS: ReadonlyArray<{ readonly name: string; readonly members: ReadonlyArray<string> }> = [
  { name: "base", members: ["base", "config.ts", "logging.ts"] },
  { name: "db", members: ["db"] },
  { name: "eventstore", members: ["eventstore"] },
  { name: "kernel", members: ["kernel"] },
  { name: "processors", members: ["processors"] },
  { name: "audit", members: ["audit"] },
  { name: "observability", members: ["observability"] },
  { name: "http", members: ["http"] },
  { name: "contexts", members: CONTEXTS },
  { name: "composition", members: [] }
]

const COMPOSITION = FLOORS.length - 1

interface Located {
  /** Path relative to `src/`, with `/`. */
  readonly path: string
  /** The folder (or top-level file) that places it. */
  readonly unit: string
  readonly floor: number
}

const locate = (path: string): Located => {
  const parts = path.split("/")
  const top = parts.length === 1
  const unit = parts[0] ?? path
  const floor = FLOORS.findIndex((f) => f.members.includes(unit))
  if (floor >= 0) return { path, unit, floor }
  if (top) return { path, unit, floor: COMPOSITION }
  throw new Error(`src/${unit}/ is on no floor: add it to FLOORS (or CONTEXTS) in test/architecture.test.ts`)
}

const isContext = (unit: string): boolean => CONTEXTS.some((c) => c === unit)

const sourceFiles = (dir: string): ReadonlyArray<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(full)
    return entry.name.endsWith(".ts") ? [full] : []
  })

interface Import {
  readonly from: Located
  readonly to: Located
  /** As written in the source. */
  readonly specifier: string
}

/** Every relative import of `src/`, resolved to a path relative to `src/` (`.js` → `.ts`). */
const imports = (): ReadonlyArray<Import> =>
  sourceFiles(SRC).flatMap((file) => {
    const from = locate(relative(SRC, file).split("\\").join("/"))
    const info = ts.preProcessFile(readFileSync(file, "utf8"), true, true)
    return info.importedFiles
      .map((f) => f.fileName)
      .filter((specifier) => specifier.startsWith("."))
      .map((specifier) => {
        const target = posix
          .normalize(posix.join(posix.dirname(from.path), specifier))
          .replace(/\.js$/, ".ts")
        return { from, to: locate(target), specifier }
      })
  })

const describeImport = (i: Import) =>
  `src/${i.from.path} imports "${i.specifier}" (src/${i.to.path}): ${FLOORS[i.from.floor]?.name} → ${FLOORS[i.to.floor]?.name}`

describe("architecture", () => {
  const all = imports()

  it("finds the imports it checks", () => {
    expect(all.length).toBeGreaterThan(100)
    expect(all.some((i) => i.to.path === "kernel/CommandRunner.ts")).toBe(true)
  })

  it("a context imports nothing of another context but its index.ts", () => {
    const offending = all.filter(
      (i) =>
        isContext(i.from.unit) &&
        isContext(i.to.unit) &&
        i.from.unit !== i.to.unit &&
        i.to.path !== `${i.to.unit}/index.ts`
    )
    expect(offending.map(describeImport)).toEqual([])
  })

  it("the composition imports a context only through its index.ts or module.ts", () => {
    const offending = all.filter(
      (i) =>
        !isContext(i.from.unit) &&
        isContext(i.to.unit) &&
        i.to.path !== `${i.to.unit}/index.ts` &&
        i.to.path !== `${i.to.unit}/module.ts`
    )
    expect(offending.map(describeImport)).toEqual([])
  })

  it("no context imports a flow (flows call contexts' ports, never the other way)", () => {
    const offending = all.filter(
      (i) => isContext(i.from.unit) && i.from.unit !== "flows" && i.to.unit === "flows"
    )
    expect(offending.map(describeImport)).toEqual([])
  })

  it("every context has its public face (index.ts) and its registration (module.ts)", () => {
    const present = readdirSync(SRC, { withFileTypes: true })
      .filter((entry) => entry.isDirectory() && isContext(entry.name))
      .map((entry) => entry.name)
    const missing = present.flatMap((context) =>
      ["index.ts", "module.ts"]
        .filter((file) => !readdirSync(join(SRC, context)).includes(file))
        .map((file) => `src/${context}/${file}`)
    )
    expect(present.length).toBeGreaterThanOrEqual(4)
    expect(missing).toEqual([])
  })

  it("no import goes from a lower floor to a higher one", () => {
    const offending = all.filter((i) => i.to.floor > i.from.floor)
    expect(offending.map(describeImport)).toEqual([])
  })

  it("the checks catch what they are for", () => {
    const at = (path: string) => locate(path)
    const upward: Import = { from: at("kernel/UseCase.ts"), to: at("http/middleware.ts"), specifier: "x" }
    expect(upward.to.floor).toBeGreaterThan(upward.from.floor)
    expect(describeImport(upward)).toContain("kernel → http")
    expect(at("main.ts").floor).toBe(COMPOSITION)
    expect(at("config.ts").floor).toBe(0)
    expect(() => at("somewhere/new.ts")).toThrow(/on no floor/)
  })
})
