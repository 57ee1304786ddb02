package loadscrape_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/backends/loadscrape"
	"github.com/sluice-llm/sluice/gpuworker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const model = "m"

// startWorker runs a real gpuworker on loopback that exports dialect. It
// simulates an L4 (about 50 ms per decode step) whose engine runs at most
// two sequences at once, so long answers stay running or waiting for
// seconds, until their clients leave.
func startWorker(t *testing.T, dialect string) *httptest.Server {
	t.Helper()
	p, err := gpuworker.LookupProfile("l4-llama3-8b")
	require.NoError(t, err)
	p.Name, p.MaxNumSeqs = "l4-two-seqs", 2
	w, err := gpuworker.New(gpuworker.Options{Model: model, CustomProfile: &p, Dialect: dialect})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		require.NoError(t, <-done)
	})
	return srv
}

// startScraper runs a scraper over eps until the test ends.
func startScraper(t *testing.T, o loadscrape.Options, eps ...*backends.Endpoint) *loadscrape.Scraper {
	t.Helper()
	if o.Interval == 0 {
		o.Interval = 20 * time.Millisecond
		o.Timeout = 15 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := loadscrape.New(o)
	require.NoError(t, err)
	s.SetEndpoints(eps)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return s
}

func endpoint(t *testing.T, url string) *backends.Endpoint {
	t.Helper()
	e, err := backends.NewEndpoint(url, 1)
	require.NoError(t, err)
	return e
}

// hold sends n long streaming chat requests and returns a function that
// hangs them up and waits for them; the test's cleanup calls it too.
func hold(t *testing.T, url string, n int) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{Transport: &http.Transport{}}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			body := `{"model":"` + model + `","stream":true,"max_tokens":4000,"ignore_eos":true,` +
				`"messages":[{"role":"user","content":"` + strings.Repeat("tell me a long story ", 20) + `"}]}`
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
			res, err := client.Do(req)
			if err != nil {
				return // released before the headers came
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		})
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			client.CloseIdleConnections()
		})
	}
	t.Cleanup(release)
	return release
}

func TestScrapesEachDialectFromALiveWorker(t *testing.T) {
	tests := []struct {
		dialect string
		want    loadscrape.Dialect
		kv      bool // the dialect reports KV-cache use
	}{
		{gpuworker.DialectVLLM, loadscrape.DialectVLLM, true},
		{gpuworker.DialectSGLang, loadscrape.DialectSGLang, true},
		{gpuworker.DialectTGI, loadscrape.DialectTGI, false},
	}
	for _, tt := range tests {
		t.Run(tt.dialect, func(t *testing.T) {
			srv := startWorker(t, tt.dialect)
			e := endpoint(t, srv.URL)
			s := startScraper(t, loadscrape.Options{}, e)

			require.Eventually(t, func() bool { return e.Load() != nil }, 5*time.Second, 5*time.Millisecond)
			idle := e.Load()
			assert.Equal(t, tt.want, s.Dialect(e))
			assert.Zero(t, idle.Running)
			assert.Zero(t, idle.Waiting)
			if !tt.kv {
				assert.EqualValues(t, -1, idle.KVUsage, "unknown, not zero")
			}

			release := hold(t, srv.URL, 3)
			require.Eventually(t, func() bool {
				l := e.Load()
				return l != nil && l.Running == 2 && l.Waiting == 1
			}, 5*time.Second, 5*time.Millisecond, "two running (max_num_seqs), one waiting")
			l := e.Load()
			if tt.kv {
				assert.Greater(t, l.KVUsage, 0.0)
				assert.LessOrEqual(t, l.KVUsage, 1.0)
			} else {
				assert.EqualValues(t, -1, l.KVUsage)
			}
			assert.False(t, l.At.Before(idle.At))

			release()
			require.Eventually(t, func() bool {
				l := e.Load()
				return l != nil && l.Running == 0 && l.Waiting == 0
			}, 5*time.Second, 5*time.Millisecond, "released requests leave the engine")
		})
	}
}

func TestDeadWorkerGoesStale(t *testing.T) {
	srv := startWorker(t, gpuworker.DialectVLLM)
	e := endpoint(t, srv.URL)
	reg := prometheus.NewRegistry()
	startScraper(t, loadscrape.Options{Registerer: reg}, e)
	require.Eventually(t, func() bool { return e.Load() != nil }, 5*time.Second, 5*time.Millisecond)

	srv.Close()
	require.Eventually(t, func() bool { return e.Load() == nil }, 5*time.Second, 5*time.Millisecond,
		"a dead worker's load is unknown, not zero")
	require.Eventually(t, func() bool { return scrapeErrors(t, reg, srv.URL) > 0 }, 5*time.Second, 5*time.Millisecond)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	assert.Contains(t, names, "sluice_scrape_duration_seconds")
}

