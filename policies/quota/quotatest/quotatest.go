package quotatest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/quota"
)

// Start is the suite's first now: mid-day UTC with a sub-millisecond part,
// so a Store that rounds time where it must not fails.
func Start() time.Time { return time.Date(2026, 3, 14, 12, 0, 0, 123_456_789, time.UTC) }

// Run runs the contract every quota.Store must pass. newStore returns an
// empty Store for one subtest (and cleans it up with t.Cleanup).
func Run(t *testing.T, newStore func(t *testing.T) quota.Store) {
	tests := []struct {
		name string
		run  func(t *testing.T, s quota.Store)
	}{
		{"unlimited", testUnlimited},
		{"requests_burst", testRequestsBurst},
		{"token_dimensions", testTokenDimensions},
		{"above_burst", testAboveBurst},
		{"denial_charges_nothing", testDenialChargesNothing},
		{"settle_refund", testSettleRefund},
		{"settle_overcharge", testSettleOvercharge},
		{"refund_banks_nothing", testRefundBanksNothing},
		{"settle_unknown_lease", testSettleUnknownLease},
		{"concurrency", testConcurrency},
		{"concurrency_staggered", testConcurrencyStaggered},
		{"renew", testRenew},
		{"tokens_per_day", testTokensPerDay},
		{"tokens_per_day_settle", testTokensPerDaySettle},
		{"windows", testWindows},
		{"tenants_independent", testTenantsIndependent},
		{"concurrent_reserves", testConcurrentReserves},
		{"invalid_arguments", testInvalidArguments},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore(t)) })
	}
}

// tenant is a Store with one key and a hand-driven clock.
type tenant struct {
	t   *testing.T
	s   quota.Store
	key string
	lim quota.Limits
	now time.Time
}

func newTenant(t *testing.T, s quota.Store, key string, lim quota.Limits) *tenant {
	return &tenant{t: t, s: s, key: key, lim: lim, now: Start()}
}

func (tn *tenant) reserve(amt quota.Amount, leaseID string) quota.Decision {
	tn.t.Helper()
	d, err := tn.s.Reserve(context.Background(), tn.key, tn.lim, amt, quota.Lease{ID: leaseID, TTL: 30 * time.Second}, tn.now)
	require.NoError(tn.t, err)
	if d.Allowed {
		assert.Empty(tn.t, d.Denied, "an allowed decision names no dimension")
		assert.Zero(tn.t, d.RetryAfter, "an allowed decision has no RetryAfter")
	} else {
		assert.NotEmpty(tn.t, d.Denied, "a denial names its dimension")
	}
	return d
}

func (tn *tenant) allow(amt quota.Amount, leaseID string) quota.Decision {
	tn.t.Helper()
	d := tn.reserve(amt, leaseID)
	require.True(tn.t, d.Allowed, "reserve %+v at %v: %+v", amt, tn.now, d)
	return d
}

func (tn *tenant) deny(amt quota.Amount, dim quota.Dimension) quota.Decision {
	tn.t.Helper()
	d := tn.reserve(amt, "denied")
	require.False(tn.t, d.Allowed, "reserve %+v at %v: %+v", amt, tn.now, d)
	require.Equal(tn.t, dim, d.Denied)
	return d
}

func (tn *tenant) settle(reserved, used quota.Amount, leaseID string, reservedAt time.Time) {
	tn.t.Helper()
	s := quota.Settlement{Reserved: reserved, Used: used, LeaseID: leaseID, ReservedAt: reservedAt}
	require.NoError(tn.t, tn.s.Settle(context.Background(), tn.key, tn.lim, s, tn.now))
}

func (tn *tenant) advance(d time.Duration) { tn.now = tn.now.Add(d) }

func req(n int64) quota.Amount { return quota.Amount{Requests: n} }
func in(n int64) quota.Amount  { return quota.Amount{Input: n} }
func out(n int64) quota.Amount { return quota.Amount{Output: n} }

