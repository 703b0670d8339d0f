package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// newTracing returns the instance's tracer provider: with cfg.Tracing an
// OTLP exporter built by the official SDK, which reads the standard
// OTEL_EXPORTER_OTLP_* variables itself (endpoint, headers, timeout,
// compression; OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL picks grpc or the
// default http/protobuf), batched as OTEL_BSP_* say and sampled as
// OTEL_TRACES_SAMPLER says; otherwise a no-op. The provider is the
// instance's own, never the process-global one, so several instances in
// one process (the tests) keep their spans apart. shutdown flushes.
func newTracing(ctx context.Context, cfg Config) (_ trace.TracerProvider, shutdown func(context.Context) error, _ error) {
	if !cfg.Tracing {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	protocol := cmpEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: ragent exports grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the defaults
	// (later detectors win).
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("ragent"), semconv.ServiceVersion(version),
			semconv.ServiceInstanceID(cfg.InstanceID)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("otel resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// cmpEnv returns the first of the variables that is set.
func cmpEnv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return strings.ToLower(v)
		}
	}
	return ""
}
