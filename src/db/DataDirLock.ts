/**
 * One process owns an embedded data directory at a time. PGlite cannot share one: a second PGlite on
 * the same files keeps its own copy in memory and overwrites the first one's writes (or aborts), and
 * the `postmaster.pid` it writes names its WebAssembly pid (-42), not ours. So the owner holds
 * `<dataDir>/commerce-platform.lock`, created exclusively (O_EXCL), recording its pid, host, command,
 * start time and the 127.0.0.1 port on which it serves the database. Other processes either refuse
 * (a second service) or attach to that port (scripts). A lock whose process is gone (kill -9, crash)
 * is stale and taken over.
 */
import { closeSync, openSync, readFileSync, renameSync, statSync, unlinkSync, writeSync } from "node:fs"
import { hostname } from "node:os"
import { join, relative } from "node:path"
import { Data, Effect, Option, Schema, type Scope } from "effect"

const LockHolderSchema = Schema.Struct({
  pid: Schema.Int.pipe(Schema.positive()),
  hostname: Schema.String,
  /** Start time of the pid (Linux clock ticks since boot), to tell a reused pid apart. */
  pidStart: Schema.NullOr(Schema.String),
  /** The script or entry point (no arguments: they may carry passwords). */
  command: Schema.String,
  startedAt: Schema.String,
  /** Where it serves the database on 127.0.0.1; null while it is still opening it. */
  port: Schema.NullOr(Schema.Int.pipe(Schema.between(1, 65535)))
})

export interface LockHolder extends Schema.Schema.Type<typeof LockHolderSchema> {}

const decodeLock = Schema.decodeUnknownOption(Schema.parseJson(LockHolderSchema))

export class DataDirLocked extends Data.TaggedError("DataDirLocked")<{
  readonly dataDir: string
  readonly lockFile: string
  readonly holder: LockHolder
  readonly reason: "in_use" | "other_host" | "not_serving"
}> {
  override get message(): string {
    const h = this.holder
    const who = `process ${h.pid}${this.reason === "other_host" ? ` on host ${h.hostname}` : ""} (${h.command}, since ${h.startedAt})`
    const serving = h.port === null ? "which is still opening it" : `which serves it on 127.0.0.1:${h.port}`
    if (this.reason === "other_host")
      return `embedded database ${this.dataDir} is locked by ${who}; this host cannot reach it — if that process is gone, delete ${this.lockFile}`
    if (this.reason === "not_serving")
      return `embedded database ${this.dataDir} is in use by ${who}, which did not start serving it in time`
    return `embedded database ${this.dataDir} is in use by ${who}, ${serving}; stop that process first (npm run migrate, admin:create, projections:rebuild and events:export attach to it instead)`
  }
}

export const lockFileOf = (dataDir: string): string => join(dataDir, "commerce-platform.lock")

/** Field 22 of /proc/<pid>/stat (after the parenthesised command, which may hold spaces). */
const pidStartOf = (pid: number): string | null => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? null
  } catch {
    return null
  }
}

const me = (port: number | null): LockHolder => ({
  pid: process.pid,
  hostname: hostname(),
  pidStart: pidStartOf(process.pid),
  command: process.argv[1] ? relative(process.cwd(), process.argv[1]) || process.argv[1] : "node",
  startedAt: new Date().toISOString(),
  port
})

const errnoOf = (error: unknown): unknown =>
  typeof error === "object" && error !== null && "code" in error ? error.code : undefined

type Liveness = "alive" | "dead" | "other_host"

/** Whether the lock's process still runs (as far as this host can tell). */
export const livenessOf = (holder: LockHolder): Liveness => {
  // A restarted container often gets the previous run's pid: a lock naming us is not ours yet.
  if (holder.pid === process.pid) return "dead"
  if (holder.hostname !== hostname()) return "other_host"
  try {
    process.kill(holder.pid, 0)
  } catch (error) {
    // EPERM: it exists, under another user.
    return errnoOf(error) === "EPERM" ? "alive" : "dead"
  }
  const start = pidStartOf(holder.pid)
  return holder.pidStart !== null && start !== null && start !== holder.pidStart ? "dead" : "alive"
}

type Attempt =
  | { readonly _tag: "Acquired" }
  | { readonly _tag: "Held"; readonly holder: LockHolder; readonly raw: string }
  | { readonly _tag: "Unreadable"; readonly raw: string; readonly ageMs: number }

