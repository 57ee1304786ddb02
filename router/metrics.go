package router

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the router's collectors. Labels stay low-cardinality: model,
// tier, tenant and class names and backend addresses come from the config,
// never from clients. What is read from the routing table (backends'
// load, admission queues) is collected at scrape time by fleetCollector.
type metrics struct {
	requests *prometheus.CounterVec   // model, route, tier, class, code
	duration *prometheus.HistogramVec // model, route, tier, class, code
	ttft     *prometheus.HistogramVec // model, class
	tpot     *prometheus.HistogramVec // model, class
	overhead *prometheus.HistogramVec // model
	attempts *prometheus.CounterVec   // backend, outcome
	tokens   *prometheus.CounterVec   // tenant, tier, kind

	retries       *prometheus.CounterVec   // reason
	fallbacks     *prometheus.CounterVec   // model, to
	admissionWait *prometheus.HistogramVec // model, class
	shed          *prometheus.CounterVec   // model, class, reason
	stored        *prometheus.CounterVec   // event

	// codes are the status codes' label values, formatted once so that
	// recording a request formats nothing.
	codes [600]string

	// The children every request touches, cached by their label values: a
	// hit hashes its key once, where WithLabelValues hashes every value
	// and takes the vector's lock, once per child (issue 12). Label values
	// come from the config, so each cache stays as small as its vector.
	byRequest  children[requestLabels, requestChildren]
	byStream   children[streamLabels, streamChildren]
	byTenant   children[tenantLabels, [2]prometheus.Counter]
	byAttempt  children[attemptLabels, prometheus.Counter]
	byAdmitted children[streamLabels, prometheus.Observer]
	byModel    children[string, prometheus.Observer] // overhead
}

type requestLabels struct{ model, route, tier, class, code string }

type requestChildren struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// streamLabels are a model and a service class.
type streamLabels struct{ model, class string }

type streamChildren struct{ ttft, tpot prometheus.Observer }

type tenantLabels struct{ tenant, tier string }

type attemptLabels struct{ backend, outcome string }

// children maps label values to the children they select. Its zero value
// is empty and ready to use.
type children[K comparable, V any] struct{ m sync.Map }

// get returns k's children, made by mk on first use.
func (c *children[K, V]) get(k K, mk func(K) V) V {
	if v, ok := c.m.Load(k); ok {
		return v.(V)
	}
	v, _ := c.m.LoadOrStore(k, mk(k))
	return v.(V)
}

// noLabel is the label value for what a request never got to (an unknown
// model, a request without a tenant): never the client's input.
const noLabel = "none"

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_requests_total",
			Help: "Requests answered, by model, route, tenant tier, service class and status code (tier and class \"none\" before they are known; tier \"none\" without tenants; Files and Batch API calls under model and class \"none\" and their route's pattern, a batch's lines under route \"batch:/v1/...\").",
		}, []string{"model", "route", "tier", "class", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_http_request_duration_seconds",
			Help:    "Time from request arrival to the end of the answer, by model, route, tenant tier, service class and status code.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"model", "route", "tier", "class", "code"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_time_to_first_token_seconds",
			Help:    "Streamed answers' time from the request's arrival (limits, admission wait and retries included) to the first byte of the answer, by model and service class.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 20, 60},
		}, []string{"model", "class"}),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_time_per_output_token_seconds",
			Help:    "Streamed answers' mean time between output tokens after the first, one observation per answer, by model and service class.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1},
		}, []string{"model", "class"}),
		overhead: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_request_overhead_seconds",
			Help:    "Time from a request's arrival to its first attempt on a backend, less its wait in the admission queue: what Sluice spent reading and checking it, on the tenant's limits, admission and the pick, by model.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}, []string{"model"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_attempts_total",
			Help: "Attempts sent to backends, by backend and outcome: ok, upstream_4xx, upstream_5xx, unreachable, timeout, failed (the answer broke off after it started), client_gone, request_timeout (the request's total time ran out mid-stream), local_error (the attempt could not be made here).",
		}, []string{"backend", "outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tenant_tokens_total",
			Help: "Tokens charged to tenants after settlement, by tenant, tier and kind (input, output).",
		}, []string{"tenant", "tier", "kind"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_retries_total",
			Help: "Requests tried again on another backend, by how the attempt before failed.",
		}, []string{"reason"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_fallbacks_total",
			Help: "Requests served by a fallback model because none of their model's backends was in routing, by model and fallback.",
		}, []string{"model", "to"}),
		admissionWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_admission_wait_seconds",
			Help:    "Time admitted requests waited in the router's admission queue, by model and service class.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600, 1200},
		}, []string{"model", "class"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_admission_shed_total",
			Help: "Requests the admission queue shed, by model, service class and reason (queue full, waited too long).",
		}, []string{"model", "class", "reason"}),
		stored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_stored_responses_total",
			Help: "The Responses API's stored responses, by event: remembered (which backend made one), pinned (a request continuing or reading one sent to that backend), unknown (an id the index did not hold: routed as any request), index_error (the index did not answer).",
		}, []string{"event"}),
	}
	for c := range m.codes {
		m.codes[c] = strconv.Itoa(c)
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.ttft, m.tpot, m.overhead, m.attempts, m.tokens, m.retries,
		m.fallbacks, m.admissionWait, m.shed, m.stored} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// code is status's label value.
