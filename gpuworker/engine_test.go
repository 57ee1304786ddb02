package gpuworker

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// smallProfile is tight on every limit so tests hit them.
func smallProfile() Profile {
	p, _ := LookupProfile("l4-llama3-8b")
	p.Name = "small"
	p.MaxNumSeqs = 4
	p.MaxBatchedTokens = 64
	p.FixedKVTokens = 20 * BlockSize
	return p
}

// checkInvariants asserts the engine's bookkeeping from the inside.
func checkInvariants(t *testing.T, e *Engine) {
	t.Helper()
	require.LessOrEqual(t, len(e.running), e.prof.MaxNumSeqs, "max_num_seqs")
	refs := map[int32]int32{}
	for _, s := range e.running {
		for _, b := range s.blocks {
			refs[b]++
		}
		require.Equal(t, stateRunning, s.state)
		require.GreaterOrEqual(t, len(s.blocks), blocksFor(s.computed), "KV must hold computed tokens")
		require.LessOrEqual(t, s.hashed, len(s.blocks))
	}
	for i := range e.waiting.len() {
		require.Empty(t, e.waiting.at(i).blocks, "waiting requests hold no blocks")
	}
	used := len(refs) // shared blocks count once
	for b, n := range refs {
		require.Equal(t, n, e.kv.ref[b], "block %d reference count", b)
	}
	require.Equal(t, e.kv.used(), used, "block accounting")
	require.LessOrEqual(t, used, e.kv.total, "KV over capacity")
	require.Equal(t, e.kv.cachedBlocks(), len(e.kv.byHash)-countHeld(e), "cached free blocks are the hashed ones nobody holds")
	scheduled := 0
	for _, s := range e.batch {
		scheduled += s.scheduled
	}
	require.LessOrEqual(t, scheduled, e.prof.MaxBatchedTokens, "token budget")
	l := e.Load()
	require.GreaterOrEqual(t, l.KVUsage, 0.0)
	require.LessOrEqual(t, l.KVUsage, 1.0)
}

// countHeld counts hashed blocks that a running request holds.
func countHeld(e *Engine) int {
	n := 0
	for _, b := range e.kv.byHash {
		if e.kv.ref[b] > 0 {
			n++
		}
	}
	return n
}

// drive runs the engine to completion at the times Next reports, checking
// invariants after every step, and returns the events.
func drive(t *testing.T, e *Engine, now time.Time, hook func(now time.Time, step int)) []Event {
	t.Helper()
	var all []Event
	for step := 0; ; step++ {
		require.Less(t, step, 1_000_000, "engine does not terminate")
		all = e.Step(now, all)
		checkInvariants(t, e)
		if hook != nil {
			hook(now, step)
		}
		next, ok := e.Next()
		if !ok {
			return all
		}
		require.False(t, next.Before(now), "time went backwards")
		now = next
	}
}

func TestEngineConservesTokensUnderPressure(t *testing.T) {
	e, err := NewEngine(smallProfile())
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[uint64]int{}
	for id := uint64(1); id <= 60; id++ {
		r := Request{ID: id, PromptTokens: 1 + rng.IntN(120), OutputTokens: 1 + rng.IntN(100)}
		require.NoError(t, e.Submit(r))
		want[id] = r.OutputTokens
	}
	cancelled := map[uint64]bool{}
	events := drive(t, e, t0, func(_ time.Time, step int) {
		if step%7 == 3 {
			id := uint64(1 + rng.IntN(60))
			if e.Cancel(id) {
				cancelled[id] = true
			}
			checkInvariants(t, e)
		}
	})

	got := map[uint64]int{}
	firsts := map[uint64]int{}
	finished := map[uint64]int{}
	for _, ev := range events {
		switch ev.Kind {
		case EventFirstToken:
			firsts[ev.ID]++
			assert.Equal(t, 1, ev.Tokens)
			assert.Zero(t, got[ev.ID])
			got[ev.ID] = 1
		case EventToken:
			assert.Equal(t, got[ev.ID]+1, ev.Tokens, "tokens arrive one at a time, in order")
			got[ev.ID] = ev.Tokens
		case EventFinished:
			finished[ev.ID]++
			assert.Equal(t, want[ev.ID], ev.Tokens)
		}
	}
	for id, n := range want {
		if cancelled[id] {
			assert.Zero(t, finished[id], "cancelled request %d finished", id)
			continue
		}
		assert.Equal(t, n, got[id], "request %d output", id)
		assert.Equal(t, 1, firsts[id], "request %d first token", id)
		assert.Equal(t, 1, finished[id], "request %d finished", id)
	}
	l := e.Load()
	assert.Zero(t, l.KVBlocksUsed)
	assert.Zero(t, l.Running+l.Waiting)
	assert.Positive(t, l.Preemptions, "the small cache should force preemption")
}

