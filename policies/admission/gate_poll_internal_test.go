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
		g, _ := oneEndpointGate(t, Options{
			Budget:   func(*backends.Endpoint) int { return 1 },
			Patience: 10 * time.Millisecond,
			MaxWait:  [NumClasses]time.Duration{time.Minute, time.Minute, time.Minute},
		})
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

// A shed request's Retry-After is the time the requests waiting ahead of
// it take at the rate requests were bound lately, within 1 s (5 s for
// flex) and a minute.
func TestRetryAfterFollowsTheQueueAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := oneEndpointGate(t, Options{
			Budget:    func(*backends.Endpoint) int { return 1 },
			Patience:  time.Hour,
			QueueSize: 1000,
			MaxWait:   [NumClasses]time.Duration{time.Hour, time.Hour, time.Hour},
		})
		r := func(c Class) Request {
			return Request{Class: c, Tenant: "a", Weight: 1, Tokens: 1, Routing: &policies.Request{Model: "m"}}
		}
		assert.Equal(t, time.Second, g.retryAfter(Priority), "nothing bound yet: the least")
		assert.Equal(t, 5*time.Second, g.retryAfter(Flex))

		ctx, cancel := context.WithCancel(context.Background())
		for range 60 { // ten a second for six seconds
			tk, err := g.Admit(ctx, r(Default))
			require.NoError(t, err)
			time.Sleep(100 * time.Millisecond)
			tk.Release()
		}
		held, err := g.Admit(ctx, r(Default))
		require.NoError(t, err)
		done := make(chan error, 130)
		for i := range 130 {
			c := Flex
			if i < 30 {
				c = Priority
			}
			go func() {
				_, err := g.Admit(ctx, r(c))
				done <- err
			}()
		}
		synctest.Wait()
		require.Equal(t, 130, g.Waiting())
		rate := g.binds.perSecond(g.now().UnixNano())
		require.InDelta(t, 10, rate, 0.5)
		assert.InDelta(t, float64(31)/rate, g.retryAfter(Priority).Seconds(), 0.01, "30 priority requests ahead, and itself")
		assert.InDelta(t, float64(131)/rate, g.retryAfter(Flex).Seconds(), 0.01, "every waiting request ahead")
		time.Sleep(time.Minute) // nothing bound: the rate so far falls
		assert.Equal(t, time.Minute, g.retryAfter(Flex), "at most a minute")

		cancel()
		for range 130 {
			assert.ErrorIs(t, <-done, context.Canceled)
		}
		held.Release()
	})
}

// oneEndpointGate is a gate with options o over one endpoint, picked by
// round robin; the external tests call it as OneEndpointGate.
func oneEndpointGate(t *testing.T, o Options) (*Gate, *backends.Endpoint) {
	t.Helper()
	e, err := backends.NewEndpoint("http://10.0.0.1:8000", 1)
	require.NoError(t, err)
	pool, err := backends.NewPool("m", []*backends.Endpoint{e})
	require.NoError(t, err)
	rr, err := roundrobin.New(nil)
	require.NoError(t, err)
	g, err := NewGate(pool, rr, o)
	require.NoError(t, err)
	return g, e
}

// OneEndpointGate is oneEndpointGate for the package's external tests.
var OneEndpointGate = oneEndpointGate
