package policies_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/policytest"
)

func TestRandSeeded(t *testing.T) {
	a, b := policies.NewRand(42), policies.NewRand(42)
	for range 10 {
		assert.Equal(t, a.Uint64(), b.Uint64())
	}
	assert.NotEqual(t, policies.NewRand(0).Uint64(), policies.NewRand(0).Uint64())
}

func TestSampleSmallPoolVisitsEachOnce(t *testing.T) {
	s := policies.NewSample(7, 5, 16)
	seen := map[int]int{}
	for i, ok := s.Next(); ok; i, ok = s.Next() {
		seen[i]++
	}
	assert.Equal(t, map[int]int{0: 1, 1: 1, 2: 1, 3: 1, 4: 1}, seen)
}

func TestQueueDepth(t *testing.T) {
	scraped := policytest.Scraped
	tests := []struct {
		name string
		spec policytest.Spec
		want int64
	}{
		{"never scraped", policytest.Spec{InFlight: 3}, 3},
		{"failed scrape", policytest.Spec{Load: scraped(5, 5), Stale: true, InFlight: 2}, 2},
		{"scraped plus since", policytest.Spec{Load: scraped(2, 3), InFlight: 1, AfterScrape: 4}, 9},
		{"never below own in-flight", policytest.Spec{Load: scraped(0, 1), InFlight: 6}, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := policytest.Build(t, tt.spec)[0]
			assert.Equal(t, tt.want, policies.QueueDepth(e))
		})
	}
}
