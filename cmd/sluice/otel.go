package main

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// setupTracing returns the tracer provider for request spans and a shutdown
// func that flushes it. Tracing is off (a no-op provider) unless an OTLP
// endpoint is set in OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; the exporter and SDK then read every
// other OTEL_* variable themselves (headers, sampler, service name,
// resource attributes). OTEL_SDK_DISABLED=true turns it off.
func setupTracing(ctx context.Context) (trace.TracerProvider, func(context.Context) error, error) {
	off := func(context.Context) error { return nil }
	if os.Getenv("OTEL_SDK_DISABLED") == "true" ||
		(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "") {
		return noop.NewTracerProvider(), off, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(attribute.String("service.name", "sluice")))
	if err != nil {
		return nil, nil, fmt.Errorf("otel resource: %w", err)
	}
	if os.Getenv("OTEL_SERVICE_NAME") != "" {
		res = resource.Default() // the environment names the service
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
