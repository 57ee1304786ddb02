package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/quota/internal/gcra"
	"github.com/sluice-llm/sluice/policies/quota/memstore"
	"github.com/sluice-llm/sluice/policies/quota/quotatest"
)

func TestContract(t *testing.T) {
	c := newClient(t)
	quotatest.Run(t, func(t *testing.T) quota.Store { return newStore(t, c) })
}

func TestNew(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	tests := []struct {
		name   string
		client redis.UniversalClient
		opts   Options
		want   string
	}{
		{"default prefix", c, Options{}, "sluice:{t}:rl"},
		{"prefix", c, Options{KeyPrefix: "x"}, "x:{t}:rl"},
		{"nil client", nil, Options{}, ""},
		{"prefix with a brace", c, Options{KeyPrefix: "a{b"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.client, tt.opts)
			if tt.want == "" {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, s.keys("t", quotatest.Start())[0])
		})
	}
}

// TestKeys checks the key layout doc.go promises: three keys per tenant, on
// one cluster slot, each with an expiry, and no rate or lease key once the
// tenant is fully replenished with nothing in flight.
func TestKeys(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c)
	ctx, now := context.Background(), quotatest.Start()
	lim := quota.Limits{
		RequestsPerMinute: 60, RequestBurst: 10,
		InputTokensPerMinute: 6000, OutputTokensPerMinute: 6000,
		Concurrency: 5, TokensPerDay: 1e6,
	}
	amt := quota.Amount{Requests: 1, Input: 100, Output: 50}
	d, err := s.Reserve(ctx, "tenant-1.a_b", lim, amt, quota.Lease{ID: "l1", TTL: time.Minute}, now)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	keys, err := scan(ctx, c, s.prefix+":*")
	require.NoError(t, err)
	base := s.prefix + ":{tenant-1.a_b}:"
	assert.ElementsMatch(t, []string{base + "rl", base + "lease", base + "day:20260314"}, keys)
	for _, k := range keys {
		assert.Equal(t, slot(keys[0]), slot(k), "%s shares the tenant's slot", k)
		assert.Positive(t, c.PTTL(ctx, k).Val(), "%s expires", k)
	}
	assert.LessOrEqual(t, c.PTTL(ctx, base+"rl").Val(), time.Second+expiryMargin+expiryJitter)
	assert.Greater(t, c.PTTL(ctx, base+"lease").Val(), time.Minute)
	assert.LessOrEqual(t, c.PTTL(ctx, base+"lease").Val(), time.Minute+expiryMargin+expiryJitter)
	dayTTL := c.PTTL(ctx, base+"day:20260314").Val()
	assert.Greater(t, dayTTL, 35*time.Hour)
	assert.LessOrEqual(t, dayTTL, 36*time.Hour+dayJitter)

	tats := c.HGetAll(ctx, base+"rl").Val()
	assert.Equal(t, map[string]string{
		"r": fmt.Sprint(now.Add(time.Second).UnixNano()),
		"i": fmt.Sprint(now.Add(time.Second).UnixNano()),
		"o": fmt.Sprint(now.Add(500 * time.Millisecond).UnixNano()),
	}, tats, "TATs in Unix nanoseconds")

	st := quota.Settlement{Reserved: amt, Used: quota.Amount{}, LeaseID: "l1", ReservedAt: now}
	require.NoError(t, s.Settle(ctx, "tenant-1.a_b", lim, st, now))
	keys, err = scan(ctx, c, s.prefix+":*")
	require.NoError(t, err)
	assert.Equal(t, []string{base + "day:20260314"}, keys, "refunded in full, nothing in flight")
	assert.Equal(t, "0", c.Get(ctx, base+"day:20260314").Val())

	_, err = s.Reserve(ctx, "a}b", lim, amt, quota.Lease{ID: "l", TTL: time.Minute}, now)
	assert.Error(t, err, "a tenant key that breaks the hash tag")
}