const tryCreate = (lockFile: string, holder: LockHolder): Attempt => {
  try {
    const fd = openSync(lockFile, "wx", 0o644)
    try {
      writeSync(fd, JSON.stringify(holder))
    } finally {
      closeSync(fd)
    }
    return { _tag: "Acquired" }
  } catch (error) {
    if (errnoOf(error) !== "EEXIST") throw error
  }
  let raw: string
  let ageMs: number
  try {
    raw = readFileSync(lockFile, "utf8")
    ageMs = Date.now() - statSync(lockFile).mtimeMs
  } catch (error) {
    // Released between our create and our read: try again.
    if (errnoOf(error) === "ENOENT") return { _tag: "Unreadable", raw: "", ageMs: 0 }
    throw error
  }
  // Unreadable: being written, or garbage.
  return Option.match(decodeLock(raw), {
    onNone: (): Attempt => ({ _tag: "Unreadable", raw, ageMs }),
    onSome: (holder): Attempt => ({ _tag: "Held", holder, raw })
  })
}

/** Removes the lock only if it still is the one judged stale (another process may have taken over). */
const removeIfUnchanged = (lockFile: string, raw: string): void => {
  try {
    if (readFileSync(lockFile, "utf8") === raw) unlinkSync(lockFile)
  } catch (error) {
    if (errnoOf(error) !== "ENOENT") throw error
  }
}

export type Claim =
  /** We own the directory until the scope closes; tell the others where we serve it. */
  | { readonly _tag: "Owner"; readonly publish: (port: number) => Effect.Effect<void> }
  /** A live process owns it and serves it on 127.0.0.1:`port`. */
  | { readonly _tag: "Attach"; readonly holder: LockHolder; readonly port: number }

/**
 * Takes the directory's lock, or — with `attach` — finds the live owner's port (waiting up to
 * `waitForPort` while the owner is still opening the database). `exclusive` fails when held.
 */
export const claimDataDir = (
  dataDir: string,
  mode: "exclusive" | "attach",
  options: { readonly waitForPortMs?: number } = {}
): Effect.Effect<Claim, DataDirLocked, Scope.Scope> =>
  Effect.gen(function* () {
    const lockFile = lockFileOf(dataDir)
    const deadline = Date.now() + (options.waitForPortMs ?? 60_000)
    for (;;) {
      const mine = me(null)
      const attempt = yield* Effect.sync(() => tryCreate(lockFile, mine))
      if (attempt._tag === "Acquired") {
        yield* Effect.addFinalizer(() => Effect.sync(() => releaseIfMine(lockFile)))
        return {
          _tag: "Owner",
          publish: (port: number) =>
            Effect.sync(() => {
              // Replaced atomically, so a reader never sees half a lock.
              const next = `${lockFile}.${process.pid}.tmp`
              const fd = openSync(next, "w", 0o644)
              try {
                writeSync(fd, JSON.stringify({ ...mine, port }))
              } finally {
                closeSync(fd)
              }
              renameSync(next, lockFile)
            })
        } satisfies Claim
      }
      if (attempt._tag === "Unreadable") {
        // Just created and not yet written, or left half-written by a crash.
        if (attempt.ageMs > 5_000) yield* Effect.sync(() => removeIfUnchanged(lockFile, attempt.raw))
        else yield* Effect.sleep("50 millis")
        continue
      }
      const { holder } = attempt
      const liveness = livenessOf(holder)
      if (liveness === "dead") {
        yield* Effect.logWarning(
          `taking over the stale lock ${lockFile} of process ${holder.pid} (${holder.command}, since ${holder.startedAt}), which is gone`
        )
        yield* Effect.sync(() => removeIfUnchanged(lockFile, attempt.raw))
        continue
      }
      if (liveness === "other_host") {
        return yield* new DataDirLocked({ dataDir, lockFile, holder, reason: "other_host" })
      }
      if (mode === "exclusive")
        return yield* new DataDirLocked({ dataDir, lockFile, holder, reason: "in_use" })
      if (holder.port !== null) return { _tag: "Attach", holder, port: holder.port } satisfies Claim
      if (Date.now() > deadline) {
        return yield* new DataDirLocked({ dataDir, lockFile, holder, reason: "not_serving" })
      }
      yield* Effect.sleep("100 millis")
    }
  })

const releaseIfMine = (lockFile: string): void => {
  try {
    const holder = decodeLock(readFileSync(lockFile, "utf8"))
    if (Option.isSome(holder) && holder.value.pid === process.pid) unlinkSync(lockFile)
  } catch {
    // already gone
  }
}
