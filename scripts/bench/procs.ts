/**
 * What `npm run bench:http` and `npm run bench:start` share: child processes (our service as
 * `npm start` runs it, `tsx src/main.ts`, and the peers), ports, and readings from /proc — CPU time
 * of a process, CPU time of the PostgreSQL backends serving an application, resident memory.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import { createServer } from "node:net"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"
import pg from "pg"

/** The repository root (scripts/bench/ is two levels down). */
export const ROOT = fileURLToPath(new URL("../../", import.meta.url))
const TSX_CLI = `${ROOT}node_modules/tsx/dist/cli.mjs`

/** Clock ticks per second of /proc's utime and stime (USER_HZ: 100 on Linux). */
const TICKS_PER_SECOND = 100
export const MICROS_PER_TICK = 1_000_000 / TICKS_PER_SECOND

/** A free TCP port on 127.0.0.1 (listen on 0, close, answer the port). */
export const freePort = Effect.async<number, Error>((resume) => {
  const server = createServer()
  server.once("error", (error) => resume(Effect.fail(error)))
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = address !== null && typeof address !== "string" ? address.port : 0
    server.close(() => resume(port > 0 ? Effect.succeed(port) : Effect.fail(new Error("no port"))))
  })
})

/** Fields 3… of /proc/<pid>/stat (after the command name, which may hold spaces), or none. */
const statFields = (pid: number): ReadonlyArray<string> | undefined => {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8")
    return text.slice(text.lastIndexOf(")") + 2).split(" ")
  } catch {
    return undefined
  }
}

/** utime + stime of a live process, in ticks (0 when it is gone). */
export const cpuTicks = (pid: number) => {
  const f = statFields(pid)
  // stat fields 14 and 15 (1-based), 11 and 12 here.
  return f === undefined ? 0 : Number(f[11]) + Number(f[12])
}

/** CPU ticks of a process and of its children it has waited for (fields 16 and 17: cutime, cstime). */
export const cpuTicksWithChildren = (pid: number) => {
  const f = statFields(pid)
  return f === undefined ? 0 : Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])
}

/** VmRSS of a process, in KiB (undefined when it is gone). */
export const rssKiB = (pid: number) => {
  try {
    const match = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return match?.[1] === undefined ? undefined : Number(match[1])
  } catch {
    return undefined
  }
}

/** The direct children of a process. */
export const childrenOf = (pid: number): ReadonlyArray<number> => {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8")
      .trim()
      .split(/\s+/)
      .filter((s) => s !== "")
      .map(Number)
  } catch {
    // Without CONFIG_PROC_CHILDREN: scan every process's parent.
    return readdirSync("/proc")
      .filter((name) => /^\d+$/.test(name))
      .map(Number)
      .filter((child) => Number(statFields(child)?.[1]) === pid)
  }
}

export interface Child {
  readonly process: ChildProcess
  /** The process doing the work (for tsx: the node process it starts), for /proc readings. */
  readonly pid: number
  /** Everything it wrote to stdout and stderr so far (the last 64 KiB), for error messages. */
  readonly output: () => string
  /** Resolves with the first stdout line that parses as JSON. */
  readonly firstJsonLine: Promise<unknown>
}

/**
 * Spawns `tsx <script>` (as `npm start` does: tsx's CLI starts a node process with its loader and
 * relays signals to it) in the repository root, with this environment changed by `env` (undefined
 * removes a variable); `pid` is that node process. Stopped (SIGTERM, then SIGKILL after 15 s) when
 * the scope closes.
 */
export const spawnTsx = (script: string, env: Readonly<Record<string, string | undefined>>) =>
  spawnChild([TSX_CLI, script], `tsx ${script}`, env, true)

/**
 * Spawns the service as `npm start` runs it (`node scripts/start.mjs`: the prebuilt bundle, rebuilt
 * first when stale), one node process; otherwise as `spawnTsx`.
 */
export const spawnStart = (env: Readonly<Record<string, string | undefined>>) =>
  spawnChild([...startFlags(), "scripts/start.mjs"], "scripts/start.mjs", env, false)

/**
 * The node flags `npm start` runs with: package.json's `start` script is
 * `node <flags> scripts/start.mjs`, so the benches run the service exactly as it is started.
 */
const startFlags = (): ReadonlyArray<string> => {
  const manifest: unknown = JSON.parse(readFileSync(`${ROOT}package.json`, "utf8"))
  const scripts =
    typeof manifest === "object" && manifest !== null ? Reflect.get(manifest, "scripts") : undefined
  const start = typeof scripts === "object" && scripts !== null ? Reflect.get(scripts, "start") : undefined
  const words = typeof start === "string" ? start.trim().split(/\s+/) : []
  if (words[0] !== "node" || words[words.length - 1] !== "scripts/start.mjs") {
    throw new Error(`package.json's start script is not "node [flags] scripts/start.mjs": ${String(start)}`)
  }
  return words.slice(1, -1)
}

