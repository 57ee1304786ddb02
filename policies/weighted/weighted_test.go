package weighted

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/policytest"
)

func newBalancer(t testing.TB) policies.Picker {
	t.Helper()
	p, err := New(map[string]any{"seed": 2})
	require.NoError(t, err)
	return p
}

func TestPickByWeight(t *testing.T) {
	eps := policytest.Build(t, policytest.Spec{Weight: 1}, policytest.Spec{Weight: 4, InFlight: 30}, policytest.Spec{Weight: 3}, policytest.Spec{Weight: 2})
	c := policytest.Counts(t, newBalancer(t), &policies.Request{}, eps, 10000)
	for i, want := range []float64{1000, 4000, 3000, 2000} {
		assert.InDelta(t, want, c[i], want*0.1, i)
	}
}

func TestMembershipChangeWithSameShape(t *testing.T) {
	eps := policytest.Build(t, policytest.Spec{Weight: 1}, policytest.Spec{Weight: 9}, policytest.Spec{Weight: 1}, policytest.Spec{Weight: 1})
	p := newBalancer(t)
	policytest.Counts(t, p, &policies.Request{}, eps[:3], 10)
	// Same length, same first, middle and last: the heavy one is swapped out.
	other := []*backends.Endpoint{eps[0], eps[3], eps[2]}
	c := policytest.Counts(t, p, &policies.Request{}, other, 3000)
	for i, n := range c {
		assert.InDelta(t, 1000, n, 150, i)
	}
}

func TestNewRejectsBadParams(t *testing.T) {
	_, err := New(map[string]any{"weights": []int{1}})
	assert.ErrorContains(t, err, "weights")
}

func BenchmarkPick(b *testing.B) {
	policytest.BenchmarkPick(b, newBalancer(b), &policies.Request{})
}
