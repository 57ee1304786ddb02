package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-llm/sluice/router"
)

func TestSpansPerRequestAndAttempt(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()

	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{TracerProvider: tp}, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.client(t)
	_, err := c.Chat.Completions.New(context.Background(), chatParams(model))
	require.NoError(t, err)

	// Both spans end as the handlers return, which can be just after the
	// client has its answer.
	require.Eventually(t, func() bool { return len(rec.Ended()) == 2 }, 5*time.Second, time.Millisecond)
	spans := rec.Ended()
	upstream, server := spans[0], spans[1]
	assert.Equal(t, "upstream", upstream.Name())
	assert.Equal(t, "POST /v1/chat/completions", server.Name())
	assert.Equal(t, server.SpanContext().SpanID(), upstream.Parent().SpanID())
	assert.Contains(t, upstream.Attributes(), attribute.String("sluice.backend", w.srv.URL))
	assert.Contains(t, upstream.Attributes(), attribute.String("sluice.outcome", "ok"))
}
