package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SettleItem is one settlement for a Store that settles several in one
// round trip.
type SettleItem struct {
	Key        string
	Limits     Limits
	Settlement Settlement
	Now        time.Time
}

// BatchSettler is a Store that can settle several reservations in one
// round trip; the Limiter uses it when the Store has it.
type BatchSettler interface {
	SettleBatch(ctx context.Context, items []SettleItem) error
}

// InProcess is implemented by a Store whose calls never wait on I/O, only
// on a mutex (quota/memstore). The Limiter calls such a Store under the
// caller's context as it is, without its Timeout: a call cannot overrun
// it, and the timer and context it takes cost several times the call
// (issue 12).
type InProcess interface {
	InProcess()
}

// Pinger is a Store that can say whether it answers without a tenant's
// call (quota/redisstore). The Limiter's Run pings it at start, every
// pingEvery while its calls succeed and every probeEvery while they fail,
// so that Healthy (and /readyz, sluice_quota_store_up) follows the store,
// not the traffic: an idle replica with limits failing closed would
// otherwise stay unready after the store came back, since an unready
// replica gets no requests to find out.
type Pinger interface {
	Ping(ctx context.Context) error
}

// RejectError is a reservation the limits refused: the router answers it
// with 429 and Retry-After.
type RejectError struct {
	// Dimension is the limit that refused.
	Dimension Dimension
	// RetryAfter is how long until the same request could pass.
	RetryAfter time.Duration
	// TooLarge is set when the request alone exceeds the dimension's
	// burst, so that it can never pass; Limit and Requested then say by
	// how much.
	TooLarge  bool
	Limit     int64
	Requested int64
	// Decision is the Store's answer, for the rate-limit headers.
	Decision Decision
}

func (e *RejectError) Error() string {
	if e.TooLarge {
		return fmt.Sprintf("Request too large for the %s limit: Limit %d, Requested %d. Lower max_tokens or the prompt's size.",
			describe(e.Dimension), e.Limit, e.Requested)
	}
	if e.Dimension == DimTokensPerDay {
		return "You exceeded your daily token quota. It resets at 00:00 UTC."
	}
	return fmt.Sprintf("Rate limit reached for %s. Please try again in %s.", describe(e.Dimension), roundUp(e.RetryAfter))
}

func describe(d Dimension) string {
	switch d {
	case DimRequests:
		return "requests per minute"
	case DimInputTokens:
		return "input tokens per minute"
	case DimOutputTokens:
		return "output tokens per minute"
	case DimConcurrency:
		return "concurrent requests"
	case DimTokensPerDay:
		return "tokens per day"
	}
	return string(d)
}

// roundUp is d rounded up to the millisecond, as Retry-After-Ms says it.
func roundUp(d time.Duration) time.Duration {
	return max((d+time.Millisecond-1)/time.Millisecond, 1) * time.Millisecond
}

// DefaultLeaseTTL is LimiterOptions.LeaseTTL's default.
const DefaultLeaseTTL = 30 * time.Second

// ErrUnavailable is Reserve's answer when the Store failed and the limits
// fail closed: the router answers 503.
var ErrUnavailable = errors.New("the rate-limit store is unavailable")

