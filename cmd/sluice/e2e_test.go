package main

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadAwareRoutingAvoidsASlowedWorker runs the real server with
// least_request and the load scraper in front of two live gpuworkers, sends
// the same load through the official OpenAI client before and after one
// worker is slowed with the admin fault API, and checks that worker's share
// shrinks. The margins are wide and the shares structural, not timing
// luck: before, each worker gets about half; after, least_request never
// gives the slowed worker more than two of the four clients at once (it
// needs as many in flight on the fast one), and each of its requests takes
// 300 ms while the fast worker answers in milliseconds, so it gets about
// 15%.
func TestLoadAwareRoutingAvoidsASlowedWorker(t *testing.T) {
	fast, slow := startWorker(t, "m"), startWorker(t, "m")
	cfg := "listen: 127.0.0.1:0\nscrape:\n  interval: 20ms\n  timeout: 15ms\nmodels:\n  - name: m\n    policy: least_request\n" +
		"    backends:\n      - url: " + fast.URL + "\n      - url: " + slow.URL + "\n"
	var logs syncBuffer
	addr, tr, client := serveE2E(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	send := func(n, concurrency int) {
		var wg sync.WaitGroup
		for range concurrency {
			wg.Go(func() {
				for range n / concurrency {
					_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
						Model:     "m",
						Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
						MaxTokens: openai.Int(4),
					})
					assert.NoError(t, err)
				}
			})
		}
		wg.Wait()
	}
	counts := func() (f, s float64) {
		return attempts(t, tr, addr, fast.URL), attempts(t, tr, addr, slow.URL)
	}

	send(80, 4)
	f1, s1 := counts()
	require.Equal(t, 80.0, f1+s1)
	before := s1 / (f1 + s1)

	slowDown(t, tr, slow.URL, "300ms")

	send(80, 4)
	f2, s2 := counts()
	after := (s2 - s1) / (f2 - f1 + s2 - s1)
	t.Logf("slowed worker's share: %.2f before, %.2f after", before, after)
	assert.Greater(t, before, 0.3, "two equal workers share the load")
	assert.Less(t, after, 0.25, "the slowed worker gets little")
	assert.Less(t, after, before-0.1)

	fams := sluiceMetrics(t, tr, addr)
	require.Contains(t, fams, "sluice_scrape_duration_seconds", "the load scraper runs")
	assert.Positive(t, fams["sluice_scrape_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount())
	assert.Contains(t, logs.String(), "dialect=vllm")
}

func sluiceMetrics(t *testing.T, tr *http.Transport, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := (&http.Client{Transport: tr}).Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	return fams
}

// attempts is sluice_upstream_attempts_total{backend, outcome="ok"}.
func attempts(t *testing.T, tr *http.Transport, addr, backend string) float64 {
	t.Helper()
	f := sluiceMetrics(t, tr, addr)["sluice_upstream_attempts_total"]
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["backend"] == backend && labels["outcome"] == "ok" {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestDefaultPolicyAvoidsASlowedWorker is the same check with the default
// policy, which ranks workers by the time to first token it expects there
// (from the prefill it has queued on each and each one's measured prefill
// rate). Half the requests stream, which times first tokens and teaches
// the router that the slowed worker starts late; the other half are
// answered whole (once a stream is timed they teach nothing:
// backends.Attempt.WholeAnswer) and are routed by what the streams taught.
// After the slowdown a request there takes 300
// ms to start against milliseconds on the other, so a share near a half
// falls well below a quarter.
func TestDefaultPolicyAvoidsASlowedWorker(t *testing.T) {
	fast, slow := startWorker(t, "m"), startWorker(t, "m")
	cfg := "listen: 127.0.0.1:0\nscrape:\n  interval: 20ms\n  timeout: 15ms\nmodels:\n  - name: m\n" +
		"    backends:\n      - url: " + fast.URL + "\n      - url: " + slow.URL + "\n"
	addr, tr, client := serveE2E(t, cfg, slog.New(slog.DiscardHandler))
	params := openai.ChatCompletionNewParams{
		Model:     "m",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		MaxTokens: openai.Int(8),
	}
	send := func(n, concurrency int) {
		var wg sync.WaitGroup
		for c := range concurrency {
			wg.Go(func() {
				for range n / concurrency {
					if c%2 == 0 {
						_, err := client.Chat.Completions.New(context.Background(), params)
						assert.NoError(t, err)
						continue
					}
					s := client.Chat.Completions.NewStreaming(context.Background(), params)
					for s.Next() {
					}
					assert.NoError(t, s.Err())
					assert.NoError(t, s.Close())
				}
			})
		}
		wg.Wait()
	}
	// A stream's attempt is counted as its handler returns, which can be
	// just after the client read [DONE]; every outcome counts toward the
	// share (on a loaded machine a client's close can race its [DONE]).
	counts := func(want float64) (f, s float64) {
		require.Eventually(t, func() bool {
			f, s = allAttempts(t, tr, addr, fast.URL), allAttempts(t, tr, addr, slow.URL)
			return f+s >= want
		}, 10*time.Second, 5*time.Millisecond)
		return f, s
	}

	send(80, 4)
	f1, s1 := counts(80)
	before := s1 / (f1 + s1)

	slowDown(t, tr, slow.URL, "300ms")

	send(80, 4)
	f2, s2 := counts(160)
	after := (s2 - s1) / (f2 - f1 + s2 - s1)
	t.Logf("slowed worker's share under the default policy: %.2f before, %.2f after", before, after)
	assert.Greater(t, before, 0.25, "two equal workers share the load")
	assert.Less(t, after, 0.25, "the slowed worker gets little")
	assert.Less(t, after, before-0.1)
}

// allAttempts is sluice_upstream_attempts_total{backend} over every outcome.
func allAttempts(t *testing.T, tr *http.Transport, addr, backend string) float64 {
	t.Helper()
	sum := 0.0
	for _, m := range sluiceMetrics(t, tr, addr)["sluice_upstream_attempts_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "backend" && l.GetValue() == backend {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// serveE2E runs the real server on cfg until the test ends, and returns
// its address, a transport of the test's own and the official client on it.
func serveE2E(t *testing.T, cfg string, log *slog.Logger) (string, *http.Transport, openai.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, serverOptions{path: writeConfig(t, cfg), drain: 5 * time.Second, ready: ready, log: log})
	}()
	addr := <-ready
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		require.NoError(t, <-done)
	})
	client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("unused"),
		option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
	return addr, tr, client
}

// slowDown adds latency to every answer of the gpuworker at url through its
// fault API.
func slowDown(t *testing.T, tr *http.Transport, url, latency string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url+"/admin/faults", strings.NewReader(`{"added_latency":"`+latency+`"}`))
	require.NoError(t, err)
	res, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}
