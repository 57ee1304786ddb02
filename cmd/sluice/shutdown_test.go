package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
)

// TestShutdownEndsOpenStreamsWithAnErrorEvent: on SIGTERM (the context
// ending) a stream still open when the drain time is up ends with an error
// event telling the client the server is shutting down, a short request
// in flight finishes, and the server returns cleanly.
func TestShutdownEndsOpenStreamsWithAnErrorEvent(t *testing.T) {
	var arrived atomic.Int32 // requests Sluice forwarded to the worker
	_, url := slowWorkerBehind(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/chat/completions" {
				arrived.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	cfg := writeConfig(t, "listen: 127.0.0.1:0\nscrape:\n  enabled: false\nmodels:\n  - name: m\n    backends:\n      - url: "+url+"\n")
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var logs syncBuffer
	go func() {
		done <- runServer(ctx, serverOptions{path: cfg, drain: 300 * time.Millisecond, ready: ready,
			log: slog.New(slog.NewTextHandler(&logs, nil))})
	}()
	addr := <-ready
	c := client(addr)
	st := c.Chat.Completions.NewStreaming(context.Background(), chat("", 5000))
	require.True(t, st.Next(), "the stream started")
	const n = 20
	short := make(chan error, n)
	for range n { // non-streamed requests in flight when SIGTERM comes
		go func() {
			_, err := c.Chat.Completions.New(context.Background(), chat("", 20))
			short <- err
		}()
	}
	// They are in flight: Sluice has sent them on. (A pause of 50 ms let
	// SIGTERM come first for some under a loaded CI run, and those still
	// in the listener's backlog were reset: EOF.)
	require.Eventually(t, func() bool { return arrived.Load() >= n+1 }, 10*time.Second, time.Millisecond)
	stop()
	for st.Next() {
	}
	require.Error(t, st.Err())
	assert.Contains(t, st.Err().Error(), "shutting down")
	for range n {
		assert.NoError(t, <-short, "a request that finishes within the drain time is not lost")
	}
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop")
	}
}

// TestReadyOnlyWhileABackendAnswers: /readyz is 503 while every backend
// refuses connections (the scrape finds them down before any request
// does), and 200 once one answers.
func TestReadyOnlyWhileABackendAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	cfg := writeConfig(t, "listen: 127.0.0.1:0\nscrape:\n  interval: 20ms\n  timeout: 15ms\nmodels:\n  - name: m\n    backends:\n      - url: http://"+addr+"\n")
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverOptions{path: cfg, drain: time.Second, ready: ready, log: slog.New(slog.DiscardHandler)})
	}()
	sluice := <-ready
	status := func() int {
		res, err := http.Get("http://" + sluice + "/readyz")
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	require.Eventually(t, func() bool { return status() == http.StatusServiceUnavailable }, 5*time.Second, 10*time.Millisecond)

	w, err := gpuworker.New(gpuworker.Options{Model: "m"})
	require.NoError(t, err)
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	wl, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := &http.Server{Handler: w.Handler()}
	go func() { _ = srv.Serve(wl) }()
	require.Eventually(t, func() bool { return status() == http.StatusOK }, 5*time.Second, 10*time.Millisecond)

	stop()
	require.NoError(t, <-done)
	_ = srv.Close()
	wstop()
	require.NoError(t, <-wdone)
	http.DefaultClient.CloseIdleConnections()
}

// TestEditedConfigIsReloaded: with --watch, an edit to the file is applied
// without a signal, and an edit that breaks the file keeps the running
// config serving.
func TestEditedConfigIsReloaded(t *testing.T) {
	a, b := startWorker(t, "a"), startWorker(t, "b")
	base := "listen: 127.0.0.1:0\nmodels:\n  - name: a\n    backends:\n      - url: " + a.URL + "\n"
	path := writeConfig(t, base)
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverOptions{path: path, drain: time.Second, ready: ready, watchEvery: 20 * time.Millisecond,
			log: slog.New(slog.DiscardHandler)})
	}()
	addr := <-ready
	models := func() string {
		res, err := http.Get("http://" + addr + "/v1/models")
		require.NoError(t, err)
		defer res.Body.Close()
		var out struct{ Data []struct{ ID string } }
		require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
		var ids []string
		for _, m := range out.Data {
			ids = append(ids, m.ID)
		}
		return strings.Join(ids, ",")
	}
	assert.Equal(t, "a", models())
	require.NoError(t, os.WriteFile(path, []byte(base+"  - name: b\n    backends:\n      - url: "+b.URL+"\n"), 0o600))
	require.Eventually(t, func() bool { return models() == "a,b" }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, os.WriteFile(path, []byte("models: [oops"), 0o600))
	time.Sleep(100 * time.Millisecond) // several polls: the broken file is seen and refused
	assert.Equal(t, "a,b", models(), "a bad edit keeps the running config")
	stop()
	require.NoError(t, <-done)
	http.DefaultClient.CloseIdleConnections()
}