// LimiterOptions configures a Limiter. Zero fields mean the documented
// defaults.
type LimiterOptions struct {
	// Store holds the counters. Required.
	Store Store
	// FailClosed refuses requests (ErrUnavailable) while the Store fails;
	// the default, fail open, lets them through uncharged.
	FailClosed bool
	// Timeout bounds each Store call. Default 50ms.
	Timeout time.Duration
	// LeaseTTL is how long an unsettled reservation keeps its concurrency
	// slot past its last renewal: Run renews the leases of the
	// reservations not yet settled every LeaseTTL/3, so a replica that
	// died frees its slots within LeaseTTL while a live one keeps them for
	// as long as its requests run. Default 30s.
	LeaseTTL time.Duration
	// Async settles in the background, in batches, from Run, so that a
	// remote Store's round trip is off the request's path. Run must then
	// be running; after it returns, settlements are made inline.
	Async bool
	// Logger receives store failures and recoveries. Default slog.Default().
	Logger *slog.Logger
	// Metrics is where the limiter registers its collectors. Nil means
	// none are registered.
	Metrics prometheus.Registerer
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Limiter is the limit stage of the request pipeline: Reserve before
// routing, Settle once the answer ended. It is safe for concurrent use.
type Limiter struct {
	o        LimiterOptions
	batch    BatchSettler
	pinger   Pinger
	local    bool // the Store is InProcess
	prefix   string
	seq      atomic.Uint64
	degraded atomic.Bool
	// probeAt is when, while degraded, the next Reserve may try the Store
	// (Unix nanoseconds); the others until then fail at once (probeEvery).
	probeAt atomic.Int64
	queue   chan SettleItem
	running atomic.Bool
	mu      sync.Mutex // guards stopped
	stopped bool
	use     sync.Map // key -> *keyUse, for Usage
	// held holds the reservations with a concurrency lease not yet
	// settled (*Reservation -> struct{}), which Run renews.
	held sync.Map
	// orphans are the leases of Reserves that failed (a timeout, say)
	// after the store may have run them: a Redis that stalls runs the
	// queued script when it resumes, and the lease held the tenant's
	// concurrency slot for lease_ttl with no request behind it. Run
	// releases them once the store answers again. Bounded by maxOrphans.
	omu     sync.Mutex
	orphans []SettleItem

	decisions   *prometheus.CounterVec // result, dimension
	storeErrors *prometheus.CounterVec // op
	storeUp     prometheus.Gauge
	latency     *prometheus.HistogramVec // op

	// Resolved once: the children every request touches.
	allowed                               prometheus.Counter
	reserveLatency, settleTime, renewTime prometheus.Observer
}

// NewLimiter validates o and returns a Limiter.
func NewLimiter(o LimiterOptions) (*Limiter, error) {
	if o.Store == nil {
		return nil, errors.New("quota: nil Store")
	}
	if o.Timeout < 0 || o.LeaseTTL < 0 {
		return nil, errors.New("quota: Timeout and LeaseTTL must not be negative")
	}
	if o.Timeout == 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("quota: lease prefix: %w", err)
	}
	l := &Limiter{o: o, prefix: hex.EncodeToString(b[:]) + "-", queue: make(chan SettleItem, 4096)}
	l.batch, _ = o.Store.(BatchSettler)
	l.pinger, _ = o.Store.(Pinger)
	_, l.local = o.Store.(InProcess)
	l.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_quota_decisions_total",
		Help: "Reservations by result (allowed, denied, failed_open, failed_closed) and, when denied, the dimension that refused.",
	}, []string{"result", "dimension"})
	l.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_quota_store_errors_total",
		Help: "Limit store calls that failed, by operation (reserve, settle, renew, ping).",
	}, []string{"op"})
	l.storeUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_quota_store_up",
		Help: "1 while the limit store answers, 0 after a failed call until the next success.",
	})
	l.storeUp.Set(1)
	l.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_quota_store_duration_seconds",
		Help:    "Time spent in limit store calls, by operation.",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25},
	}, []string{"op"})
	l.allowed = l.decisions.WithLabelValues("allowed", "")
	l.reserveLatency = l.latency.WithLabelValues("reserve")
	l.settleTime = l.latency.WithLabelValues("settle")
	l.renewTime = l.latency.WithLabelValues("renew")
	if o.Metrics != nil {
		for _, c := range []prometheus.Collector{l.decisions, l.storeErrors, l.storeUp, l.latency} {
			if err := o.Metrics.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

// Reservation is what Reserve charged; pass it to Settle once.
type Reservation struct {
	// Decision is the Store's answer, for the rate-limit headers. It is
	// zero when the Store failed open.
	Decision Decision
	key      string
	lim      Limits
	amt      Amount
	lease    string
	at       time.Time
	held     bool // false: nothing was charged (failed open)
	// unsure: the Reserve's call failed, and the store may have run it
	// all the same (a stalled Redis runs the script when it resumes): the
	// settlement applies only if it did (Settlement.IfReserved).
	unsure bool
}

// Reserve charges amt against key's limits lim. It returns a *RejectError
// when a limit refuses, ErrUnavailable when the Store failed and the
// limits fail closed, and otherwise a Reservation (uncharged when the
// Store failed and the limits fail open).
func (l *Limiter) Reserve(ctx context.Context, key string, lim Limits, amt Amount) (*Reservation, error) {
	now := l.o.Now()
	var buf [32]byte // the prefix (13 bytes) and a base-36 uint64 (at most 13): one allocation, the string
	lease := string(strconv.AppendUint(append(buf[:0], l.prefix...), l.seq.Add(1), 36))
	var d Decision
	var err error
	if !l.local && l.degraded.Load() && !l.probe(now) {
		// The store is down: a call would wait for its timeout (or a
		// refused dial) to learn it again. One call per probeEvery asks.
		l.usageOf(key).reserved(now, !l.o.FailClosed, Decision{}, false)
		return l.unavailable(key, lim, amt, now)
	}
	if l.local {
		d, err = l.o.Store.Reserve(ctx, key, lim, amt, Lease{ID: lease, TTL: l.o.LeaseTTL}, now)
	} else {
		cctx, cancel := context.WithTimeout(ctx, l.o.Timeout)
		d, err = l.o.Store.Reserve(cctx, key, lim, amt, Lease{ID: lease, TTL: l.o.LeaseTTL}, now)
		cancel()
	}
	l.reserveLatency.Observe(l.o.Now().Sub(now).Seconds())
	if err != nil {
		// The store may have run it all the same. A request that does not
		// run has it refunded whole, if it ran, once the store answers (Run
		// probes only a store that can be pinged); one that runs, failing
		// open, settles what it used the same way.
		unsure := l.pinger != nil
		if ctx.Err() != nil {
			if unsure {
				l.orphan(unsureItem(key, lim, amt, Amount{}, lease, now, now))
			}
			return nil, ctx.Err() // the client left: not the store's fault
		}
		l.failed("reserve", err)
		l.probeAt.Store(now.Add(probeEvery).UnixNano())
		l.usageOf(key).reserved(now, !l.o.FailClosed, Decision{}, false)
		r, uerr := l.unavailable(key, lim, amt, now)
		switch {
		case !unsure:
		case r == nil:
			l.orphan(unsureItem(key, lim, amt, Amount{}, lease, now, now))
		default:
			r.lease, r.unsure = lease, true
		}
		return r, uerr
	}
	l.recovered()
	l.usageOf(key).reserved(now, d.Allowed, d, true)
	if !d.Allowed {
		l.decisions.WithLabelValues("denied", string(d.Denied)).Inc()
		re := &RejectError{Dimension: d.Denied, RetryAfter: d.RetryAfter, Decision: d}
		if limit, ask := tooLarge(d.Denied, lim, amt); limit > 0 && d.RetryAfter == 0 {
			re.TooLarge, re.Limit, re.Requested = true, limit, ask
			re.RetryAfter = time.Minute
		}
		return nil, re
	}
	l.allowed.Inc()
	r := &Reservation{Decision: d, key: key, lim: lim, amt: amt, lease: lease, at: now, held: true}
	if lim.Concurrency > 0 {
		l.held.Store(r, struct{}{})
	}
	return r, nil
}

// tooLarge returns the burst and the amount asked when amt alone exceeds
// dimension d's burst, else zeros.
func tooLarge(d Dimension, lim Limits, amt Amount) (int64, int64) {
	var burst, ask int64
	orRate := func(b, rate int64) int64 { // a zero burst is one minute's worth
		if b <= 0 {
			return rate
		}
		return b
	}
	switch d {
	case DimRequests:
		burst, ask = orRate(lim.RequestBurst, lim.RequestsPerMinute), amt.Requests
	case DimInputTokens:
		burst, ask = orRate(lim.InputBurst, lim.InputTokensPerMinute), amt.Input
	case DimOutputTokens:
		burst, ask = orRate(lim.OutputBurst, lim.OutputTokensPerMinute), amt.Output
	case DimTokensPerDay:
		burst, ask = lim.TokensPerDay, amt.Tokens()
	}
	if burst > 0 && ask > burst {
		return burst, ask
	}
	return 0, 0
}

// Settle replaces r's estimate by used: refunds the difference or charges
// the excess, and releases r's concurrency slot. With Async and Run
// running it returns at once; otherwise it calls the Store inline.
func (l *Limiter) Settle(r *Reservation, used Amount) {
	if r == nil {
		return
	}
	now := l.o.Now()
	l.usageOf(r.key).settled(now, used)
	if r.unsure {
		it := unsureItem(r.key, r.lim, r.amt, used, r.lease, r.at, now)
		if !l.degraded.Load() {
			// The store answers again: settle now, so that the slot its
			// lease may hold is free for the tenant's next request (it
			// waited for Run's next probe, and that request got a 429).
			ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
			err := l.o.Store.Settle(ctx, it.Key, it.Limits, it.Settlement, it.Now)
			cancel()
			if err == nil {
				return
			}
			l.failed("settle", err)
		}
		l.orphan(it) // settled by Run once the store answers
		return
	}
	if !r.held {
		return
	}
	if r.lim.Concurrency > 0 {
		l.held.Delete(r)
	}
	it := SettleItem{Key: r.key, Limits: r.lim, Now: now,
		Settlement: Settlement{Reserved: r.amt, Used: used, LeaseID: r.lease, ReservedAt: r.at}}
	if l.o.Async && l.running.Load() {
		l.mu.Lock()
		if !l.stopped {
			select {
			case l.queue <- it:
				l.mu.Unlock()
				return
			default: // full: settle inline rather than lose it
			}
		}
		l.mu.Unlock()
	}
	if l.local {
		// Inline and in-process: no batch to build, no timeout to arm, and
		// the clock read above serves as the call's start.
		err := l.o.Store.Settle(context.Background(), it.Key, it.Limits, it.Settlement, it.Now)
		l.settled(now, err)
		return
	}
	l.settle([]SettleItem{it})
}

// settle sends items to the Store, failing per item when it has no batch
// call.
func (l *Limiter) settle(items []SettleItem) {
	start := l.o.Now()
	ctx := context.Background()
	if !l.local {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.o.Timeout*time.Duration(1+len(items)/16))
		defer cancel()
	}
	var err error
	if l.batch != nil && len(items) > 1 {
		err = l.batch.SettleBatch(ctx, items)
	} else {
		for _, it := range items {
			if e := l.o.Store.Settle(ctx, it.Key, it.Limits, it.Settlement, it.Now); e != nil {
				err = e
			}
		}
	}
	l.settled(start, err)
}

// settled records a settlement call that started at start and ended with
// err.
func (l *Limiter) settled(start time.Time, err error) {
	l.settleTime.Observe(l.o.Now().Sub(start).Seconds())
	if err != nil {
		// The reservation stays charged: the next requests may wait longer
		// than their due, and its concurrency slot ends with its lease.
		l.failed("settle", err)
		return
	}
	l.recovered()
}

// Run renews the leases of unsettled reservations every LeaseTTL/3 and,
// with Async, settles queued reservations in batches, until ctx is done;
// then it settles what is left and returns nil. Without Run a request
// that outlives LeaseTTL stops counting against its concurrency limit.
func (l *Limiter) Run(ctx context.Context) error {
	l.running.Store(true)
	renew := time.NewTicker(l.o.LeaseTTL / 3)
	defer renew.Stop()
	var probe <-chan time.Time
	var lastPing time.Time
	if l.pinger != nil {
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		probe = t.C
		l.ping()
		lastPing = time.Now()
	}
	batch := make([]SettleItem, 0, 64)
	flush := func() {
		if len(batch) > 0 {
			l.settle(batch)
			batch = batch[:0]
		}
	}
	for {
		select {
		case it := <-l.queue:
			batch = append(batch, it)
		drain:
			for len(batch) < cap(batch) {
				select {
				case it := <-l.queue:
					batch = append(batch, it)
				default:
					break drain
				}
			}
			flush()
		case <-renew.C:
			l.renew()
		case now := <-probe:
			if l.degraded.Load() || now.Sub(lastPing) >= pingEvery {
				l.ping()
				lastPing = now
			}
			if !l.degraded.Load() {
				l.releaseOrphans()
			}
		case <-ctx.Done():
			l.mu.Lock()
			l.stopped = true
			l.mu.Unlock()
			l.running.Store(false)
			for {
				select {
				case it := <-l.queue:
					batch = append(batch, it)
					if len(batch) == cap(batch) {
						flush()
					}
				default:
					flush()
					return nil
				}
			}
		}
	}
}

// orphan keeps it, the settlement of a Reserve whose call failed, for Run
// to send once the store answers (see unsureItem). Until
// 2026-12-05 such a Reserve stayed charged whole: a stream of 500 tokens
// cut after 272 kept 500 charged, and one whose client left before it ran
// all of it.
func (l *Limiter) orphan(it SettleItem) {
	l.omu.Lock()
	if len(l.orphans) < maxOrphans {
		l.orphans = append(l.orphans, it)
	}
	l.omu.Unlock()
}

// unsureItem settles, at now, a Reserve at at whose call failed: used
// replaces amt only if the store ran it.
func unsureItem(key string, lim Limits, amt, used Amount, lease string, at, now time.Time) SettleItem {
	return SettleItem{Key: key, Limits: lim, Now: now,
		Settlement: Settlement{Reserved: amt, Used: used, LeaseID: lease, ReservedAt: at, IfReserved: true}}
}

// maxOrphans bounds the leases of failed Reserves kept for release;
// beyond it their TTL frees them.
const maxOrphans = 1024

// releaseOrphans releases the leases of failed Reserves, in one call; on
// failure they are kept for the next try.
func (l *Limiter) releaseOrphans() {
	l.omu.Lock()
	items := l.orphans
	l.orphans = nil
	l.omu.Unlock()
	if len(items) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout*time.Duration(1+len(items)/16))
	defer cancel()
	var err error
	if l.batch != nil {
		err = l.batch.SettleBatch(ctx, items)
	} else {
		for _, it := range items {
			if e := l.o.Store.Settle(ctx, it.Key, it.Limits, it.Settlement, it.Now); e != nil {
				err = e
			}
		}
	}
	if err != nil {
		l.failed("settle", err)
		l.omu.Lock()
		l.orphans = append(items[:min(len(items), maxOrphans-len(l.orphans))], l.orphans...)
		l.omu.Unlock()
	}
}

