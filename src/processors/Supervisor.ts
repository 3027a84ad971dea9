/**
 * Supervised background processors: each processor is a long-lived loop run as a fiber in a scope.
 * A processor that fails, dies or returns is restarted with exponential back-off and the cause is
 * logged; closing the scope interrupts every processor (their transactions roll back, their
 * finalizers release leases). A status registry answers `/ready` and `/metrics`.
 */
import { Cause, Clock, Context, Duration, Effect, Exit, Layer, Option, Ref, type Scope } from "effect"
import { unreachableInCause, unreachableReason } from "../db/Reachability.js"

/** A named long-lived loop. It should never return; if it does, it is restarted like a failure. */
export interface Processor<R = never> {
  readonly name: string
  readonly run: Effect.Effect<void, unknown, R>
}

/** The services a processor (or a union of processors) needs. */
export type ProcessorContext<P> = P extends Processor<infer R> ? R : never

/** `p.run` typed with the context extracted from `P` (TypeScript cannot relate the two itself). */
const runOf = <P extends Processor<unknown>>(p: P) =>
  p.run as Effect.Effect<void, unknown, ProcessorContext<P>>

export const processor = <R>(name: string, run: Effect.Effect<void, unknown, R>): Processor<R> => ({
  name,
  run
})

export type ProcessorState = "running" | "backing-off" | "stopped"

export interface ProcessorStatus {
  readonly name: string
  readonly state: ProcessorState
  /** How many times the processor was restarted after a failure since it was started. */
  readonly restarts: number
  readonly lastError: string | null
  readonly lastStartedAt: Date | null
  readonly lastFailedAt: Date | null
  /** When the next restart is due (while backing off). */
  readonly nextStartAt: Date | null
}

export interface SupervisorOptions {
  /** First restart delay (default 100 ms); doubles on each consecutive failure. */
  readonly initialBackoff?: Duration.DurationInput
  /** Upper bound of the restart delay (default 30 s). */
  readonly maxBackoff?: Duration.DurationInput
  /** A run that lasted at least this long resets the back-off (default 1 minute). */
  readonly healthyAfter?: Duration.DurationInput
}

export interface SupervisorShape {
  /**
   * Forks each processor in the current scope; closing the scope stops them. Names must be unique
   * among processors that have not stopped.
   */
  readonly start: <P extends Processor<unknown>>(
    processors: ReadonlyArray<P>
  ) => Effect.Effect<void, never, ProcessorContext<P> | Scope.Scope>
  /** Every processor started so far, in start order (stopped ones included). */
  readonly status: Effect.Effect<ReadonlyArray<ProcessorStatus>>
  readonly statusOf: (name: string) => Effect.Effect<Option.Option<ProcessorStatus>>
}

export class Supervisor extends Context.Tag("processors/Supervisor")<Supervisor, SupervisorShape>() {}

/** A short, single-line description of a failure, for status and metrics. */
export const causeMessage = (cause: Cause.Cause<unknown>): string => {
  if (Cause.isInterruptedOnly(cause)) return "interrupted"
  const error = Cause.squash(cause)
  if (error instanceof Error) {
    const tag = (error as { _tag?: unknown })._tag
    const prefix = typeof tag === "string" ? tag : error.name
    return error.message ? `${prefix}: ${error.message}` : prefix
  }
  if (typeof error === "object" && error !== null) {
    const tag = (error as { _tag?: unknown })._tag
    if (typeof tag === "string") return tag
  }
  return String(error)
}

export const makeSupervisor = (options: SupervisorOptions = {}) =>
  Effect.gen(function* () {
    const initial = Duration.toMillis(options.initialBackoff ?? "100 millis")
    const max = Duration.toMillis(options.maxBackoff ?? "30 seconds")
    const healthyAfter = Duration.toMillis(options.healthyAfter ?? "1 minute")
    const registry = yield* Ref.make<ReadonlyMap<string, ProcessorStatus>>(new Map())

    const update = (name: string, f: (s: ProcessorStatus) => ProcessorStatus) =>
      Ref.update(registry, (map) => {
        const current = map.get(name)
        if (!current) return map
        const next = new Map(map)
        next.set(name, f(current))
        return next
      })

    const register = (name: string) =>
      Ref.modify(registry, (map): [boolean, ReadonlyMap<string, ProcessorStatus>] => {
        const existing = map.get(name)
        if (existing && existing.state !== "stopped") return [false, map]
        const next = new Map(map)
        next.set(name, {
          name,
          state: "backing-off",
          restarts: 0,
          lastError: null,
          lastStartedAt: null,
          lastFailedAt: null,
          nextStartAt: null
        })
        return [true, next]
      })

    const supervise = <R>(p: Processor<R>): Effect.Effect<never, never, R> =>
      Effect.gen(function* () {
        let backoff = initial
        while (true) {
          const startedAt = yield* Clock.currentTimeMillis
          yield* update(p.name, (s) => ({
            ...s,
            state: "running",
            lastStartedAt: new Date(startedAt),
            nextStartAt: null
          }))
          const exit = yield* Effect.exit(p.run)
          const endedAt = yield* Clock.currentTimeMillis
          if (endedAt - startedAt >= healthyAfter) backoff = initial
          const message = Exit.isFailure(exit) ? causeMessage(exit.cause) : "returned"
          yield* update(p.name, (s) => ({
            ...s,
            state: "backing-off",
            restarts: s.restarts + 1,
            lastError: message,
            lastFailedAt: new Date(endedAt),
            nextStartAt: new Date(endedAt + backoff)
          }))
          const unreachable = Exit.isFailure(exit) ? unreachableInCause(exit.cause) : Option.none()
          if (Option.isSome(unreachable)) {
            // An outage, not a bug: one warning line per restart, without the stack.
            yield* Effect.logWarning(
              `processor ${p.name} stopped: database unreachable (${unreachableReason(unreachable.value)}); restarting in ${backoff} ms`
            )
          } else if (Exit.isFailure(exit)) {
            yield* Effect.logError(`processor ${p.name} failed; restarting in ${backoff} ms`, exit.cause)
          } else {
            yield* Effect.logWarning(`processor ${p.name} returned; restarting in ${backoff} ms`)
          }
          yield* Effect.sleep(Duration.millis(backoff))
          backoff = Math.min(backoff * 2, max)
        }
      }).pipe(
        Effect.ensuring(update(p.name, (s) => ({ ...s, state: "stopped", nextStartAt: null }))),
        Effect.annotateLogs("processor", p.name)
      )

    const supervisor: SupervisorShape = {
      start: (processors) =>
        Effect.forEach(
          processors,
          (p) =>
            Effect.flatMap(register(p.name), (fresh) =>
              fresh
                ? Effect.asVoid(Effect.forkScoped(supervise({ name: p.name, run: runOf(p) })))
                : Effect.dieMessage(`processor ${p.name} is already running`)
            ),
          { discard: true }
        ),
      status: Effect.map(Ref.get(registry), (map) => [...map.values()]),
      statusOf: (name) => Effect.map(Ref.get(registry), (map) => Option.fromNullable(map.get(name)))
    }
    return supervisor
  })

export const SupervisorLive = (options?: SupervisorOptions) =>
  Layer.effect(Supervisor, makeSupervisor(options))

/** Starts `processors` under the `Supervisor` for the lifetime of the layer. */
export const processorsLayer = <P extends Processor<unknown>>(
  processors: ReadonlyArray<P>
): Layer.Layer<never, never, Supervisor | ProcessorContext<P>> =>
  Layer.scopedDiscard(Effect.flatMap(Supervisor, (s) => s.start(processors)))
