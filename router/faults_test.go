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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/policies/roundrobin"
	"github.com/sluice-llm/sluice/router"
)

// These tests inject real faults into a live gpuworker and check what the
// client sees through Sluice.

func TestSlowBackendTimesOutWith504(t *testing.T) {
	w := startWorkerOpts(t, gpuworker.Options{Model: model, Faults: gpuworker.Faults{AddedLatency: time.Minute}})
	s := startSluice(t, router.Options{Transport: &http.Transport{ResponseHeaderTimeout: 100 * time.Millisecond}},
		routeSpec{model: model, urls: []string{w.srv.URL}})
	res, err := http.Post(s.srv.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","prompt":"hi","max_tokens":2}`))
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusGatewayTimeout, res.StatusCode)
	assert.Equal(t, "upstream_timeout", decodeError(t, res).Code)
	assert.True(t, s.endpoints[w.srv.URL].Available(time.Now()), "a slow backend is not held out as unreachable")
	http.DefaultClient.CloseIdleConnections()
}

func TestBackendErrorIsRelayed(t *testing.T) {
	w := startWorkerOpts(t, gpuworker.Options{Model: model, Faults: gpuworker.Faults{ErrorRate: 1, ErrorStatus: 503}})
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	res, err := http.Post(s.srv.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","prompt":"hi","max_tokens":2}`))
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.Equal(t, "injected_fault", decodeError(t, res).Code, "the backend's own error body reaches the client")
	http.DefaultClient.CloseIdleConnections()
	assert.Contains(t, scrape(t, s), `sluice_upstream_attempts_total{backend="`+w.srv.URL+`",outcome="upstream_5xx"} 1`,
		"a 5xx answer is the backend's failure, not an ok attempt")
	assert.EqualValues(t, 1, s.endpoints[w.srv.URL].Failures(), "and counts in the status page's failures")
}

func TestBackendDyingMidStreamAbortsTheClient(t *testing.T) {
	w := startWorkerOpts(t, gpuworker.Options{Model: model, Profile: "h100-llama3-8b", Speedup: 1,
		Faults: gpuworker.Faults{CrashAfter: 1}})
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.client(t)
	p := chatParams(model)
	p.MaxTokens = openai.Int(5000)
	st := c.Chat.Completions.NewStreaming(context.Background(), p)
	require.True(t, st.Next(), "the stream started")

	// A second request trips the crash, which cuts the open stream.
	res, err := http.Post(s.srv.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","prompt":"hi","max_tokens":2}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusBadGateway, res.StatusCode)

	for st.Next() {
	}
	assert.Error(t, st.Err(), "the client learns the stream broke; it never sees [DONE]")
	_ = st.Close()
	s.settled(t)
	// Both attempts failed on the backend's side: the stream it broke off
	// and the request its crash cut before any header.
	assert.Contains(t, scrape(t, s), `sluice_upstream_attempts_total{backend="`+w.srv.URL+`",outcome="failed"} 2`)

	// Sluice itself is fine.
	res, err = http.Get(s.srv.URL + "/healthz")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	http.DefaultClient.CloseIdleConnections()
}

// TestBreakerTakesAFailingBackendOutAndProbesItBack: a worker answering
// 500 to everything is taken out of routing by its breaker after five
// faults, and once it is well again a probe brings it back.
func TestBreakerTakesAFailingBackendOutAndProbesItBack(t *testing.T) {
	good := startWorker(t, model, "instant", 0)
	bad := startWorkerOpts(t, gpuworker.Options{Model: model, Faults: gpuworker.Faults{ErrorRate: 1, ErrorStatus: 500}})
	s := startSluice(t, router.Options{}, routeSpec{model: model, policy: roundrobin.Name, urls: []string{good.srv.URL, bad.srv.URL}})
	var changes []string
	var mu sync.Mutex
	for _, e := range s.endpoints {
		e.SetBreaker(backends.BreakerSettings{OpenFor: 300 * time.Millisecond, OnChange: func(addr, from, to string) {
			mu.Lock()
			changes = append(changes, to)
			mu.Unlock()
		}})
	}
	send := func(n int) (fails int) {
		for range n {
			res, err := http.Post(s.srv.URL+"/v1/completions", "application/json",
				strings.NewReader(`{"model":"`+model+`","prompt":"hi","max_tokens":1}`))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				fails++
			}
		}
		return fails
	}
	fails := send(40)
	badEP := s.endpoints[bad.srv.URL]
	assert.Equal(t, 5, fails, "five 500s trip the breaker; then only the good worker answers")
	assert.EqualValues(t, 5, badEP.Requests())
	assert.Equal(t, "open", badEP.Breaker().State())

	require.NoError(t, bad.SetFaults(gpuworker.Faults{})) // well again
	time.Sleep(400 * time.Millisecond)                    // past OpenFor: the next request through it is the probe
	assert.Zero(t, send(20))
	assert.Equal(t, "closed", badEP.Breaker().State())
	assert.Greater(t, badEP.Requests(), uint64(5), "back in rotation")
	mu.Lock()
	assert.Equal(t, []string{"open", "half-open", "closed"}, changes)
	mu.Unlock()
	http.DefaultClient.CloseIdleConnections()
}

// TestStalledStreamEndsWithAnErrorEvent: a backend that stops sending mid
// stream is cut after the idle timeout and the client reads an error, not
// a clean end.
func TestStalledStreamEndsWithAnErrorEvent(t *testing.T) {
	w := startWorkerOpts(t, gpuworker.Options{Model: model, Faults: gpuworker.Faults{StallAfter: 3}})
	s := startSluice(t, router.Options{StreamIdleTimeout: 300 * time.Millisecond}, routeSpec{model: model, urls: []string{w.srv.URL}})
	c := s.client(t)
	p := chatParams(model)
	p.MaxTokens = openai.Int(50)
	start := time.Now()
	st := c.Chat.Completions.NewStreaming(context.Background(), p)
	n := 0
	for st.Next() {
		n++
	}
	require.Error(t, st.Err())
	assert.Contains(t, st.Err().Error(), "stopped sending")
	assert.Less(t, time.Since(start), 5*time.Second, "cut by the idle timeout, not the client's")
	assert.Positive(t, n, "the tokens before the stall were relayed")
	assert.Contains(t, scrape(t, s), `sluice_upstream_attempts_total{backend="`+w.srv.URL+`",outcome="timeout"} 1`)
}

// TestStreamEndingWithoutDoneIsNotPassedOffAsWhole: a backend that closes
// its stream cleanly but without [DONE] (stopped mid-answer) must not look
// like a finished answer to the client.
func TestStreamEndingWithoutDoneIsNotPassedOffAsWhole(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 2 {
			_, _ = io.WriteString(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"t`+string(rune('0'+i))+`"}}]}`+"\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(backend.Close)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{backend.URL}})
	c := s.client(t)
	st := c.Chat.Completions.NewStreaming(context.Background(), chatParams(model))
	n := 0
	for st.Next() {
		n++
	}
	assert.Equal(t, 2, n)
	require.Error(t, st.Err())
	assert.Contains(t, st.Err().Error(), "ended the answer early")
}

// TestTurnedBackAnswersAreRetriedElsewhere: a backend answering 503 (or
// 502, 429) is tried again on another before anything reaches the client;
// with no other backend, its own answer is relayed.
func TestTurnedBackAnswersAreRetriedElsewhere(t *testing.T) {
	good := startWorker(t, model, "instant", 0)
	busy := startWorkerOpts(t, gpuworker.Options{Model: model, Faults: gpuworker.Faults{ErrorRate: 1, ErrorStatus: 503}})
	s := startSluice(t, router.Options{Retries: 1},
		routeSpec{model: model, policy: roundrobin.Name, urls: []string{busy.srv.URL, good.srv.URL}})
	c := s.client(t)
	for range 6 {
		_, err := c.Chat.Completions.New(context.Background(), chatParams(model))
		require.NoError(t, err, "the 503 never reaches the client")
	}
	page := scrape(t, s)
	turned := counterValue(t, page, `sluice_upstream_attempts_total{backend="`+busy.srv.URL+`",outcome="upstream_5xx"}`)
	assert.Positive(t, turned)
	assert.Equal(t, turned, counterValue(t, page, `sluice_upstream_retries_total{reason="upstream_5xx"}`),
		"every 503 was retried on the good worker")

	alone := startSluice(t, router.Options{Retries: 1}, routeSpec{model: model, urls: []string{busy.srv.URL}})
	res, err := http.Post(alone.srv.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","prompt":"hi","max_tokens":2}`))
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.Equal(t, "injected_fault", decodeError(t, res).Code, "nowhere else to go: the backend's own answer")
	http.DefaultClient.CloseIdleConnections()
}

