package workload

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedPrefixPopularity checks that K system prompts are picked by
// their Zipf popularity, that every prompt starts with the whole blocks of
// one of them, and that nothing after them is shared.
func TestSharedPrefixPopularity(t *testing.T) {
	reqs, err := SharedPrefix(SharedPrefixOptions{Rate: 10, Count: 20000, Seed: 1, SystemPrompts: 4, Zipf: 1, SystemTokens: 1000})
	require.NoError(t, err)
	// 1000 tokens: one whole block is shared; the second holds the end of
	// the system prompt and the start of the unique part.
	counts := map[int]int{}
	after := map[int]bool{}
	for i, r := range reqs {
		require.GreaterOrEqual(t, r.PromptTokens, 1001, "request %d", i)
		counts[r.HashIDs[0]]++
		for _, id := range r.HashIDs[1:] {
			require.False(t, after[id], "request %d: id %d after the system prompt is reused", i, id)
			after[id] = true
		}
	}
	require.Len(t, counts, 4)
	// Ids 0..3 are the system prompts in popularity order; 1/k over H_4.
	for k, want := range []float64{0.48, 0.24, 0.16, 0.12} {
		assert.InDelta(t, want, float64(counts[k])/float64(len(reqs)), 0.01, "system prompt %d", k)
	}
	assert.InDelta(t, 512.0/1300, IdealPrefixReuse(reqs), 0.01, "only the whole block is reused")
}

func TestSharedPrefixFraction(t *testing.T) {
	reqs, err := SharedPrefix(SharedPrefixOptions{Rate: 10, Count: 5000, Seed: 2})
	require.NoError(t, err)
	var shared, total int
	for _, r := range reqs {
		require.Equal(t, []int{0, 1, 2, 3}, r.HashIDs[:4], "every prompt starts with the system prompt")
		shared += 2048
		total += r.PromptTokens
	}
	assert.InDelta(t, 0.872, float64(shared)/float64(total), 0.005, "shared-prefix fraction of prompt tokens")
}
