package router

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-llm/sluice/policies/admission"
)

// fleetCollector reports the routing table as it is when /metrics is
// scraped: each backend's in-flight count, scraped engine load, measured
// decode rate, breaker state and whether it is in routing, and each
// model's admission queue by class. It reads the endpoints' atomics and
// snapshots, so requests pay nothing for these metrics, and a backend a
// reload removed disappears from them with it.
type fleetCollector struct {
	rt *Router

	inFlight, available, waiting, running, kv, decode, prefill, pending, breaker, breakerOpen, queued, behind, detoured, heldAbove *prometheus.Desc
}

// Compile-time check.
var _ prometheus.Collector = (*fleetCollector)(nil)

func newFleetCollector(rt *Router) *fleetCollector {
	mb := []string{"model", "backend"}
	return &fleetCollector{
		rt: rt,
		inFlight: prometheus.NewDesc("sluice_upstream_in_flight_requests",
			"Requests this replica has open to each backend.", []string{"backend"}, nil),
		available: prometheus.NewDesc("sluice_backend_available",
			"1 while the backend is in routing for the model: not held out after a failure to connect, its breaker not open, not drained.", mb, nil),
		waiting: prometheus.NewDesc("sluice_backend_waiting_requests",
			"Requests waiting in the backend engine's queue, as last scraped (absent while its load is not known).", mb, nil),
		running: prometheus.NewDesc("sluice_backend_running_requests",
			"Requests in the backend engine's running batch, as last scraped (absent while its load is not known).", mb, nil),
		kv: prometheus.NewDesc("sluice_backend_kv_cache_usage_ratio",
			"Fraction of the backend's KV cache in use, 0 to 1, as last scraped (absent when not known or not reported).", mb, nil),
		decode: prometheus.NewDesc("sluice_backend_decode_tokens_per_second",
			"Moving average of the backend's decode rate, measured on the answers this replica relayed (absent before the first).", mb, nil),
		prefill: prometheus.NewDesc("sluice_backend_prefill_tokens_per_second",
			"Moving average of the backend's prefill rate (prompt tokens queued ahead plus its own, over time to first token), measured on the answers this replica relayed (absent before the first); admission's batch_prefill bound reads it.", mb, nil),
		pending: prometheus.NewDesc("sluice_upstream_pending_prompt_tokens",
			"Prompt tokens this replica has sent each backend that have not reached their first token (a whole answer's until it arrives).", []string{"backend"}, nil),
		breaker: prometheus.NewDesc("sluice_backend_breaker_state",
			"The backend's circuit breaker state: 1 for the state it is in (closed, half-open, open), 0 for the others; absent without breakers.",
			[]string{"model", "backend", "state"}, nil),
		breakerOpen: prometheus.NewDesc("sluice_breaker_open",
			"1 while a backend's circuit breaker is open (the backend is out of routing), else 0; absent without breakers.", []string{"backend"}, nil),
		queued: prometheus.NewDesc("sluice_admission_queued_requests",
			"Requests waiting in the model's admission queue, by service class (models with admission only).", []string{"model", "class"}, nil),
		behind: prometheus.NewDesc("sluice_admission_held_behind_total",
			"Looks for room at which a request of the class was held back because one that goes first (of a better class, its tenant's earlier one, or a less-served tenant's) waits on another replica; counted since the model's gate was built (a reload starts it again).", []string{"model", "class"}, nil),
		heldAbove: prometheus.NewDesc("sluice_admission_held_above_share_total",
			"Looks for room at which a request of the class was held by admission.max_pending_prefill_above_share (its tenant at or over its share beside another) or admission.max_pending_prefill_worse_class (a better class in flight), the backends' prompts no engine step has taken at the bound, while backends had room for other requests, which went meanwhile; counted since the model's gate was built (a reload starts it again).", []string{"model", "class"}, nil),
		detoured: prometheus.NewDesc("sluice_admission_detoured_total",
			"Requests set aside to wait for a backend where they start within admission.max_detour_below_share (their tenant below its share) or max_detour_better_class (a worse class in flight) of their quickest start; counted since the model's gate was built (a reload starts it again).", []string{"model", "class"}, nil),
	}
}

