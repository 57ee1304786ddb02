package router

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// injectTraceContext writes the current span's W3C trace context into an
// upstream request's headers, replacing whatever the client sent, so the
// backend's spans hang under Sluice's attempt span.
func injectTraceContext(ctx context.Context, h http.Header) {
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}