// pingEvery is how often Run pings a Pinger whose calls succeed.
const pingEvery = time.Second

// ping asks the Store whether it answers and records the answer.
func (l *Limiter) ping() {
	ctx, cancel := context.WithTimeout(context.Background(), l.o.Timeout)
	defer cancel()
	if err := l.pinger.Ping(ctx); err != nil {
		l.failed("ping", err)
		return
	}
	l.recovered()
}

// renew extends the leases of every reservation not yet settled, in one
// Store call, and settles again those settled while it ran.
func (l *Limiter) renew() {
	byKey := map[string]int{}
	var held []Held
	var sent []*Reservation
	l.held.Range(func(k, _ any) bool {
		r := k.(*Reservation)
		i, ok := byKey[r.key]
		if !ok {
			i = len(held)
			byKey[r.key] = i
			held = append(held, Held{Key: r.key})
		}
		held[i].IDs = append(held[i].IDs, r.lease)
		sent = append(sent, r)
		return true
	})
	if len(held) == 0 {
		return
	}
	start := l.o.Now()
	ctx := context.Background()
	if !l.local {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 4*l.o.Timeout)
		defer cancel()
	}
	err := l.o.Store.Renew(ctx, held, l.o.LeaseTTL, start)
	l.renewTime.Observe(l.o.Now().Sub(start).Seconds())
	l.releaseSettled(sent, start)
	if err != nil {
		// The leases end LeaseTTL after their last renewal; the next tick
		// tries again.
		l.failed("renew", err)
		return
	}
	l.recovered()
}

