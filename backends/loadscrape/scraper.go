package loadscrape

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-llm/sluice/backends"
)

// Defaults for zero Options fields.
const (
	DefaultInterval    = 100 * time.Millisecond
	DefaultPath        = "/metrics"
	DefaultConcurrency = 16
	// maxBody caps what one scrape reads; an engine's /metrics is tens of KiB.
	maxBody = 4 << 20
	// maxKeptPage is the largest page buffer a target keeps for its next
	// scrape.
	maxKeptPage = 256 << 10
)

// Options configures a Scraper. Zero fields take the documented defaults.
type Options struct {
	// Interval is the time between the starts of two scrape rounds.
	// Default DefaultInterval (100ms).
	Interval time.Duration
	// Timeout bounds one endpoint's scrape. Default 80% of Interval; it
	// must be below Interval.
	Timeout time.Duration
	// Path is appended to each endpoint's base URL. Default "/metrics".
	Path string
	// Concurrency caps the scrapes in flight at once. Default 16.
	Concurrency int
	// TLS verifies https:// backends when Client is nil. Default nil: Go's
	// (the system's roots).
	TLS *tls.Config
	// Client performs the requests. Default: a client with its own
	// transport (keep-alive, a few idle connections per host), closed when
	// Run returns.
	Client *http.Client
	// Logger reports an endpoint's scrapes starting and stopping to fail
	// (once per transition). Default slog.Default().
	Logger *slog.Logger
	// Registerer, if set, receives sluice_scrape_duration_seconds and
	// sluice_scrape_errors_total{backend}.
	Registerer prometheus.Registerer
	// Now is the clock stamped on each Load. Default time.Now.
	Now func() time.Time
	// HungAfter holds out of routing an endpoint whose scrapes have
	// timed out for this long while no answer from it began
	// (backends.Endpoint.AnsweredSince): it takes connections and
	// answers nothing, as a stopped or wedged process does. It stays out
	// until a scrape reaches it. Default DefaultHungAfter(Interval);
	// negative turns it off.
	HungAfter time.Duration
}

// DefaultHungAfter is Options.HungAfter's default for a scrape interval:
// three intervals, and at least 2s, so that a busy engine's slow scrape or
// two does not take it out.
func DefaultHungAfter(interval time.Duration) time.Duration { return max(3*interval, 2*time.Second) }

// Scraper polls the endpoints given to SetEndpoints. Create it with New and
// run it with Run; SetEndpoints may be called from any goroutine.
type Scraper struct {
	interval    time.Duration
	timeout     time.Duration
	path        string
	concurrency int
	client      *http.Client
	ownClient   *http.Transport // closed by Run when the client is ours
	log         *slog.Logger
	now         func() time.Time
	hungAfter   time.Duration // < 0: off

	endpoints atomic.Pointer[[]*backends.Endpoint]
	targets   atomic.Pointer[[]*target] // Run's current list, for Dialect
	started   atomic.Bool

	duration prometheus.Histogram
	errors   *prometheus.CounterVec
}

