package tokenspersec

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/policytest"
)

func newBalancer(t testing.TB, params map[string]any) policies.Picker {
	return policytest.Seeded(t, New, params, 5)
}

// req costs 44 + 256 = 300 tokens.
var req = &policies.Request{PromptTokens: 44}

func TestPickLeastExpectedTime(t *testing.T) {
	scraped := policytest.Scraped
	tests := []struct {
		name   string
		params map[string]any
		specs  []policytest.Spec
		want   int
	}{
		{"faster wins at equal queue", nil,
			[]policytest.Spec{{InFlight: 2, TokensPerSec: 30}, {InFlight: 2, TokensPerSec: 90}}, 1},
		{"slower wins when the faster is far behind", nil,
			[]policytest.Spec{{InFlight: 1, TokensPerSec: 30}, {InFlight: 12, TokensPerSec: 90}}, 0},
		{"unknown throughput ranks by in-flight tokens", nil,
			[]policytest.Spec{{InFlight: 5}, {InFlight: 1}, {InFlight: 3}}, 1},
		{"unmeasured endpoint assumed at the sampled mean", nil,
			[]policytest.Spec{{InFlight: 10, TokensPerSec: 60}, {}}, 1},
		{"fallback throughput param", map[string]any{"fallback_tokens_per_sec": 1},
			[]policytest.Spec{{InFlight: 10, TokensPerSec: 60}, {}}, 0},
		{"other replicas' requests from the scrape", nil,
			[]policytest.Spec{{Load: scraped(2, 8), TokensPerSec: 60}, {InFlight: 2, TokensPerSec: 60}}, 1},
		{"failed scrape falls back to own in-flight", nil,
			[]policytest.Spec{{Load: scraped(2, 8), Stale: true, TokensPerSec: 60}, {InFlight: 2, TokensPerSec: 60}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := policytest.Build(t, tt.specs...)
			c := policytest.Counts(t, newBalancer(t, tt.params), req, eps, 30)
			assert.Equal(t, 30, c[tt.want])
		})
	}
}

func TestPickSharesBySpeed(t *testing.T) {
	// Requests that never finish: the 120 tok/s GPU should take four times
	// the 30 tok/s GPU's share.
	eps := policytest.Build(t, policytest.Spec{TokensPerSec: 30}, policytest.Spec{TokensPerSec: 120})
	p := newBalancer(t, nil)
	for range 200 {
		e, err := p.Pick(t.Context(), req, eps)
		require.NoError(t, err)
		e.Begin(req.ExpectedTokens())
	}
	assert.InDelta(t, 160, eps[1].InFlight(), 6)
}

func TestPickRandomWithinTolerance(t *testing.T) {
	specs := []policytest.Spec{{InFlight: 20, TokensPerSec: 60}, {InFlight: 21, TokensPerSec: 60}, {InFlight: 40, TokensPerSec: 60}}
	eps := policytest.Build(t, specs...)
	c := policytest.Counts(t, newBalancer(t, nil), req, eps, 2000)
	assert.InDelta(t, 1000, c[0], 120)
	assert.Zero(t, c[2])
	c = policytest.Counts(t, newBalancer(t, map[string]any{"tolerance": 0}), req, eps, 100)
	assert.Equal(t, 100, c[0])
}

func TestNewRejectsBadParams(t *testing.T) {
	tests := []struct {
		params map[string]any
		field  string
	}{
		{map[string]any{"sample": 0}, "sample"},
		{map[string]any{"sample": 65}, "sample"},
		{map[string]any{"tolerance": -0.1}, "tolerance"},
		{map[string]any{"tolerance": "wide"}, "tolerance"},
		{map[string]any{"fallback_tokens_per_sec": -1}, "fallback_tokens_per_sec"},
		{map[string]any{"speed": 1}, "speed"},
	}
	for _, tt := range tests {
		_, err := New(tt.params)
		assert.ErrorContains(t, err, tt.field)
	}
}

func BenchmarkPick(b *testing.B) {
	policytest.BenchmarkPick(b, newBalancer(b, nil), &policies.Request{PromptTokens: 500})
}