func testUnlimited(t *testing.T, s quota.Store) {
	tn := newTenant(t, s, "free", quota.Limits{})
	big := quota.Amount{Requests: 1e6, Input: 1e12, Output: 1e12}
	for range 100 {
		d := tn.allow(big, "")
		assert.Zero(t, d.Requests)
		assert.Zero(t, d.Tokens)
	}
	tn.settle(big, quota.Amount{Requests: 1e6, Input: 1e13, Output: 1e13}, "", tn.now)
	tn.allow(big, "")
}

func testRequestsBurst(t *testing.T, s quota.Store) {
	tests := []struct {
		name       string
		perMinute  int64
		burst      int64
		wantRetry  time.Duration
		afterRetry int
	}{
		{"60_per_minute", 60, 5, time.Second, 1},
		{"7_per_minute", 7, 3, time.Minute / 7, 1},
		{"burst_1", 1, 1, time.Minute, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTenant(t, s, tt.name, quota.Limits{RequestsPerMinute: tt.perMinute, RequestBurst: tt.burst})
			for i := range tt.burst {
				d := tn.allow(req(1), "")
				assert.Equal(t, tt.burst-1-i, d.Requests.Remaining)
			}
			d := tn.deny(req(1), quota.DimRequests)
			assert.InDelta(t, float64(tt.wantRetry), float64(d.RetryAfter), float64(time.Millisecond))

			tn.advance(d.RetryAfter - time.Nanosecond)
			tn.deny(req(1), quota.DimRequests)
			tn.advance(time.Nanosecond)
			tn.allow(req(1), "")
			tn.deny(req(1), quota.DimRequests)
		})
	}
}

func testTokenDimensions(t *testing.T, s quota.Store) {
	// Input: 100 tokens/s, burst 1000; output: 10 tokens/s, burst 300.
	lim := quota.Limits{InputTokensPerMinute: 6000, InputBurst: 1000, OutputTokensPerMinute: 600, OutputBurst: 300}
	tn := newTenant(t, s, "tok", lim)
	tn.allow(quota.Amount{Requests: 1, Input: 600, Output: 100}, "")

	d := tn.deny(quota.Amount{Input: 500}, quota.DimInputTokens)
	assert.Equal(t, time.Second, d.RetryAfter, "100 tokens short at 100 tokens/s")
	d = tn.deny(quota.Amount{Output: 250}, quota.DimOutputTokens)
	assert.Equal(t, 5*time.Second, d.RetryAfter, "50 tokens short at 10 tokens/s")

	tn.advance(time.Second)
	tn.allow(quota.Amount{Input: 500}, "")
	tn.deny(quota.Amount{Input: 1}, quota.DimInputTokens)
	tn.advance(4 * time.Second)
	tn.allow(quota.Amount{Output: 250}, "")
}

func testAboveBurst(t *testing.T, s quota.Store) {
	lim := quota.Limits{
		RequestsPerMinute: 60, RequestBurst: 1,
		InputTokensPerMinute: 6000, InputBurst: 1000,
		OutputTokensPerMinute: 6000, OutputBurst: 500,
		TokensPerDay: 2000,
	}
	tests := []struct {
		name string
		amt  quota.Amount
		want quota.Dimension
	}{
		{"requests", req(2), quota.DimRequests},
		{"input", in(1001), quota.DimInputTokens},
		{"output", out(501), quota.DimOutputTokens},
		{"tokens_per_day", quota.Amount{Input: 1000, Output: 1001}, quota.DimTokensPerDay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTenant(t, s, tt.name, lim)
			d := tn.deny(tt.amt, tt.want)
			assert.Zero(t, d.RetryAfter, "too large: RetryAfter 0")
		})
	}

	t.Run("too_large_wins", func(t *testing.T) {
		// Requests must wait, but output can never pass: the caller must
		// hear "too large", not "retry".
		tn := newTenant(t, s, "wins", lim)
		tn.allow(req(1), "")
		d := tn.deny(quota.Amount{Requests: 1, Output: 501}, quota.DimOutputTokens)
		assert.Zero(t, d.RetryAfter)
	})
}

