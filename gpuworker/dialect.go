package gpuworker

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric dialects a Worker can export on /metrics (Options.Dialect), so a
// router's scraper can be tested against each engine's names (GPU-FACTS §5).
const (
	// DialectVLLM exports vLLM's names (vllm:*), the default.
	DialectVLLM = "vllm"
	// DialectSGLang exports SGLang's names (sglang:*).
	DialectSGLang = "sglang"
	// DialectTGI exports Text Generation Inference's names (tgi_*).
	DialectTGI = "tgi"
)

// ErrUnknownDialect is returned by New for a Dialect it does not know.
var ErrUnknownDialect = fmt.Errorf("gpuworker: unknown metrics dialect (want %q, %q or %q)",
	DialectVLLM, DialectSGLang, DialectTGI)

// histSlot names one latency or size distribution the worker records; each
// dialect exports the ones it has under its own name.
type histSlot int

const (
	histTTFT      histSlot = iota // seconds from arrival to first token
	histITL                       // seconds between consecutive tokens
	histE2E                       // seconds from arrival to the last token
	histQueue                     // seconds waiting before the first step
	histMeanTPOT                  // per request, mean seconds per output token after the first
	histGenTokens                 // per request, output tokens
	histInputLen                  // per request, prompt tokens
	numHistSlots
)

// histDef declares one exported histogram.
type histDef struct {
	slot    histSlot
	name    string
	help    string
	buckets []float64
}

// gaugeDef declares one value read from a scrape-time snapshot.
type gaugeDef struct {
	name   string
	help   string
	typ    prometheus.ValueType
	labels func(Profile) prometheus.Labels // in addition to the dialect's own; may be nil
	value  func(scrape) float64
}

// scrape is what the collector reads once per /metrics request.
type scrape struct {
	load       Load
	throughput float64 // output tokens per simulated second, recent window
	requests   int64   // generation requests accepted by the engine
	successes  int64   // generation requests that produced all their tokens
}

// dialect is one engine's naming of the worker's metrics.
type dialect struct {
	labels func(model string) prometheus.Labels
	gauges []gaugeDef
	hists  []histDef
}

// Buckets. vLLM's are from vllm/v1/metrics/loggers.py (GPU-FACTS §5); SGLang
// publishes the same TTFT buckets. TGI's duration buckets are a geometric
// series (x1.5 from 0.1 ms, 35 buckets), as its router configures them; its
// token-count buckets are an approximation (powers of two).

func vllmTTFTBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
}

func vllmTPOTBuckets() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
}

func vllmLatencyBuckets() []float64 {
	return []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
}

func tgiDurationBuckets() []float64 {
	return prometheus.ExponentialBuckets(0.0001*1.5, 1.5, 35)
}

func tokenCountBuckets() []float64 {
	return prometheus.ExponentialBuckets(1, 2, 18) // 1 .. 131072 tokens
}

func modelLabel(model string) prometheus.Labels {
	return prometheus.Labels{"model_name": model}
}

// lookupDialect returns the named dialect; "" means vLLM.
func lookupDialect(name string) (dialect, error) {
	switch name {
	case "", DialectVLLM:
		return vllmDialect(), nil
	case DialectSGLang:
		return sglangDialect(), nil
	case DialectTGI:
		return tgiDialect(), nil
	}
	return dialect{}, fmt.Errorf("%w: %q", ErrUnknownDialect, name)
}

func vllmDialect() dialect {
	return dialect{
		labels: modelLabel,
		gauges: []gaugeDef{
			{name: "vllm:num_requests_running", help: "Number of requests in the running batch.", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return float64(s.load.Running) }},
			{name: "vllm:num_requests_waiting", help: "Number of requests waiting to be scheduled.", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return float64(s.load.Waiting) }},
			{name: "vllm:kv_cache_usage_perc", help: "KV-cache usage, 1 means 100 percent.", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return s.load.KVUsage }},
			{name: "vllm:prompt_tokens_total", help: "Number of prefilled prompt tokens.", typ: prometheus.CounterValue,
				value: func(s scrape) float64 { return float64(s.load.PromptTokens) }},
			{name: "vllm:generation_tokens_total", help: "Number of generated tokens.", typ: prometheus.CounterValue,
				value: func(s scrape) float64 { return float64(s.load.GenerationTokens) }},
			{name: "vllm:num_preemptions_total", help: "Number of preemptions.", typ: prometheus.CounterValue,
				value: func(s scrape) float64 { return float64(s.load.Preemptions) }},
			{name: "vllm:prefix_cache_queries_total", help: "Prompt tokens looked up in the prefix cache.", typ: prometheus.CounterValue,
				value: func(s scrape) float64 { return float64(s.load.PrefixCacheQueries) }},
			{name: "vllm:prefix_cache_hits_total", help: "Prompt tokens found in the prefix cache.", typ: prometheus.CounterValue,
				value: func(s scrape) float64 { return float64(s.load.PrefixCacheHits) }},
			{name: "vllm:cache_config_info", help: "Information of the KV-cache configuration.", typ: prometheus.GaugeValue,
				labels: cacheInfoLabels, value: func(scrape) float64 { return 1 }},
		},
		hists: []histDef{
			{histTTFT, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", vllmTTFTBuckets()},
			{histITL, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", vllmTPOTBuckets()},
			{histE2E, "vllm:e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.", vllmLatencyBuckets()},
			{histQueue, "vllm:request_queue_time_seconds", "Histogram of time spent waiting in the queue in seconds.", vllmLatencyBuckets()},
		},
	}
}

