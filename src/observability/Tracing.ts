/**
 * OpenTelemetry tracing through `@effect/opentelemetry`: every Effect span (HTTP server and client,
 * `sql.execute`, `CommandRunner.execute`, `EventStore.append`, subscription batches, RPC calls) goes
 * to the span processor. Production: a BatchSpanProcessor with the OTLP/HTTP exporter, on only when
 * `OTEL_EXPORTER_OTLP_ENDPOINT` is set. Tests inject their own processor (in-memory exporter).
 */
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import { HttpMiddleware } from "@effect/platform"
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http"
import { BatchSpanProcessor, type SpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Effect, Layer, Option } from "effect"
import { AppConfig } from "../config.js"

export interface TracingOptions {
  readonly serviceName: string
  readonly serviceVersion?: string
  readonly spanProcessor: SpanProcessor | ReadonlyArray<SpanProcessor>
}

/** The tracing layer with an injectable span processor. Provide it below everything that traces. */
export const tracingLayer = (options: TracingOptions) =>
  NodeSdk.layer(() => ({
    resource: {
      serviceName: options.serviceName,
      ...(options.serviceVersion === undefined ? {} : { serviceVersion: options.serviceVersion })
    },
    spanProcessor: options.spanProcessor
  }))

/** `OTEL_EXPORTER_OTLP_ENDPOINT` is a base URL; traces go to `<base>/v1/traces`. */
export const otlpTracesUrl = (endpoint: string): string => {
  const base = endpoint.trim().replace(/\/+$/, "")
  return base.endsWith("/v1/traces") ? base : `${base}/v1/traces`
}

/**
 * No tracing at all: Effect spans (`withSpan`, `sql.execute`) become the no-op span, and the
 * platform's HTTP server tracer (URL parsing, header redaction, an attribute per header, a span per
 * request) is skipped — with nowhere to send spans, both were pure per-request cost.
 */
export const TracingDisabled = Layer.mergeAll(
  Layer.setTracerEnabled(false),
  Layer.locallyScoped(HttpMiddleware.currentTracerDisabledWhen, () => true)
)

/** OTLP/HTTP export when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; no tracing otherwise (TracingDisabled). */
export const TracingLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) =>
    Option.match(config.otelExporterOtlpEndpoint, {
      onNone: () => TracingDisabled,
      onSome: (endpoint) =>
        tracingLayer({
          serviceName: config.otelServiceName,
          spanProcessor: new BatchSpanProcessor(new OTLPTraceExporter({ url: otlpTracesUrl(endpoint) }))
        }).pipe(Layer.tap(() => Effect.logInfo(`tracing: exporting spans to ${otlpTracesUrl(endpoint)}`)))
    })
  )
)
