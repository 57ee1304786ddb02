package backends

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewEndpoint(t *testing.T) {
	e, err := NewEndpoint("http://127.0.0.1:9001/", 0)
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:9001", e.Address())
	assert.Equal(t, 1, e.Weight())
	for _, bad := range []string{"", "127.0.0.1:9001", "ftp://a", "http://", "::"} {
		_, err := NewEndpoint(bad, 1)
		assert.Error(t, err, bad)
	}
}

func TestInFlightIsBalanced(t *testing.T) {
	e, err := NewEndpoint("http://a:1", 1)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				e.Begin(10)
				e.End(10)
			}
		})
	}
	wg.Wait()
	assert.Zero(t, e.InFlight())
	assert.Zero(t, e.InFlightTokens())
	assert.EqualValues(t, 8000, e.Requests())
}

func TestMarkFailedHoldsOutOncePerTransition(t *testing.T) {
	e, err := NewEndpoint("http://a:1", 1)
	require.NoError(t, err)
	t0 := time.Unix(1000, 0)
	assert.True(t, e.Available(t0))
	assert.True(t, e.MarkFailed(t0, 2*time.Second), "first failure takes it out")
	assert.False(t, e.MarkFailed(t0.Add(time.Second), time.Second), "already out until t0+2s")
	assert.False(t, e.Available(t0.Add(time.Second)))
	assert.Equal(t, t0.Add(2*time.Second), e.AvailableAt())
	assert.True(t, e.Available(t0.Add(2*time.Second)))
	assert.True(t, e.MarkFailed(t0.Add(3*time.Second), time.Second), "a failure after the cooldown is a new transition")
	assert.True(t, e.MarkHealthy())
	assert.False(t, e.MarkHealthy())
	assert.True(t, e.Available(t0))
	assert.Zero(t, e.Failures(), "an attempt counts as it finishes")
}

func TestPoolAvailable(t *testing.T) {
	a, _ := NewEndpoint("http://a:1", 1)
	b, _ := NewEndpoint("http://b:1", 1)
	p, err := NewPool("m", []*Endpoint{a, b})
	require.NoError(t, err)
	now := time.Unix(1000, 0)
	all := p.Available(nil, now)
	assert.Equal(t, []*Endpoint{a, b}, all)
	assert.Equal(t, 0.0, testing.AllocsPerRun(100, func() { p.Available(nil, now) }))
	a.MarkFailed(now, time.Second)
	assert.Equal(t, []*Endpoint{b}, p.Available(nil, now))
	b.MarkFailed(now, time.Second)
	assert.Empty(t, p.Available(nil, now))

	_, err = NewPool("", []*Endpoint{a})
	assert.Error(t, err)
	_, err = NewPool("m", nil)
	assert.Error(t, err)
}

func TestRegistryKeepsEndpointsByAddress(t *testing.T) {
	r := NewRegistry()
	a1, err := r.Get("http://a:1/", 1)
	require.NoError(t, err)
	a2, err := r.Get("http://a:1", 1)
	require.NoError(t, err)
	assert.Same(t, a1, a2)
	a3, err := r.Get("http://a:1", 2)
	require.NoError(t, err)
	assert.Same(t, a1, a3, "a new weight is the same endpoint (SetWeight changes it)")
	assert.Equal(t, 1, a3.Weight())
	a3.SetWeight(0)
	assert.Equal(t, 1, a3.Weight(), "at least 1")
	_, err = r.Get("nope", 1)
	assert.Error(t, err)
}