func testDenialChargesNothing(t *testing.T, s quota.Store) {
	lim := quota.Limits{
		RequestsPerMinute: 600, RequestBurst: 10,
		OutputTokensPerMinute: 6000, OutputBurst: 100,
		Concurrency: 1, TokensPerDay: 1000,
	}
	tn := newTenant(t, s, "deny", lim)
	first := quota.Amount{Requests: 1, Output: 80}
	tn.allow(first, "a")
	tn.settle(first, first, "a", tn.now)

	d := tn.deny(quota.Amount{Requests: 1, Input: 500, Output: 50}, quota.DimOutputTokens)
	assert.Positive(t, d.RetryAfter)
	assert.Equal(t, int64(9), d.Requests.Remaining, "a denial reports the state before it")

	// Had the denial charged anything, each of these would fail: the
	// request slot, the single concurrency slot, or the day's remainder.
	d = tn.allow(quota.Amount{Requests: 1, Input: 920}, "b")
	assert.Equal(t, int64(8), d.Requests.Remaining)
	assert.Equal(t, int64(20), d.Tokens.Remaining)
}

func testSettleRefund(t *testing.T, s quota.Store) {
	tn := newTenant(t, s, "refund", quota.Limits{OutputTokensPerMinute: 6000, OutputBurst: 1000})
	d := tn.allow(out(1000), "")
	assert.Zero(t, d.Tokens.Remaining)
	tn.deny(out(1), quota.DimOutputTokens)

	tn.settle(out(1000), out(10), "", tn.now)
	d = tn.allow(out(990), "")
	assert.Zero(t, d.Tokens.Remaining)
	tn.deny(out(1), quota.DimOutputTokens)
}

func testSettleOvercharge(t *testing.T, s quota.Store) {
	// Output: 100 tokens/s, burst 1000.
	lim := quota.Limits{RequestsPerMinute: 6000, RequestBurst: 100, OutputTokensPerMinute: 6000, OutputBurst: 1000}
	tn := newTenant(t, s, "over", lim)
	tn.allow(quota.Amount{Requests: 1, Output: 100}, "")
	tn.settle(quota.Amount{Requests: 1, Output: 100}, quota.Amount{Requests: 1, Output: 1100}, "", tn.now)

	d := tn.deny(quota.Amount{Requests: 1, Output: 1}, quota.DimOutputTokens)
	assert.Equal(t, 1010*time.Millisecond, d.RetryAfter, "101 tokens over the burst at 100 tokens/s")
	assert.Zero(t, d.Tokens.Remaining)
	tn.advance(d.RetryAfter)
	tn.allow(quota.Amount{Requests: 1, Output: 1}, "")
}

func testRefundBanksNothing(t *testing.T, s quota.Store) {
	tn := newTenant(t, s, "bank", quota.Limits{OutputTokensPerMinute: 6000, OutputBurst: 1000})
	reservedAt := tn.now
	tn.allow(out(1000), "")
	tn.advance(time.Hour)
	tn.settle(out(1000), out(0), "", reservedAt)

	d := tn.allow(out(1000), "")
	assert.Zero(t, d.Tokens.Remaining)
	tn.deny(out(1), quota.DimOutputTokens)
}

func testSettleUnknownLease(t *testing.T, s quota.Store) {
	// Output: 10 tokens/s, burst 1000.
	lim := quota.Limits{OutputTokensPerMinute: 600, OutputBurst: 1000, Concurrency: 1}
	tn := newTenant(t, s, "unknown", lim)
	reservedAt := tn.now
	tn.allow(out(1000), "a")
	tn.advance(31 * time.Second) // the lease has expired
	tn.settle(out(1000), out(10), "a", reservedAt)
	tn.settle(out(0), out(0), "never-reserved", reservedAt)

	tn.allow(out(1000), "b")
	tn.settle(out(1000), out(1000), "b", tn.now)
	tn.deny(out(1), quota.DimOutputTokens)
}

func testConcurrency(t *testing.T, s quota.Store) {
	tn := newTenant(t, s, "conc", quota.Limits{Concurrency: 2})
	tn.allow(req(1), "a")
	tn.allow(req(1), "b")
	d := tn.deny(req(1), quota.DimConcurrency)
	assert.Positive(t, d.RetryAfter, "a concurrency denial hints a retry")

	tn.settle(req(1), req(1), "unknown", tn.now)
	tn.deny(req(1), quota.DimConcurrency)
	tn.settle(req(1), req(1), "a", tn.now)
	tn.allow(req(1), "c")
	tn.deny(req(1), quota.DimConcurrency)

	// b and c were never settled; they stop counting 30s (their TTL) later.
	tn.advance(30*time.Second - time.Millisecond)
	tn.deny(req(1), quota.DimConcurrency)
	tn.advance(time.Millisecond)
	tn.allow(req(1), "d")
	tn.allow(req(1), "e")
	tn.deny(req(1), quota.DimConcurrency)
}