// TestTurnedBackAnswersAreRelayedOnceRetriesRunOut: with both backends
// busy the retry budget runs dry; from then on the backend's own 503 and
// its Retry-After reach the client (they were turned back with no retry
// left to follow, and the client got 502 upstream_error).
func TestTurnedBackAnswersAreRelayedOnceRetriesRunOut(t *testing.T) {
	busy := func() string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"busy","type":"server_error","code":"overloaded"}}`)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	s := startSluice(t, router.Options{Retries: 1}, routeSpec{model: model, policy: roundrobin.Name, urls: []string{busy(), busy()}})
	for i := range 40 { // the budget starts at 10 retries and earns 0.2 a request
		res, err := http.Post(s.srv.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"`+model+`","prompt":"hi","max_tokens":2}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "request %d", i)
		assert.Equal(t, "2", res.Header.Get("Retry-After"), "request %d", i)
		assert.Equal(t, "overloaded", decodeError(t, res).Code, "request %d: the backend's own answer", i)
		res.Body.Close()
	}
	page := scrape(t, s)
	assert.Less(t, counterValue(t, page, `sluice_upstream_retries_total{reason="upstream_5xx"}`), 40.0, "the budget ran out")
	http.DefaultClient.CloseIdleConnections()
}

// A model's first-byte timeout is its own: a slow backend is a timeout
// there (and another backend is tried), while the transport would have
// waited a minute.
func TestFirstByteTimeoutPerModel(t *testing.T) {
	slow := startWorkerOpts(t, gpuworker.Options{Model: model, Faults: gpuworker.Faults{AddedLatency: time.Minute}})
	fast := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{Retries: 1},
		routeSpec{model: model, policy: roundrobin.Name, urls: []string{slow.srv.URL, fast.srv.URL}, firstByte: 100 * time.Millisecond})
	c := s.client(t)
	for range 4 {
		_, err := c.Chat.Completions.New(context.Background(), chatParams(model))
		require.NoError(t, err, "the slow backend's timeout is retried on the fast one")
	}
	out := scrape(t, s)
	assert.Contains(t, out, `sluice_upstream_attempts_total{backend="`+slow.srv.URL+`",outcome="timeout"}`)
	assert.NotContains(t, out, `sluice_upstream_attempts_total{backend="`+slow.srv.URL+`",outcome="ok"}`)
	assert.Contains(t, out, `sluice_upstream_attempts_total{backend="`+fast.srv.URL+`",outcome="ok"} 4`)
}

// A model's total timeout ends a request whose answer has not started with
// 504 request_timeout, and a stream that runs past it with an error event;
// neither counts against the backend.
func TestTotalTimeoutPerModel(t *testing.T) {
	slow := startWorkerOpts(t, gpuworker.Options{Model: model, Faults: gpuworker.Faults{AddedLatency: time.Minute}})
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{slow.srv.URL}, total: 150 * time.Millisecond})
	res, err := http.Post(s.srv.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","prompt":"hi","max_tokens":2}`))
	require.NoError(t, err)
	defer res.Body.Close()
	assert.Equal(t, http.StatusGatewayTimeout, res.StatusCode)
	assert.Equal(t, "request_timeout", decodeError(t, res).Code)
	assert.Contains(t, scrape(t, s), `sluice_upstream_attempts_total{backend="`+slow.srv.URL+`",outcome="request_timeout"} 1`,
		"counted as the request's own time running out (it was client_gone)")

	long := startWorkerOpts(t, gpuworker.Options{Model: model, Profile: "h100-llama3-8b", Speedup: 1})
	s = startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{long.srv.URL}, total: 300 * time.Millisecond})
	p := chatParams(model)
	p.MaxTokens = openai.Int(5000) // about 40 s of decode at H100 speed
	c := s.client(t)
	stream := c.Chat.Completions.NewStreaming(context.Background(), p)
	chunks := 0
	for stream.Next() {
		chunks++
	}
	require.Error(t, stream.Err())
	assert.Contains(t, stream.Err().Error(), "time limit")
	assert.Positive(t, chunks, "the answer had started")
	require.NoError(t, stream.Close())
	require.Eventually(t, func() bool {
		return strings.Contains(scrape(t, s), `sluice_upstream_attempts_total{backend="`+long.srv.URL+`",outcome="request_timeout"} 1`)
	}, 5*time.Second, 10*time.Millisecond, "the request's own deadline is not the backend's failure")
	http.DefaultClient.CloseIdleConnections()
}

