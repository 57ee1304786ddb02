package main

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/admission/redisslots"
)

// countedSlots counts the calls that reach the store.
type countedSlots struct {
	admission.Slots
	acquires, releases atomic.Int64
}

func (c *countedSlots) Acquire(ctx context.Context, l admission.Lease) (admission.Grant, error) {
	c.acquires.Add(1)
	return c.Slots.Acquire(ctx, l)
}

func (c *countedSlots) Release(ctx context.Context, pool, backend, lease string) error {
	c.releases.Add(1)
	return c.Slots.Release(ctx, pool, backend, lease)
}

// TestAHungAdmissionStoreIsAskedOncePerProbe: with the shared store's
// Redis stopped (SIGSTOP: it accepts and never answers), the first
// Acquire waits its timeout and the next ones fail at once instead of each
// waiting 50 ms under the gate's lock; so does a release, whose lease is
// renewed no more; once Redis answers, the next probe finds it and calls
// flow again.
func TestAHungAdmissionStoreIsAskedOncePerProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	rs := startRedis(t)
	client, err := redisClient(rs.url(), 50*time.Millisecond)
	require.NoError(t, err)
	defer client.Close()
	slots, err := redisslots.New(client, "breaker")
	require.NoError(t, err)
	counted := &countedSlots{Slots: slots}
	s := newBreakerSlots(counted, slots.Forget)
	acquire := func(id string) (admission.Grant, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		return s.Acquire(ctx, admission.Lease{Pool: "m", Backend: "b", ID: id, Budget: 10, Now: time.Now(), TTL: time.Minute})
	}
	g, err := acquire("a")
	require.NoError(t, err)
	require.Equal(t, admission.Granted, g)

	require.NoError(t, rs.cmd.Process.Signal(syscall.SIGSTOP))
	defer func() { _ = rs.cmd.Process.Signal(syscall.SIGCONT) }()
	before := counted.acquires.Load()
	for i := range 20 {
		_, err := acquire("x" + string(rune('a'+i)))
		assert.Error(t, err)
	}
	// One call reached the store and waited; the rest failed at once (a
	// probe every 250 ms could add one on a slow machine).
	assert.LessOrEqual(t, counted.acquires.Load()-before, int64(2))
	rctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	assert.Error(t, s.Release(rctx, "m", "b", "a"))
	cancel()
	assert.Zero(t, counted.releases.Load(), "a release fails at once too (the gate sends it again later)")

	require.NoError(t, rs.cmd.Process.Signal(syscall.SIGCONT))
	require.Eventually(t, func() bool {
		g, err := acquire("back")
		return err == nil && g == admission.Granted
	}, 5*time.Second, 20*time.Millisecond, "calls flow again once Redis answers")
	n, err := slots.Renew(context.Background(), time.Now())
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the lease released while Redis hung is renewed no more; the new one is")
}
