package middleware

import (
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"
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
	// Untraced are paths served without a span (health checks and metric
	// scrapes: a scrape every few seconds per replica would fill the trace
	// store with nothing).
	Untraced []string
}

// Tracing starts a server span per request, continuing a trace the client
// propagated, and records the request ID on it. The span is named after
// the method and the route pattern chi matched ("POST
// /v1/chat/completions", "GET /v1/files/*"), or "unmatched": never the
// client's raw path or made-up method ("HTTP" then), which would make span
// names unbounded. With the no-op provider
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
			if off && !carries(r.Header, fields) || slices.Contains(opts.Untraced, r.URL.Path) {
				next.ServeHTTP(w, r)
				return
			}
			ctx := opts.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			method := spanMethod(r.Method)
			ctx, span := tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer))
			defer span.End()
			if !span.IsRecording() {
				next.ServeHTTP(w, r.WithContext(ctx))
				return
			}
			span.SetAttributes(attribute.String("sluice.request_id", RequestIDFrom(ctx)))
			next.ServeHTTP(w, r.WithContext(ctx))
			route := "unmatched"
			if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
				route = rc.RoutePattern()
			}
			span.SetName(method + " " + route)
		})
	}
}

// spanMethod is method when it is one of HTTP's, else "HTTP", as
// OpenTelemetry's HTTP conventions name such spans: the client's made-up
// methods made span names unbounded (one tester sent a 3,000-byte one).
func spanMethod(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "HTTP"
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