// TestABusyAnswerIsKeptWhenTheRetryHasNowhereToGo: a backend's 503 is
// turned back for a retry, and the retry's backend cannot be reached: the
// client hears the first backend's answer, busy with its Retry-After, not
// 502 "could not be reached".
func TestABusyAnswerIsKeptWhenTheRetryHasNowhereToGo(t *testing.T) {
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"overloaded","type":"server_error","code":null}}`)
	}))
	t.Cleanup(busy.Close)
	dead := deadURL(t)
	s := startSluice(t, router.Options{Retries: 1, Cooldown: time.Nanosecond},
		routeSpec{model: model, policy: roundrobin.Name, urls: []string{busy.URL, dead}})
	for i := range 4 { // round robin: either backend first
		res, err := http.Post(s.srv.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "request %d", i)
		assert.Equal(t, "7", res.Header.Get("Retry-After"), "request %d", i)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestATimeoutIsKeptWhenTheRetryFindsNoOne: a backend that times out,
// then a retry on one that refuses the connection: the client gets the
// timeout's 504, whichever order round robin takes them in (one order
// gave 502 upstream_unavailable).
func TestATimeoutIsKeptWhenTheRetryFindsNoOne(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	dead := deadURL(t)
	s := startSluice(t, router.Options{Retries: 1, Cooldown: time.Nanosecond},
		routeSpec{model: model, policy: roundrobin.Name, urls: []string{slow.URL, dead}, firstByte: 100 * time.Millisecond})
	for i := range 4 { // round robin: either backend first
		res, err := http.Post(s.srv.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		assert.Equal(t, "upstream_timeout", decodeError(t, res).Code, "request %d", i)
		res.Body.Close()
		assert.Equal(t, http.StatusGatewayTimeout, res.StatusCode, "request %d", i)
	}
	http.DefaultClient.CloseIdleConnections()
}