// testConcurrencyStaggered takes leases at different times and with
// different TTLs: each stops counting its own TTL after its Reserve,
// whichever others expire before or after it.
func testConcurrencyStaggered(t *testing.T, s quota.Store) {
	tn := newTenant(t, s, "staggered", quota.Limits{Concurrency: 2})
	lease := func(id string, ttl time.Duration) {
		t.Helper()
		d, err := s.Reserve(context.Background(), tn.key, tn.lim, req(1), quota.Lease{ID: id, TTL: ttl}, tn.now)
		require.NoError(t, err)
		require.True(t, d.Allowed, "lease %s at %v: %+v", id, tn.now, d)
	}
	lease("a", time.Minute)
	tn.advance(10 * time.Second)
	lease("b", 10*time.Second) // taken after a, expires before it
	tn.deny(req(1), quota.DimConcurrency)
	tn.advance(10*time.Second - time.Millisecond)
	tn.deny(req(1), quota.DimConcurrency)
	tn.advance(time.Millisecond) // b expired
	lease("c", 30*time.Second)
	tn.deny(req(1), quota.DimConcurrency)
	tn.settle(req(1), req(1), "c", tn.now)
	tn.advance(40*time.Second - time.Millisecond) // a: 1ms left
	lease("d", time.Minute)
	tn.deny(req(1), quota.DimConcurrency)
	tn.advance(time.Millisecond) // a expired
	lease("e", time.Minute)
	tn.deny(req(1), quota.DimConcurrency)
}

// testRenew renews the leases a Limiter still holds, as it does: a
// renewed lease counts its TTL past the renewal, and one not renewed again
// expires then. What a Store does with a lease it no longer has differs
// (quota/redisstore re-creates it, quota/memstore may not), so the
// contract passes only held leases; each store tests that part itself.
func testRenew(t *testing.T, s quota.Store) {
	tn := newTenant(t, s, "renew", quota.Limits{Concurrency: 2})
	renew := func(ids ...string) {
		t.Helper()
		held := []quota.Held{{Key: tn.key, IDs: ids}}
		require.NoError(t, s.Renew(context.Background(), held, 30*time.Second, tn.now))
	}
	tn.allow(req(1), "a") // until 30s
	tn.allow(req(1), "b")
	tn.settle(req(1), req(1), "b", tn.now)
	tn.advance(20 * time.Second)
	renew("a")            // a until 50s
	tn.allow(req(1), "c") // until 50s
	tn.deny(req(1), quota.DimConcurrency)
	tn.settle(req(1), req(1), "c", tn.now)

	tn.advance(30*time.Second - time.Millisecond) // 49.999s: a counts past its first 30s
	tn.allow(req(1), "d")                         // until 79.999s
	tn.deny(req(1), quota.DimConcurrency)
	tn.advance(time.Millisecond) // 50s: a expired, not renewed again
	tn.allow(req(1), "e")
	tn.deny(req(1), quota.DimConcurrency)
	renew() // nothing to renew is no error
}

func testTokensPerDay(t *testing.T, s quota.Store) {
	tn := newTenant(t, s, "daily", quota.Limits{TokensPerDay: 1000})
	midnight := time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)

	tn.allow(quota.Amount{Input: 500, Output: 100}, "")
	d := tn.deny(quota.Amount{Input: 300, Output: 101}, quota.DimTokensPerDay)
	assert.Equal(t, midnight.Sub(tn.now), d.RetryAfter, "until the next UTC midnight")
	tn.allow(quota.Amount{Input: 300, Output: 100}, "")
	tn.deny(in(1), quota.DimTokensPerDay)

	tn.now = midnight.Add(-time.Nanosecond)
	d = tn.deny(in(1), quota.DimTokensPerDay)
	assert.Equal(t, time.Nanosecond, d.RetryAfter)
	tn.now = midnight
	tn.allow(in(1000), "")
	d = tn.deny(in(1), quota.DimTokensPerDay)
	assert.Equal(t, 24*time.Hour, d.RetryAfter)
}

