package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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

func (c *countedSlots) Acquire(ctx context.Context, l admission.Lease) (admission.Grant, int64, error) {
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
	s := newBreakerSlots(counted, slots.Forget, nil)
	acquire := func(id string) (admission.Grant, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		g, _, err := s.Acquire(ctx, admission.Lease{Pool: "m", Backend: "b", ID: id, Budget: 10, Now: time.Now(), TTL: time.Minute})
		return g, err
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

// TestAdmissionStoreOutageIsLoggedBothWays: an outage of the shared
// admission store logs its first failure at once and its end once, and
// sluice_admission_store_up follows (the end was never logged).
func TestAdmissionStoreOutageIsLoggedBothWays(t *testing.T) {
	var logs syncBuffer
	s := &sharedAdmission{
		log:    slog.New(slog.NewTextHandler(&logs, nil)),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "errors"}),
		up:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "up"}),
	}
	s.up.Set(1)
	s.recovered() // up already: nothing to say
	assert.Empty(t, logs.String())

	s.failed(errors.New("dial tcp: connection refused"))
	s.failed(errors.New("dial tcp: connection refused"))
	assert.Equal(t, 1, strings.Count(logs.String(), "admission store failing"), "one line per 10 s")
	assert.Equal(t, 0.0, value(t, s.up))
	assert.Equal(t, 2.0, value(t, s.errors))

	s.recovered()
	s.recovered()
	assert.Equal(t, 1, strings.Count(logs.String(), "admission store answering again"))
	assert.Equal(t, 1.0, value(t, s.up))

	s.failed(errors.New("i/o timeout"))
	assert.Equal(t, 2, strings.Count(logs.String(), "admission store failing"), "a new outage is logged at once")
}

// value reads a counter's or gauge's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	require.NoError(t, m.Write(&out))
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}
