package admission

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/roundrobin"
)

// TestPollsDispatchOncePerPatience: however many requests wait, their
// polls dispatch at most once per Patience (pollDue), not once per waiter.
func TestPollsDispatchOncePerPatience(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := backends.NewEndpoint("http://10.0.0.1:8000", 1)
		require.NoError(t, err)
		pool, err := backends.NewPool("m", []*backends.Endpoint{e})
		require.NoError(t, err)
		rr, err := roundrobin.New(nil)
		require.NoError(t, err)
		g, err := NewGate(pool, rr, Options{
			Budget:   func(*backends.Endpoint) int { return 1 },
			Patience: 10 * time.Millisecond,
			MaxWait:  [NumClasses]time.Duration{time.Minute, time.Minute, time.Minute},
		})
		require.NoError(t, err)
		r := Request{Class: Default, Tenant: "a", Weight: 1, Tokens: 1, Routing: &policies.Request{Model: "m"}}
		held, err := g.Admit(context.Background(), r)
		require.NoError(t, err)

		ctx, cancel := context.WithCancel(context.Background())
		const waiters = 50
		done := make(chan error, waiters)
		for range waiters {
			go func() {
				_, err := g.Admit(ctx, r)
				done <- err
			}()
		}
		synctest.Wait()
		require.Equal(t, waiters, g.Waiting())
		start := g.polls.Load()
		time.Sleep(time.Second) // 100 dispatch intervals
		synctest.Wait()
		polls := g.polls.Load() - start
		assert.LessOrEqual(t, polls, int64(101), "one dispatch per interval, not one per waiter (%d waiters)", waiters)
		assert.GreaterOrEqual(t, polls, int64(90), "the polls still dispatch every interval")

		cancel()
		for range waiters {
			assert.ErrorIs(t, <-done, context.Canceled)
		}
		held.Release()
	})
}