func testTokensPerDaySettle(t *testing.T, s quota.Store) {
	tn := newTenant(t, s, "daily-settle", quota.Limits{TokensPerDay: 1000})
	day1 := time.Date(2026, 3, 14, 23, 59, 59, 0, time.UTC)
	day2 := day1.Add(2 * time.Second)

	tn.now = day1
	tn.allow(in(600), "")
	tn.now = day2
	tn.allow(in(500), "")
	// Settled on day 2, the refund goes to day 1, where it was reserved.
	tn.settle(in(600), in(100), "", day1)
	tn.deny(in(501), quota.DimTokensPerDay)
	// An overcharge counts on its day too.
	tn.settle(in(500), in(900), "", day2)
	tn.deny(in(101), quota.DimTokensPerDay)
	tn.allow(in(100), "")

	// Back on day 1 (a replica whose clock lags), 900 of 1000 are left.
	tn.now = day1
	tn.deny(in(901), quota.DimTokensPerDay)
	tn.allow(in(900), "")
}

func testWindows(t *testing.T, s quota.Store) {
	lim := quota.Limits{
		RequestsPerMinute: 60, RequestBurst: 10,
		InputTokensPerMinute: 6000, InputBurst: 6000,
		OutputTokensPerMinute: 600, OutputBurst: 600,
	}
	tn := newTenant(t, s, "win", lim)
	d := tn.allow(quota.Amount{Requests: 3, Input: 600, Output: 300}, "")
	assert.Equal(t, quota.Window{Limit: 60, Remaining: 7, Reset: 3 * time.Second}, d.Requests)
	assert.Equal(t, quota.Window{Limit: 600, Remaining: 300, Reset: 30 * time.Second}, d.Tokens,
		"output has the smaller share left (300/600 against 5400/6000)")

	tn.advance(1500 * time.Millisecond)
	d = tn.allow(quota.Amount{}, "")
	assert.Equal(t, quota.Window{Limit: 60, Remaining: 8, Reset: 1500 * time.Millisecond}, d.Requests)
	assert.Equal(t, quota.Window{Limit: 600, Remaining: 315, Reset: 28500 * time.Millisecond}, d.Tokens)

	d = tn.deny(quota.Amount{Requests: 9}, quota.DimRequests)
	assert.Equal(t, quota.Window{Limit: 60, Remaining: 8, Reset: 1500 * time.Millisecond}, d.Requests,
		"a denial reports the unchanged window")

	t.Run("input_only", func(t *testing.T) {
		tn := newTenant(t, s, "win-input", quota.Limits{InputTokensPerMinute: 6000})
		d := tn.allow(in(1500), "")
		assert.Zero(t, d.Requests, "requests are not limited")
		assert.Equal(t, quota.Window{Limit: 6000, Remaining: 4500, Reset: 15 * time.Second}, d.Tokens,
			"burst defaults to a minute's worth")
	})
	t.Run("input_smaller_share", func(t *testing.T) {
		tn := newTenant(t, s, "win-share", lim)
		d := tn.allow(quota.Amount{Input: 5400, Output: 60}, "")
		assert.Equal(t, quota.Window{Limit: 6000, Remaining: 600, Reset: 54 * time.Second}, d.Tokens)
	})
	t.Run("burst_above_rate", func(t *testing.T) {
		tn := newTenant(t, s, "win-burst", quota.Limits{RequestsPerMinute: 60, RequestBurst: 100, OutputTokensPerMinute: 600, OutputBurst: 1000})
		d := tn.allow(quota.Amount{Requests: 1, Output: 10}, "")
		assert.Equal(t, quota.Window{Limit: 100, Remaining: 99, Reset: time.Second}, d.Requests,
			"the limit is the burst an idle tenant may spend, never below what remains")
		assert.Equal(t, quota.Window{Limit: 1000, Remaining: 990, Reset: time.Second}, d.Tokens)
	})
}

