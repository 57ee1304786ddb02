package router_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/auth"
)

const requestSpan = "POST /v1/chat/completions"

// recorded returns a tracer provider recording every span in memory.
func recorded(t testing.TB) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	return rec, tp
}

// traces waits until n request spans have ended (they end as the handler
// returns, which can be just after the client has its answer) and returns
// the ended spans of each request's trace, by request, in order; a stage
// span ends before its request span.
func traces(t *testing.T, rec *tracetest.SpanRecorder, n int) []map[string][]sdktrace.ReadOnlySpan {
	t.Helper()
	var roots []sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		roots = roots[:0]
		for _, s := range rec.Ended() {
			if s.Name() == requestSpan {
				roots = append(roots, s)
			}
		}
		return len(roots) == n
	}, 5*time.Second, time.Millisecond)
	out := make([]map[string][]sdktrace.ReadOnlySpan, n)
	for i, root := range roots {
		out[i] = map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
				out[i][s.Name()] = append(out[i][s.Name()], s)
			}
		}
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// childOf asserts that every span in spans is a child of parent.
func childOf(t *testing.T, parent sdktrace.ReadOnlySpan, spans ...sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, s := range spans {
		assert.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID(), s.Name())
		assert.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "%s is a child of %s", s.Name(), parent.Name())
	}
}

// headerWorker is a gpuworker that keeps the traceparent header of the
// requests it serves.
type headerWorker struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string
}

func (h *headerWorker) traceparents() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

func startHeaderWorker(t *testing.T) *headerWorker {
	t.Helper()
	w, err := gpuworker.New(gpuworker.Options{Model: model, Profile: "instant"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	h := &headerWorker{}
	next := w.Handler()
	h.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.got = append(h.got, r.Header.Get("Traceparent"))
		h.mu.Unlock()
		next.ServeHTTP(rw, r)
	}))
	t.Cleanup(func() {
		h.srv.Close()
		cancel()
		require.NoError(t, <-done)
	})
	return h
}

func TestSpansForEachPipelineStage(t *testing.T) {
	rec, tp := recorded(t)
	w := startHeaderWorker(t)
	opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "pro", Limits: quota.Limits{RequestsPerMinute: 100, RequestBurst: 100}})
	opts.TracerProvider = tp
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 2})
	c := s.keyed(t, "sk-acme", 0)
	_, err := c.Chat.Completions.New(context.Background(), withTier(chatParams(model), "priority"))
	require.NoError(t, err)

	tr := traces(t, rec, 1)[0]
	for _, name := range []string{requestSpan, "limit", "admission", "pick", "upstream"} {
		require.Len(t, tr[name], 1, name)
	}
	req, limit, admit, pick, up := tr[requestSpan][0], tr["limit"][0], tr["admission"][0], tr["pick"][0], tr["upstream"][0]
	childOf(t, req, limit, admit, pick, up)
	for _, pair := range [][2]sdktrace.ReadOnlySpan{{limit, admit}, {admit, pick}, {pick, up}} {
		assert.False(t, pair[1].StartTime().Before(pair[0].EndTime()), "%s runs after %s", pair[1].Name(), pair[0].Name())
	}

	ra := attrs(req)
	assert.Equal(t, model, ra["gen_ai.request.model"].AsString())
	assert.Equal(t, "acme", ra["sluice.tenant"].AsString())
	assert.Equal(t, "pro", ra["sluice.tier"].AsString())
	assert.Equal(t, "priority", ra["sluice.class"].AsString())
	assert.EqualValues(t, http.StatusOK, ra["http.response.status_code"].AsInt64())
	assert.Positive(t, ra["gen_ai.usage.input_tokens"].AsInt64())
	assert.EqualValues(t, 8, ra["gen_ai.usage.output_tokens"].AsInt64())
	assert.Equal(t, codes.Unset, req.Status().Code)

	la := attrs(limit)
	assert.Equal(t, "acme", la["sluice.tenant"].AsString())
	assert.Equal(t, "pro", la["sluice.tier"].AsString())
	assert.Equal(t, "allowed", la["sluice.limit.decision"].AsString())
	assert.EqualValues(t, 99, la["sluice.limit.requests_remaining"].AsInt64())

	aa := attrs(admit)
	assert.Equal(t, "priority", aa["sluice.class"].AsString())
	assert.Equal(t, "admitted", aa["sluice.admission.outcome"].AsString())
	assert.Contains(t, aa, attribute.Key("sluice.admission.waited_ms"))

	pa := attrs(pick)
	assert.Equal(t, "*leastrequest.Balancer", pa["sluice.policy"].AsString(), "the Picker's type when the route names no policy")
	assert.Equal(t, w.srv.URL, pa["sluice.backend"].AsString())
	assert.True(t, pa["sluice.pick.by_admission"].AsBool())

	ua := attrs(up)
	assert.Equal(t, trace.SpanKindClient, up.SpanKind())
	assert.Equal(t, w.srv.URL, ua["sluice.backend"].AsString())
	assert.EqualValues(t, 1, ua["sluice.attempt"].AsInt64())
	assert.NotContains(t, ua, attribute.Key("sluice.retry_reason"))
	assert.Equal(t, "ok", ua["sluice.outcome"].AsString())
	assert.EqualValues(t, http.StatusOK, ua["http.response.status_code"].AsInt64())

	// The backend continues the trace under the attempt's span.
	got := w.traceparents()
	require.Len(t, got, 1)
	parts := strings.Split(got[0], "-")
	require.Len(t, parts, 4, got[0])
	assert.Equal(t, req.SpanContext().TraceID().String(), parts[1])
	assert.Equal(t, up.SpanContext().SpanID().String(), parts[2])
	assert.Equal(t, "01", parts[3], "sampled")
}

