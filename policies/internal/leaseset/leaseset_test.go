package leaseset

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
)

// newClient is a client of the Redis on 127.0.0.1:6379 (what .ci/run
// provides), or the test skips.
func newClient(t *testing.T) *redis.Client {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:6379", time.Second)
	if err != nil {
		t.Skip("no Redis on 127.0.0.1:6379 (.ci/run starts one)")
	}
	_ = c.Close()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// TestRenewWritesEveryLeaseAndKeepsTheSet: a lease the set lost (Redis
// restarted empty, here deleted by hand) is written back with the new
// expiry as a present one is, and the set is kept at least keep. Until
// 2026-12-05 only leases still present were renewed.
func TestRenewWritesEveryLeaseAndKeepsTheSet(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	lost := fmt.Sprintf("leasesettest:%d:lost", rand.Uint64())
	kept := fmt.Sprintf("leasesettest:%d:kept", rand.Uint64())
	t.Cleanup(func() { c.Del(ctx, lost, kept) })
	require.NoError(t, c.ZAdd(ctx, kept, redis.Z{Score: 1000, Member: "k1"}).Err())
	require.NoError(t, c.PExpire(ctx, kept, time.Hour).Err())

	rs := []Renewal{{Key: lost, IDs: []string{"l1", "l2"}}, {Key: kept, IDs: []string{"k1", "k2"}}}
	n, err := Renew(ctx, c, rs, 5000, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 4, n)
	for _, r := range rs {
		got, err := c.ZRangeWithScores(ctx, r.Key, 0, -1).Result()
		require.NoError(t, err)
		assert.Equal(t, []redis.Z{{Score: 5000, Member: r.IDs[0]}, {Score: 5000, Member: r.IDs[1]}}, got, r.Key)
	}
	ttl := c.PTTL(ctx, lost).Val()
	assert.Greater(t, ttl, 59*time.Second, "a set written back expires no sooner than keep")
	assert.LessOrEqual(t, ttl, time.Minute)
	assert.Greater(t, c.PTTL(ctx, kept).Val(), 59*time.Minute, "a longer expiry is not shortened")

	n, err = Renew(ctx, c, []Renewal{{Key: fmt.Sprintf("leasesettest:%d:none", rand.Uint64())}}, 5000, time.Minute)
	require.NoError(t, err)
	assert.Zero(t, n, "a set with no lease to renew is left alone")
}

func TestRemove(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	key := fmt.Sprintf("leasesettest:%d", rand.Uint64())
	t.Cleanup(func() { c.Del(ctx, key) })
	_, err := Renew(ctx, c, []Renewal{{Key: key, IDs: []string{"a", "b", "c"}}}, 5000, time.Minute)
	require.NoError(t, err)
	require.NoError(t, Remove(ctx, c, []Renewal{{Key: key, IDs: []string{"a", "c", "never"}}, {Key: key + ":other"}}))
	assert.Equal(t, []string{"b"}, c.ZRange(ctx, key, 0, -1).Val())
	require.NoError(t, Remove(ctx, c, nil), "nothing to remove is no error")
}
