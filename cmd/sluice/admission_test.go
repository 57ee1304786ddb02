package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/roundrobin"
)

// slowWorker is a gpuworker with the H100 profile in real time, so that a
// long stream holds its slot.
func slowWorker(t *testing.T) (*gpuworker.Worker, string) {
	t.Helper()
	return slowWorkerBehind(t, func(h http.Handler) http.Handler { return h })
}

// slowWorkerBehind is slowWorker with its handler wrapped by wrap.
func slowWorkerBehind(t *testing.T, wrap func(http.Handler) http.Handler) (*gpuworker.Worker, string) {
	t.Helper()
	w, err := gpuworker.New(gpuworker.Options{Model: "m", Profile: "h100-llama3-8b", Speedup: 1})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	srv := httptest.NewServer(wrap(w.Handler()))
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return w, srv.URL
}

func client(addr string) openai.Client {
	return openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("unused"),
		option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: &http.Transport{}}))
}

func chat(tier string, maxTokens int64) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{Model: "m", MaxTokens: openai.Int(maxTokens),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	if tier != "" {
		p.ServiceTier = openai.ChatCompletionNewParamsServiceTier(tier)
	}
	return p
}

// TestAdmissionOrderAndBudgetAcrossReplicas runs two sluice processes that
// share one backend's budget of 1 through Redis: a default request waiting
// on one replica does not start before a priority request that has waited
// on the other, and the backend never runs more than one request.
func TestAdmissionOrderAndBudgetAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	redis := startRedis(t)
	bin := buildSluice(t)
	w, url := slowWorker(t)
	cfg := writeConfig(t, `listen: 127.0.0.1:0
scrape:
  enabled: false
models:
  - name: m
    admission:
      max_in_flight_per_backend: 1
      replicas: 2
    backends:
      - url: `+url+`
limits:
  redis_url: `+redis.url()+`
`)
	a, b := startReplica(t, bin, cfg), startReplica(t, bin, cfg)
	ca, cb := client(a), client(b)

	var most atomic.Int64 // the most requests the worker ever held at once
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				l := w.Load()
				if n := int64(l.Running + l.Waiting); n > most.Load() {
					most.Store(n)
				}
			}
		}
	})

	ctx, release := context.WithCancel(context.Background())
	hold := ca.Chat.Completions.NewStreaming(ctx, chat("", 5000))
	require.True(t, hold.Next(), "the holder streams through replica A")

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	send := func(c openai.Client, tier string) {
		wg.Go(func() {
			_, err := c.Chat.Completions.New(context.Background(), chat(tier, 2))
			assert.NoError(t, err)
			mu.Lock()
			order = append(order, tier)
			mu.Unlock()
		})
	}
	send(cb, "default") // waits on replica B
	time.Sleep(200 * time.Millisecond)
	send(ca, "priority") // waits on replica A, after it
	time.Sleep(300 * time.Millisecond)
	release()
	_ = hold.Close()
	wg.Wait()
	close(stop)
	watch.Wait()
	assert.Equal(t, []string{"priority", "default"}, order, "the better class first, across replicas")
	assert.LessOrEqual(t, most.Load(), int64(1), "one budget for both replicas")
	assert.Regexp(t, `sluice_admission_held_behind_total\{class="default",model="m"\} [1-9]`, scrapeText(t, b),
		"replica B counts its looks held behind the priority request on A")

	// Redis stops: each replica admits within its share (1 of 1, rounded
	// up), and nothing fails.
	redis.stop()
	var errs atomic.Int64
	var load sync.WaitGroup
	for i := range 8 {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		load.Go(func() {
			if _, err := c.Chat.Completions.New(context.Background(), chat("", 2)); err != nil {
				errs.Add(1)
			}
		})
	}
	load.Wait()
	assert.Zero(t, errs.Load(), "Redis down: served on each replica's share")
	page := scrapeText(t, a) + scrapeText(t, b)
	assert.Regexp(t, `sluice_admission_store_errors_total [1-9]`, page)
	assert.Contains(t, scrapeText(t, a), "sluice_admission_store_up 0")

	// Redis back: the first call that gets through (a request's, once the
	// breaker lets one ask) marks the store up again.
	redis.start()
	require.Eventually(t, func() bool {
		_, err := ca.Chat.Completions.New(context.Background(), chat("", 2))
		return err == nil && strings.Contains(scrapeText(t, a), "sluice_admission_store_up 1")
	}, 10*time.Second, 100*time.Millisecond, "the store is up again")
}

