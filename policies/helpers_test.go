package policies_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-llm/sluice/backends"
	"github.com/sluice-llm/sluice/policies"
	"github.com/sluice-llm/sluice/policies/policytest"
)

func TestExpectedTokens(t *testing.T) {
	assert.EqualValues(t, 100+policies.DefaultExpectedOutput, (&policies.Request{PromptTokens: 100}).ExpectedTokens())
	assert.EqualValues(t, 108, (&policies.Request{PromptTokens: 100, MaxTokens: 8, Choices: 1}).ExpectedTokens())
	assert.EqualValues(t, 124, (&policies.Request{PromptTokens: 100, MaxTokens: 8, Choices: 3}).ExpectedTokens(), "n completions of one prompt")
	huge := &policies.Request{PromptTokens: 100, MaxTokens: math.MaxInt, Choices: 128}
	assert.EqualValues(t, 100+128*policies.MaxOutputEstimate, huge.ExpectedTokens(), "bounded: no overflow")
}

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

func TestPrefillAhead(t *testing.T) {
	// pending sends n prompts of size tokens each to e, without first tokens.
	pending := func(e *backends.Endpoint, n int, tokens int64) {
		for range n {
			e.BeginPrefill(tokens)
		}
	}
	scraped := policytest.Scraped

	e := policytest.Build(t, policytest.Spec{})[0]
	assert.Zero(t, policies.PrefillAhead(e, 500), "idle and never scraped")
	assert.InDelta(t, 500, policies.PrefillBacklog(e, 500), 1e-9, "the prompt itself")

	e = policytest.Build(t, policytest.Spec{})[0]
	pending(e, 2, 1000)
	assert.EqualValues(t, 2000, policies.PrefillAhead(e, 500), "never scraped: this replica's pending prompts")

	e = policytest.Build(t, policytest.Spec{Load: scraped(2, 40)})[0]
	pending(e, 2, 1000)
	assert.EqualValues(t, 2000, policies.PrefillAhead(e, 500), "the engine waits on no more than this replica sent; running requests do not count")

	e = policytest.Build(t, policytest.Spec{Load: scraped(5, 0)})[0]
	pending(e, 2, 1000)
	e.BeginPrefill(4000)
	e.EndPrefill(4000) // sent and started: counts in the mean prompt only
	assert.EqualValues(t, 2000+3*2000, policies.PrefillAhead(e, 500), "three more waiting than pending: other replicas' prompts at this replica's mean prompt")

	e = policytest.Build(t, policytest.Spec{Load: scraped(3, 0)})[0]
	assert.EqualValues(t, 3*700, policies.PrefillAhead(e, 700), "nothing sent yet: others' prompts at this prompt's size")

	e = policytest.Build(t, policytest.Spec{Load: scraped(9, 0), Stale: true})[0]
	pending(e, 1, 1000)
	assert.EqualValues(t, 1000, policies.PrefillAhead(e, 500), "a failed scrape shows no other replicas' work")

	// The shared store's count of every replica's pending prompts stands in
	// for the scrape while it is the newer of the two.
	e = policytest.Build(t, policytest.Spec{Load: scraped(5, 0)})[0] // scraped at time.Unix(1, 0)
	pending(e, 2, 1000)
	e.StoreOthersPending(time.Unix(2, 0), 2000+2500)
	assert.EqualValues(t, 2000+2500, policies.PrefillAhead(e, 500), "the store's report, newer than the scrape: others' 2,500 tokens")
	e.StoreOthersPending(time.Unix(0, 0), 2000+2500)
	assert.EqualValues(t, 2000+3*1000, policies.PrefillAhead(e, 500), "the scrape, newer than the store's report")
	e.StoreOthersPending(time.Unix(2, 0), 1500)
	assert.EqualValues(t, 2000, policies.PrefillAhead(e, 500), "the store counting fewer than this replica's own: others none")
	e.BeginPrefill(700)
	assert.EqualValues(t, 2700, policies.PrefillAhead(e, 500), "this replica's prompts since the report count as its own")

	e = policytest.Build(t, policytest.Spec{})[0]
	e.StoreOthersPending(time.Unix(2, 0), 1200)
	assert.EqualValues(t, 1200, policies.PrefillAhead(e, 500), "never scraped: the store's report")
}

