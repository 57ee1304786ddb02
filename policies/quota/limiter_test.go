package quota_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/quota/memstore"
)

// flaky is a Store that fails while down is set.
type flaky struct {
	quota.Store
	mu       sync.Mutex
	down     bool
	settles  int
	reserves int
}

var errDown = errors.New("store down")

func (f *flaky) Reserve(ctx context.Context, key string, lim quota.Limits, amt quota.Amount, l quota.Lease, now time.Time) (quota.Decision, error) {
	f.mu.Lock()
	down := f.down
	f.reserves++
	f.mu.Unlock()
	if down {
		return quota.Decision{}, errDown
	}
	return f.Store.Reserve(ctx, key, lim, amt, l, now)
}

func (f *flaky) Settle(ctx context.Context, key string, lim quota.Limits, s quota.Settlement, now time.Time) error {
	f.mu.Lock()
	f.settles++
	f.mu.Unlock()
	return f.Store.Settle(ctx, key, lim, s, now)
}

func (f *flaky) setDown(v bool) { f.mu.Lock(); f.down = v; f.mu.Unlock() }

var limits = quota.Limits{RequestsPerMinute: 60, RequestBurst: 2, OutputTokensPerMinute: 600, OutputBurst: 100}

func TestLimiterRejectsAndSettles(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l, err := quota.NewLimiter(quota.LimiterOptions{Store: memstore.New(), Now: func() time.Time { return now }})
	require.NoError(t, err)
	ctx := context.Background()

	r, err := l.Reserve(ctx, "t", limits, quota.Amount{Requests: 1, Output: 80})
	require.NoError(t, err)
	assert.EqualValues(t, 20, r.Decision.Tokens.Remaining)
	_, err = l.Reserve(ctx, "t", limits, quota.Amount{Requests: 1, Output: 80})
	var re *quota.RejectError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, quota.DimOutputTokens, re.Dimension)
	assert.False(t, re.TooLarge)
	assert.Positive(t, re.RetryAfter)
	assert.Contains(t, re.Error(), "output tokens per minute")

	l.Settle(r, quota.Amount{Requests: 1, Output: 5}) // refunds 75
	r2, err := l.Reserve(ctx, "t", limits, quota.Amount{Requests: 1, Output: 80})
	require.NoError(t, err, "the refund is usable at once")
	l.Settle(r2, quota.Amount{Requests: 1, Output: 80})

	_, err = l.Reserve(ctx, "u", limits, quota.Amount{Requests: 1, Output: 500})
	require.ErrorAs(t, err, &re)
	assert.True(t, re.TooLarge)
	assert.EqualValues(t, 100, re.Limit)
	assert.EqualValues(t, 500, re.Requested)
	assert.Contains(t, re.Error(), "Request too large")
}

func TestLimiterFailsOpenOrClosedAndRecovers(t *testing.T) {
	for _, closed := range []bool{false, true} {
		var logs bytes.Buffer
		st := &flaky{Store: memstore.New()}
		now := time.Unix(1_800_000_000, 0)
		l, err := quota.NewLimiter(quota.LimiterOptions{Store: st, FailClosed: closed,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return now }})
		require.NoError(t, err)
		ctx := context.Background()

		st.setDown(true)
		for range 3 {
			r, err := l.Reserve(ctx, "t", limits, quota.Amount{Requests: 1})
			if closed {
				assert.ErrorIs(t, err, quota.ErrUnavailable)
			} else {
				require.NoError(t, err)
				l.Settle(r, quota.Amount{Requests: 1}) // uncharged: nothing to settle
			}
		}
		assert.False(t, l.Healthy())
		assert.Zero(t, st.settles, "a reservation made while failing open charged nothing and settles nothing")
		assert.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("limit store failing")), "logged once per outage")
		assert.Equal(t, 1, st.reserves, "while it fails, the store is asked once per probe interval, not per request")

		st.setDown(false)
		_, err = l.Reserve(ctx, "t", limits, quota.Amount{Requests: 1})
		if closed {
			assert.ErrorIs(t, err, quota.ErrUnavailable, "not asked again yet")
		}
		now = now.Add(300 * time.Millisecond)
		_, err = l.Reserve(ctx, "t", limits, quota.Amount{Requests: 1})
		require.NoError(t, err)
		assert.Equal(t, 2, st.reserves, "the one call between was not asked")
		assert.True(t, l.Healthy())
		assert.Contains(t, logs.String(), "limit store answering again")
	}
}

