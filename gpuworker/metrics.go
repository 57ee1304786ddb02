package gpuworker

import "github.com/prometheus/client_golang/prometheus"

// collector exports the engine's load under vLLM's metric names, read from
// the engine at scrape time.
type collector struct {
	w                                  *Worker
	running, waiting, kvUsage          *prometheus.Desc
	promptTokens, genTokens, preempted *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

func newCollector(w *Worker) *collector {
	labels := prometheus.Labels{"model_name": w.model}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, nil, labels)
	}
	return &collector{
		w:            w,
		running:      desc("vllm:num_requests_running", "Number of requests in the running batch."),
		waiting:      desc("vllm:num_requests_waiting", "Number of requests waiting to be scheduled."),
		kvUsage:      desc("vllm:kv_cache_usage_perc", "KV-cache usage, 1 means 100 percent."),
		promptTokens: desc("vllm:prompt_tokens_total", "Number of prefilled prompt tokens."),
		genTokens:    desc("vllm:generation_tokens_total", "Number of generated tokens."),
		preempted:    desc("vllm:num_preemptions_total", "Number of preemptions."),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.running
	ch <- c.waiting
	ch <- c.kvUsage
	ch <- c.promptTokens
	ch <- c.genTokens
	ch <- c.preempted
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	l := c.w.Load()
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(l.Running))
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(l.Waiting))
	ch <- prometheus.MustNewConstMetric(c.kvUsage, prometheus.GaugeValue, l.KVUsage)
	ch <- prometheus.MustNewConstMetric(c.promptTokens, prometheus.CounterValue, float64(l.PromptTokens))
	ch <- prometheus.MustNewConstMetric(c.genTokens, prometheus.CounterValue, float64(l.GenerationTokens))
	ch <- prometheus.MustNewConstMetric(c.preempted, prometheus.CounterValue, float64(l.Preemptions))
}
