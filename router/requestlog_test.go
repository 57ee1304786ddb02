package router_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
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

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/auth"
)

// lockedBuffer is a bytes.Buffer a handler writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines are the JSON log lines written so far.
func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		out = append(out, m)
	}
	return out
}

// requestLine waits for the "request" line of request id.
func requestLine(t *testing.T, logs *lockedBuffer, id string) map[string]any {
	t.Helper()
	var line map[string]any
	require.Eventually(t, func() bool { // written as the handler returns, just after the client has its answer
		for _, m := range logs.lines(t) {
			if m["msg"] == "request" && m["request_id"] == id {
				line = m
				return true
			}
		}
		return false
	}, 5*time.Second, time.Millisecond, "no request line for %s", id)
	return line
}

// TestRequestLogAndMetrics serves a stream to a tenant and turns away a
// bad key, then checks each one's log line and what the metrics say of
// them: the stream's TTFT and time per output token, its tokens under its
// tenant, and the 401 under tier and class "none".
func TestRequestLogAndMetrics(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	var logs lockedBuffer
	opts := withTenants(t, &auth.Tenant{Name: "acme", Tier: "pro",
		Limits: quota.Limits{OutputTokensPerMinute: 100000, OutputBurst: 100000}})
	opts.RequestLog = slog.New(slog.NewJSONHandler(&logs, nil))
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}})

	c := s.keyed(t, "sk-acme", 0)
	p := chatParams(model)
	p.MaxTokens = openai.Int(8)
	st := c.Chat.Completions.NewStreaming(context.Background(), p, option.WithHeader("X-Request-Id", "req-stream"))
	for st.Next() {
	}
	require.NoError(t, st.Err())
	require.NoError(t, st.Close())

	bad := s.keyed(t, "sk-wrong", 0)
	_, err := bad.Chat.Completions.New(context.Background(), chatParams(model),
		option.WithHeader("X-Request-Id", "req-401"))
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)

	served := requestLine(t, &logs, "req-stream")
	assert.Equal(t, "INFO", served["level"])
	assert.Equal(t, "/v1/chat/completions", served["route"])
	assert.Equal(t, "acme", served["tenant"])
	assert.Equal(t, model, served["model"])
	assert.Equal(t, "default", served["class"])
	assert.Equal(t, w.srv.URL, served["backend"])
	assert.EqualValues(t, 200, served["status"])
	assert.Positive(t, served["input_tokens"])
	assert.EqualValues(t, 8, served["output_tokens"], "the worker's own usage")
	require.Contains(t, served, "ttft_ms")
	assert.Positive(t, served["ttft_ms"])
	assert.GreaterOrEqual(t, served["latency_ms"], served["ttft_ms"])
	require.Contains(t, served, "overhead_ms", "what Sluice spent before the attempt")
	assert.Positive(t, served["overhead_ms"])
	assert.Less(t, served["overhead_ms"], served["ttft_ms"])
	assert.NotContains(t, served, "error")

	refused := requestLine(t, &logs, "req-401")
	assert.EqualValues(t, 401, refused["status"])
	assert.Equal(t, "invalid_api_key", refused["error"])
	for _, k := range []string{"tenant", "model", "class", "backend"} {
		assert.Empty(t, refused[k], k)
	}
	assert.EqualValues(t, 0, refused["output_tokens"])
	assert.NotContains(t, refused, "ttft_ms")
	assert.NotContains(t, refused, "overhead_ms", "no attempt was made")
	assert.Positive(t, refused["latency_ms"])

	page := scrape(t, s)
	for _, want := range []string{
		`sluice_http_requests_total{class="default",code="200",model="` + model + `",route="/v1/chat/completions",tier="pro"} 1`,
		`sluice_http_requests_total{class="none",code="401",model="none",route="/v1/chat/completions",tier="none"} 1`,
		`sluice_http_request_duration_seconds_count{class="default",code="200",model="` + model + `",route="/v1/chat/completions",tier="pro"} 1`,
		`sluice_time_to_first_token_seconds_count{class="default",model="` + model + `"} 1`,
		`sluice_time_per_output_token_seconds_count{class="default",model="` + model + `"} 1`,
		`sluice_request_overhead_seconds_count{model="` + model + `"} 1`,
		`sluice_tenant_tokens_total{kind="output",tenant="acme",tier="pro"} 8`,
	} {
		assert.Contains(t, page, want+"\n")
	}
}