func TestLimiterAsyncSettlesEverythingBeforeRunReturns(t *testing.T) {
	st := &flaky{Store: memstore.New()}
	l, err := quota.NewLimiter(quota.LimiterOptions{Store: st, Async: true})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	lim := quota.Limits{Concurrency: 1000}
	var rs []*quota.Reservation
	for range 500 {
		r, err := l.Reserve(context.Background(), "t", lim, quota.Amount{Requests: 1})
		require.NoError(t, err)
		rs = append(rs, r)
	}
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Go(func() { l.Settle(r, quota.Amount{Requests: 1}) })
	}
	wg.Wait()
	cancel()
	require.NoError(t, <-done)
	st.mu.Lock()
	assert.Equal(t, 500, st.settles, "no settlement lost at shutdown")
	st.mu.Unlock()
	// After Run, settlements are made inline.
	r, err := l.Reserve(context.Background(), "t", lim, quota.Amount{Requests: 1})
	require.NoError(t, err)
	l.Settle(r, quota.Amount{Requests: 1})
	st.mu.Lock()
	assert.Equal(t, 501, st.settles)
	st.mu.Unlock()
}

func TestLimiterUsageIsWhatThisReplicaSaw(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l, err := quota.NewLimiter(quota.LimiterOptions{Store: memstore.New(), Now: func() time.Time { return now }})
	require.NoError(t, err)
	ctx := context.Background()
	assert.Equal(t, quota.Usage{}, l.Usage("t"))

	a, err := l.Reserve(ctx, "t", limits, quota.Amount{Requests: 1, Output: 80})
	require.NoError(t, err)
	_, err = l.Reserve(ctx, "t", limits, quota.Amount{Requests: 1, Output: 80})
	require.Error(t, err, "over the output burst")
	u := l.Usage("t")
	assert.EqualValues(t, 1, u.InFlight)
	assert.Equal(t, quota.Amount{Requests: 1}, u.LastMinute)
	assert.EqualValues(t, 1, u.DeniedLastMinute)
	assert.Equal(t, now, u.LastAt)
	assert.EqualValues(t, 60, u.Last.Requests.Limit, "the store's last decision")

	now = now.Add(30 * time.Second)
	l.Settle(a, quota.Amount{Requests: 1, Input: 5, Output: 40})
	u = l.Usage("t")
	assert.Zero(t, u.InFlight)
	assert.Equal(t, quota.Amount{Requests: 1, Input: 5, Output: 40}, u.LastMinute)
	assert.EqualValues(t, 45, u.Today)

	now = now.Add(45 * time.Second) // the reservation's second has left the minute, the settlement's not
	u = l.Usage("t")
	assert.Equal(t, quota.Amount{Input: 5, Output: 40}, u.LastMinute)
	assert.Zero(t, u.DeniedLastMinute)
	assert.Equal(t, quota.Amount{Requests: 1, Input: 5, Output: 40}, u.Total)
	assert.EqualValues(t, 1, u.Denied)
}

// BenchmarkLimiter is one request's limit stage with the in-process store:
// Reserve under a request's context, then Settle, as the router calls them
// (about 7 µs per streamed request in the profile of issue 12).
func BenchmarkLimiter(b *testing.B) {
	l, err := quota.NewLimiter(quota.LimiterOptions{Store: memstore.New()})
	require.NoError(b, err)
	lim := quota.Limits{RequestsPerMinute: 100_000_000, InputTokensPerMinute: 10_000_000_000,
		OutputTokensPerMinute: 10_000_000_000, Concurrency: 1024}
	ask := quota.Amount{Requests: 1, Input: 128, Output: 16}
	used := quota.Amount{Requests: 1, Input: 130, Output: 16}
	ctx, cancel := context.WithCancel(context.Background()) // a request's context can be cancelled
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		res, err := l.Reserve(ctx, "bench", lim, ask)
		if err != nil {
			b.Fatal(err)
		}
		l.Settle(res, used)
	}
}

// renewals is a Store that hands each Renew it passed on to the test,
// until stop is closed.
type renewals struct {
	quota.Store
	calls chan []quota.Held
	stop  chan struct{}
}

func (r *renewals) Renew(ctx context.Context, held []quota.Held, ttl time.Duration, now time.Time) error {
	err := r.Store.Renew(ctx, held, ttl, now)
	select {
	case r.calls <- held:
	case <-r.stop:
	}
	return err
}