func testTenantsIndependent(t *testing.T, s quota.Store) {
	lim := quota.Limits{RequestsPerMinute: 1, RequestBurst: 1, Concurrency: 1, TokensPerDay: 10}
	a := newTenant(t, s, "a", lim)
	b := newTenant(t, s, "b", lim)
	a.allow(quota.Amount{Requests: 1, Input: 10}, "x")
	a.deny(req(1), quota.DimConcurrency)
	b.allow(quota.Amount{Requests: 1, Input: 10}, "x")
	a.settle(req(1), req(1), "x", a.now)
	a.deny(req(1), quota.DimRequests)
	b.deny(req(1), quota.DimConcurrency)
}

func testConcurrentReserves(t *testing.T, s quota.Store) {
	tests := []struct {
		name string
		lim  quota.Limits
		amt  quota.Amount
		want int64
	}{
		{"requests", quota.Limits{RequestsPerMinute: 60, RequestBurst: 100}, req(1), 100},
		{"output", quota.Limits{OutputTokensPerMinute: 60, OutputBurst: 1000}, out(10), 100},
		{"concurrency", quota.Limits{Concurrency: 7}, req(1), 7},
		{"tokens_per_day", quota.Limits{TokensPerDay: 1000}, in(10), 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := Start()
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for g := range 50 {
				wg.Go(func() {
					for i := range 10 {
						lease := quota.Lease{ID: fmt.Sprintf("%d-%d", g, i), TTL: time.Minute}
						d, err := s.Reserve(context.Background(), tt.name, tt.lim, tt.amt, lease, now)
						if !assert.NoError(t, err) {
							return
						}
						if d.Allowed {
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			assert.Equal(t, tt.want, allowed.Load())
		})
	}
}

func testInvalidArguments(t *testing.T, s quota.Store) {
	ctx, now := context.Background(), Start()
	lease := quota.Lease{ID: "a", TTL: time.Minute}
	_, err := s.Reserve(ctx, "bad", quota.Limits{}, quota.Amount{Input: -1}, lease, now)
	assert.Error(t, err, "negative amount")
	_, err = s.Reserve(ctx, "bad", quota.Limits{Concurrency: 1}, req(1), quota.Lease{TTL: time.Minute}, now)
	assert.Error(t, err, "concurrency without a lease ID")
	_, err = s.Reserve(ctx, "bad", quota.Limits{Concurrency: 1}, req(1), quota.Lease{ID: "a"}, now)
	assert.Error(t, err, "concurrency without a lease TTL")
	err = s.Settle(ctx, "bad", quota.Limits{}, quota.Settlement{Used: quota.Amount{Output: -1}, ReservedAt: now}, now)
	assert.Error(t, err, "negative usage")

	d, err := s.Reserve(ctx, "bad", quota.Limits{RequestsPerMinute: 1, Concurrency: 1}, req(1), lease, now)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the rejected calls charged nothing")
}

// Bench reserves and settles one request per iteration on s, against limits
// that always allow it, with a clock that moves 1ms per iteration.
func Bench(b *testing.B, s quota.Store) {
	lim := quota.Limits{
		RequestsPerMinute: 6_000_000, RequestBurst: 100_000,
		InputTokensPerMinute: 1e12, InputBurst: 1e9,
		OutputTokensPerMinute: 1e12, OutputBurst: 1e9,
		Concurrency: 1e6, TokensPerDay: 1e15,
	}
	amt := quota.Amount{Requests: 1, Input: 1000, Output: 500}
	used := quota.Amount{Requests: 1, Input: 1000, Output: 200}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = "lease-" + strconv.Itoa(i)
	}
	ctx, now := context.Background(), Start()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := ids[i%len(ids)]
		d, err := s.Reserve(ctx, "bench", lim, amt, quota.Lease{ID: id, TTL: time.Minute}, now)
		if err != nil || !d.Allowed {
			b.Fatalf("reserve: %+v, %v", d, err)
		}
		st := quota.Settlement{Reserved: amt, Used: used, LeaseID: id, ReservedAt: now}
		if err := s.Settle(ctx, "bench", lim, st, now); err != nil {
			b.Fatal(err)
		}
		now = now.Add(time.Millisecond)
		i++
	}
}
