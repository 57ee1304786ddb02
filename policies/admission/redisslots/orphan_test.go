package redisslots_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/admission"
	"github.com/sluice-llm/sluice/policies/admission/redisslots"
	"github.com/sluice-llm/sluice/policies/roundrobin"
)

// lateSlots is a store whose next Acquire is granted in Redis but reported
// as failed, as when the 50 ms deadline passes while the script runs.
type lateSlots struct {
	*redisslots.Slots
	failNext atomic.Bool
}

func (s *lateSlots) Acquire(ctx context.Context, l admission.Lease) (admission.Grant, int64, error) {
	ok, pending, err := s.Slots.Acquire(ctx, l)
	if err == nil && s.failNext.CompareAndSwap(true, false) {
		return admission.Full, 0, errors.New("deadline exceeded after the script ran")
	}
	return ok, pending, err
}

// TestALeaseGrantedLateIsReleased: an Acquire that fails on the replica
// after Redis granted it leaves a lease there; the gate releases it with
// its next release, so the slot is not held until lease_ttl.
func TestALeaseGrantedLateIsReleased(t *testing.T) {
	store := &lateSlots{Slots: newSlots(t)}
	e, err := backends.NewEndpoint("http://10.0.0.1:8000", 1)
	require.NoError(t, err)
	pool, err := backends.NewPool("m", []*backends.Endpoint{e})
	require.NoError(t, err)
	rr, err := roundrobin.New(nil)
	require.NoError(t, err)
	g, err := admission.NewGate(pool, rr, admission.Options{
		Budget: func(*backends.Endpoint) int { return 4 },
		Shared: store, Pool: "m", Replicas: 1, LeaseTTL: time.Hour,
	})
	require.NoError(t, err)
	ctx := context.Background()
	leases := func() int64 {
		n, err := store.Leases(ctx, "m", e.Address(), time.Now())
		require.NoError(t, err)
		return n
	}

	store.failNext.Store(true)
	late, err := g.Admit(ctx, admission.Request{Class: admission.Default, Routing: &policies.Request{Model: "m"}})
	require.NoError(t, err, "a failed store call admits within this replica's share")
	assert.EqualValues(t, 1, leases(), "Redis granted the lease the replica did not hear of")

	next, err := g.Admit(ctx, admission.Request{Class: admission.Default, Routing: &policies.Request{Model: "m"}})
	require.NoError(t, err)
	assert.EqualValues(t, 2, leases())
	next.Release()
	late.Release()
	assert.Zero(t, leases(), "the orphaned lease went with the next release")
}
