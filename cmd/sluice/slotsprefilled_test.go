package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/admission/redisslots"
)

// Prefilled through the batcher ends the leases' pending prompts in a real
// Redis: at once, by the caller, while Run does not run; queued and sent by
// Run, one call for both backends' leases, while it does; and what is
// queued when Run stops is sent before it returns.
func TestBatchedPrefilledEndsPromptsInRedis(t *testing.T) {
	r := startRedis(t)
	opt, err := redis.ParseURL(r.url())
	require.NoError(t, err)
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	slots, err := redisslots.New(client, "prefilled-test")
	require.NoError(t, err)
	ctx := context.Background()
	acquire := func(backend, id string) {
		g, _, err := slots.Acquire(ctx, admission.Lease{Pool: "m", Backend: backend, ID: id, Budget: 10, Class: admission.Default,
			Now: time.Now(), TTL: time.Minute, Patience: 50 * time.Millisecond, Prompt: 100, MaxPrompt: 1000})
		require.NoError(t, err)
		require.Equal(t, admission.Granted, g)
	}
	pending := func(backend string) int64 {
		n, err := slots.PendingPrompt(ctx, "m", backend)
		require.NoError(t, err)
		return n
	}
	var failures []error
	b := newBatchedPrefilled(slots, func(err error) { failures = append(failures, err) })

	acquire("b1", "r-1")
	require.EqualValues(t, 100, pending("b1"))
	require.NoError(t, b.Prefilled(ctx, "m", "b1", "r-1"))
	assert.Zero(t, pending("b1"), "without Run the caller makes the call")

	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Go(func() { b.Run(runCtx) })
	require.Eventually(t, b.running.Load, 5*time.Second, time.Millisecond)
	for i := range 3 {
		acquire("b1", fmt.Sprintf("r-b1-%d", i))
		acquire("b2", fmt.Sprintf("r-b2-%d", i))
	}
	for i := range 3 {
		require.NoError(t, b.Prefilled(ctx, "m", "b1", fmt.Sprintf("r-b1-%d", i)))
		require.NoError(t, b.Prefilled(ctx, "m", "b2", fmt.Sprintf("r-b2-%d", i)))
	}
	assert.Eventually(t, func() bool { return pending("b1") == 0 && pending("b2") == 0 }, 5*time.Second, time.Millisecond,
		"Run sent the queued calls")

	acquire("b1", "r-last")
	b.queue <- prefilledCall{pool: "m", backend: "b1", leases: []string{"r-last"}} // queued as Run stops
	stop()
	running.Wait()
	assert.Zero(t, pending("b1"), "sent before Run returned")
	assert.False(t, b.running.Load())
	assert.Empty(t, failures)
}
