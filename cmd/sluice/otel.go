package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// setupTracing returns the tracer provider for request spans and a shutdown
// func that flushes it.
//
// Tracing is off (a no-op provider, which costs the router nothing) unless
// an OTLP endpoint is set in OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn it off too. Spans go out as OTLP over
// HTTP/protobuf: another OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL or
// OTEL_TRACES_EXPORTER is an error rather than an exporter that silently
// fails. The exporter and the SDK read every other OTEL_* variable
// themselves: headers, timeout, TLS, sampler (OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG), batching (OTEL_BSP_*) and span limits. The
// resource is described by newResource.
func setupTracing(ctx context.Context) (trace.TracerProvider, func(context.Context) error, error) {
	off := func(context.Context) error { return nil }
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") ||
		(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "") {
		return noop.NewTracerProvider(), off, nil
	}
	switch exp := os.Getenv("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		return noop.NewTracerProvider(), off, nil
	case "", "otlp":
	default:
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: sluice exports traces with otlp only (or none)", exp)
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, nil, fmt.Errorf("OTLP protocol %s: sluice exports traces over http/protobuf only", proto)
	}
	if err := checkSampler(os.Getenv("OTEL_TRACES_SAMPLER"), os.Getenv("OTEL_TRACES_SAMPLER_ARG")); err != nil {
		return nil, nil, err
	}
	res, err := newResource(ctx)
	if err != nil {
		return nil, nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// newResource describes the process to the trace backend: service.name is
// "sluice" unless OTEL_SERVICE_NAME names it (or, failing that,
// service.name in OTEL_RESOURCE_ATTRIBUTES), with the other
// OTEL_RESOURCE_ATTRIBUTES and the SDK's own attributes. It reads the
// environment on every call (resource.Default reads it once per process).
func newResource(ctx context.Context) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName("sluice")),
		resource.WithFromEnv(), // last: the environment wins
	)
	if err != nil {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	return res, nil
}

// traceErrors writes the OpenTelemetry SDK's errors (a failed export, an
// unknown sampler) to the JSON log, at most one line per traceErrorEvery
// with the count of those left out: the SDK's default printed each as a
// plain-text line, several a second while a collector was down.
type traceErrors struct {
	log     *slog.Logger
	mu      sync.Mutex
	last    time.Time
	dropped int
}

// traceErrorEvery spaces the log lines of trace export failures.
const traceErrorEvery = 10 * time.Second

func (e *traceErrors) Handle(err error) {
	e.mu.Lock()
	now := time.Now()
	if now.Sub(e.last) < traceErrorEvery {
		e.dropped++
		e.mu.Unlock()
		return
	}
	dropped := e.dropped
	e.last, e.dropped = now, 0
	e.mu.Unlock()
	e.log.Warn("tracing error", "err", err, "errors_since_last_line", dropped)
}

// checkSampler refuses an OTEL_TRACES_SAMPLER (and its ratio) the SDK
// would replace with its default after a plain-text line on stderr: a
// tester's "bogus" started, logging sampler "bogus", sampling everything.
func checkSampler(name, arg string) error {
	switch name {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		return nil
	case "traceidratio", "parentbased_traceidratio":
		if arg == "" {
			return nil // the SDK's ratio, 1
		}
		if r, err := strconv.ParseFloat(arg, 64); err != nil || r < 0 || r > 1 {
			return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%s: a ratio between 0 and 1", arg)
		}
		return nil
	}
	return fmt.Errorf("OTEL_TRACES_SAMPLER=%s: one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio", name)
}