// TestRunRenewsTheLeasesOfRequestsThatRun: a request that outlives the
// lease TTL keeps its concurrency slot while Run renews it, and once
// settled it is renewed no more. (Until 2026-12-02 leases were never
// renewed: a request past lease_ttl stopped counting, so the TTL had to
// be long, and a dead replica's slots stayed taken as long.)
func TestRunRenewsTheLeasesOfRequestsThatRun(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	st := &renewals{Store: memstore.New(), calls: make(chan []quota.Held), stop: make(chan struct{})}
	const ttl = 30 * time.Millisecond // Run renews every 10 ms of real time
	l, err := quota.NewLimiter(quota.LimiterOptions{Store: st, LeaseTTL: ttl, Now: clock})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { close(st.stop); cancel(); require.NoError(t, <-done) }()

	lim := quota.Limits{Concurrency: 1}
	long, err := l.Reserve(context.Background(), "t", lim, quota.Amount{Requests: 1})
	require.NoError(t, err)
	// Ten TTLs pass in steps of two thirds of one, each followed by a
	// renewal. A renewal waits to be received, so the one received after
	// a step read the clock at most one step before: the lease never
	// lapses.
	for range 15 {
		advance(ttl * 2 / 3)
		var held []quota.Held
		select {
		case held = <-st.calls:
		case <-time.After(5 * time.Second):
			t.Fatal("Run renewed no lease in 5 s")
		}
		require.Len(t, held, 1)
		assert.Equal(t, "t", held[0].Key)
		assert.Len(t, held[0].IDs, 1)
	}
	_, err = l.Reserve(context.Background(), "t", lim, quota.Amount{Requests: 1})
	var re *quota.RejectError
	require.ErrorAs(t, err, &re, "the long request still holds the one slot, ten TTLs on")
	assert.Equal(t, quota.DimConcurrency, re.Dimension)

	l.Settle(long, quota.Amount{Requests: 1})
	// A renewal that read the lease before its Settle may still come;
	// after it none does, with nothing held.
	select {
	case <-st.calls:
	case <-time.After(30 * time.Millisecond):
	}
	select {
	case held := <-st.calls:
		t.Fatalf("a renewal after the only lease was settled: %v", held)
	case <-time.After(50 * time.Millisecond):
	}
	next, err := l.Reserve(context.Background(), "t", lim, quota.Amount{Requests: 1})
	require.NoError(t, err, "the settled lease left its slot")
	l.Settle(next, quota.Amount{Requests: 1})
}

// late is a Store whose Reserves run but answer too late (a Redis that
// stalled runs the queued script when it resumes), while lateOn is set;
// it answers pings.
type late struct {
	quota.Store
	lateOn atomic.Bool
}

func (s *late) Reserve(ctx context.Context, key string, lim quota.Limits, amt quota.Amount, l quota.Lease, now time.Time) (quota.Decision, error) {
	d, err := s.Store.Reserve(ctx, key, lim, amt, l, now)
	if s.lateOn.Load() {
		return quota.Decision{}, context.DeadlineExceeded
	}
	return d, err
}

func (s *late) Ping(context.Context) error { return nil }

// TestAFailedReservesLeaseIsReleasedOnceTheStoreAnswers: a Reserve that
// timed out (the request passed uncharged) but that the store ran all the
// same leaves a lease; Run releases it once the store answers again,
// rather than leaving the tenant's one slot taken for the lease TTL with
// nothing running (seen live: 429s for 30 s after Redis resumed).
func TestAFailedReservesLeaseIsReleasedOnceTheStoreAnswers(t *testing.T) {
	st := &late{Store: memstore.New()}
	l, err := quota.NewLimiter(quota.LimiterOptions{Store: st, LeaseTTL: time.Hour})
	require.NoError(t, err)
	lim := quota.Limits{Concurrency: 1}
	st.lateOn.Store(true)
	r, err := l.Reserve(context.Background(), "t", lim, quota.Amount{Requests: 1})
	require.NoError(t, err, "failing open")
	l.Settle(r, quota.Amount{Requests: 1}) // uncharged: nothing to settle
	st.lateOn.Store(false)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Eventually(t, l.Healthy, 5*time.Second, 5*time.Millisecond, "Run's ping finds the store back")
	assert.Eventually(t, func() bool {
		r, err := l.Reserve(context.Background(), "t", lim, quota.Amount{Requests: 1})
		if err != nil {
			return false
		}
		l.Settle(r, quota.Amount{Requests: 1})
		return r.Decision.Allowed // charged: not failed open
	}, 5*time.Second, 20*time.Millisecond, "the late lease is released, not held for the TTL")
}

// leaving is a Store that runs a Reserve and then finds its client gone
// (a slow store, a client that gave up meanwhile); it answers pings.
type leaving struct {
	quota.Store
	cancel context.CancelFunc
}

