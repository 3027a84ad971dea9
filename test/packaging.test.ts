/**
 * The container packaging, read statically (no Docker engine needed): docker-compose.yml wires a
 * coherent production-like stack (PostgreSQL, the app, an SMTP catcher, a trace viewer — design §8),
 * and the Dockerfile builds an image that runs as a non-root user, answers its health check and
 * receives SIGTERM itself.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { parse } from "yaml"

const root = new URL("../", import.meta.url)
const read = (path: string): string => readFileSync(new URL(path, root), "utf8")

type JsonObject = Record<string, unknown>

const isObject = (value: unknown): value is JsonObject =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const object = (value: unknown, what: string): JsonObject => {
  if (!isObject(value)) throw new Error(`${what} is not a mapping`)
  return value
}

// ---------------------------------------------------------------------------------------------
// Compose variable interpolation (`$$`, `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`,
// `${VAR:?error}`, `${VAR?error}`, `${VAR:+alt}`, `${VAR+alt}`), resolved as if nothing is set.
// ---------------------------------------------------------------------------------------------

interface VarRef {
  readonly name: string
  /** `default` and `required` are safe when the variable is unset; `none` and `alternate` are not. */
  readonly marker: "default" | "required" | "alternate" | "none"
}

interface Interpolated {
  readonly text: string
  readonly refs: ReadonlyArray<VarRef>
}

const interpolate = (input: string): Interpolated => {
  let text = ""
  const refs: Array<VarRef> = []
  let i = 0
  while (i < input.length) {
    const c = input[i]
    if (c !== "$") {
      text += c
      i++
      continue
    }
    const next = input[i + 1]
    if (next === "$") {
      text += "$"
      i += 2
      continue
    }
    if (next === "{") {
      let depth = 1
      let j = i + 2
      while (j < input.length && depth > 0) {
        if (input[j] === "{") depth++
        else if (input[j] === "}") depth--
        j++
      }
      if (depth !== 0) throw new Error(`unterminated \${ in ${JSON.stringify(input)}`)
      const body = input.slice(i + 2, j - 1)
      const m = /^([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([\s\S]*))?$/.exec(body)
      if (!m?.[1]) throw new Error(`bad substitution \${${body}} in ${JSON.stringify(input)}`)
      const name = m[1]
      const op = m[2]
      const arg = m[3] ?? ""
      if (op === undefined) {
        refs.push({ name, marker: "none" })
      } else if (op.endsWith("-")) {
        const inner = interpolate(arg)
        refs.push({ name, marker: "default" }, ...inner.refs)
        text += inner.text
      } else if (op.endsWith("?")) {
        refs.push({ name, marker: "required" })
        text += `<${name}>`
      } else {
        refs.push({ name, marker: "alternate" })
      }
      i = j
      continue
    }
    const bare = /^[A-Za-z_][A-Za-z0-9_]*/.exec(input.slice(i + 1))
    if (bare) {
      refs.push({ name: bare[0], marker: "none" })
      i += 1 + bare[0].length
      continue
    }
    text += "$"
    i++
  }
  return { text, refs }
}

/** Every string value in the document (compose interpolates values, not keys). */
const strings = (node: unknown, path = ""): ReadonlyArray<{ path: string; value: string }> => {
  if (typeof node === "string") return [{ path, value: node }]
  if (Array.isArray(node)) return node.flatMap((v, i) => strings(v, `${path}[${i}]`))
  if (isObject(node)) return Object.entries(node).flatMap(([k, v]) => strings(v, path ? `${path}.${k}` : k))
  return []
}

// ---------------------------------------------------------------------------------------------
// Compose helpers
// ---------------------------------------------------------------------------------------------

const composeText = read("docker-compose.yml")
const compose = object(parse(composeText), "docker-compose.yml")
const services = object(compose.services, "services")
const service = (name: string): JsonObject => object(services[name], `service ${name}`)

/** A service's environment, either syntax, values interpolated as if nothing were set. */
const environment = (svc: JsonObject): ReadonlyMap<string, string | undefined> => {
  const env = new Map<string, string | undefined>()
  const raw = svc.environment
  if (Array.isArray(raw)) {
    for (const entry of raw) {
      const s = String(entry)
      const eq = s.indexOf("=")
      if (eq < 0) env.set(s, undefined)
      else env.set(s.slice(0, eq), interpolate(s.slice(eq + 1)).text)
    }
  } else if (isObject(raw)) {
    for (const [k, v] of Object.entries(raw)) {
      env.set(k, v === null || v === undefined ? undefined : interpolate(String(v)).text)
    }
  }
  return env
}

interface Published {
  readonly service: string
  readonly hostIp: string
  readonly hostPort: number
  readonly containerPort: number
  readonly protocol: string
}

const range = (spec: string): ReadonlyArray<number> => {
  const [from, to] = spec.split("-").map(Number)
  if (from === undefined || Number.isNaN(from)) throw new Error(`bad port ${spec}`)
  const end = to ?? from
  return Array.from({ length: end - from + 1 }, (_, k) => from + k)
}

/** Published ports of a service (short and long syntax); ports without a host port are skipped. */
const publishedPorts = (name: string, svc: JsonObject): ReadonlyArray<Published> => {
  const out: Array<Published> = []
  const list = Array.isArray(svc.ports) ? svc.ports : []
  for (const entry of list) {
    if (isObject(entry)) {
      if (entry.published === undefined) continue
      const hosts = range(interpolate(String(entry.published)).text)
      const target = Number(entry.target)
      for (const hostPort of hosts) {
        out.push({
          service: name,
          hostIp: typeof entry.host_ip === "string" ? entry.host_ip : "0.0.0.0",
          hostPort,
          containerPort: target,
          protocol: typeof entry.protocol === "string" ? entry.protocol : "tcp"
        })
      }
      continue
    }
    let spec = interpolate(String(entry)).text
    let protocol = "tcp"
    const slash = spec.lastIndexOf("/")
    if (slash >= 0) {
      protocol = spec.slice(slash + 1)
      spec = spec.slice(0, slash)
    }
    let hostIp = "0.0.0.0"
    const v6 = /^\[([^\]]+)\]:(.*)$/.exec(spec)
    if (v6?.[1] !== undefined && v6[2] !== undefined) {
      hostIp = v6[1]
      spec = v6[2]
    }
    const parts = spec.split(":")
    const container = parts.pop() ?? ""
    const host = parts.pop()
    if (parts.length > 0) hostIp = parts.join(":")
    if (host === undefined || host === "") continue
    const hosts = range(host)
    const containers = range(container)
    hosts.forEach((hostPort, k) => {
      out.push({
        service: name,
        hostIp,
        hostPort,
        containerPort: containers[k] ?? containers[0] ?? 0,
        protocol
      })
    })
  }
  return out
}

