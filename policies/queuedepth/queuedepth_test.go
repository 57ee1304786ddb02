package queuedepth

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/policytest"
)

func newBalancer(t testing.TB, params map[string]any) policies.Picker {
	return policytest.Seeded(t, New, params, 11)
}

func TestPickShortestQueue(t *testing.T) {
	scraped := policytest.Scraped
	tests := []struct {
		name  string
		specs []policytest.Spec
		want  int
	}{
		{"scraped waiting and running", []policytest.Spec{{Load: scraped(4, 8)}, {Load: scraped(0, 3)}, {Load: scraped(2, 8)}}, 1},
		{"requests since the scrape count", []policytest.Spec{{Load: scraped(0, 1), AfterScrape: 5}, {Load: scraped(0, 3)}, {Load: scraped(0, 4)}}, 1},
		{"never scraped uses in-flight", []policytest.Spec{{Load: scraped(0, 5)}, {InFlight: 2}, {InFlight: 4}}, 1},
		{"failed scrape is not read as idle", []policytest.Spec{{Load: scraped(0, 0), Stale: true, InFlight: 6}, {Load: scraped(0, 2)}, {InFlight: 3}}, 1},
		{"scrape below own in-flight", []policytest.Spec{{Load: scraped(0, 0), InFlight: 7}, {Load: scraped(1, 1)}, {InFlight: 3}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := policytest.Build(t, tt.specs...)
			c := policytest.Counts(t, newBalancer(t, nil), &policies.Request{}, eps, 30)
			assert.Equal(t, 30, c[tt.want])
		})
	}
}

func TestPickSpreadsBetweenScrapes(t *testing.T) {
	// Both look idle in the last scrape; requests begun since keep the
	// picks from all landing on one of them.
	eps := policytest.Build(t, policytest.Spec{Load: policytest.Scraped(0, 0)}, policytest.Spec{Load: policytest.Scraped(0, 0)})
	p := newBalancer(t, nil)
	for range 10 {
		e, err := p.Pick(t.Context(), &policies.Request{}, eps)
		require.NoError(t, err)
		e.Begin(1)
	}
	assert.Equal(t, int64(5), eps[0].InFlight())
	assert.Equal(t, int64(5), eps[1].InFlight())
}

func TestPickSamplesLargePool(t *testing.T) {
	specs := make([]policytest.Spec, 1000)
	for i := range specs {
		specs[i] = policytest.Spec{Load: policytest.Scraped(0, 1+i%10)}
	}
	eps := policytest.Build(t, specs...)
	c := policytest.Counts(t, newBalancer(t, map[string]any{"sample": 8}), &policies.Request{}, eps, 4000)
	atMin, spread := 0, 0
	for i, n := range c {
		if i%10 == 0 {
			atMin += n
		}
		if n > 0 {
			spread++
		}
	}
	// A sample of 8 from a pool whose tenth has the minimum finds it in
	// 1-0.9^8 = 57% of picks, and the picks land on many endpoints.
	assert.InDelta(t, 0.57, float64(atMin)/4000, 0.05)
	assert.Greater(t, spread, 100)
}

func TestNewRejectsBadParams(t *testing.T) {
	for _, bad := range []map[string]any{{"sample": 0}, {"sample": 1000}, {"sample": "all"}} {
		_, err := New(bad)
		assert.ErrorContains(t, err, "sample")
	}
}

func BenchmarkPick(b *testing.B) {
	policytest.BenchmarkPick(b, newBalancer(b, nil), &policies.Request{PromptTokens: 500})
}
