package respindex_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/router/respindex"
)

// clock is a settable time for the Memory index.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestMemoryRemembersForItsTTL(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	m := respindex.NewMemory(time.Hour, 10, c.now)
	a := respindex.Owner{Model: "llama", Backend: "http://a:8000", Tenant: "acme"}
	require.NoError(t, m.Put(ctx, "resp_1", a))
	got, ok, err := m.Get(ctx, "resp_1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, a, got)

	_, ok, err = m.Get(ctx, "resp_unknown")
	require.NoError(t, err)
	require.False(t, ok)

	c.t = c.t.Add(time.Hour) // expired: gone, though not yet dropped
	_, ok, _ = m.Get(ctx, "resp_1")
	require.False(t, ok)
	require.NoError(t, m.Put(ctx, "resp_2", a)) // a Put drops what expired
	require.Equal(t, 1, m.Len())

	require.NoError(t, m.Delete(ctx, "resp_2"))
	_, ok, _ = m.Get(ctx, "resp_2")
	require.False(t, ok)
}

func TestMemoryKeepsTheNewestMaxEntries(t *testing.T) {
	ctx := context.Background()
	m := respindex.NewMemory(time.Hour, 100, nil)
	for i := range 1000 {
		require.NoError(t, m.Put(ctx, "resp_"+strconv.Itoa(i), respindex.Owner{Backend: strconv.Itoa(i)}))
	}
	require.Equal(t, 100, m.Len())
	for _, i := range []int{0, 899} {
		_, ok, _ := m.Get(ctx, "resp_"+strconv.Itoa(i))
		require.False(t, ok, "resp_%d is among the oldest", i)
	}
	for _, i := range []int{900, 999} {
		o, ok, _ := m.Get(ctx, "resp_"+strconv.Itoa(i))
		require.True(t, ok)
		require.Equal(t, strconv.Itoa(i), o.Backend)
	}
	// An id written again is as new as its last Put: the older entry in
	// the eviction order does not take it with it.
	require.NoError(t, m.Put(ctx, "resp_950", respindex.Owner{Backend: "again"}))
	for i := 1000; i < 1060; i++ {
		require.NoError(t, m.Put(ctx, "resp_"+strconv.Itoa(i), respindex.Owner{}))
	}
	o, ok, _ := m.Get(ctx, "resp_950")
	require.True(t, ok)
	require.Equal(t, "again", o.Backend)
	require.Equal(t, 100, m.Len())
}

// TestRedisIndex runs against the Redis on 127.0.0.1:6379 (.ci/run starts
// one), skipping without it.
func TestRedisIndex(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(ctx).Err(); err != nil {
		t.Skipf("no Redis on 127.0.0.1:6379: %v", err)
	}
	prefix := "respindex-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, err := respindex.NewRedis(c, "bad{prefix}", 0)
	require.Error(t, err)
	r, err := respindex.NewRedis(c, prefix, time.Minute)
	require.NoError(t, err)
	a := respindex.Owner{Model: "llama", Backend: "http://a:8000", Tenant: "acme"}
	require.NoError(t, r.Put(ctx, "resp_1", a))
	got, ok, err := r.Get(ctx, "resp_1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, a, got)
	ttl, err := c.TTL(ctx, prefix+":resp:resp_1").Result()
	require.NoError(t, err)
	require.InDelta(t, time.Minute.Seconds(), ttl.Seconds(), 5)

	_, ok, err = r.Get(ctx, "resp_unknown")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, r.Delete(ctx, "resp_1"))
	_, ok, err = r.Get(ctx, "resp_1")
	require.NoError(t, err)
	require.False(t, ok)

	// Redis down: an error, never "not found".
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	rd, err := respindex.NewRedis(down, prefix, 0)
	require.NoError(t, err)
	_, _, err = rd.Get(ctx, "resp_1")
	require.Error(t, err)

	// A Fallback over it finds what this replica put while Redis was
	// down, saying Redis failed; one over the Redis that answers takes
	// Redis's word.
	c2 := &clock{t: time.Unix(1_700_000_000, 0)}
	fb := &respindex.Fallback{Shared: rd, Local: respindex.NewMemory(time.Minute, 10, nil), Now: c2.now}
	require.Error(t, fb.Put(ctx, "resp_2", a), "Redis failed: said once")
	got, ok, err = fb.Get(ctx, "resp_2")
	require.NoError(t, err, "within the backoff Redis is not asked")
	require.True(t, ok)
	require.Equal(t, a, got)
	c2.t = c2.t.Add(respindex.FallbackBackoff)
	got, ok, err = fb.Get(ctx, "resp_2")
	require.Error(t, err, "asked again after the backoff, Redis still fails")
	require.True(t, ok, "and this replica's memory answers")
	require.Equal(t, a, got)
	_, ok, err = fb.Get(ctx, "resp_unknown")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, fb.Delete(ctx, "resp_2"))
	_, ok, _ = fb.Get(ctx, "resp_2")
	require.False(t, ok)

	up := &respindex.Fallback{Shared: r, Local: respindex.NewMemory(time.Minute, 10, nil)}
	require.NoError(t, up.Put(ctx, "resp_3", a))
	require.NoError(t, r.Delete(ctx, "resp_3")) // gone from Redis (another replica deleted it)
	_, ok, err = up.Get(ctx, "resp_3")
	require.NoError(t, err)
	require.False(t, ok, "Redis answered: its word, not this replica's memory")
}
