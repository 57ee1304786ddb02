package main

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/backends/loadscrape"
	"github.com/sluice-llm/sluice/configs"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/router"
	"github.com/sluice-llm/sluice/router/admin"
	"github.com/sluice-llm/sluice/router/auth"
)

// runtime owns the running config: reloads (SIGHUP, a file edit, the admin
// API) and the admin API's changes all go through it, one at a time, and
// each is validated and built whole before it replaces what serves (a bad
// one changes nothing).
type runtime struct {
	mu      sync.Mutex
	path    string
	log     *slog.Logger
	reg     *policies.Registry
	eps     *backends.Registry
	rt      *router.Router
	scraper *loadscrape.Scraper
	shared  *sharedAdmission
	changes *changeMetrics  // nil: none counted
	started *configs.Config // settings read only at start
	// override, when set, applies the command line's settings (--listen,
	// --redis-url) to every config read, so that the running config shows
	// them and a reload does not take the file's for a change.
	override func(*configs.Config)
	current  *configs.Config // what serves now
	edited   bool            // current holds admin API changes the file may not have
	// apiCert and adminCert are the listeners' certificates (nil: plain
	// HTTP), read again on every change of the config.
	apiCert, adminCert *certificate
}

var (
	_ admin.Runtime = (*runtime)(nil)
	_ admin.Source  = (*runtime)(nil)
)