func TestSpansForARetriedRequest(t *testing.T) {
	rec, tp := recorded(t)
	w := startWorker(t, model, "instant", 0)
	dead := deadURL(t)
	s := startSluice(t, router.Options{Retries: 1, Cooldown: time.Hour, TracerProvider: tp},
		routeSpec{model: model, policy: "round_robin", urls: []string{dead, w.srv.URL}})
	c := s.client(t)
	_, err := c.Chat.Completions.New(context.Background(), chatParams(model))
	require.NoError(t, err)

	tr := traces(t, rec, 1)[0]
	req := tr[requestSpan][0]
	require.Len(t, tr["upstream"], 2)
	require.Len(t, tr["pick"], 2)
	childOf(t, req, append(tr["upstream"], tr["pick"]...)...)
	first, second := tr["upstream"][0], tr["upstream"][1]
	if attrs(first)["sluice.attempt"].AsInt64() == 2 {
		first, second = second, first
	}

	fa := attrs(first)
	assert.Equal(t, dead, fa["sluice.backend"].AsString())
	assert.EqualValues(t, 1, fa["sluice.attempt"].AsInt64())
	assert.Equal(t, "unreachable", fa["sluice.outcome"].AsString())
	assert.NotContains(t, fa, attribute.Key("http.response.status_code"), "nothing answered")
	assert.Equal(t, codes.Error, first.Status().Code)

	sa := attrs(second)
	assert.Equal(t, w.srv.URL, sa["sluice.backend"].AsString())
	assert.EqualValues(t, 2, sa["sluice.attempt"].AsInt64())
	assert.Equal(t, "unreachable", sa["sluice.retry_reason"].AsString())
	assert.Equal(t, "ok", sa["sluice.outcome"].AsString())
	assert.Equal(t, codes.Unset, second.Status().Code)

	for _, p := range tr["pick"] {
		pa := attrs(p)
		assert.Equal(t, "*roundrobin.Balancer", pa["sluice.policy"].AsString())
		assert.NotContains(t, pa, attribute.Key("sluice.pick.by_admission"))
	}
	assert.EqualValues(t, http.StatusOK, attrs(req)["http.response.status_code"].AsInt64())
}

func TestSpansForARateLimitedRequest(t *testing.T) {
	rec, tp := recorded(t)
	w := startWorker(t, model, "instant", 0)
	opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "free", Limits: quota.Limits{RequestsPerMinute: 1, RequestBurst: 1}})
	opts.TracerProvider = tp
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.keyed(t, "sk-acme", 0)
	_, err := c.Chat.Completions.New(context.Background(), chatParams(model))
	require.NoError(t, err)
	traces(t, rec, 1) // the first request's spans have ended: the next trace is the 429's
	_, err = c.Chat.Completions.New(context.Background(), chatParams(model))
	assertAPIError(t, err, http.StatusTooManyRequests, "rate_limit_exceeded")

	tr := traces(t, rec, 2)[1]
	assert.Len(t, tr, 2, "the request and its limit span, no later stage")
	req, limit := tr[requestSpan][0], tr["limit"][0]
	childOf(t, req, limit)
	la := attrs(limit)
	assert.Equal(t, "denied", la["sluice.limit.decision"].AsString())
	assert.Equal(t, "requests", la["sluice.limit.denied"].AsString())
	assert.Positive(t, la["sluice.limit.retry_after_ms"].AsInt64())
	ra := attrs(req)
	assert.EqualValues(t, http.StatusTooManyRequests, ra["http.response.status_code"].AsInt64())
	assert.Equal(t, "acme", ra["sluice.tenant"].AsString())
	assert.Equal(t, codes.Unset, req.Status().Code, "a 4xx is the client's, not a server error")
}

// BenchmarkStages sends requests through every stage (a tenant's limits,
// an admission gate, a pick, one attempt) with tracing off, and on into an
// SDK with no exporter, to show what the stage spans cost.
func BenchmarkStages(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			w := startWorker(b, model, "instant", 0)
			opts := withTenants(b, &auth.Tenant{Name: "acme", Tier: "pro"})
			if on {
				tp := sdktrace.NewTracerProvider()
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				opts.TracerProvider = tp
			}
			s := startSluice(b, opts, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 64})
			body := `{"model":"` + model + `","max_tokens":16,"messages":[{"role":"user","content":"hello there, fleet"}]}`
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			b.ReportAllocs()
			for b.Loop() {
				req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/chat/completions", strings.NewReader(body))
				require.NoError(b, err)
				req.Header.Set("Authorization", "Bearer sk-acme")
				req.Header.Set("Content-Type", "application/json")
				res, err := client.Do(req)
				require.NoError(b, err)
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Fatalf("status %d", res.StatusCode)
				}
			}
		})
	}
}

