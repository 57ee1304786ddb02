package prefixaffinity

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/policytest"
)

func newBalancer(t testing.TB, params map[string]any) policies.Picker {
	return policytest.Seeded(t, New, params, 3)
}

// prompt returns the chained block hashes of a prompt whose first shared
// blocks are common to every prompt with the same family, and the rest
// unique to id.
func prompt(family, id uint64, shared, blocks int) *policies.Request {
	h := make([]uint64, blocks)
	var prev uint64
	for i := range h {
		x := family
		if i >= shared {
			x = id<<32 | family
		}
		prev = policies.Mix(prev ^ x ^ uint64(i))
		h[i] = prev
	}
	return &policies.Request{PromptTokens: 16 * blocks, PrefixHashes: h}
}

func pick(t *testing.T, p policies.Picker, r *policies.Request, eps []*backends.Endpoint) int {
	t.Helper()
	e, err := p.Pick(t.Context(), r, eps)
	require.NoError(t, err)
	return policytest.Index(eps, e)
}

func TestSamePrefixSameEndpoint(t *testing.T) {
	eps := policytest.Idle(t, 8)
	p := newBalancer(t, nil)
	for f := range uint64(50) {
		want := pick(t, p, prompt(f, 0, 8, 8), eps)
		for id := range uint64(5) {
			// Same first 8 blocks, different tails.
			assert.Equal(t, want, pick(t, p, prompt(f, id, 8, 20), eps))
		}
	}
}

func TestShortPromptUsesDeepestHash(t *testing.T) {
	eps := policytest.Idle(t, 8)
	p := newBalancer(t, nil)
	r := prompt(1, 1, 0, 3)
	want := pick(t, p, r, eps)
	for range 20 {
		assert.Equal(t, want, pick(t, p, r, eps))
	}
}

func TestKeysSpreadOverPool(t *testing.T) {
	eps := policytest.Idle(t, 8)
	p := newBalancer(t, nil)
	c := make([]int, len(eps))
	for f := range uint64(4000) {
		c[pick(t, p, prompt(f, 0, 8, 8), eps)]++
	}
	for i, n := range c {
		assert.InDelta(t, 500, n, 200, i)
	}
}

func TestLoadBoundOverflowsToSameSuccessor(t *testing.T) {
	eps := policytest.Idle(t, 8)
	p := newBalancer(t, nil)
	r := prompt(9, 0, 8, 8)
	home := pick(t, p, r, eps)
	for range 4 {
		eps[home].Begin(100)
	}
	// Mean queue 0.5: limit (1.25)(1.5) = 1.875, the home is over it.
	next := pick(t, p, r, eps)
	assert.NotEqual(t, home, next)
	for range 20 {
		assert.Equal(t, next, pick(t, p, r, eps), "overflow is deterministic")
	}
	// With every endpoint loaded alike, the home takes its keys again.
	for i := range eps {
		for eps[i].InFlight() < 4 {
			eps[i].Begin(100)
		}
	}
	assert.Equal(t, home, pick(t, p, r, eps))
}

func TestProbesBoundTheSearch(t *testing.T) {
	specs := []policytest.Spec{{InFlight: 9}, {InFlight: 9}, {InFlight: 9}, {InFlight: 9}, {InFlight: 1}}
	eps := policytest.Build(t, specs...)
	// load_factor 0: the limit is mean+1 = 8.4, so only the endpoint with
	// one in flight is under it, and probing the whole ring finds it.
	p := newBalancer(t, map[string]any{"load_factor": 0, "probes": 5})
	for f := range uint64(20) {
		assert.Equal(t, 4, pick(t, p, prompt(f, 0, 8, 8), eps))
	}
	// With probes 2, a key whose first two endpoints are both over the
	// limit takes the less loaded of them: a tie here, so the first.
	p = newBalancer(t, map[string]any{"load_factor": 0, "probes": 2})
	elsewhere := 0
	for f := range uint64(200) {
		if pick(t, p, prompt(f, 0, 8, 8), eps) != 4 {
			elsewhere++
		}
	}
	assert.Greater(t, elsewhere, 50)
	assert.Less(t, elsewhere, 150)
}

func TestRemovingAnEndpointMovesOnlyItsKeys(t *testing.T) {
	eps := policytest.Idle(t, 10)
	p := newBalancer(t, nil)
	fewer := append(append([]*backends.Endpoint{}, eps[:3]...), eps[4:]...)
	for f := range uint64(500) {
		r := prompt(f, 0, 8, 8)
		before := eps[pick(t, p, r, eps)]
		after := fewer[pick(t, p, r, fewer)]
		if before != eps[3] {
			assert.Same(t, before, after, "key %d moved", f)
		}
	}
}

func TestChangedMembershipSameLengthRebuilds(t *testing.T) {
	eps := policytest.Idle(t, 12)
	a := append([]*backends.Endpoint{}, eps[:6]...)
	// Same length, same first, middle and last endpoints; the rest differ.
	b := []*backends.Endpoint{eps[0], eps[7], eps[3], eps[8], eps[9], eps[5]}
	p := newBalancer(t, nil)
	fresh := newBalancer(t, nil)
	for f := range uint64(300) {
		r := prompt(f, 0, 8, 8)
		pick(t, p, r, a)
		got := pick(t, p, r, b)
		require.GreaterOrEqual(t, got, 0)
		assert.Equal(t, pick(t, fresh, r, b), got)
	}
}

func TestConcurrentPicksOverChangingPools(t *testing.T) {
	eps := policytest.Idle(t, 40)
	pools := [][]*backends.Endpoint{eps, eps[:30], eps[5:], eps[:39]}
	p := newBalancer(t, nil)
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for f := range uint64(500) {
				pool := pools[(g+int(f))%len(pools)]
				e, err := p.Pick(t.Context(), prompt(f, 0, 8, 8), pool)
				if err != nil || policytest.Index(pool, e) < 0 {
					t.Errorf("pick %v outside its pool", f)
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}

func TestNoPrefixFallsBackToTwoChoices(t *testing.T) {
	eps := policytest.Build(t, policytest.Spec{InFlight: 3}, policytest.Spec{Load: policytest.Scraped(0, 1)})
	c := policytest.Counts(t, newBalancer(t, nil), &policies.Request{}, eps, 40)
	assert.Equal(t, 40, c[1])
}

func TestNewRejectsBadParams(t *testing.T) {
	tests := []struct {
		params map[string]any
		field  string
	}{
		{map[string]any{"depth": 0}, "depth"},
		{map[string]any{"load_factor": -1}, "load_factor"},
		{map[string]any{"probes": 17}, "probes"},
		{map[string]any{"sample": 0}, "sample"},
		{map[string]any{"vnodes": 1000}, "vnodes"},
		{map[string]any{"vnodes": "many"}, "vnodes"},
		{map[string]any{"hash": "xx"}, "hash"},
	}
	for _, tt := range tests {
		_, err := New(tt.params)
		assert.ErrorContains(t, err, tt.field)
	}
}

func BenchmarkPick(b *testing.B) {
	r := prompt(42, 7, 8, 32)
	policytest.BenchmarkPick(b, newBalancer(b, nil), r)
}
