package workload

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLongDocDocuments checks the documents: log-uniform lengths in range,
// the same length each time a document comes back, Zipf popularity, and
// questions and answers in their ranges.
func TestLongDocDocuments(t *testing.T) {
	reqs, err := LongDoc(LongDocOptions{Rate: 1, Count: 20000, Seed: 1, Zipf: 1})
	require.NoError(t, err)
	type doc struct {
		first  []int // the ids of its first request
		shared int   // whole blocks later requests share with it
		asked  int
	}
	docs := map[int]*doc{}
	var (
		logs   []float64
		output int
	)
	for i, r := range reqs {
		require.True(t, r.PromptTokens >= 8192+1 && r.PromptTokens <= 32768+200, "request %d: prompt %d", i, r.PromptTokens)
		require.True(t, r.OutputTokens >= 1 && r.OutputTokens <= 500, "request %d: output %d", i, r.OutputTokens)
		if r.OutputTokens < 200 {
			output++
		}
		// A document's whole blocks come first; the first id names it.
		d, ok := docs[r.HashIDs[0]]
		if !ok {
			docs[r.HashIDs[0]] = &doc{first: r.HashIDs, asked: 1}
			logs = append(logs, math.Log(float64(r.PromptTokens)))
			continue
		}
		d.asked++
		n := commonBlocks(d.first, r.HashIDs)
		if d.shared == 0 {
			d.shared = n
		}
		require.Equal(t, d.shared, n, "request %d: a document keeps its length", i)
		require.True(t, n >= 8192/BlockTokens && n <= 32768/BlockTokens, "request %d: shares %d blocks", i, n)
		require.LessOrEqual(t, r.PromptTokens-n*BlockTokens, BlockTokens-1+200, "request %d: only the document's last partial block and the question follow", i)
	}
	// Log-uniform: ln(length) is uniform on [ln 8192, ln 32768].
	assert.InDelta(t, (math.Log(8192)+math.Log(32768))/2, mean(logs), 0.03)
	var asked []int
	for _, d := range docs {
		asked = append(asked, d.asked)
	}
	slices.Sort(asked)
	slices.Reverse(asked)
	assert.InDelta(t, 1/7.4855, float64(asked[0])/float64(len(reqs)), 0.01, "the top document gets 1/H_1000")
	assert.LessOrEqual(t, len(docs), 1000)
	assert.Less(t, float64(output)/float64(len(reqs)), 0.05, "answers are about 200 to 500 tokens")
}

// TestLongDocReuse checks that the pool size sets how much is reused.
func TestLongDocReuse(t *testing.T) {
	tests := []struct {
		pool int
		zipf float64
		want float64
	}{
		{1, 0, 0.99},     // one document: every request after the first reuses it
		{100, 1, 0.88},   // a small pool comes back often
		{1000, 1, 0.65},  // the default
		{100000, 0, 0.0}, // hardly anything comes back
	}
	for _, tt := range tests {
		reqs, err := LongDoc(LongDocOptions{Rate: 1, Count: 1000, Seed: 1, Pool: tt.pool, Zipf: tt.zipf})
		require.NoError(t, err)
		assert.InDelta(t, tt.want, IdealPrefixReuse(reqs), 0.03, "pool %d zipf %v", tt.pool, tt.zipf)
	}
}
