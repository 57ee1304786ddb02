package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAdminAPI(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_TOKEN", "admin-secret")
	a, b := startWorker(t, "m"), startWorker(t, "m")
	path := writeConfig(t, "listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nscrape:\n  enabled: false\nmodels:\n  - name: m\n    backends:\n      - url: "+a.URL+"\n        api_key: backend-secret\n")
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var logs syncBuffer
	go func() {
		done <- runServer(ctx, serverOptions{path: path, drain: time.Second, ready: ready, log: slog.New(slog.NewTextHandler(&logs, nil))})
	}()
	addr := <-ready
	adminAddr := adminAddrOf(t, &logs)
	call := func(method, route, token, body string) (int, string) {
		req, err := http.NewRequest(method, "http://"+adminAddr+route, strings.NewReader(body))
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(out)
	}
	backends := func() []map[string]any {
		code, body := call("GET", "/admin/backends", "admin-secret", "")
		require.Equal(t, http.StatusOK, code, body)
		var out struct{ Backends []map[string]any }
		require.NoError(t, json.Unmarshal([]byte(body), &out))
		return out.Backends
	}

	code, _ := call("GET", "/admin/backends", "", "")
	assert.Equal(t, http.StatusUnauthorized, code)
	code, _ = call("GET", "/admin/backends", "wrong", "")
	assert.Equal(t, http.StatusUnauthorized, code)
	require.Len(t, backends(), 1)

	code, body := call("POST", "/admin/backends", "admin-secret", `{"model":"m","url":"`+b.URL+`"}`)
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, backends(), 2)
	code, _ = call("POST", "/admin/backends", "admin-secret", `{"model":"m","url":"http://127.0.0.1:99999"}`)
	assert.Equal(t, http.StatusUnprocessableEntity, code, "an invalid change is refused whole")
	code, _ = call("POST", "/admin/backends", "admin-secret", `{"model":"nope","url":"`+b.URL+`"}`)
	assert.Equal(t, http.StatusNotFound, code)
	// One object and nothing after it: a call with a second one is not
	// carried out in part.
	code, body = call("DELETE", "/admin/backends", "admin-secret", `{"model":"m","url":"`+b.URL+`"} {"model":"m","url":"`+a.URL+`"}`)
	assert.Equal(t, http.StatusBadRequest, code, body)
	require.Len(t, backends(), 2)

	assert.Contains(t, logs.String(), `msg="backend added" model=m backend=`+b.URL, "the log names what changed")
	// Drain and remove take the URL as the config's duplicate check does:
	// host case and a trailing slash aside (a drain with "/" was a 404).
	code, _ = call("POST", "/admin/backends/drain", "admin-secret", `{"model":"m","url":"`+b.URL+`/"}`)
	require.Equal(t, http.StatusOK, code)
	for _, be := range backends() {
		assert.Equal(t, be["url"] != b.URL, be["in_routing"], "%v", be)
	}
	assert.Contains(t, logs.String(), `msg="backend drained" model=m backend=`+b.URL)
	code, _ = call("DELETE", "/admin/backends", "admin-secret", `{"model":"m","url":"`+b.URL+`/"}`)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, backends(), 1)
	assert.Contains(t, logs.String(), `msg="backend removed" model=m backend=`+b.URL+`/`)
	// Added back, it is in routing: its drain ended with its removal (it
	// came back drained, and got no traffic).
	code, body = call("POST", "/admin/backends", "admin-secret", `{"model":"m","url":"`+b.URL+`"}`)
	require.Equal(t, http.StatusOK, code, body)
	found := false
	for _, be := range backends() {
		if be["url"] == b.URL {
			found = true
			assert.Equal(t, true, be["in_routing"], "%v", be)
			assert.Equal(t, false, be["drained"], "%v", be)
		}
	}
	require.True(t, found)
	code, _ = call("DELETE", "/admin/backends", "admin-secret", `{"model":"m","url":"`+b.URL+`"}`)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, backends(), 1)

	code, body = call("GET", "/admin/config", "admin-secret", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "REDACTED")
	assert.NotContains(t, body, "backend-secret")
	// The config that runs: switches left unset and inherited timeouts as
	// they take effect (they showed as null and 0s).
	assert.NotContains(t, body, "null")
	assert.Regexp(t, `breaker:\s+enabled: true`, body)
	assert.Regexp(t, `log:\s+requests: true`, body)
	assert.Contains(t, body, "first_byte: 1m0s", "upstream.response_header_timeout's default")
	assert.Contains(t, body, "fail_open: true")

	code, _ = call("POST", "/admin/reload", "admin-secret", "")
	assert.Equal(t, http.StatusOK, code)
	assert.NotContains(t, logs.String(), "replaced backends changed through the admin API", "the file matched what ran")

	// A reload replaces a backend added through the API, and says so.
	code, body = call("POST", "/admin/backends", "admin-secret", `{"model":"m","url":"`+b.URL+`"}`)
	require.Equal(t, http.StatusOK, code, body)
	code, _ = call("POST", "/admin/reload", "admin-secret", "")
	require.Equal(t, http.StatusOK, code)
	require.Len(t, backends(), 1)
	assert.Contains(t, logs.String(), "the config file replaced backends changed through the admin API")
	assert.NotContains(t, logs.String(), "take effect on restart", "no setting read at start changed, through the API or the file")

	// A backend removed while a request streams there is listed, marked
	// removed, until the request ends (it vanished at once, in flight).
	_, slow := slowWorker(t)
	code, body = call("POST", "/admin/backends", "admin-secret", `{"model":"m","url":"`+slow+`"}`)
	require.Equal(t, http.StatusOK, code, body)
	code, _ = call("POST", "/admin/backends/drain", "admin-secret", `{"model":"m","url":"`+a.URL+`"}`)
	require.Equal(t, http.StatusOK, code)
	c := client(addr)
	stream := c.Chat.Completions.NewStreaming(context.Background(), chat("", 5000))
	require.True(t, stream.Next(), "a stream on the slow backend")
	code, _ = call("DELETE", "/admin/backends", "admin-secret", `{"model":"m","url":"`+slow+`"}`)
	require.Equal(t, http.StatusOK, code)
	var removed map[string]any
	for _, be := range backends() {
		if be["url"] == slow {
			removed = be
		}
	}
	require.NotNil(t, removed, "the removed backend is listed while its request runs")
	assert.Equal(t, true, removed["removed"])
	assert.EqualValues(t, 1, removed["in_flight"])
	mres, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	page, _ := io.ReadAll(mres.Body)
	mres.Body.Close()
	assert.Contains(t, string(page), `sluice_upstream_in_flight_requests{backend="`+slow+`"} 1`, "and its in-flight series stays")
	assert.Equal(t, false, removed["in_routing"])
	require.NoError(t, stream.Close())
	assert.Eventually(t, func() bool {
		for _, be := range backends() {
			if be["url"] == slow {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "gone once its request ended")
	code, _ = call("POST", "/admin/backends/undrain", "admin-secret", `{"model":"m","url":"`+a.URL+`"}`)
	require.Equal(t, http.StatusOK, code)

	// A setting read only at start, changed in the file: the config shown
	// is what runs, and says what waits for a restart.
	orig, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append([]byte("max_body_bytes: 2048\n"), orig...), 0o600))
	code, _ = call("POST", "/admin/reload", "admin-secret", "")
	require.Equal(t, http.StatusOK, code)
	code, body = call("GET", "/admin/config", "admin-secret", "")
	require.Equal(t, http.StatusOK, code)
	assert.True(t, strings.HasPrefix(body, "# changed in "+path+" and waiting for a restart (shown as running): max_body_bytes\n"), body)
	assert.Contains(t, body, "max_body_bytes: 10485760")
	assert.Contains(t, logs.String(), "config changes that take effect on restart")

	// A reload that changes a drained backend's weight keeps it drained,
	// with its counters (it was a new endpoint: back in routing, counts
	// at zero).
	_, err = c.Completions.New(context.Background(), openai.CompletionNewParams{Model: "m",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(2)})
	require.NoError(t, err)
	code, _ = call("POST", "/admin/backends/drain", "admin-secret", `{"model":"m","url":"`+a.URL+`"}`)
	require.Equal(t, http.StatusOK, code)
	byURL := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, be := range backends() {
			out[be["url"].(string)] = be
		}
		return out
	}
	before := byURL()[a.URL]
	require.Positive(t, before["requests_total"])
	weighted := strings.Replace(string(orig), "        api_key: backend-secret\n", "        api_key: backend-secret\n        weight: 5\n", 1)
	require.NotEqual(t, string(orig), weighted)
	require.NoError(t, os.WriteFile(path, []byte(weighted), 0o600))
	code, body = call("POST", "/admin/reload", "admin-secret", "")
	require.Equal(t, http.StatusOK, code, body)
	after := byURL()[a.URL]
	assert.EqualValues(t, 5, after["weight"])
	assert.Equal(t, true, after["drained"], "still drained")
	assert.Equal(t, false, after["in_routing"])
	assert.Equal(t, before["requests_total"], after["requests_total"], "its counters kept")

	// Every change is counted; a failed reload shows in the metrics, not
	// only in the log.
	metric := func(series string) string {
		res, err := http.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		defer res.Body.Close()
		page, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(string(page))
		require.NotNil(t, m, "%s in %s", series, page)
		return m[1]
	}
	assert.Equal(t, "1", metric("sluice_config_last_reload_successful"))
	assert.Equal(t, "2", metric(`sluice_config_changes_total{result="failed",source="admin"}`), "the bad URL and the unknown model")
	require.NoError(t, os.WriteFile(path, []byte("models: [\n"), 0o600))
	code, _ = call("POST", "/admin/reload", "admin-secret", "")
	require.Equal(t, http.StatusUnprocessableEntity, code)
	assert.Equal(t, "0", metric("sluice_config_last_reload_successful"))
	assert.Equal(t, "1", metric(`sluice_config_changes_total{result="failed",source="reload"}`))
	assert.Regexp(t, `msg="config reload failed; keeping the running config" path=`, logs.String())
	assert.NotContains(t, logs.String(), `change="config reloaded"`, "a failure's line does not read as a success")
	stop()
	require.NoError(t, <-done)
	http.DefaultClient.CloseIdleConnections()
}