// TestOneScriptCall checks that Reserve and Settle are one EVALSHA each once
// the scripts are loaded, and SettleBatch one pipeline.
func TestOneScriptCall(t *testing.T) {
	c := newClient(t)
	h := &counter{}
	c.AddHook(h)
	s := newStore(t, c)
	ctx, now := context.Background(), quotatest.Start()
	require.NoError(t, s.Load(ctx))
	h.take()

	lim := quota.Limits{RequestsPerMinute: 60, Concurrency: 2, TokensPerDay: 1000}
	amt := quota.Amount{Requests: 1, Input: 10}
	_, err := s.Reserve(ctx, "t", lim, amt, quota.Lease{ID: "a", TTL: time.Minute}, now)
	require.NoError(t, err)
	cmds, pipes := h.take()
	assert.Equal(t, []string{"evalsha"}, cmds)
	assert.Zero(t, pipes)

	require.NoError(t, s.Settle(ctx, "t", lim, quota.Settlement{Reserved: amt, Used: amt, LeaseID: "a", ReservedAt: now}, now))
	cmds, _ = h.take()
	assert.Equal(t, []string{"evalsha"}, cmds)

	items := make([]SettleItem, 3)
	for i := range items {
		items[i] = SettleItem{Key: fmt.Sprint("t", i), Limits: lim, Settlement: quota.Settlement{Reserved: amt, Used: amt, ReservedAt: now}, Now: now}
	}
	require.NoError(t, s.SettleBatch(ctx, items))
	cmds, pipes = h.take()
	assert.Equal(t, []string{"evalsha", "evalsha", "evalsha"}, cmds)
	assert.Equal(t, 1, pipes)
}

// TestScriptFlush checks that every call recovers when Redis has lost the
// scripts (a restart, a failover, SCRIPT FLUSH).
func TestScriptFlush(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c)
	ctx, now := context.Background(), quotatest.Start()
	lim := quota.Limits{OutputTokensPerMinute: 6000, OutputBurst: 1000}
	require.NoError(t, s.Load(ctx))

	require.NoError(t, c.ScriptFlush(ctx).Err())
	d, err := s.Reserve(ctx, "t", lim, quota.Amount{Output: 1000}, quota.Lease{}, now)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	require.NoError(t, c.ScriptFlush(ctx).Err())
	st := quota.Settlement{Reserved: quota.Amount{Output: 1000}, Used: quota.Amount{Output: 500}, ReservedAt: now}
	require.NoError(t, s.Settle(ctx, "t", lim, st, now))

	require.NoError(t, c.ScriptFlush(ctx).Err())
	st.Used.Output = 0
	require.NoError(t, s.SettleBatch(ctx, []SettleItem{{Key: "t", Limits: lim, Settlement: st, Now: now}}))

	d, err = s.Reserve(ctx, "t", lim, quota.Amount{Output: 1000}, quota.Lease{}, now)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "both refunds applied")
}

func TestSettleBatch(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c)
	ctx, now := context.Background(), quotatest.Start()
	lim := quota.Limits{OutputTokensPerMinute: 6000, OutputBurst: 1000, Concurrency: 1}
	reserved := quota.Amount{Output: 1000}
	var items []SettleItem
	for i := range 5 {
		key := fmt.Sprint("tenant-", i)
		d, err := s.Reserve(ctx, key, lim, reserved, quota.Lease{ID: "l", TTL: time.Minute}, now)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		items = append(items, SettleItem{Key: key, Limits: lim, Now: now,
			Settlement: quota.Settlement{Reserved: reserved, Used: quota.Amount{Output: int64(i)}, LeaseID: "l", ReservedAt: now}})
	}
	bad := SettleItem{Key: "tenant-bad", Limits: lim, Now: now, Settlement: quota.Settlement{Used: quota.Amount{Output: -1}}}
	err := s.SettleBatch(ctx, append(items, bad))
	require.Error(t, err, "the invalid item")
	assert.Contains(t, err.Error(), "tenant-bad")

	require.NoError(t, s.SettleBatch(ctx, nil))
	for i, it := range items {
		d, err := s.Reserve(ctx, it.Key, lim, quota.Amount{Output: 1000 - int64(i)}, quota.Lease{ID: "m", TTL: time.Minute}, now)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "%s: lease released and refund applied", it.Key)
		assert.Zero(t, d.Tokens.Remaining, it.Key)
	}
}

