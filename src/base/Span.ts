/**
 * Spans on hot paths. With tracing off (no OTLP endpoint: observability/Tracing), `Effect.withSpan`
 * still makes the no-op span and provides it as the parent (a copy of the fiber's service map and
 * ~35 fiber steps) for nothing to read; `withSpanWhenTracing` skips that and is `Effect.withSpan`
 * otherwise.
 */
import { Effect, FiberRef, type Tracer } from "effect"

export const withSpanWhenTracing =
  (name: string, options: Tracer.SpanOptions) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.withFiberRuntime((fiber) =>
      fiber.getFiberRef(FiberRef.currentTracerEnabled) ? Effect.withSpan(self, name, options) : self
    )
