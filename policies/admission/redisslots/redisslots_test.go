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

func TestAcquireHoldsTheBudgetAcrossCallers(t *testing.T) {
	s := newSlots(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	for i, want := range []bool{true, true, false} {
		ok, err := s.Acquire(ctx, "m", "b1", 2, admission.Default, fmt.Sprint("l", i), time.Minute, 50*time.Millisecond, now)
		require.NoError(t, err)
		assert.Equal(t, want, ok, "lease %d of a budget of 2", i)
	}
	n, err := s.Leases(ctx, "m", "b1", now)
	require.NoError(t, err)
	assert.EqualValues(t, 2, n)
	require.NoError(t, s.Release(ctx, "m", "b1", "l0"))
	ok, err := s.Acquire(ctx, "m", "b1", 2, admission.Default, "l3", time.Minute, 50*time.Millisecond, now)
	require.NoError(t, err)
	assert.True(t, ok, "a released lease makes room")
	// A dead replica's leases expire.
	ok, err = s.Acquire(ctx, "m", "b1", 2, admission.Default, "l4", time.Minute, 50*time.Millisecond, now.Add(2*time.Minute))
	require.NoError(t, err)
	assert.True(t, ok)
}

func TestABetterClassWaitingElsewhereHoldsBackWorseOnes(t *testing.T) {
	s := newSlots(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	require.NoError(t, s.Wait(ctx, "m", admission.Priority, "p1", time.Minute, now))
	ok, err := s.Acquire(ctx, "m", "b1", 5, admission.Default, "d1", time.Minute, 50*time.Millisecond, now.Add(10*time.Millisecond))
	require.NoError(t, err)
	assert.True(t, ok, "within patience: go ahead")
	ok, err = s.Acquire(ctx, "m", "b1", 5, admission.Flex, "f1", time.Minute, 50*time.Millisecond, now.Add(100*time.Millisecond))
	require.NoError(t, err)
	assert.False(t, ok, "priority has waited longer than patience")
	ok, err = s.Acquire(ctx, "m", "b1", 5, admission.Priority, "p1", time.Minute, 50*time.Millisecond, now.Add(100*time.Millisecond))
	require.NoError(t, err)
	assert.True(t, ok, "the same class is not held back")
	require.NoError(t, s.Unwait(ctx, "m", admission.Priority, "p1"))
	ok, err = s.Acquire(ctx, "m", "b1", 5, admission.Flex, "f2", time.Minute, 50*time.Millisecond, now.Add(200*time.Millisecond))
	require.NoError(t, err)
	assert.True(t, ok)
}