/** `15s`, `1m30s`, `500ms` → seconds. */
const durationSeconds = (value: string): number => {
  let total = 0
  const re = /(\d+(?:\.\d+)?)(ms|us|h|m|s)/g
  let consumed = 0
  for (let m = re.exec(value); m !== null; m = re.exec(value)) {
    const n = Number(m[1])
    const unit = m[2]
    total +=
      unit === "h" ? n * 3600 : unit === "m" ? n * 60 : unit === "ms" ? n / 1000 : unit === "us" ? n / 1e6 : n
    consumed += m[0].length
  }
  if (consumed !== value.length) throw new Error(`bad duration ${value}`)
  return total
}

const healthcheckText = (svc: JsonObject): string => {
  const hc = object(svc.healthcheck, "healthcheck")
  return Array.isArray(hc.test) ? hc.test.map(String).join(" ") : String(hc.test)
}

// ---------------------------------------------------------------------------------------------
// Source: which environment variables the service reads, and which packages it imports.
// ---------------------------------------------------------------------------------------------

const sourceFiles = (dir: string): ReadonlyArray<string> =>
  readdirSync(new URL(dir, root), { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sourceFiles(`${dir}${entry.name}/`)
      : entry.name.endsWith(".ts")
        ? [read(`${dir}${entry.name}`)]
        : []
  )

const srcText = sourceFiles("src/").join("\n")

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

/** Read as a string literal (`Config.string("PORT")`) or as `process.env.PORT`. */
const readBySource = (name: string): boolean =>
  new RegExp(`["'\`]${escapeRe(name)}["'\`]|process\\.env\\.${escapeRe(name)}\\b`).test(srcText)

/**
 * Given to the app for features still being written (design §8: mail and traces). Each is reported
 * as a to-do while no source file reads it, and is checked like every other variable once one does.
 */
const AWAITED: Readonly<Record<string, string>> = {
  OTEL_EXPORTER_OTLP_ENDPOINT: "the OpenTelemetry trace exporter"
}

const packageJson = object(JSON.parse(read("package.json")), "package.json")
const dependencies = object(packageJson.dependencies ?? {}, "dependencies")

// ---------------------------------------------------------------------------------------------
// Dockerfile
// ---------------------------------------------------------------------------------------------

interface Instruction {
  readonly keyword: string
  readonly args: string
}

interface Stage {
  readonly from: string
  readonly name: string | undefined
  readonly instructions: ReadonlyArray<Instruction>
}

const parseDockerfile = (text: string): { readonly args: ReadonlyMap<string, string>; stages: Stage[] } => {
  const logical: Array<string> = []
  let pending = ""
  for (const raw of text.split(/\r?\n/)) {
    const trimmed = raw.trim()
    if (trimmed.startsWith("#")) continue // comments (and parser directives), also inside continuations
    if (trimmed.endsWith("\\")) {
      pending += `${trimmed.slice(0, -1)} `
      continue
    }
    const line = (pending + trimmed).trim()
    pending = ""
    if (line !== "") logical.push(line)
  }
  if (pending.trim() !== "") logical.push(pending.trim())

  const args = new Map<string, string>()
  const stages: Array<Stage & { instructions: Instruction[] }> = []
  for (const line of logical) {
    const m = /^(\S+)\s*([\s\S]*)$/.exec(line)
    if (!m?.[1]) continue
    const keyword = m[1].toUpperCase()
    const rest = m[2] ?? ""
    if (keyword === "FROM") {
      const words = rest.split(/\s+/).filter((w) => !w.startsWith("--"))
      const image = (words[0] ?? "").replace(
        /\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?/g,
        (_, n: string) => args.get(n) ?? ""
      )
      const as = words[1]?.toUpperCase() === "AS" ? words[2] : undefined
      stages.push({ from: image, name: as, instructions: [] })
    } else if (stages.length === 0) {
      if (keyword === "ARG") {
        const [name, value] = rest.split("=", 2)
        if (name && value !== undefined) args.set(name.trim(), value.trim().replace(/^"(.*)"$/, "$1"))
      }
    } else {
      stages[stages.length - 1]?.instructions.push({ keyword, args: rest })
    }
  }
  return { args, stages }
}

const dockerfile = parseDockerfile(read("Dockerfile"))
const finalStage = dockerfile.stages[dockerfile.stages.length - 1]
const last = (keyword: string): Instruction | undefined =>
  finalStage?.instructions.filter((i) => i.keyword === keyword).pop()

/** Exec form: a JSON array of strings. */
const execForm = (args: string): ReadonlyArray<string> | undefined => {
  try {
    const parsed: unknown = JSON.parse(args)
    return Array.isArray(parsed) && parsed.every((a) => typeof a === "string") ? parsed : undefined
  } catch {
    return undefined
  }
}

/** `ENV A=1 B="two"` or legacy `ENV A 1`. */
const envOf = (stage: Stage | undefined): ReadonlyMap<string, string> => {
  const env = new Map<string, string>()
  for (const i of stage?.instructions ?? []) {
    if (i.keyword !== "ENV") continue
    if (!/^[A-Za-z_][A-Za-z0-9_]*=/.test(i.args)) {
      const [name, ...value] = i.args.split(/\s+/)
      if (name) env.set(name, value.join(" "))
      continue
    }
    for (const m of i.args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|\S*)/g)) {
      if (m[1] !== undefined) env.set(m[1], (m[2] ?? "").replace(/^"(.*)"$/, "$1"))
    }
  }
  return env
}

