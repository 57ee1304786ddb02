package admin

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Source is the live state of this router replica that the status page
// shows; cmd/sluice's runtime implements it.
type Source interface {
	Backends() []Backend
	// Tenants lists the configured tenants with their use; nil when the
	// router is open (no tenants).
	Tenants() []TenantUse
	// Queues lists each admission gate's classes, by model.
	Queues() []QueueClass
}

// TenantUse is one tenant's use against its tier's limits. The counts are
// what this replica saw; the Store fields are the limit store's answer at
// the tenant's last request, store-wide when the store is shared (Redis).
type TenantUse struct {
	Name   string       `json:"name"`
	Tier   string       `json:"tier"`
	Limits TenantLimits `json:"limits"`
	// InFlight is the tenant's requests this replica is serving.
	InFlight int64 `json:"in_flight"`
	// The last 60 seconds: requests admitted by the limits, tokens used
	// by the requests that ended, requests the limits refused.
	Requests     int64 `json:"requests_last_minute"`
	InputTokens  int64 `json:"input_tokens_last_minute"`
	OutputTokens int64 `json:"output_tokens_last_minute"`
	Denied       int64 `json:"denied_last_minute"`
	// TokensToday is input plus output tokens since 00:00 UTC.
	TokensToday int64 `json:"tokens_today"`
	// Totals since start, for rates.
	RequestsTotal int64 `json:"requests_total"`
	TokensTotal   int64 `json:"tokens_total"`
	// Store is the limit store's last answer; nil before the first.
	Store *StoreWindow `json:"store"`
}

// TenantLimits are a tenant's effective limits; 0 means not limited.
type TenantLimits struct {
	RequestsPerMinute     int64 `json:"requests_per_minute"`
	InputTokensPerMinute  int64 `json:"input_tokens_per_minute"`
	OutputTokensPerMinute int64 `json:"output_tokens_per_minute"`
	Concurrency           int64 `json:"concurrency"`
	TokensPerDay          int64 `json:"tokens_per_day"`
}

// StoreWindow is the limit store's answer at a tenant's last request: how
// much of each per-minute window was left right after it.
type StoreWindow struct {
	At                time.Time `json:"at"`
	RequestsLimit     int64     `json:"requests_limit"`
	RequestsRemaining int64     `json:"requests_remaining"`
	TokensLimit       int64     `json:"tokens_limit"`
	TokensRemaining   int64     `json:"tokens_remaining"`
}

// QueueClass is one service class of one model's admission queue. The
// totals count from when the gate was built (a reload builds a new one).
type QueueClass struct {
	Model         string  `json:"model"`
	Class         string  `json:"class"`
	Waiting       int     `json:"waiting"`
	AdmittedTotal uint64  `json:"admitted_total"`
	ShedTotal     uint64  `json:"shed_total"`
	WaitedSeconds float64 `json:"waited_seconds_total"`
	// HeldBehindTotal counts the looks for room at which a request of the
	// class was held back for one that goes first on another replica.
	HeldBehindTotal uint64 `json:"held_behind_total"`
	// DetouredTotal counts the requests of the class set aside to wait
	// for a quick backend (admission.max_detour_below_share or
	// max_detour_better_class).
	DetouredTotal uint64 `json:"detoured_total"`
	// HeldAboveShareTotal counts the looks for room at which a request of
	// the class was held by admission.max_pending_prefill_above_share or
	// max_pending_prefill_worse_class while other requests went.
	HeldAboveShareTotal uint64 `json:"held_above_share_total"`
}

// Status is the status page's data: the live state, recent rates, and
// the history the Monitor kept.
type Status struct {
	Now             time.Time       `json:"now"`
	IntervalSeconds float64         `json:"interval_s"`
	HistorySeconds  float64         `json:"history_s"`
	Backends        []BackendStatus `json:"backends"`
	// Tenants is nil when the router is open.
	Tenants []TenantUse   `json:"tenants"`
	Queues  []QueueStatus `json:"queues"`
	History History       `json:"history"`
}

