package loadscrape

import (
	dto "github.com/prometheus/client_model/go"
)

// Dialect names a metrics vocabulary a backend exports.
type Dialect string

// The dialects the scraper understands (GPU-FACTS §5). gpuworker exports
// DialectVLLM by default and the others when asked to.
const (
	DialectVLLM   Dialect = "vllm"
	DialectSGLang Dialect = "sglang"
	DialectTGI    Dialect = "tgi"
)

// dialect maps one engine's metric names onto a Load. An empty kvUsage list
// means the engine does not report KV-cache use (Load.KVUsage is -1).
type dialect struct {
	name    Dialect
	running string
	waiting string
	kvUsage []string // first present wins (new name, then deprecated alias)
}

// dialects in detection order. Read-only.
var dialects = [...]dialect{
	{name: DialectVLLM, running: "vllm:num_requests_running", waiting: "vllm:num_requests_waiting",
		kvUsage: []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}},
	{name: DialectSGLang, running: "sglang:num_running_reqs", waiting: "sglang:num_queue_reqs",
		kvUsage: []string{"sglang:token_usage"}},
	// TGI has no KV-cache fraction; tgi_batch_current_max_tokens is an
	// absolute count with no capacity to divide by.
	{name: DialectTGI, running: "tgi_batch_current_size", waiting: "tgi_queue_size"},
}

// families is a parsed scrape, by metric name.
type families = map[string]*dto.MetricFamily

// detect returns the index in dialects of the first dialect whose running
// and waiting gauges are both present, trying hint first; -1 if none.
func detect(fams families, hint int) int {
	if hint >= 0 && dialects[hint].matches(fams) {
		return hint
	}
	for i := range dialects {
		if dialects[i].matches(fams) {
			return i
		}
	}
	return -1
}

func (d *dialect) matches(fams families) bool {
	return fams[d.running] != nil && fams[d.waiting] != nil
}

// load reads the dialect's gauges. Counts are summed over series (one per
// engine of a data-parallel server); KV use is the highest series, the
// engine a new request is most likely to be held up by.
func (d *dialect) load(fams families) (running, waiting int, kv float64) {
	running = clampCount(sum(fams[d.running]))
	waiting = clampCount(sum(fams[d.waiting]))
	kv = -1
	for _, name := range d.kvUsage {
		if f := fams[name]; f != nil && len(f.GetMetric()) > 0 {
			kv = clampFraction(highest(f))
			break
		}
	}
	return running, waiting, kv
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

func sum(f *dto.MetricFamily) float64 {
	var s float64
	for _, m := range f.GetMetric() {
		s += value(m)
	}
	return s
}

func highest(f *dto.MetricFamily) float64 {
	best := 0.0
	for i, m := range f.GetMetric() {
		if v := value(m); i == 0 || v > best {
			best = v
		}
	}
	return best
}