/** The external image a stage builds on, following `FROM <earlier stage>`. */
const baseImage = (stage: Stage): string => {
  const earlier = dockerfile.stages.find((s) => s !== stage && s.name !== undefined && s.name === stage.from)
  return earlier ? baseImage(earlier) : stage.from
}

// .dockerignore: later lines win, `!` re-includes, a pattern excludes a directory and all inside it.
const dockerignore = read(".dockerignore")
  .split(/\r?\n/)
  .map((l) => l.trim())
  .filter((l) => l !== "" && !l.startsWith("#"))

const globToRegExp = (pattern: string): RegExp => {
  const body = pattern
    .replace(/^\/+|\/+$/g, "")
    .split("")
    .map((ch, k, all) => {
      if (ch === "*") return all[k + 1] === "*" ? "" : all[k - 1] === "*" ? ".*" : "[^/]*"
      if (ch === "?") return "[^/]"
      return escapeRe(ch)
    })
    .join("")
  return new RegExp(`^${body}(/.*)?$`)
}

const ignoredByDocker = (path: string): boolean => {
  const clean = path.replace(/^\.\/+/, "").replace(/\/+$/, "")
  let ignored = false
  for (const line of dockerignore) {
    const negated = line.startsWith("!")
    const pattern = negated ? line.slice(1) : line
    if (globToRegExp(pattern).test(clean)) ignored = !negated
  }
  return ignored
}

