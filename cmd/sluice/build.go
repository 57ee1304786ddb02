package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/backends/loadscrape"
	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/admission/redisslots"
	"github.com/sluice-llm/sluice/policies/all"
	"github.com/sluice-llm/sluice/router"
)

// newPolicyRegistry is the registry of built-in policies.
func newPolicyRegistry() (*policies.Registry, error) {
	reg := policies.NewRegistry()
	if err := all.Register(reg); err != nil {
		return nil, err
	}
	return reg, nil
}

// buildTable turns a validated config into a routing table and the list of
// its endpoints (each once, for the load scraper). Endpoints come from eps,
// so a reload keeps the counters and load of backends it keeps. Every
// problem is reported, each naming its field.
// serving is the config and table a reload replaces.
type serving struct {
	cfg   *configs.Config
	table *router.Table
}

// route returns the route serving model m, when m's config is the same as
// when it was built: a reload keeps it (its admission queue with the
// requests waiting there and the slots it granted, its policy's state).
func (s *serving) route(m configs.Model) *router.Route {
	if s == nil {
		return nil
	}
	for _, pm := range s.cfg.Models {
		if pm.Name == m.Name && sameYAML(pm, m) {
			return s.table.Route(m.Name)
		}
	}
	return nil
}

// gate is the admission gate that serves model now, if any.
func (s *serving) gate(model string) *admission.Gate {
	if s == nil || s.table == nil {
		return nil
	}
	if r := s.table.Route(model); r != nil {
		return r.Gate
	}
	return nil
}

// buildTable builds c's routing table over the endpoints of eps; prev,
// when set, is what serves now, whose routes are kept for the models c
// leaves as they were.
func buildTable(c *configs.Config, reg *policies.Registry, eps *backends.Registry, shared *sharedAdmission, prev *serving) (*router.Table, []*backends.Endpoint, error) {
	var errs []error
	var all []*backends.Endpoint
	seen := map[*backends.Endpoint]bool{}
	keys := map[*backends.Endpoint]string{} // applied only when the whole config builds
	weights := map[*backends.Endpoint]int{} // the same
	weightAt := map[*backends.Endpoint]string{}
	routes := make([]*router.Route, 0, len(c.Models))
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		picker, err := reg.New(m.Policy, m.Params)
		if err != nil {
			var unknown *policies.UnknownPolicyError
			field := p + ".params"
			if errors.As(err, &unknown) {
				field = p + ".policy"
			}
			errs = append(errs, &configs.FieldError{Field: field, Message: err.Error()})
		}
		list := make([]*backends.Endpoint, 0, len(m.Backends))
		var served map[*backends.Endpoint]string // backends serving the model under another name
		for j, b := range m.Backends {
			e, err := eps.Get(b.URL, b.Weight)
			if err != nil {
				errs = append(errs, &configs.FieldError{Field: fmt.Sprintf("%s.backends[%d].url", p, j), Message: err.Error()})
				continue
			}
			key := b.APIKey
			if b.APIKeyEnv != "" {
				if key = os.Getenv(b.APIKeyEnv); key == "" {
					errs = append(errs, &envUnsetError{configs.FieldError{Field: fmt.Sprintf("%s.backends[%d].api_key_env", p, j),
						Message: "environment variable " + b.APIKeyEnv + " is empty or not set"}})
				}
			}
			if prev, ok := keys[e]; ok && prev != key {
				// One backend, one key: the last one listed was sent for
				// every model on it.
				errs = append(errs, &configs.FieldError{Field: fmt.Sprintf("%s.backends[%d].api_key", p, j),
					Message: "differs from the key another model gives the same backend: a backend has one api_key"})
			}
			keys[e] = key
			w := max(b.Weight, 1)
			field := fmt.Sprintf("%s.backends[%d].weight", p, j)
			if prev, ok := weights[e]; ok && prev != w {
				errs = append(errs, &configs.FieldError{Field: field, Message: fmt.Sprintf(
					"%d, but %s is %d for the same backend: a backend has one weight", w, weightAt[e], prev)})
			} else if !ok {
				weights[e], weightAt[e] = w, field
			}
			list = append(list, e)
			if b.ServedModel != "" && b.ServedModel != m.Name {
				if served == nil {
					served = map[*backends.Endpoint]string{}
				}
				served[e] = b.ServedModel
			}
			if !seen[e] {
				seen[e] = true
				all = append(all, e)
			}
		}
		if picker == nil || len(list) != len(m.Backends) {
			continue
		}
		if kept := prev.route(m); kept != nil {
			// Until 2026-12-02 every reload (a key rotated, a tier's limit
			// changed) built each model a new gate: the requests waiting in
			// the old one vanished from the metrics, and both gates granted
			// the whole budget while the old one's requests ran.
			routes = append(routes, kept)
			continue
		}
		pool, err := backends.NewPool(m.Name, list)
		if err != nil {
			errs = append(errs, &configs.FieldError{Field: p, Message: err.Error()})
			continue
		}
		route := &router.Route{Pool: pool, Picker: picker, Fallbacks: m.Fallbacks, Policy: m.Policy,
			FirstByteTimeout: cmp.Or(m.Timeouts.FirstByte, c.Upstream.ResponseHeaderTimeout).Std(),
			TotalTimeout:     m.Timeouts.Total.Std(), Aliases: m.Aliases, ServedNames: served}
		if m.AdmissionOn() {
			if route.Gate, err = newGate(m, pool, picker, list, shared); err != nil {
				errs = append(errs, &configs.FieldError{Field: p + ".admission", Message: err.Error()})
				continue
			}
			if old := prev.gate(m.Name); old != nil {
				route.Gate.CountWith(old)
			}
		}
		routes = append(routes, route)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	t, err := router.NewTable(routes)
	if err != nil {
		return nil, nil, err
	}
	for e, w := range weights {
		e.SetWeight(w)
	}
	for e, k := range keys {
		e.SetAPIKey(k)
	}
	return t, all, nil
}

