package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTracesReachAnOTLPCollector sets OTEL_EXPORTER_OTLP_ENDPOINT to a
// loopback collector and checks that serving a request exports spans there
// by the time the server has shut down.
func TestTracesReachAnOTLPCollector(t *testing.T) {
	var exports atomic.Int32
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			if b, _ := io.ReadAll(r.Body); len(b) > 0 {
				exports.Add(1)
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")

	wsrv := startWorker(t, "a")
	path := writeConfig(t, "listen: 127.0.0.1:0\nmodels:\n  - name: a\n    backends:\n      - url: "+wsrv.URL+"\n")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverOptions{path: path, drain: 5 * time.Second, ready: ready,
			log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	addr := <-ready
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	res, err := client.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"a","prompt":"hi","max_tokens":2}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)

	cancel()
	require.NoError(t, <-done)
	assert.Positive(t, exports.Load(), "shutdown flushed the spans to the collector")
}