// ---------------------------------------------------------------------------------------------

describe("docker-compose.yml", () => {
  const app = service("app")
  const appEnv = environment(app)

  it("has the four services, no obsolete `version`, pinned images", () => {
    expect(compose.version).toBeUndefined()
    expect(Object.keys(services)).toEqual(expect.arrayContaining(["postgres", "app", "mailpit", "jaeger"]))
    const expected: Record<string, RegExp> = {
      postgres: /^postgres:(\d+)/,
      mailpit: /^axllent\/mailpit:v?\d/,
      jaeger: /^jaegertracing\/all-in-one:\d/
    }
    for (const [name, pattern] of Object.entries(expected)) {
      expect(String(service(name).image), name).toMatch(pattern)
    }
    // design §2: PostgreSQL ≥ 14
    const major = Number(/^postgres:(\d+)/.exec(String(service("postgres").image))?.[1])
    expect(major).toBeGreaterThanOrEqual(14)
  })

  it("builds the app from this directory once PostgreSQL is healthy", () => {
    const build = app.build
    expect(isObject(build) ? build.context : build).toBe(".")
    const dependsOn = object(app.depends_on, "app.depends_on")
    expect(object(dependsOn.postgres, "depends_on.postgres").condition).toBe("service_healthy")
    expect(healthcheckText(service("postgres"))).toContain("pg_isready")
    expect(healthcheckText(app)).toContain("/health")
  })

  it("keeps PostgreSQL data in a declared named volume", () => {
    const declared = Object.keys(isObject(compose.volumes) ? compose.volumes : {})
    const mounts: Array<{ service: string; source: string; target: string }> = []
    for (const [name, svc] of Object.entries(services)) {
      const volumes = isObject(svc) && Array.isArray(svc.volumes) ? svc.volumes : []
      for (const v of volumes) {
        if (isObject(v))
          mounts.push({ service: name, source: String(v.source ?? ""), target: String(v.target) })
        else {
          const [source = "", target = ""] = String(v).split(":")
          mounts.push({ service: name, source, target })
        }
      }
    }
    const named = mounts.filter((m) => m.source !== "" && !/^[./~]/.test(m.source))
    for (const m of named) expect(declared, `${m.service} mounts ${m.source}`).toContain(m.source)
    expect(named).toContainEqual({
      service: "postgres",
      source: expect.any(String),
      target: "/var/lib/postgresql/data"
    })
  })

  it("lists every required variable in the header's copy-paste lines", () => {
    const required = [
      ...new Set(
        strings(compose).flatMap(({ value }) =>
          interpolate(value)
            .refs.filter((r) => r.marker === "required")
            .map((r) => r.name)
        )
      )
    ]
    expect(required).toEqual(expect.arrayContaining(["DATA_ENCRYPTION_KEY", "JWT_SECRET"]))
    // The comment block the file opens with.
    const lines = composeText.split("\n")
    const header = lines.slice(
      0,
      lines.findIndex((line) => !line.startsWith("#"))
    )
    const exported = header.flatMap((line) => {
      const m = /^#\s+export ([A-Z_][A-Z0-9_]*)=/.exec(line)
      return m?.[1] === undefined ? [] : [m[1]]
    })
    expect(required.filter((name) => !exported.includes(name))).toEqual([])
  })

  it("gives every compose variable a default or a required marker", () => {
    const unsafe = strings(compose).flatMap(({ path, value }) =>
      interpolate(value)
        .refs.filter((r) => r.marker !== "default" && r.marker !== "required")
        .map((r) => `${path}: ${r.name}`)
    )
    expect(unsafe).toEqual([])
    // Variables passed through from the host without a value are unset unless the user sets them.
    expect([...appEnv].filter(([, v]) => v === undefined).map(([k]) => k)).toEqual([])
  })

  it("runs the app in production with a required master key and token signing key", () => {
    expect(appEnv.get("NODE_ENV")).toBe("production")
    for (const name of ["DATA_ENCRYPTION_KEY", "JWT_SECRET"]) {
      const raw = object(app.environment, "app.environment")[name]
      expect(typeof raw, name).toBe("string")
      const refs = interpolate(String(raw)).refs
      expect(refs.map((r) => r.name)).toContain(name)
      expect(refs.every((r) => r.marker === "required")).toBe(true)
    }
  })

  it("points DATABASE_URL at the postgres service, its port, user, password and database", () => {
    const pgEnv = environment(service("postgres"))
    const url = new URL(appEnv.get("DATABASE_URL") ?? "")
    expect(["postgres:", "postgresql:"]).toContain(url.protocol)
    expect(url.hostname).toBe("postgres")
    expect(url.port === "" ? "5432" : url.port).toBe(pgEnv.get("PGPORT") ?? "5432")
    const user = pgEnv.get("POSTGRES_USER") ?? "postgres"
    expect(decodeURIComponent(url.username)).toBe(user)
    expect(decodeURIComponent(url.password)).toBe(pgEnv.get("POSTGRES_PASSWORD"))
    expect(url.pathname).toBe(`/${pgEnv.get("POSTGRES_DB") ?? user}`)
  })

  it("points SMTP_URL at the SMTP catcher's SMTP port", () => {
    const bind = environment(service("mailpit")).get("MP_SMTP_BIND_ADDR") ?? ":1025"
    const url = new URL(appEnv.get("SMTP_URL") ?? "")
    expect(url.protocol).toBe("smtp:")
    expect(url.hostname).toBe("mailpit")
    expect(url.port).toBe(bind.slice(bind.lastIndexOf(":") + 1))
  })

  it("points the OTLP endpoint at the trace viewer's OTLP/HTTP port", () => {
    const jaegerEnv = environment(service("jaeger"))
    expect(jaegerEnv.get("COLLECTOR_OTLP_ENABLED")).not.toBe("false")
    const hostPort = jaegerEnv.get("COLLECTOR_OTLP_HTTP_HOST_PORT") ?? ":4318"
    const url = new URL(appEnv.get("OTEL_EXPORTER_OTLP_ENDPOINT") ?? "")
    expect(url.protocol).toBe("http:")
    expect(url.hostname).toBe("jaeger")
    expect(url.port).toBe(hostPort.slice(hostPort.lastIndexOf(":") + 1))
  })

  it("publishes the app's port, the UIs, and no host port twice", () => {
    const published = Object.entries(services).flatMap(([name, svc]) =>
      publishedPorts(name, object(svc, name))
    )
    const seen = new Map<string, string>()
    const clashes: Array<string> = []
    for (const p of published) {
      const key = `${p.hostPort}/${p.protocol}`
      const owner = seen.get(key)
      if (owner !== undefined) clashes.push(`${key}: ${owner} and ${p.service}`)
      seen.set(key, p.service)
    }
    expect(clashes).toEqual([])
    const appPort = Number(appEnv.get("PORT") ?? 3000)
    expect(published).toContainEqual(expect.objectContaining({ service: "app", containerPort: appPort }))
    expect(published).toContainEqual(expect.objectContaining({ service: "mailpit", containerPort: 8025 }))
    expect(published).toContainEqual(expect.objectContaining({ service: "jaeger", containerPort: 16686 }))
  })

  it("gives the app longer to stop than its own shutdown budget", () => {
    const budget = Number(appEnv.get("SHUTDOWN_TIMEOUT_SECONDS") ?? 10)
    const grace = typeof app.stop_grace_period === "string" ? durationSeconds(app.stop_grace_period) : 10
    expect(grace).toBeGreaterThan(budget)
  })

  const unread = [...appEnv.keys()].filter((name) => !readBySource(name))
  it("gives the app only variables the source reads", () => {
    expect(readBySource("DATABASE_URL")).toBe(true) // the grep itself works
    expect(unread.filter((name) => !(name in AWAITED))).toEqual([])
  })
  for (const name of unread.filter((n) => n in AWAITED)) {
    it.todo(`${name} is read by src/ (${AWAITED[name]} is not written yet)`)
  }
})