// BackendStatus is a Backend with the attempts this replica sent it per
// second over the last sample interval (nil before two samples).
type BackendStatus struct {
	Backend
	RequestsPerSec *float64 `json:"requests_per_sec"`
}

// QueueStatus is a QueueClass with its last minute, as the samples saw it.
type QueueStatus struct {
	QueueClass
	AdmittedLastMinute uint64 `json:"admitted_last_minute"`
	ShedLastMinute     uint64 `json:"shed_last_minute"`
	// MeanWaitMillis is the mean queue wait of the requests admitted in
	// the last minute; nil when none was.
	MeanWaitMillis *float64 `json:"mean_wait_ms"`
}

// History is the sampled series, oldest first: T holds each sample's Unix
// time in milliseconds and every series one value per sample.
type History struct {
	T      []int64 `json:"t"`
	Charts []Chart `json:"charts"`
}

// Chart is one chart's series.
type Chart struct {
	ID     string   `json:"id"`
	Title  string   `json:"title"`
	Unit   string   `json:"unit"`
	Series []Series `json:"series"`
}

// Series is one line of a chart.
type Series struct {
	Name   string  `json:"name"`
	Values []Value `json:"values"`
}

// Value is a sampled value; NaN (no value: not yet there, or a counter
// reset) encodes as null.
type Value float64

// MarshalJSON writes v with four significant digits, or null.
func (v Value) MarshalJSON() ([]byte, error) {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', 4, 64), nil
}

// MonitorOptions configures a Monitor. Zero fields mean the documented
// defaults.
type MonitorOptions struct {
	// Interval is the time between samples. Default 2s.
	Interval time.Duration
	// Keep is how much history is kept. Default 10m.
	Keep time.Duration
	// MaxSeries caps each chart's lines, keeping those with the highest
	// peaks. Default 12.
	MaxSeries int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Monitor samples a Source at a fixed interval and keeps a bounded ring of
// samples, so that a status page opened now shows the last minutes. Run
// does the sampling; Status is safe to call concurrently with it.
type Monitor struct {
	src Source
	o   MonitorOptions

	mu   sync.Mutex
	ring []sample // len <= cap, oldest at head once full
	head int
}

// sample is one reading of the Source, kept raw: rates come from
// consecutive samples.
type sample struct {
	at       time.Time
	backends map[string]backendSample // by URL
	tenants  map[string]tenantSample
	queues   map[string]queueSample // by model + "\x00" + class
}

type backendSample struct {
	requests     uint64
	inFlight     int64
	tokensPerSec float64
	kv           float64 // NaN when unknown
}

type tenantSample struct{ requests, tokens int64 }

type queueSample struct {
	waiting          int
	admitted, shed   uint64
	waitedSeconds    float64
	model, className string
}

// NewMonitor returns a Monitor of src.
func NewMonitor(src Source, o MonitorOptions) (*Monitor, error) {
	if src == nil {
		return nil, errors.New("admin: a Monitor needs a Source")
	}
	if o.Interval < 0 || o.Keep < 0 || o.MaxSeries < 0 {
		return nil, errors.New("admin: Interval, Keep and MaxSeries must not be negative")
	}
	if o.Interval == 0 {
		o.Interval = 2 * time.Second
	}
	if o.Keep == 0 {
		o.Keep = 10 * time.Minute
	}
	if o.MaxSeries == 0 {
		o.MaxSeries = 12
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	n := max(int(o.Keep/o.Interval), 2)
	return &Monitor{src: src, o: o, ring: make([]sample, 0, n)}, nil
}

// Run samples now and then every Interval until ctx is done; it returns
// nil then.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.o.Interval)
	defer t.Stop()
	for {
		m.Sample()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sample reads the Source once and adds the reading to the history.
func (m *Monitor) Sample() {
	s := m.read(m.src.Backends(), m.src.Tenants(), m.src.Queues())
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.ring) < cap(m.ring) {
		m.ring = append(m.ring, s)
		return
	}
	m.ring[m.head] = s
	m.head = (m.head + 1) % len(m.ring)
}

func (m *Monitor) read(bs []Backend, ts []TenantUse, qs []QueueClass) sample {
	s := sample{at: m.o.Now(), backends: make(map[string]backendSample, len(bs)),
		tenants: make(map[string]tenantSample, len(ts)), queues: make(map[string]queueSample, len(qs))}
	for _, b := range bs {
		kv := math.NaN()
		if b.KVUsage != nil {
			kv = *b.KVUsage
		}
		s.backends[b.URL] = backendSample{requests: b.Requests, inFlight: b.InFlight, tokensPerSec: b.TokensPerSec, kv: kv}
	}
	for _, t := range ts {
		s.tenants[t.Name] = tenantSample{requests: t.RequestsTotal, tokens: t.TokensTotal}
	}
	for _, q := range qs {
		s.queues[q.Model+"\x00"+q.Class] = queueSample{waiting: q.Waiting, admitted: q.AdmittedTotal, shed: q.ShedTotal,
			waitedSeconds: q.WaitedSeconds, model: q.Model, className: q.Class}
	}
	return s
}

// history returns the samples oldest first.
func (m *Monitor) history() []sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]sample, 0, len(m.ring))
	out = append(out, m.ring[m.head:]...)
	return append(out, m.ring[:m.head]...)
}