// TestReloadKeepsTheAdmissionQueue: a reload that leaves a model as it was
// (here it adds another) keeps that model's gate: a request waiting there
// is still counted, and a request after the reload still waits behind the
// one holding the only slot. A new gate per reload hid the waiter and
// granted the budget again beside the old gate's.
func TestReloadKeepsTheAdmissionQueue(t *testing.T) {
	var running atomic.Int32
	_, url := slowWorkerBehind(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/chat/completions" {
				running.Add(1)
				defer running.Add(-1)
			}
			h.ServeHTTP(w, r)
		})
	})
	other := startWorker(t, "other")
	cfg := "listen: 127.0.0.1:0\nscrape:\n  enabled: false\nmodels:\n  - name: m\n    admission:\n      max_in_flight_per_backend: 1\n    backends:\n      - url: " + url + "\n"
	path := writeConfig(t, cfg)
	srv := serveReloadable(t, path)
	addr, reload, logs := srv.addr, srv.reload, srv.logs
	c := client(addr)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	queued := func() float64 {
		mfs := sluiceMetrics(t, tr, addr)
		sum := 0.0
		for _, m := range mfs["sluice_admission_queued_requests"].GetMetric() {
			sum += m.GetGauge().GetValue()
		}
		return sum
	}

	holder := c.Chat.Completions.NewStreaming(context.Background(), chat("", 5000))
	require.True(t, holder.Next(), "the first request holds the slot")
	waited := make(chan error, 2)
	go func() {
		_, err := c.Chat.Completions.New(context.Background(), chat("", 2))
		waited <- err
	}()
	require.Eventually(t, func() bool { return queued() == 1 }, 5*time.Second, 5*time.Millisecond)

	require.NoError(t, os.WriteFile(path, []byte(cfg+"  - name: other\n    backends:\n      - url: "+other.URL+"\n"), 0o600))
	reload <- syscall.SIGHUP
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "config reloaded") }, 5*time.Second, 5*time.Millisecond)
	assert.EqualValues(t, 1, queued(), "the waiting request is still counted")
	go func() {
		_, err := c.Chat.Completions.New(context.Background(), chat("", 2))
		waited <- err
	}()
	require.Eventually(t, func() bool { return queued() == 2 }, 5*time.Second, 5*time.Millisecond,
		"a request after the reload waits behind the same slot")
	assert.EqualValues(t, 1, running.Load(), "the backend runs one request, its budget")

	require.NoError(t, holder.Close())
	for range 2 {
		assert.NoError(t, <-waited)
	}
	srv.stop()
}

// roundRobinGate is the gate main builds for model m over eps, picking by
// round robin.
func roundRobinGate(t *testing.T, m configs.Model, eps []*backends.Endpoint) *admission.Gate {
	t.Helper()
	pool, err := backends.NewPool(m.Name, eps)
	require.NoError(t, err)
	picker, err := roundrobin.New(nil)
	require.NoError(t, err)
	g, err := newGate(m, pool, picker, eps, nil)
	require.NoError(t, err)
	return g
}

// A backend's own max_pending_prompt_tokens overrides the model's (0
// here: off): backend a, bounded at 100 tokens, takes one 150-token prompt
// and then none while it is pending; b, unbounded, takes the rest.
func TestBackendMaxPendingPromptTokens(t *testing.T) {
	m := configs.Model{Name: "m", Admission: configs.Admission{MaxInFlightPerBackend: 10},
		Backends: []configs.Backend{{URL: "http://a.invalid:1", MaxPendingPromptTokens: 100}, {URL: "http://b.invalid:1"}}}
	var eps []*backends.Endpoint
	for _, b := range m.Backends {
		e, err := backends.NewEndpoint(b.URL, 1)
		require.NoError(t, err)
		eps = append(eps, e)
	}
	g := roundRobinGate(t, m, eps)
	count := map[*backends.Endpoint]int{}
	for range 10 {
		tk, err := g.Admit(context.Background(), admission.Request{Class: admission.Default, Tokens: 200,
			Routing: &policies.Request{Model: "m", PromptTokens: 150, MaxTokens: 50}})
		require.NoError(t, err)
		count[tk.Endpoint()]++
		defer tk.Release()
	}
	assert.Equal(t, 1, count[eps[0]], "a holds one pending prompt over its bound, then takes none")
	assert.Equal(t, 9, count[eps[1]], "b has no bound of its own and the model's is off")
}

