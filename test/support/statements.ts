/** Counting the SQL statements an effect sends, for tests that pin round trips. */
import { Effect, Tracer } from "effect"

/**
 * Runs `effect` and counts the SQL statements it sends (@effect/sql opens one "sql.execute" span
 * each), with tracing on for it (the tests otherwise run with tracing off, as the service does).
 */
export const countStatements = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const native = yield* Effect.tracer
    let statements = 0
    const counting = Tracer.make({
      span: (name, parent, context, links, startTime, kind, options) => {
        if (name === "sql.execute") statements++
        return native.span(name, parent, context, links, startTime, kind, options)
      },
      context: (f, fiber) => native.context(f, fiber)
    })
    const result = yield* Effect.withTracer(effect, counting).pipe(Effect.withTracerEnabled(true))
    return { result, statements }
  })
