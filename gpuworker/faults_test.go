package gpuworker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
)

func completionBody(maxTokens int, stream bool) string {
	s := "false"
	if stream {
		s = "true"
	}
	return `{"model":"` + model + `","prompt":"hello","ignore_eos":true,"max_tokens":` +
		strconv.Itoa(maxTokens) + `,"stream":` + s + `}`
}

func putFaults(t *testing.T, srv *httptest.Server, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/admin/faults", strings.NewReader(body))
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { require.NoError(t, res.Body.Close()) }()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, out
}

func TestFaultErrorRate(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{Faults: gpuworker.Faults{ErrorRate: 1, ErrorStatus: 503}})
	c := client(srv)
	err := c.Post(t.Context(), "completions", []byte(completionBody(3, false)), nil)
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusServiceUnavailable, apiErr.StatusCode)
	assert.Equal(t, "injected_fault", apiErr.Code)

	// A fraction fails, and the same seed fails the same requests.
	pattern := func(seed int64) string {
		_, srv := startWorker(t, gpuworker.Options{Seed: seed, Faults: gpuworker.Faults{ErrorRate: 0.5}})
		c := client(srv)
		var b strings.Builder
		for range 40 {
			err := c.Post(t.Context(), "completions", []byte(completionBody(2, false)), nil)
			if err != nil {
				require.ErrorAs(t, err, &apiErr)
				require.Equal(t, http.StatusInternalServerError, apiErr.StatusCode)
				b.WriteByte('x')
				continue
			}
			b.WriteByte('.')
		}
		return b.String()
	}
	a := pattern(7)
	assert.Equal(t, a, pattern(7))
	assert.Contains(t, a, "x")
	assert.Contains(t, a, ".")
}

func TestFaultAddedLatencyBeforeAnyWork(t *testing.T) {
	w, srv := startWorker(t, gpuworker.Options{Faults: gpuworker.Faults{AddedLatency: time.Hour}})
	c := client(srv)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.Post(ctx, "completions", []byte(completionBody(3, false)), nil) }()
	// The request is held before the engine sees it.
	assert.Never(t, func() bool { l := w.Load(); return l.Running+l.Waiting > 0 }, 50*time.Millisecond, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	assert.Zero(t, w.Load().GenerationTokens)

	// Removing the fault live makes the worker fast again.
	status, _ := putFaults(t, srv, `{}`)
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, c.Post(t.Context(), "completions", []byte(completionBody(3, false)), nil))
}

func TestFaultStallStream(t *testing.T) {
	w, srv := startWorker(t, gpuworker.Options{Profile: "h100-llama3-8b", Speedup: 1000,
		Faults: gpuworker.Faults{StallAfter: 3}})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions",
		strings.NewReader(completionBody(20, true)))
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	require.Equal(t, http.StatusOK, res.StatusCode)

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				lines <- sc.Text()
			}
		}
	}()
	var got []string
	for range 3 {
		got = append(got, <-lines)
	}
	// The engine finishes the request; the client never hears of it.
	require.Eventually(t, func() bool { return w.Load().GenerationTokens == 20 }, 10*time.Second, time.Millisecond)
	cancel()
	for l := range lines {
		got = append(got, l)
	}
	assert.Len(t, got, 3, "exactly StallAfter tokens, then silence: %v", got)
	require.Eventually(t, func() bool { l := w.Load(); return l.Running == 0 && l.KVBlocksUsed == 0 }, 10*time.Second, time.Millisecond)
}

