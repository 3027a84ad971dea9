/**
 * Group commit (kernel/GroupCommit.ts) without a database: a write that records the groups it was
 * given, blocks on a latch when told to, and fails for poisoned items. What arrives while a write runs
 * goes together in the next; each caller gets its own result; a failed group is written again one
 * item at a time, so only the poisoned item fails.
 */
import { describe, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Option } from "effect"
import { expect } from "vitest"
import { makeGroupCommit } from "../../src/kernel/GroupCommit.js"

class Poisoned {
  readonly _tag = "Poisoned"
  constructor(readonly item: string) {}
}

/** A write over strings: `ok:<item>` per item; fails (or dies) on an item starting with `fail` (`die`). */
const recordingWrite = (options: { readonly latch?: Deferred.Deferred<void> } = {}) => {
  const groups: Array<ReadonlyArray<string>> = []
  const write = (items: ReadonlyArray<string>) =>
    Effect.gen(function* () {
      groups.push(items)
      if (groups.length === 1 && options.latch !== undefined) yield* Deferred.await(options.latch)
      const failing = items.find((i) => i.startsWith("fail"))
      if (failing !== undefined) return yield* Effect.fail(new Poisoned(failing))
      if (items.some((i) => i.startsWith("die"))) return yield* Effect.dieMessage("a defect in the write")
      return items.map((i) => `ok:${i}`)
    })
  return { groups, write }
}

/** Lets forked fibers reach their `submit` (the writer is one fiber; these are plain yields). */
const settle = Effect.repeatN(Effect.yieldNow(), 20)

describe("group commit", () => {
  it.scoped("a lone item is written at once; what arrives during a write goes together in the next", () =>
    Effect.gen(function* () {
      const latch = yield* Deferred.make<void>()
      const { groups, write } = recordingWrite({ latch })
      const commit = yield* makeGroupCommit({ max: 100, write })
      const first = yield* Effect.fork(commit.submit("a"))
      yield* settle
      expect(groups).toEqual([["a"]])
      const rest = yield* Effect.fork(
        Effect.all(["b", "c", "d", "e"].map(commit.submit), { concurrency: "unbounded" })
      )
      yield* settle
      // Still one write: the others wait for it.
      expect(groups).toEqual([["a"]])
      yield* Deferred.succeed(latch, undefined)
      expect(yield* Fiber.join(first)).toBe("ok:a")
      expect(yield* Fiber.join(rest)).toEqual(["ok:b", "ok:c", "ok:d", "ok:e"])
      expect(groups).toEqual([["a"], ["b", "c", "d", "e"]])
    })
  )

  it.scoped("groups hold at most `max` items", () =>
    Effect.gen(function* () {
      const latch = yield* Deferred.make<void>()
      const { groups, write } = recordingWrite({ latch })
      const commit = yield* makeGroupCommit({ max: 3, write })
      const all = yield* Effect.fork(
        Effect.all(
          Array.from({ length: 8 }, (_, i) => commit.submit(`x${i}`)),
          { concurrency: "unbounded" }
        )
      )
      yield* settle
      yield* Deferred.succeed(latch, undefined)
      expect(yield* Fiber.join(all)).toEqual(Array.from({ length: 8 }, (_, i) => `ok:x${i}`))
      expect(groups.every((g) => g.length <= 3)).toBe(true)
      expect(groups.flat().sort()).toEqual(Array.from({ length: 8 }, (_, i) => `x${i}`))
    })
  )

  it.scoped("a failed group is written again item by item: only the failing item fails, with its error", () =>
    Effect.gen(function* () {
      const latch = yield* Deferred.make<void>()
      const { groups, write } = recordingWrite({ latch })
      const commit = yield* makeGroupCommit({ max: 100, write })
      const head = yield* Effect.fork(commit.submit("head"))
      yield* settle
      const items = ["p", "fail-q", "r"]
      const rest = yield* Effect.fork(
        Effect.all(
          items.map((i) => Effect.exit(commit.submit(i))),
          { concurrency: "unbounded" }
        )
      )
      yield* settle
      yield* Deferred.succeed(latch, undefined)
      expect(yield* Fiber.join(head)).toBe("ok:head")
      const [p, q, r] = yield* Fiber.join(rest)
      expect(p).toEqual(Exit.succeed("ok:p"))
      expect(r).toEqual(Exit.succeed("ok:r"))
      expect(q !== undefined && Exit.isFailure(q) ? Cause.failureOption(q.cause) : Option.none()).toEqual(
        Option.some(new Poisoned("fail-q"))
      )
      expect(groups).toEqual([["head"], ["p", "fail-q", "r"], ["p"], ["fail-q"], ["r"]])
    })
  )

  it.scoped("a defect in a group's write is the defective item's alone", () =>
    Effect.gen(function* () {
      const latch = yield* Deferred.make<void>()
      const { write } = recordingWrite({ latch })
      const commit = yield* makeGroupCommit({ max: 100, write })
      const head = yield* Effect.fork(commit.submit("head"))
      yield* settle
      const rest = yield* Effect.fork(
        Effect.all(
          ["u", "die-v", "w"].map((i) => Effect.exit(commit.submit(i))),
          { concurrency: "unbounded" }
        )
      )
      yield* settle
      yield* Deferred.succeed(latch, undefined)
      yield* Fiber.join(head)
      const [u, v, w] = yield* Fiber.join(rest)
      expect(u).toEqual(Exit.succeed("ok:u"))
      expect(w).toEqual(Exit.succeed("ok:w"))
      expect(v !== undefined && Exit.isFailure(v) && Cause.isDie(v.cause)).toBe(true)
    })
  )
})
