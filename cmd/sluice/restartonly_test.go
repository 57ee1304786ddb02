package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAReloadKeepsTheStartedUpstream: upstream takes effect on restart,
// its response_header_timeout included. A reload that set it to 1 s
// (with a change to the model, so that its route was rebuilt) gave a
// backend that answers in 1.5 s a 504, while the log said "running as
// started".
func TestAReloadKeepsTheStartedUpstream(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(1500 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(slow.Close)
	model := "models:\n  - name: m\n    policy: POLICY\n    backends:\n      - url: " + slow.URL + "\n"
	base := "listen: 127.0.0.1:0\nscrape:\n  enabled: false\n"
	path := writeConfig(t, base+strings.Replace(model, "POLICY", "round_robin", 1))
	addr, reload, logs := serveInTest(t, serverOptions{path: path, drain: time.Second})

	require.NoError(t, os.WriteFile(path, []byte(base+"upstream:\n  response_header_timeout: 1s\n"+strings.Replace(model, "POLICY", "random", 1)), 0o600))
	reload <- syscall.SIGHUP
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "config reloaded") }, 5*time.Second, 5*time.Millisecond)
	assert.Contains(t, logs.String(), "take effect on restart")

	res, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "the started first-byte timeout (1 m), not the file's 1 s")
}

// TestTheCommandLineOverridesShowAsRunning: --listen and --redis-url run
// instead of the file's listen and redis_url; /admin/config shows them
// (it showed the file's), and a reload of the same file is no change
// waiting for a restart.
func TestTheCommandLineOverridesShowAsRunning(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_TOKEN", "admin-secret")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { taken.Close() })
	redis := startRedis(t)
	path := writeConfig(t, "listen: "+taken.Addr().String()+"\nadmin:\n  listen: 127.0.0.1:0\nscrape:\n  enabled: false\n"+
		"models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n")
	addr, reload, logs := serveInTest(t, serverOptions{path: path, listen: "127.0.0.1:0", redisURL: redis.url(), drain: time.Second})
	assert.NotEqual(t, taken.Addr().String(), addr)
	adminAddr := adminAddrOf(t, logs)

	reload <- syscall.SIGHUP
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "config reloaded") }, 5*time.Second, 5*time.Millisecond)
	assert.NotContains(t, logs.String(), "take effect on restart")
	req, err := http.NewRequest("GET", "http://"+adminAddr+"/admin/config", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer admin-secret")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Contains(t, string(body), "listen: 127.0.0.1:0\n")
	assert.Contains(t, string(body), "redis_url: "+redis.url())
}
