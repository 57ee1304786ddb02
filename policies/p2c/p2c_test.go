package p2c

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/policytest"
)

func newBalancer(t testing.TB) policies.Picker {
	t.Helper()
	p, err := New(map[string]any{"seed": 7})
	require.NoError(t, err)
	return p
}

func TestPickLessLoadedOfTwo(t *testing.T) {
	tests := []struct {
		name  string
		specs []policytest.Spec
		want  int
	}{
		{"in-flight without scrape", []policytest.Spec{{InFlight: 3}, {InFlight: 1}}, 1},
		{"scraped queue", []policytest.Spec{{Load: policytest.Scraped(5, 8)}, {Load: policytest.Scraped(0, 2)}}, 1},
		{"requests since scrape count", []policytest.Spec{{Load: policytest.Scraped(0, 1), AfterScrape: 4}, {Load: policytest.Scraped(0, 3)}}, 1},
		{"stale scrape falls back to in-flight", []policytest.Spec{{Load: policytest.Scraped(0, 0), Stale: true, InFlight: 2}, {InFlight: 1}}, 1},
		{"scrape never below own in-flight", []policytest.Spec{{Load: policytest.Scraped(0, 0), InFlight: 6}, {InFlight: 2}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := policytest.Build(t, tt.specs...)
			c := policytest.Counts(t, newBalancer(t), &policies.Request{}, eps, 50)
			assert.Equal(t, 50, c[tt.want])
		})
	}
}

func TestPickNeverTakesTheBusiest(t *testing.T) {
	eps := policytest.Build(t, policytest.Spec{InFlight: 1}, policytest.Spec{InFlight: 1}, policytest.Spec{InFlight: 9})
	c := policytest.Counts(t, newBalancer(t), &policies.Request{}, eps, 3000)
	assert.Zero(t, c[2])
	assert.InDelta(t, 1500, c[0], 150)
}

func TestPickSpreadsOverIdlePool(t *testing.T) {
	eps := policytest.Idle(t, 8)
	for i, n := range policytest.Counts(t, newBalancer(t), &policies.Request{}, eps, 8000) {
		assert.InDelta(t, 1000, n, 150, i)
	}
}

func TestSeedIsReproducible(t *testing.T) {
	eps := policytest.Idle(t, 64)
	a := policytest.Counts(t, newBalancer(t), &policies.Request{}, eps, 200)
	b := policytest.Counts(t, newBalancer(t), &policies.Request{}, eps, 200)
	assert.Equal(t, a, b)
}

func TestNewRejectsBadParams(t *testing.T) {
	_, err := New(map[string]any{"seed": "x"})
	assert.ErrorContains(t, err, "seed")
	_, err = New(map[string]any{"choices": 3})
	assert.ErrorContains(t, err, "choices")
	_, err = newBalancer(t).Pick(context.Background(), &policies.Request{}, nil)
	assert.ErrorIs(t, err, policies.ErrNoEndpoint)
}

func BenchmarkPick(b *testing.B) {
	policytest.BenchmarkPick(b, newBalancer(b), &policies.Request{PromptTokens: 500})
}
