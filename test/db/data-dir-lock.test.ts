/**
 * The embedded data directory's lock, in-process: who holds it, when a holder counts as gone, and
 * what `exclusive` (the service) and `attach` (scripts) make of a live holder. A child process
 * stands in for the other owner. `test/db/embedded-lock.test.ts` runs the real service.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { once } from "node:events"
import { existsSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs"
import { hostname, tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { afterAll, beforeAll } from "vitest"
import { claimDataDir, type LockHolder, lockFileOf } from "../../src/db/DataDirLock.js"

let root = ""
let dir = ""
let other: ChildProcess

const pidStartOf = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? null
}

const lockOf = (pid: number, overrides: Partial<LockHolder> = {}): LockHolder => ({
  pid,
  hostname: hostname(),
  pidStart: existsSync(`/proc/${pid}/stat`) ? pidStartOf(pid) : null,
  command: "src/main.ts",
  startedAt: "2026-01-02T03:04:05.000Z",
  port: 40123,
  ...overrides
})

const writeLock = (holder: LockHolder) => writeFileSync(lockFileOf(dir), JSON.stringify(holder))
const readLock = (): LockHolder => JSON.parse(readFileSync(lockFileOf(dir), "utf8"))

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "cp-lock-"))
  other = spawn("sleep", ["60"], { stdio: "ignore" })
})

afterAll(() => {
  other.kill("SIGKILL")
  rmSync(root, { recursive: true, force: true })
})

const freshDir = () => mkdtempSync(join(root, "data-"))

describe("data directory lock", () => {
  it.live("a free directory is ours until the scope closes; the published port is what others read", () =>
    Effect.gen(function* () {
      dir = freshDir()
      const scope = yield* Scope.make()
      const claim = yield* claimDataDir(dir, "exclusive").pipe(Scope.extend(scope))
      expect(claim._tag).toBe("Owner")
      expect(readLock()).toMatchObject({ pid: process.pid, port: null })
      if (claim._tag === "Owner") yield* claim.publish(45678)
      expect(readLock()).toMatchObject({ pid: process.pid, port: 45678, hostname: hostname() })
      yield* Scope.close(scope, Exit.void)
      expect(existsSync(lockFileOf(dir))).toBe(false)
    })
  )

  it.live("a live holder: exclusive fails naming it and its port; attach gets the port", () =>
    Effect.gen(function* () {
      dir = freshDir()
      const pid = other.pid ?? 0
      writeLock(lockOf(pid))
      const refused = yield* Effect.flip(Effect.scoped(claimDataDir(dir, "exclusive")))
      expect(refused.reason).toBe("in_use")
      expect(refused.message).toBe(
        `embedded database ${dir} is in use by process ${pid} (src/main.ts, since 2026-01-02T03:04:05.000Z), which serves it on 127.0.0.1:40123; stop that process first (npm run migrate, admin:create, projections:rebuild and events:export attach to it instead)`
      )
      const attached = yield* Effect.scoped(claimDataDir(dir, "attach"))
      expect(attached).toMatchObject({ _tag: "Attach", port: 40123, holder: { pid } })
      // Neither touched the holder's lock.
      expect(readLock().pid).toBe(pid)
    })
  )

  it.live("attach waits while the holder is still opening the database, then gives up", () =>
    Effect.gen(function* () {
      dir = freshDir()
      writeLock(lockOf(other.pid ?? 0, { port: null }))
      const started = Date.now()
      const refused = yield* Effect.flip(Effect.scoped(claimDataDir(dir, "attach", { waitForPortMs: 300 })))
      expect(refused.reason).toBe("not_serving")
      expect(Date.now() - started).toBeGreaterThanOrEqual(300)
    })
  )

  it.live("a holder that is gone (kill -9), a reused pid, or our own pid is stale and taken over", () =>
    Effect.gen(function* () {
      const gone = spawn("true")
      yield* Effect.promise(() => once(gone, "exit"))
      const stale: ReadonlyArray<LockHolder> = [
        lockOf(gone.pid ?? 0, { pidStart: "1" }),
        // pid alive, but started at another time: not the process that wrote the lock.
        lockOf(other.pid ?? 0, { pidStart: "1" }),
        // A restarted container's service often gets its predecessor's pid.
        lockOf(process.pid, { pidStart: "1" })
      ]
      for (const holder of stale) {
        dir = freshDir()
        writeLock(holder)
        const claim = yield* Effect.scoped(
          Effect.tap(claimDataDir(dir, "exclusive"), () =>
            Effect.sync(() => expect(readLock().pid).toBe(process.pid))
          )
        )
        expect(claim._tag).toBe("Owner")
      }
    })
  )

  it.live("a lock from another host cannot be checked: refused, naming the file to delete", () =>
    Effect.gen(function* () {
      dir = freshDir()
      writeLock(lockOf(other.pid ?? 0, { hostname: "elsewhere" }))
      const refused = yield* Effect.flip(Effect.scoped(claimDataDir(dir, "attach")))
      expect(refused.reason).toBe("other_host")
      expect(refused.message).toContain(`on host elsewhere`)
      expect(refused.message).toContain(`delete ${lockFileOf(dir)}`)
    })
  )

  it.live("an unreadable lock is waited on briefly (being written), then taken over when old", () =>
    Effect.gen(function* () {
      dir = freshDir()
      writeFileSync(lockFileOf(dir), "")
      const old = new Date(Date.now() - 60_000)
      utimesSync(lockFileOf(dir), old, old)
      const claim = yield* Effect.scoped(claimDataDir(dir, "exclusive"))
      expect(claim._tag).toBe("Owner")
    })
  )
})