func TestPrefixTable(t *testing.T) {
	eps := policytest.Idle(t, 2)
	tab := policies.NewPrefixTable(4) // 16 slots
	lookup := func(k uint64) *backends.Endpoint { e, _ := tab.Lookup(k); return e }
	assert.Nil(t, lookup(42), "never recorded")
	tab.Record(42, eps[0])
	e, spread := tab.Lookup(42)
	assert.Same(t, eps[0], e)
	assert.False(t, spread)
	tab.Record(42, eps[0])
	_, spread = tab.Lookup(42)
	assert.False(t, spread, "sent to the same endpoint again")
	tab.Record(42, eps[1])
	e, spread = tab.Lookup(42)
	assert.Same(t, eps[1], e, "the last endpoint wins")
	assert.True(t, spread, "sent to two endpoints")
	tab.Record(42, eps[1])
	_, spread = tab.Lookup(42)
	assert.True(t, spread, "spread stays set")
	tab.Record(0, eps[0])
	assert.Same(t, eps[0], lookup(0), "key 0 works too")

	// A full table forgets: 1,000 keys in 16 slots leave at most 16.
	for k := range uint64(1000) {
		tab.Record(k+100, eps[k%2])
	}
	kept := 0
	for k := range uint64(1000) {
		if e := lookup(k + 100); e != nil {
			kept++
			assert.Same(t, eps[k%2], e, "a remembered key keeps its own endpoint")
		}
	}
	assert.LessOrEqual(t, kept, 16)
	assert.Positive(t, kept)
}

// chain returns n chained test hashes: prompts built from the same prefix
// share their leading hashes.
func chain(prefix []uint64, n int, salt uint64) []uint64 {
	out := append([]uint64(nil), prefix...)
	h := uint64(1)
	if len(out) > 0 {
		h = out[len(out)-1]
	}
	for len(out) < n {
		h = policies.Mix(h ^ salt ^ uint64(len(out)))
		out = append(out, h)
	}
	return out
}

func TestLongestPrefix(t *testing.T) {
	eps := policytest.Idle(t, 3)
	tab := policies.NewPrefixTable(16)
	system := chain(nil, 20, 1) // a system prompt every request starts with

	// Two conversations start on different endpoints: the system prompt's
	// hashes are now spread, each conversation's own are not.
	a1 := chain(system, 27, 2)
	b1 := chain(system, 25, 3)
	e, d := tab.LongestPrefix(a1)
	assert.Nil(t, e, "nothing recorded yet")
	assert.Zero(t, d)
	tab.RecordPrefixes(a1, eps[0])
	tab.RecordPrefixes(b1, eps[1])

	// The next turn of conversation a extends a1 by a few chunks and finds
	// a1's deepest hash, whatever the depth.
	a2 := chain(a1, 35, 4)
	e, d = tab.LongestPrefix(a2)
	assert.Same(t, eps[0], e)
	assert.Equal(t, 27, d)
	b2 := chain(b1, 60, 5)
	e, d = tab.LongestPrefix(b2)
	assert.Same(t, eps[1], e)
	assert.Equal(t, 25, d)

	// A new conversation shares only the spread system prompt: no owner,
	// so the request is placed by load and nobody herds to the endpoint
	// the system prompt went to last.
	e, d = tab.LongestPrefix(chain(system, 30, 6))
	assert.Nil(t, e)
	assert.Zero(t, d)

	// A conversation that moved is found where its latest turn went.
	tab.RecordPrefixes(a2, eps[2])
	e, d = tab.LongestPrefix(chain(a2, 44, 7))
	assert.Same(t, eps[2], e)
	assert.Equal(t, 35, d)

	// Prompts deeper than every recorded depth still match at the prefix
	// depths the table keeps.
	long := chain(nil, 64, 8)
	tab.RecordPrefixes(long, eps[1])
	e, d = tab.LongestPrefix(chain(long[:50], 64, 9))
	assert.Same(t, eps[1], e)
	assert.Equal(t, 45, d, "the deepest recorded depth below where they part")
}