func (m *metrics) code(status int) string {
	if status >= 0 && status < len(m.codes) {
		return m.codes[status]
	}
	return strconv.Itoa(status)
}

// observe records a finished inference request: its count and latency and,
// for a streamed answer, its time to first token and per output token.
func (m *metrics) observe(route string, status int, elapsed time.Duration, rec *requestRecord) {
	model, tier, class := labelOr(rec.model), noLabel, labelOr(rec.class)
	if rec.tenant != nil {
		tier = rec.tenant.Tier
	}
	req := m.byRequest.get(requestLabels{model, route, tier, class, m.code(status)}, func(k requestLabels) requestChildren {
		return requestChildren{count: m.requests.WithLabelValues(k.model, k.route, k.tier, k.class, k.code),
			duration: m.duration.WithLabelValues(k.model, k.route, k.tier, k.class, k.code)}
	})
	req.count.Inc()
	req.duration.Observe(elapsed.Seconds())
	if !rec.firstSent.IsZero() {
		m.byModel.get(model, func(k string) prometheus.Observer { return m.overhead.WithLabelValues(k) }).Observe(rec.overhead().Seconds())
	}
	if d := rec.ttft(); d > 0 {
		st := m.byStream.get(streamLabels{model, class}, func(k streamLabels) streamChildren {
			return streamChildren{ttft: m.ttft.WithLabelValues(k.model, k.class), tpot: m.tpot.WithLabelValues(k.model, k.class)}
		})
		st.ttft.Observe(d.Seconds())
		if o := rec.out; o.DecodeTokens > 0 && o.Class.Measured() {
			st.tpot.Observe(o.Decode.Seconds() / float64(o.DecodeTokens))
		}
	}
}

// tenantTokens counts tokens charged to a tenant: used.Input as input,
// used.Output as output.
func (m *metrics) tenantTokens(tenant, tier string, input, output int64) {
	c := m.byTenant.get(tenantLabels{tenant, tier}, func(k tenantLabels) [2]prometheus.Counter {
		return [2]prometheus.Counter{m.tokens.WithLabelValues(k.tenant, k.tier, "input"), m.tokens.WithLabelValues(k.tenant, k.tier, "output")}
	})
	c[0].Add(float64(input))
	c[1].Add(float64(output))
}

// attempted counts an attempt sent to backend that ended as outcome.
func (m *metrics) attempted(backend, outcome string) {
	m.byAttempt.get(attemptLabels{backend, outcome}, func(k attemptLabels) prometheus.Counter {
		return m.attempts.WithLabelValues(k.backend, k.outcome)
	}).Inc()
}

// admitted records how long an admitted request of model and class waited.
func (m *metrics) admitted(model, class string, waited time.Duration) {
	m.byAdmitted.get(streamLabels{model, class}, func(k streamLabels) prometheus.Observer {
		return m.admissionWait.WithLabelValues(k.model, k.class)
	}).Observe(waited.Seconds())
}

// labelOr is v, or noLabel when v is empty.
func labelOr(v string) string {
	if v == "" {
		return noLabel
	}
	return v
}