// TestRelayedErrorIsRecordedWithItsStatus: a backend's own 4xx answer,
// relayed, is counted and logged under its status, not as a 200.
func TestRelayedErrorIsRecordedWithItsStatus(t *testing.T) {
	backend := startBackend(t, http.StatusBadRequest)
	var logs lockedBuffer
	s := startSluice(t, router.Options{RequestLog: slog.New(slog.NewJSONHandler(&logs, nil))},
		routeSpec{model: model, urls: []string{backend}})
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("X-Request-Id", "req-400")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusBadRequest, res.StatusCode)

	line := requestLine(t, &logs, "req-400")
	assert.EqualValues(t, 400, line["status"])
	assert.Equal(t, backend, line["backend"])
	assert.Equal(t, "upstream_4xx", line["error"], "a relayed error is a failure in the log")
	assert.Contains(t, scrape(t, s),
		`sluice_http_requests_total{class="default",code="400",model="`+model+`",route="/v1/chat/completions",tier="none"} 1`)
}

// TestCutStreamsAreLoggedAsFailures: a stream cut after its first chunk
// ends for the client with an error event; its log line, status 200 as
// sent, carries that event's code: the backend broke off
// (upstream_error), went silent past stream_idle_timeout
// (upstream_timeout), or the route's total timeout ran out
// (request_timeout). Each read as a success.
func TestCutStreamsAreLoggedAsFailures(t *testing.T) {
	const chunk = `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n"
	for _, c := range []struct {
		name, code, outcome string
		after               func(r *http.Request) // what the backend does after its first chunk
		opts                router.Options
		total               time.Duration
	}{
		{"broken", "upstream_error", "failed", func(*http.Request) { panic(http.ErrAbortHandler) }, router.Options{}, 0},
		{"silent", "upstream_timeout", "timeout", func(r *http.Request) { <-r.Context().Done() }, router.Options{StreamIdleTimeout: 100 * time.Millisecond}, 0},
		// The attempt was counted client_gone until 2026-12-02.
		{"too long", "request_timeout", "request_timeout", func(r *http.Request) { <-r.Context().Done() }, router.Options{}, 200 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, chunk)
				w.(http.Flusher).Flush()
				c.after(r)
			}))
			t.Cleanup(srv.Close)
			var logs lockedBuffer
			c.opts.RequestLog = slog.New(slog.NewJSONHandler(&logs, nil))
			s := startSluice(t, c.opts, routeSpec{model: model, urls: []string{srv.URL}, total: c.total})
			req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/chat/completions",
				strings.NewReader(`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			require.NoError(t, err)
			req.Header.Set("X-Request-Id", "req-cut")
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode)
			assert.Contains(t, string(body), `"code":"`+c.code+`"`, "the client's stream ends with an error event")

			line := requestLine(t, &logs, "req-cut")
			assert.EqualValues(t, 200, line["status"])
			assert.Equal(t, c.code, line["error"])
			assert.Contains(t, scrape(t, s), `sluice_upstream_attempts_total{backend="`+srv.URL+`",outcome="`+c.outcome+`"} 1`+"\n",
				"the attempt is counted by how it ended")
		})
	}
}

