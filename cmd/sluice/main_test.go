package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-llm/sluice/gpuworker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sluice.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestValidate(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	tests := []struct {
		name   string
		config string
		code   int
		out    []string
	}{
		{"ok", "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:9001\n", 0, []string{": ok"}},
		{"every problem with its path", `
listen: nowhere
models:
  - name: m
    policy: fastest
    backends:
      - url: ftp://x
  - name: n
    policy: round_robin
    params: {spread: 2}
    backends:
      - url: http://127.0.0.1:1
`, 1, []string{": invalid", "listen: want host:port", "models[0].backends[0].url: want an http or https URL"}},
		{"policy errors need a valid file first, then name the field", `
models:
  - name: m
    policy: fastest
    backends:
      - url: http://127.0.0.1:1
  - name: n
    policy: round_robin
    params: {spread: 2}
    backends:
      - url: http://127.0.0.1:2
`, 1, []string{`models[0].policy: unknown policy "fastest"`, "models[1].params:", "field spread not found"}},
		{"unknown key", "modles: []\n", 1, []string{"line 1 (modles): field modles not found"}},
		{"one backend, two weights", `
models:
  - name: m
    backends:
      - url: http://127.0.0.1:1
  - name: n
    backends:
      - url: http://127.0.0.1:1/
        weight: 3
`, 1, []string{"models[1].backends[0].weight: 3, but models[0].backends[0].weight is 1 for the same backend"}},
		{"one backend, two keys", `
models:
  - name: a
    backends:
      - url: http://127.0.0.1:1
        api_key: key-for-a
  - name: b
    backends:
      - url: http://127.0.0.1:1
        api_key: key-for-b
`, 1, []string{"models[1].backends[0].api_key: differs from the key another model gives the same backend"}},
		{"a redis option go-redis does not know", "limits:\n  redis_url: redis://127.0.0.1:6379/0?bogus=1\nmodels:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n",
			1, []string{"limits.redis_url: redis: unexpected option: bogus"}},
		// Secrets live where serve runs, not where a CI job validates:
		// what names them is a note, not a failure.
		{"a key's variable not set here", "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n        api_key_env: SLUICE_TEST_NEVER_SET\n",
			0, []string{"ok", "note: models[0].backends[0].api_key_env: environment variable SLUICE_TEST_NEVER_SET is empty or not set"}},
		{"a redis batch store with no redis", "batch:\n  enabled: true\n  store: redis\nmodels:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n",
			0, []string{"ok", "note: batch.store: redis needs limits.redis_url, --redis-url or SLUICE_REDIS_URL"}},
		{"a fraction for an integer", "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n        weight: 2.7\n",
			1, []string{"models[0].backends[0].weight", "whole number"}},
		// So are certificates: a Secret mounted where serve runs.
		{"certificate files not here", "tls:\n  cert_file: /nonexistent/tls.crt\n  key_file: /nonexistent/tls.key\nupstream:\n  tls:\n    ca_file: /nonexistent/ca.pem\n" +
			"models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n",
			0, []string{"ok", "note: tls.cert_file: no file /nonexistent/tls.crt here (serve needs it)", "note: tls.key_file: no file /nonexistent/tls.key here",
				"note: upstream.tls.ca_file: no file /nonexistent/ca.pem here"}},
		{"certificate files that do not load", "admin:\n  tls:\n    cert_file: " + notPEM + "\n    key_file: " + notPEM + "\nupstream:\n  tls:\n    ca_file: " + notPEM + "\n" +
			"models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n",
			1, []string{": invalid", "admin.tls: " + notPEM + " with " + notPEM, "upstream.tls.ca_file: " + notPEM + " holds no PEM certificate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run([]string{"validate", "--config", writeConfig(t, tt.config)}, &out, &errOut)
			assert.Equal(t, tt.code, code, errOut.String())
			for _, s := range tt.out {
				assert.Contains(t, out.String()+errOut.String(), s)
			}
		})
	}
}