// releaseSettled releases once more the leases of sent, just renewed, that
// were settled meanwhile: a Store may re-create a lease it lacks (Redis
// restarted empty under running requests), and so the renewal may have
// brought one back for LeaseTTL, holding its tenant's slot with no request
// behind it. Settle stops holding a reservation before it calls the Store,
// so one settled after this look reaches the Store after the renewal
// answered; one settled before it is released here, after the renewal
// (with a renewal's error too: the Store may have run it). The release is
// a settlement of zero amounts, which moves no counter.
func (l *Limiter) releaseSettled(sent []*Reservation, now time.Time) {
	var items []SettleItem
	for _, r := range sent {
		if _, ok := l.held.Load(r); !ok {
			items = append(items, SettleItem{Key: r.key, Limits: r.lim, Now: now,
				Settlement: Settlement{LeaseID: r.lease, ReservedAt: r.at}})
		}
	}
	if len(items) > 0 {
		l.settle(items)
	}
}

// probeEvery is how often, while the Store fails, a Reserve tries it;
// the others fail open or closed at once rather than each paying the
// Store's timeout (50 ms a request, before 2026-12-02).
const probeEvery = 250 * time.Millisecond

// probe reports whether this call, at now, is the one that tries the
// failing Store (at most one per probeEvery).
func (l *Limiter) probe(now time.Time) bool {
	at := l.probeAt.Load()
	return now.UnixNano() >= at && l.probeAt.CompareAndSwap(at, now.Add(probeEvery).UnixNano())
}

