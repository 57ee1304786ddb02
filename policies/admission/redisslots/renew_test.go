package redisslots_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/admission/redisslots"
	"github.com/sluice-llm/sluice/policies/internal/redistest"
)

// grantedOnceUp is granted, asked again while the call fails (a pooled
// connection to a Redis that restarted).
func grantedOnceUp(t *testing.T, s *redisslots.Slots, l admission.Lease) bool {
	t.Helper()
	var ok bool
	require.Eventually(t, func() bool {
		var err error
		ok, err = granted(s, l)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	return ok
}

// TestTheLeasesOfRunningRequestsSurviveARedisRestart: two requests hold a
// backend's budget of 2; Redis restarts empty (SHUTDOWN NOSAVE, as a
// failover to an empty replica or a FLUSHALL also leaves it); from the
// first renewal after it answers again, the two count again and a third
// is refused. Until 2026-12-05 a renewal renewed only the leases Redis
// still had, so the backend took two more for as long as its two ran.
func TestTheLeasesOfRunningRequestsSurviveARedisRestart(t *testing.T) {
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisslots.New(client, "")
	require.NoError(t, err)
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0)
	require.True(t, grantedOnceUp(t, s, lease(2, admission.Default, "a1", t0)))
	require.True(t, grantedOnceUp(t, s, lease(2, admission.Default, "a2", t0)))
	require.False(t, grantedOnceUp(t, s, lease(2, admission.Default, "a3", t0)))

	rs.Restart()
	at := t0.Add(20 * time.Second)
	var n int
	require.Eventually(t, func() bool {
		n, err = s.Renew(ctx, at)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "a renewal succeeds once Redis is back")
	assert.Equal(t, 2, n)
	held, err := s.Leases(ctx, "m", "b1", at)
	require.NoError(t, err)
	assert.EqualValues(t, 2, held, "both leases are back")
	assert.False(t, grantedOnceUp(t, s, lease(2, admission.Default, "a3", at)), "a1 and a2 still run: the budget is full")

	require.NoError(t, s.Release(ctx, "m", "b1", "a1"))
	assert.True(t, grantedOnceUp(t, s, lease(2, admission.Default, "a3", at)))
}

// beforeRenewal is a go-redis hook that runs f once, ahead of the next
// pipeline of scripts the client sends (a renewal's): Renew has then
// collected the leases it renews.
type beforeRenewal struct {
	mu sync.Mutex
	f  func()
}

func (h *beforeRenewal) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *beforeRenewal) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *beforeRenewal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && (cmds[0].Name() == "evalsha" || cmds[0].Name() == "eval") {
			h.mu.Lock()
			f := h.f
			h.f = nil
			h.mu.Unlock()
			if f != nil {
				f()
			}
		}
		return next(ctx, cmds)
	}
}

// TestALeaseReleasedWhileARenewalRunsDoesNotComeBack: a renewal writes back
// every lease it is sent, so one released after Renew collected the
// leases comes back; Renew then removes it once more, and its slot is
// free at once rather than a TTL later.
func TestALeaseReleasedWhileARenewalRunsDoesNotComeBack(t *testing.T) {
	newSlots(t) // skips without Redis
	hook := &beforeRenewal{}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	client.AddHook(hook)
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisslots.New(client, fmt.Sprintf("test%d", rand.Uint64()))
	require.NoError(t, err)
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0)
	for _, id := range []string{"a1", "a2"} {
		ok, err := granted(s, lease(2, admission.Default, id, t0))
		require.NoError(t, err)
		require.True(t, ok)
	}
	hook.mu.Lock()
	hook.f = func() { require.NoError(t, s.Release(ctx, "m", "b1", "a2")) } // its ZREM runs before the renewal's script
	hook.mu.Unlock()
	at := t0.Add(20 * time.Second)
	n, err := s.Renew(ctx, at)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "a1 is renewed; a2 is not")
	held, err := s.Leases(ctx, "m", "b1", at)
	require.NoError(t, err)
	assert.EqualValues(t, 1, held, "the released lease is not in the set")
	ok, err := granted(s, lease(2, admission.Default, "b1", at))
	require.NoError(t, err)
	assert.True(t, ok, "a2's release made room")
	ok, err = granted(s, lease(2, admission.Default, "b2", at))
	require.NoError(t, err)
	assert.False(t, ok)
}
