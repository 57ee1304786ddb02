package sessionaffinity

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/policytest"
)

func newBalancer(t testing.TB, params map[string]any) policies.Picker {
	return policytest.Seeded(t, New, params, 4)
}

func pick(t *testing.T, p policies.Picker, key string, eps []*backends.Endpoint) int {
	t.Helper()
	e, err := p.Pick(t.Context(), &policies.Request{SessionKey: key}, eps)
	require.NoError(t, err)
	return policytest.Index(eps, e)
}

func TestSessionSticks(t *testing.T) {
	eps := policytest.Fleet(t, 16)
	p := newBalancer(t, nil)
	c := make([]int, len(eps))
	for s := range 400 {
		key := fmt.Sprintf("session-%d", s)
		want := pick(t, p, key, eps)
		c[want]++
		for range 3 {
			assert.Equal(t, want, pick(t, p, key, eps), key)
		}
	}
	for i, n := range c {
		assert.Positive(t, n, "endpoint %d owns no session", i)
	}
}

func TestReplicasAgree(t *testing.T) {
	// Two replicas: different endpoint objects, same addresses and seeds
	// that differ.
	a, b := policytest.Idle(t, 10), policytest.Idle(t, 10)
	pa, err := New(map[string]any{"seed": 1})
	require.NoError(t, err)
	pb, err := New(map[string]any{"seed": 2})
	require.NoError(t, err)
	for s := range 100 {
		key := fmt.Sprintf("user-%d", s)
		assert.Equal(t, pick(t, pa, key, a), pick(t, pb, key, b), key)
	}
}

func TestOverloadedWorkerSpills(t *testing.T) {
	eps := policytest.Idle(t, 6)
	p := newBalancer(t, nil)
	home := pick(t, p, "alice", eps)
	for range 3 {
		eps[home].Begin(100)
	}
	// Mean 0.5: limit 2 × 1.5 = 3, and the home has 3.
	spill := pick(t, p, "alice", eps)
	assert.NotEqual(t, home, spill)
	eps[home].End(100)
	assert.Equal(t, home, pick(t, p, "alice", eps))
}

func TestNoSessionFallsBackToTwoChoices(t *testing.T) {
	eps := policytest.Build(t, policytest.Spec{Load: policytest.Scraped(3, 5)}, policytest.Spec{InFlight: 2})
	c := policytest.Counts(t, newBalancer(t, nil), &policies.Request{}, eps, 40)
	assert.Equal(t, 40, c[1])
}

func TestNewRejectsBadParams(t *testing.T) {
	tests := []struct {
		params map[string]any
		field  string
	}{
		{map[string]any{"load_factor": -0.5}, "load_factor"},
		{map[string]any{"probes": 0}, "probes"},
		{map[string]any{"sample": 65}, "sample"},
		{map[string]any{"vnodes": 0}, "vnodes"},
		{map[string]any{"header": "x-session"}, "header"},
	}
	for _, tt := range tests {
		_, err := New(tt.params)
		assert.ErrorContains(t, err, tt.field)
	}
}

func BenchmarkPick(b *testing.B) {
	policytest.BenchmarkPick(b, newBalancer(b, nil), &policies.Request{SessionKey: "conversation-0123456789"})
}
