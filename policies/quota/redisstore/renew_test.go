package redisstore

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/internal/redistest"
	"github.com/sluice-llm/sluice/policies/quota"
)

// renewal is what one Renew of a watched Store saw.
type renewal struct {
	err    error
	hooked bool  // before ran ahead of it
	epoch  int64 // the watched's epoch when it started
}

// watched is a Store that hands each Renew's outcome to the test, and
// that runs before ahead of a Renew, once, when before returns true for
// the leases that Renew was given: the Limiter has then collected them,
// and what before does races the renewal at its worst.
type watched struct {
	*Store
	renewed chan renewal
	stop    chan struct{}
	// epoch is what the test says happened before: a Renew records it
	// when it starts.
	epoch  atomic.Int64
	mu     sync.Mutex
	before func(held []quota.Held) bool
}

func (w *watched) Renew(ctx context.Context, held []quota.Held, ttl time.Duration, now time.Time) error {
	epoch := w.epoch.Load()
	w.mu.Lock()
	before := w.before
	w.mu.Unlock()
	hooked := before != nil && before(held)
	if hooked {
		w.mu.Lock()
		w.before = nil
		w.mu.Unlock()
	}
	err := w.Store.Renew(ctx, held, ttl, now)
	select {
	case w.renewed <- renewal{err: err, hooked: hooked, epoch: epoch}:
	case <-w.stop:
	}
	return err
}

func (w *watched) setBefore(f func(held []quota.Held) bool) {
	w.mu.Lock()
	w.before = f
	w.mu.Unlock()
}

// next is the next Renew's outcome.
func (w *watched) next(t *testing.T) renewal {
	t.Helper()
	select {
	case r := <-w.renewed:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal in 10 s")
		return renewal{}
	}
}

// runLimiter runs a Limiter on w until t ends. Its clock stands still, so
// no lease expires while the test runs; Run renews every 100 ms of real
// time. It fails closed, so that a Reserve the store did not decide is
// not mistaken for one it allowed.
func runLimiter(t *testing.T, w *watched) *quota.Limiter {
	t.Helper()
	now := time.Now()
	l, err := quota.NewLimiter(quota.LimiterOptions{
		Store: w, FailClosed: true, Timeout: time.Second, LeaseTTL: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:    func() time.Time { return now },
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		close(w.stop)
		cancel()
		require.NoError(t, <-done)
	})
	return l
}

func watch(s *Store) *watched {
	return &watched{Store: s, renewed: make(chan renewal), stop: make(chan struct{})}
}

var oneRequest = quota.Amount{Requests: 1}

// reserved is a Reserve that must be allowed.
func reserved(t *testing.T, l *quota.Limiter, key string, lim quota.Limits) *quota.Reservation {
	t.Helper()
	r, err := l.Reserve(context.Background(), key, lim, oneRequest)
	require.NoError(t, err)
	require.NotNil(t, r)
	return r
}

// refused asserts that the next Reserve the store decides (after those
// it could not: the limits fail closed) is refused for concurrency.
func refused(t *testing.T, l *quota.Limiter, key string, lim quota.Limits, msg string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := l.Reserve(context.Background(), key, lim, oneRequest)
		require.Nil(t, r, msg)
		if !errors.Is(err, quota.ErrUnavailable) {
			var re *quota.RejectError
			require.ErrorAs(t, err, &re, msg)
			assert.Equal(t, quota.DimConcurrency, re.Dimension)
			return
		}
		require.True(t, time.Now().Before(deadline), "the store did not answer in 10 s")
		<-tick.C
	}
}

// leases is how many leases tenant's set holds, asked until Redis answers.
func leases(t *testing.T, c *redis.Client, s *Store, tenant string) int64 {
	t.Helper()
	var n int64
	require.Eventually(t, func() bool {
		var err error
		n, err = c.ZCard(context.Background(), s.keys(tenant, time.Now())[1]).Result()
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	return n
}

// TestTheLeasesOfRunningRequestsSurviveARedisRestart: a tenant with
// concurrency 2 runs two long requests; Redis restarts empty (SHUTDOWN
// NOSAVE, as a failover to an empty replica or a FLUSHALL also leaves
// it); from the first renewal after it answers again, the two count
// again and a third request is refused. Until 2026-12-05 a renewal
// renewed only the leases Redis still had, so the tenant could start two
// more for as long as its two ran.
func TestTheLeasesOfRunningRequestsSurviveARedisRestart(t *testing.T) {
	rs := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second,
		WriteTimeout: time.Second, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c, Options{})
	require.NoError(t, err)
	w := watch(s)
	l := runLimiter(t, w)
	lim := quota.Limits{Concurrency: 2}
	first := reserved(t, l, "t", lim)
	reserved(t, l, "t", lim)
	refused(t, l, "t", lim, "two requests run")

	rs.Restart()
	w.epoch.Store(1)
	// A renewal that started before the restart may be waiting for the
	// test; those after it fail while a pooled connection to the old
	// server is tried. The first that starts after it and succeeds
	// counts.
	for r := w.next(t); r.epoch == 0 || r.err != nil; r = w.next(t) {
		continue
	}
	assert.EqualValues(t, 2, leases(t, c, s, "t"), "both leases are back")
	refused(t, l, "t", lim, "the two requests still run after the restart")

	l.Settle(first, oneRequest)
	reserved(t, l, "t", lim)
}

// TestALeaseSettledWhileARenewalRunsDoesNotComeBack: a renewal writes back
// every lease it is sent, so one settled after the Limiter collected the
// leases to renew comes back; the Limiter then releases it once more, and
// the tenant's slot is free at once rather than a LeaseTTL later.
func TestALeaseSettledWhileARenewalRunsDoesNotComeBack(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c)
	w := watch(s)
	l := runLimiter(t, w)
	lim := quota.Limits{Concurrency: 2}
	reserved(t, l, "t", lim) // runs on, so that renewals go on
	short := reserved(t, l, "t", lim)
	w.setBefore(func(held []quota.Held) bool {
		if len(held) != 1 || len(held[0].IDs) != 2 {
			return false // collected before short was reserved
		}
		l.Settle(short, oneRequest) // its ZREM runs before the renewal's script
		return true
	})
	for !w.next(t).hooked {
		continue
	}
	// Run renews one call after another: once the next renewal comes,
	// the hooked one has returned and released what it brought back.
	require.NoError(t, w.next(t).err)
	assert.EqualValues(t, 1, leases(t, c, s, "t"), "the settled lease is not in the set")
	reserved(t, l, "t", lim)
	refused(t, l, "t", lim, "two requests run")
}
