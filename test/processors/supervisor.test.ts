import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, HashMap, Layer, Logger, Option, Ref, Scope, TestClock } from "effect"
import {
  makeSupervisor,
  type ProcessorStatus,
  processor,
  processorsLayer,
  Supervisor,
  SupervisorLive
} from "../../src/processors/Supervisor.js"

/** Lets forked fibers run until they block (on the TestClock or otherwise). */
const settle = Effect.repeatN(Effect.yieldNow(), 50)

const statusOf = (sup: Effect.Effect.Success<ReturnType<typeof makeSupervisor>>, name: string) =>
  Effect.flatMap(sup.statusOf(name), (s) =>
    Option.match(s, {
      onNone: () => Effect.dieMessage(`no status for ${name}`),
      onSome: (v): Effect.Effect<ProcessorStatus> => Effect.succeed(v)
    })
  )

const counter = () => Ref.make(0)

describe("Supervisor", () => {
  it.scoped("restarts a failing processor with doubling, capped back-off and keeps the others running", () =>
    Effect.gen(function* () {
      const sup = yield* makeSupervisor({ initialBackoff: "100 millis", maxBackoff: "1 second" })
      const attempts = yield* counter()
      const ticks = yield* counter()
      yield* sup.start([
        processor(
          "failing",
          Effect.zipRight(
            Ref.update(attempts, (n) => n + 1),
            Effect.fail(new Error("boom"))
          )
        ),
        processor(
          "healthy",
          Effect.forever(
            Effect.zipRight(
              Ref.update(ticks, (n) => n + 1),
              Effect.sleep("50 millis")
            )
          )
        )
      ])
      yield* settle
      expect(yield* Ref.get(attempts)).toBe(1)
      const first = yield* statusOf(sup, "failing")
      expect(first.state).toBe("backing-off")
      expect(first.restarts).toBe(1)
      expect(first.lastError).toBe("Error: boom")
      expect(first.nextStartAt?.getTime()).toBe(100)

      // Restarts happen at 100, 300, 700, 1500 (100·2ⁿ), then every 1000 ms (the cap).
      const expectAttemptsAt = (advanceMs: number, expected: number) =>
        Effect.gen(function* () {
          yield* TestClock.adjust(`${advanceMs} millis`)
          yield* settle
          expect(yield* Ref.get(attempts)).toBe(expected)
        })
      yield* expectAttemptsAt(99, 1)
      yield* expectAttemptsAt(1, 2)
      yield* expectAttemptsAt(199, 2)
      yield* expectAttemptsAt(1, 3)
      yield* expectAttemptsAt(400, 4)
      yield* expectAttemptsAt(800, 5)
      yield* expectAttemptsAt(999, 5)
      yield* expectAttemptsAt(1, 6)
      yield* expectAttemptsAt(1000, 7)

      const failing = yield* statusOf(sup, "failing")
      expect(failing.restarts).toBe(7)
      expect(failing.lastStartedAt?.getTime()).toBe(3500)
      const healthy = yield* statusOf(sup, "healthy")
      expect(healthy.state).toBe("running")
      expect(healthy.restarts).toBe(0)
      expect(healthy.lastError).toBeNull()
      expect(yield* Ref.get(ticks)).toBeGreaterThanOrEqual(70)
    })
  )

  it.scoped("resets the back-off after a healthy run, and restarts defects and returns too", () =>
    Effect.gen(function* () {
      const sup = yield* makeSupervisor({
        initialBackoff: "100 millis",
        maxBackoff: "10 seconds",
        healthyAfter: "5 seconds"
      })
      yield* sup.start([
        // Fails after running 10 s each time: always restarted after the initial delay.
        processor("long-runs", Effect.zipRight(Effect.sleep("10 seconds"), Effect.fail("tired"))),
        processor(
          "dies",
          Effect.sync(() => {
            throw new Error("defect")
          })
        ),
        processor("returns", Effect.void)
      ])
      yield* settle
      for (let i = 0; i < 3; i++) {
        yield* TestClock.adjust("10 seconds")
        yield* settle
        const s = yield* statusOf(sup, "long-runs")
        expect(s.restarts).toBe(i + 1)
        expect(s.lastError).toBe("tired")
        expect((s.nextStartAt?.getTime() ?? 0) - (s.lastFailedAt?.getTime() ?? 0)).toBe(100)
        yield* TestClock.adjust("100 millis")
        yield* settle
      }
      const dies = yield* statusOf(sup, "dies")
      expect(dies.lastError).toBe("Error: defect")
      expect(dies.restarts).toBeGreaterThan(3)
      const returns = yield* statusOf(sup, "returns")
      expect(returns.lastError).toBe("returned")
      expect(returns.restarts).toBeGreaterThan(3)
    })
  )

  it.scoped("logs each failure as an error, with the processor's name and the cause", () =>
    Effect.gen(function* () {
      const logs: Array<{ level: string; message: unknown; processor: unknown; cause: string }> = []
      const capture = Logger.make(({ logLevel, message, annotations, cause }) => {
        logs.push({
          level: logLevel.label,
          message,
          processor: HashMap.get(annotations, "processor").pipe(Option.getOrUndefined),
          cause: Cause.pretty(cause)
        })
      })
      const sup = yield* makeSupervisor()
      yield* sup
        .start([processor("noisy", Effect.fail(new Error("kaput")))])
        .pipe(Effect.provide(Logger.add(capture)))
      yield* settle
      const [entry] = logs
      expect(entry?.level).toBe("ERROR")
      expect(entry?.processor).toBe("noisy")
      expect(String(entry?.message)).toContain("processor noisy failed")
      expect(entry?.cause).toContain("kaput")
    })
  )

  it.effect("closing the scope stops every processor and runs its finalizers", () =>
    Effect.gen(function* () {
      const sup = yield* makeSupervisor()
      const finalized = yield* counter()
      const scope = yield* Scope.make()
      yield* sup
        .start([processor("worker", Effect.never.pipe(Effect.ensuring(Ref.update(finalized, (n) => n + 1))))])
        .pipe(Scope.extend(scope))
      yield* settle
      expect((yield* statusOf(sup, "worker")).state).toBe("running")
      yield* Scope.close(scope, Exit.void)
      expect(yield* Ref.get(finalized)).toBe(1)
      const stopped = yield* statusOf(sup, "worker")
      expect(stopped.state).toBe("stopped")
      expect(stopped.restarts).toBe(0)
    })
  )

  it.scoped("refuses two running processors with the same name", () =>
    Effect.gen(function* () {
      const sup = yield* makeSupervisor()
      yield* sup.start([processor("twin", Effect.never)])
      const exit = yield* Effect.exit(sup.start([processor("twin", Effect.never)]))
      expect(Exit.isFailure(exit)).toBe(true)
    })
  )

  it.effect("processorsLayer starts processors for the lifetime of the layer", () =>
    Effect.gen(function* () {
      const ran = yield* counter()
      const layer = processorsLayer([
        processor(
          "layered",
          Effect.zipRight(
            Ref.update(ran, (n) => n + 1),
            Effect.never
          )
        )
      ]).pipe(Layer.provideMerge(SupervisorLive()))
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(layer, scope)
      yield* settle
      const sup = Layer.succeedContext(context)
      const status = yield* Effect.flatMap(Supervisor, (s) => s.status).pipe(Effect.provide(sup))
      expect(status.map((s) => [s.name, s.state])).toEqual([["layered", "running"]])
      expect(yield* Ref.get(ran)).toBe(1)
      yield* Scope.close(scope, Exit.void)
      const after = yield* Effect.flatMap(Supervisor, (s) => s.status).pipe(Effect.provide(sup))
      expect(after[0]?.state).toBe("stopped")
    })
  )
})
