package random

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/policytest"
)

func newBalancer(t testing.TB, seed int) policies.Picker {
	t.Helper()
	p, err := New(map[string]any{"seed": seed})
	require.NoError(t, err)
	return p
}

func TestPickUniform(t *testing.T) {
	eps := policytest.Build(t, policytest.Spec{InFlight: 50}, policytest.Spec{}, policytest.Spec{}, policytest.Spec{})
	for i, n := range policytest.Counts(t, newBalancer(t, 1), &policies.Request{}, eps, 8000) {
		assert.InDelta(t, 2000, n, 200, i) // load is ignored by design
	}
}

func TestSeedIsReproducible(t *testing.T) {
	eps := policytest.Idle(t, 100)
	a := policytest.Counts(t, newBalancer(t, 9), &policies.Request{}, eps, 300)
	assert.Equal(t, a, policytest.Counts(t, newBalancer(t, 9), &policies.Request{}, eps, 300))
	assert.NotEqual(t, a, policytest.Counts(t, newBalancer(t, 10), &policies.Request{}, eps, 300))
}

func TestNewRejectsBadParams(t *testing.T) {
	_, err := New(map[string]any{"seed": -1})
	assert.ErrorContains(t, err, "seed")
	_, err = New(map[string]any{"spread": 1})
	assert.ErrorContains(t, err, "spread")
}

func BenchmarkPick(b *testing.B) {
	policytest.BenchmarkPick(b, newBalancer(b, 1), &policies.Request{})
}