// A backend another model lists already is added to a model with its
// weight and key when the call gives none (it was refused, 422, blaming
// the other model's weight); a body with more after its object is refused
// whole.
func TestAdminAddSharesABackendsWeightAndKey(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_TOKEN", "admin-secret")
	a := startWorker(t, "m")
	path := writeConfig(t, "listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nscrape:\n  enabled: false\nmodels:\n"+
		"  - name: m\n    backends:\n      - url: "+a.URL+"\n        weight: 3\n        api_key: backend-secret\n"+
		"  - name: n\n    backends:\n      - url: http://127.0.0.1:1\n")
	_, _, logs := serveInTest(t, serverOptions{path: path, drain: time.Second})
	adminAddr := adminAddrOf(t, logs)
	call := func(body string) (int, string) {
		req, err := http.NewRequest("POST", "http://"+adminAddr+"/admin/backends", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer admin-secret")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(out)
	}
	code, body := call(`{"model":"n","url":"` + a.URL + `"} {"model":"n","url":"http://127.0.0.1:2"}`)
	assert.Equal(t, http.StatusBadRequest, code, body)
	code, body = call(`{"model":"n","url":"` + a.URL + `"}`)
	require.Equal(t, http.StatusOK, code, body)

	req, err := http.NewRequest("GET", "http://"+adminAddr+"/admin/config", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer admin-secret")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	cfg, _ := io.ReadAll(res.Body)
	assert.Equal(t, 2, strings.Count(string(cfg), "weight: 3"), "both models list it with its weight:\n%s", cfg)
	assert.Equal(t, 2, strings.Count(string(cfg), "api_key: REDACTED"), "and its key")
	assert.NotContains(t, string(cfg), "127.0.0.1:2", "nothing of the refused body was added")
}
