package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies/quota"
	"github.com/sluice-llm/sluice/policies/quota/internal/gcra"
	"github.com/sluice-llm/sluice/policies/quota/quotatest"
)

func TestContract(t *testing.T) {
	quotatest.Run(t, func(*testing.T) quota.Store { return New() })
}

func (s *Store) tenantCount() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.tenants)
		sh.mu.Unlock()
	}
	return n
}

func TestForgetsIdleTenants(t *testing.T) {
	tests := []struct {
		name string
		lim  quota.Limits
		// idleAfter is how long after its last request a tenant is idle.
		idleAfter time.Duration
	}{
		{"rate", quota.Limits{RequestsPerMinute: 60, RequestBurst: 10}, time.Second},
		{"lease", quota.Limits{Concurrency: 5}, time.Minute},
		{"day", quota.Limits{TokensPerDay: 1e6}, gcra.DayTTL(gcra.Day(quotatest.Start()), quotatest.Start())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			ctx, now := context.Background(), quotatest.Start()
			const tenants = 3 * sweepEvery
			for i := range tenants {
				d, err := s.Reserve(ctx, strconv.Itoa(i), tt.lim, quota.Amount{Requests: 1, Input: 10}, quota.Lease{ID: "l", TTL: time.Minute}, now)
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			assert.Equal(t, tenants, s.tenantCount())

			// Not yet idle: the sweeps that run keep everyone.
			for i := range 2 * sweepEvery * shardCount {
				_, err := s.Reserve(ctx, "early-"+strconv.Itoa(i), quota.Limits{}, quota.Amount{}, quota.Lease{}, now.Add(tt.idleAfter-time.Millisecond))
				require.NoError(t, err)
			}
			assert.Equal(t, tenants, s.tenantCount())

			// Idle: every shard sweeps at least once more. The calls that
			// tick the shards are other tenants', which record nothing.
			for i := range 2 * sweepEvery * shardCount {
				_, err := s.Reserve(ctx, "other-"+strconv.Itoa(i), quota.Limits{}, quota.Amount{}, quota.Lease{}, now.Add(tt.idleAfter))
				require.NoError(t, err)
			}
			assert.Zero(t, s.tenantCount())
		})
	}
}

func TestSettleOfForgottenTenantLeavesNothing(t *testing.T) {
	s := New()
	now := quotatest.Start()
	lim := quota.Limits{OutputTokensPerMinute: 600, Concurrency: 1}
	st := quota.Settlement{Reserved: quota.Amount{Output: 100}, Used: quota.Amount{Output: 10}, LeaseID: "gone", ReservedAt: now}
	require.NoError(t, s.Settle(context.Background(), "ghost", lim, st, now))
	assert.Zero(t, s.tenantCount(), "a refund to an unknown tenant creates nothing")
}

func BenchmarkReserveSettle(b *testing.B) {
	quotatest.Bench(b, New())
}
