package gpuworker_test

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/gpuworker"
)

// scrapeMetrics parses the worker's /metrics with Prometheus's text parser.
func scrapeMetrics(t *testing.T, srv *httptest.Server) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer func() { require.NoError(t, res.Body.Close()) }()
	require.Equal(t, http.StatusOK, res.StatusCode)
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	return mfs
}

// single returns the one metric of a family, failing if it is missing.
func single(t *testing.T, mfs map[string]*dto.MetricFamily, name string) *dto.Metric {
	t.Helper()
	mf, ok := mfs[name]
	require.True(t, ok, "metric %s missing", name)
	require.Len(t, mf.GetMetric(), 1, name)
	return mf.GetMetric()[0]
}

func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	m := single(t, mfs, name)
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	t.Fatalf("%s is neither a gauge nor a counter", name)
	return 0
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// runKnownRequest sends one completion with a 2-token prompt that produces
// exactly 8 tokens.
func runKnownRequest(t *testing.T, srv *httptest.Server) {
	t.Helper()
	c := client(srv)
	_, err := c.Completions.New(t.Context(), openai.CompletionNewParams{
		Model:     model,
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("12345678")},
		MaxTokens: openai.Int(8),
	}, option.WithJSONSet("ignore_eos", true))
	require.NoError(t, err)
}

func TestMetricsVLLM(t *testing.T) {
	w, srv := startWorker(t, gpuworker.Options{Profile: "h100-llama3-8b"})
	runKnownRequest(t, srv)
	mfs := scrapeMetrics(t, srv)

	for name, want := range map[string]float64{
		"vllm:num_requests_running":       0,
		"vllm:num_requests_waiting":       0,
		"vllm:kv_cache_usage_perc":        0,
		"vllm:prompt_tokens_total":        2,
		"vllm:generation_tokens_total":    8,
		"vllm:num_preemptions_total":      0,
		"vllm:prefix_cache_queries_total": 0, // a 2-token prompt has no full block
		"vllm:prefix_cache_hits_total":    0,
		"vllm:cache_config_info":          1,
	} {
		assert.Equal(t, want, value(t, mfs, name), name)
		assert.Equal(t, model, labels(single(t, mfs, name))["model_name"], name)
	}
	info := labels(single(t, mfs, "vllm:cache_config_info"))
	assert.Equal(t, "16", info["block_size"])
	assert.Equal(t, strconv.Itoa(w.Profile().KVBlocks()), info["num_gpu_blocks"])

	hists := map[string]struct {
		count   uint64
		buckets []float64
	}{
		"vllm:time_to_first_token_seconds": {1, []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}},
		"vllm:inter_token_latency_seconds": {7, []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}},
		"vllm:e2e_request_latency_seconds": {1, []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}},
		"vllm:request_queue_time_seconds":  {1, []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}},
	}
	for name, want := range hists {
		h := single(t, mfs, name).GetHistogram()
		require.NotNil(t, h, name)
		assert.Equal(t, want.count, h.GetSampleCount(), name)
		var bounds []float64
		for _, b := range h.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) { // the text parser adds +Inf
				bounds = append(bounds, b.GetUpperBound())
			}
		}
		assert.Equal(t, want.buckets, bounds, name)
	}
	ttft := single(t, mfs, "vllm:time_to_first_token_seconds").GetHistogram()
	e2e := single(t, mfs, "vllm:e2e_request_latency_seconds").GetHistogram()
	assert.Positive(t, ttft.GetSampleSum(), "an H100 step takes simulated time")
	assert.Greater(t, e2e.GetSampleSum(), ttft.GetSampleSum())
}

// TestMetricsSimulatedSeconds checks histograms describe the simulated GPU:
// the same request reports the same simulated latency at any speed-up.
func TestMetricsSimulatedSeconds(t *testing.T) {
	sums := make([]float64, 0, 2)
	for _, speedup := range []float64{1, 1000} {
		_, srv := startWorker(t, gpuworker.Options{Profile: "l4-llama3-8b", Speedup: speedup})
		runKnownRequest(t, srv)
		mfs := scrapeMetrics(t, srv)
		h := single(t, mfs, "vllm:inter_token_latency_seconds").GetHistogram()
		require.Equal(t, uint64(7), h.GetSampleCount())
		sums = append(sums, h.GetSampleSum())
	}
	// Decode steps of one lone request cost the same simulated time.
	assert.InEpsilon(t, sums[0], sums[1], 1e-6)
}

