package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/router/admin"
)

// fake is a Source (and a Runtime) whose readings the test sets.
type fake struct {
	mu       sync.Mutex
	backends []admin.Backend
	tenants  []admin.TenantUse
	queues   []admin.QueueClass
}

func (f *fake) Backends() []admin.Backend {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]admin.Backend(nil), f.backends...)
}

func (f *fake) Tenants() []admin.TenantUse {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]admin.TenantUse(nil), f.tenants...)
}

func (f *fake) Queues() []admin.QueueClass {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]admin.QueueClass(nil), f.queues...)
}

func (f *fake) set(requests uint64, tokens int64, q admin.QueueClass) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backends = []admin.Backend{{Model: "m", URL: "http://a", Breaker: "closed", Requests: requests, TokensPerSec: 50}}
	f.tenants = []admin.TenantUse{{Name: "acme", Tier: "gold", TokensTotal: tokens}}
	f.queues = []admin.QueueClass{q}
}

func (*fake) AddBackend(string, string, int, string) error { return nil }
func (*fake) RemoveBackend(string, string) error           { return nil }
func (*fake) Drain(string, string, bool) error             { return nil }
func (*fake) Reload() error                                { return nil }
func (*fake) Config() ([]byte, error)                      { return nil, nil }

func chartOf(t *testing.T, s admin.Status, id string) admin.Chart {
	t.Helper()
	for _, c := range s.History.Charts {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no chart %q", id)
	return admin.Chart{}
}

func TestMonitorRatesAndHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		f.set(0, 0, admin.QueueClass{Model: "m", Class: "flex"})
		m, err := admin.NewMonitor(f, admin.MonitorOptions{Interval: 2 * time.Second, Keep: 10 * time.Second})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		synctest.Wait() // the first sample, at once

		s := m.Status()
		require.Len(t, s.Backends, 1)
		assert.Nil(t, s.Backends[0].RequestsPerSec, "no rate from one sample")

		// 20 attempts and 400 tokens in each 2 s; a queue of 3 flex
		// requests, 4 admitted after 2 s waits each.
		for i := 1; i <= 7; i++ {
			f.set(uint64(20*i), int64(400*i), admin.QueueClass{Model: "m", Class: "flex", Waiting: 3,
				AdmittedTotal: uint64(4 * i), WaitedSeconds: float64(8 * i)})
			time.Sleep(2 * time.Second)
			synctest.Wait()
		}
		s = m.Status()
		require.NotNil(t, s.Backends[0].RequestsPerSec)
		assert.InDelta(t, 10, *s.Backends[0].RequestsPerSec, 1e-9)
		assert.Len(t, s.History.T, 5, "Keep / Interval samples")
		assert.EqualValues(t, 10, s.HistorySeconds)
		rps := chartOf(t, s, "rps")
		require.Len(t, rps.Series, 1)
		assert.Equal(t, "http://a", rps.Series[0].Name)
		for _, v := range rps.Series[0].Values[1:] {
			assert.InDelta(t, 10, float64(v), 1e-9)
		}
		tps := chartOf(t, s, "tenant_tps")
		require.Len(t, tps.Series, 1)
		assert.InDelta(t, 200, float64(tps.Series[0].Values[4]), 1e-9)
		queue := chartOf(t, s, "queue")
		require.Len(t, queue.Series, 1)
		assert.Equal(t, "m · flex", queue.Series[0].Name)
		assert.EqualValues(t, 3, queue.Series[0].Values[4])
		require.Len(t, s.Queues, 1)
		assert.EqualValues(t, 16, s.Queues[0].AdmittedLastMinute, "the samples kept span 8 s")
		require.NotNil(t, s.Queues[0].MeanWaitMillis)
		assert.InDelta(t, 2000, *s.Queues[0].MeanWaitMillis, 1e-9)

		// A rebuilt endpoint counts from zero: no rate for that step.
		f.set(5, 0, admin.QueueClass{Model: "m", Class: "flex"})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		s = m.Status()
		assert.Nil(t, s.Backends[0].RequestsPerSec)
		b, err := json.Marshal(chartOf(t, s, "rps"))
		require.NoError(t, err)
		assert.Contains(t, string(b), ",null]", "a counter reset is a gap, not a spike")

		cancel()
		require.NoError(t, <-done)
	})
}

