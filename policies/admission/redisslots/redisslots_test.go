package redisslots_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/admission/redisslots"
)

// newSlots uses the Redis on 127.0.0.1:6379 (what .ci/run provides) under a
// prefix of its own.
func newSlots(t *testing.T) *redisslots.Slots {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:6379", time.Second)
	if err != nil {
		t.Skip("no Redis on 127.0.0.1:6379 (.ci/run starts one)")
	}
	_ = c.Close()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisslots.New(client, fmt.Sprintf("test%d", rand.Uint64()))
	require.NoError(t, err)
	return s
}

// granted is whether s.Acquire took l.
func granted(s *redisslots.Slots, l admission.Lease) (bool, error) {
	g, _, err := s.Acquire(context.Background(), l)
	return g == admission.Granted, err
}

// lease is a lease on backend b1 of pool m for a minute, with a patience
// of 50 ms.
func lease(budget int, c admission.Class, id string, now time.Time) admission.Lease {
	return admission.Lease{Pool: "m", Backend: "b1", ID: id, Budget: budget, Class: c, Now: now, TTL: time.Minute, Patience: 50 * time.Millisecond}
}

func TestAcquireHoldsTheBudgetAcrossCallers(t *testing.T) {
	s := newSlots(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	for i, want := range []bool{true, true, false} {
		ok, err := granted(s, lease(2, admission.Default, fmt.Sprint("l", i), now))
		require.NoError(t, err)
		assert.Equal(t, want, ok, "lease %d of a budget of 2", i)
	}
	n, err := s.Leases(ctx, "m", "b1", now)
	require.NoError(t, err)
	assert.EqualValues(t, 2, n)
	require.NoError(t, s.Release(ctx, "m", "b1", "l0"))
	ok, err := granted(s, lease(2, admission.Default, "l3", now))
	require.NoError(t, err)
	assert.True(t, ok, "a released lease makes room")
	// A dead replica's leases expire.
	ok, err = granted(s, lease(2, admission.Default, "l4", now.Add(2*time.Minute)))
	require.NoError(t, err)
	assert.True(t, ok)
}

func TestABetterClassWaitingElsewhereHoldsBackWorseOnes(t *testing.T) {
	s := newSlots(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	require.NoError(t, s.Wait(ctx, "m", admission.Waiting{Class: admission.Priority, ID: "p1", Since: now, TTL: time.Minute}))
	ok, err := granted(s, lease(5, admission.Default, "d1", now.Add(10*time.Millisecond)))
	require.NoError(t, err)
	assert.True(t, ok, "within patience: go ahead")
	ok, err = granted(s, lease(5, admission.Flex, "f1", now.Add(100*time.Millisecond)))
	require.NoError(t, err)
	assert.False(t, ok, "priority has waited longer than patience")
	p1 := lease(5, admission.Priority, "p1", now.Add(100*time.Millisecond))
	p1.Since = now // the waiting request itself
	ok, err = granted(s, p1)
	require.NoError(t, err)
	assert.True(t, ok, "its own class is not held back by it")
	require.NoError(t, s.Unwait(ctx, "m", admission.Waiting{Class: admission.Priority, ID: "p1"}))
	ok, err = granted(s, lease(5, admission.Flex, "f2", now.Add(200*time.Millisecond)))
	require.NoError(t, err)
	assert.True(t, ok)
}

// Leases that carry prompts hold the backend's pending prefill to
// MaxPrompt over all callers, until each prompt's first token, release or
// PromptUntil; a backend with no lease takes any prompt.
func TestAcquireHoldsThePendingPromptsAcrossCallers(t *testing.T) {
	s := newSlots(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	acquire := func(id string, prompt int64, at time.Time, until time.Time) bool {
		t.Helper()
		l := lease(10, admission.Default, id, at)
		l.MaxPrompt, l.Prompt, l.PromptUntil = 100, prompt, until
		ok, err := granted(s, l)
		require.NoError(t, err)
		return ok
	}
	pending := func() int64 {
		t.Helper()
		n, err := s.PendingPrompt(ctx, "m", "b1")
		require.NoError(t, err)
		return n
	}
	assert.True(t, acquire("a", 500, now, time.Time{}), "an idle backend takes a prompt longer than the bound")
	assert.False(t, acquire("b", 50, now, time.Time{}), "500 tokens pending, bound 100")
	require.NoError(t, s.Prefilled(ctx, "m", "b1", "a"))
	assert.Zero(t, pending())
	assert.True(t, acquire("c", 60, now, time.Time{}))
	assert.True(t, acquire("d", 40, now, time.Time{}), "60 pending, under 100")
	assert.False(t, acquire("e", 5, now, time.Time{}), "100 pending")
	assert.EqualValues(t, 100, pending())
	require.NoError(t, s.Release(ctx, "m", "b1", "c"))
	assert.EqualValues(t, 40, pending(), "a released lease's prompt no longer counts")
	// An answer that comes whole counts until PromptUntil.
	assert.True(t, acquire("w", 300, now, now.Add(time.Second)))
	assert.False(t, acquire("f", 5, now.Add(500*time.Millisecond), time.Time{}))
	assert.True(t, acquire("g", 5, now.Add(2*time.Second), time.Time{}), "w's prompt stopped counting at its until")
	n, err := s.Leases(ctx, "m", "b1", now.Add(2*time.Second))
	require.NoError(t, err)
	assert.EqualValues(t, 4, n, "a, d, w and g hold leases")
	// Expired leases take their prompts with them.
	assert.True(t, acquire("h", 500, now.Add(2*time.Minute), time.Time{}))
	assert.EqualValues(t, 500, pending())
}

// A granted Acquire reports the prompt tokens pending on the backend before
// it, every caller's: what a replica counts ahead of its own prompts
// (backends.Endpoint.StoreOthersPending). A refused one reports none.
func TestAcquireReportsThePendingPrompts(t *testing.T) {
	s := newSlots(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	acquire := func(id string, prompt int64) (admission.Grant, int64) {
		t.Helper()
		l := lease(10, admission.Default, id, now)
		l.MaxPrompt, l.Prompt = 1000, prompt
		g, pending, err := s.Acquire(ctx, l)
		require.NoError(t, err)
		return g, pending
	}
	g, pending := acquire("a", 300)
	assert.Equal(t, admission.Granted, g)
	assert.Zero(t, pending, "nothing pending before the first")
	g, pending = acquire("b", 200)
	assert.Equal(t, admission.Granted, g)
	assert.EqualValues(t, 300, pending, "a's prompt")
	require.NoError(t, s.Prefilled(ctx, "m", "b1", "a"))
	g, pending = acquire("c", 800)
	assert.Equal(t, admission.Granted, g)
	assert.EqualValues(t, 200, pending, "a has its first token: b's prompt")
	g, pending = acquire("d", 5)
	assert.Equal(t, admission.Full, g, "1,000 tokens pending, at the bound")
	assert.Zero(t, pending)
}

// Fresh prompts (not yet in an engine step) count apart from pending ones:
// a lease held to MaxFresh is refused (FreshFull, not Full) while the
// backend's fresh prompts over all callers are at it, until Stepped ends
// them as fresh (they stay pending) or Prefilled or Release ends them; a
// lease without MaxFresh is not held by them, and one without Fresh does
// not count in them.
func TestAcquireHoldsTheFreshPromptsAcrossCallers(t *testing.T) {
	s := newSlots(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	acquire := func(id string, prompt, maxFresh int64, fresh bool) admission.Grant {
		t.Helper()
		l := lease(10, admission.Default, id, now)
		l.MaxPrompt, l.Prompt, l.Fresh, l.MaxFresh = 1000, prompt, fresh, maxFresh
		g, _, err := s.Acquire(ctx, l)
		require.NoError(t, err)
		return g
	}
	sums := func() (pending, fresh int64) {
		t.Helper()
		pending, err := s.PendingPrompt(ctx, "m", "b1")
		require.NoError(t, err)
		fresh, err = s.FreshPrompt(ctx, "m", "b1")
		require.NoError(t, err)
		return pending, fresh
	}
	assert.Equal(t, admission.Granted, acquire("a", 30, 20, true), "an idle backend takes a prompt over the bound")
	assert.Equal(t, admission.FreshFull, acquire("b", 10, 20, true), "30 fresh, bound 20")
	assert.Equal(t, admission.Granted, acquire("c", 10, 0, true), "not held to the bound, it counts")
	assert.Equal(t, admission.Granted, acquire("d", 50, 0, false), "pending, not fresh")
	p, f := sums()
	assert.EqualValues(t, 90, p)
	assert.EqualValues(t, 40, f)
	require.NoError(t, s.Stepped(ctx, "m", "b1", "a"))
	p, f = sums()
	assert.EqualValues(t, 90, p, "a step ends a prompt's fresh count, not its pending one")
	assert.EqualValues(t, 10, f)
	assert.Equal(t, admission.Granted, acquire("e", 15, 20, true), "10 fresh, under 20")
	assert.Equal(t, admission.FreshFull, acquire("f", 1, 20, true), "25 fresh")
	require.NoError(t, s.Prefilled(ctx, "m", "b1", "c"))
	require.NoError(t, s.Release(ctx, "m", "b1", "e"))
	p, f = sums()
	assert.EqualValues(t, 80, p)
	assert.Zero(t, f, "a first token or a release ends the fresh count too")
	assert.Equal(t, admission.Granted, acquire("g", 1, 20, true))
	// An expired lease takes its fresh prompt with it.
	l := lease(10, admission.Default, "h", now.Add(2*time.Minute))
	l.Prompt, l.Fresh, l.MaxFresh = 2, true, 1
	g, _, err := s.Acquire(ctx, l)
	require.NoError(t, err)
	assert.Equal(t, admission.Granted, g)
	p, f = sums()
	assert.EqualValues(t, 2, p)
	assert.EqualValues(t, 2, f, "g's fresh prompt left with its lease")
}

// Within a class and tenant a request does not start while one that came
// more than patience before it waits on another replica; other tenants and
// better classes are not held back by it, and a full backend is told
// apart from a request that waits its turn.
func TestAnEarlierRequestOfTheSameTenantWaitingElsewhereGoesFirst(t *testing.T) {
	s := newSlots(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	require.NoError(t, s.Wait(ctx, "m", admission.Waiting{Class: admission.Flex, Tenant: "acme", ID: "w1", Since: now, TTL: time.Minute}))
	acquire := func(c admission.Class, tenant, id string, since time.Time) admission.Grant {
		t.Helper()
		l := lease(3, c, id, since)
		l.Tenant, l.Since = tenant, since
		g, _, err := s.Acquire(ctx, l)
		require.NoError(t, err)
		return g
	}
	assert.Equal(t, admission.Granted, acquire(admission.Flex, "acme", "a", now.Add(10*time.Millisecond)), "within patience")
	assert.Equal(t, admission.Behind, acquire(admission.Flex, "acme", "b", now.Add(100*time.Millisecond)))
	assert.Equal(t, admission.Granted, acquire(admission.Flex, "other", "c", now.Add(100*time.Millisecond)), "another tenant")
	assert.Equal(t, admission.Granted, acquire(admission.Priority, "acme", "d", now.Add(100*time.Millisecond)), "a better class")
	assert.Equal(t, admission.Full, acquire(admission.Priority, "acme", "e", now.Add(100*time.Millisecond)), "budget 3 held")
	require.NoError(t, s.Release(ctx, "m", "b1", "a"))
	require.NoError(t, s.Unwait(ctx, "m", admission.Waiting{Class: admission.Flex, Tenant: "acme", ID: "w1"}))
	assert.Equal(t, admission.Granted, acquire(admission.Flex, "acme", "b", now.Add(100*time.Millisecond)), "the earlier one left")
}

// A waiting request whose Unwait was lost (its replica died) holds the
// others back no longer than its class's longest wait, not the lease TTL.
func TestALostWaitExpiresWithItsClassesWait(t *testing.T) {
	s := newSlots(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	require.NoError(t, s.Wait(ctx, "m", admission.Waiting{Class: admission.Priority, ID: "lost", Since: now, TTL: time.Hour}))
	at := func(d time.Duration) bool {
		t.Helper()
		l := lease(5, admission.Flex, "f"+d.String(), now.Add(d))
		l.MaxWait[admission.Priority] = 5 * time.Second
		ok, err := granted(s, l)
		require.NoError(t, err)
		return ok
	}
	assert.False(t, at(time.Second), "it may still be waiting")
	assert.True(t, at(6*time.Second), "past priority's 5 s, it is gone")
}

// Between the tenants of a class and tier priority, a request does not
// start while a tenant served fewer weighted tokens there waits on another
// replica; a tenant back from idle starts level with where service had got
// to (it banks no credit), and other tier priorities are not compared.
func TestTheLeastServedTenantWaitingElsewhereGoesFirst(t *testing.T) {
	s := newSlots(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	acquire := func(tenant, id string, prio int, cost float64) admission.Grant {
		t.Helper()
		l := lease(100, admission.Default, id, now)
		l.Tenant, l.TierPriority, l.Cost = tenant, prio, cost
		g, _, err := s.Acquire(ctx, l)
		require.NoError(t, err)
		return g
	}
	wait := func(tenant, id string) admission.Waiting {
		t.Helper()
		w := admission.Waiting{Class: admission.Default, Tenant: tenant, ID: id, Since: now, TTL: time.Minute}
		require.NoError(t, s.Wait(ctx, "m", w))
		return w
	}
	for i := range 3 {
		require.Equal(t, admission.Granted, acquire("heavy", fmt.Sprint("h", i), 0, 100), "nobody else waits")
	}
	// heavy has been served 300 weighted tokens; service got to 200.
	w1 := wait("light", "w1")
	assert.Equal(t, admission.Behind, acquire("heavy", "h3", 0, 100), "the light tenant, served less, waits elsewhere")
	assert.Equal(t, admission.Granted, acquire("other-tier", "o1", 1, 100), "another tier priority is not compared")
	assert.Equal(t, admission.Granted, acquire("light", "l1", 0, 150), "the least served goes")
	// The light tenant came back from idle at 200, not at 0: it is now at
	// 350, past the heavy tenant's 300, though it was served 150 in all.
	wait("light", "w2")
	assert.Equal(t, admission.Granted, acquire("heavy", "h4", 0, 100), "the light tenant banked no credit while idle")
	// heavy: 400. The light tenant's waiting request goes first again.
	assert.Equal(t, admission.Behind, acquire("heavy", "h5", 0, 100))
	require.NoError(t, s.Unwait(ctx, "m", w1))
	require.NoError(t, s.Unwait(ctx, "m", admission.Waiting{Class: admission.Default, Tenant: "light", ID: "w2"}))
	assert.Equal(t, admission.Granted, acquire("heavy", "h5", 0, 100), "nobody waits any more")
}

// Waiting requests whose replica died (their Unwait never comes) hold back
// neither their tenant's later requests nor the other tenants of the class
// once the replica has stopped beating, rather than until the class's
// longest wait (ten minutes for flex); a live replica's keep doing so.
func TestADeadReplicasWaitsHoldNothingBack(t *testing.T) {
	s := newSlots(t)
	s.AliveTTL = 200 * time.Millisecond
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	at := func(id string) admission.Grant {
		t.Helper()
		l := lease(100, admission.Flex, id, now.Add(time.Second))
		l.Tenant, l.Cost = "heavy", 100
		l.MaxWait[admission.Flex] = 10 * time.Minute
		g, _, err := s.Acquire(ctx, l)
		require.NoError(t, err)
		if g == admission.Granted {
			require.NoError(t, s.Release(ctx, "m", "b1", id))
		}
		return g
	}
	wait := func(tenant, id string) {
		t.Helper()
		require.NoError(t, s.Wait(ctx, "m", admission.Waiting{Class: admission.Flex, Tenant: tenant, ID: id, Since: now, TTL: time.Hour}))
	}
	require.Equal(t, admission.Granted, at("h0"))
	wait("heavy", "r1-own")
	assert.Equal(t, admission.Behind, at("h1"), "heavy's earlier request waits on replica r1, alive")
	wait("light", "r2-lost")
	wait("heavy", "r2-old")
	require.NoError(t, s.Beat(ctx, "m", "r1"))
	time.Sleep(150 * time.Millisecond)
	require.NoError(t, s.Beat(ctx, "m", "r1")) // r1 beats, r2 does not
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, s.Unwait(ctx, "m", admission.Waiting{Class: admission.Flex, Tenant: "heavy", ID: "r1-own"}))
	assert.Equal(t, admission.Granted, at("h2"), "r2 stopped beating: its requests, heavy's earlier one and the light tenant's, hold nothing back")
	wait("light", "r1-live")
	assert.Equal(t, admission.Behind, at("h3"), "the light tenant's request on r1, which beats, goes first")
}

// TestLeasesLiveWhileRenewedAndEndAfterTheirReplicaStops: one replica's
// renewed lease outlives its TTL; a released one is not renewed; once the
// replica stops renewing (it died), its slot is back within the TTL. Until
// 2026-12-02 leases were never renewed, so the TTL had to outlast the
// longest request (10 minutes), and a dead replica's slots stayed taken as
// long.
func TestLeasesLiveWhileRenewedAndEndAfterTheirReplicaStops(t *testing.T) {
	newSlots(t) // skips without Redis
	prefix := fmt.Sprintf("test%d", rand.Uint64())
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	a, err := redisslots.New(client, prefix)
	require.NoError(t, err)
	b, err := redisslots.New(client, prefix) // another replica
	require.NoError(t, err)
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0)
	for _, id := range []string{"a1", "a2"} {
		ok, err := granted(a, lease(2, admission.Default, id, t0))
		require.NoError(t, err)
		require.True(t, ok)
	}
	n, err := a.Renew(ctx, t0.Add(50*time.Second)) // a1 and a2 until 110 s
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	require.NoError(t, a.Release(ctx, "m", "b1", "a2"))
	n, err = b.Renew(ctx, t0.Add(50*time.Second))
	require.NoError(t, err)
	assert.Zero(t, n, "a replica renews only its own leases")

	at := t0.Add(70 * time.Second) // past a1's first TTL
	ok, err := granted(b, lease(2, admission.Default, "b1", at))
	require.NoError(t, err)
	assert.True(t, ok, "a2's release made room")
	ok, err = granted(b, lease(2, admission.Default, "b2", at))
	require.NoError(t, err)
	assert.False(t, ok, "a1, renewed, holds its slot past its first TTL")

	n, err = a.Renew(ctx, at) // a1 until 130 s; a2, released, is not renewed
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	// a stops renewing: a1 ends a TTL after its last renewal.
	ok, err = granted(b, lease(2, admission.Default, "b2", t0.Add(130*time.Second-time.Millisecond)))
	require.NoError(t, err)
	assert.False(t, ok)
	ok, err = granted(b, lease(2, admission.Default, "b2", t0.Add(130*time.Second)))
	require.NoError(t, err)
	assert.True(t, ok, "a1's slot is back a TTL after its replica stopped renewing it")
	// A replica that renews again (it was cut off from Redis, not dead)
	// writes back the leases it still holds: their requests still run.
	// (Until 2026-12-05 an expired lease stayed gone, and with it the
	// leases of every running request after Redis restarted empty.)
	n, err = a.Renew(ctx, t0.Add(131*time.Second))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	ok, err = granted(b, lease(2, admission.Default, "b3", t0.Add(131*time.Second)))
	require.NoError(t, err)
	assert.False(t, ok, "b2 and a1, written back, fill the budget")
}