// Reload re-reads the config file; admin changes not written to the file
// are replaced by it.
func (r *runtime) Reload() error {
	cfg, err := configs.Load(r.path)
	if err != nil {
		r.log.Error("config reload failed; keeping the running config", "path", r.path, "err", err)
		r.changes.count("reload", false)
		return err
	}
	if r.override != nil {
		r.override(cfg)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	edited := r.edited && !sameYAML(cfg.Models, r.current.Models)
	err = r.applyLocked(cfg, "config reloaded", "config reload failed")
	r.changes.count("reload", err == nil)
	if err != nil {
		return err
	}
	if edited {
		r.log.Warn("the config file replaced backends changed through the admin API; write them to the file to keep them", "path", r.path)
	}
	r.edited = false
	return nil
}

// applyLocked builds cfg and swaps it in, logging done, or logs failed and
// why, and keeps what serves.
func (r *runtime) applyLocked(cfg *configs.Config, done, failed string, attrs ...any) error {
	if len(cfg.Tenants) == 0 && len(r.current.Tenants) > 0 {
		// A file cut short (a truncated write, a bad merge) reads as
		// valid with no tenants, and every caller would be served without
		// a key or limits. Turning keys off takes a restart.
		err := errors.New("tenants: the new config has none, so every caller would be served without a key or limits; " +
			"a reload does not turn authentication off (restart with that config to run open)")
		r.log.Error(failed+"; keeping the running config", append(attrs, "path", r.path, "err", err)...)
		return err
	}
	// upstream takes effect on restart: its response_header_timeout, the
	// routes' default first-byte timeout, is the started one's (a reload
	// of 1s applied it to models rebuilt then, and reverting it left them
	// with it, while the log and /admin/config said "running as started").
	build := *cfg
	build.Upstream = r.started.Upstream
	t, endpoints, err := buildTable(&build, r.reg, r.eps, r.shared, &serving{cfg: r.current, table: r.rt.Table()})
	var dir *auth.Directory
	if err == nil {
		dir, err = buildTenants(cfg)
	}
	var apiPair, adminPair *tls.Certificate
	if err == nil {
		apiPair, err = r.apiCert.reload()
	}
	if err == nil {
		adminPair, err = r.adminCert.reload()
	}
	if err == nil {
		err = r.rt.SetTenants(dir)
	}
	if err != nil {
		r.log.Error(failed+"; keeping the running config", append(attrs, "path", r.path, "err", err)...)
		return err
	}
	// A backend that serves no model of the running config comes in
	// routing: a drain outlived its removal, and a backend removed and
	// added again (by the admin API or the file) came back drained.
	before := map[*backends.Endpoint]bool{}
	for _, m := range r.current.Models {
		for _, b := range m.Backends {
			if e, ok := r.eps.Lookup(b.URL); ok {
				before[e] = true
			}
		}
	}
	for _, e := range endpoints {
		if !before[e] && e.Drained() {
			e.SetDrained(false)
			r.log.Info("backend added back ends its drain", "backend", e.Address())
		}
	}
	r.rt.SetTable(t)
	r.apiCert.use(apiPair)
	r.adminCert.use(adminPair)
	if r.scraper != nil {
		r.scraper.SetEndpoints(endpoints)
	}
	if pending := restartPending(cfg, r.started); len(pending) > 0 {
		r.log.Warn("config changes that take effect on restart; running as started", "fields", pending)
	}
	r.current = cfg
	r.log.Info(done, append(attrs, "models", len(cfg.Models))...)
	return nil
}

// edit applies change to a copy of the running config, validates and
// applies it.
func (r *runtime) edit(change func(*configs.Config) error, done, failed string, attrs ...any) (err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() { r.changes.count("admin", err == nil) }()
	b, err := yaml.Marshal(r.current)
	if err != nil {
		return err
	}
	var c configs.Config
	if err := yaml.Unmarshal(b, &c); err != nil {
		return err
	}
	if err := change(&c); err != nil {
		return err
	}
	if b, err = yaml.Marshal(&c); err != nil {
		return err
	}
	cfg, err := configs.Parse(b)
	if err != nil {
		return err
	}
	if err := r.applyLocked(cfg, done, failed, attrs...); err != nil {
		return err
	}
	r.edited = true
	return nil
}

func (r *runtime) model(c *configs.Config, name string) (*configs.Model, error) {
	for i := range c.Models {
		if c.Models[i].Name == name {
			return &c.Models[i], nil
		}
	}
	return nil, fmt.Errorf("%w: model %q", admin.ErrNotFound, name)
}

// AddBackend adds url to model's backends; servedModel is the name it
// serves the model under (empty: the model's).
func (r *runtime) AddBackend(model, url string, weight int, servedModel string) error {
	return r.edit(func(c *configs.Config) error {
		m, err := r.model(c, model)
		if err != nil {
			return err
		}
		b := configs.Backend{URL: url, Weight: weight, ServedModel: servedModel}
		// A backend has one weight and one key: one another model lists
		// already gives them to an addition that does not set them (the
		// addition was refused, blaming the other model's weight).
		for _, o := range c.Models {
			for _, ob := range o.Backends {
				if configs.SameBackend(ob.URL, url) {
					b.Weight = cmp.Or(b.Weight, ob.Weight)
					b.APIKey, b.APIKeyEnv = ob.APIKey, ob.APIKeyEnv
				}
			}
		}
		m.Backends = append(m.Backends, b)
		return nil
	}, "backend added", "backend not added", "model", model, "backend", url)
}

// RemoveBackend removes url from model's backends; its requests in flight
// finish.
func (r *runtime) RemoveBackend(model, url string) error {
	return r.edit(func(c *configs.Config) error {
		m, err := r.model(c, model)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(m.Backends, func(b configs.Backend) bool { return configs.SameBackend(b.URL, url) })
		if i < 0 {
			return fmt.Errorf("%w: backend %q of model %q", admin.ErrNotFound, url, model)
		}
		m.Backends = slices.Delete(m.Backends, i, i+1)
		return nil
	}, "backend removed", "backend not removed", "model", model, "backend", url)
}

// Drain takes url out of routing (or puts it back) without changing the
// config: every model it serves stops sending it requests.
func (r *runtime) Drain(model, url string, on bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, err := r.model(r.current, model)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(m.Backends, func(b configs.Backend) bool { return configs.SameBackend(b.URL, url) })
	var e *backends.Endpoint
	ok := i >= 0
	if ok {
		e, ok = r.eps.Lookup(m.Backends[i].URL)
	}
	if !ok {
		return fmt.Errorf("%w: backend %q of model %q", admin.ErrNotFound, url, model)
	}
	e.SetDrained(on)
	r.log.Info("backend drained", "model", model, "backend", e.Address(), "drained", on)
	return nil
}

// Backends lists every model's backends with their live state.
func (r *runtime) Backends() []admin.Backend {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []admin.Backend
	for _, m := range r.current.Models {
		for _, b := range m.Backends {
			e, ok := r.eps.Lookup(b.URL)
			if !ok {
				continue
			}
			v := admin.Backend{Model: m.Name, ServedModel: b.ServedModel, URL: e.Address(), Weight: e.Weight(), InRouting: e.Available(time.Now()),
				Drained: e.Drained(), Breaker: "none", InFlight: e.InFlight(),
				TTFTMillis: float64(e.TTFT().Microseconds()) / 1000, TokensPerSec: e.TokensPerSec(),
				Requests: e.Requests(), Failures: e.Failures()}
			if br := e.Breaker(); br != nil {
				v.Breaker = br.State()
			}
			if l := e.Load(); l != nil {
				v.Waiting, v.Running = &l.Waiting, &l.Running
				if l.KVUsage >= 0 {
					v.KVUsage = &l.KVUsage
				}
			}
			out = append(out, v)
		}
	}
	// Backends a change removed, while their requests in flight finish.
	listed := map[string]bool{}
	for _, v := range out {
		listed[v.URL] = true
	}
	for _, e := range r.eps.Endpoints() {
		if n := e.InFlight(); n > 0 && !listed[e.Address()] {
			out = append(out, admin.Backend{URL: e.Address(), Weight: e.Weight(), Breaker: "none", InFlight: n,
				TTFTMillis: float64(e.TTFT().Microseconds()) / 1000, TokensPerSec: e.TokensPerSec(),
				Requests: e.Requests(), Failures: e.Failures(), Removed: true})
		}
	}
	return out
}

// Tenants lists the serving tenants with their use as this replica's
// limiter saw it; nil when the router is open.
func (r *runtime) Tenants() []admin.TenantUse {
	dir, lim := r.rt.Tenants(), r.rt.Limiter()
	if dir.Open() || lim == nil {
		return nil
	}
	out := make([]admin.TenantUse, 0, len(dir.Tenants()))
	for _, t := range dir.Tenants() {
		u := lim.Usage(t.Name)
		l := t.Limits
		v := admin.TenantUse{Name: t.Name, Tier: t.Tier,
			Limits: admin.TenantLimits{RequestsPerMinute: l.RequestsPerMinute, InputTokensPerMinute: l.InputTokensPerMinute,
				OutputTokensPerMinute: l.OutputTokensPerMinute, Concurrency: l.Concurrency, TokensPerDay: l.TokensPerDay},
			InFlight: u.InFlight, Requests: u.LastMinute.Requests, InputTokens: u.LastMinute.Input,
			OutputTokens: u.LastMinute.Output, Denied: u.DeniedLastMinute, TokensToday: u.Today,
			RequestsTotal: u.Total.Requests, TokensTotal: u.Total.Tokens()}
		if !u.LastAt.IsZero() {
			v.Store = &admin.StoreWindow{At: u.LastAt,
				RequestsLimit: u.Last.Requests.Limit, RequestsRemaining: u.Last.Requests.Remaining,
				TokensLimit: u.Last.Tokens.Limit, TokensRemaining: u.Last.Tokens.Remaining}
		}
		out = append(out, v)
	}
	return out
}

// Queues lists every admission gate's classes, in the table's order.
func (r *runtime) Queues() []admin.QueueClass {
	var out []admin.QueueClass
	for _, rte := range r.rt.Table().Routes() {
		if rte.Gate == nil {
			continue
		}
		for c, s := range rte.Gate.Stats() {
			out = append(out, admin.QueueClass{Model: rte.Pool.Model(), Class: admission.Class(c).String(),
				Waiting: s.Waiting, AdmittedTotal: s.Admitted, ShedTotal: s.Shed, WaitedSeconds: s.Waited.Seconds(), HeldBehindTotal: s.Behind, DetouredTotal: s.Detoured, HeldAboveShareTotal: s.HeldAbove})
		}
	}
	return out
}

// Config is the running config as YAML with its secrets redacted.
func (r *runtime) Config() ([]byte, error) {
	r.mu.Lock()
	b, err := yaml.Marshal(r.current)
	pending := restartPending(r.current, r.started)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var c configs.Config
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	// What runs: the settings read only at start as they were then.
	s := r.started
	c.MaxBodyBytesInFlight, c.MetricsTokenEnv = s.MaxBodyBytesInFlight, s.MetricsTokenEnv
	c.Listen, c.MaxBodyBytes, c.BodyReadTimeout, c.Upstream, c.Scrape, c.SessionHeader = s.Listen, s.MaxBodyBytes, s.BodyReadTimeout, s.Upstream, s.Scrape, s.SessionHeader
	c.TLS = s.TLS
	c.CORS, c.Admin, c.Log, c.Limits, c.Batch = s.CORS, s.Admin, s.Log, s.Limits, s.Batch
	// Switches left unset and inherited timeouts, as they take effect.
	c.Upstream.Breaker.Enabled = ptr(c.Upstream.Breaker.On())
	c.Scrape.Enabled = ptr(c.Scrape.On())
	c.Log.Requests = ptr(c.Log.RequestsOn())
	c.Limits.FailOpen = ptr(c.Limits.FailsOpen())
	for i := range c.Models {
		t := &c.Models[i].Timeouts
		t.FirstByte = cmp.Or(t.FirstByte, c.Upstream.ResponseHeaderTimeout)
	}
	for i := range c.Models {
		for j := range c.Models[i].Backends {
			if c.Models[i].Backends[j].APIKey != "" {
				c.Models[i].Backends[j].APIKey = "REDACTED"
			}
		}
	}
	if c.Limits.RedisURL != "" {
		c.Limits.RedisURL = configs.RedactURL(c.Limits.RedisURL)
	}
	out, err := yaml.Marshal(&c)
	if err != nil || len(pending) == 0 {
		return out, err
	}
	head := "# changed in " + r.path + " and waiting for a restart (shown as running): " + strings.Join(pending, ", ") + "\n"
	return append([]byte(head), out...), nil
}

func ptr[T any](v T) *T { return &v }

// restartPending names the settings read only at start that differ in cfg
// from the config the process started with.
func restartPending(cfg, started *configs.Config) []string {
	var out []string
	for _, f := range []struct {
		name string
		same bool
	}{
		{"listen", cfg.Listen == started.Listen},
		{"tls", sameYAML(cfg.TLS, started.TLS)},
		{"max_body_bytes", cfg.MaxBodyBytes == started.MaxBodyBytes},
		{"body_read_timeout", cfg.BodyReadTimeout == started.BodyReadTimeout},
		{"max_body_bytes_in_flight", cfg.MaxBodyBytesInFlight == started.MaxBodyBytesInFlight},
		{"metrics_token_env", cfg.MetricsTokenEnv == started.MetricsTokenEnv},
		{"upstream", sameYAML(cfg.Upstream, started.Upstream)},
		{"scrape", sameYAML(cfg.Scrape, started.Scrape)},
		{"session_header", cfg.SessionHeader == started.SessionHeader},
		{"stored_responses_ttl", cfg.StoredResponsesTTL == started.StoredResponsesTTL},
		{"cors", sameYAML(cfg.CORS, started.CORS)},
		{"admin", sameYAML(cfg.Admin, started.Admin)},
		{"log", sameYAML(cfg.Log, started.Log)},
		{"limits", sameYAML(cfg.Limits, started.Limits)},
		{"batch", sameYAML(cfg.Batch, started.Batch)},
	} {
		if !f.same {
			out = append(out, f.name)
		}
	}
	return out
}

// sameYAML reports whether a and b read the same as YAML: a config that
// went through the admin API's edit (marshalled and parsed again) differs
// from the file's in Go (an empty list for a missing one, say), not in
// what it says.
func sameYAML(a, b any) bool {
	x, errA := yaml.Marshal(a)
	y, errB := yaml.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(x, y)
}