// TestDeadRedis checks that an unreachable Redis is an error, returned within
// the call's deadline, from every method.
func TestDeadRedis(t *testing.T) {
	refused := net.JoinHostPort("127.0.0.1", freePort(t))

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- conn:
			default:
				_ = conn.Close()
			}
		}
	}()
	t.Cleanup(func() {
		_ = silent.Close()
		<-done
		close(accepted)
		for conn := range accepted {
			_ = conn.Close()
		}
	})

	tests := []struct {
		name string
		addr string
		// timeout is the client's own; the ctx deadline must win over a long one.
		timeout time.Duration
	}{
		{"refused", refused, 100 * time.Millisecond},
		{"silent", silent.Addr().String(), time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{
				Addr: tt.addr, DialTimeout: tt.timeout, ReadTimeout: tt.timeout, WriteTimeout: tt.timeout,
				ContextTimeoutEnabled: true, MaxRetries: -1,
			})
			t.Cleanup(func() { _ = c.Close() })
			s, err := New(c, Options{})
			require.NoError(t, err)
			now := quotatest.Start()
			lim := quota.Limits{RequestsPerMinute: 60}

			calls := map[string]func(ctx context.Context) error{
				"reserve": func(ctx context.Context) error {
					_, err := s.Reserve(ctx, "t", lim, quota.Amount{Requests: 1}, quota.Lease{}, now)
					return err
				},
				"settle": func(ctx context.Context) error {
					return s.Settle(ctx, "t", lim, quota.Settlement{ReservedAt: now}, now)
				},
				"settle_batch": func(ctx context.Context) error {
					return s.SettleBatch(ctx, []SettleItem{{Key: "t", Limits: lim, Now: now}})
				},
				"load": s.Load,
			}
			for name, call := range calls {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				err := call(ctx)
				cancel()
				require.Error(t, err, name)
				assert.True(t, strings.HasPrefix(err.Error(), "redisstore: "), "%s: %v", name, err)
			}
		})
	}
}

