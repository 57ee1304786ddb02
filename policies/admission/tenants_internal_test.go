package admission

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTenantShares(t *testing.T) {
	s := NewTenantShares()
	assert.False(t, s.Below("light", 1), "nobody in flight")
	assert.False(t, s.Others("light"))
	s.Add("heavy", 1)
	assert.False(t, s.Others("heavy"))
	assert.True(t, s.Others("light"))
	assert.False(t, s.Below("heavy", 1), "alone: never below its share")
	assert.True(t, s.Below("light", 1), "none of one in flight")
	s.Add("light", 1)
	assert.False(t, s.Below("light", 1), "1 of 2 at equal weights: its share")
	assert.True(t, s.Others("heavy"))
	s.Add("heavy", 1)
	s.Add("heavy", 1)
	assert.True(t, s.Below("light", 1), "1 of 4")
	assert.False(t, s.Below("light", 0.25), "at a quarter of the other's weight its share is 0.8 of 4: 1 is over it")
	assert.True(t, s.Below("light", 3), "at weight 3 its share is 3 of 4")
	s.Add("light", 3) // its weight now 3: 2 of 5 against a share of 3.75
	assert.True(t, s.Below("light", 3))
	assert.False(t, s.Below("heavy", 1), "3 of 5 against a share of 1.25")
	s.Remove("light")
	s.Remove("light")
	s.Remove("nobody")
	assert.False(t, s.Below("heavy", 1), "alone again")
	assert.Equal(t, 3, s.total)
	assert.InDelta(t, 1, s.weights, 1e-9)
	for range 3 {
		s.Remove("heavy")
	}
	assert.Zero(t, s.total)
	assert.Zero(t, s.weights)
	assert.Empty(t, s.n)
}

// The running sums answer as a count over every tenant would.
func TestTenantSharesAgreeWithACount(t *testing.T) {
	s := NewTenantShares()
	n, w := map[string]int{}, map[string]float64{}
	count := func(tenant string, weight float64) bool {
		total, weights, others := 0, shareWeight(weight), false
		for x, k := range n {
			total += k
			if x != tenant {
				weights += w[x]
				others = true
			}
		}
		return others && float64(n[tenant])/shareWeight(weight) < float64(total)/weights
	}
	for i := range 2000 {
		tenant := fmt.Sprintf("t%d", (i*7)%13)
		weight := float64(1 + (i*3)%5)
		if i%3 == 2 && n[tenant] > 0 {
			s.Remove(tenant)
			if n[tenant]--; n[tenant] == 0 {
				delete(n, tenant)
				delete(w, tenant)
			}
		} else {
			s.Add(tenant, weight)
			n[tenant]++
			w[tenant] = weight
		}
		probe := fmt.Sprintf("t%d", i%14)
		assert.Equal(t, count(probe, 2), s.Below(probe, 2), "step %d, tenant %s", i, probe)
	}
}
