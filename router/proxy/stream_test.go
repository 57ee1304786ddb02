package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sseBackend answers every request with n events and [DONE], flushing each;
// gone is closed when a handler sees its client (the proxy) leave.
func sseBackend(t *testing.T, n int, gone chan struct{}) *url.URL {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Backend", "b1")
		for i := range n {
			if _, err := w.Write([]byte("data: {\"n\":" + strconv.Itoa(i) + "}\n\n")); err != nil {
				break
			}
			http.NewResponseController(w).Flush()
			if gone != nil && i == 0 {
				<-r.Context().Done() // hold the stream open until the proxy hangs up
				close(gone)
				return
			}
		}
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	return u
}

func (p *Proxy) openStreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.streams)
}

// A stream is relayed whole, headers included, and forgotten once done.
func TestStreamRelayed(t *testing.T) {
	p, err := New(Options{Transport: NewTransport(TransportOptions{}), StreamIdleTimeout: time.Minute})
	require.NoError(t, err)
	target := sseBackend(t, 3, nil)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	require.NoError(t, p.Forward(rec, req, Attempt{Target: target, Body: []byte(`{"stream":true}`)}))
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
	assert.Equal(t, "b1", rec.Header().Get("X-Backend"))
	assert.Equal(t, "no-cache", rec.Header().Get("Cache-Control"), "set when the backend sends none")
	assert.True(t, rec.Flushed)
	assert.Equal(t, "data: {\"n\":0}\n\ndata: {\"n\":1}\n\ndata: {\"n\":2}\n\ndata: [DONE]\n\n", rec.Body.String())
	assert.Zero(t, p.openStreams())
}

// failingWriter accepts the headers and writes until writes passes 1,
// then fails as a connection to a client that has gone does.
type failingWriter struct {
	h      http.Header
	writes int
}

func (f *failingWriter) Header() http.Header { return f.h }
func (f *failingWriter) WriteHeader(int)     {}
func (f *failingWriter) Flush()              {}
func (f *failingWriter) Write(b []byte) (int, error) {
	f.writes++
	if f.writes > 1 {
		return 0, errors.New("write: broken pipe")
	}
	return len(b), nil
}

// A client connection that fails mid-stream aborts the handler, as the
// ReverseProxy does, and the stream is neither kept for Abort nor left open
// at the backend.
func TestStreamClientWriteFailure(t *testing.T) {
	p, err := New(Options{Transport: NewTransport(TransportOptions{}), StreamIdleTimeout: time.Minute})
	require.NoError(t, err)
	gone := make(chan struct{})
	target := sseBackend(t, 3, gone)
	// The backend holds its stream open after the first event, whose
	// relaying fails: the proxy must hang up on the backend.
	w := &failingWriter{h: http.Header{}, writes: 1} // the first write fails
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	panicked := func() (v any) {
		defer func() { v = recover() }()
		_ = p.Forward(w, req, Attempt{Target: target, Body: []byte(`{"stream":true}`)})
		return nil
	}()
	assert.Equal(t, http.ErrAbortHandler, panicked)
	assert.Zero(t, p.openStreams())
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's stream was left open")
	}
}

// Trailers are left to the ReverseProxy, which relays them.
func TestStreamWithTrailerRelayed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Trailer", "X-Checksum")
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
		w.Header().Set("X-Checksum", "abc")
	}))
	defer srv.Close()
	target, err := url.Parse(srv.URL)
	require.NoError(t, err)
	p, err := New(Options{Transport: NewTransport(TransportOptions{})})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("{}"))
	require.NoError(t, p.Forward(rec, req, Attempt{Target: target, Body: []byte(`{}`)}))
	assert.Equal(t, "data: [DONE]\n\n", rec.Body.String())
	assert.Equal(t, "abc", rec.Result().Trailer.Get("X-Checksum"))
	assert.Zero(t, p.openStreams())
}