// TestMatchesMemstore replays random traffic on both stores and requires the
// same decisions: the Lua scripts and gcra must not drift apart.
func TestMatchesMemstore(t *testing.T) {
	c := newClient(t)
	rs, ms := newStore(t, c), memstore.New()
	ctx, now := context.Background(), quotatest.Start()
	rng := rand.New(rand.NewPCG(7, 11))
	tiers := []quota.Limits{
		{RequestsPerMinute: 7, RequestBurst: 3, InputTokensPerMinute: 13_001, InputBurst: 20_000,
			OutputTokensPerMinute: 997, OutputBurst: 1500, Concurrency: 3, TokensPerDay: 200_000},
		{RequestsPerMinute: 600, OutputTokensPerMinute: 123_457, OutputBurst: 5000},
		{InputTokensPerMinute: 40_000_000, InputBurst: 1_000_000, TokensPerDay: 50_000, Concurrency: 2},
		{},
	}
	type open struct {
		key   string
		lim   quota.Limits
		amt   quota.Amount
		lease string
		at    time.Time
	}
	var inFlight []open
	allowed, denied := 0, 0
	for step := range 3000 {
		switch op := rng.IntN(20); {
		case op < 11:
			tier := rng.IntN(len(tiers))
			key, lim := fmt.Sprint("tier", tier), tiers[tier]
			amt := quota.Amount{Requests: int64(rng.IntN(3)), Input: rng.Int64N(3000), Output: rng.Int64N(1600)}
			lease := quota.Lease{ID: fmt.Sprint("l", step), TTL: time.Duration(1+rng.IntN(20)) * time.Second}
			want, err := ms.Reserve(ctx, key, lim, amt, lease, now)
			require.NoError(t, err)
			got, err := rs.Reserve(ctx, key, lim, amt, lease, now)
			require.NoError(t, err)
			require.Equal(t, want, got, "step %d: reserve %s %+v at %v", step, key, amt, now)
			if got.Allowed {
				allowed++
				inFlight = append(inFlight, open{key, lim, amt, lease.ID, now})
			} else {
				denied++
			}
		case op < 17 && len(inFlight) > 0:
			i := rng.IntN(len(inFlight))
			o := inFlight[i]
			inFlight = append(inFlight[:i], inFlight[i+1:]...)
			used := quota.Amount{Requests: o.amt.Requests, Input: o.amt.Input, Output: rng.Int64N(2 * (o.amt.Output + 1))}
			st := quota.Settlement{Reserved: o.amt, Used: used, LeaseID: o.lease, ReservedAt: o.at}
			require.NoError(t, ms.Settle(ctx, o.key, o.lim, st, now))
			require.NoError(t, rs.Settle(ctx, o.key, o.lim, st, now))
		case op < 19:
			now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
		default:
			now = now.Add(time.Duration(rng.Int64N(int64(5 * time.Hour))))
		}
	}
	t.Logf("%d allowed, %d denied, ending %v", allowed, denied, now)
	assert.Greater(t, allowed, 300)
	assert.Greater(t, denied, 300)
	assert.Greater(t, gcra.Day(now), gcra.Day(quotatest.Start())+2, "the replay crossed days")
}

func BenchmarkReserveSettle(b *testing.B) {
	c := newClient(b)
	s := newStore(b, c)
	if err := s.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	quotatest.Bench(b, s)
}

// TestSettleIfReserved: a settlement whose Reserve's call failed applies
// only if Redis ran that Reserve (its lease is there), with or without a
// concurrency cap, and changes nothing otherwise: a stalled Redis ran such
// Reserves when it resumed, and they stayed charged whole.
func TestSettleIfReserved(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c)
	ctx, now := context.Background(), quotatest.Start()
	lim := quota.Limits{OutputTokensPerMinute: 6000, OutputBurst: 1000} // no concurrency cap
	reserved := quota.Amount{Output: 1000}
	d, err := s.Reserve(ctx, "t", lim, reserved, quota.Lease{ID: "ran", TTL: time.Minute}, now)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	// A settlement for a Reserve Redis never ran refunds nothing.
	never := quota.Settlement{Reserved: reserved, Used: quota.Amount{}, LeaseID: "never", ReservedAt: now, IfReserved: true}
	require.NoError(t, s.Settle(ctx, "t", lim, never, now))
	d, err = s.Reserve(ctx, "t", lim, quota.Amount{Output: 1}, quota.Lease{ID: "probe", TTL: time.Minute}, now)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "still charged: the unknown lease refunded nothing")

	// The one it ran is settled: 400 used, 600 back.
	ran := quota.Settlement{Reserved: reserved, Used: quota.Amount{Output: 400}, LeaseID: "ran", ReservedAt: now, IfReserved: true}
	require.NoError(t, s.Settle(ctx, "t", lim, ran, now))
	d, err = s.Reserve(ctx, "t", lim, quota.Amount{Output: 600}, quota.Lease{ID: "after", TTL: time.Minute}, now)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the refund applied")
	require.NoError(t, s.Settle(ctx, "t", lim, ran, now))
	d, err = s.Reserve(ctx, "t", lim, quota.Amount{Output: 1}, quota.Lease{ID: "again", TTL: time.Minute}, now)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "once: its lease went with the first")
}