// With tracing off a client's trace context still reaches the backend,
// and a request without one sends none: the middleware lets such a
// request through untouched.
func TestTracingOffPassesTheClientsTraceContextOn(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Traceparent"))
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"`+model+
			`","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	}))
	t.Cleanup(backend.Close)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{backend.URL}})
	c := s.client(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	_, err := c.Chat.Completions.New(context.Background(), chatParams(model), option.WithHeader("traceparent", parent))
	require.NoError(t, err)
	_, err = c.Chat.Completions.New(context.Background(), chatParams(model))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 2)
	assert.Equal(t, parent, seen[0], "the client's trace context, passed on")
	assert.Empty(t, seen[1], "no trace context made up")
}

// TestSpanNamesAreRoutesAndProbesAreUntraced: a request span is named
// after its route pattern, a path no route matches "unmatched" (the raw
// path made span names unbounded), and health checks and metric scrapes
// make no span (one per scrape filled the trace store).
func TestSpanNamesAreRoutesAndProbesAreUntraced(t *testing.T) {
	rec, tp := recorded(t)
	w := startHeaderWorker(t)
	s := startSluice(t, router.Options{TracerProvider: tp}, routeSpec{model: model, urls: []string{w.srv.URL}})
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/v1/nonexistent/abc123", "/v1/models/" + model} {
		res, err := http.Get(s.srv.URL + p)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
	for _, m := range []string{"XABCDE", strings.Repeat("A", 3000)} { // a made-up method is not the span's name
		req, err := http.NewRequest(m, s.srv.URL+"/v1/chat/completions", nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
	var names []string
	require.Eventually(t, func() bool {
		names = names[:0]
		for _, sp := range rec.Ended() {
			names = append(names, sp.Name())
		}
		return len(names) >= 4
	}, 5*time.Second, time.Millisecond)
	assert.ElementsMatch(t, []string{"GET unmatched", "GET /v1/models/*", "HTTP unmatched", "HTTP unmatched"}, names)
	http.DefaultClient.CloseIdleConnections()
}

// TestSpanOfAStreamItsClientLeftHasItsUsage: a stream whose client leaves
// after the first chunk (499 in the log) carries the tokens relayed and
// the prompt's on its span, as its log line does (the span had none).
func TestSpanOfAStreamItsClientLeftHasItsUsage(t *testing.T) {
	rec, tp := recorded(t)
	w := startWorker(t, model, "h100-llama3-8b", 1) // real time: the stream outlasts the client
	s := startSluice(t, router.Options{TracerProvider: tp}, routeSpec{model: model, urls: []string{w.srv.URL}})
	ctx, cancel := context.WithCancel(context.Background())
	c := s.client(t)
	p := chatParams(model)
	p.MaxTokens = openai.Int(2000)
	stream := c.Chat.Completions.NewStreaming(ctx, p)
	for stream.Next() { // up to the first token (the first chunk may carry the role only)
		if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			break
		}
	}
	cancel()
	_ = stream.Close()
	tr := traces(t, rec, 1)[0]
	ra := attrs(tr[requestSpan][0])
	assert.Positive(t, ra["gen_ai.usage.output_tokens"].AsInt64())
	assert.Positive(t, ra["gen_ai.usage.input_tokens"].AsInt64(), "the prompt's estimate, as the log line counts it")
}

// TestSpansOfABrokenStreamAreErrors: a stream that breaks after its 200
// (the backend stalls past the idle timeout; the client reads an error
// event) marks its request span and its upstream span as errors: the
// request span read as a success.
func TestSpansOfABrokenStreamAreErrors(t *testing.T) {
	rec, tp := recorded(t)
	w := startWorkerOpts(t, gpuworker.Options{Model: model, Faults: gpuworker.Faults{StallAfter: 3}})
	s := startSluice(t, router.Options{StreamIdleTimeout: 300 * time.Millisecond, TracerProvider: tp},
		routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.client(t)
	st := c.Chat.Completions.NewStreaming(context.Background(), chatParams(model))
	for st.Next() {
	}
	require.Error(t, st.Err())

	tr := traces(t, rec, 1)[0]
	req, up := tr[requestSpan][0], tr["upstream"][0]
	assert.EqualValues(t, http.StatusOK, attrs(req)["http.response.status_code"].AsInt64())
	assert.Equal(t, codes.Error, req.Status().Code)
	assert.Equal(t, "timeout", req.Status().Description)
	assert.Equal(t, codes.Error, up.Status().Code)
	assert.Equal(t, "timeout", attrs(up)["sluice.outcome"].AsString())
}
