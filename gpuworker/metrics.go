package gpuworker

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics records a worker's request latencies and exports them, with the
// engine's load read at scrape time, under the names of one dialect. Its
// histograms observe simulated seconds: engine event times, which run
// Options.Speedup times faster than the wall clock, so the numbers describe
// the simulated GPU rather than the test machine.
type metrics struct {
	obs [numHistSlots]prometheus.Observer
}

// nopObserver stands in for a distribution the dialect does not export.
type nopObserver struct{}

func (nopObserver) Observe(float64) {}

// newMetrics registers the dialect's metrics for w on reg.
func newMetrics(reg *prometheus.Registry, d dialect, w *Worker) (*metrics, error) {
	m := &metrics{}
	for i := range m.obs {
		m.obs[i] = nopObserver{}
	}
	labels := d.labels(w.model)
	for _, h := range d.hists {
		hist := prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: h.name, Help: h.help, Buckets: h.buckets, ConstLabels: labels,
		})
		if err := reg.Register(hist); err != nil {
			return nil, fmt.Errorf("gpuworker: register %s: %w", h.name, err)
		}
		m.obs[h.slot] = hist
	}
	if err := reg.Register(newCollector(w, d, labels)); err != nil {
		return nil, fmt.Errorf("gpuworker: register metrics: %w", err)
	}
	return m, nil
}

// observe records what ev tells about choice c, whose prompt went through
// profile p. Callers hold Worker.mu.
func (m *metrics) observe(p Profile, c *choice, ev Event) {
	switch ev.Kind {
	case EventFirstToken:
		ttft := ev.Time.Sub(c.arrived)
		m.obs[histTTFT].Observe(ttft.Seconds())
		m.obs[histQueue].Observe(max(0, ttft-prefillEstimate(p, c.prompt)).Seconds())
		c.first = ev.Time
	case EventToken:
		m.obs[histITL].Observe(ev.Time.Sub(c.last).Seconds())
	case EventFinished:
		m.obs[histE2E].Observe(ev.Time.Sub(c.arrived).Seconds())
		m.obs[histGenTokens].Observe(float64(ev.Tokens))
		m.obs[histInputLen].Observe(float64(c.prompt))
		if ev.Tokens > 1 {
			m.obs[histMeanTPOT].Observe(ev.Time.Sub(c.first).Seconds() / float64(ev.Tokens-1))
		}
	}
	c.last = ev.Time
}

// prefillEstimate is how long the prompt's prefill takes on an otherwise
// idle engine, in chunks of the step token budget. The engine reports no
// admission event, so queue time is estimated as TTFT minus this; prefix
// cache hits and batching with other requests make it approximate.
func prefillEstimate(p Profile, prompt int) time.Duration {
	budget := max(1, p.MaxBatchedTokens)
	var d time.Duration
	for done := 0; done < prompt; done += budget {
		n := min(budget, prompt-done)
		d += p.StepTime(n, done+n)
	}
	return d
}

// throughputWindow is the span, in simulated seconds, over which the
// generation throughput gauge averages.
const throughputWindow = 5

// rateWindow counts tokens per simulated second over the last
// throughputWindow seconds. It is guarded by Worker.mu.
type rateWindow struct {
	sec [throughputWindow]int64
	n   [throughputWindow]int64
}

func (r *rateWindow) add(t time.Time, n int64) {
	s := t.Unix()
	i := ((s % throughputWindow) + throughputWindow) % throughputWindow
	if r.sec[i] != s {
		r.sec[i], r.n[i] = s, 0
	}
	r.n[i] += n
}

// rate returns tokens per second over the window ending at now.
func (r *rateWindow) rate(now time.Time) float64 {
	s := now.Unix()
	var sum int64
	for i := range r.sec {
		if age := s - r.sec[i]; age >= 0 && age < throughputWindow {
			sum += r.n[i]
		}
	}
	return float64(sum) / throughputWindow
}

// collector exports the values of a scrape-time snapshot.
type collector struct {
	w     *Worker
	defs  []gaugeDef
	descs []*prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

func newCollector(w *Worker, d dialect, labels prometheus.Labels) *collector {
	c := &collector{w: w, defs: d.gauges}
	for _, g := range d.gauges {
		all := prometheus.Labels{}
		for k, v := range labels {
			all[k] = v
		}
		if g.labels != nil {
			for k, v := range g.labels(w.prof) {
				all[k] = v
			}
		}
		c.descs = append(c.descs, prometheus.NewDesc(g.name, g.help, nil, all))
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.scrape()
	for i, g := range c.defs {
		ch <- prometheus.MustNewConstMetric(c.descs[i], g.typ, g.value(s))
	}
}