// routerOptions maps the config onto the router's options.
func routerOptions(c *configs.Config, t *router.Table) router.Options {
	return router.Options{
		Table:                t,
		MaxBodyBytes:         c.MaxBodyBytes,
		BodyReadTimeout:      c.BodyReadTimeout.Std(),
		MaxBodyBytesInFlight: c.MaxBodyBytesInFlight,
		MetricsToken:         os.Getenv(c.MetricsTokenEnv),
		Retries:              *c.Upstream.Retries,
		StreamIdleTimeout:    c.Upstream.StreamIdleTimeout.Std(),
		Cooldown:             2 * time.Second,
		SessionHeader:        c.SessionHeader,
	}
}

// newScraper builds the load scraper from the config, or returns nil when
// scraping is off.
func newScraper(c *configs.Config, log *slog.Logger, reg prometheus.Registerer, upTLS *tls.Config) (*loadscrape.Scraper, error) {
	if !c.Scrape.On() {
		return nil, nil
	}
	return loadscrape.New(loadscrape.Options{
		Interval:   c.Scrape.Interval.Std(),
		Timeout:    c.Scrape.Timeout.Std(),
		Path:       c.Scrape.Path,
		TLS:        upTLS,
		Logger:     log,
		Registerer: reg,
	})
}

// newGate builds a model's admission gate: each backend's budget is its
// max_in_flight, else the model's max_in_flight_per_backend, and its bound
// on pending prompt tokens likewise its own max_pending_prompt_tokens, else
// the model's.
func newGate(m configs.Model, pool *backends.Pool, picker policies.Picker, eps []*backends.Endpoint, shared *sharedAdmission) (*admission.Gate, error) {
	budget := make(map[*backends.Endpoint]int, len(eps))
	pending := make(map[*backends.Endpoint]int64, len(eps))
	anyPending := false
	for i, b := range m.Backends {
		budget[eps[i]] = m.Admission.MaxInFlightPerBackend
		if b.MaxInFlight > 0 {
			budget[eps[i]] = b.MaxInFlight
		}
		pending[eps[i]] = m.Admission.MaxPendingPromptTokens
		if b.MaxPendingPromptTokens > 0 {
			pending[eps[i]] = b.MaxPendingPromptTokens
		}
		anyPending = anyPending || pending[eps[i]] > 0
	}
	o := admission.Options{
		Budget:    func(e *backends.Endpoint) int { return budget[e] },
		QueueSize: m.Admission.QueueSize,
		Pool:      m.Name,
		Replicas:  m.Admission.Replicas,
		KVMax:     m.Admission.KVMax,
		// Negative turns it off in both; zero cannot reach here (defaulted).
		BatchPrefill:      m.Admission.BatchPrefill.Std(),
		BatchReserve:      m.Admission.BatchReserve,
		MaxPendingPrefill: max(m.Admission.MaxPendingPrefill.Std(), 0), // negative: off
		BelowSharePrefill: m.Admission.MaxPendingPrefillBelowShare.Std(),
		BelowShareDetour:  max(m.Admission.MaxDetourBelowShare.Std(), 0), // negative: off
		BetterClassDetour: m.Admission.MaxDetourBetterClass.Std(),
		AboveSharePrefill: max(m.Admission.MaxPendingPrefillAboveShare.Std(), 0), // negative: off
		WorseClassPrefill: max(m.Admission.MaxPendingPrefillWorseClass.Std(), 0), // negative: off
		PendingUntilStep:  m.Admission.PendingUntilStep,
	}
	if o.KVMax >= 1 {
		o.KVMax = -1 // off
	}
	if anyPending {
		o.MaxPendingPrompt = func(e *backends.Endpoint) int64 { return pending[e] }
	}
	if shared != nil {
		o.Shared, o.LeaseTTL, o.OnSharedError = shared.slots, shared.leaseTTL, shared.failed
	}
	for class, d := range m.Admission.MaxWait {
		if c, ok := admission.ParseClass(class); ok {
			o.MaxWait[c] = d.Std()
		}
	}
	for class, d := range m.Admission.MaxPendingPrefillByClass {
		if c, ok := admission.ParseClass(class); ok {
			o.ClassPendingPrefill[c] = d.Std()
		}
	}
	return admission.NewGate(pool, picker, o)
}

