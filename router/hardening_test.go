package router_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/auth"
)

func TestModelNamesWithSlashes(t *testing.T) {
	const name = "meta-llama/Meta-Llama-3-8B-Instruct"
	w := startWorker(t, name, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: name, urls: []string{w.srv.URL}})
	c := s.client(t)
	m, err := c.Models.Get(context.Background(), name) // the SDK sends meta-llama%2FMeta-Llama-3-8B-Instruct
	require.NoError(t, err)
	assert.Equal(t, name, m.ID)
	res, err := http.Get(s.srv.URL + "/v1/models/" + name) // unescaped works too
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	_, err = c.Models.Get(context.Background(), "meta-llama/other")
	assertAPIError(t, err, http.StatusNotFound, "model_not_found")
}

func TestClientMistakesReadPlainly(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})

	res, err := http.Get(s.srv.URL + "/v1/chat/completions")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
	assert.Equal(t, "POST", res.Header.Get("Allow"))

	// HEAD is served wherever GET is, headers only (the 405's Allow says so).
	for _, path := range []string{"/v1/models", "/v1/models/" + model, "/healthz", "/readyz", "/metrics"} {
		res, err = http.Head(s.srv.URL + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assert.Equal(t, http.StatusOK, res.StatusCode, path)
		assert.Empty(t, body, path)
	}
	res, err = http.Get(s.srv.URL + "/v1/models/")
	require.NoError(t, err)
	e := decodeError(t, res)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.Equal(t, "not_found", e.Code, "no model named: no such route, not a model called ``")

	// A compressed body is refused by name, not read as invalid JSON.
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/chat/completions", strings.NewReader("\x1f\x8b\x08"))
	require.NoError(t, err)
	req.Header.Set("Content-Encoding", "gzip")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	e = decodeError(t, res)
	res.Body.Close()
	assert.Equal(t, http.StatusUnsupportedMediaType, res.StatusCode)
	assert.Equal(t, "unsupported_content_encoding", e.Code)
	assert.Contains(t, e.Message, `"gzip"`)

	res, err = http.Head(s.srv.URL + "/v1/chat/completions")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
	assert.Equal(t, "POST", res.Header.Get("Allow"))

	res, err = http.Post(s.srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","max_tokens":"ten"}`))
	require.NoError(t, err)
	e = decodeError(t, res)
	res.Body.Close()
	assert.Equal(t, "Invalid type for 'max_tokens': expected an integer, but got a string instead.", e.Message)

	long := strings.Repeat("x", 1<<20)
	res, err = http.Post(s.srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+long+`"}`))
	require.NoError(t, err)
	e = decodeError(t, res)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.Less(t, len(e.Message), 400, "a 1 MiB model name is not echoed whole")
	http.DefaultClient.CloseIdleConnections()
}

func TestSlowBodyLosesItsRequest(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{BodyReadTimeout: 200 * time.Millisecond}, routeSpec{model: model, urls: []string{w.srv.URL}})
	// Declared 10 MiB, or 1,000 bytes: a small rest the server would read
	// before answering, at the pace of the client that stalled.
	for _, declared := range []int64{10 << 20, 1000} {
		pr, pw := io.Pipe()
		t.Cleanup(func() { _ = pw.Close() }) // also when the test fails first
		go func() {
			_, _ = pw.Write([]byte(`{"model":`)) // then nothing: a client stuck mid-body
		}()
		req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/chat/completions", pr)
		require.NoError(t, err)
		req.ContentLength = declared
		done := make(chan struct{})
		go func() {
			defer close(done)
			res, err := http.DefaultClient.Do(req)
			if declared < 256<<10 {
				assert.NoError(t, err, "the answer comes while the body is still owed")
			}
			if err == nil {
				// 400 invalid_body until 2026-12-02: the SDKs do not retry
				// that, and it named no timeout.
				assert.Equal(t, http.StatusRequestTimeout, res.StatusCode)
				assert.Equal(t, "request_timeout", decodeError(t, res).Code)
				assert.True(t, res.Close, "the connection closes after the answer")
				res.Body.Close()
			}
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("a slow body (declared %d bytes) held the request past the read timeout", declared)
		}
		_ = pw.Close()
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestClientLeavingMidBodyIsCountedAsGone(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{w.srv.URL}})
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	require.NoError(t, err)
	_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: 100\r\n\r\n{\"model\":\"m\",\"messages\"")
	require.NoError(t, err)
	require.NoError(t, conn.Close()) // 21 of 100 bytes, then gone
	require.Eventually(t, func() bool {
		return strings.Contains(scrape(t, s), `sluice_http_requests_total{class="none",code="499",model="none",route="/v1/chat/completions",tier="none"} 1`)
	}, 5*time.Second, 10*time.Millisecond, "logged as the client's leaving, not as its bad request (400)")
}