const spawnChild = (
  argv: ReadonlyArray<string>,
  label: string,
  env: Readonly<Record<string, string | undefined>>,
  /** tsx's CLI: the work happens in the node process it starts. */
  launcher: boolean
) =>
  Effect.acquireRelease(
    Effect.gen(function* () {
      const merged: Record<string, string> = {}
      for (const [name, value] of Object.entries({ ...process.env, ...env }))
        if (value !== undefined) merged[name] = value
      const child = spawn(process.execPath, [...argv], {
        cwd: ROOT,
        env: merged,
        stdio: ["ignore", "pipe", "pipe"]
      })
      let output = ""
      let resolveLine: (value: unknown) => void = () => {}
      const firstJsonLine = new Promise<unknown>((resolve) => {
        resolveLine = resolve
      })
      let partial = ""
      const keep = (chunk: Buffer) => {
        output = (output + chunk.toString("utf8")).slice(-65_536)
      }
      child.stdout?.on("data", (chunk: Buffer) => {
        keep(chunk)
        partial += chunk.toString("utf8")
        let newline = partial.indexOf("\n")
        while (newline >= 0) {
          const line = partial.slice(0, newline)
          partial = partial.slice(newline + 1)
          try {
            resolveLine(JSON.parse(line))
          } catch {
            // Not JSON: keep reading.
          }
          newline = partial.indexOf("\n")
        }
      })
      child.stderr?.on("data", keep)
      const wrapper = child.pid
      if (wrapper === undefined) return yield* Effect.dieMessage(`could not spawn ${label}`)
      if (!launcher)
        return { process: child, pid: wrapper, output: () => output, firstJsonLine } satisfies Child
      // tsx's CLI starts the node process at once; wait for it (a few ms).
      let pid: number | undefined
      for (let i = 0; i < 400 && pid === undefined; i++) {
        pid = childrenOf(wrapper)[0]
        if (pid === undefined) {
          if (child.exitCode !== null) return yield* Effect.dieMessage(`${label} exited: ${output}`)
          yield* Effect.sleep("5 millis")
        }
      }
      if (pid === undefined) return yield* Effect.dieMessage(`${label} started no node process`)
      return { process: child, pid, output: () => output, firstJsonLine } satisfies Child
    }),
    (child) => stop(child)
  )

/** SIGTERM, then SIGKILL if it has not exited within 15 s. */
export const stop = (child: Child) =>
  Effect.async<void>((resume) => {
    const p = child.process
    if (p.exitCode !== null || p.signalCode !== null) return resume(Effect.void)
    const timer = setTimeout(() => p.kill("SIGKILL"), 15_000)
    p.once("exit", () => {
      clearTimeout(timer)
      resume(Effect.void)
    })
    p.kill("SIGTERM")
  })

/** Polls `url` every `everyMs` until it answers 200; fails after `timeoutMs` or if `child` exits. */
export const waitFor200 = (url: string, child: Child, timeoutMs = 120_000, everyMs = 20) =>
  Effect.gen(function* () {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const status = yield* Effect.promise(() =>
        fetch(url).then(
          (r) => r.arrayBuffer().then(() => r.status),
          () => 0
        )
      )
      if (status === 200) return
      if (child.process.exitCode !== null)
        return yield* Effect.dieMessage(`${url}: the process exited: ${child.output()}`)
      if (Date.now() > deadline) return yield* Effect.dieMessage(`${url} not 200 within ${timeoutMs} ms`)
      yield* Effect.sleep(`${everyMs} millis`)
    }
  })

// ---------------------------------------------------------------------------------------------------
// PostgreSQL backends

/**
 * CPU time of the PostgreSQL backends serving one application (`application_name`) in one
 * database, from /proc — not the whole cluster, which other processes on this machine share.
 * `sample` reads each such backend's utime + stime; `spent(before, after)` is what they used in
 * between: a backend that appeared counts from zero, one that exited in between is lost (`lost`
 * counts them: pools keep their connections, so it should stay 0).
 */
export const backendSampler = (client: pg.Client, database: string) => {
  const sample = (application: string) =>
    Effect.promise(async () => {
      const { rows } = await client.query<{ pid: number }>(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = $2",
        [database, application]
      )
      return new Map(rows.map((r) => [r.pid, cpuTicks(r.pid)] as const))
    })
  const spent = (before: ReadonlyMap<number, number>, after: ReadonlyMap<number, number>) => {
    let ticks = 0
    for (const [pid, t] of after) ticks += t - (before.get(pid) ?? 0)
    const lost = [...before.keys()].filter((pid) => !after.has(pid)).length
    return { micros: ticks * MICROS_PER_TICK, lost }
  }
  return { sample, spent }
}

/** A pg client on `url` (ended with the scope). */
export const pgClient = (url: string, applicationName: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new pg.Client({ connectionString: url, application_name: applicationName })
      await client.connect()
      return client
    }),
    (client) => Effect.promise(() => client.end()).pipe(Effect.ignore)
  )