func TestEngineCancelFreesBlocks(t *testing.T) {
	e, err := NewEngine(smallProfile())
	require.NoError(t, err)
	require.NoError(t, e.Submit(Request{ID: 1, PromptTokens: 100, OutputTokens: 50}))
	require.NoError(t, e.Submit(Request{ID: 2, PromptTokens: 10, OutputTokens: 50}))
	e.Step(t0, nil)
	require.Positive(t, e.Load().KVBlocksUsed)
	assert.True(t, e.Cancel(1))
	assert.True(t, e.Cancel(2))
	assert.False(t, e.Cancel(2), "second cancel")
	l := e.Load()
	assert.Zero(t, l.KVBlocksUsed)
	assert.Zero(t, l.Running)
	next, ok := e.Next()
	require.True(t, ok, "the step in flight still ends")
	assert.Empty(t, e.Step(next, nil), "no events for cancelled requests")
	_, ok = e.Next()
	assert.False(t, ok)
}

func TestEngineChunkedPrefill(t *testing.T) {
	p := smallProfile()
	p.FixedKVTokens = 1 << 20
	e, err := NewEngine(p)
	require.NoError(t, err)
	require.NoError(t, e.Submit(Request{ID: 1, PromptTokens: 200, OutputTokens: 3}))
	// 200 prompt tokens at 64 per step: 4 steps, the last of which samples.
	var events []Event
	now := t0
	for step := 1; step <= 4; step++ {
		events = e.Step(now, events[:0])
		assert.Empty(t, events, "step %d", step)
		assert.Equal(t, min(64, 200-64*(step-1)), e.batch[0].scheduled, "chunk %d", step)
		now, _ = e.Next()
	}
	events = e.Step(now, events[:0])
	require.Len(t, events, 1)
	assert.Equal(t, EventFirstToken, events[0].Kind)
	assert.Equal(t, int64(200), e.Load().PromptTokens)

	// A decoding request goes first and a new prompt fills the rest.
	require.NoError(t, e.Submit(Request{ID: 2, PromptTokens: 500, OutputTokens: 1}))
	now, _ = e.Next()
	e.Step(now, nil)
	require.Len(t, e.batch, 2)
	assert.Equal(t, 1, e.batch[0].scheduled)
	assert.Equal(t, 63, e.batch[1].scheduled)
}

func TestEngineRespectsMaxNumSeqs(t *testing.T) {
	p := smallProfile()
	p.FixedKVTokens = 1 << 20
	e, err := NewEngine(p)
	require.NoError(t, err)
	for id := uint64(1); id <= 10; id++ {
		require.NoError(t, e.Submit(Request{ID: id, PromptTokens: 4, OutputTokens: 5}))
	}
	e.Step(t0, nil)
	l := e.Load()
	assert.Equal(t, 4, l.Running)
	assert.Equal(t, 6, l.Waiting)
}

func TestEngineStepTimeGrowsWithBatch(t *testing.T) {
	p, err := LookupProfile("h100-llama3-8b")
	require.NoError(t, err)
	itl := func(batch int) time.Duration {
		e, err := NewEngine(p)
		require.NoError(t, err)
		for id := range uint64(batch) {
			require.NoError(t, e.Submit(Request{ID: id, PromptTokens: 16, OutputTokens: 10}))
		}
		e.Step(t0, nil) // one prefill step for everyone
		prefillEnd, _ := e.Next()
		evs := e.Step(prefillEnd, nil)
		require.Len(t, evs, batch, "all first tokens after one step")
		decodeEnd, _ := e.Next()
		return decodeEnd.Sub(prefillEnd)
	}
	one, many := itl(1), itl(256)
	assert.Greater(t, many, one, "decode step of 256 sequences is slower than of 1")
	assert.Greater(t, p.StepTime(8192, 0), p.StepTime(1, 0), "prefill step grows with tokens")
	assert.Greater(t, p.StepTime(1, 100_000), p.StepTime(1, 0), "decode step grows with context")
}