func TestFaultStallWhole(t *testing.T) {
	w, srv := startWorker(t, gpuworker.Options{Faults: gpuworker.Faults{StallAfter: 1}})
	c := client(srv)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.Post(ctx, "completions", []byte(completionBody(5, false)), nil) }()
	require.Eventually(t, func() bool { return w.Load().GenerationTokens == 5 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
}

func TestFaultCrashAfter(t *testing.T) {
	var crashes atomic.Int32
	_, srv := startWorker(t, gpuworker.Options{Profile: "h100-llama3-8b",
		Faults: gpuworker.Faults{CrashAfter: 2}, OnCrash: func() { crashes.Add(1) }})
	c := client(srv)

	// Request 1: a long stream, in flight when the worker crashes.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions",
		strings.NewReader(completionBody(100000, true)))
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = res.Body.Close() }()
	br := bufio.NewReader(res.Body)
	_, err = br.ReadString('\n')
	require.NoError(t, err)

	// Request 2 is served; request 3 crashes the worker.
	require.NoError(t, c.Post(t.Context(), "completions", []byte(completionBody(2, false)), nil))
	err = c.Post(t.Context(), "completions", []byte(completionBody(2, false)), nil)
	require.Error(t, err)
	var apiErr *openai.Error
	assert.False(t, errors.As(err, &apiErr), "a crash answers nothing, got %v", err)
	_, err = io.Copy(io.Discard, br)
	assert.Error(t, err, "the stream in flight is cut")
	assert.Equal(t, int32(1), crashes.Load())

	for _, path := range []string{"/health", "/metrics", "/v1/models"} {
		res, err := http.Get(srv.URL + path)
		if err == nil {
			_ = res.Body.Close()
		}
		assert.Error(t, err, path)
	}

	// The admin API still answers, and new faults revive the worker.
	res2, err := http.Get(srv.URL + "/admin/faults")
	require.NoError(t, err)
	var f map[string]any
	require.NoError(t, json.NewDecoder(res2.Body).Decode(&f))
	require.NoError(t, res2.Body.Close())
	assert.Equal(t, 2.0, f["crash_after"])
	status, _ := putFaults(t, srv, `{"crash_after": 0}`)
	require.Equal(t, http.StatusOK, status)
	res3, err := http.Get(srv.URL + "/health")
	require.NoError(t, err)
	require.NoError(t, res3.Body.Close())
	assert.Equal(t, http.StatusOK, res3.StatusCode)
}

func TestAdminFaults(t *testing.T) {
	w, srv := startWorker(t, gpuworker.Options{})
	res, err := http.Get(srv.URL + "/admin/faults")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	assert.JSONEq(t, `{"error_rate":0,"error_status":0,"added_latency":"0s","stall_after":0,"crash_after":0}`, string(body))

	status, got := putFaults(t, srv, `{"error_rate":0.25,"error_status":503,"added_latency":"150ms","stall_after":4,"crash_after":9}`)
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, gpuworker.Faults{ErrorRate: 0.25, ErrorStatus: 503, AddedLatency: 150 * time.Millisecond,
		StallAfter: 4, CrashAfter: 9}, w.Faults())

	tests := []struct {
		name  string
		body  string
		param string
	}{
		{"unknown field", `{"error_rate":0.1,"bogus":1}`, "bogus"},
		{"wrong type", `{"error_rate":"high"}`, "error_rate"},
		{"rate above one", `{"error_rate":1.5}`, "error_rate"},
		{"bad status", `{"error_status":404}`, "error_status"},
		{"bad duration", `{"added_latency":"soon"}`, "added_latency"},
		{"negative latency", `{"added_latency":"-1s"}`, "added_latency"},
		{"negative stall", `{"stall_after":-1}`, "stall_after"},
		{"negative crash", `{"crash_after":-2}`, "crash_after"},
		{"trailing data", `{} {}`, ""},
		{"not json", `nope`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, got := putFaults(t, srv, tt.body)
			assert.Equal(t, http.StatusBadRequest, status)
			e, _ := got["error"].(map[string]any)
			require.NotNil(t, e, got)
			if tt.param == "" {
				assert.Nil(t, e["param"])
			} else {
				assert.Equal(t, tt.param, e["param"])
			}
			assert.Equal(t, 0.25, w.Faults().ErrorRate, "a rejected PUT changes nothing")
		})
	}
}
