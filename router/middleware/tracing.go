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
// propagated, and records the request ID on it. With the no-op provider
// (tracing off) a request that carries no trace context passes straight
// through, as its span would be nothing; one that carries it still has it
// taken up, so that it reaches the backends.
func Tracing(opts TracingOptions) func(http.Handler) http.Handler {
	if opts.Provider == nil {
		opts.Provider = noop.NewTracerProvider()
	}
	if opts.Propagator == nil {
		opts.Propagator = propagation.TraceContext{}
	}
	tracer := opts.Provider.Tracer("github.com/sluice-llm/sluice/router")
	_, off := opts.Provider.(noop.TracerProvider)
	fields := opts.Propagator.Fields()
	for i, f := range fields {
		fields[i] = http.CanonicalHeaderKey(f)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if off && !carries(r.Header, fields) {
				next.ServeHTTP(w, r)
				return
			}
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

// carries reports whether h has any of the propagator's fields (canonical
// header keys).
func carries(h http.Header, fields []string) bool {
	for _, f := range fields {
		if len(h[f]) > 0 {
			return true
		}
	}
	return false
}
