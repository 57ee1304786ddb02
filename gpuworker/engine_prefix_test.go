package gpuworker

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// prompt returns n distinct token ids starting at base.
func promptTokens(base, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = base + i
	}
	return out
}

// runOne submits r to an idle engine at now and drives it to completion,
// returning its TTFT, the number of steps and the end time.
func runOne(t *testing.T, e *Engine, r Request, now time.Time) (ttft time.Duration, steps int, end time.Time) {
	t.Helper()
	require.NoError(t, e.Submit(r))
	start := now
	for {
		steps++
		for _, ev := range e.Step(now, nil) {
			if ev.ID == r.ID && ev.Kind == EventFirstToken {
				ttft = ev.Time.Sub(start)
			}
		}
		checkInvariants(t, e)
		next, ok := e.Next()
		if !ok {
			return ttft, steps, now
		}
		now = next
	}
}

func TestPrefixCacheRepeatedPromptSkipsPrefill(t *testing.T) {
	e, err := NewEngine(smallProfile())
	require.NoError(t, err)
	hashes := HashTokenBlocks(promptTokens(0, 200))
	ttft1, steps1, now := runOne(t, e, Request{ID: 1, PromptTokens: 200, OutputTokens: 2, BlockHashes: hashes}, t0)
	// 200 tokens at 64 per step: 4 prefill steps, then 1 decode step, then
	// the final Step call that finds nothing to do.
	assert.Equal(t, 6, steps1)
	l := e.Load()
	assert.Equal(t, int64(200), l.PrefixCacheQueries)
	assert.Zero(t, l.PrefixCacheHits)
	assert.Zero(t, l.KVBlocksUsed, "finished request holds no blocks")
	assert.Equal(t, 12, l.KVBlocksCached, "its 12 full prompt blocks stay cached")

	ttft2, steps2, _ := runOne(t, e, Request{ID: 2, PromptTokens: 200, OutputTokens: 2, BlockHashes: hashes}, now)
	// 192 cached tokens: the last 8 fit in one step.
	assert.Equal(t, 3, steps2)
	assert.Less(t, ttft2, ttft1/2)
	l = e.Load()
	assert.Equal(t, int64(400), l.PrefixCacheQueries)
	assert.Equal(t, int64(192), l.PrefixCacheHits)

	// Without hashes nothing is reused or counted.
	_, steps3, _ := runOne(t, e, Request{ID: 3, PromptTokens: 200, OutputTokens: 2}, now)
	assert.Equal(t, steps1, steps3)
	assert.Equal(t, int64(400), e.Load().PrefixCacheQueries)
}

func TestPrefixCacheAlwaysComputesOneToken(t *testing.T) {
	e, err := NewEngine(smallProfile())
	require.NoError(t, err)
	hashes := HashTokenBlocks(promptTokens(0, 64))
	_, _, now := runOne(t, e, Request{ID: 1, PromptTokens: 64, OutputTokens: 1, BlockHashes: hashes}, t0)
	require.NoError(t, e.Submit(Request{ID: 2, PromptTokens: 64, OutputTokens: 1, BlockHashes: hashes}))
	e.Step(now, nil)
	require.Len(t, e.batch, 1)
	assert.Equal(t, 16, e.batch[0].scheduled, "the block holding the last token is recomputed")
	assert.Equal(t, int64(48), e.Load().PrefixCacheHits)
}

func TestPrefixCacheSharedBlocksCountOnce(t *testing.T) {
	p := smallProfile()
	p.MaxBatchedTokens = 256
	e, err := NewEngine(p)
	require.NoError(t, err)
	hashes := HashTokenBlocks(promptTokens(0, 80))
	require.NoError(t, e.Submit(Request{ID: 1, PromptTokens: 80, OutputTokens: 40, BlockHashes: hashes}))
	e.Step(t0, nil)
	now, _ := e.Next()
	e.Step(now, nil) // request 1 prefilled and decoding its 81st token
	require.Equal(t, 6, e.Load().KVBlocksUsed)

	require.NoError(t, e.Submit(Request{ID: 2, PromptTokens: 80, OutputTokens: 40, BlockHashes: hashes}))
	now, _ = e.Next()
	e.Step(now, nil)
	checkInvariants(t, e)
	l := e.Load()
	assert.Equal(t, 2, l.Running)
	// 4 shared blocks, request 1's own 6th block for its output, request 2's
	// recomputed last block.
	assert.Equal(t, 7, l.KVBlocksUsed)
	assert.Equal(t, int64(64), l.PrefixCacheHits)
}