describe("Dockerfile", () => {
  it("builds on a pinned Node ≥ 20 image", () => {
    expect(dockerfile.stages.length).toBeGreaterThan(0)
    for (const stage of dockerfile.stages) {
      const image = baseImage(stage)
      const m = /^(?:docker\.io\/)?(?:library\/)?node:(\d+)[^\s@]*(@sha256:[0-9a-f]{64})?$/.exec(image)
      expect(m, `FROM ${image}`).not.toBeNull()
      expect(Number(m?.[1])).toBeGreaterThanOrEqual(20)
    }
  })

  it("runs as a non-root user in production mode", () => {
    const user = last("USER")?.args.trim()
    expect(user).toBeDefined()
    expect(user?.split(":")[0]).not.toMatch(/^(root|0)$/)
    expect(envOf(finalStage).get("NODE_ENV")).toBe("production")
  })

  it("exposes the port compose maps for the app, and checks /health", () => {
    const exposed = (finalStage?.instructions ?? [])
      .filter((i) => i.keyword === "EXPOSE")
      .flatMap((i) => i.args.split(/\s+/).map((p) => Number(p.split("/")[0])))
    const appPort = Number(environment(service("app")).get("PORT") ?? envOf(finalStage).get("PORT") ?? 3000)
    expect(exposed).toContain(appPort)
    const appPublished = publishedPorts("app", service("app")).map((p) => p.containerPort)
    for (const port of appPublished) expect(exposed).toContain(port)
    const healthcheck = last("HEALTHCHECK")?.args ?? ""
    expect(healthcheck).toMatch(/\bCMD\b/)
    expect(healthcheck).not.toMatch(/^NONE\b/)
    expect(healthcheck).toContain("/health")
  })

  it("starts node directly with an exec-form CMD, so SIGTERM reaches it", () => {
    const cmd = last("CMD")
    expect(cmd).toBeDefined()
    const argv = execForm(cmd?.args ?? "")
    expect(argv, `CMD ${cmd?.args}`).toBeDefined()
    const entrypoint = last("ENTRYPOINT")
    const program = entrypoint ? execForm(entrypoint.args)?.[0] : argv?.[0]
    if (entrypoint) expect(execForm(entrypoint.args), `ENTRYPOINT ${entrypoint.args}`).toBeDefined()
    expect(program).toBeDefined()
    expect(["npm", "npx", "yarn", "pnpm", "sh", "/bin/sh", "bash", "/bin/bash"]).not.toContain(program)
    expect(argv).toContain("src/main.ts")
  })

  it("installs from the lockfile, and what runs at run time is a production dependency", () => {
    const runs = dockerfile.stages.flatMap((s) =>
      s.instructions.filter((i) => i.keyword === "RUN").map((i) => i.args)
    )
    expect(runs.some((r) => /\bnpm ci\b/.test(r))).toBe(true)
    const copies = dockerfile.stages.flatMap((s) => s.instructions.filter((i) => i.keyword === "COPY"))
    expect(copies.some((c) => c.args.split(/\s+/).includes("package-lock.json"))).toBe(true)
    // `npm ci --omit=dev` leaves devDependencies out: tsx and every package src/ imports must be
    // dependencies.
    const runtime = new Set<string>()
    if (/\btsx\b/.test(last("CMD")?.args ?? "")) runtime.add("tsx")
    for (const m of srcText.matchAll(/from\s+["']([^"'./][^"']*)["']/g)) {
      const spec = m[1] ?? ""
      if (spec.startsWith("node:")) continue
      const parts = spec.split("/")
      runtime.add(spec.startsWith("@") ? parts.slice(0, 2).join("/") : (parts[0] ?? spec))
    }
    expect([...runtime].filter((p) => !(p in dependencies))).toEqual([])
  })

  it("copies what the service needs, none of it excluded by .dockerignore", () => {
    const sources = (finalStage?.instructions ?? [])
      .filter((i) => i.keyword === "COPY" && !/--from=/.test(i.args))
      .flatMap((i) => {
        const words = i.args.split(/\s+/).filter((w) => !w.startsWith("--"))
        return words.slice(0, -1)
      })
    for (const needed of ["package.json", "src", "migrations"]) {
      expect(sources.map((s) => s.replace(/^\.\/+|\/+$/g, ""))).toContain(needed)
    }
    expect(sources.filter(ignoredByDocker)).toEqual([])
  })
})

/**
 * What `.dockerignore` may name without it being in the repository: things tools or people create
 * in a checkout, each with what makes it. Anything else it names must exist.
 */
const GENERATED: Readonly<Record<string, string>> = {
  node_modules: "npm install / npm ci",
  "**/node_modules": "npm install / npm ci",
  ".data": "the embedded database and the generated keys (DATA_DIR)",
  "**/.data": "the embedded database and the generated keys (DATA_DIR)",
  ".env": "local settings and secrets (the compose header suggests ./.env)",
  ".env.*": "local settings and secrets (.env.local, …)",
  "*.log": "logs (npm-debug.log, …)",
  coverage: "vitest run --coverage",
  tmp: "scratch files (.gitignore: /tmp/)"
}

describe(".dockerignore", () => {
  it("names no missing file: each entry exists in the repository or is something a tool generates", () => {
    const missing = dockerignore.filter((line) => {
      const negated = line.startsWith("!")
      const pattern = (negated ? line.slice(1) : line).replace(/^\/+|\/+$/g, "")
      // A re-included file must exist; an excluded one may also be generated.
      if (!negated && pattern in GENERATED) return false
      return /[*?[]/.test(pattern) || !existsSync(new URL(pattern, root))
    })
    expect(missing).toEqual([])
  })

  it("keeps node_modules, local data and secrets out of the build context", () => {
    for (const path of [
      "node_modules",
      "node_modules/effect/package.json",
      ".data",
      ".data/pglite",
      ".git",
      ".env"
    ]) {
      expect(ignoredByDocker(path), path).toBe(true)
    }
    for (const path of [
      "package.json",
      "package-lock.json",
      "src/main.ts",
      "migrations/0001_event_store.sql"
    ]) {
      expect(ignoredByDocker(path), path).toBe(false)
    }
  })
})

describe("package.json benchmark scripts", () => {
  it("run the service's code in-process with the node flags `npm start` runs it with", () => {
    const scripts = object(object(JSON.parse(read("package.json")), "package.json").scripts, "scripts")
    const start = String(scripts.start).split(/\s+/)
    expect(start[0]).toBe("node")
    const startFlags = start.slice(1, -1)
    expect(startFlags.length).toBeGreaterThan(0)
    const benches = Object.entries(scripts).filter(([name]) => name.startsWith("bench:"))
    expect(benches.length).toBeGreaterThan(5)
    for (const [name, command] of benches) {
      const words = String(command).split(/\s+/)
      // bench:http and bench:start spawn the service as `npm start` does (scripts/bench/procs.ts).
      if (words[0] === "tsx" && (name === "bench:http" || name === "bench:start")) continue
      expect(words.slice(0, 1 + startFlags.length), name).toEqual(["node", ...startFlags])
      expect(words.slice(1 + startFlags.length, -1), name).toEqual(["--import", "tsx"])
    }
  })
})
