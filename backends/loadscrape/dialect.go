package loadscrape

import (
	"bytes"

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

// known holds every metric name a dialect reads.
var known = func() map[string]bool {
	m := map[string]bool{}
	for _, d := range dialects {
		m[d.running], m[d.waiting] = true, true
		for _, k := range d.kvUsage {
			m[k] = true
		}
	}
	return m
}()

// keepKnown appends to dst the lines of a text exposition that belong to
// a metric some dialect reads (its samples and its # HELP and # TYPE lines)
// and drops the rest, so that the parser works on a few lines instead of
// an engine's histogram buckets: a gpuworker's 9 KB page took 246 µs and
// 2,914 allocations to parse whole, 21 µs and 115 kept
// (BenchmarkParsePage), at ten scrapes a second per backend.
func keepKnown(dst, page []byte) []byte {
	for len(page) > 0 {
		line := page
		if i := bytes.IndexByte(page, '\n'); i >= 0 {
			line, page = page[:i+1], page[i+1:]
		} else {
			page = nil
		}
		if known[string(metricName(line))] {
			dst = append(dst, line...)
			if line[len(line)-1] != '\n' {
				dst = append(dst, '\n')
			}
		}
	}
	return dst
}

// metricName is the name a line of a text exposition is about: a sample's
// name, up to its labels or value, or the name a # HELP or # TYPE comment
// describes; nil for other comments and blank lines.
func metricName(line []byte) []byte {
	if len(line) > 0 && line[0] == '#' {
		kind, rest := word(line[1:])
		if string(kind) != "HELP" && string(kind) != "TYPE" {
			return nil
		}
		name, _ := word(rest)
		return name
	}
	name, _ := word(line)
	if i := bytes.IndexByte(name, '{'); i >= 0 {
		name = name[:i]
	}
	return name
}

// word returns b's first word, after any blanks, and what follows it.
func word(b []byte) (w, rest []byte) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	j := i
	for j < len(b) && b[j] != ' ' && b[j] != '\t' && b[j] != '\r' && b[j] != '\n' {
		j++
	}
	return b[i:j], b[j:]
}