// Status reads the Source now and returns it with the recent rates and
// the history.
func (m *Monitor) Status() Status {
	bs, ts, qs := m.src.Backends(), m.src.Tenants(), m.src.Queues()
	now := m.read(bs, ts, qs)
	hist := m.history()
	st := Status{Now: now.at, IntervalSeconds: m.o.Interval.Seconds(), HistorySeconds: m.o.Keep.Seconds(), Tenants: ts,
		Backends: make([]BackendStatus, 0, len(bs)), Queues: make([]QueueStatus, 0, len(qs))}
	var last, prev *sample
	if n := len(hist); n >= 2 {
		last, prev = &hist[n-1], &hist[n-2]
	}
	for _, b := range bs {
		v := BackendStatus{Backend: b}
		if last != nil {
			if r := rate(last.backends[b.URL].requests, prev.backends[b.URL].requests, last.at.Sub(prev.at)); !math.IsNaN(r) {
				v.RequestsPerSec = &r
			}
		}
		st.Backends = append(st.Backends, v)
	}
	// The last minute: now against the oldest sample within it.
	var ago *sample
	for i := range hist {
		if now.at.Sub(hist[i].at) <= time.Minute {
			ago = &hist[i]
			break
		}
	}
	for _, q := range qs {
		v := QueueStatus{QueueClass: q}
		if ago != nil {
			was, ok := ago.queues[q.Model+"\x00"+q.Class]
			if !ok || q.AdmittedTotal < was.admitted || q.ShedTotal < was.shed { // new gate: count from zero
				was = queueSample{}
			}
			v.AdmittedLastMinute, v.ShedLastMinute = q.AdmittedTotal-was.admitted, q.ShedTotal-was.shed
			if v.AdmittedLastMinute > 0 {
				ms := (q.WaitedSeconds - was.waitedSeconds) * 1000 / float64(v.AdmittedLastMinute)
				v.MeanWaitMillis = &ms
			}
		}
		st.Queues = append(st.Queues, v)
	}
	st.History = m.charts(hist)
	return st
}

// rate is the per-second increase from was to is over d; NaN when the
// counter went back (a rebuilt endpoint or gate) or d is not positive.
func rate[T int64 | uint64](is, was T, d time.Duration) float64 {
	if is < was || d <= 0 {
		return math.NaN()
	}
	return float64(is-was) / d.Seconds()
}

