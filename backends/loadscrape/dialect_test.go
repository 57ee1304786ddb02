package loadscrape

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parse(t *testing.T, text string) families {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err)
	return fams
}

func TestDialectLoad(t *testing.T) {
	tests := []struct {
		name             string
		text             string
		dialect          Dialect
		running, waiting int
		kv               float64
	}{
		{"vllm, two engines summed, highest KV", `
vllm:num_requests_running{engine="0"} 3
vllm:num_requests_running{engine="1"} 4
vllm:num_requests_waiting{engine="0"} 1
vllm:num_requests_waiting{engine="1"} 0
vllm:kv_cache_usage_perc{engine="0"} 0.25
vllm:kv_cache_usage_perc{engine="1"} 0.5
`, DialectVLLM, 7, 1, 0.5},
		{"vllm before 0.9: deprecated KV name", `
vllm:num_requests_running 1
vllm:num_requests_waiting 2
vllm:gpu_cache_usage_perc 0.75
`, DialectVLLM, 1, 2, 0.75},
		{"vllm without KV", "vllm:num_requests_running 1\nvllm:num_requests_waiting 2\n", DialectVLLM, 1, 2, -1},
		{"sglang", "sglang:num_running_reqs 5\nsglang:num_queue_reqs 6\nsglang:token_usage 0.1\n", DialectSGLang, 5, 6, 0.1},
		{"tgi has no KV fraction", "tgi_batch_current_size 2\ntgi_queue_size 9\ntgi_batch_current_max_tokens 4000\n", DialectTGI, 2, 9, -1},
		{"nonsense values are clamped", "vllm:num_requests_running -3\nvllm:num_requests_waiting NaN\nvllm:kv_cache_usage_perc 7\n", DialectVLLM, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fams := parse(t, tt.text)
			d := detect(fams, -1)
			require.GreaterOrEqual(t, d, 0)
			assert.Equal(t, tt.dialect, dialects[d].name)
			r, w, kv := dialects[d].load(fams)
			assert.Equal(t, tt.running, r)
			assert.Equal(t, tt.waiting, w)
			assert.InDelta(t, tt.kv, kv, 1e-9)
		})
	}
}

func TestDetectPrefersTheRememberedDialect(t *testing.T) {
	both := parse(t, "vllm:num_requests_running 1\nvllm:num_requests_waiting 1\nsglang:num_running_reqs 2\nsglang:num_queue_reqs 2\n")
	assert.Equal(t, 0, detect(both, -1), "detection order")
	assert.Equal(t, 1, detect(both, 1), "the hint wins while its names are there")
	onlyTGI := parse(t, "tgi_batch_current_size 1\ntgi_queue_size 1\n")
	assert.Equal(t, 2, detect(onlyTGI, 0), "re-detected when the engine changed")
	assert.Equal(t, -1, detect(parse(t, "up 1\n"), 0))
}

func TestNewValidates(t *testing.T) {
	s, err := New(Options{})
	require.NoError(t, err)
	assert.Equal(t, DefaultInterval, s.interval)
	assert.Equal(t, DefaultInterval*4/5, s.timeout)
	assert.Equal(t, "/metrics", s.path)
	for _, o := range []Options{
		{Interval: -1},
		{Interval: 100, Timeout: 100},
		{Path: "metrics"},
		{Concurrency: -1},
	} {
		_, err := New(o)
		assert.Error(t, err, "%+v", o)
	}
}

// keepKnown keeps the samples and the HELP and TYPE lines of the metrics a
// dialect reads, and nothing else; the load parsed from what it keeps is
// the whole page's.
func TestKeepKnown(t *testing.T) {
	page := `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.3"} 1
vllm:e2e_request_latency_seconds_count 1
# a comment
vllm:num_requests_running_total 99

  vllm:num_requests_waiting 2
vllm:kv_cache_usage_perc{engine="0"} 0.5`
	got := string(keepKnown(nil, []byte(page)))
	assert.Equal(t, `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
  vllm:num_requests_waiting 2
vllm:kv_cache_usage_perc{engine="0"} 0.5
`, got)
	whole, kept := parse(t, page+"\n"), parse(t, got) // the parser wants the last newline keepKnown adds
	require.Equal(t, 0, detect(kept, -1))
	r1, w1, kv1 := dialects[0].load(whole)
	r2, w2, kv2 := dialects[0].load(kept)
	assert.Equal(t, []any{3, 2, 0.5}, []any{r2, w2, kv2})
	assert.Equal(t, []any{r1, w1, kv1}, []any{r2, w2, kv2})
}

// BenchmarkParsePage parses a gpuworker's /metrics page (130 lines) whole
// and as keepKnown leaves it: go test -run '^$' -bench ParsePage
// ./backends/loadscrape/.
func BenchmarkParsePage(b *testing.B) {
	page, err := os.ReadFile("testdata/gpuworker-metrics.txt")
	require.NoError(b, err)
	for _, bc := range []struct {
		name string
		keep func([]byte) []byte
	}{{"whole", func(p []byte) []byte { return p }}, {"kept", func(p []byte) []byte { return keepKnown(nil, p) }}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p := expfmt.NewTextParser(model.UTF8Validation)
				fams, err := p.TextToMetricFamilies(bytes.NewReader(bc.keep(page)))
				if err != nil || detect(fams, -1) != 0 {
					b.Fatal("unparsed", err)
				}
			}
		})
	}
}