// The command line's settings are checked before anything starts, and a
// bad Redis URL's message does not repeat its password.
func TestServeRefusesBadFlags(t *testing.T) {
	cfg := writeConfig(t, "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--watch", "-1s"}, "--shutdown-timeout and --watch must not be negative"},
		{[]string{"--shutdown-timeout", "-5s"}, "--shutdown-timeout and --watch must not be negative"},
		{[]string{"--redis-url", "notaurl"}, `--redis-url (or SLUICE_REDIS_URL): want a redis://, rediss:// or unix:// URL, got "notaurl"`},
		{[]string{"--redis-url", "http://:s3cret@127.0.0.1:6379"}, `got "http://:REDACTED@127.0.0.1:6379"`},
		{[]string{"--redis-url", "redis://:s3cret@%zz"}, "--redis-url (or SLUICE_REDIS_URL): not a URL"},
		{[]string{"--redis-url", "redis://127.0.0.1:6379/0?master_name=m&bogus=s3cret"}, "--redis-url (or SLUICE_REDIS_URL): redis: unexpected option: bogus"},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, run(append([]string{"serve", "--config", cfg}, tt.args...), &out, &errOut), "%v", tt.args)
		assert.Contains(t, errOut.String(), tt.want)
		assert.NotContains(t, errOut.String(), "s3cret")
	}
}

func TestUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, run(nil, &out, &errOut))
	assert.Equal(t, 2, run([]string{"frobnicate"}, &out, &errOut))
	assert.Equal(t, 2, run([]string{"validate"}, &out, &errOut))
	assert.Equal(t, 2, run([]string{"serve"}, &out, &errOut))
	assert.Equal(t, 0, run([]string{"help"}, &out, &errOut))
	assert.Contains(t, out.String(), "sluice serve")
}

func TestExampleConfigsValidate(t *testing.T) {
	files, err := filepath.Glob("../../configs/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		var out, errOut bytes.Buffer
		assert.Equal(t, 0, run([]string{"validate", "--config", f}, &out, &errOut), errOut.String())
	}
}

// reloadable is a real server on the config at path that reloads on
// reload, logging to logs; stop ends it and checks it returned cleanly.
type reloadable struct {
	addr   string
	reload chan os.Signal
	logs   *syncBuffer
	stop   func()
}

func serveReloadable(t *testing.T, path string) *reloadable {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &reloadable{reload: make(chan os.Signal, 1), logs: &syncBuffer{}}
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverOptions{path: path, drain: 5 * time.Second, reload: s.reload, ready: ready,
			log: slog.New(slog.NewTextHandler(s.logs, nil))})
	}()
	s.addr = <-ready
	stopped := false
	s.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			require.NoError(t, <-done)
		}
	}
	t.Cleanup(s.stop)
	return s
}

// complete sends a completion for model with key (none when empty) and
// returns the answer's status.
func (s *reloadable) complete(t *testing.T, model, key string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/v1/completions",
		strings.NewReader(`{"model":"`+model+`","prompt":"hi","max_tokens":2}`))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// TestServeAndReload runs the real server on loopback in front of a real
// gpuworker, then reloads a config that adds a model, and one that is bad.
func TestServeAndReload(t *testing.T) {
	wsrv := startWorker(t, "a")
	wsrvB := startWorker(t, "b")

	cfg := "listen: 127.0.0.1:0\nmodels:\n  - name: a\n    backends:\n      - url: " + wsrv.URL + "\n"
	path := writeConfig(t, cfg)
	srv := serveReloadable(t, path)
	reload, logs := srv.reload, srv.logs
	defer http.DefaultClient.CloseIdleConnections()
	post := func(model string) int { return srv.complete(t, model, "") }
	assert.Equal(t, http.StatusOK, post("a"))
	assert.Equal(t, http.StatusNotFound, post("b"))

	require.NoError(t, os.WriteFile(path, []byte(cfg+"  - name: b\n    backends:\n      - url: "+wsrvB.URL+"\n"), 0o600))
	reload <- syscall.SIGHUP
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "config reloaded") }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, http.StatusOK, post("a"))
	assert.Equal(t, http.StatusOK, post("b"))
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), `msg="backend metrics dialect detected" backend=`+wsrvB.URL)
	}, 5*time.Second, 5*time.Millisecond, "the reload gave the scraper the new backend")

	require.NoError(t, os.WriteFile(path, []byte("models: [}"), 0o600))
	reload <- syscall.SIGHUP
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "keeping the running config") }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, http.StatusOK, post("a"))
	srv.stop()
}

func TestServeFailsOnBadConfig(t *testing.T) {
	var errOut bytes.Buffer
	code := run([]string{"serve", "--config", writeConfig(t, "models: []\n")}, io.Discard, &errOut)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut.String(), "at least one model")
}

