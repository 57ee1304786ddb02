package router

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router/auth"
)

// spanFixture is what the router passes to the span calls of one request.
type spanFixture struct {
	rte    *Route
	ep     *backends.Endpoint
	tenant *auth.Tenant
	res    *quota.Reservation
	out    *backends.Outcome
}

func newSpanFixture(t testing.TB) spanFixture {
	ep, err := backends.NewEndpoint("http://127.0.0.1:1", 1)
	require.NoError(t, err)
	return spanFixture{rte: &Route{Policy: "least_request"}, ep: ep, tenant: &auth.Tenant{Name: "acme", Tier: "pro"},
		res: &quota.Reservation{}, out: &backends.Outcome{Status: 200}}
}

// spanCalls makes every span call of one request through every stage, in
// the order the router makes them, under the request's span req in ctx.
func (f spanFixture) spanCalls(rt *Router, ctx context.Context, req trace.Span) {
	traceRequest(ctx, "m", "m", f.tenant, "default")
	endLimit(rt.stageSpan(ctx, "limit"), f.tenant, f.res, nil)
	endAdmission(rt.stageSpan(ctx, "admission"), admission.Default, nil, nil)
	endPick(rt.stageSpan(ctx, "pick"), f.rte, f.ep, 2, false, false)
	_, span := rt.startSpan(ctx, "upstream", trace.SpanKindClient)
	startAttempt(span, f.ep, 1, "")
	endAttempt(span, f.out, nil)
	traceAnswer(req, f.out)
	traceFailure(ctx, nil)
}

// TestSpansOffAllocateNothing makes every stage's span calls under a
// request span that is not recording and counts the allocations: tracing
// off must cost nothing measurable.
func TestSpansOffAllocateNothing(t *testing.T) {
	sampledOut := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	defer func() { require.NoError(t, sampledOut.Shutdown(context.Background())) }()
	tests := []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"no-op provider", noop.NewTracerProvider()},
		{"sampled out", sampledOut},
	}
	f := newSpanFixture(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &Router{attempts: tt.tp.Tracer("test")}
			// As router/middleware starts it.
			ctx, req := tt.tp.Tracer("test").Start(context.Background(), "POST /v1/chat/completions")
			defer req.End()
			actx, _ := rt.startSpan(ctx, "upstream", trace.SpanKindClient)
			assert.Equal(t, ctx, actx, "no span, no context to carry")
			assert.Zero(t, testing.AllocsPerRun(100, func() { f.spanCalls(rt, ctx, req) }))
		})
	}
}

// BenchmarkSpansOff is what the span calls of one request cost with the
// no-op provider.
func BenchmarkSpansOff(b *testing.B) {
	tp := noop.NewTracerProvider()
	rt := &Router{attempts: tp.Tracer("test")}
	ctx, req := tp.Tracer("test").Start(context.Background(), "POST /v1/chat/completions")
	f := newSpanFixture(b)
	b.ReportAllocs()
	for b.Loop() {
		f.spanCalls(rt, ctx, req)
	}
}