func TestMetricsSGLang(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{Profile: "h100-llama3-8b", Dialect: gpuworker.DialectSGLang})
	runKnownRequest(t, srv)
	mfs := scrapeMetrics(t, srv)
	for name, want := range map[string]float64{
		"sglang:num_running_reqs":        0,
		"sglang:num_queue_reqs":          0,
		"sglang:token_usage":             0,
		"sglang:cache_hit_rate":          0,
		"sglang:prompt_tokens_total":     2,
		"sglang:generation_tokens_total": 8,
	} {
		assert.Equal(t, want, value(t, mfs, name), name)
		assert.Equal(t, model, labels(single(t, mfs, name))["model_name"], name)
	}
	// The request ran within the last few simulated (here: wall) seconds.
	assert.Positive(t, value(t, mfs, "sglang:gen_throughput"))
	assert.Equal(t, uint64(1), single(t, mfs, "sglang:time_to_first_token_seconds").GetHistogram().GetSampleCount())
	assert.Equal(t, uint64(7), single(t, mfs, "sglang:inter_token_latency_seconds").GetHistogram().GetSampleCount())
	assert.Equal(t, uint64(1), single(t, mfs, "sglang:e2e_request_latency_seconds").GetHistogram().GetSampleCount())
	for name := range mfs {
		assert.NotContains(t, name, "vllm:", "no vLLM names in the SGLang dialect")
	}
}

func TestMetricsTGI(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{Profile: "h100-llama3-8b", Speedup: 100, Dialect: gpuworker.DialectTGI})
	runKnownRequest(t, srv)
	mfs := scrapeMetrics(t, srv)
	for name, want := range map[string]float64{
		"tgi_queue_size":               0,
		"tgi_batch_current_size":       0,
		"tgi_batch_current_max_tokens": 0,
		"tgi_request_count":            1,
		"tgi_request_success":          1,
	} {
		assert.Equal(t, want, value(t, mfs, name), name)
	}
	gen := single(t, mfs, "tgi_request_generated_tokens").GetHistogram()
	assert.Equal(t, uint64(1), gen.GetSampleCount())
	assert.Equal(t, 8.0, gen.GetSampleSum())
	in := single(t, mfs, "tgi_request_input_length").GetHistogram()
	assert.Equal(t, 2.0, in.GetSampleSum())
	for _, name := range []string{"tgi_request_duration", "tgi_request_queue_duration", "tgi_request_mean_time_per_token_duration"} {
		assert.Equal(t, uint64(1), single(t, mfs, name).GetHistogram().GetSampleCount(), name)
	}
	assert.Positive(t, single(t, mfs, "tgi_request_duration").GetHistogram().GetSampleSum())
	for name := range mfs {
		assert.NotContains(t, name, "vllm:", "no vLLM names in the TGI dialect")
	}
}

func TestMetricsPrefixCounters(t *testing.T) {
	_, srv := startWorker(t, gpuworker.Options{Profile: "h100-llama3-8b", Speedup: 1000})
	body := []byte(`{"model":"` + model + `","max_tokens":2,"prompt":"` + string(make64(20)) + `"}`)
	c := client(srv)
	require.NoError(t, c.Post(t.Context(), "completions", body, nil))
	require.NoError(t, c.Post(t.Context(), "completions", body, nil))
	mfs := scrapeMetrics(t, srv)
	assert.Positive(t, value(t, mfs, "vllm:prefix_cache_hits_total"))
	assert.Greater(t, value(t, mfs, "vllm:prefix_cache_queries_total"), value(t, mfs, "vllm:prefix_cache_hits_total"))
}

// make64 returns n 64-byte chunks of text (16 simulated tokens each).
func make64(n int) []byte {
	b := make([]byte, 64*n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

func TestNewRejectsBadOptions(t *testing.T) {
	_, err := gpuworker.New(gpuworker.Options{Model: model, Dialect: "triton"})
	assert.ErrorIs(t, err, gpuworker.ErrUnknownDialect)
	_, err = gpuworker.New(gpuworker.Options{Model: model, Faults: gpuworker.Faults{ErrorRate: 1.5}})
	var fe *gpuworker.FaultError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "error_rate", fe.Field)
}