func sglangDialect() dialect {
	return dialect{
		labels: modelLabel,
		gauges: []gaugeDef{
			{name: "sglang:num_running_reqs", help: "The number of running requests.", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return float64(s.load.Running) }},
			{name: "sglang:num_queue_reqs", help: "The number of requests in the waiting queue.", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return float64(s.load.Waiting) }},
			{name: "sglang:num_used_tokens", help: "The number of used tokens.", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return float64(s.load.KVBlocksUsed * BlockSize) }},
			{name: "sglang:token_usage", help: "The token usage.", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return s.load.KVUsage }},
			{name: "sglang:cache_hit_rate", help: "The prefix cache hit rate.", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return hitRate(s.load) }},
			{name: "sglang:gen_throughput", help: "The generation throughput (token/s).", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return s.throughput }},
			{name: "sglang:prompt_tokens_total", help: "Number of prefill tokens processed.", typ: prometheus.CounterValue,
				value: func(s scrape) float64 { return float64(s.load.PromptTokens) }},
			{name: "sglang:generation_tokens_total", help: "Number of generation tokens processed.", typ: prometheus.CounterValue,
				value: func(s scrape) float64 { return float64(s.load.GenerationTokens) }},
		},
		hists: []histDef{
			{histTTFT, "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", vllmTTFTBuckets()},
			{histITL, "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", vllmTPOTBuckets()},
			{histE2E, "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds.", vllmLatencyBuckets()},
		},
	}
}

func tgiDialect() dialect {
	return dialect{
		labels: func(string) prometheus.Labels { return nil },
		gauges: []gaugeDef{
			{name: "tgi_queue_size", help: "Current queue size.", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return float64(s.load.Waiting) }},
			{name: "tgi_batch_current_size", help: "Current batch size.", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return float64(s.load.Running) }},
			{name: "tgi_batch_current_max_tokens", help: "Maximum tokens for the current batch.", typ: prometheus.GaugeValue,
				value: func(s scrape) float64 { return float64(s.load.KVBlocksUsed * BlockSize) }},
			{name: "tgi_request_count", help: "Total number of requests.", typ: prometheus.CounterValue,
				value: func(s scrape) float64 { return float64(s.requests) }},
			{name: "tgi_request_success", help: "Number of successful requests.", typ: prometheus.CounterValue,
				value: func(s scrape) float64 { return float64(s.successes) }},
		},
		hists: []histDef{
			{histE2E, "tgi_request_duration", "Request duration in seconds.", tgiDurationBuckets()},
			{histQueue, "tgi_request_queue_duration", "Time spent in the queue per request in seconds.", tgiDurationBuckets()},
			{histMeanTPOT, "tgi_request_mean_time_per_token_duration", "Mean time per token per request in seconds.", tgiDurationBuckets()},
			{histGenTokens, "tgi_request_generated_tokens", "Generated tokens per request.", tokenCountBuckets()},
			{histInputLen, "tgi_request_input_length", "Input tokens per request.", tokenCountBuckets()},
		},
	}
}

// cacheInfoLabels are the labels of vllm:cache_config_info.
func cacheInfoLabels(p Profile) prometheus.Labels {
	return prometheus.Labels{
		"block_size":     strconv.Itoa(BlockSize),
		"num_gpu_blocks": strconv.Itoa(p.KVBlocks()),
	}
}

// hitRate is the fraction of prompt tokens served from the prefix cache.
func hitRate(l Load) float64 {
	if l.PrefixCacheQueries == 0 {
		return 0
	}
	return float64(l.PrefixCacheHits) / float64(l.PrefixCacheQueries)
}