// A whole answer reaches the client as soon as it is relayed, not when the
// handler returns: the router's accounting after Forward adds nothing to
// the client's latency.
func TestWholeAnswerSentBeforeHandlerReturns(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[]}`))
	}))
	defer backend.Close()
	target, err := url.Parse(backend.URL)
	require.NoError(t, err)
	p, err := New(Options{Transport: NewTransport(TransportOptions{})})
	require.NoError(t, err)
	got := make(chan struct{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.NoError(t, p.Forward(w, r, Attempt{Target: target, Body: []byte(`{}`)}))
		select {
		case <-got: // the client has the whole answer while this handler still runs
		case <-time.After(10 * time.Second):
			t.Error("the answer was held until the handler returned")
		}
	}))
	defer front.Close()
	res, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	b, err := io.ReadAll(res.Body)
	close(got)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	assert.JSONEq(t, `{"choices":[]}`, string(b))
}

// doneCanceler records what is written and cancels the request's context
// once [DONE] has been, as a client that closes the stream there does.
type doneCanceler struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (d doneCanceler) Write(b []byte) (int, error) {
	n, err := d.ResponseRecorder.Write(b)
	if strings.Contains(d.Body.String(), "[DONE]") {
		d.cancel()
	}
	return n, err
}

// A client that leaves as soon as it has read [DONE] (the OpenAI SDKs close
// the stream there) got the whole answer: the read of the backend's end of
// the body that its leaving cancels cuts nothing. It was counted as a client
// gone before the end, with status 499 and its tokens not charged.
func TestStreamWholeWhenClientLeavesAfterDone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":0}\n\ndata: [DONE]\n\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // the body's end comes only after the proxy has left
	}))
	t.Cleanup(srv.Close)
	target, err := url.Parse(srv.URL)
	require.NoError(t, err)
	p, err := New(Options{Transport: NewTransport(TransportOptions{}), StreamIdleTimeout: time.Minute})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := doneCanceler{ResponseRecorder: httptest.NewRecorder(), cancel: cancel}
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil).WithContext(ctx)
	require.NoError(t, p.Forward(rec, req, Attempt{Target: target, Body: []byte(`{"stream":true}`)}))
	assert.Equal(t, "data: {\"n\":0}\n\ndata: [DONE]\n\n", rec.Body.String())
	assert.Zero(t, p.openStreams())
}

// A stream's idle timeout counts silence, not its length: a body sending
// a chunk every idle/6 for longer than the timeout is not cut, and one that
// then falls silent is cut no sooner than the timeout after its last
// chunk, as a stall.
func TestStreamBodyCutsOnlyASilence(t *testing.T) {
	const idle = 300 * time.Millisecond
	pr, pw := io.Pipe()
	var s streamBody
	s.start(pr, idle)
	t.Cleanup(func() { _ = s.Close() })
	go func() {
		for range 9 {
			if _, err := pw.Write([]byte("data: {}\n\n")); err != nil {
				return
			}
			time.Sleep(idle / 6)
		}
	}()
	buf := make([]byte, 64)
	var last time.Time
	for range 9 {
		n, err := s.Read(buf)
		require.NoError(t, err, "a chunk every idle/6 keeps the stream open")
		require.Positive(t, n)
		last = time.Now()
	}
	_, err := s.Read(buf) // the writer is silent from here
	assert.Equal(t, io.EOF, err, "streamBody ends the copy cleanly")
	assert.GreaterOrEqual(t, time.Since(last), idle-idle/idleTicks/2, "not cut before the timeout of silence")
	cut := s.cut(nil)
	require.NotNil(t, cut)
	assert.True(t, cut.Stalled)
}

// A client that stops reading a stream (its connection open, nothing taken)
// loses it after about the idle timeout: the write that cannot go fails,
// and the backend's request ends, rather than both waiting forever.
func TestStalledClientLosesTheStream(t *testing.T) {
	gone := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		event := []byte("data: " + strings.Repeat("x", 8<<10) + "\n\n")
		defer close(gone)
		for r.Context().Err() == nil {
			if _, err := w.Write(event); err != nil {
				return
			}
			http.NewResponseController(w).Flush()
		}
	}))
	t.Cleanup(backend.Close)
	target, err := url.Parse(backend.URL)
	require.NoError(t, err)
	p, err := New(Options{Transport: NewTransport(TransportOptions{}), StreamIdleTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	ended := make(chan struct{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended) // Forward panics (http.ErrAbortHandler) when the client's write fails
		_ = p.Forward(w, r, Attempt{Target: target, Body: []byte(`{"stream":true}`)})
	}))
	t.Cleanup(front.Close)

	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	require.NoError(t, err) // and never read

	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("a client that reads nothing held the stream")
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's request went on after the stream was lost")
	}
}

// A client that reads a stream longer than the idle timeout, its events
// coming well within it, gets it whole: the write deadline the relay sets
// against stalled clients moves on as the stream goes.
func TestLongStreamOutlivesTheWriteDeadline(t *testing.T) {
	const idle = time.Second
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 12 { // 12 × 150 ms: 1.8 idle timeouts
			if _, err := w.Write([]byte("data: {\"n\":" + strconv.Itoa(i) + "}\n\n")); err != nil {
				return
			}
			http.NewResponseController(w).Flush()
			time.Sleep(idle * 15 / 100)
		}
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	}))
	t.Cleanup(srv.Close)
	target, err := url.Parse(srv.URL)
	require.NoError(t, err)
	p, err := New(Options{Transport: NewTransport(TransportOptions{}), StreamIdleTimeout: idle})
	require.NoError(t, err)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = p.Forward(w, r, Attempt{Target: target, Body: []byte(`{"stream":true}`)})
	}))
	t.Cleanup(front.Close)

	res, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	assert.Equal(t, 13, strings.Count(string(body), "data: "))
	assert.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"), "the stream was cut: %q", body)
}
