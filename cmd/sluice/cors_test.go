package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCORSLetsAllowedPagesCall: with cors.allowed_origins a browser's
// preflight is answered (no key needed) and the answers, errors included,
// carry the headers a page needs to read them; another origin gets no
// CORS headers, and without the setting a preflight is 405 as before.
func TestCORSLetsAllowedPagesCall(t *testing.T) {
	w := startWorker(t, "m")
	base := "scrape:\n  enabled: false\nmodels:\n  - name: m\n    backends:\n      - url: " + w.URL + "\n"
	addr, tr, _ := serveE2E(t, "listen: 127.0.0.1:0\ncors:\n  allowed_origins: [\"https://app.example.com\", \"https://*.example.org\"]\n"+base,
		slog.New(slog.DiscardHandler))
	hc := &http.Client{Transport: tr}
	do := func(method, path, origin, body string, h map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		require.NoError(t, err)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		res, err := hc.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}

	res := do(http.MethodOptions, "/v1/chat/completions", "https://app.example.com", "", preflight)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "https://app.example.com", res.Header.Get("Access-Control-Allow-Origin"))
	assert.Equal(t, "POST", res.Header.Get("Access-Control-Allow-Methods"))
	assert.Contains(t, strings.ToLower(res.Header.Get("Access-Control-Allow-Headers")), "authorization")
	assert.Equal(t, "600", res.Header.Get("Access-Control-Max-Age"), "max_age defaults to 10m")

	res = do(http.MethodOptions, "/v1/chat/completions", "https://eu.example.org", "", preflight)
	assert.Equal(t, "https://eu.example.org", res.Header.Get("Access-Control-Allow-Origin"), "a wildcard origin")

	ok := `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	res = do(http.MethodPost, "/v1/chat/completions", "https://app.example.com", ok, nil)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "https://app.example.com", res.Header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, res.Header.Get("Access-Control-Expose-Headers"), "X-Request-Id")
	assert.Contains(t, res.Header.Get("Access-Control-Expose-Headers"), "Retry-After")

	res = do(http.MethodPost, "/v1/chat/completions", "https://app.example.com", `{"model":"nope","messages":[]}`, nil)
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.Equal(t, "https://app.example.com", res.Header.Get("Access-Control-Allow-Origin"), "a page can read an error too")

	res = do(http.MethodPost, "/v1/chat/completions", "https://evil.example.net", ok, nil)
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Origin"), "another origin is not allowed")
	res = do(http.MethodOptions, "/v1/chat/completions", "https://evil.example.net", "", preflight)
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Origin"))

	plain, ptr, _ := serveE2E(t, "listen: 127.0.0.1:0\n"+base, slog.New(slog.DiscardHandler))
	addr, hc = plain, &http.Client{Transport: ptr}
	res = do(http.MethodOptions, "/v1/chat/completions", "https://app.example.com", "", preflight)
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "off by default")
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Origin"))
}

// TestBackendsCORSHeadersAreNotRelayed: a backend that answers CORS itself
// (vLLM allows "*" by default) does not add a second
// Access-Control-Allow-Origin, which browsers refuse, nor open CORS on a
// router that has it off; it never sees the client's Origin.
func TestBackendsCORSHeadersAreNotRelayed(t *testing.T) {
	var origins atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != "" {
			origins.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Credentials", "true")
		w.Header().Set("Access-Control-Expose-Headers", "X-Backend-Secret")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"text_completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(backend.Close)
	base := "scrape:\n  enabled: false\nmodels:\n  - name: m\n    backends:\n      - url: " + backend.URL + "\n"
	for _, cors := range []string{"cors:\n  allowed_origins: [\"https://app.example.com\"]\n", ""} {
		addr, tr, _ := serveE2E(t, "listen: 127.0.0.1:0\n"+cors+base, slog.New(slog.DiscardHandler))
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"hi"}`))
		require.NoError(t, err)
		req.Header.Set("Origin", "https://app.example.com")
		res, err := (&http.Client{Transport: tr}).Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		if cors == "" {
			assert.Empty(t, res.Header.Values("Access-Control-Allow-Origin"), "CORS off: none, the backend's neither")
		} else {
			assert.Equal(t, []string{"https://app.example.com"}, res.Header.Values("Access-Control-Allow-Origin"), "one value, the router's")
		}
		assert.Empty(t, res.Header.Values("Access-Control-Allow-Credentials"))
		assert.NotContains(t, strings.Join(res.Header.Values("Access-Control-Expose-Headers"), ","), "X-Backend-Secret")
	}
	assert.Zero(t, origins.Load(), "the backend never sees the client's Origin")
}