func TestEngineSubmitErrors(t *testing.T) {
	e, err := NewEngine(smallProfile())
	require.NoError(t, err)
	require.NoError(t, e.Submit(Request{ID: 1, PromptTokens: 1, OutputTokens: 1}))
	assert.ErrorIs(t, e.Submit(Request{ID: 1, PromptTokens: 1, OutputTokens: 1}), ErrDuplicateID)
	assert.ErrorIs(t, e.Submit(Request{ID: 2, PromptTokens: 0, OutputTokens: 1}), ErrInvalidRequest)
	assert.ErrorIs(t, e.Submit(Request{ID: 3, PromptTokens: 300, OutputTokens: 300}), ErrTooLong)
}

func TestEngineInstantFinishesInOneStep(t *testing.T) {
	p, err := LookupProfile(InstantProfile)
	require.NoError(t, err)
	e, err := NewEngine(p)
	require.NoError(t, err)
	for id := range uint64(50) {
		require.NoError(t, e.Submit(Request{ID: id, PromptTokens: 100, OutputTokens: 20}))
	}
	events := e.Step(t0, nil)
	assert.Len(t, events, 50*21)
	for _, ev := range events {
		assert.Equal(t, t0, ev.Time)
	}
	_, ok := e.Next()
	assert.False(t, ok)
}

func TestEngineStepAllocs(t *testing.T) {
	p, err := LookupProfile("h100-llama3-8b")
	require.NoError(t, err)
	e, err := NewEngine(p)
	require.NoError(t, err)
	for id := range uint64(64) {
		require.NoError(t, e.Submit(Request{ID: id, PromptTokens: 100, OutputTokens: 1 << 16}))
	}
	events := make([]Event, 0, 256)
	now := t0
	events = e.Step(now, events[:0])
	allocs := testing.AllocsPerRun(100, func() {
		now, _ = e.Next()
		events = e.Step(now, events[:0])
	})
	assert.Zero(t, allocs, "steady-state decode steps allocate")
}

func BenchmarkEngineDecodeStep(b *testing.B) {
	p, _ := LookupProfile("h100-llama3-8b")
	p.FixedKVTokens = 1 << 40
	e, _ := NewEngine(p)
	for id := range uint64(256) {
		if err := e.Submit(Request{ID: id, PromptTokens: 100, OutputTokens: 1 << 30}); err != nil {
			b.Fatal(err)
		}
	}
	events := make([]Event, 0, 512)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		events = e.Step(now, events[:0])
		now, _ = e.Next()
	}
}

// TestWholePrefillNeverSplitsPrompts checks that without chunked prefill a
// prompt that does not fit in what remains of the budget waits for the next
// step instead of being split, while with chunking it fills the step.
func TestWholePrefillNeverSplitsPrompts(t *testing.T) {
	for _, whole := range []bool{false, true} {
		p := smallProfile()
		p.FixedKVTokens = 1 << 12
		p.WholePrefill = whole
		e, err := NewEngine(p)
		require.NoError(t, err)
		require.NoError(t, e.Submit(Request{ID: 1, PromptTokens: 40, OutputTokens: 2}))
		require.NoError(t, e.Submit(Request{ID: 2, PromptTokens: 40, OutputTokens: 2}))
		e.Step(t0, nil)
		checkInvariants(t, e)
		var scheduled []int
		for _, s := range e.batch {
			scheduled = append(scheduled, s.scheduled)
		}
		if whole {
			assert.Equal(t, []int{40}, scheduled, "request 2 waits for a step with room for all 40 tokens")
		} else {
			assert.Equal(t, []int{40, 24}, scheduled, "request 2 fills the rest of the 64-token budget")
		}
		// A prompt longer than the whole budget is still chunked.
		require.NoError(t, e.Submit(Request{ID: 3, PromptTokens: 100, OutputTokens: 1}))
		var events []Event
		for {
			next, ok := e.Next()
			if !ok {
				break
			}
			events = e.Step(next, events)
			checkInvariants(t, e)
		}
		finished := 0
		for _, ev := range events {
			if ev.Kind == EventFinished {
				finished++
			}
		}
		assert.Equal(t, 3, finished, "whole=%v", whole)
	}
}