// startBackend is a backend that answers every request with status.
func startBackend(t *testing.T, status int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"error":{"message":"no","type":"invalid_request_error"}}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestFleetMetricsReadTheTableAtScrapeTime: the per-backend and admission
// queue gauges show the endpoints' current state when /metrics is read.
func TestFleetMetricsReadTheTableAtScrapeTime(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 2})
	ep := s.endpoints[w.srv.URL]
	ep.StoreLoad(&backends.Load{At: time.Now(), Waiting: 3, Running: 5, KVUsage: 0.25})
	ep.SetBreaker(backends.BreakerSettings{})
	ep.ObserveDecode(99, time.Second)

	mb := `{backend="` + w.srv.URL + `",model="` + model + `"}`
	page := scrape(t, s)
	for _, want := range []string{
		`sluice_upstream_in_flight_requests{backend="` + w.srv.URL + `"} 0`,
		`sluice_backend_available` + mb + ` 1`,
		`sluice_backend_waiting_requests` + mb + ` 3`,
		`sluice_backend_running_requests` + mb + ` 5`,
		`sluice_backend_kv_cache_usage_ratio` + mb + ` 0.25`,
		`sluice_backend_decode_tokens_per_second` + mb + ` 99`,
		`sluice_backend_breaker_state{backend="` + w.srv.URL + `",model="` + model + `",state="closed"} 1`,
		`sluice_backend_breaker_state{backend="` + w.srv.URL + `",model="` + model + `",state="open"} 0`,
		// Read from the table as the others (a gauge set on each change
		// stayed 1 for a backend removed while its breaker was open).
		`sluice_breaker_open{backend="` + w.srv.URL + `"} 0`,
		`sluice_admission_queued_requests{class="priority",model="` + model + `"} 0`,
		`sluice_admission_queued_requests{class="flex",model="` + model + `"} 0`,
	} {
		assert.Contains(t, page, want+"\n")
	}

	// A stale load is dropped, not reported as zeros; a drained backend is
	// out of routing.
	ep.MarkStale()
	ep.SetDrained(true)
	page = scrape(t, s)
	assert.NotContains(t, page, "sluice_backend_waiting_requests")
	assert.NotContains(t, page, "sluice_backend_kv_cache_usage_ratio")
	assert.Contains(t, page, `sluice_backend_available`+mb+" 0\n")
}