// New validates o and returns a Scraper with no endpoints.
func New(o Options) (*Scraper, error) {
	if o.Interval < 0 || o.Timeout < 0 || o.Concurrency < 0 {
		return nil, errors.New("loadscrape: Interval, Timeout and Concurrency must not be negative")
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Timeout == 0 {
		o.Timeout = o.Interval * 4 / 5
	}
	if o.Timeout >= o.Interval {
		return nil, fmt.Errorf("loadscrape: Timeout %v must be below Interval %v", o.Timeout, o.Interval)
	}
	if o.Path == "" {
		o.Path = DefaultPath
	}
	if o.Path[0] != '/' {
		return nil, fmt.Errorf("loadscrape: Path %q must start with /", o.Path)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HungAfter == 0 {
		o.HungAfter = DefaultHungAfter(o.Interval)
	}
	s := &Scraper{
		hungAfter:   o.HungAfter,
		interval:    o.Interval,
		timeout:     o.Timeout,
		path:        o.Path,
		concurrency: o.Concurrency,
		client:      o.Client,
		log:         o.Logger,
		now:         o.Now,
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_scrape_duration_seconds",
			Help:    "Time to read and parse one backend's metrics, successful or not.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scrape_errors_total",
			Help: "Failed scrapes of a backend's metrics (connection, timeout, status, unparsable, no known metric), by backend.",
		}, []string{"backend"}),
	}
	if s.client == nil {
		// Uncompressed: gzip costs both ends CPU on every scrape (the
		// backend's serving process among them) to save a few KB.
		s.ownClient = &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second, DisableCompression: true, TLSClientConfig: o.TLS}
		s.client = &http.Client{Transport: s.ownClient}
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{s.duration, s.errors} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("loadscrape: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// SetEndpoints replaces the set of endpoints to scrape from the next round
// on. The slice is copied. Duplicates are scraped once.
func (s *Scraper) SetEndpoints(eps []*backends.Endpoint) {
	seen := make(map[*backends.Endpoint]bool, len(eps))
	own := make([]*backends.Endpoint, 0, len(eps))
	for _, e := range eps {
		if e != nil && !seen[e] {
			seen[e] = true
			own = append(own, e)
		}
	}
	s.endpoints.Store(&own)
}

// target is Run's state for one endpoint. Only the goroutine scraping it
// in the current round touches it, except dialect, which Dialect reads.
type target struct {
	ep      *backends.Endpoint
	url     string
	dialect atomic.Int32 // index into dialects, -1 until detected
	failing bool
	// timingOut is when this endpoint's scrapes began to time out, one
	// after the other; zero while they do not.
	timingOut time.Time
	hung      bool // held out as hung (logged once)
	refused   bool // held out as refusing connections (logged once)

	// Kept from one scrape to the next, so that a scrape reuses its
	// buffers instead of allocating a page's worth every interval.
	page   bytes.Buffer
	kept   []byte
	in     bytes.Reader
	parser expfmt.TextParser // not safe for concurrent use: one scrape at a time per target
}

// Dialect is the metrics dialect detected for e, or "" when e is not
// scraped or no scrape of it has succeeded yet.
func (s *Scraper) Dialect(e *backends.Endpoint) Dialect {
	ts := s.targets.Load()
	if ts == nil {
		return ""
	}
	for _, t := range *ts {
		if t.ep == e {
			if d := t.dialect.Load(); d >= 0 {
				return dialects[d].name
			}
		}
	}
	return ""
}

// ErrAlreadyRunning is returned by every call to Run after the first: a
// Scraper serves one lifetime.
var ErrAlreadyRunning = errors.New("loadscrape: Run already called")

// Run scrapes every endpoint once per interval until ctx ends, then waits
// for the scrapes in flight and returns nil.
func (s *Scraper) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	if s.ownClient != nil {
		defer s.ownClient.CloseIdleConnections()
	}
	var (
		seen    *[]*backends.Endpoint
		targets []*target
		byEP    = map[*backends.Endpoint]*target{}
	)
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		if cur := s.endpoints.Load(); cur != seen {
			seen = cur
			targets, byEP = s.retarget(cur, byEP)
		}
		s.round(ctx, targets)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// retarget builds the target list for eps, keeping the state (detected
// dialect, failing) of endpoints already known, and drops the error series
// of endpoints no longer scraped.
func (s *Scraper) retarget(eps *[]*backends.Endpoint, old map[*backends.Endpoint]*target) ([]*target, map[*backends.Endpoint]*target) {
	var list []*backends.Endpoint
	if eps != nil {
		list = *eps
	}
	next := make(map[*backends.Endpoint]*target, len(list))
	targets := make([]*target, 0, len(list))
	for _, e := range list {
		t := old[e]
		if t == nil {
			u := *e.URL()
			u.Path += s.path
			u.RawPath = ""
			t = &target{ep: e, url: u.String(), parser: expfmt.NewTextParser(model.UTF8Validation)}
			t.dialect.Store(-1)
		}
		next[e] = t
		targets = append(targets, t)
	}
	for e := range old {
		if next[e] == nil {
			s.errors.DeleteLabelValues(e.Address())
		}
	}
	s.targets.Store(&targets)
	return targets, next
}

// round scrapes every target, at most s.concurrency at once, and returns
// when all are done.
func (s *Scraper) round(ctx context.Context, targets []*target) {
	sem := make(chan struct{}, s.concurrency)
	var wg sync.WaitGroup
	for _, t := range targets {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			s.scrapeOne(ctx, t)
		})
	}
	wg.Wait()
}