// charts turns the samples into the page's series.
func (m *Monitor) charts(hist []sample) History {
	h := History{T: make([]int64, len(hist))}
	for i, s := range hist {
		h.T[i] = s.at.UnixMilli()
	}
	type def struct {
		id, title, unit string
		names           func(s *sample) []string
		value           func(i int, name string) float64
	}
	backendNames := func(s *sample) []string { return keys(s.backends) }
	tenantNames := func(s *sample) []string { return keys(s.tenants) }
	queueNames := func(s *sample) []string { return keys(s.queues) }
	dt := func(i int) time.Duration {
		if i == 0 {
			return 0
		}
		return hist[i].at.Sub(hist[i-1].at)
	}
	backend := func(i int, url string) (backendSample, bool) {
		b, ok := hist[i].backends[url]
		return b, ok
	}
	defs := []def{
		{"rps", "Attempts/s per backend", "req/s", backendNames, func(i int, n string) float64 {
			b, ok := backend(i, n)
			a, okPrev := backendSample{}, false
			if i > 0 {
				a, okPrev = hist[i-1].backends[n]
			}
			if !ok || !okPrev {
				return math.NaN()
			}
			return rate(b.requests, a.requests, dt(i))
		}},
		{"tps", "Decode tokens/s per stream, by backend", "tok/s", backendNames, func(i int, n string) float64 {
			if b, ok := backend(i, n); ok {
				return b.tokensPerSec
			}
			return math.NaN()
		}},
		{"inflight", "In flight per backend (this replica)", "", backendNames, func(i int, n string) float64 {
			if b, ok := backend(i, n); ok {
				return float64(b.inFlight)
			}
			return math.NaN()
		}},
		{"kv", "KV-cache use per backend (scraped)", "%", backendNames, func(i int, n string) float64 {
			if b, ok := backend(i, n); ok {
				return b.kv * 100
			}
			return math.NaN()
		}},
		{"queue", "Admission queue length, by model · class", "", queueNames, func(i int, n string) float64 {
			if q, ok := hist[i].queues[n]; ok {
				return float64(q.waiting)
			}
			return math.NaN()
		}},
		{"tenant_tps", "Tokens/s per tenant (input + output, this replica)", "tok/s", tenantNames, func(i int, n string) float64 {
			t, ok := hist[i].tenants[n]
			if !ok || i == 0 {
				return math.NaN()
			}
			p, ok := hist[i-1].tenants[n]
			if !ok {
				return math.NaN()
			}
			return rate(t.tokens, p.tokens, dt(i))
		}},
	}
	for _, d := range defs {
		seen := map[string]bool{}
		var names []string
		for i := range hist {
			for _, n := range d.names(&hist[i]) {
				if !seen[n] {
					seen[n] = true
					names = append(names, n)
				}
			}
		}
		slices.Sort(names)
		c := Chart{ID: d.id, Title: d.title, Unit: d.unit, Series: make([]Series, 0, len(names))}
		peaks := map[string]float64{}
		for _, n := range names {
			s := Series{Name: seriesName(n), Values: make([]Value, len(hist))}
			for i := range hist {
				v := d.value(i, n)
				s.Values[i] = Value(v)
				if !math.IsNaN(v) && v > peaks[s.Name] {
					peaks[s.Name] = v
				}
			}
			c.Series = append(c.Series, s)
		}
		if len(c.Series) > m.o.MaxSeries {
			slices.SortStableFunc(c.Series, func(a, b Series) int { return cmp.Compare(peaks[b.Name], peaks[a.Name]) })
			c.Series = c.Series[:m.o.MaxSeries]
			slices.SortFunc(c.Series, func(a, b Series) int { return strings.Compare(a.Name, b.Name) })
		}
		h.Charts = append(h.Charts, c)
	}
	return h
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// seriesName shows a queue's key as "model · class".
func seriesName(key string) string { return strings.Replace(key, "\x00", " · ", 1) }