// Describe sends the collector's descriptors.
func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inFlight, c.available, c.waiting, c.running, c.kv, c.decode, c.prefill, c.pending, c.breaker, c.breakerOpen, c.queued, c.behind, c.detoured, c.heldAbove} {
		ch <- d
	}
}

// Collect reads the current table. A backend in several models' pools is
// reported under each model, and its in-flight count once.
func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.rt.table.Load()
	now := c.rt.now()
	seen := map[string]bool{}
	gauge := prometheus.GaugeValue
	for _, model := range t.order {
		rte := t.routes[model]
		for _, e := range rte.Pool.Endpoints() {
			addr := e.Address()
			if !seen[addr] {
				seen[addr] = true
				ch <- prometheus.MustNewConstMetric(c.inFlight, gauge, float64(e.InFlight()), addr)
				ch <- prometheus.MustNewConstMetric(c.pending, gauge, float64(e.PendingPromptTokens()), addr)
				if b := e.Breaker(); b != nil {
					open := 0.0
					if b.State() == "open" {
						open = 1
					}
					ch <- prometheus.MustNewConstMetric(c.breakerOpen, gauge, open, addr)
				}
			}
			up := 0.0
			if e.Available(now) {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(c.available, gauge, up, model, addr)
			if l := e.Load(); l != nil {
				ch <- prometheus.MustNewConstMetric(c.waiting, gauge, float64(l.Waiting), model, addr)
				ch <- prometheus.MustNewConstMetric(c.running, gauge, float64(l.Running), model, addr)
				if l.KVUsage >= 0 {
					ch <- prometheus.MustNewConstMetric(c.kv, gauge, l.KVUsage, model, addr)
				}
			}
			if r := e.TokensPerSec(); r > 0 {
				ch <- prometheus.MustNewConstMetric(c.decode, gauge, r, model, addr)
			}
			if r := e.PrefillTokensPerSec(); r > 0 {
				ch <- prometheus.MustNewConstMetric(c.prefill, gauge, r, model, addr)
			}
			if b := e.Breaker(); b != nil {
				state := b.State()
				for _, s := range [...]string{"closed", "half-open", "open"} {
					v := 0.0
					if s == state {
						v = 1
					}
					ch <- prometheus.MustNewConstMetric(c.breaker, gauge, v, model, addr, s)
				}
			}
		}
		if rte.Gate != nil {
			stats := rte.Gate.Stats()
			for class, s := range stats {
				ch <- prometheus.MustNewConstMetric(c.queued, gauge, float64(s.Waiting), model, admission.Class(class).String())
				ch <- prometheus.MustNewConstMetric(c.behind, prometheus.CounterValue, float64(s.Behind), model, admission.Class(class).String())
				ch <- prometheus.MustNewConstMetric(c.detoured, prometheus.CounterValue, float64(s.Detoured), model, admission.Class(class).String())
				ch <- prometheus.MustNewConstMetric(c.heldAbove, prometheus.CounterValue, float64(s.HeldAbove), model, admission.Class(class).String())
			}
		}
	}
	if c.rt.endpoints == nil {
		return
	}
	// Backends a change removed, while their requests finish (the series
	// went at once, though /admin/backends listed them in flight).
	for _, e := range c.rt.endpoints.Endpoints() {
		if addr := e.Address(); !seen[addr] && e.InFlight() > 0 {
			ch <- prometheus.MustNewConstMetric(c.inFlight, gauge, float64(e.InFlight()), addr)
			ch <- prometheus.MustNewConstMetric(c.pending, gauge, float64(e.PendingPromptTokens()), addr)
		}
	}
}