// admission.max_detour_better_class reaches the gate: beside a flex
// request in flight, a priority request whose best start is on a busy
// fast backend waits for it rather than take a slow one's room (its
// context ends first here); with the option off it takes the slow one.
func TestMaxDetourBetterClassReachesTheGate(t *testing.T) {
	for _, on := range []bool{true, false} {
		opt := ""
		if on {
			opt = ", max_detour_better_class: 250ms"
		}
		c, err := configs.Parse([]byte("models:\n  - name: m\n    admission: {max_in_flight_per_backend: 4, max_pending_prefill: 20ms, max_pending_prefill_worse_class: -1s, max_detour_below_share: -1s" + opt +
			"}\n    backends:\n      - url: http://fast.invalid:1\n      - url: http://slow.invalid:1\n"))
		require.NoError(t, err)
		m := c.Models[0]
		var eps []*backends.Endpoint
		for i, rate := range []int{10_000, 1_000} {
			e, err := backends.NewEndpoint(m.Backends[i].URL, 1)
			require.NoError(t, err)
			e.ObservePrefill(0, rate, time.Second)
			eps = append(eps, e)
		}
		fast, slow := eps[0], eps[1]
		g := roundRobinGate(t, m, eps)
		admit := func(class admission.Class, prompt int) (*admission.Ticket, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			return g.Admit(ctx, admission.Request{Class: class, Tokens: int64(prompt + 10),
				Routing: &policies.Request{Model: "m", PromptTokens: prompt, MaxTokens: 10, Stream: true}})
		}
		first, err := admit(admission.Default, 250)
		require.NoError(t, err)
		require.Same(t, fast, first.Endpoint())
		first.Started()
		att := fast.Start(250, 10) // 25 ms of prefill ahead: past the bound
		flex, err := admit(admission.Flex, 5)
		require.NoError(t, err)
		require.Same(t, slow, flex.Endpoint(), "the fast backend is past its bound")
		// 200 tokens: 45 ms on the fast backend, 205 ms on the slow one.
		pri, err := admit(admission.Priority, 200)
		if on {
			assert.Error(t, err, "it waits for the fast backend")
		} else {
			require.NoError(t, err)
			assert.Same(t, slow, pri.Endpoint())
			pri.Release()
		}
		flex.Release()
		att.Finish(backends.Outcome{})
		first.Release()
	}
}

// The config's admission defaults are the gate's and the simulator's
// (configs cannot import the gate; the simulator takes the gate's).
func TestAdmissionDefaultsAgree(t *testing.T) {
	assert.Equal(t, admission.DefaultQueueSize, configs.DefaultAdmissionQueueSize)
	assert.Equal(t, admission.DefaultMaxPendingPrefill, configs.DefaultMaxPendingPrefill)
	assert.Equal(t, admission.DefaultBatchPrefill, configs.DefaultBatchPrefill)
	assert.Equal(t, admission.DefaultBelowShareDetour, configs.DefaultMaxDetourBelowShare)
	assert.Equal(t, admission.DefaultAboveSharePrefill, configs.DefaultMaxPendingPrefillAboveShare)
	assert.Equal(t, admission.DefaultWorseClassPrefill, configs.DefaultMaxPendingPrefillWorseClass)
	for c := range admission.NumClasses {
		assert.Equal(t, admission.DefaultMaxWait[c], configs.DefaultMaxWait(c.String()), c.String())
	}
}