// scrapeErrors reads sluice_scrape_errors_total{backend=addr} from reg.
func scrapeErrors(t *testing.T, reg *prometheus.Registry, addr string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sluice_scrape_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == addr {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestFailedScrapesAreStale serves each kind of bad answer and checks the
// endpoint never reads as idle.
func TestFailedScrapesAreStale(t *testing.T) {
	good := "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n" +
		"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 4\n"
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"status 500", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", 500) }},
		{"unparsable", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "vllm:num_requests_running{ 1\n")
		}},
		{"no known metrics", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "process_cpu_seconds_total 1\n")
		}},
		{"only one of running and waiting", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "vllm:num_requests_running 1\n")
		}},
		{"too slow", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(time.Second):
			}
			_, _ = io.WriteString(w, good)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bad atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/metrics" {
					http.NotFound(w, r)
					return
				}
				if bad.Load() {
					tt.handler(w, r)
					return
				}
				_, _ = io.WriteString(w, good)
			}))
			defer srv.Close()
			e := endpoint(t, srv.URL)
			startScraper(t, loadscrape.Options{}, e)
			require.Eventually(t, func() bool { l := e.Load(); return l != nil && l.Running == 3 && l.Waiting == 4 },
				5*time.Second, 5*time.Millisecond)
			bad.Store(true)
			require.Eventually(t, func() bool { return e.Load() == nil }, 5*time.Second, 5*time.Millisecond)
			bad.Store(false)
			require.Eventually(t, func() bool { return e.Load() != nil }, 5*time.Second, 5*time.Millisecond, "recovers")
		})
	}
}

func TestSetEndpointsSwapsTheSet(t *testing.T) {
	reg := prometheus.NewRegistry()
	srvA := startWorker(t, gpuworker.DialectVLLM)
	srvB := startWorker(t, gpuworker.DialectTGI)
	a, b, dead := endpoint(t, srvA.URL), endpoint(t, srvB.URL), endpoint(t, "http://127.0.0.1:1")
	s := startScraper(t, loadscrape.Options{Registerer: reg}, a, a, dead)
	require.Eventually(t, func() bool { return a.Load() != nil && scrapeErrors(t, reg, dead.Address()) > 0 },
		5*time.Second, 5*time.Millisecond)
	assert.Equal(t, loadscrape.DialectVLLM, s.Dialect(a))
	assert.Empty(t, s.Dialect(b), "not scraped")

	s.SetEndpoints([]*backends.Endpoint{b})
	require.Eventually(t, func() bool { return b.Load() != nil }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, loadscrape.DialectTGI, s.Dialect(b))
	assert.Empty(t, s.Dialect(a))
	require.Eventually(t, func() bool { return scrapeErrors(t, reg, dead.Address()) == 0 }, 5*time.Second, 5*time.Millisecond,
		"a removed backend's error series is dropped")
}

func TestRunOnce(t *testing.T) {
	s, err := loadscrape.New(loadscrape.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, s.Run(ctx), "a cancelled Run returns at once")
	assert.ErrorIs(t, s.Run(context.Background()), loadscrape.ErrAlreadyRunning, "a Scraper serves one lifetime")
}

// TestUnreachableWorkerLeavesRoutingUntilItAnswers: a scrape that cannot
// connect holds the endpoint out of routing, a scrape that answers brings
// it back.
func TestUnreachableWorkerLeavesRoutingUntilItAnswers(t *testing.T) {
	srv := startWorker(t, gpuworker.DialectVLLM)
	e := endpoint(t, srv.URL)
	startScraper(t, loadscrape.Options{Interval: 20 * time.Millisecond, Timeout: 15 * time.Millisecond}, e)
	require.Eventually(t, func() bool { return e.Load() != nil }, 5*time.Second, 5*time.Millisecond)
	assert.True(t, e.Available(time.Now()))
	addr, handler := srv.Listener.Addr().String(), srv.Config.Handler
	srv.Close()
	require.Eventually(t, func() bool { return !e.Available(time.Now()) }, 5*time.Second, 5*time.Millisecond,
		"refused connections take it out of routing")

	ln, err := net.Listen("tcp", addr) // the worker comes back on its address
	require.NoError(t, err)
	back := httptest.NewUnstartedServer(handler)
	back.Listener.Close()
	back.Listener = ln
	back.Start()
	t.Cleanup(back.Close)
	require.Eventually(t, func() bool { return e.Available(time.Now()) }, 5*time.Second, 5*time.Millisecond,
		"a scrape that answers brings it back")
}