func startWorker(t *testing.T, model string) *httptest.Server {
	t.Helper()
	return serveWorker(t, model, httptest.NewServer)
}

// serveWorker runs a gpuworker for model behind the server serve starts
// (httptest.NewServer or NewTLSServer) until the test ends.
func serveWorker(t *testing.T, model string, serve func(http.Handler) *httptest.Server) *httptest.Server {
	t.Helper()
	return serveWorkerOpts(t, gpuworker.Options{Model: model}, serve)
}

// serveWorkerOpts is serveWorker for a gpuworker with options o.
func serveWorkerOpts(t *testing.T, o gpuworker.Options, serve func(http.Handler) *httptest.Server) *httptest.Server {
	t.Helper()
	w, err := gpuworker.New(o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	srv := serve(w.Handler())
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return srv
}

// TestReloadKeepsKeysWhenTheFileLosesItsTenants: a config file cut short
// before its tenants (a truncated write) is valid, and reloaded it served
// every caller without a key or limits; it is refused instead, and the
// keys stay asked for.
func TestReloadKeepsKeysWhenTheFileLosesItsTenants(t *testing.T) {
	w := startWorker(t, "m")
	path := tenantConfig(t, w.URL, "    requests_per_minute: 600\n", "  key_prefix: reload\n")
	full, err := os.ReadFile(path)
	require.NoError(t, err)
	srv := serveReloadable(t, path)
	reload, logs := srv.reload, srv.logs
	defer http.DefaultClient.CloseIdleConnections()
	post := func(key string) int { return srv.complete(t, "m", key) }
	require.Equal(t, http.StatusUnauthorized, post(""))
	require.Equal(t, http.StatusOK, post("sk-acme"))

	cut, _, ok := strings.Cut(string(full), "tiers:")
	require.True(t, ok)
	require.NoError(t, os.WriteFile(path, []byte(cut), 0o600))
	reload <- syscall.SIGHUP
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "keeping the running config") }, 5*time.Second, 5*time.Millisecond)
	assert.Contains(t, logs.String(), "a reload does not turn authentication off")
	assert.Equal(t, http.StatusUnauthorized, post(""), "keys are still asked for")
	assert.Equal(t, http.StatusOK, post("sk-acme"))
	srv.stop()
}

// TestMetricsTokenGuardsMetrics: with SLUICE_METRICS_TOKEN set, /metrics
// (which names tenants, tiers and backends) asks for it; probes do not.
func TestMetricsTokenGuardsMetrics(t *testing.T) {
	t.Setenv("SLUICE_METRICS_TOKEN", "m-secret")
	w := startWorker(t, "m")
	addr, tr, _ := serveE2E(t, "listen: 127.0.0.1:0\nscrape:\n  enabled: false\nmodels:\n  - name: m\n    backends:\n      - url: "+w.URL+"\n",
		slog.New(slog.DiscardHandler))
	get := func(path, auth string) int {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := (&http.Client{Transport: tr}).Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	assert.Equal(t, http.StatusUnauthorized, get("/metrics", ""))
	assert.Equal(t, http.StatusUnauthorized, get("/metrics", "Bearer wrong"))
	assert.Equal(t, http.StatusOK, get("/metrics", "Bearer m-secret"))
	assert.Equal(t, http.StatusOK, get("/metrics", "bearer  m-secret"))
	assert.Equal(t, http.StatusOK, get("/healthz", ""))
	assert.Equal(t, http.StatusOK, get("/readyz", ""))
}

// adminAddrOf waits for the admin listener's address in a server's log.
func adminAddrOf(t *testing.T, logs *syncBuffer) string {
	t.Helper()
	var addr string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`admin API listening" addr=(\S+)`).FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 5*time.Second, 5*time.Millisecond)
	return addr
}

// serveInTest runs runServer with o (its ready, reload and log set here)
// until the test ends, and returns its address, its reload channel and
// its log.
func serveInTest(t *testing.T, o serverOptions) (addr string, reload chan<- os.Signal, logs *syncBuffer) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	r := make(chan os.Signal, 1)
	logs = &syncBuffer{}
	o.ready, o.reload, o.log = ready, r, slog.New(slog.NewTextHandler(logs, nil))
	go func() { done <- runServer(ctx, o) }()
	t.Cleanup(func() { stop(); <-done })
	return <-ready, r, logs
}