// With admission on and no bound configured, max_pending_prefill's default
// (500ms) binds streams by the backend's measured prefill rate (one at a
// time before a measurement), while whole answers to a backend with no
// measured rate yet are bound by the budget alone.
func TestDefaultPrefillBound(t *testing.T) {
	gateOf := func(t *testing.T) (*admission.Gate, *backends.Endpoint) {
		c, err := configs.Parse([]byte("models:\n  - name: m\n    admission: {max_in_flight_per_backend: 10}\n    backends:\n      - url: http://a.invalid:1\n"))
		require.NoError(t, err)
		m := c.Models[0]
		e, err := backends.NewEndpoint(m.Backends[0].URL, 1)
		require.NoError(t, err)
		return roundRobinGate(t, m, []*backends.Endpoint{e}), e
	}
	// admitted sends requests of 200 prompt tokens until one finds no room
	// (it would wait: its context ends) and says how many went.
	admitted := func(t *testing.T, g *admission.Gate, e *backends.Endpoint, stream bool) int {
		for n := range 10 {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			tk, err := g.Admit(ctx, admission.Request{Class: admission.Default, Tokens: 250,
				Routing: &policies.Request{Model: "m", PromptTokens: 200, MaxTokens: 50, Stream: stream}})
			cancel()
			if err != nil {
				return n
			}
			start := e.Start
			if !stream {
				start = e.StartWhole
			}
			a := start(200, 250)
			tk.Started()
			t.Cleanup(func() { a.Finish(backends.Outcome{Class: backends.ClassOK}); tk.Release() })
		}
		return 10
	}
	t.Run("streams by the measured rate", func(t *testing.T) {
		g, e := gateOf(t)
		e.ObservePrefill(0, 1000, time.Second) // 1,000 prompt tokens/s: 500 tokens in 500ms
		assert.Equal(t, 3, admitted(t, g, e, true), "200, 400, then 600 pending: the fourth waits")
	})
	t.Run("streams one at a time before a measurement", func(t *testing.T) {
		g, e := gateOf(t)
		assert.Equal(t, 1, admitted(t, g, e, true))
	})
	t.Run("whole answers before a measurement by the budget", func(t *testing.T) {
		g, e := gateOf(t)
		assert.Equal(t, 10, admitted(t, g, e, false))
	})
}

// The start log says how each model's admission binds, defaults included.
func TestAdmissionSummary(t *testing.T) {
	for _, tc := range []struct{ model, want string }{
		{"backends:\n      - url: http://a:1\n", "off"},
		{"admission: {max_in_flight_per_backend: 8}\n    backends:\n      - url: http://a:1\n",
			"budgets, and prompts pending under 500ms of prefill (max_pending_prefill); a tenant at or over its share beside another binds where the prompts not yet in an engine step take under 10ms (max_pending_prefill_above_share); a class behind a better one with requests in flight binds where the prompts not yet in an engine step take under 10ms (max_pending_prefill_worse_class); a tenant below its share waits for a backend within 250ms of its quickest start (max_detour_below_share)"},
		{"admission: {max_in_flight_per_backend: 8, max_pending_prefill: -1s, max_detour_below_share: -1s}\n    backends:\n      - url: http://a:1\n", "budgets alone"},
		{"admission: {max_in_flight_per_backend: 8, max_pending_prefill_above_share: -1s, max_pending_prefill_worse_class: -1s, max_detour_below_share: -1s}\n    backends:\n      - url: http://a:1\n",
			"budgets, and prompts pending under 500ms of prefill (max_pending_prefill)"},
		{"backends:\n      - {url: http://a:1, max_in_flight: 8, max_pending_prompt_tokens: 8192}\n    admission: {max_detour_below_share: 1s}\n",
			"budgets, and prompts pending under max_pending_prompt_tokens; a tenant below its share waits for a backend within 1s of its quickest start (max_detour_below_share)"},
		{"backends:\n      - {url: http://a:1, max_in_flight: 8, max_pending_prompt_tokens: 8192}\n    admission: {max_detour_below_share: -1s, max_detour_better_class: 100ms}\n",
			"budgets, and prompts pending under max_pending_prompt_tokens; a class ahead of a worse one in flight waits for a backend within 100ms of its quickest start (max_detour_better_class)"},
	} {
		c, err := configs.Parse([]byte("models:\n  - name: m\n    " + tc.model))
		require.NoError(t, err)
		assert.Equal(t, tc.want, admissionSummary(c.Models[0]), tc.model)
	}
}
