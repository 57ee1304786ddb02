package router

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the router's collectors. Labels stay low-cardinality: model
// names and backend addresses come from the config, never from clients.
type metrics struct {
	requests *prometheus.CounterVec   // model, route, code
	duration *prometheus.HistogramVec // model, route
	attempts *prometheus.CounterVec   // backend, outcome
	inFlight *prometheus.GaugeVec     // backend
	tokens   *prometheus.CounterVec   // tier, kind

	retries       *prometheus.CounterVec   // reason
	fallbacks     *prometheus.CounterVec   // model, to
	admissionWait *prometheus.HistogramVec // model, class
	shed          *prometheus.CounterVec   // model, class, reason
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_requests_total",
			Help: "Inference requests answered, by model, route and status code.",
		}, []string{"model", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_http_request_duration_seconds",
			Help:    "Time from request arrival to the end of the answer, by model and route.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"model", "route"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_attempts_total",
			Help: "Attempts sent to backends, by backend and outcome: ok, upstream_4xx, upstream_5xx, unreachable, timeout, failed (the answer broke off after it started), client_gone.",
		}, []string{"backend", "outcome"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_upstream_in_flight_requests",
			Help: "Requests this replica has open to each backend.",
		}, []string{"backend"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tenant_tokens_total",
			Help: "Tokens charged to tenants after settlement, by tier and kind (input, output).",
		}, []string{"tier", "kind"}),
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
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"model", "class"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_admission_shed_total",
			Help: "Requests the admission queue shed, by model, service class and reason (queue full, waited too long).",
		}, []string{"model", "class", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.attempts, m.inFlight, m.tokens, m.retries, m.fallbacks, m.admissionWait, m.shed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
