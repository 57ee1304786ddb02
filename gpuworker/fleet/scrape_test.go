package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/gpuworker/workload"
	"github.com/sluice-llm/sluice/policies"
)

// probe is a round-robin Picker that records what a policy can see at each
// pick: the chosen endpoint's scraped load, its measured TTFT and decode
// rate, and the request's prefix hashes.
type probe struct {
	next     int
	loads    []*backends.Load
	ttft     []time.Duration
	tps      []float64
	prefixes [][]uint64
	maxToks  []int
}

func (p *probe) Pick(_ context.Context, r *policies.Request, eps []*backends.Endpoint) (*backends.Endpoint, error) {
	ep := eps[p.next%len(eps)]
	p.next++
	p.loads = append(p.loads, ep.Load())
	p.ttft = append(p.ttft, ep.TTFT())
	p.tps = append(p.tps, ep.TokensPerSec())
	p.prefixes = append(p.prefixes, append([]uint64(nil), r.PrefixHashes...))
	p.maxToks = append(p.maxToks, r.MaxTokens)
	return ep, nil
}

func TestScrapeFeedsLoadAndMeasurements(t *testing.T) {
	spec := mustSpec(t, "2xh100-llama3-8b")
	reqs := synthetic(t, spec, 400, 0.9, 3)
	tests := []struct {
		name     string
		interval time.Duration
		wantLoad bool
	}{
		{"default interval", 0, true},
		{"fast scrape", 10 * time.Millisecond, true},
		{"scraping off", -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := new(probe)
			_, err := Run(Options{Spec: spec, Pickers: []policies.Picker{p}, ScrapeInterval: tt.interval}, reqs)
			require.NoError(t, err)
			late := len(reqs) / 2 // well past the first scrape and first answers
			assert.Equal(t, tt.wantLoad, p.loads[late] != nil)
			if tt.wantLoad {
				l := p.loads[late]
				assert.GreaterOrEqual(t, l.Running+l.Waiting, 0)
				assert.True(t, l.KVUsage >= 0 && l.KVUsage <= 1, "KVUsage %v", l.KVUsage)
				assert.False(t, l.At.Before(epoch), "At is virtual time")
			}
			assert.Positive(t, p.ttft[late], "TTFT observed from completed answers")
			assert.Positive(t, p.tps[late], "decode rate observed from completed answers")
			assert.Zero(t, p.ttft[0], "nothing measured before the first answer")
			assert.Equal(t, reqs[late].OutputTokens, p.maxToks[late])
		})
	}
}

func TestScrapeSeesQueues(t *testing.T) {
	// One worker, a burst far beyond its batch: a scrape during the burst
	// must show requests waiting or running.
	spec := mustSpec(t, "l4-llama3-8b")
	reqs := make([]workload.Request, 300)
	for i := range reqs {
		reqs[i] = workload.Request{Arrival: time.Duration(i) * time.Millisecond, PromptTokens: 2000, OutputTokens: 50}
	}
	p := new(probe)
	_, err := Run(Options{Spec: spec, Pickers: []policies.Picker{p}}, reqs)
	require.NoError(t, err)
	l := p.loads[len(reqs)-1]
	require.NotNil(t, l)
	assert.Positive(t, l.Waiting, "a 300-request burst queues on one L4")
	assert.Positive(t, l.Running)
	assert.Equal(t, 200*time.Millisecond, l.At.Sub(epoch), "ticks every 100 ms from the first arrival; the last before 299 ms is at 200 ms")
}

func TestPrefixHashesFollowHashIDs(t *testing.T) {
	const perBlock = workload.BlockTokens / ChunkTokens // whole chunks inside the first block
	a := PrefixHashes(nil, []int{1, 2, 3}, 1536, 0)
	b := PrefixHashes(nil, []int{1, 2, 4}, 1536, 1)
	c := PrefixHashes(nil, []int{5, 2, 3}, 1536, 0)
	require.Len(t, a, 1536/ChunkTokens)
	assert.Len(t, PrefixHashes(nil, nil, 100_000, 0), MaxChunks, "at most MaxChunks, as the router")
	assert.Empty(t, PrefixHashes(nil, []int{1}, ChunkTokens-1, 0), "no whole chunk")

	second := 2*workload.BlockTokens/ChunkTokens - 1 // the last chunk that ends in block 1
	assert.Equal(t, a[:second+1], b[:second+1], "shared leading blocks give shared leading hashes")
	assert.NotEqual(t, a[second+1], b[second+1], "the chunk reaching into block 2 differs")
	for i := range a {
		assert.NotEqual(t, a[i], c[i], "a different first block changes every later hash")
	}
	seen := make(map[uint64]bool)
	for _, h := range a[:perBlock] {
		assert.False(t, seen[h], "each chunk of a block has its own hash")
		seen[h] = true
	}

	u0 := PrefixHashes(nil, nil, 1000, 0)
	u1 := PrefixHashes(nil, nil, 1000, 1)
	for i := range u0 {
		assert.NotEqual(t, u0[i], u1[i], "prompts without hash ids share nothing")
	}
	short := PrefixHashes(nil, []int{1}, 1536, 7)
	assert.Equal(t, a[:perBlock], short[:perBlock], "the covered block is shared")
	assert.NotEqual(t, a[perBlock+1], short[perBlock+1], "past the hash ids the prompt is the request's own")

	spec := mustSpec(t, "2xh100-llama3-8b")
	reqs := []workload.Request{
		{Arrival: 0, PromptTokens: 1500, OutputTokens: 4, HashIDs: []int{7, 8, 9}},
		{Arrival: time.Millisecond, PromptTokens: 1000, OutputTokens: 4, HashIDs: []int{7, 8}},
		{Arrival: 2 * time.Millisecond, PromptTokens: 100, OutputTokens: 4},
	}
	p := new(probe)
	_, err := Run(Options{Spec: spec, Pickers: []policies.Picker{p}}, reqs)
	require.NoError(t, err)
	assert.Equal(t, PrefixHashes(nil, []int{7, 8, 9}, 1500, 0), p.prefixes[0])
	assert.Equal(t, p.prefixes[0][:1000/ChunkTokens], p.prefixes[1])
	assert.Equal(t, PrefixHashes(nil, nil, 100, 2), p.prefixes[2])
}

func TestReplicasScrapeOutOfPhase(t *testing.T) {
	spec := mustSpec(t, "h100-llama3-8b")
	reqs := make([]workload.Request, 40)
	for i := range reqs {
		reqs[i] = workload.Request{Arrival: time.Duration(i) * 25 * time.Millisecond, PromptTokens: 4000, OutputTokens: 200}
	}
	a, b := new(probe), new(probe)
	_, err := Run(Options{Spec: spec, Pickers: []policies.Picker{a, b}}, reqs)
	require.NoError(t, err)
	phase := func(p *probe) time.Duration {
		l := p.loads[len(p.loads)-1]
		require.NotNil(t, l)
		return l.At.Sub(epoch) % DefaultScrapeInterval
	}
	assert.Equal(t, 50*time.Millisecond, phase(a))
	assert.Equal(t, time.Duration(0), phase(b))
}