func TestMonitorCapsSeries(t *testing.T) {
	f := &fake{}
	for i := range 5 {
		f.backends = append(f.backends, admin.Backend{URL: "http://b" + string(rune('0'+i)), InFlight: int64(i)})
	}
	m, err := admin.NewMonitor(f, admin.MonitorOptions{MaxSeries: 2})
	require.NoError(t, err)
	m.Sample()
	c := chartOf(t, m.Status(), "inflight")
	require.Len(t, c.Series, 2)
	assert.Equal(t, "http://b3", c.Series[0].Name, "the highest peaks, by name")
	assert.Equal(t, "http://b4", c.Series[1].Name)
}

func TestStatusPageAndData(t *testing.T) {
	f := &fake{}
	f.set(3, 0, admin.QueueClass{Model: "m", Class: "default"})
	m, err := admin.NewMonitor(f, admin.MonitorOptions{})
	require.NoError(t, err)
	m.Sample()
	srv := httptest.NewServer(admin.Handler(f, "secret", m))
	defer srv.Close()
	do := func(method, path, token string) (*http.Response, string) {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(b)
	}
	get := func(path, token string) (*http.Response, string) { return do(http.MethodGet, path, token) }
	for _, h := range []string{"bearer secret", "BEARER  secret "} { // the scheme's case is free, as on the API's listener
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/admin/status", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", h)
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, http.StatusOK, res.StatusCode, h)
	}
	tests := []struct {
		path, token string
		code        int
		ctype, has  string
	}{
		{"/status", "", http.StatusOK, "text/html", `<script src="/status/app.js"`},
		{"/status/app.js", "", http.StatusOK, "text/javascript", "/admin/status"},
		{"/status/app.css", "", http.StatusOK, "text/css", "svg.chart"},
		{"/admin/status", "", http.StatusUnauthorized, "application/json", "admin token is required"},
		{"/admin/status", "wrong", http.StatusUnauthorized, "application/json", "admin token is required"},
		{"/admin/status", "secret", http.StatusOK, "application/json", `"url":"http://a"`},
		{"/admin/nope", "", http.StatusUnauthorized, "application/json", "admin token is required"},
		{"/admin/nope", "secret", http.StatusNotFound, "application/json", "no such admin route"},
	}
	for _, tt := range tests {
		res, body := get(tt.path, tt.token)
		assert.Equal(t, tt.code, res.StatusCode, "%s %q", tt.path, tt.token)
		assert.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), tt.ctype), "%s: %s", tt.path, res.Header.Get("Content-Type"))
		assert.Contains(t, body, tt.has, tt.path)
		if strings.HasPrefix(tt.path, "/status") {
			assert.Contains(t, res.Header.Get("Content-Security-Policy"), "script-src 'self'", tt.path)
		}
	}
	// HEAD is served as GET, headers only: the page's health probed, the
	// data still behind the token.
	for _, tt := range []struct {
		path, token string
		code        int
	}{{"/status", "", http.StatusOK}, {"/admin/status", "secret", http.StatusOK}, {"/admin/status", "", http.StatusUnauthorized}} {
		res, b := do(http.MethodHead, tt.path, tt.token)
		assert.Equal(t, tt.code, res.StatusCode, "HEAD %s", tt.path)
		assert.Empty(t, b, "HEAD %s", tt.path)
	}
	// Errors have the OpenAI API's shape, 405s included.
	for _, tt := range []struct {
		method, path, token string
		code                int
		errCode             string
	}{{"GET", "/admin/status", "", http.StatusUnauthorized, "invalid_admin_token"}, {"PUT", "/admin/status", "secret", http.StatusMethodNotAllowed, "method_not_allowed"}} {
		res, b := do(tt.method, tt.path, tt.token)
		var e struct {
			Error struct{ Message, Type, Code string }
		}
		require.NoError(t, json.Unmarshal([]byte(b), &e), "%s %s", tt.method, tt.path)
		assert.Equal(t, tt.code, res.StatusCode)
		if tt.code == http.StatusMethodNotAllowed {
			assert.Equal(t, "GET, HEAD", res.Header.Get("Allow"), "a 405 names the methods the route takes")
		}
		assert.Equal(t, tt.errCode, e.Error.Code)
		assert.Equal(t, "invalid_request_error", e.Error.Type)
		assert.NotEmpty(t, e.Error.Message)
	}
	res, body := get("/admin/status", "secret")
	assert.Equal(t, "no-store", res.Header.Get("Cache-Control"))
	var s admin.Status
	require.NoError(t, json.Unmarshal([]byte(body), &s))
	assert.Equal(t, "acme", s.Tenants[0].Name)

	// Without a Monitor there is no page.
	plain := httptest.NewServer(admin.Handler(f, "secret", nil))
	defer plain.Close()
	r, err := plain.Client().Get(plain.URL + "/status")
	require.NoError(t, err)
	r.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, r.StatusCode)
}
