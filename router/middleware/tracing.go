package middleware

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracingOptions configures Tracing. Zero fields mean: no-op tracer provider
// and W3C trace-context propagation.
type TracingOptions struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
}

// Tracing starts a server span per request, continuing a trace the client
// propagated, and records the request ID on it.
func Tracing(opts TracingOptions) func(http.Handler) http.Handler {
	if opts.Provider == nil {
		opts.Provider = noop.NewTracerProvider()
	}
	if opts.Propagator == nil {
		opts.Propagator = propagation.TraceContext{}
	}
	tracer := opts.Provider.Tracer("github.com/sluice-llm/sluice/router")
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := opts.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer))
			defer span.End()
			if !span.IsRecording() {
				next.ServeHTTP(w, r.WithContext(ctx))
				return
			}
			span.SetAttributes(attribute.String("sluice.request_id", RequestIDFrom(ctx)))
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}