func TestPrefixCacheEvictsLeastRecentlyFreedTailFirst(t *testing.T) {
	e, err := NewEngine(smallProfile()) // 20 blocks
	require.NoError(t, err)
	a := HashTokenBlocks(promptTokens(0, 80))
	b := HashTokenBlocks(promptTokens(1000, 80))
	_, _, now := runOne(t, e, Request{ID: 1, PromptTokens: 80, OutputTokens: 1, BlockHashes: a}, t0)
	_, _, now = runOne(t, e, Request{ID: 2, PromptTokens: 80, OutputTokens: 1, BlockHashes: b}, now)
	require.Equal(t, 10, e.Load().KVBlocksCached)

	// 13 blocks: 10 never used, then 3 evicted from the least recently
	// freed prompt (a), tail first.
	_, _, now = runOne(t, e, Request{ID: 3, PromptTokens: 13 * 16, OutputTokens: 1}, now)
	assert.Equal(t, 7, e.Load().KVBlocksCached)

	before := e.Load().PrefixCacheHits
	_, _, now = runOne(t, e, Request{ID: 4, PromptTokens: 80, OutputTokens: 1, BlockHashes: a}, now)
	assert.Equal(t, int64(2*16), e.Load().PrefixCacheHits-before, "a kept its first two blocks")
	before = e.Load().PrefixCacheHits
	runOne(t, e, Request{ID: 5, PromptTokens: 80, OutputTokens: 1, BlockHashes: b}, now)
	assert.Equal(t, int64(4*16), e.Load().PrefixCacheHits-before, "b was untouched")
}

func TestPrefixCacheCancelLeavesBlocksCached(t *testing.T) {
	e, err := NewEngine(smallProfile())
	require.NoError(t, err)
	hashes := HashTokenBlocks(promptTokens(0, 100))
	require.NoError(t, e.Submit(Request{ID: 1, PromptTokens: 100, OutputTokens: 50, BlockHashes: hashes}))
	now := t0
	for range 3 { // a 64-token and a 36-token prefill step, then a decode step
		e.Step(now, nil)
		now, _ = e.Next()
	}
	require.True(t, e.Cancel(1))
	checkInvariants(t, e)
	l := e.Load()
	assert.Zero(t, l.KVBlocksUsed)
	assert.Equal(t, 6, l.KVBlocksCached)
	e.Step(now, nil)

	_, _, _ = runOne(t, e, Request{ID: 2, PromptTokens: 100, OutputTokens: 1, BlockHashes: hashes}, now)
	assert.Equal(t, int64(96), e.Load().PrefixCacheHits)
}

func TestPrefixCacheCapacityUnderPressure(t *testing.T) {
	e, err := NewEngine(smallProfile())
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 80
	for id := uint64(1); id <= n; id++ {
		ids := []int{rng.IntN(3), rng.IntN(2)} // few distinct prefixes
		prompt := 1 + rng.IntN(150)
		hashes := HashIDBlocks(ids, prompt)
		if id%5 == 0 {
			hashes = nil
		}
		require.NoError(t, e.Submit(Request{ID: id, PromptTokens: prompt, OutputTokens: 1 + rng.IntN(60), BlockHashes: hashes}))
	}
	finished := 0
	events := drive(t, e, t0, func(_ time.Time, step int) {
		if step%11 == 5 {
			e.Cancel(uint64(1 + rng.IntN(n)))
			checkInvariants(t, e)
		}
	})
	for _, ev := range events {
		if ev.Kind == EventFinished {
			finished++
		}
	}
	l := e.Load()
	assert.Positive(t, finished)
	assert.Zero(t, l.KVBlocksUsed)
	assert.Positive(t, l.PrefixCacheHits)
	assert.LessOrEqual(t, l.PrefixCacheHits, l.PrefixCacheQueries)
	assert.Positive(t, l.Preemptions)
}

func TestPrefillTimeAttentionTerm(t *testing.T) {
	p, err := LookupProfile("h100-llama3-8b")
	require.NoError(t, err)
	p.StepOverhead = 0
	// At 8k tokens attention adds ~12% to the prefill FLOPs (GPU-FACTS §2).
	base := p.StepTime(8192, 8192)
	full := p.PrefillTime(8192, 0)
	ratio := float64(full) / float64(base)
	assert.InDelta(t, 1.13, ratio, 0.02)
	// A cached prefix makes each new token attend to more keys.
	assert.Greater(t, p.PrefillTime(1024, 30_000), p.PrefillTime(1024, 0))
	assert.Zero(t, testing.AllocsPerRun(10, func() { p.PrefillTime(100, 100) }))
}