// TestFallbackModelWhenNoBackendIsInRouting: the fallback's backend gets
// the name it serves the fallback model under (a gpuworker answers 404 to
// any other).
func TestFallbackModelWhenNoBackendIsInRouting(t *testing.T) {
	small := startWorker(t, "org/small", "instant", 0)
	dead := deadURL(t)
	s := startSluice(t, router.Options{},
		routeSpec{model: "big", urls: []string{dead}, fallbacks: []string{"small"}},
		routeSpec{model: "small", urls: []string{small.srv.URL}, served: map[string]string{small.srv.URL: "org/small"}})
	c := s.client(t)
	_, err := c.Chat.Completions.New(context.Background(), chatParams("big"))
	require.Error(t, err, "the dead backend is found dead by this request: it was in routing")
	res, err := c.Chat.Completions.New(context.Background(), chatParams("big"))
	require.NoError(t, err, "held out now: the fallback serves")
	assert.Equal(t, "org/small", res.Model)
	assert.Contains(t, scrape(t, s), `sluice_fallbacks_total{model="big",to="small"} 1`)
}

// TestExpectContinueKeepsTheAnswersHeaders: a client that sends Expect:
// 100-continue (curl does above 1 MB) gets its request id and rate-limit
// headers on the final answer. The Expect went on to the backend, whose
// 100 Continue the proxy relayed with the headers set so far, then
// cleared them.
func TestExpectContinueKeepsTheAnswersHeaders(t *testing.T) {
	var expects atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Expect") != "" {
			expects.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(srv.Close)
	s := startSluice(t, router.Options{}, routeSpec{model: model, urls: []string{srv.URL}})
	tr := &http.Transport{ExpectContinueTimeout: 5 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"`+strings.Repeat("a", 300<<10)+`"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Expect", "100-continue")
	req.Header.Set("X-Request-Id", "req-expect")
	res, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "req-expect", res.Header.Get("X-Request-Id"), "the final answer carries the request id")
	assert.Zero(t, expects.Load(), "Sluice has the body: the backend is not asked to confirm it")
}

// TestBodiesHeldAreBounded: a request whose body would take the bodies
// held past MaxBodyBytesInFlight is 503 server_overloaded with
// Retry-After, and is served again once the bodies held end. Bytes count
// as they arrive: a declared length never sent takes nothing.
func TestBodiesHeldAreBounded(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(srv.Close)
	s := startSluice(t, router.Options{MaxBodyBytes: 4000, MaxBodyBytesInFlight: 6000}, routeSpec{model: model, urls: []string{srv.URL}})
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"` + strings.Repeat("a", 3000) + `"}]}`
	post := func() *http.Response {
		res, err := http.Post(s.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		return res
	}
	liar, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = liar.Close() })
	_, err = io.WriteString(liar, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\n{") // and no more
	require.NoError(t, err)

	first := make(chan *http.Response, 1)
	go func() { first <- post() }()
	<-arrived // its 3 KB body is held while it runs; the liar's 4,000 declared bytes are not

	res := post()
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	assert.Equal(t, "server_overloaded", decodeError(t, res).Code)
	assert.Equal(t, "1", res.Header.Get("Retry-After"))
	res.Body.Close()

	release <- struct{}{}
	res = <-first
	assert.Equal(t, http.StatusOK, res.StatusCode)
	res.Body.Close()
	go func() { <-arrived; release <- struct{}{} }()
	assert.Eventually(t, func() bool { // the first's handler lets its body go just after its answer
		res := post()
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 5*time.Second, 5*time.Millisecond, "served once the first body is let go")
	http.DefaultClient.CloseIdleConnections()
}

// TestOneTenantHoldsAShareOfTheBodies: a tenant may hold a quarter of
// MaxBodyBytesInFlight (at least one body): its slow bodies turn its own
// requests away, not another tenant's.
func TestOneTenantHoldsAShareOfTheBodies(t *testing.T) {
	w := startWorker(t, model, "instant", 0)
	opts := withTenants(t, &auth.Tenant{Name: "a", Tier: "t"}, &auth.Tenant{Name: "b", Tier: "t"})
	opts.MaxBodyBytes, opts.MaxBodyBytesInFlight = 4000, 12000 // a tenant's share: 4,000
	s := startSluice(t, opts, routeSpec{model: model, urls: []string{w.srv.URL}})
	body := func(n int) string {
		return `{"model":"` + model + `","max_tokens":2,"messages":[{"role":"user","content":"` + strings.Repeat("a", n) + `"}]}`
	}
	post := func(key string, n int) int {
		req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/chat/completions", strings.NewReader(body(n)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	// A connection that sends 3,500 bytes of a's 3,900-byte body, then
	// nothing: 3,500 bytes held.
	var slow net.Conn
	hold := func() {
		if slow != nil {
			_ = slow.Close()
		}
		var err error
		slow, err = net.Dial("tcp", s.srv.Listener.Addr().String())
		require.NoError(t, err)
		_, err = fmt.Fprintf(slow, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-a\r\nContent-Length: 3900\r\n\r\n%s",
			body(3500)[:3500])
		require.NoError(t, err)
	}
	hold()
	t.Cleanup(func() { _ = slow.Close() })
	answered := func() bool { // the slow body was turned away: a probe of a's held bytes when it arrived
		require.NoError(t, slow.SetReadDeadline(time.Now().Add(time.Millisecond)))
		n, _ := slow.Read(make([]byte, 1))
		return n > 0
	}

	assert.Eventually(t, func() bool {
		if answered() {
			hold()
		}
		return post("sk-a", 1000) == http.StatusServiceUnavailable
	}, 5*time.Second, 10*time.Millisecond, "a's next body passes its share")
	require.False(t, answered(), "the slow body is still held")
	assert.Equal(t, http.StatusOK, post("sk-b", 3000), "b is served")
	http.DefaultClient.CloseIdleConnections()
}
