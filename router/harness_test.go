package router_test

import (
	"cmp"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/gpuworker"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/leastrequest"
	"github.com/sluice-llm/sluice/policies/roundrobin"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/proxy"
)

// worker is a real simulated GPU worker on loopback.
type worker struct {
	*gpuworker.Worker
	srv *httptest.Server
}

func startWorker(t testing.TB, model, profile string, speedup float64) *worker {
	t.Helper()
	return startWorkerOpts(t, gpuworker.Options{Model: model, Profile: profile, Speedup: speedup})
}

func startWorkerOpts(t testing.TB, o gpuworker.Options) *worker {
	t.Helper()
	w, err := gpuworker.New(o)
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
	return &worker{Worker: w, srv: srv}
}

// deadURL is a loopback address nothing listens on.
func deadURL(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	return u
}

type sluice struct {
	*router.Router
	srv       *httptest.Server
	endpoints map[string]*backends.Endpoint
	gates     []*admission.Gate // in route order, for routes with a budget
}

type routeSpec struct {
	model  string
	policy string
	urls   []string
	// budget, when positive, puts an admission gate on the route with this
	// many requests in flight per backend and a queue of queue (default 64).
	budget, queue int
	// pendingPrompt, with a budget, is the gate's MaxPendingPrompt.
	pendingPrompt int64
	// pendingPrefill, with a budget, is the gate's MaxPendingPrefill, and
	// untilStep its PendingUntilStep.
	pendingPrefill time.Duration
	untilStep      bool
	fallbacks      []string
	// served names, by URL, what a backend serves the model under.
	served map[string]string
	// firstByte and total are the route's timeouts.
	firstByte, total time.Duration
}

func startSluice(t testing.TB, opts router.Options, specs ...routeSpec) *sluice {
	t.Helper()
	s := &sluice{endpoints: map[string]*backends.Endpoint{}}
	var routes []*router.Route
	for _, sp := range specs {
		var eps []*backends.Endpoint
		for _, u := range sp.urls {
			e, err := backends.NewEndpoint(u, 1)
			require.NoError(t, err)
			eps = append(eps, e)
			s.endpoints[u] = e
		}
		pool, err := backends.NewPool(sp.model, eps)
		require.NoError(t, err)
		var picker policies.Picker
		switch sp.policy {
		case roundrobin.Name:
			picker, err = roundrobin.New(nil)
		default:
			picker, err = leastrequest.New(nil)
		}
		require.NoError(t, err)
		route := &router.Route{Pool: pool, Picker: picker, Fallbacks: sp.fallbacks,
			FirstByteTimeout: sp.firstByte, TotalTimeout: sp.total}
		for u, name := range sp.served {
			if route.ServedNames == nil {
				route.ServedNames = map[*backends.Endpoint]string{}
			}
			route.ServedNames[s.endpoints[u]] = name
		}
		if sp.budget > 0 {
			o := admission.Options{Budget: func(*backends.Endpoint) int { return sp.budget }, QueueSize: cmp.Or(sp.queue, 64)}
			if sp.pendingPrompt > 0 {
				o.MaxPendingPrompt = func(*backends.Endpoint) int64 { return sp.pendingPrompt }
			}
			o.MaxPendingPrefill, o.PendingUntilStep = sp.pendingPrefill, sp.untilStep
			route.Gate, err = admission.NewGate(pool, picker, o)
			require.NoError(t, err)
			s.gates = append(s.gates, route.Gate)
		}
		routes = append(routes, route)
	}
	table, err := router.NewTable(routes)
	require.NoError(t, err)
	opts.Table = table
	tr := proxy.NewTransport(proxy.TransportOptions{ResponseHeaderTimeout: headerTimeout(opts)})
	opts.Transport = tr
	rt, err := router.New(opts)
	require.NoError(t, err)
	s.Router = rt
	s.srv = httptest.NewServer(rt.Handler())
	t.Cleanup(func() {
		s.srv.Close()
		tr.CloseIdleConnections()
	})
	return s
}

// client is the official OpenAI Go client pointed at Sluice, without
// client-side retries so every status is seen as sent.
func (s *sluice) client(t testing.TB) openai.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return openai.NewClient(
		option.WithBaseURL(s.srv.URL+"/v1/"),
		option.WithAPIKey("unused"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: tr}),
	)
}

// headerTimeout is 10 s for tests unless one asks for a shorter one through
// a transport it passes (only the timeout is taken from it).
func headerTimeout(o router.Options) time.Duration {
	if tr, ok := o.Transport.(*http.Transport); ok && tr.ResponseHeaderTimeout > 0 {
		return tr.ResponseHeaderTimeout
	}
	return 10 * time.Second
}

// settled waits until no attempt is in flight on any endpoint: the router
// records an attempt (metrics, span, measurements) as its handler returns,
// which can be just after the client has read the last byte.
func (s *sluice) settled(t testing.TB) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, e := range s.endpoints {
			if e.InFlight() != 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
}
