package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func startBareProxy(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	h, tr := newBareProxy(u)
	proxy := httptest.NewServer(h)
	t.Cleanup(func() {
		proxy.Close()
		tr.CloseIdleConnections()
	})
	return proxy.URL
}

func TestBareProxyRelaysStreams(t *testing.T) {
	proxy := startBareProxy(t, startWorker(t))
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	code, _, stderr := runCLI(t, "load", "--target", proxy, "--model", "m", "--stream", "--concurrency", "1",
		"--requests", "200", "--rate", "100000", "--duration", "1m", "--prompt-mean", "128", "--output-mean", "16",
		"--quiet", "--seed", "1", "--json", jsonPath)
	require.Equal(t, exitOK, code, stderr)
	got := readJSON(t, jsonPath)
	assert.EqualValues(t, 200, got["completed"], stderr)
	assert.EqualValues(t, 0, got["failed"], stderr)
}

// TestBareProxyKeepsBodyOpenAfterFlush: the upstream answers before the
// request body has ended, and the client sends the body's end only once the
// first event has reached it. Without full duplex, Go's server, on the
// proxy's first write, reads what is left of the request body and closes it:
// here it waits for bytes the client holds back, and the client times out. In
// bench-overhead the body had been sent but the transport had not yet read
// its end, so its next read failed and it dropped the upstream connection
// mid-stream.
func TestBareProxyKeepsBodyOpenAfterFlush(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		_, _ = io.WriteString(w, "data: "+string(body)+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(upstream.Close)
	proxy := startBareProxy(t, upstream.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // without full duplex it hangs
	defer cancel()
	pr, pw := io.Pipe()
	context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) }) // else the client's transport waits on the pipe
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, proxy+"/v1/chat/completions", pr)
	require.NoError(t, err)
	req.ContentLength = int64(len("{}"))
	wrote := make(chan error, 1)
	go func() { _, err := io.WriteString(pw, "{"); wrote <- err }()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: first\n", line)
	require.NoError(t, <-wrote)
	_, err = io.WriteString(pw, "}")
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	rest, err := io.ReadAll(rd)
	require.NoError(t, err, "the stream broke after the first event")
	assert.Equal(t, "\ndata: {}\n\ndata: [DONE]\n\n", string(rest))
}