// admissionSummary says how model m's admission binds, for the start log:
// "off", or the bound on each backend's prompts awaiting prefill beside
// its budget and the detour a tenant below its share waits for, so that
// an operator sees the defaults in force.
func admissionSummary(m configs.Model) string {
	if !m.AdmissionOn() {
		return "off"
	}
	var rules []string
	if m.SetsPromptTokens() {
		rules = append(rules, "prompts pending under max_pending_prompt_tokens")
	}
	if d := m.Admission.MaxPendingPrefill.Std(); d > 0 {
		rules = append(rules, "prompts pending under "+d.String()+" of prefill (max_pending_prefill)")
	}
	s := "budgets alone"
	if len(rules) > 0 {
		s = "budgets, and " + strings.Join(rules, " and ")
	}
	if d := m.Admission.MaxPendingPrefillAboveShare.Std(); d > 0 && (m.Admission.MaxPendingPrefill > 0 || len(m.Admission.MaxPendingPrefillByClass) > 0) {
		s += "; a tenant at or over its share beside another binds where the prompts not yet in an engine step take under " + d.String() + " (max_pending_prefill_above_share)"
	}
	if d := m.Admission.MaxPendingPrefillWorseClass.Std(); d > 0 && (m.Admission.MaxPendingPrefill > 0 || len(m.Admission.MaxPendingPrefillByClass) > 0) {
		s += "; a class behind a better one with requests in flight binds where the prompts not yet in an engine step take under " + d.String() + " (max_pending_prefill_worse_class)"
	}
	if d := m.Admission.MaxDetourBelowShare.Std(); d > 0 {
		s += "; a tenant below its share waits for a backend within " + d.String() + " of its quickest start (max_detour_below_share)"
	}
	if d := m.Admission.MaxDetourBetterClass.Std(); d > 0 {
		s += "; a class ahead of a worse one in flight waits for a backend within " + d.String() + " of its quickest start (max_detour_better_class)"
	}
	return s
}