// unavailable is Reserve's answer while the Store fails: ErrUnavailable
// when the limits fail closed, else an uncharged Reservation.
func (l *Limiter) unavailable(key string, lim Limits, amt Amount, now time.Time) (*Reservation, error) {
	if l.o.FailClosed {
		l.decisions.WithLabelValues("failed_closed", "").Inc()
		return nil, ErrUnavailable
	}
	l.decisions.WithLabelValues("failed_open", "").Inc()
	return &Reservation{key: key, lim: lim, amt: amt, at: now}, nil
}

func (l *Limiter) failed(op string, err error) {
	l.storeErrors.WithLabelValues(op).Inc()
	l.storeUp.Set(0)
	if l.degraded.CompareAndSwap(false, true) {
		mode := "open: requests pass uncharged"
		if l.o.FailClosed {
			mode = "closed: requests are refused with 503"
		}
		l.o.Logger.Warn("limit store failing; limits fail "+mode, "op", op, "err", err)
	}
}

func (l *Limiter) recovered() {
	if l.degraded.CompareAndSwap(true, false) {
		l.storeUp.Set(1)
		l.o.Logger.Info("limit store answering again; limits enforced")
	}
}

// FailsClosed reports whether the limits refuse requests while the Store
// fails.
func (l *Limiter) FailsClosed() bool { return l.o.FailClosed }

// Healthy reports whether the last Store call succeeded.
func (l *Limiter) Healthy() bool { return !l.degraded.Load() }