func (s *leaving) Reserve(ctx context.Context, key string, lim quota.Limits, amt quota.Amount, l quota.Lease, now time.Time) (quota.Decision, error) {
	if _, err := s.Store.Reserve(ctx, key, lim, amt, l, now); err != nil {
		return quota.Decision{}, err
	}
	s.cancel()
	return quota.Decision{}, context.Canceled
}

func (s *leaving) Ping(context.Context) error { return nil }

// TestTheLeaseOfAReserveItsClientLeftIsReleased: a Reserve the store ran
// while its client left answers the client's cancel, and its lease is
// released by Run rather than held for the lease TTL.
func TestTheLeaseOfAReserveItsClientLeftIsReleased(t *testing.T) {
	inner := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	l, err := quota.NewLimiter(quota.LimiterOptions{Store: &leaving{Store: inner, cancel: cancel}, LeaseTTL: time.Hour})
	require.NoError(t, err)
	lim := quota.Limits{Concurrency: 1}
	_, err = l.Reserve(ctx, "t", lim, quota.Amount{Requests: 1})
	require.ErrorIs(t, err, context.Canceled)
	d, err := inner.Reserve(context.Background(), "t", lim, quota.Amount{Requests: 1}, quota.Lease{ID: "probe", TTL: time.Hour}, time.Now())
	require.NoError(t, err)
	require.False(t, d.Allowed, "the store holds the lease")

	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(rctx) }()
	defer func() { stop(); require.NoError(t, <-done) }()
	assert.Eventually(t, func() bool {
		d, err := inner.Reserve(context.Background(), "t", lim, quota.Amount{Requests: 1}, quota.Lease{ID: "probe", TTL: time.Hour}, time.Now())
		return err == nil && d.Allowed
	}, 5*time.Second, 20*time.Millisecond, "Run released the lease")
}

// TestAFailedReserveSettlesWhatItUsed: a Reserve whose call timed out but
// that the store ran (failing open, the request runs) is settled with what
// the request used once the store answers, not left charged whole (a
// stream of 500 tokens cut after 272 kept 500 charged).
func TestAFailedReserveSettlesWhatItUsed(t *testing.T) {
	st := &late{Store: memstore.New()}
	l, err := quota.NewLimiter(quota.LimiterOptions{Store: st, LeaseTTL: time.Hour})
	require.NoError(t, err)
	lim := quota.Limits{OutputTokensPerMinute: 60, OutputBurst: 1000}
	st.lateOn.Store(true)
	r, err := l.Reserve(context.Background(), "t", lim, quota.Amount{Output: 1000})
	require.NoError(t, err, "failing open")
	assert.False(t, r.Decision.Allowed, "uncharged as far as the request knows")
	l.Settle(r, quota.Amount{Output: 300})
	st.lateOn.Store(false)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Eventually(t, l.Healthy, 5*time.Second, 5*time.Millisecond)
	assert.Eventually(t, func() bool {
		r, err := l.Reserve(context.Background(), "t", lim, quota.Amount{Output: 650})
		if err != nil {
			return false
		}
		l.Settle(r, quota.Amount{Output: 650})
		return r.Decision.Allowed
	}, 5*time.Second, 20*time.Millisecond, "700 of the 1,000 came back once the store answered")
}

// TestAFailedReserveSettlesAtOnceWhenTheStoreAnswers: a request whose
// Reserve's call failed, ending after the store answers again, is settled
// as it ends, so its slot is free for the tenant's next request (it waited
// for Run's next probe: a tester's next request got a 429).
func TestAFailedReserveSettlesAtOnceWhenTheStoreAnswers(t *testing.T) {
	st := &late{Store: memstore.New()}
	l, err := quota.NewLimiter(quota.LimiterOptions{Store: st, LeaseTTL: time.Hour})
	require.NoError(t, err)
	lim := quota.Limits{Concurrency: 1}
	st.lateOn.Store(true)
	r, err := l.Reserve(context.Background(), "t", lim, quota.Amount{Requests: 1})
	require.NoError(t, err, "failing open")
	st.lateOn.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Eventually(t, l.Healthy, 5*time.Second, time.Millisecond, "Run's ping finds the store back")

	l.Settle(r, quota.Amount{Requests: 1}) // inline, not at Run's next probe
	next, err := l.Reserve(context.Background(), "t", lim, quota.Amount{Requests: 1})
	require.NoError(t, err)
	assert.True(t, next.Decision.Allowed, "the slot is free at once")
	l.Settle(next, quota.Amount{Requests: 1})
}