// scrapeOne reads one target and publishes its load, or marks it stale.
func (s *Scraper) scrapeOne(ctx context.Context, t *target) {
	start := time.Now()
	l, err := s.fetch(ctx, t)
	s.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down: not the backend's fault
		}
		t.ep.MarkStale()
		s.errors.WithLabelValues(t.ep.Address()).Inc()
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			// Nothing listens there: an active health check says it is
			// down, so it leaves routing (and /readyz counts it out) until
			// a scrape reaches it again, before a request has to fail on it.
			t.ep.HoldOut(s.now(), 2*s.interval+time.Second)
			if !t.refused && t.failing {
				// Its scrapes were failing already (no engine metrics, say):
				// the line below is not written again, and a backend that
				// went down left no trace in the log.
				s.log.Warn("backend refuses connections: held out of routing until a scrape reaches it",
					"backend", t.ep.Address(), "err", err)
			}
			t.refused = true
		} else {
			t.refused = false
		}
		s.checkHung(t, err)
		if !t.failing {
			t.failing = true
			s.log.Warn("scraping backend load failed; its load is unknown until a scrape succeeds",
				"backend", t.ep.Address(), "err", err)
		}
		return
	}
	t.ep.StoreLoad(l)
	t.timingOut, t.refused = time.Time{}, false
	if t.hung {
		t.hung = false
		s.log.Info("backend answers again; back in routing", "backend", t.ep.Address())
	}
	t.ep.MarkHealthy() // it answers: back in routing if a failure held it out
	if t.failing {
		t.failing = false
		s.log.Info("scraping backend load works again", "backend", t.ep.Address())
	}
}

// checkHung holds t's endpoint out of routing once its scrapes have timed
// out for hungAfter with no answer from it begun meanwhile. A connection
// refused is a dial error, handled before; a hung process accepts the
// connection (the kernel does) and answers nothing, and requests sent there
// waited for their first-byte timeout (60s) while it stayed in routing.
func (s *Scraper) checkHung(t *target, err error) {
	if !isTimeout(err) {
		t.timingOut = time.Time{} // something answered, if badly
		return
	}
	now := s.now()
	if t.timingOut.IsZero() {
		t.timingOut = now
	}
	if s.hungAfter < 0 || now.Sub(t.timingOut) < s.hungAfter || t.ep.AnsweredSince(t.timingOut) {
		return
	}
	t.ep.HoldOut(now, 2*s.interval+time.Second)
	if !t.hung {
		t.hung = true
		s.log.Warn("backend answers nothing: held out of routing until a scrape reaches it",
			"backend", t.ep.Address(), "scrapes_timing_out_for", now.Sub(t.timingOut).Round(time.Millisecond).String())
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// scrapeError is a failed scrape of url.
type scrapeError struct {
	url string
	err error
}

func (e *scrapeError) Error() string { return "scrape " + e.url + ": " + e.err.Error() }
func (e *scrapeError) Unwrap() error { return e.err }

// ErrNoKnownMetrics is a scrape that parsed but had none of the names of a
// known dialect.
var ErrNoKnownMetrics = errors.New("no vLLM, SGLang or TGI load metrics found")

func (s *Scraper) fetch(ctx context.Context, t *target) (*backends.Load, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	fail := func(err error) (*backends.Load, error) { return nil, &scrapeError{url: t.url, err: err} }
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	res, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fail(err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxBody))
		res.Body.Close()
	}()
	if res.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("status %d", res.StatusCode))
	}
	t.page.Reset()
	if _, err := t.page.ReadFrom(io.LimitReader(res.Body, maxBody)); err != nil {
		return fail(err)
	}
	at := s.now()
	t.kept = keepKnown(t.kept[:0], t.page.Bytes())
	if t.page.Cap() > maxKeptPage {
		t.page = bytes.Buffer{} // a rare huge page is not held between scrapes
	}
	t.in.Reset(t.kept)
	fams, err := t.parser.TextToMetricFamilies(&t.in)
	if err != nil {
		return fail(fmt.Errorf("parse: %w", err))
	}
	prev := int(t.dialect.Load())
	d := detect(fams, prev)
	if d < 0 {
		return fail(ErrNoKnownMetrics)
	}
	if d != prev {
		t.dialect.Store(int32(d))
		s.log.Info("backend metrics dialect detected", "backend", t.ep.Address(), "dialect", dialects[d].name)
	}
	running, waiting, kv := dialects[d].load(fams)
	return &backends.Load{At: at, Waiting: waiting, Running: running, KVUsage: kv}, nil
}

// clampCount turns a gauge into a request count: NaN and negatives are 0.
func clampCount(v float64) int {
	if math.IsNaN(v) || v < 0 {
		return 0
	}
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(v)
}

// clampFraction keeps a KV-cache fraction in 0..1 (NaN reads as unknown, -1).
func clampFraction(v float64) float64 {
	switch {
	case math.IsNaN(v):
		return -1
	case v < 0:
		return 0
	case v > 1:
		return 1
	}
	return v
}