// freezable serves h until frozen, then holds every request (as a stopped
// process whose kernel still accepts connections) until thawed or its
// client leaves.
type freezable struct {
	h      http.Handler
	mu     sync.Mutex
	thawed chan struct{} // nil while serving
}

func (f *freezable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	thawed := f.thawed
	f.mu.Unlock()
	if thawed != nil {
		select {
		case <-thawed:
		case <-r.Context().Done():
			return
		}
	}
	f.h.ServeHTTP(w, r)
}

func (f *freezable) freeze() { f.mu.Lock(); f.thawed = make(chan struct{}); f.mu.Unlock() }

func (f *freezable) thaw() {
	f.mu.Lock()
	if f.thawed != nil {
		close(f.thawed)
		f.thawed = nil
	}
	f.mu.Unlock()
}

func TestHungWorkerLeavesRoutingUntilItAnswers(t *testing.T) {
	srv := startWorker(t, gpuworker.DialectVLLM)
	f := &freezable{h: srv.Config.Handler}
	front := httptest.NewServer(f)
	t.Cleanup(front.Close)
	t.Cleanup(f.thaw) // first: the held requests go before the servers close
	e := endpoint(t, front.URL)
	startScraper(t, loadscrape.Options{Interval: 20 * time.Millisecond, Timeout: 15 * time.Millisecond, HungAfter: 100 * time.Millisecond}, e)
	require.Eventually(t, func() bool { return e.Load() != nil }, 5*time.Second, 5*time.Millisecond)

	f.freeze()
	require.Eventually(t, func() bool { return !e.Available(time.Now()) }, 5*time.Second, 5*time.Millisecond,
		"scrapes that time out with no answer begun meanwhile take it out of routing")
	assert.Zero(t, e.Failures(), "a health check's finding, not a failed request")

	f.thaw()
	require.Eventually(t, func() bool { return e.Available(time.Now()) }, 5*time.Second, 5*time.Millisecond,
		"a scrape that answers brings it back")
}

func TestSlowScrapesOfAWorkerThatAnswersKeepItInRouting(t *testing.T) {
	srv := startWorker(t, gpuworker.DialectVLLM)
	f := &freezable{h: srv.Config.Handler}
	front := httptest.NewServer(f)
	t.Cleanup(front.Close)
	t.Cleanup(f.thaw)
	e := endpoint(t, front.URL)
	reg := prometheus.NewRegistry()
	startScraper(t, loadscrape.Options{Interval: 20 * time.Millisecond, Timeout: 15 * time.Millisecond, HungAfter: 60 * time.Millisecond,
		Registerer: reg}, e)
	require.Eventually(t, func() bool { return e.Load() != nil }, 5*time.Second, 5*time.Millisecond)

	e.MarkAnswered(time.Now().Add(time.Hour)) // answers keep beginning there, whatever the scrapes do
	f.freeze()
	before := scrapeErrors(t, reg, e.Address())
	require.Eventually(t, func() bool { return scrapeErrors(t, reg, e.Address()) >= before+10 }, 5*time.Second, 5*time.Millisecond,
		"ten scrapes time out: past HungAfter")
	assert.True(t, e.Available(time.Now()), "a worker that answers requests stays in routing")
}

// logBuffer is a bytes.Buffer safe for the scraper's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestABackendWithoutMetricsThatGoesDownIsLogged: a backend whose scrapes
// fail all along (it serves no engine metrics) and then refuses
// connections is logged as such once: its going down left no line, the
// failing scrapes having been logged already.
func TestABackendWithoutMetricsThatGoesDownIsLogged(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	e := endpoint(t, srv.URL)
	var logs logBuffer
	startScraper(t, loadscrape.Options{Interval: 20 * time.Millisecond, Timeout: 15 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, e)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "scraping backend load failed") },
		5*time.Second, 5*time.Millisecond)
	srv.Close()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "backend refuses connections") },
		5*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // more refused scrapes: no more lines
	assert.Equal(t, 1, strings.Count(logs.String(), "backend refuses connections"))
}