// sharedAdmission shares admission budgets through the limits' Redis.
type sharedAdmission struct {
	slots     admission.Slots
	prefilled *batchedPrefilled // slots, whose Prefilled calls its Run sends
	store     *redisslots.Slots // slots, untimed: for its Watch
	leaseTTL  time.Duration
	log       *slog.Logger
	errors    prometheus.Counter
	up        prometheus.Gauge
	mu        sync.Mutex // guards what follows, and up's value with down
	lastLog   time.Time  // of the last warning
	down      bool       // failing since the last "answering again"
}

// Run tells the gates of rt's table serving now of the room other replicas
// free (redisslots.Slots.Watch) until ctx ends; a lost subscription is
// logged and made again after a second, the gates' own looks covering the
// gap.
func (s *sharedAdmission) Run(ctx context.Context, rt *router.Router) {
	room := func(pool, backend string) {
		if r := rt.Table().Route(pool); r != nil && r.Gate != nil {
			r.Gate.Room(backend)
		}
	}
	for {
		err := s.store.Watch(ctx, room)
		if ctx.Err() != nil {
			return
		}
		if slices.ContainsFunc(rt.Table().Routes(), func(r *router.Route) bool { return r.Gate != nil }) {
			s.failed(err)
		} else {
			s.errors.Inc() // no model admits through the store: nothing to warn of
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// Renew renews this replica's admission leases every third of their TTL
// until ctx ends (redisslots.Slots.Renew), so that a request keeps its
// slot for as long as it runs while a dead replica's slots come back
// within the TTL. It runs until the server has drained.
func (s *sharedAdmission) Renew(ctx context.Context) {
	t := time.NewTicker(s.leaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, s.leaseTTL/3)
			if _, err := s.store.Renew(rctx, time.Now()); err != nil && ctx.Err() == nil {
				s.failed(err)
			} else if err == nil {
				s.recovered()
			}
			cancel()
		}
	}
}

// failed counts a shared-store failure and logs at most one line in 10 s
// (the first of an outage at once).
func (s *sharedAdmission) failed(err error) {
	s.errors.Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if !s.down || now.Sub(s.lastLog) > 10*time.Second {
		s.lastLog = now
		s.log.Warn("admission store failing; each replica admits within its share of the budgets", "err", err)
	}
	s.down = true
	s.up.Set(0)
}

// recovered notes a shared-store call that succeeded (a breaker probe, a
// renewal), and logs the end of an outage once: the warning had no
// counterpart, so a log read after an outage did not say whether the
// budgets were shared again.
func (s *sharedAdmission) recovered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.down = false
		s.up.Set(1)
		s.log.Info("admission store answering again; the replicas share the budgets")
	}
}

// breakerSettings maps the config onto the endpoints' breakers, whose state
// changes are logged and counted.
func breakerSettings(c configs.Breaker, log *slog.Logger, reg prometheus.Registerer) (backends.BreakerSettings, error) {
	changes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_breaker_transitions_total",
		Help: "Circuit breaker state changes, by backend and the state entered (open, half-open, closed).",
	}, []string{"backend", "to"})
	// sluice_breaker_open is read from the routing table at scrape time
	// (router's fleet collector): a gauge set here stayed 1 for a backend
	// removed while its breaker was open.
	if err := reg.Register(changes); err != nil {
		return backends.BreakerSettings{}, err
	}
	return backends.BreakerSettings{
		ConsecutiveFailures: uint32(c.ConsecutiveFailures),
		FailureRatio:        c.FailureRatio,
		MinRequests:         uint32(c.MinRequests),
		Window:              c.Window.Std(),
		OpenFor:             c.OpenFor.Std(),
		Probes:              uint32(c.Probes),
		OnChange: func(addr, from, to string) {
			changes.WithLabelValues(addr, to).Inc()
			log.Warn("circuit breaker "+to, "backend", addr, "from", from)
		},
	}, nil
}

// envUnsetError is a setting that names an environment variable not set
// here: serve refuses the config, while validate, run where the secrets
// are not (a CI job), only notes it.
type envUnsetError struct{ configs.FieldError }

func (e *envUnsetError) Unwrap() error { return &e.FieldError }