// BenchmarkRequestLog is BenchmarkOverhead's whole answer through Sluice
// with the per-request log on (JSON, discarded): what the line costs.
func BenchmarkRequestLog(b *testing.B) {
	w := startWorker(b, model, "instant", 0)
	s := startSluice(b, router.Options{RequestLog: slog.New(slog.NewJSONHandler(io.Discard, nil))},
		routeSpec{model: model, urls: []string{w.srv.URL}})
	body := `{"model":"` + model + `","max_tokens":16,"ignore_eos":true,"messages":[{"role":"user","content":"hello there, fleet"}]}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := client.Post(s.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	})
}

// TestRequestLogSaysHowLongARequestQueued: on a route with admission each
// request line has queued_ms, the time it waited for room; a request that
// waits for another's slot shows its wait, one that found room at once
// shows none.
func TestRequestLogSaysHowLongARequestQueued(t *testing.T) {
	w := startWorker(t, model, "l4-llama3-8b", 10)
	var logs lockedBuffer
	opts := router.Options{RequestLog: slog.New(slog.NewJSONHandler(&logs, nil))}
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}, budget: 1})
	c := s.client(t)
	p := chatParams(model)
	p.MaxTokens = openai.Int(20)
	first := make(chan error, 1)
	go func() {
		_, err := c.Chat.Completions.New(context.Background(), p, option.WithHeader("X-Request-Id", "req-first"))
		first <- err
	}()
	require.Eventually(t, func() bool { return s.endpoints[w.srv.URL].InFlight() == 1 }, 5*time.Second, time.Millisecond)
	gone, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := c.Chat.Completions.New(gone, p, option.WithHeader("X-Request-Id", "req-gone"))
	cancel()
	require.Error(t, err, "it left the queue")
	_, err = c.Chat.Completions.New(context.Background(), p, option.WithHeader("X-Request-Id", "req-second"))
	require.NoError(t, err)
	require.NoError(t, <-first)

	one, two := requestLine(t, &logs, "req-first"), requestLine(t, &logs, "req-second")
	require.Contains(t, one, "queued_ms")
	assert.EqualValues(t, 0, one["queued_ms"], "room at once")
	require.Contains(t, two, "queued_ms")
	assert.Positive(t, two["queued_ms"], "it waited for the first's slot")
	assert.LessOrEqual(t, two["queued_ms"], two["latency_ms"])
	left := requestLine(t, &logs, "req-gone")
	require.Contains(t, left, "queued_ms", "a request that left the queue says how long it waited (it said nothing)")
	assert.Positive(t, left["queued_ms"])
	require.Contains(t, two, "overhead_ms")
	assert.LessOrEqual(t, two["overhead_ms"].(float64)+two["queued_ms"].(float64), two["latency_ms"], "the wait is not overhead")

	s2 := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}})
	c2 := s2.client(t)
	_, err = c2.Chat.Completions.New(context.Background(), p, option.WithHeader("X-Request-Id", "req-ungated"))
	require.NoError(t, err)
	assert.NotContains(t, requestLine(t, &logs, "req-ungated"), "queued_ms", "no admission on the route")
}

// TestModelListAndUnservedPathsAreCounted: the model list, a path no route
// serves and a method a route does not take are counted under fixed route
// labels (they were not counted at all).
func TestModelListAndUnservedPathsAreCounted(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/models"}, {http.MethodGet, "/v1/models/" + model}, {http.MethodGet, "/v1/models/nope"},
		{http.MethodGet, "/v1/nonexistent/abc123"}, {http.MethodDelete, "/v1/chat/completions"},
	} {
		req, err := http.NewRequest(c.method, s.srv.URL+c.path, nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	page := scrape(t, s)
	for _, want := range []string{
		`sluice_http_requests_total{class="none",code="200",model="none",route="/v1/models",tier="none"} 1`,
		`sluice_http_requests_total{class="none",code="200",model="none",route="/v1/models/{model}",tier="none"} 1`,
		`sluice_http_requests_total{class="none",code="404",model="none",route="/v1/models/{model}",tier="none"} 1`,
		`sluice_http_requests_total{class="none",code="404",model="none",route="unmatched",tier="none"} 1`,
		`sluice_http_requests_total{class="none",code="405",model="none",route="unmatched",tier="none"} 1`,
	} {
		assert.Contains(t, page, want+"\n")
	}
	assert.NotContains(t, page, "abc123", "a client's path is never a label")
	http.DefaultClient.CloseIdleConnections()
}

// TestAStalledClientIsLoggedAsGone: a client that stops reading a stream
// (its connection open) loses it after the idle timeout; its line says
// 499 client_closed, and the attempt counts as client_gone, not as the
// backend's failure (it read 200 response_aborted, and the attempt
// failed: a fault against the backend's breaker).
func TestAStalledClientIsLoggedAsGone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		event := []byte(`data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 8<<10) + `"}}]}` + "\n\n")
		for r.Context().Err() == nil {
			if _, err := w.Write(event); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	var logs lockedBuffer
	s := startSluice(t, router.Options{StreamIdleTimeout: 200 * time.Millisecond, RequestLog: slog.New(slog.NewJSONHandler(&logs, nil))},
		routeSpec{model: model, urls: []string{srv.URL}})
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	body := `{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: req-stall\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err) // and never read

	line := requestLine(t, &logs, "req-stall")
	assert.EqualValues(t, 499, line["status"])
	assert.Equal(t, "client_closed", line["error"])
	page := scrape(t, s)
	assert.Contains(t, page, `sluice_upstream_attempts_total{backend="`+srv.URL+`",outcome="client_gone"} 1`+"\n")
	assert.NotContains(t, page, `outcome="failed"`)
}
